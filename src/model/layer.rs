//! One post-LN encoder layer and its sub-modules:
//! `x = LN(x + Wo·Attn(x))`, then `x = LN(x + W2·act(W1·x))`.

use crate::backend::{Activation, AttentionShape, Backend};
use crate::config::BertConfig;
use crate::weights::Weights;
use crate::Result;

use super::disentangled::PositionBias;
use super::load_layernorm;

/// A dense layer's `(out, inp)` weight, kept shared with the loaded weights where the backend allows
/// ([`Backend::upload_shared`]), and its bias.
fn load_dense<B: Backend>(w: &Weights, out: usize, inp: usize, backend: &B) -> Result<(B::Tensor, B::Tensor)> {
    let weight = backend.upload_shared(&w.get_shared("weight", &[out, inp])?)?;
    let bias = backend.upload(w.get("bias", &[out])?)?;
    Ok((weight, bias))
}

/// `BertSelfAttention`, with the query/key/value projections fused into one `(3H, H)` GEMM at load.
pub struct BertSelfAttention<B: Backend> {
    qkv_weight: B::Tensor, // (3H, H): rows [query; key; value]
    qkv_bias: B::Tensor,   // (3H)
    heads: usize,
    head_dim: usize,
}

impl<B: Backend> BertSelfAttention<B> {
    /// `w` at `encoder.layer.{i}.attention.self`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let h = cfg.hidden_size;
        let (q, k, v) = (w.pp("query"), w.pp("key"), w.pp("value"));
        let [wq, wk, wv] = [&q, &k, &v].map(|p| p.get("weight", &[h, h]));
        let [bq, bk, bv] = [&q, &k, &v].map(|p| p.get("bias", &[h]));
        let weight = backend.upload_rows(&[wq?, wk?, wv?])?;
        let bias = backend.upload_rows(&[bq?, bk?, bv?])?;
        Ok(BertSelfAttention {
            qkv_weight: weight,
            qkv_bias: bias,
            heads: cfg.num_attention_heads,
            head_dim: cfg.head_dim(),
        })
    }

    /// x `(B*T, H)`, mask `(B, T)`, MPNet's relative bias `(heads, 2T − 1)` or DeBERTa's relative rows → context
    /// `(B*T, H)` (heads concatenated, before the output projection).
    pub fn forward(&self, backend: &B, x: &B::Tensor, mask: &B::Tensor, bias: Option<&PositionBias<B::Tensor>>,
        batch: usize, seq: usize) -> Result<B::Tensor> {
        let qkv = backend.linear(x, &self.qkv_weight, Some(&self.qkv_bias), Activation::None)?; // (B*T, 3H)
        let shape = AttentionShape { batch, seq, heads: self.heads, head_dim: self.head_dim };
        match bias {
            None => backend.attention(&qkv, mask, shape), // (B*T, H)
            Some(PositionBias::Relative(b)) => backend.attention_biased(&qkv, mask, Some(b), shape),
            Some(PositionBias::Disentangled { table, rows }) => {
                // DeBERTa's posQ and posK: the relative rows through this layer's own projections (share_att_key).
                let pos = backend.linear(table, &self.qkv_weight, Some(&self.qkv_bias), Activation::None)?; // (R, 3H)
                backend.attention_disentangled(&qkv, mask, &pos, rows, shape)
            }
        }
    }
}

/// `BertSelfOutput`: output projection, residual, LayerNorm.
pub struct BertSelfOutput<B: Backend> {
    dense_weight: B::Tensor, // (H, H)
    dense_bias: B::Tensor,   // (H)
    ln_gamma: B::Tensor,     // (H)
    ln_beta: B::Tensor,      // (H)
    eps: f32,
}

