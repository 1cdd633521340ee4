//! One post-LN encoder layer and its sub-modules:
//! `x = LN(x + Wo·Attn(x))`, then `x = LN(x + W2·act(W1·x))`; for the rotary families the queries and keys turn by
//! their position before the scores ([`Backend::rotary`]) and the feed-forward is gated, `W2·(up(x) ⊙ act(gate(x)))`
//! ([`Backend::glu`]), with the biases the family has ([`crate::config::LayerBiases`]).

use crate::backend::{Activation, AttentionShape, Backend};
use crate::config::{BertConfig, Family, FeedForward, Positions};
use crate::weights::Weights;
use crate::Result;

use super::disentangled::PositionBias;
use super::load_layernorm;

/// A dense layer's `(out, inp)` weight, kept shared with the loaded weights where the backend allows
/// ([`Backend::upload_shared`]), and its bias where the layer has one.
fn load_dense<B: Backend>(w: &Weights, out: usize, inp: usize, bias: bool, backend: &B)
    -> Result<(B::Tensor, Option<B::Tensor>)> {
    let weight = backend.upload_shared(&w.get_shared("weight", &[out, inp])?)?;
    let bias = if bias { Some(backend.upload(w.get("bias", &[out])?)?) } else { None };
    Ok((weight, bias))
}

/// What every layer's attention reads besides its input, computed once per forward: the mask, MPNet's relative
/// bias or DeBERTa's relative rows, the rotary families' `(T, d)` table of cosines and sines, and the batch's shape.
pub struct LayerInputs<'a, T> {
    pub mask: &'a T,
    pub bias: Option<&'a PositionBias<T>>,
    pub rope: Option<&'a T>,
    pub batch: usize,
    pub seq: usize,
}

/// `BertSelfAttention`, with the query/key/value projections fused into one `(3H, H)` GEMM at load (a packed
/// checkpoint tensor, NomicBERT's `Wqkv` and GTE's `qkv_proj`, is that matrix already).
pub struct BertSelfAttention<B: Backend> {
    qkv_weight: B::Tensor,       // (3H, H): rows [query; key; value]
    qkv_bias: Option<B::Tensor>, // (3H)
    heads: usize,
    head_dim: usize,
}

impl<B: Backend> BertSelfAttention<B> {
    /// `w` at `encoder.layer.{i}.attention.self`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
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
        Ok(BertSelfAttention { qkv_weight: weight, qkv_bias: bias, heads: cfg.num_attention_heads, head_dim: cfg.head_dim() })
    }

    /// x `(B*T, H)` → context `(B*T, H)` (heads concatenated, before the output projection).
    pub fn forward(&self, backend: &B, x: &B::Tensor, inputs: &LayerInputs<'_, B::Tensor>) -> Result<B::Tensor> {
        let qkv = backend.linear(x, &self.qkv_weight, self.qkv_bias.as_ref(), Activation::None)?; // (B*T, 3H)
        let shape = AttentionShape { batch: inputs.batch, seq: inputs.seq, heads: self.heads, head_dim: self.head_dim };
        let qkv = match inputs.rope {
            Some(rope) => backend.rotary(&qkv, rope, shape)?, // (B*T, 3H), q and k turned
            None => qkv,
        };
        let mask = inputs.mask;
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

/// `BertSelfOutput`: output projection, residual, LayerNorm.
pub struct BertSelfOutput<B: Backend> {
    dense_weight: B::Tensor,       // (H, H)
    dense_bias: Option<B::Tensor>, // (H)
    ln_gamma: B::Tensor,     // (H)
    ln_beta: B::Tensor,      // (H)
    eps: f32,
}

impl<B: Backend> BertSelfOutput<B> {
    /// `w` at `encoder.layer.{i}.attention.output`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let h = cfg.hidden_size;
        let (dense_weight, dense_bias) = load_dense(&w.pp("dense"), h, h, cfg.biases.attention_output, backend)?;
        let (ln_gamma, ln_beta) = load_layernorm(&w.pp("LayerNorm"), h, backend)?;
        Ok(BertSelfOutput { dense_weight, dense_bias, ln_gamma, ln_beta, eps: cfg.layer_norm_eps })
    }

    /// context `(B*T, H)`, input `(B*T, H)` → `LN(input + context·Woᵀ + bo)` `(B*T, H)`.
    pub fn forward(&self, backend: &B, context: &B::Tensor, input: &B::Tensor) -> Result<B::Tensor> {
        let y = backend.linear(context, &self.dense_weight, self.dense_bias.as_ref(), Activation::None)?; // (B*T, H)
        backend.layernorm(&y, Some(input), &self.ln_gamma, &self.ln_beta, self.eps)
    }
}

