//! Pre-training's heads on the whole encoder, as `BertForPreTraining` has them: masked-LM prediction
//! (`cls.predictions`: transform, then the decoder tied to the word embeddings plus a bias) and next-sentence
//! prediction (`cls.seq_relationship` on the pooler); the loss is their sum (MLM alone for a checkpoint without the
//! NSP head, as `BertForMaskedLM`). Only the selected rows (labels ≠ −100) go through the vocabulary projection.
//!
//! After the encoder's last hidden state `x (B*T, H)`, with S the selected rows and y their labels:
//! ```text
//! xs = x[S]                  a = xs·Wtᵀ + bt        u = act(a)        h = LN(u; γ, β)
//! z = h·Eᵀ + bias  (M, V)    L_mlm = mean_S CE(z, y)                   (E: the word embeddings, tied)
//! cls = x[b·T]    p = tanh(cls·Wpᵀ + bp)    n = p·Wnᵀ + bn  (B, 2)    L_nsp = mean_b CE(n, next_b)
//! L = L_mlm + L_nsp
//! ```
//! Backward: dz = (softmax(z) − Y)/M; dE += dzᵀ·h (added to the embeddings' own scatter-add), dbias = Σ_rows dz,
//! dh = dz·E, then back through the LayerNorm, the activation and the transform's linear to dxs, scattered into
//! dx's rows S; NSP as the sequence classifier (dn → Wn, bn → tanh → Wp, bp → dcls into the rows b·T).
//! Checked against PyTorch's autograd by `tests/pretrain_golden.rs` (golden: `tests/golden/pretrain.py`).

use super::encoder::{get, put, DropoutPlan, Encoder};
use super::finetune::FineTuner;
use super::loss::{argmax, mean_cross_entropy, IGNORE};
use super::metrics::PretrainEval;
use crate::activation::Activation;
use crate::backend::Backend;
use crate::config::BertConfig;
use crate::tokenizer::Batch;
use crate::weights::Weights;
use crate::{Error, Result};

/// The pre-training heads' parameters (indices into the encoder's parameter list).
#[derive(Clone, Copy, Debug)]
pub(super) struct PretrainHead {
    /// `cls.predictions.transform.dense` (weight, bias) and its LayerNorm (γ, β).
    transform: [usize; 2],
    ln: [usize; 2],
    /// `cls.predictions.bias` (V); the decoder's weight is the word embeddings.
    bias: usize,
    word: usize,
    act: Activation,
    /// The pooler and `cls.seq_relationship`, when the checkpoint has the NSP head.
    nsp: Option<([usize; 2], [usize; 2])>,
}

impl PretrainHead {
    /// The checkpoint's heads: `cls.predictions` is required (a checkpoint without a masked-LM head cannot be
    /// pre-trained further here); `cls.seq_relationship` and the pooler are used when present.
    pub(super) fn load<B: Backend>(be: &B, enc: &mut Encoder<B::Tensor>, cfg: &BertConfig, weights: &Weights)
        -> Result<PretrainHead> {
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        if cfg.embedding_size != h || !cfg.tie_word_embeddings {
            return Err(Error::Config(
                "pre-training needs a BERT whose masked-LM decoder is tied to its word embeddings (tie_word_embeddings)".into(),
            ));
        }
        let root = weights.root();
        let p = root.pp("cls.predictions");
        if !p.contains("transform.dense.weight") {
            return Err(Error::Weights(
                "this checkpoint has no masked-LM head (`cls.predictions.transform.dense.weight`): pre-training \
                 continues a BertForPreTraining or BertForMaskedLM checkpoint"
                    .into(),
            ));
        }
        let n = |s: &str| vec![format!("cls.predictions.{s}")];
        let t = p.pp("transform");
        let transform = [
            enc.push(be, n("transform.dense.weight"), &get(&t, "dense.weight", &[h, h])?, h, h, true)?,
            enc.push(be, n("transform.dense.bias"), &get(&t, "dense.bias", &[h])?, 1, h, false)?,
        ];
        let ln = [
            enc.push(be, n("transform.LayerNorm.weight"), &get(&t, "LayerNorm.weight", &[h])?, 1, h, false)?,
            enc.push(be, n("transform.LayerNorm.bias"), &get(&t, "LayerNorm.bias", &[h])?, 1, h, false)?,
        ];
        let bias = match get(&p, "bias", &[v]) {
            Ok(b) => b,
            Err(_) => get(&p, "decoder.bias", &[v])?,
        };
        let bias = enc.push(be, n("bias"), &bias, 1, v, false)?;
        let sr = root.pp("cls.seq_relationship");
        let nsp = if sr.contains("weight") {
            let pool = weights.for_family(cfg.family).pp("pooler.dense");
            let pn = |s: &str| vec![format!("bert.pooler.dense.{s}")];
            let sn = |s: &str| vec![format!("cls.seq_relationship.{s}")];
            Some((
                [
                    enc.push(be, pn("weight"), &get(&pool, "weight", &[h, h])?, h, h, true)?,
                    enc.push(be, pn("bias"), &get(&pool, "bias", &[h])?, 1, h, false)?,
                ],
                [
                    enc.push(be, sn("weight"), &get(&sr, "weight", &[2, h])?, 2, h, true)?,
                    enc.push(be, sn("bias"), &get(&sr, "bias", &[2])?, 1, 2, false)?,
                ],
            ))
        } else {
            None
        };
        Ok(PretrainHead { transform, ln, bias, word: enc.word_embeddings(), act: cfg.family.mlm_activation(cfg.hidden_act), nsp })
    }

