//! One encoder layer and its sub-modules, post-LN (BERT): `x = LN(x + Wo·Attn(x))`, then `x = LN(x + W2·act(W1·x))`;
//! or pre-LN (ModernBERT, [`Norms::Pre`]): `x = x + Wo·Attn(LN(x))` (no norm at layer 0), then
//! `x = x + W2·act(W1·LN(x))`. For the rotary families the queries and keys turn by their position before the scores
//! ([`Backend::rotary`]) and the feed-forward is gated, `W2·(up(x) ⊙ act(gate(x)))` ([`Backend::glu`]), with the
//! biases the family has ([`crate::config::LayerBiases`]); ModernBERT's local layers attend within a window
//! (`super::window`).

use crate::backend::{Activation, AttentionShape, Backend};
use crate::config::{BertConfig, Family, FeedForward, Norms, Positions};
use crate::weights::{HostTensor, Weights};
use crate::Result;

use super::disentangled::PositionBias;
use super::LayerNorm;

/// A dense layer's `(out, inp)` weight, kept shared with the loaded weights where the backend allows
/// ([`Backend::upload_shared`]), and its bias where the layer has one.
fn load_dense<B: Backend>(w: &Weights, out: usize, inp: usize, bias: bool, backend: &B)
    -> Result<(B::Tensor, Option<B::Tensor>)> {
    let weight = backend.upload_shared(&w.get_shared("weight", &[out, inp])?)?;
    let bias = if bias { Some(backend.upload(w.get("bias", &[out])?)?) } else { None };
    Ok((weight, bias))
}

/// What every layer's attention reads besides its input, computed once per forward: the mask, MPNet's relative
/// bias or DeBERTa's relative rows, the rotary families' `(T, d)` table of cosines and sines, ModernBERT's local
/// layers' own, and the batch's shape.
pub struct LayerInputs<'a, T> {
    pub mask: &'a T,
    pub bias: Option<&'a PositionBias<T>>,
    pub rope: Option<&'a T>,
    /// What the sliding-window layers read instead of `rope` (and with no other bias).
    pub local: Option<Local<'a, T>>,
    pub batch: usize,
    pub seq: usize,
}

/// A sliding-window layer's rotary table `(T, d)` and its window as a score bias `(heads, 2T − 1)`
/// (`super::window`).
pub struct Local<'a, T> {
    pub rope: &'a T,
    pub window: &'a T,
}

// By hand: a derive would ask `T: Copy` of the tensors the references point to.
impl<T> Clone for Local<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Local<'_, T> {}

/// Whether the layers' norms come before their blocks.
fn pre_norm(cfg: &BertConfig) -> bool {
    cfg.norms == Norms::Pre
}

/// `BertSelfAttention`, with the query/key/value projections fused into one `(3H, H)` GEMM at load (a packed
/// checkpoint tensor, NomicBERT's `Wqkv` and GTE's `qkv_proj`, is that matrix already).
pub struct BertSelfAttention<B: Backend> {
    qkv_weight: B::Tensor,       // (3H, H): rows [query; key; value]
    qkv_bias: Option<B::Tensor>, // (3H)
    heads: usize,
    head_dim: usize,
    /// A sliding-window layer (ModernBERT's local ones): it reads [`LayerInputs::local`].
    sliding: bool,
}

impl<B: Backend> BertSelfAttention<B> {
    /// `w` at `encoder.layer.{index}.attention.self`.
    pub fn load(w: &Weights, cfg: &BertConfig, index: usize, backend: &B) -> Result<Self> {
        let h = cfg.hidden_size;
        let with_bias = cfg.biases.qkv;
        let (weight, bias) = if matches!(cfg.positions, Positions::Rotary { .. }) {
            // The rotary families store the projections packed.
            load_dense(&w.pp("qkv"), 3 * h, h, with_bias, backend)?
        } else {
            let (q, k, v) = (w.pp("query"), w.pp("key"), w.pp("value"));
            let [wq, wk, wv] = [&q, &k, &v].map(|p| p.get("weight", &[h, h]));
            let bias = if with_bias {
                let [bq, bk, bv] = [&q, &k, &v].map(|p| p.get("bias", &[h]));
                Some(backend.upload_rows(&[bq?, bk?, bv?])?)
            } else {
                None
            };
            (backend.upload_rows(&[wq?, wk?, wv?])?, bias)
        };
        let sliding = cfg.sliding_window.as_ref().is_some_and(|s| s.layers.get(index) == Some(&true));
        Ok(BertSelfAttention {
            qkv_weight: weight,
            qkv_bias: bias,
            heads: cfg.num_attention_heads,
            head_dim: cfg.head_dim(),
            sliding,
        })
    }

