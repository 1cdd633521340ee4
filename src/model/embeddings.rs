//! `BertEmbeddings`: word + absolute position + token type embeddings, summed, then LayerNorm. DistilBERT has no
//! token-type table: one all-zero row stands in for it and every token is of type 0, which adds exactly nothing.
//! RoBERTa and XLM-R read type 0 for every token too (their tokenizers return no type ids), from their own table.
//!
//! RoBERTa's positions start at `pad_token_id + 1` (`create_position_ids_from_input_ids`): the table is uploaded
//! from that row on, so that row `j` is the position of token `j` exactly as for BERT. transformers gives padding
//! tokens position `pad_token_id` instead; no real token attends to them, so that changes nothing that is read.
//!
//! ELECTRA's and ALBERT's tables and LayerNorm have `embedding_size` E columns, not H: the projection to H that
//! follows is [`super::BertModel`]'s.

use std::sync::Arc;

use crate::backend::{Backend, EmbeddingTables};
use crate::config::BertConfig;
use crate::tokenizer::Batch;
use crate::weights::{HostTensor, Weights};
use crate::{Error, Result};

use super::load_layernorm;

pub struct BertEmbeddings<B: Backend> {
    word: B::Tensor,       // (V, E)
    position: Option<B::Tensor>, // (P, E); none for the rotary families
    token_type: B::Tensor, // (types, E)
    ln_gamma: B::Tensor,   // (E)
    ln_beta: B::Tensor,    // (E)
    eps: f32,
    /// False for DistilBERT and RoBERTa: every token type id is read as 0.
    token_types: bool,
    /// RoBERTa's `padding_idx`: a real token with this id would not advance transformers' position ids.
    pad_id: Option<u32>,
}

/// The position table from the first position a token can take: BERT's whole table; RoBERTa's from row
/// `pad_token_id + 1` on. A RoBERTa table may also come with those rows already dropped (`(max_position_embeddings,
/// H)`), as `convert` and llama.cpp's converter store it in a GGUF.
fn positions<'a>(w: &'a Weights, cfg: &BertConfig) -> Result<std::borrow::Cow<'a, HostTensor>> {
    let (usable, offset, h) = (cfg.max_position_embeddings, cfg.position_offset, cfg.embedding_size);
    let name = "position_embeddings.weight";
    if offset == 0 {
        return Ok(std::borrow::Cow::Borrowed(w.get(name, &[usable, h])?));
    }
    match w.get(name, &[usable + offset, h]) {
        Ok(t) => Ok(std::borrow::Cow::Owned(t.slice_rows(offset..usable + offset)?)),
        Err(Error::Shape { got, .. }) if got == [usable, h] => Ok(std::borrow::Cow::Borrowed(w.get(name, &[usable, h])?)),
        Err(e) => Err(e),
    }
}

impl<B: Backend> BertEmbeddings<B> {
    /// `w` at `embeddings`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let h = cfg.embedding_size;
        // The tables are shared with the loaded weights where the backend allows (the CPU's): not copied.
        let word = backend.upload_table(&w.get_shared("word_embeddings.weight", &[cfg.vocab_size, h])?)?;
        // The rotary families and DeBERTa-v3 (`position_biased_input: false`) have no position table.
        let position = match cfg.has_position_table() {
            true => Some(backend.upload_table(&Arc::new(positions(w, cfg)?.into_owned()))?),
            false => None,
        };
        let token_type = if cfg.has_token_type_table() {
            backend.upload_table(&w.get_shared("token_type_embeddings.weight", &[cfg.type_vocab_size, h])?)?
        } else {
            backend.upload(&HostTensor::f32(vec![1, h], vec![0.0; h])?)?
        };
        let (ln_gamma, ln_beta) = load_layernorm(&w.pp("LayerNorm"), h, cfg, backend)?;
        Ok(BertEmbeddings {
            word,
            position,
            token_type,
            ln_gamma,
            ln_beta,
            eps: cfg.layer_norm_eps,
            token_types: cfg.has_token_types(),
            pad_id: (cfg.position_offset > 0).then_some(cfg.pad_token_id),
        })
    }

    /// The word-embedding matrix `(V, E)`: the MLM decoder's weight when it is tied.
    pub fn word_embeddings(&self) -> &B::Tensor {
        &self.word
    }

    /// → `(B*T, E)`. Position ids are `0..T` in every row (right padding), as HF's default `position_ids` (RoBERTa:
    /// rows of its table from `pad_token_id + 1`, see the module doc).
    pub fn forward(&self, backend: &B, batch: &Batch) -> Result<B::Tensor> {
        if let Some(pad) = self.pad_id {
            // transformers counts positions over the tokens that are not padding_idx: a padding token among the real
            // ones (the text `<pad>` typed in) shifts every position after it there, and not here. Refuse it.
            if batch.input_ids.iter().zip(&batch.attention_mask).any(|(&id, &m)| m != 0 && id == pad) {
                return Err(Error::Input(format!(
                    "the input contains the padding token (id {pad}) as a real token, e.g. `<pad>` typed in the text: \
                     RoBERTa-style models number positions around it, so remove it from the text"
                )));
            }
        }
        let tables = EmbeddingTables {
            word: &self.word,
            position: self.position.as_ref(),
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