/// `BertAttention`: self-attention then its output block.
pub struct BertAttention<B: Backend> {
    pub self_attention: BertSelfAttention<B>,
    pub output: BertSelfOutput<B>,
}

impl<B: Backend> BertAttention<B> {
    /// `w` at `encoder.layer.{i}.attention`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        Ok(BertAttention {
            self_attention: BertSelfAttention::load(&w.pp("self"), cfg, backend)?,
            output: BertSelfOutput::load(&w.pp("output"), cfg, backend)?,
        })
    }

    /// x `(B*T, H)` → `(B*T, H)`.
    pub fn forward(&self, backend: &B, x: &B::Tensor, inputs: &LayerInputs<'_, B::Tensor>) -> Result<B::Tensor> {
        let context = self.self_attention.forward(backend, x, inputs)?; // (B*T, H)
        self.output.forward(backend, &context, x)
    }
}

/// `BertIntermediate`: the feed-forward expansion with its activation fused into the GEMM; or a gated block's
/// `[up; gate]` `(2I, H)` in one GEMM, then `up ⊙ act(gate)`.
pub struct BertIntermediate<B: Backend> {
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
        let (dense_weight, dense_bias) = if !gated {
            load_dense(&w.pp("dense"), i, h, bias, backend)?
        } else if cfg.family == Family::Gte {
            // GTE's `up_gate_proj`: [up; gate] rows already.
            load_dense(&w.pp("up_gate"), 2 * i, h, bias, backend)?
        } else {
            // NomicBERT's `fc11` (up) and `fc12` (gate), joined at load.
            let (up, gate) = (w.pp("up"), w.pp("gate"));
            let weight = backend.upload_rows(&[up.get("weight", &[i, h])?, gate.get("weight", &[i, h])?])?;
            let bias = if bias { Some(backend.upload_rows(&[up.get("bias", &[i])?, gate.get("bias", &[i])?])?) } else { None };
            (weight, bias)
        };
        Ok(BertIntermediate { dense_weight, dense_bias, act: cfg.hidden_act, gated })
    }

    /// x `(B*T, H)` → `act(x·W1ᵀ + b1)` `(B*T, I)`; gated: `up ⊙ act(gate)` `(B*T, I)`.
    pub fn forward(&self, backend: &B, x: &B::Tensor) -> Result<B::Tensor> {
        if self.gated {
            let both = backend.linear(x, &self.dense_weight, self.dense_bias.as_ref(), Activation::None)?; // (B*T, 2I)
            return backend.glu(&both, self.act);
        }
        backend.linear(x, &self.dense_weight, self.dense_bias.as_ref(), self.act)
    }
}

/// `BertOutput`: the feed-forward contraction, residual, LayerNorm.
pub struct BertOutput<B: Backend> {
    dense_weight: B::Tensor,       // (H, I)
    dense_bias: Option<B::Tensor>, // (H)
    ln_gamma: B::Tensor,     // (H)
    ln_beta: B::Tensor,      // (H)
    eps: f32,
}

impl<B: Backend> BertOutput<B> {
    /// `w` at `encoder.layer.{i}.output`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let h = cfg.hidden_size;
        let (dense_weight, dense_bias) = load_dense(&w.pp("dense"), h, cfg.intermediate_size, cfg.biases.down, backend)?;
        let (ln_gamma, ln_beta) = load_layernorm(&w.pp("LayerNorm"), h, backend)?;
        Ok(BertOutput { dense_weight, dense_bias, ln_gamma, ln_beta, eps: cfg.layer_norm_eps })
    }

    /// inter `(B*T, I)`, input `(B*T, H)` → `LN(input + inter·W2ᵀ + b2)` `(B*T, H)`.
    pub fn forward(&self, backend: &B, inter: &B::Tensor, input: &B::Tensor) -> Result<B::Tensor> {
        let y = backend.linear(inter, &self.dense_weight, self.dense_bias.as_ref(), Activation::None)?; // (B*T, H)
        backend.layernorm(&y, Some(input), &self.ln_gamma, &self.ln_beta, self.eps)
    }
}

/// `BertLayer`: attention block, then feed-forward block.
pub struct BertLayer<B: Backend> {
    pub attention: BertAttention<B>,
    pub intermediate: BertIntermediate<B>,
    pub output: BertOutput<B>,
}

impl<B: Backend> BertLayer<B> {
    /// `w` at `encoder.layer.{i}`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        Ok(BertLayer {
            attention: BertAttention::load(&w.pp("attention"), cfg, backend)?,
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
