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
//!
//! BERT's relatives train their own masked-LM head, the same computation under the family's names (found through
//! [`crate::weights::family_name`], and exported under them): RoBERTa, XLM-R, CamemBERT and MPNet `lm_head.{dense,
//! layer_norm, bias}` (the exact GELU whatever `hidden_act` says), DistilBERT `vocab_transform`, `vocab_layer_norm`,
//! `vocab_projector.bias`, ALBERT `predictions.{dense, LayerNorm, bias}` with `dense` mapping H → E, the LayerNorm
//! over E and the decoder the (V, E) embeddings, and an ELECTRA generator (`ElectraForMaskedLM`)
//! `generator_predictions.{dense, LayerNorm}` and `generator_lm_head.bias` as ALBERT's (H → E, the exact GELU; its
//! encoder's input goes through `embeddings_project` E → H when E ≠ H). They have no next-sentence head (RoBERTa
//! dropped the objective). An ELECTRA discriminator (`ElectraForPreTraining`) is refused: its replaced-token detection
//! needs a generator trained beside it, which is not built.
//! Checked by `tests/pretrain_families.rs` (golden: `tests/golden/pretrain_families.py`), MPNet's by the same test
//! (`tests/golden/pretrain_mpnet.py`). JinaBERT's `JinaBertForMaskedLM` has BERT's `cls.predictions` under BERT's
//! names (its ALiBi and gated feed-forward are the encoder's), checked by the same test against the float64
//! transcription of its authors' code (`tests/golden/pretrain_jina.py`).
//!
//! ALBERT's `AlbertForPreTraining` has sentence-order prediction in NSP's place, the same computation under its
//! names: `albert.pooler` (dense + tanh on the first token) then `sop_classifier.classifier` (H → 2), whose input
//! `AlbertSOPHead` drops at `classifier_dropout_prob` in a training forward (BERT's NSP head has no dropout); its
//! label says whether the two segments are in their document's order (0) or swapped (1)
//! ([`super::pretrain_data`]). `L = L_mlm + L_sop`. Checked by `tests/pretrain_families.rs` (its `albert_sop` case
//! of `tests/golden/pretrain_families.py`).

use super::encoder::{apply_dropout, get, DropoutPlan, Encoder, Norm, HEAD_STREAM};
use super::loss::{argmax, mean_cross_entropy, IGNORE};
use super::metrics::PretrainEval;
use crate::activation::Activation;
use crate::backend::Backend;
use crate::config::{BertConfig, Family};
use crate::tokenizer::Batch;
use crate::weights::{family_name, Weights};
use crate::{Error, Result};

/// The pre-training heads' parameters (indices into the encoder's parameter list).
#[derive(Clone, Copy, Debug)]
pub(super) struct PretrainHead {
    /// `cls.predictions.transform.dense` (weight, bias) and its LayerNorm (γ, β); ModernBERT's `head.dense` has a
    /// bias where `classifier_bias` says, `head.norm` a β where `norm_bias` says.
    transform: (usize, Option<usize>),
    ln: Norm,
    /// `cls.predictions.bias` (V); the decoder's weight is the word embeddings. ModernBERT's `decoder.bias` where
    /// `decoder_bias` says.
    bias: Option<usize>,
    word: usize,
    act: Activation,
    /// The pooler and `cls.seq_relationship`, when the checkpoint has the NSP head (ALBERT: `albert.pooler` and
    /// `sop_classifier.classifier`, sentence order).
    nsp: Option<([usize; 2], [usize; 2])>,
    /// ALBERT's sentence-order head drops its input (the pooled vector) at the classifier dropout.
    nsp_dropout: bool,
}

/// Whether `weights` hold ALBERT's sentence-order head (`sop_classifier`, `AlbertForPreTraining`).
pub fn has_sentence_order_head(weights: &Weights) -> bool {
    weights.root().names().iter().any(|n| n.starts_with("sop_classifier."))
}

