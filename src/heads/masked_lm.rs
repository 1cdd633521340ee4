//! The pre-training heads: masked-LM prediction (`cls.predictions`) and next-sentence prediction
//! (`cls.seq_relationship`), as in `BertForPreTraining`, `BertForMaskedLM` and `BertForNextSentencePrediction`.

use serde::Serialize;

use super::{softmax, top_k, Linear};
use crate::backend::{Activation, Backend};
use crate::config::BertConfig;
use crate::tokenizer::Tokenizer;
use crate::weights::Weights;
use crate::{Error, Result};

/// `BertPredictionHeadTransform`: `LayerNorm(act(x·Wᵀ + b))`, weights under `cls.predictions.transform`.
/// Its output has the embeddings' width E (ALBERT's `predictions.dense`, ELECTRA's `generator_predictions.dense`
/// project H → E, the LayerNorm is over E, and the tied decoder is the `(V, E)` word-embedding matrix); E = H for
/// the other families. ModernBERT's `ModernBertPredictionHead` (`head`: dense, `classifier_activation`, norm) is this
/// module, before its decoder and before each of its classifiers (`super::classifier`).
pub struct BertPredictionHeadTransform<B: Backend> {
    pub dense: Linear<B>, // (E, H)
    pub act: Activation,
    pub ln_gamma: B::Tensor, // (E)
    pub ln_beta: B::Tensor,  // (E)
    pub eps: f32,
}

impl<B: Backend> BertPredictionHeadTransform<B> {
    /// `w` at `cls.predictions.transform`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let (e, h) = (cfg.embedding_size, cfg.hidden_size);
        // ModernBERT's `head.dense` has a bias only with `classifier_bias`; its norm a β only with `norm_bias`.
        let bias = cfg.modernbert.as_ref().is_none_or(|m| m.classifier_bias);
        let (ln_gamma, ln_beta) = crate::model::load_layernorm(&w.pp("LayerNorm"), e, cfg, backend)?;
        Ok(BertPredictionHeadTransform {
            dense: Linear::load_with(&w.pp("dense"), e, h, bias, backend)?,
            // BERT and ALBERT apply `config.hidden_act` here too (ACT2FN[config.hidden_act]); RoBERTa's `lm_head`
            // and ELECTRA's generator always the exact GELU; ModernBERT its `classifier_activation`.
            act: cfg.mlm_activation(),
            ln_gamma,
            ln_beta,
            eps: cfg.layer_norm_eps,
        })
    }

    /// ModernBERT's `head` (BERT's `cls.predictions.transform`) before its token and span classifiers (`w` at the
    /// root); `None` for the other families, whose classifiers read the hidden states as they are.
    pub fn before_classifier(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Option<Self>> {
        cfg.modernbert.is_some().then(|| Self::load(&w.pp("cls.predictions.transform"), cfg, backend)).transpose()
    }

    /// x `(M, H)` → `(M, E)`.
    pub fn forward(&self, backend: &B, x: &B::Tensor) -> Result<B::Tensor> {
        let y = self.dense.forward(backend, x, self.act)?; // (M, E)
        backend.layernorm(&y, None, &self.ln_gamma, &self.ln_beta, self.eps)
    }
}

/// `BertLMPredictionHead`: the transform, then the decoder onto the vocabulary plus a per-token bias.
///
/// With `tie_word_embeddings` (HF's default, and every BERT checkpoint we know of) the decoder *is* the
/// word-embedding matrix `(V, H)`, whatever the file stores under `cls.predictions.decoder.weight` (files usually
/// omit it): the model's own embedding tensor is passed to [`Self::forward_rows`] instead of uploading a copy.
pub struct BertLMPredictionHead<B: Backend> {
    pub transform: BertPredictionHeadTransform<B>,
    /// `Some((V, E))` only for an untied checkpoint; `None`: tied to the word embeddings.
    pub decoder: Option<B::Tensor>,
    /// `(V)`; none in a ModernBERT with `decoder_bias: false`.
    pub bias: Option<B::Tensor>,
    pub vocab_size: usize,
}