    /// x `(B*T, H)` → context `(B*T, H)` (heads concatenated, before the output projection).
    pub fn forward(&self, backend: &B, x: &B::Tensor, inputs: &LayerInputs<'_, B::Tensor>) -> Result<B::Tensor> {
        let qkv = backend.linear(x, &self.qkv_weight, self.qkv_bias.as_ref(), Activation::None)?; // (B*T, 3H)
        let shape = AttentionShape { batch: inputs.batch, seq: inputs.seq, heads: self.heads, head_dim: self.head_dim };
        let local = match (self.sliding, inputs.local) {
            (false, _) => None,
            (true, Some(local)) => Some(local),
            (true, None) => return Err(crate::Error::Input("a sliding-window layer ran without its window".into())),
        };
        let qkv = match local.map(|l| l.rope).or(inputs.rope) {
            Some(rope) => backend.rotary(&qkv, rope, shape)?, // (B*T, 3H), q and k turned
            None => qkv,
        };
        let mask = inputs.mask;
        if let Some(l) = local {
            return backend.attention_biased(&qkv, mask, Some(l.window), shape); // (B*T, H)
        }
        match inputs.bias {
            None => backend.attention(&qkv, mask, shape), // (B*T, H)
            Some(PositionBias::Relative(b)) => backend.attention_biased(&qkv, mask, Some(b), shape),
            Some(PositionBias::Disentangled { table, rows }) => {
                // DeBERTa's posQ and posK: the relative rows through this layer's own projections (share_att_key).
                let pos = backend.linear(table, &self.qkv_weight, self.qkv_bias.as_ref(), Activation::None)?; // (R, 3H)
                backend.attention_disentangled(&qkv, mask, &pos, rows, shape)
            }
        }
    }
}

/// A block's end, after its output projection `y`: the residual, and post-LN the LayerNorm of the sum (`norm`;
/// pre-LN has none here: the next block's own comes first).
fn residual<B: Backend>(backend: &B, y: &B::Tensor, input: &B::Tensor, norm: Option<&LayerNorm<B>>)
    -> Result<B::Tensor> {
    match norm {
        Some(n) => n.forward(backend, y, Some(input)), // LN(input + y)
        None => backend.add(input, y),                 // input + y
    }
}

/// `BertSelfOutput`: output projection, residual, LayerNorm (post-LN).
pub struct BertSelfOutput<B: Backend> {
    dense_weight: B::Tensor,       // (H, H)
    dense_bias: Option<B::Tensor>, // (H)
    norm: Option<LayerNorm<B>>,    // post-LN only
}

impl<B: Backend> BertSelfOutput<B> {
    /// `w` at `encoder.layer.{i}.attention.output`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let h = cfg.hidden_size;
        let (dense_weight, dense_bias) = load_dense(&w.pp("dense"), h, h, cfg.biases.attention_output, backend)?;
        let norm = (!pre_norm(cfg)).then(|| LayerNorm::load(&w.pp("LayerNorm"), cfg, backend)).transpose()?;
        Ok(BertSelfOutput { dense_weight, dense_bias, norm })
    }

    /// context `(B*T, H)`, input `(B*T, H)` → `LN(input + context·Woᵀ + bo)` `(B*T, H)` (pre-LN: without the LN).
    pub fn forward(&self, backend: &B, context: &B::Tensor, input: &B::Tensor) -> Result<B::Tensor> {
        let y = backend.linear(context, &self.dense_weight, self.dense_bias.as_ref(), Activation::None)?; // (B*T, H)
        residual(backend, &y, input, self.norm.as_ref())
    }
}