impl PretrainHead {
    /// The checkpoint's heads: `cls.predictions` is required (a checkpoint without a masked-LM head cannot be
    /// pre-trained further here); `cls.seq_relationship` and the pooler are used when present.
    pub(super) fn load<B: Backend>(be: &B, enc: &mut Encoder<B::Tensor>, cfg: &BertConfig, weights: &Weights)
        -> Result<PretrainHead> {
        let (h, e, v, fam) = (cfg.hidden_size, cfg.embedding_size, cfg.vocab_size, cfg.family);
        if !cfg.tie_word_embeddings {
            return Err(Error::Config(
                "pre-training needs a model whose masked-LM decoder is tied to its word embeddings (tie_word_embeddings)".into(),
            ));
        }
        let root = weights.root();
        // The family's own head under BERT's names (RoBERTa's `lm_head`, DistilBERT's `vocab_*`, ALBERT's
        // `predictions`), its parameters named as the family names them.
        let p = weights.for_family(fam).root().pp("cls.predictions");
        let name = |s: &str| -> Result<Vec<String>> {
            family_name(fam, &format!("cls.predictions.{s}")).map(|n| vec![n]).ok_or_else(|| {
                Error::Config(format!("a `{}` checkpoint has no name for BERT's `cls.predictions.{s}`", fam.model_type()))
            })
        };
        if fam == Family::Electra && !p.contains("transform.dense.weight")
            && root.names().iter().any(|n| n.starts_with("discriminator_predictions."))
        {
            return Err(Error::Config(
                "pre-training an ELECTRA discriminator (ElectraForPreTraining) is not supported: its objective, \
                 replaced-token detection against a generator trained beside it, is not built; pre-training continues \
                 an ELECTRA generator (ElectraForMaskedLM) with its masked LM".into(),
            ));
        }
        if !p.contains("transform.dense.weight") {
            return Err(Error::Weights(format!(
                "this checkpoint has no masked-LM head (`{}`): pre-training continues a {}ForMaskedLM{} checkpoint",
                name("transform.dense.weight")?[0],
                fam.class_prefix(),
                if fam == Family::Bert { " or BertForPreTraining" } else { "" },
            )));
        }
        let t = p.pp("transform");
        // ALBERT's `predictions.dense` and ELECTRA's `generator_predictions.dense` map H → E, their LayerNorm is over E
        // and the tied decoder is (V, E).
        // ModernBERT's optional biases (`classifier_bias`, `norm_bias`, `decoder_bias`); the others have all three.
        let (dense_bias, norm_bias, decoder_bias) = match &cfg.modernbert {
            Some(m) => (m.classifier_bias, cfg.norm_bias, m.decoder_bias),
            None => (true, true, true),
        };
        let transform = (
            enc.push(be, name("transform.dense.weight")?, &get(&t, "dense.weight", &[e, h])?, e, h, true)?,
            match dense_bias {
                true => Some(enc.push(be, name("transform.dense.bias")?, &get(&t, "dense.bias", &[e])?, 1, e, false)?),
                false => None,
            },
        );
        let ln = Norm {
            g: enc.push(be, name("transform.LayerNorm.weight")?, &get(&t, "LayerNorm.weight", &[e])?, 1, e, false)?,
            b: match norm_bias {
                true => Some(enc.push(be, name("transform.LayerNorm.bias")?, &get(&t, "LayerNorm.bias", &[e])?, 1, e, false)?),
                false => None,
            },
        };
        let bias = match (decoder_bias, get(&p, "bias", &[v])) {
            (false, _) => None,
            (true, Ok(b)) => Some(enc.push(be, name("bias")?, &b, 1, v, false)?),
            (true, Err(_)) => Some(enc.push(be, name("bias")?, &get(&p, "decoder.bias", &[v])?, 1, v, false)?),
        };
        // Next-sentence prediction is BERT's; ALBERT's sentence order is the same head under its names.
        let (sr, pool, pool_name, sr_name) = match fam {
            Family::Albert => (root.pp("sop_classifier.classifier"), root.pp("albert.pooler"), "albert.pooler",
                "sop_classifier.classifier"),
            _ => (root.pp("cls.seq_relationship"), weights.for_family(cfg.family).pp("pooler.dense"), "bert.pooler.dense",
                "cls.seq_relationship"),
        };
        let nsp = if matches!(fam, Family::Bert | Family::Albert) && sr.contains("weight") {
            let pn = |s: &str| vec![format!("{pool_name}.{s}")];
            let sn = |s: &str| vec![format!("{sr_name}.{s}")];
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
        // ModernBERT's `head` has its own activation (`classifier_activation`).
        let act = cfg.modernbert.as_ref().map_or(cfg.family.mlm_activation(cfg.hidden_act), |m| m.classifier_activation);
        Ok(PretrainHead { transform, ln, bias, word: enc.word_embeddings(), act, nsp, nsp_dropout: fam == Family::Albert })
    }

    pub(super) fn has_nsp(&self) -> bool {
        self.nsp.is_some()
    }
}

/// The selected rows of a batch (labels ≠ −100) and their labels, checked against the vocabulary. None may be
/// selected (a few short rows at 15% often select nothing): the batch then adds no masked-LM loss ([`PretrainHead::pass`]).
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
    Ok((rows, labels))
}

