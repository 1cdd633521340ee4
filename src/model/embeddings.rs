//! `BertEmbeddings`: word + absolute position + token type embeddings, summed, then LayerNorm.

use crate::backend::{Backend, EmbeddingTables};
use crate::config::BertConfig;
use crate::tokenizer::Batch;
use crate::weights::Weights;
use crate::Result;

use super::load_layernorm;

pub struct BertEmbeddings<B: Backend> {
    word: B::Tensor,       // (V, H)
    position: B::Tensor,   // (P, H)
    token_type: B::Tensor, // (types, H)
    ln_gamma: B::Tensor,   // (H)
    ln_beta: B::Tensor,    // (H)
    eps: f32,
}

impl<B: Backend> BertEmbeddings<B> {
    /// `w` at `embeddings`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let h = cfg.hidden_size;
        let word = backend.upload(w.get("word_embeddings.weight", &[cfg.vocab_size, h])?)?;
        let position = backend.upload(w.get("position_embeddings.weight", &[cfg.max_position_embeddings, h])?)?;
        let token_type = backend.upload(w.get("token_type_embeddings.weight", &[cfg.type_vocab_size, h])?)?;
        let (ln_gamma, ln_beta) = load_layernorm(&w.pp("LayerNorm"), h, backend)?;
        Ok(BertEmbeddings { word, position, token_type, ln_gamma, ln_beta, eps: cfg.layer_norm_eps })
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
        backend.embeddings(batch, &tables)
    }
}