/// `BertAttention`: self-attention then its output block; pre-LN, its LayerNorm first (ModernBERT's `attn_norm`,
/// an `nn.Identity` at layer 0).
pub struct BertAttention<B: Backend> {
    pub norm: Option<LayerNorm<B>>,
    pub self_attention: BertSelfAttention<B>,
    pub output: BertSelfOutput<B>,
}

impl<B: Backend> BertAttention<B> {
    /// `w` at `encoder.layer.{index}.attention`.
    pub fn load(w: &Weights, cfg: &BertConfig, index: usize, backend: &B) -> Result<Self> {
        let norm = (pre_norm(cfg) && index > 0).then(|| LayerNorm::load(&w.pp("LayerNorm"), cfg, backend)).transpose()?;
        Ok(BertAttention {
            norm,
            self_attention: BertSelfAttention::load(&w.pp("self"), cfg, index, backend)?,
            output: BertSelfOutput::load(&w.pp("output"), cfg, backend)?,
        })
    }

    /// x `(B*T, H)` → `(B*T, H)`.
    pub fn forward(&self, backend: &B, x: &B::Tensor, inputs: &LayerInputs<'_, B::Tensor>) -> Result<B::Tensor> {
        let context = match &self.norm {
            Some(n) => self.self_attention.forward(backend, &n.forward(backend, x, None)?, inputs)?, // (B*T, H)
            None => self.self_attention.forward(backend, x, inputs)?,
        };
        self.output.forward(backend, &context, x)
    }
}

/// `BertIntermediate`: the feed-forward expansion with its activation fused into the GEMM; or a gated block's
/// `[up; gate]` `(2I, H)` in one GEMM, then `up ⊙ act(gate)`; pre-LN, its LayerNorm first (ModernBERT's `mlp_norm`).
pub struct BertIntermediate<B: Backend> {
    norm: Option<LayerNorm<B>>,
    dense_weight: B::Tensor,       // (I, H), or (2I, H) rows [up; gate]
    dense_bias: Option<B::Tensor>, // (I) or (2I)
    act: Activation,
    gated: bool,
}

impl<B: Backend> BertIntermediate<B> {
    /// `w` at `encoder.layer.{i}.intermediate`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let (i, h, bias) = (cfg.intermediate_size, cfg.hidden_size, cfg.biases.up);
        let gated = cfg.feed_forward == FeedForward::Gated;
        let norm = pre_norm(cfg).then(|| LayerNorm::load(&w.pp("LayerNorm"), cfg, backend)).transpose()?;
        let (dense_weight, dense_bias) = if !gated {
            load_dense(&w.pp("dense"), i, h, bias, backend)?
        } else if cfg.family == Family::Gte {
            // GTE's `up_gate_proj`: [up; gate] rows already.
            load_dense(&w.pp("up_gate"), 2 * i, h, bias, backend)?
        } else if matches!(cfg.family, Family::ModernBert | Family::JinaBert) {
            // ModernBERT's `Wi` (2I, H): `input, gate = Wi(x).chunk(2)`, then `act(input) * gate`, the activation on
            // the FIRST half (JinaBERT's `gated_layers` likewise: `act(gated) * non_gated`, `gated` the first half).
            // Its halves swap here, [gate; input], so that `glu`'s `up ⊙ act(gate)` is that product with the one
            // kernel (its bias too). The matrix is copied once at load (weights::stream leaves `Wi` on
            // the host for it rather than in device memory).
            let p = w.pp("up_gate");
            let wi = p.get("weight", &[2 * i, h])?;
            let weight = backend.upload_rows(&[&wi.slice_rows(i..2 * i)?, &wi.slice_rows(0..i)?])?;
            let bias = if bias {
                let mut b = p.get("bias", &[2 * i])?.to_f32()?;
                b.rotate_left(i); // [gate | input]
                Some(backend.upload(&HostTensor::f32(vec![2 * i], b)?)?)
            } else {
                None
            };
            (weight, bias)
        } else {
            // NomicBERT's `fc11` (up) and `fc12` (gate), joined at load.
            let (up, gate) = (w.pp("up"), w.pp("gate"));
            let weight = backend.upload_rows(&[up.get("weight", &[i, h])?, gate.get("weight", &[i, h])?])?;
            let bias = if bias { Some(backend.upload_rows(&[up.get("bias", &[i])?, gate.get("bias", &[i])?])?) } else { None };
            (weight, bias)
        };
        Ok(BertIntermediate { norm, dense_weight, dense_bias, act: cfg.hidden_act, gated })
    }

    /// x `(B*T, H)` → `act(x·W1ᵀ + b1)` `(B*T, I)`; gated: `up ⊙ act(gate)` `(B*T, I)`; pre-LN: of `LN(x)`.
    pub fn forward(&self, backend: &B, x: &B::Tensor) -> Result<B::Tensor> {
        let normed;
        let x = match &self.norm {
            Some(n) => {
                normed = n.forward(backend, x, None)?; // (B*T, H)
                &normed
            }
            None => x,
        };
        if self.gated {
            // [up | gate] (B*T, 2I) and its product in one op: (B*T, I)
            return backend.linear_glu(x, &self.dense_weight, self.dense_bias.as_ref(), self.act);
        }
        backend.linear(x, &self.dense_weight, self.dense_bias.as_ref(), self.act)
    }
}

