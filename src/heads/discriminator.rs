//! ELECTRA's replaced-token detection (`ElectraForPreTraining`, the discriminator): `discriminator_predictions.dense`
//! `(H, H)` + `hidden_act`, then `dense_prediction` `(1, H)`: one logit per token, positive when the discriminator
//! thinks the token was replaced (by the generator during pre-training); its sigmoid is that probability.

use serde::Serialize;

use super::{sigmoid, Linear};
use crate::backend::{Activation, Backend};
use crate::config::{BertConfig, Family};
use crate::tokenizer::Encoded;
use crate::weights::Weights;
use crate::{Error, Result};

/// `ElectraDiscriminatorPredictions`.
pub struct DiscriminatorHead<B: Backend> {
    pub dense: Linear<B>, // (H, H)
    /// `get_activation(config.hidden_act)`.
    pub act: Activation,
    pub dense_prediction: Linear<B>, // (1, H)
}

impl<B: Backend> DiscriminatorHead<B> {
    /// `w` at the root of the checkpoint (`discriminator_predictions.*`).
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let w = w.pp("discriminator_predictions");
        if cfg.family != Family::Electra || !w.contains("dense.weight") {
            return Err(Error::Weights(format!(
                "this checkpoint has no replaced-token detection head (`discriminator_predictions.dense.weight` is \
                 missing): it needs an ELECTRA discriminator saved as ElectraForPreTraining (architectures: {:?})",
                cfg.architectures
            )));
        }
        let h = cfg.hidden_size;
        Ok(DiscriminatorHead {
            dense: Linear::load(&w.pp("dense"), h, h, backend)?,
            act: cfg.hidden_act,
            dense_prediction: Linear::load(&w.pp("dense_prediction"), 1, h, backend)?,
        })
    }

    /// hidden `(B*T, H)` → logits `(B*T, 1)`.
    pub fn forward(&self, backend: &B, hidden: &B::Tensor) -> Result<B::Tensor> {
        let x = self.dense.forward(backend, hidden, self.act)?; // (B*T, H)
        self.dense_prediction.forward(backend, &x, Activation::None)
    }
}

/// One token of a text and the discriminator's probability that it was replaced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplacedToken {
    /// The token's position in the tokenized input (`[CLS]` is 0).
    pub index: usize,
    pub token: String,
    /// Character offsets into the token's own text.
    pub start: usize,
    pub end: usize,
    /// `sigmoid(logit)`.
    pub score: f32,
}

/// Every token of `enc` but the special ones, with `sigmoid` of its logit (`logits`: one per token of `enc`).
pub fn postprocess(enc: &Encoded, logits: &[f32]) -> Result<Vec<ReplacedToken>> {
    if logits.len() != enc.len() {
        return Err(Error::Input(format!("replaced-token detection: {} logits for {} tokens", logits.len(), enc.len())));
    }
    Ok((0..enc.len())
        .filter(|&i| enc.special_tokens_mask[i] == 0)
        .map(|i| ReplacedToken {
            index: i,
            token: enc.tokens[i].clone(),
            start: enc.offsets[i].0,
            end: enc.offsets[i].1,
            score: sigmoid(logits[i]),
        })
        .collect())
}
