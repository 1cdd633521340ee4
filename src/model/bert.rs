//! `BertEncoder` (the stack of layers) and `BertModel` (embeddings + encoder; the pooler is a head, see
//! `crate::heads`).

use crate::backend::Backend;
use crate::config::BertConfig;
use crate::tokenizer::Batch;
use crate::weights::Weights;
use crate::Result;

use super::{BertEmbeddings, BertLayer};

/// `BertEncoder`: `num_hidden_layers` post-LN layers.
pub struct BertEncoder<B: Backend> {
    pub layers: Vec<BertLayer<B>>,
}

impl<B: Backend> BertEncoder<B> {
    /// `w` at `encoder`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| BertLayer::load(&w.pp(&format!("layer.{i}")), cfg, backend))
            .collect::<Result<Vec<_>>>()?;
        Ok(BertEncoder { layers })
    }

    /// x `(B*T, H)`, mask `(B, T)` → last hidden state `(B*T, H)`.
    pub fn forward(&self, backend: &B, x: B::Tensor, mask: &B::Tensor, batch: usize, seq: usize) -> Result<B::Tensor> {
        let mut x = x;
        for layer in &self.layers {
            x = layer.forward(backend, &x, mask, batch, seq)?;
        }
        Ok(x)
    }
}

/// `BertModel` without its pooler: token ids → last hidden state.
pub struct BertModel<B: Backend> {
    pub config: BertConfig,
    pub embeddings: BertEmbeddings<B>,
    pub encoder: BertEncoder<B>,
}

impl<B: Backend> BertModel<B> {
    /// `w` at the checkpoint root: names with or without the `bert.` prefix both resolve (see [`Weights`]).
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        cfg.validate()?;
        let w = &w.for_family(cfg.family);
        let shards = backend.shard().count;
        if shards > 1 && (cfg.num_attention_heads % shards != 0 || cfg.intermediate_size % shards != 0) {
            return Err(crate::Error::Config(format!(
                "this model cannot be split across {shards} workers: its {} attention heads and {} feed-forward units \
                 must both divide by {shards}", cfg.num_attention_heads, cfg.intermediate_size)));
        }
        Ok(BertModel {
            config: cfg.clone(),
            embeddings: BertEmbeddings::load(&w.pp("embeddings"), cfg, backend)?,
            encoder: BertEncoder::load(&w.pp("encoder"), cfg, backend)?,
        })
    }

    /// The last hidden state `(B*T, H)` of a padded batch. Padding rows hold values too (as in PyTorch), but no real
    /// token attends to them, so they change nothing else.
    pub fn forward(&self, backend: &B, batch: &Batch) -> Result<B::Tensor> {
        let mask = backend.mask(batch)?; // (B, T)
        self.forward_with_mask(backend, batch, &mask)
    }

    /// As [`Self::forward`], with the `(B, T)` mask from `backend.mask(batch)` supplied (a pooling head needs it too).
    pub fn forward_with_mask(&self, backend: &B, batch: &Batch, mask: &B::Tensor) -> Result<B::Tensor> {
        let x = self.embeddings.forward(backend, batch)?; // (B*T, H)
        self.encoder.forward(backend, x, mask, batch.b, batch.t)
    }
}
