//! `BertPooler`: `tanh(W · h_[CLS] + b)`, the sentence representation the NSP and sequence-classification heads
//! read (weights under `bert.pooler.dense`). DistilBERT's `pre_classifier` is the same projection with ReLU.

use super::Linear;
use crate::backend::{Activation, Backend};
use crate::config::BertConfig;
use crate::weights::Weights;
use crate::{Error, Result};

pub struct BertPooler<B: Backend> {
    pub dense: Linear<B>, // (H, H)
    /// Tanh (BERT, RoBERTa, ALBERT), ReLU (DistilBERT) or the exact GELU (ELECTRA): `Family::pooler_activation`.
    pub activation: Activation,
}

impl<B: Backend> BertPooler<B> {
    /// `w` at `bert.pooler` (the `bert.` prefix is optional in the file).
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        if !w.contains("dense.weight") {
            return Err(Error::Weights(format!(
                "this checkpoint has no pooler (`{}.dense.weight` is missing), which the task needs: use a \
                 BertForSequenceClassification / BertForPreTraining checkpoint saved with its pooler",
                w.prefix()
            )));
        }
        let h = cfg.hidden_size;
        Ok(BertPooler { dense: Linear::load(&w.pp("dense"), h, h, backend)?, activation: cfg.pooler_activation() })
    }

    /// hidden `(B*T, H)` of a batch padded to `seq` → pooled `(B, H)`: only the `[CLS]` rows `b*T` are projected.
    pub fn forward(&self, backend: &B, hidden: &B::Tensor, batch: usize, seq: usize) -> Result<B::Tensor> {
        let rows: Vec<u32> = (0..batch).map(|b| (b * seq) as u32).collect();
        let cls = backend.gather_rows(hidden, &rows)?; // (B, H)
        self.dense.forward(backend, &cls, self.activation) // (B, H)
    }
}