impl<B: Backend> BertLMPredictionHead<B> {
    /// `w` at `cls.predictions`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let (v, h) = (cfg.vocab_size, cfg.embedding_size);
        if !w.contains("transform.dense.weight") {
            let p = cfg.family.class_prefix();
            let which = match cfg.family {
                // An ELECTRA discriminator (`ElectraForPreTraining`) has no masked-LM head; its generator has.
                crate::config::Family::Electra => "ElectraForMaskedLM checkpoint (an ELECTRA generator)".to_string(),
                _ => format!("{p}ForMaskedLM or {p}ForPreTraining checkpoint"),
            };
            return Err(Error::Weights(format!(
                "this checkpoint has no masked-LM head (`{}.transform.dense.weight` is missing): fill-mask needs a \
                 {which}",
                w.prefix()
            )));
        }
        let transform = BertPredictionHeadTransform::load(&w.pp("transform"), cfg, backend)?;
        let decoder = if cfg.tie_word_embeddings {
            None
        } else {
            Some(backend.upload_shared(&w.get_shared("decoder.weight", &[v, h]).map_err(|e| {
                Error::Weights(format!("{e} (config.json says tie_word_embeddings: false, so the untied decoder \
                    must be in the file)"))
            })?)?)
        };
        // The bias is `cls.predictions.bias`; `decoder.bias` is the same parameter under its other name.
        let bias = match cfg.modernbert.as_ref().is_none_or(|m| m.decoder_bias) {
            true => Some(backend.upload(w.get_first(&["bias", "decoder.bias"], &[v])?)?),
            false => None,
        };
        Ok(BertLMPredictionHead { transform, decoder, bias, vocab_size: v })
    }

    /// Vocabulary logits of the selected rows only: hidden `(B*T, H)`, `rows` (e.g. the `[MASK]` positions
    /// `b*T + t`) → `(rows.len(), V)`. Gathering first keeps the `H×V` projection and the read-back to the rows
    /// that are asked about. `word_embeddings` `(V, E)` is the tied decoder.
    pub fn forward_rows(&self, backend: &B, hidden: &B::Tensor, rows: &[u32], word_embeddings: &B::Tensor)
        -> Result<B::Tensor> {
        let x = backend.gather_rows(hidden, rows)?; // (M, H)
        self.forward_all(backend, &x, word_embeddings)
    }

    /// The logits of every row of `hidden` `(M, H)` → `(M, V)`, without gathering them first.
    pub fn forward_all(&self, backend: &B, hidden: &B::Tensor, word_embeddings: &B::Tensor) -> Result<B::Tensor> {
        let x = self.transform.forward(backend, hidden)?; // (M, E)
        let decoder = self.decoder.as_ref().unwrap_or(word_embeddings); // (V, E)
        backend.linear(&x, decoder, self.bias.as_ref(), Activation::None) // (M, V)
    }
}

/// `BertOnlyNSPHead`: `seq_relationship`, a linear `(2, H)` on the pooled output. Class 0 means "B follows A"
/// (`next_sentence_label` 0 in `modeling_bert.py`).
pub struct BertOnlyNSPHead<B: Backend> {
    pub seq_relationship: Linear<B>, // (2, H)
}

impl<B: Backend> BertOnlyNSPHead<B> {
    /// `w` at `cls.seq_relationship`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        if !w.contains("weight") {
            return Err(Error::Weights(format!(
                "this checkpoint has no next-sentence head (`{}.weight` is missing): next-sentence needs a \
                 BertForPreTraining or BertForNextSentencePrediction checkpoint",
                w.prefix()
            )));
        }
        Ok(BertOnlyNSPHead { seq_relationship: Linear::load(w, 2, cfg.hidden_size, backend)? })
    }

    /// pooled `(B, H)` → logits `(B, 2)`.
    pub fn forward(&self, backend: &B, pooled: &B::Tensor) -> Result<B::Tensor> {
        self.seq_relationship.forward(backend, pooled, Activation::None)
    }
}