impl<B: Backend> BertSelfOutput<B> {
    /// `w` at `encoder.layer.{i}.attention.output`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let h = cfg.hidden_size;
        let (dense_weight, dense_bias) = load_dense(&w.pp("dense"), h, h, backend)?;
        let (ln_gamma, ln_beta) = load_layernorm(&w.pp("LayerNorm"), h, backend)?;
        Ok(BertSelfOutput { dense_weight, dense_bias, ln_gamma, ln_beta, eps: cfg.layer_norm_eps })
    }

    /// context `(B*T, H)`, input `(B*T, H)` → `LN(input + context·Woᵀ + bo)` `(B*T, H)`.
    pub fn forward(&self, backend: &B, context: &B::Tensor, input: &B::Tensor) -> Result<B::Tensor> {
        let y = backend.linear(context, &self.dense_weight, Some(&self.dense_bias), Activation::None)?; // (B*T, H)
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
    pub fn forward(&self, backend: &B, x: &B::Tensor, mask: &B::Tensor, bias: Option<&PositionBias<B::Tensor>>,
        batch: usize, seq: usize) -> Result<B::Tensor> {
        let context = self.self_attention.forward(backend, x, mask, bias, batch, seq)?; // (B*T, H)
        self.output.forward(backend, &context, x)
    }
}

/// `BertIntermediate`: the feed-forward expansion with its activation fused into the GEMM.
pub struct BertIntermediate<B: Backend> {
    dense_weight: B::Tensor, // (I, H)
    dense_bias: B::Tensor,   // (I)
    act: Activation,
}

impl<B: Backend> BertIntermediate<B> {
    /// `w` at `encoder.layer.{i}.intermediate`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let (dense_weight, dense_bias) = load_dense(&w.pp("dense"), cfg.intermediate_size, cfg.hidden_size, backend)?;
        Ok(BertIntermediate { dense_weight, dense_bias, act: cfg.hidden_act })
    }

    /// x `(B*T, H)` → `act(x·W1ᵀ + b1)` `(B*T, I)`.
    pub fn forward(&self, backend: &B, x: &B::Tensor) -> Result<B::Tensor> {
        backend.linear(x, &self.dense_weight, Some(&self.dense_bias), self.act)
    }
}

/// `BertOutput`: the feed-forward contraction, residual, LayerNorm.
pub struct BertOutput<B: Backend> {
    dense_weight: B::Tensor, // (H, I)
    dense_bias: B::Tensor,   // (H)
    ln_gamma: B::Tensor,     // (H)
    ln_beta: B::Tensor,      // (H)
    eps: f32,
}

impl<B: Backend> BertOutput<B> {
    /// `w` at `encoder.layer.{i}.output`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let h = cfg.hidden_size;
        let (dense_weight, dense_bias) = load_dense(&w.pp("dense"), h, cfg.intermediate_size, backend)?;
        let (ln_gamma, ln_beta) = load_layernorm(&w.pp("LayerNorm"), h, backend)?;
        Ok(BertOutput { dense_weight, dense_bias, ln_gamma, ln_beta, eps: cfg.layer_norm_eps })
    }

    /// inter `(B*T, I)`, input `(B*T, H)` → `LN(input + inter·W2ᵀ + b2)` `(B*T, H)`.
    pub fn forward(&self, backend: &B, inter: &B::Tensor, input: &B::Tensor) -> Result<B::Tensor> {
        let y = backend.linear(inter, &self.dense_weight, Some(&self.dense_bias), Activation::None)?; // (B*T, H)
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

    /// x `(B*T, H)`, mask `(B, T)`, the relative bias (MPNet's, else `None`) → `(B*T, H)`.
    pub fn forward(&self, backend: &B, x: &B::Tensor, mask: &B::Tensor, bias: Option<&PositionBias<B::Tensor>>,
        batch: usize, seq: usize) -> Result<B::Tensor> {
        let a = self.attention.forward(backend, x, mask, bias, batch, seq)?; // (B*T, H)
        let i = self.intermediate.forward(backend, &a)?; // (B*T, I)
        self.output.forward(backend, &i, &a) // (B*T, H)
    }
}
