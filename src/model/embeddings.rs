//! `BertEmbeddings`: word + absolute position + token type embeddings, summed, then LayerNorm. DistilBERT has no
//! token-type table: one all-zero row stands in for it and every token is of type 0, which adds exactly nothing.

use crate::backend::{Backend, EmbeddingTables};
use crate::config::BertConfig;
use crate::tokenizer::Batch;
use crate::weights::{HostTensor, Weights};
use crate::Result;

use super::load_layernorm;

pub struct BertEmbeddings<B: Backend> {
    word: B::Tensor,       // (V, H)
    position: B::Tensor,   // (P, H)
    token_type: B::Tensor, // (types, H)
    ln_gamma: B::Tensor,   // (H)
    ln_beta: B::Tensor,    // (H)
    eps: f32,
    /// False for DistilBERT: every token type id is read as 0.
    token_types: bool,
}

impl<B: Backend> BertEmbeddings<B> {
    /// `w` at `embeddings`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let h = cfg.hidden_size;
        let word = backend.upload(w.get("word_embeddings.weight", &[cfg.vocab_size, h])?)?;
        let position = backend.upload(w.get("position_embeddings.weight", &[cfg.max_position_embeddings, h])?)?;
        let token_type = if cfg.family.has_token_types() {
            backend.upload(w.get("token_type_embeddings.weight", &[cfg.type_vocab_size, h])?)?
        } else {
            backend.upload(&HostTensor::f32(vec![1, h], vec![0.0; h])?)?
        };
        let (ln_gamma, ln_beta) = load_layernorm(&w.pp("LayerNorm"), h, backend)?;
        Ok(BertEmbeddings { word, position, token_type, ln_gamma, ln_beta, eps: cfg.layer_norm_eps, token_types: cfg.family.has_token_types() })
    }

    /// The word-embedding matrix `(V, H)`: the MLM decoder's weight when it is tied.
    pub fn word_embeddings(&self) -> &B::Tensor {
        &self.word
    }

    /// → `(B*T, H)`. Position ids are `0..T` in every row (right padding), as HF's default `position_ids`.
    pub fn forward(&self, backend: &B, batch: &Batch) -> Result<B::Tensor> {
        let tables = EmbeddingTables {
            word: &self.word,
            position: &self.position,
            token_type: &self.token_type,
            ln_gamma: &self.ln_gamma,
            ln_beta: &self.ln_beta,
            eps: self.eps,
        };
        if self.token_types {
            backend.embeddings(batch, &tables)
        } else {
            let types = vec![0; batch.token_type_ids.len()];
            backend.embeddings(&Batch { token_type_ids: types, ..batch.clone() }, &tables)
        }
    }
}
