//! Fine-tuning the whole encoder: `BertForSequenceClassification` (single texts or pairs) with every parameter in
//! f32 on the backend, its forward keeping what the backward needs, the backward through every op, and AdamW as
//! transformers' Trainer sets it up (no weight decay on biases and LayerNorm weights, gradients clipped by their
//! global norm).
//!
//! # The math
//!
//! Forward, per layer (post-LN, as `BertLayer`), with the tensors kept for the backward marked *:
//! ```text
//! e* = word[ids] + pos[t] + type[tt]            x* = LN(e)
//! qkv* = x·Wqkvᵀ + bqkv                         ctx* = attention(qkv, mask)
//! a = ctx·Woᵀ + bo        p1* = a + x           h1* = LN(p1)
//! u* = h1·W1ᵀ + b1        g* = GELU(u)          o = g·W2ᵀ + b2
//! p2* = o + h1            x' = LN(p2)           (x' is the next layer's x*)
//! cls* = x'[b·T]          z* = cls·Wpᵀ + bp     pooled* = tanh(z)      logits = pooled·Wcᵀ + bc
//! ```
//! Backward, for a linear `y = x·Wᵀ + b`: `dW = dyᵀ·x`, `db = Σ_rows dy`, `dx = dy·W`; through `LN`:
//! `Backend::layernorm_backward` from the LN's input; a residual sum passes its gradient to both addends; the
//! attention: `Backend::attention_backward`; the embeddings: `Backend::embeddings_backward` (scatter-add into the
//! three tables). Loss: mean softmax cross-entropy (`Backend::softmax_xent_grad`).
//!
//! Checked against PyTorch autograd (float64) by `tests/finetune_golden.rs` on the goldens of
//! `tests/golden/finetune.py`.

use crate::backend::{Activation, AdamWStep, AttentionShape, Backend, EmbeddingTables};
use crate::config::{BertConfig, Family};
use crate::tokenizer::Batch;
use crate::weights::{HostTensor, Weights};
use crate::{Error, Result};

/// One trainable tensor: `(rows, cols)` on the backend (a vector is `(1, n)`), under the Hugging Face names it
/// stands for. The fused query/key/value projection stands for three: rows `[query; key; value]`.
pub struct Param<T> {
    pub names: Vec<String>,
    pub tensor: T,
    pub rows: usize,
    pub cols: usize,
    /// Whether AdamW's weight decay applies: not to biases and LayerNorm weights (transformers' Trainer).
    pub decay: bool,
}

/// Indices into the parameter list.
#[derive(Clone, Copy)]
struct LayerIdx {
    qkv_w: usize,
    qkv_b: usize,
    o_w: usize,
    o_b: usize,
    ln1_g: usize,
    ln1_b: usize,
    i_w: usize,
    i_b: usize,
    out_w: usize,
    out_b: usize,
    ln2_g: usize,
    ln2_b: usize,
}

/// What the forward keeps for the backward.
struct Saved<T> {
    mask: T,
    emb_sum: T,
    layers: Vec<LayerSaved<T>>,
    last: T,
    cls: T,
    pool_pre: T,
    pooled: T,
}

struct LayerSaved<T> {
    x: T,
    qkv: T,
    ctx: T,
    pre1: T,
    h1: T,
    u: T,
    g: T,
    pre2: T,
}

/// The optimiser's settings for one step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepOptions {
    pub learning_rate: f32,
    pub weight_decay: f32,
    /// Clip the gradients' global L2 norm to this (`torch.nn.utils.clip_grad_norm_`); `None`: no clipping.
    pub max_grad_norm: Option<f32>,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
}

impl Default for StepOptions {
    /// transformers' `TrainingArguments` defaults (learning rate 5e-5, no weight decay, clipping at 1.0, AdamW
    /// betas (0.9, 0.999), eps 1e-8).
    fn default() -> Self {
        StepOptions { learning_rate: 5e-5, weight_decay: 0.0, max_grad_norm: Some(1.0), beta1: 0.9, beta2: 0.999, eps: 1e-8 }
    }
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// The batch's mean cross-entropy before the update.
    pub loss: f32,
    /// The gradients' global L2 norm before clipping.
    pub grad_norm: f32,
}