impl PretrainHead {
    /// Refuses labels that do not fit a batch of `b` × `t` tokens or this head: masked-LM labels `mlm` (B*T), and
    /// next-sentence labels `nsp` (B) only with the NSP head.
    pub(super) fn check_targets(&self, b: usize, t: usize, mlm: &[i64], nsp: Option<&[u32]>) -> Result<()> {
        if mlm.len() != b * t {
            return Err(Error::Input(format!("{} masked-LM labels for a batch of {b} × {t} tokens", mlm.len())));
        }
        match (self.nsp.is_some(), nsp) {
            (true, Some(y)) if y.len() != b => {
                return Err(Error::Input(format!("{} next-sentence labels for a batch of {b}", y.len())))
            }
            (true, Some(y)) if y.iter().any(|&l| l > 1) => {
                return Err(Error::Input(
                    "next-sentence labels are 0 (B follows A) or 1 (B is random; ALBERT's sentence order: swapped)".into(),
                ))
            }
            (false, Some(_)) => {
                return Err(Error::Input(
                    "next-sentence labels given, but this checkpoint has no NSP head (cls.seq_relationship; ALBERT's \
                     sop_classifier)".into(),
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// The heads' forward on the encoder `enc`'s output for `batch` (its targets checked: [`Self::check_targets`]),
    /// the logits read back for the losses (the selected rows' (M, V), and (B, 2)), and with `backward: Some(dropout)`
    /// the backward through the heads and the encoder; everything else stays on the backend.
    pub(super) async fn pass<B: Backend>(&self, be: &B, enc: &Encoder<B::Tensor>, batch: &Batch, mlm: &[i64],
        nsp: Option<&[u32]>, backward: Option<Option<DropoutPlan>>)
        -> Result<(Option<Vec<Option<B::Tensor>>>, PretrainEval)> {
        let (b, t) = (batch.b, batch.t);
        let vocab = enc.params[self.word].rows;
        let (rows, labels) = selected(mlm, vocab)?;
        let plan = backward.flatten();
        let (last, saved) = enc.forward(be, batch, plan)?;
        let backward = backward.is_some();
        let mut grads: Vec<Option<B::Tensor>> = (0..enc.params.len()).map(|_| None).collect();

        let mut eval = PretrainEval::default();
        let mut dlast = None;
        // Masked LM on the selected rows. With none selected the masked LM adds nothing: no loss (0 in the step's mean
        // over its micro-batches, as a micro-batch's loss divided by their number would add) and no gradient.
        if !rows.is_empty() {
            let xs = be.gather_rows(&last, &rows)?; // (M, H)
            let a = enc.linear(be, &xs, self.transform.0, self.transform.1)?; // (M, H)
            let u = be.activation(&a, self.act)?;
            let hn = enc.norm(be, &u, self.ln)?;
            let z = be.linear(&hn, enc.t(self.word), self.bias.map(|b| enc.t(b)), Activation::None)?; // (M, V)
            let zh = be.read(&z).await?;
            eval.mlm_loss = mean_cross_entropy(&zh, vocab, labels.iter().map(|&l| Some(l)));
            eval.mlm_correct = zh.chunks_exact(vocab).zip(&labels).filter(|(r, &l)| argmax(r) == l as usize).count();
            eval.mlm_count = labels.len();
            if backward {
                let dz = be.softmax_xent_grad(&z, &labels)?; // (M, V), already / M
                let dh = enc.linear_backward(be, &dz, &hn, self.word, self.bias, &mut grads)?; // dE += dzᵀ·h
                let du = enc.norm_backward(be, &dh, &u, self.ln, &mut grads)?;
                let da = be.activation_grad(&du, &a, self.act)?;
                let dxs = enc.linear_backward(be, &da, &xs, self.transform.0, self.transform.1, &mut grads)?;
                dlast = Some(be.scatter_rows(&dxs, &rows, b * t)?);
            }
        }

        // Next-sentence prediction on the pooled [CLS].
        if let (Some((pool, sr)), Some(y)) = (self.nsp, nsp) {
            let cls_rows: Vec<u32> = (0..b).map(|i| (i * t) as u32).collect();
            let cls = be.gather_rows(&last, &cls_rows)?; // (B, H)
            let zp = be.linear(&cls, enc.t(pool[0]), Some(enc.t(pool[1])), Activation::None)?;
            let pooled = be.activation(&zp, Activation::Tanh)?;
            let drop = plan.and_then(|d| d.site(d.classifier, HEAD_STREAM)).filter(|_| self.nsp_dropout);
            let pooled = apply_dropout(be, pooled, drop)?; // ALBERT's `AlbertSOPHead.dropout`
            let n = be.linear(&pooled, enc.t(sr[0]), Some(enc.t(sr[1])), Activation::None)?; // (B, 2)
            let nh = be.read(&n).await?;
            eval.nsp_loss = Some(mean_cross_entropy(&nh, 2, y.iter().map(|&l| Some(l))));
            eval.nsp_correct = nh.chunks_exact(2).zip(y).filter(|(r, &l)| argmax(r) == l as usize).count();
            eval.nsp_count = y.len();
            if backward {
                let dn = be.softmax_xent_grad(&n, y)?; // (B, 2)
                let dpooled = apply_dropout(be, enc.linear_backward(be, &dn, &pooled, sr[0], sr[1], &mut grads)?, drop)?;
                let dzp = be.activation_grad(&dpooled, &zp, Activation::Tanh)?;
                let dcls = enc.linear_backward(be, &dzp, &cls, pool[0], pool[1], &mut grads)?;
                let d = be.scatter_rows(&dcls, &cls_rows, b * t)?;
                dlast = Some(match dlast {
                    Some(m) => be.add(&m, &d)?,
                    None => d,
                });
            }
        }
        if !backward {
            return Ok((None, eval));
        }
        // Nothing selected and no NSP labels: no loss, so no gradient (every entry `None`).
        if let Some(dlast) = dlast {
            enc.backward(be, batch, saved, dlast, &mut grads, None)?;
        }
        Ok((Some(grads), eval))
    }
}