/// `{is_next}`: the probability that the second text follows the first, from the NSP logits `(2)`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NextSentence {
    pub is_next: f32,
}

impl NextSentence {
    pub fn from_logits(logits: &[f32]) -> NextSentence {
        NextSentence { is_next: softmax(logits)[0] }
    }
}

/// One fill-mask candidate, as the Hugging Face fill-mask pipeline names it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FillMaskPrediction {
    pub score: f32,
    /// The token id.
    pub token: u32,
    /// The token decoded alone (`tokenizer.decode([token])`).
    pub token_str: String,
    /// The text with this mask filled in, decoded.
    pub sequence: String,
}

/// The positions of the tokenizer's mask token in `ids`, or a clear error when there is none.
pub fn mask_positions(tok: &Tokenizer, ids: &[u32], text: &str) -> Result<Vec<usize>> {
    let mask = tok.mask_token()?;
    let pos: Vec<usize> = ids.iter().enumerate().filter(|(_, &id)| id == mask.id).map(|(i, _)| i).collect();
    if pos.is_empty() && ids.len() >= tok.max_length() && text.contains(mask.token.as_str()) {
        return Err(Error::Input(format!(
            "the text is longer than the model's {} tokens and its `{}` lies in the part cut off: shorten the text",
            tok.max_length(),
            mask.token
        )));
    }
    if pos.is_empty() {
        return Err(Error::Input(format!(
            "no mask token in {:?}: put `{}` where a word should be predicted, e.g. \"Paris is the {} of France.\"",
            truncate_for_message(text),
            mask.token,
            mask.token
        )));
    }
    Ok(pos)
}

fn truncate_for_message(text: &str) -> String {
    let mut s: String = text.chars().take(80).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

/// The fill-mask pipeline's post-processing (`transformers/pipelines/fill_mask.py`): per mask, the softmax over the
/// vocabulary, the `top_k` best, and for each the sequence with that mask replaced, padding dropped and decoded.
/// As in transformers, a text with a single mask is decoded without special tokens, and with several masks the
/// special tokens (and the other masks) are kept so the filled position is visible.
///
/// `ids`: the text's token ids (unpadded); `positions`: its mask positions; `logits`: `(positions.len(), V)`.
pub fn fill_mask_postprocess(
    tok: &Tokenizer,
    ids: &[u32],
    positions: &[usize],
    logits: &[f32],
    vocab_size: usize,
    k: usize,
) -> Result<Vec<Vec<FillMaskPrediction>>> {
    if logits.len() != positions.len() * vocab_size {
        return Err(Error::Input(format!(
            "fill-mask: {} logits for {} masks of a {vocab_size}-token vocabulary",
            logits.len(),
            positions.len()
        )));
    }
    if let Some(&p) = positions.iter().find(|&&p| p >= ids.len()) {
        return Err(Error::Input(format!("fill-mask: mask position {p} is past the {} tokens of the text", ids.len())));
    }
    let single_mask = positions.len() == 1;
    let pad = tok.pad().id;
    let mut out = Vec::with_capacity(positions.len());
    for (m, &pos) in positions.iter().enumerate() {
        let probs = softmax(&logits[m * vocab_size..(m + 1) * vocab_size]); // (V)
        let mut row = Vec::with_capacity(k);
        for id in top_k(&probs, k) {
            let token = id as u32;
            let mut filled = ids.to_vec();
            filled[pos] = token;
            filled.retain(|&t| t != pad);
            row.push(FillMaskPrediction {
                score: probs[id],
                token,
                token_str: tok.decode(&[token], false)?,
                sequence: tok.decode(&filled, single_mask)?,
            });
        }
        out.push(row);
    }
    Ok(out)
}