/// `BertForSequenceClassification` being fine-tuned on backend `B`.
pub struct SequenceClassifierTrainer<B: Backend> {
    pub config: BertConfig,
    pub params: Vec<Param<B::Tensor>>,
    emb: [usize; 5], // word, position, token type, LN γ, LN β
    layers: Vec<LayerIdx>,
    pool: [usize; 2],
    classifier: [usize; 2],
    labels: usize,
    /// AdamW's moments, one pair per parameter, and the number of steps taken.
    moments: Vec<(B::Tensor, B::Tensor)>,
    steps: u32,
}

impl<B: Backend> SequenceClassifierTrainer<B> {
    /// Every parameter of the checkpoint's encoder, pooler and classifier, in f32 on `be` (quantized weights are
    /// dequantized: training updates them in f32).
    pub fn new(be: &B, cfg: &BertConfig, weights: &Weights) -> Result<Self> {
        cfg.validate()?;
        if cfg.family != Family::Bert {
            return Err(Error::Config(format!(
                "fine-tuning the whole encoder supports BERT checkpoints (model_type \"bert\"); this one is `{}`",
                cfg.family.model_type()
            )));
        }
        if cfg.embedding_size != cfg.hidden_size {
            return Err(Error::Config("fine-tuning needs embedding_size == hidden_size".into()));
        }
        let labels = cfg.id2label.len();
        if labels < 2 {
            return Err(Error::Config(format!(
                "a sequence classifier needs at least 2 labels in config.json's id2label, found {labels}"
            )));
        }
        let (h, inter, types) = (cfg.hidden_size, cfg.intermediate_size, cfg.type_vocab_size);
        let w = weights.for_family(cfg.family);
        let mut params: Vec<Param<B::Tensor>> = Vec::new();
        let mut add = |be: &B, names: Vec<String>, t: HostTensor, rows: usize, cols: usize, decay: bool| -> Result<usize> {
            let tensor = be.input(&t.to_f32()?, rows, cols)?;
            params.push(Param { names, tensor, rows, cols, decay });
            Ok(params.len() - 1)
        };
        let get = |w: &Weights, name: &str, shape: &[usize]| -> Result<HostTensor> { Ok(w.get(name, shape)?.clone()) };
        let e = w.pp("embeddings");
        let en = |n: &str| vec![format!("bert.embeddings.{n}")];
        let emb = [
            add(be, en("word_embeddings.weight"), get(&e, "word_embeddings.weight", &[cfg.vocab_size, h])?, cfg.vocab_size, h, true)?,
            add(be, en("position_embeddings.weight"), get(&e, "position_embeddings.weight", &[cfg.max_position_embeddings, h])?, cfg.max_position_embeddings, h, true)?,
            add(be, en("token_type_embeddings.weight"), get(&e, "token_type_embeddings.weight", &[types, h])?, types, h, true)?,
            add(be, en("LayerNorm.weight"), get(&e, "LayerNorm.weight", &[h])?, 1, h, false)?,
            add(be, en("LayerNorm.bias"), get(&e, "LayerNorm.bias", &[h])?, 1, h, false)?,
        ];
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let lw = w.pp(&format!("encoder.layer.{l}"));
            let n = |s: &str| format!("bert.encoder.layer.{l}.{s}");
            let qkv = |kind: &str| -> Result<(HostTensor, HostTensor)> {
                let p = lw.pp(&format!("attention.self.{kind}"));
                Ok((get(&p, "weight", &[h, h])?, get(&p, "bias", &[h])?))
            };
            let ((qw, qb), (kw, kb), (vw, vb)) = (qkv("query")?, qkv("key")?, qkv("value")?);
            let qkv_names = |s: &str| ["query", "key", "value"].map(|k| n(&format!("attention.self.{k}.{s}"))).to_vec();
            let ln = |p: &str| -> Result<(HostTensor, HostTensor)> {
                let p = lw.pp(p);
                Ok((get(&p, "weight", &[h])?, get(&p, "bias", &[h])?))
            };
            let (ln1_g, ln1_b) = ln("attention.output.LayerNorm")?;
            let (ln2_g, ln2_b) = ln("output.LayerNorm")?;
            let lin = |p: &str, out: usize, inp: usize| -> Result<(HostTensor, HostTensor)> {
                let p = lw.pp(p);
                Ok((get(&p, "weight", &[out, inp])?, get(&p, "bias", &[out])?))
            };
            let (o_w, o_b) = lin("attention.output.dense", h, h)?;
            let (i_w, i_b) = lin("intermediate.dense", inter, h)?;
            let (out_w, out_b) = lin("output.dense", h, inter)?;
            layers.push(LayerIdx {
                qkv_w: add(be, qkv_names("weight"), HostTensor::concat_rows(&[&qw, &kw, &vw])?, 3 * h, h, true)?,
                qkv_b: add(be, qkv_names("bias"), HostTensor::concat_rows(&[&qb, &kb, &vb])?, 1, 3 * h, false)?,
                o_w: add(be, vec![n("attention.output.dense.weight")], o_w, h, h, true)?,
                o_b: add(be, vec![n("attention.output.dense.bias")], o_b, 1, h, false)?,
                ln1_g: add(be, vec![n("attention.output.LayerNorm.weight")], ln1_g, 1, h, false)?,
                ln1_b: add(be, vec![n("attention.output.LayerNorm.bias")], ln1_b, 1, h, false)?,
                i_w: add(be, vec![n("intermediate.dense.weight")], i_w, inter, h, true)?,
                i_b: add(be, vec![n("intermediate.dense.bias")], i_b, 1, inter, false)?,
                out_w: add(be, vec![n("output.dense.weight")], out_w, h, inter, true)?,
                out_b: add(be, vec![n("output.dense.bias")], out_b, 1, h, false)?,
                ln2_g: add(be, vec![n("output.LayerNorm.weight")], ln2_g, 1, h, false)?,
                ln2_b: add(be, vec![n("output.LayerNorm.bias")], ln2_b, 1, h, false)?,
            });
        }
        let p = w.pp("pooler.dense");
        let pool = [
            add(be, vec!["bert.pooler.dense.weight".into()], get(&p, "weight", &[h, h])?, h, h, true)?,
            add(be, vec!["bert.pooler.dense.bias".into()], get(&p, "bias", &[h])?, 1, h, false)?,
        ];
        let c = weights.root().pp("classifier");
        let classifier = [
            add(be, vec!["classifier.weight".into()], get(&c, "weight", &[labels, h])?, labels, h, true)?,
            add(be, vec!["classifier.bias".into()], get(&c, "bias", &[labels])?, 1, labels, false)?,
        ];
        let moments = params
            .iter()
            .map(|p| Ok((be.input(&vec![0.0; p.rows * p.cols], p.rows, p.cols)?, be.input(&vec![0.0; p.rows * p.cols], p.rows, p.cols)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(SequenceClassifierTrainer { config: cfg.clone(), params, emb, layers, pool, classifier, labels, moments, steps: 0 })
    }

    /// The number of classes.
    pub fn labels(&self) -> usize {
        self.labels
    }

    fn t(&self, i: usize) -> &B::Tensor {
        &self.params[i].tensor
    }

    fn shape(&self, batch: &Batch) -> AttentionShape {
        let heads = self.config.num_attention_heads;
        AttentionShape { batch: batch.b, seq: batch.t, heads, head_dim: self.config.hidden_size / heads }
    }

    /// Logits `(B, C)` of a batch, and what the backward needs.
    fn forward(&self, be: &B, batch: &Batch) -> Result<(B::Tensor, Saved<B::Tensor>)> {
        let eps = self.config.layer_norm_eps;
        let [word, pos, typ, g0, b0] = self.emb;
        let tables = EmbeddingTables {
            word: self.t(word),
            position: self.t(pos),
            token_type: self.t(typ),
            ln_gamma: self.t(g0),
            ln_beta: self.t(b0),
            eps,
        };
        let mask = be.mask(batch)?;
        let emb_sum = be.embeddings_sum(batch, &tables)?; // (B*T, H)
        let mut x = be.layernorm(&emb_sum, None, self.t(g0), self.t(b0), eps)?;
        let shape = self.shape(batch);
        let mut layers = Vec::with_capacity(self.layers.len());
        for li in &self.layers {
            let qkv = be.linear(&x, self.t(li.qkv_w), Some(self.t(li.qkv_b)), Activation::None)?; // (B*T, 3H)
            let ctx = be.attention(&qkv, &mask, shape)?; // (B*T, H)
            let a = be.linear(&ctx, self.t(li.o_w), Some(self.t(li.o_b)), Activation::None)?;
            let pre1 = be.add(&a, &x)?;
            let h1 = be.layernorm(&pre1, None, self.t(li.ln1_g), self.t(li.ln1_b), eps)?;
            let u = be.linear(&h1, self.t(li.i_w), Some(self.t(li.i_b)), Activation::None)?; // (B*T, I)
            let g = be.activation(&u, self.config.hidden_act)?;
            let o = be.linear(&g, self.t(li.out_w), Some(self.t(li.out_b)), Activation::None)?; // (B*T, H)
            let pre2 = be.add(&o, &h1)?;
            let next = be.layernorm(&pre2, None, self.t(li.ln2_g), self.t(li.ln2_b), eps)?;
            layers.push(LayerSaved { x, qkv, ctx, pre1, h1, u, g, pre2 });
            x = next;
        }
        let rows: Vec<u32> = (0..batch.b).map(|b| (b * batch.t) as u32).collect();
        let cls = be.gather_rows(&x, &rows)?; // (B, H)
        let pool_pre = be.linear(&cls, self.t(self.pool[0]), Some(self.t(self.pool[1])), Activation::None)?;
        let pooled = be.activation(&pool_pre, Activation::Tanh)?;
        let logits = be.linear(&pooled, self.t(self.classifier[0]), Some(self.t(self.classifier[1])), Activation::None)?;
        Ok((logits, Saved { mask, emb_sum, layers, last: x, cls, pool_pre, pooled }))
    }

    /// Gradients of `dy = ∂L/∂y` through `y = x·Wᵀ + b` into `grads[w]`, `grads[b]`; returns `dx`.
    fn linear_backward(&self, be: &B, dy: &B::Tensor, x: &B::Tensor, w: usize, b: usize,
        grads: &mut [Option<B::Tensor>]) -> Result<B::Tensor> {
        grads[w] = Some(be.matmul(dy, true, x, false)?); // (N, K)
        grads[b] = Some(be.sum_rows(dy)?); // (1, N)
        be.matmul(dy, false, self.t(w), false) // (M, K)
    }

    /// Every parameter's gradient of the batch's mean cross-entropy, in parameter order, and the logits.
    pub fn gradients(&self, be: &B, batch: &Batch, labels: &[u32]) -> Result<(Vec<B::Tensor>, B::Tensor)> {
        if labels.len() != batch.b {
            return Err(Error::Input(format!("{} labels for a batch of {} texts", labels.len(), batch.b)));
        }
        let eps = self.config.layer_norm_eps;
        let (logits, s) = self.forward(be, batch)?;
        let mut grads: Vec<Option<B::Tensor>> = (0..self.params.len()).map(|_| None).collect();
        let dz = be.softmax_xent_grad(&logits, labels)?; // (B, C)
        let dpooled = self.linear_backward(be, &dz, &s.pooled, self.classifier[0], self.classifier[1], &mut grads)?;
        let dpool_pre = be.activation_grad(&dpooled, &s.pool_pre, Activation::Tanh)?;
        let dcls = self.linear_backward(be, &dpool_pre, &s.cls, self.pool[0], self.pool[1], &mut grads)?;
        let rows: Vec<u32> = (0..batch.b).map(|b| (b * batch.t) as u32).collect();
        let mut dx = be.scatter_rows(&dcls, &rows, batch.b * batch.t)?; // (B*T, H)
        drop(s.last);
        let shape = self.shape(batch);
        for (li, ls) in self.layers.iter().zip(&s.layers).rev() {
            let (dpre2, dg2, db2) = be.layernorm_backward(&dx, &ls.pre2, self.t(li.ln2_g), eps)?;
            grads[li.ln2_g] = Some(dg2);
            grads[li.ln2_b] = Some(db2);
            let dg = self.linear_backward(be, &dpre2, &ls.g, li.out_w, li.out_b, &mut grads)?;
            let du = be.activation_grad(&dg, &ls.u, self.config.hidden_act)?;
            let dh1 = self.linear_backward(be, &du, &ls.h1, li.i_w, li.i_b, &mut grads)?;
            let dh1 = be.add(&dh1, &dpre2)?; // h1 feeds the FFN and the second residual
            let (dpre1, dg1, db1) = be.layernorm_backward(&dh1, &ls.pre1, self.t(li.ln1_g), eps)?;
            grads[li.ln1_g] = Some(dg1);
            grads[li.ln1_b] = Some(db1);
            let dctx = self.linear_backward(be, &dpre1, &ls.ctx, li.o_w, li.o_b, &mut grads)?;
            let dqkv = be.attention_backward(&dctx, &ls.qkv, &s.mask, shape)?;
            let dxq = self.linear_backward(be, &dqkv, &ls.x, li.qkv_w, li.qkv_b, &mut grads)?;
            dx = be.add(&dxq, &dpre1)?; // x feeds the projections and the first residual
        }
        let [word, pos, typ, g0, b0] = self.emb;
        let (demb, dg0, db0) = be.layernorm_backward(&dx, &s.emb_sum, self.t(g0), eps)?;
        grads[g0] = Some(dg0);
        grads[b0] = Some(db0);
        let (dw, dp, dt) = be.embeddings_backward(&demb, batch, self.params[word].rows, self.params[pos].rows,
            self.params[typ].rows)?;
        grads[word] = Some(dw);
        grads[pos] = Some(dp);
        grads[typ] = Some(dt);
        let grads = grads
            .into_iter()
            .enumerate()
            .map(|(i, g)| g.ok_or_else(|| Error::Input(format!("no gradient for {}", self.params[i].names[0]))))
            .collect::<Result<Vec<_>>>()?;
        Ok((grads, logits))
    }

    /// One optimiser step on a batch: forward, backward, clipping, AdamW. Reads back the logits (for the loss) and
    /// the gradients' squared norm; everything else stays on the backend.
    pub async fn step(&mut self, be: &B, batch: &Batch, labels: &[u32], opt: &StepOptions) -> Result<StepReport> {
        let (grads, logits) = self.gradients(be, batch, labels)?;
        let loss = mean_cross_entropy(&be.read(&logits).await?, self.labels, labels);
        let mut total = be.sum_squares(&grads[0])?;
        for g in &grads[1..] {
            total = be.add(&total, &be.sum_squares(g)?)?;
        }
        let grad_norm = (be.read(&total).await?[0] as f64).sqrt() as f32;
        if !loss.is_finite() || !grad_norm.is_finite() {
            return Err(Error::Input(format!(
                "the loss ({loss}) or the gradient norm ({grad_norm}) is not finite; the model was left as it was \
                 before this step: lower the learning rate"
            )));
        }
        // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6), clamped to 1.
        let grad_scale = match opt.max_grad_norm {
            Some(max) => ((max as f64 / (grad_norm as f64 + 1e-6)).min(1.0)) as f32,
            None => 1.0,
        };
        self.steps += 1;
        for (i, g) in grads.iter().enumerate() {
            let wd = if self.params[i].decay { opt.weight_decay } else { 0.0 };
            let mut s = AdamWStep::new(opt.learning_rate, wd, opt.beta1, opt.beta2, opt.eps, self.steps);
            s.grad_scale = grad_scale;
            let (m, v) = &self.moments[i];
            let (p, m, v) = be.adamw(&self.params[i].tensor, g, m, v, &s)?;
            self.params[i].tensor = p;
            self.moments[i] = (m, v);
        }
        Ok(StepReport { loss, grad_norm })
    }

    /// The parameters (or, with `tensors`, other tensors of the parameters' shapes, e.g. gradients) on the host under
    /// their Hugging Face names, the fused projection split into query, key and value.
    pub async fn named(&self, be: &B, tensors: Option<&[B::Tensor]>) -> Result<Vec<(String, Vec<f32>)>> {
        let mut out = Vec::new();
        for (i, p) in self.params.iter().enumerate() {
            let t = match tensors {
                Some(ts) => &ts[i],
                None => &p.tensor,
            };
            let v = be.read(t).await?;
            let each = v.len() / p.names.len();
            for (k, name) in p.names.iter().enumerate() {
                out.push((name.clone(), v[k * each..(k + 1) * each].to_vec()));
            }
        }
        Ok(out)
    }
}

/// Mean softmax cross-entropy of logits `(B, C)` against labels, in f64.
pub fn mean_cross_entropy(logits: &[f32], classes: usize, labels: &[u32]) -> f32 {
    let mut total = 0f64;
    for (row, &y) in logits.chunks_exact(classes).zip(labels) {
        let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let lse = row.iter().map(|&z| (z as f64 - mx).exp()).sum::<f64>().ln() + mx;
        total += lse - row[y as usize] as f64;
    }
    (total / labels.len().max(1) as f64) as f32
}