/// `BertOutput`: the feed-forward contraction, residual, LayerNorm (post-LN).
pub struct BertOutput<B: Backend> {
    dense_weight: B::Tensor,       // (H, I)
    dense_bias: Option<B::Tensor>, // (H)
    norm: Option<LayerNorm<B>>,    // post-LN only
}

impl<B: Backend> BertOutput<B> {
    /// `w` at `encoder.layer.{i}.output`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let h = cfg.hidden_size;
        let (dense_weight, dense_bias) = load_dense(&w.pp("dense"), h, cfg.intermediate_size, cfg.biases.down, backend)?;
        let norm = (!pre_norm(cfg)).then(|| LayerNorm::load(&w.pp("LayerNorm"), cfg, backend)).transpose()?;
        Ok(BertOutput { dense_weight, dense_bias, norm })
    }

    /// inter `(B*T, I)`, input `(B*T, H)` → `LN(input + inter·W2ᵀ + b2)` `(B*T, H)` (pre-LN: without the LN).
    pub fn forward(&self, backend: &B, inter: &B::Tensor, input: &B::Tensor) -> Result<B::Tensor> {
        let y = backend.linear(inter, &self.dense_weight, self.dense_bias.as_ref(), Activation::None)?; // (B*T, H)
        residual(backend, &y, input, self.norm.as_ref())
    }
}

/// `BertLayer`: attention block, then feed-forward block.
pub struct BertLayer<B: Backend> {
    pub attention: BertAttention<B>,
    pub intermediate: BertIntermediate<B>,
    pub output: BertOutput<B>,
}

impl<B: Backend> BertLayer<B> {
    /// `w` at `encoder.layer.{index}`.
    pub fn load(w: &Weights, cfg: &BertConfig, index: usize, backend: &B) -> Result<Self> {
        Ok(BertLayer {
            attention: BertAttention::load(&w.pp("attention"), cfg, index, backend)?,
            intermediate: BertIntermediate::load(&w.pp("intermediate"), cfg, backend)?,
            output: BertOutput::load(&w.pp("output"), cfg, backend)?,
        })
    }

    /// How the layer's matmul weights are stored (the feed-forward expansion's: every matrix of a model shares it).
    pub fn matmul_dtype(&self, backend: &B) -> crate::backend::Dtype {
        backend.dtype(&self.intermediate.dense_weight)
    }

    /// x `(B*T, H)` → `(B*T, H)`.
    pub fn forward(&self, backend: &B, x: &B::Tensor, inputs: &LayerInputs<'_, B::Tensor>) -> Result<B::Tensor> {
        let a = self.attention.forward(backend, x, inputs)?; // (B*T, H)
        let i = self.intermediate.forward(backend, &a)?; // (B*T, I)
        self.output.forward(backend, &i, &a) // (B*T, H)
    }
}