    pub(super) fn has_nsp(&self) -> bool {
        self.nsp.is_some()
    }
}

/// The selected rows of a batch (labels ≠ −100) and their labels, checked against the vocabulary.
fn selected(mlm: &[i64], vocab: usize) -> Result<(Vec<u32>, Vec<u32>)> {
    let mut rows = Vec::new();
    let mut labels = Vec::new();
    for (r, &l) in mlm.iter().enumerate() {
        if l == IGNORE {
            continue;
        }
        if !(0..vocab as i64).contains(&l) {
            return Err(Error::Input(format!("masked-LM label {l} is outside the vocabulary of {vocab}")));
        }
        rows.push(r as u32);
        labels.push(l as u32);
    }
    if rows.is_empty() {
        return Err(Error::Input("no token of the batch is selected for the masked-LM loss (all labels are -100)".into()));
    }
    Ok((rows, labels))
}

impl<B: Backend> FineTuner<B> {
    /// Pre-training's gradients of a batch (masked-LM labels `mlm` (B*T), −100 where no loss is taken, and with the
    /// NSP head the next-sentence labels `nsp` (B): 0 = B follows A, 1 = random; without them the masked LM alone
    /// trains and the NSP head gets no gradient), and what the forward gave. The
    /// logits are read back for the losses (the selected rows' (M, V), and (B, 2)); everything else stays on the
    /// backend.
    pub async fn pretrain_gradients(&self, be: &B, batch: &Batch, mlm: &[i64], nsp: Option<&[u32]>)
        -> Result<(Vec<Option<B::Tensor>>, PretrainEval)> {
        self.pretrain_gradients_with(be, batch, mlm, nsp, None).await
    }

    /// [`Self::pretrain_gradients`] of a training forward with `dropout` (`None`: none).
    pub async fn pretrain_gradients_with(&self, be: &B, batch: &Batch, mlm: &[i64], nsp: Option<&[u32]>,
        dropout: Option<DropoutPlan>) -> Result<(Vec<Option<B::Tensor>>, PretrainEval)> {
        let (grads, eval) = self.pretrain_pass(be, batch, mlm, nsp, Some(dropout)).await?;
        Ok((grads.expect("a backward pass was asked for"), eval))
    }

    /// The losses and accuracies of a batch, without gradients or dropout (evaluation).
    pub async fn pretrain_eval(&self, be: &B, batch: &Batch, mlm: &[i64], nsp: Option<&[u32]>) -> Result<PretrainEval> {
        self.pretrain_pass(be, batch, mlm, nsp, None).await.map(|(_, e)| e)
    }

    /// The forward, and with `backward: Some(dropout)` the backward.
    async fn pretrain_pass(&self, be: &B, batch: &Batch, mlm: &[i64], nsp: Option<&[u32]>,
        backward: Option<Option<DropoutPlan>>) -> Result<(Option<Vec<Option<B::Tensor>>>, PretrainEval)> {
        let head = self.pretrain_head()?;
        let (b, t) = (batch.b, batch.t);
        if mlm.len() != b * t {
            return Err(Error::Input(format!("{} masked-LM labels for a batch of {b} × {t} tokens", mlm.len())));
        }
        match (head.nsp.is_some(), nsp) {
            (true, Some(y)) if y.len() != b => {
                return Err(Error::Input(format!("{} next-sentence labels for a batch of {b}", y.len())))
            }
            (true, Some(y)) if y.iter().any(|&l| l > 1) => {
                return Err(Error::Input("next-sentence labels are 0 (B follows A) or 1 (B is random)".into()))
            }
            (false, Some(_)) => {
                return Err(Error::Input(
                    "next-sentence labels given, but this checkpoint has no NSP head (cls.seq_relationship)".into(),
                ))
            }
            _ => {}
        }
        self.check_memory(b, t)?;
        let enc = &self.encoder;
        let vocab = enc.params[head.word].rows;
        let (rows, labels) = selected(mlm, vocab)?;
        let (last, saved) = enc.forward(be, batch, backward.flatten())?;
        let backward = backward.is_some();
        let mut grads: Vec<Option<B::Tensor>> = (0..enc.params.len()).map(|_| None).collect();
        let eps = enc.config.layer_norm_eps;

        // Masked LM on the selected rows.
        let xs = be.gather_rows(&last, &rows)?; // (M, H)
        let a = enc.linear(be, &xs, head.transform[0], head.transform[1])?; // (M, H)
        let u = be.activation(&a, head.act)?;
        let hn = be.layernorm(&u, None, enc.t(head.ln[0]), enc.t(head.ln[1]), eps)?;
        let z = be.linear(&hn, enc.t(head.word), Some(enc.t(head.bias)), Activation::None)?; // (M, V)
        let zh = be.read(&z).await?;
        let mut eval = PretrainEval {
            mlm_loss: mean_cross_entropy(&zh, vocab, labels.iter().map(|&l| Some(l))),
            mlm_correct: zh.chunks_exact(vocab).zip(&labels).filter(|(r, &l)| argmax(r) == l as usize).count(),
            mlm_count: labels.len(),
            ..PretrainEval::default()
        };
        let mut dlast = None;
        if backward {
            let dz = be.softmax_xent_grad(&z, &labels)?; // (M, V), already / M
            let dh = enc.linear_backward(be, &dz, &hn, head.word, head.bias, &mut grads)?; // dE += dzᵀ·h
            let (du, dg, dbeta) = be.layernorm_backward(&dh, &u, enc.t(head.ln[0]), eps)?;
            put(be, &mut grads, head.ln[0], dg)?;
            put(be, &mut grads, head.ln[1], dbeta)?;
            let da = be.activation_grad(&du, &a, head.act)?;
            let dxs = enc.linear_backward(be, &da, &xs, head.transform[0], head.transform[1], &mut grads)?;
            dlast = Some(be.scatter_rows(&dxs, &rows, b * t)?);
        }

        // Next-sentence prediction on the pooled [CLS].
        if let (Some((pool, sr)), Some(y)) = (head.nsp, nsp) {
            let cls_rows: Vec<u32> = (0..b).map(|i| (i * t) as u32).collect();
            let cls = be.gather_rows(&last, &cls_rows)?; // (B, H)
            let zp = be.linear(&cls, enc.t(pool[0]), Some(enc.t(pool[1])), Activation::None)?;
            let pooled = be.activation(&zp, Activation::Tanh)?;
            let n = be.linear(&pooled, enc.t(sr[0]), Some(enc.t(sr[1])), Activation::None)?; // (B, 2)
            let nh = be.read(&n).await?;
            eval.nsp_loss = Some(mean_cross_entropy(&nh, 2, y.iter().map(|&l| Some(l))));
            eval.nsp_correct = nh.chunks_exact(2).zip(y).filter(|(r, &l)| argmax(r) == l as usize).count();
            eval.nsp_count = y.len();
            if backward {
                let dn = be.softmax_xent_grad(&n, y)?; // (B, 2)
                let dpooled = enc.linear_backward(be, &dn, &pooled, sr[0], sr[1], &mut grads)?;
                let dzp = be.activation_grad(&dpooled, &zp, Activation::Tanh)?;
                let dcls = enc.linear_backward(be, &dzp, &cls, pool[0], pool[1], &mut grads)?;
                let d = be.scatter_rows(&dcls, &cls_rows, b * t)?;
                dlast = Some(be.add(dlast.as_ref().expect("the MLM part ran"), &d)?);
            }
        }
        if !backward {
            return Ok((None, eval));
        }
        enc.backward(be, batch, saved, dlast.expect("the MLM part ran"), &mut grads, None)?;
        Ok((Some(grads), eval))
    }
}
