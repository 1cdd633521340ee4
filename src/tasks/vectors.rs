//! The vectors beside one dense vector per text: SPLADE's sparse vectors over the vocabulary (sentence-transformers'
//! `SparseEncoder`) and one vector per token (`encode(output_value="token_embeddings")`, what late-interaction search
//! such as ColBERT scores with).
//!
//! SPLADE keeps, for each vocabulary entry, `max over the tokens of log(1 + ReLU(logit))` (`log1p` once more for
//! `log1p_relu`). Both functions rise with the logit, so the maximum is taken over the raw logits on the backend
//! (the token pooling's `max`, which leaves padding out) and `log1p(relu(·))` on the `(B, V)` read back: the
//! `(B·T, V)` logits never leave the device.

use serde::Serialize;

use super::Model;
use crate::backend::{Backend, TokenPool};
use crate::{Error, Result};

/// One text's sparse vector: the vocabulary entries with a weight above zero, indices ascending.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SparseVector {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

/// Options of [`Model::embed_sparse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparseOptions {
    /// One of the model's prompts, by name (as [`super::EmbedOptions::prompt`]).
    pub prompt: Option<String>,
    /// Keep only the largest `n` weights of each vector (sentence-transformers' `max_active_dims`).
    pub max_active_dims: Option<usize>,
    /// Texts per forward pass (fewer where their logits would pass `logits_bytes`).
    pub batch_size: usize,
    /// The most bytes of vocabulary logits one pass holds on the device (and at most the backend's largest
    /// tensor): a batch's texts are fewer, and a longer text's tokens are taken a piece at a time.
    pub logits_bytes: usize,
}

impl Default for SparseOptions {
    fn default() -> Self {
        SparseOptions { prompt: None, max_active_dims: None, batch_size: 32, logits_bytes: SPARSE_LOGITS_BYTES }
    }
}

/// Options of [`Model::embed_tokens`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenOptions {
    /// One of the model's prompts, by name (as [`super::EmbedOptions::prompt`]); its tokens are among the vectors, as in
    /// sentence-transformers.
    pub prompt: Option<String>,
    /// L2-normalise each token's vector (late-interaction scoring takes cosine similarities).
    pub normalize: bool,
    pub batch_size: usize,
}

impl Default for TokenOptions {
    fn default() -> Self {
        TokenOptions { prompt: None, normalize: false, batch_size: 32 }
    }
}

/// One text's per-token vectors, special tokens and the prompt's tokens included (as the model saw the text).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TokenVectors {
    pub ids: Vec<u32>,
    pub tokens: Vec<String>,
    /// Character offsets `[start, end)` into the text given (without the prompt); `(0, 0)` for special tokens and
    /// the prompt's.
    pub offsets: Vec<(usize, usize)>,
    /// The width of each vector.
    pub dims: usize,
    /// `ids.len() × dims` values, token after token.
    pub vectors: Vec<f32>,
}

/// [`SparseOptions::logits_bytes`]'s default: 64 MiB holds the logits of a 512-token text of BERT's 30,522-word
/// vocabulary.
pub const SPARSE_LOGITS_BYTES: usize = 64 << 20;

/// One pooled row of logits to a sparse vector: `log1p(relu(x))` (twice for `log1p_relu`), the entries above zero,
/// the largest `max_active` of them where asked.
fn sparse_of(row: &[f32], log1p_relu: bool, max_active: Option<usize>) -> SparseVector {
    let weight = |x: f32| {
        let w = x.max(0.0).ln_1p();
        if log1p_relu { w.ln_1p() } else { w }
    };
    let mut kept: Vec<(u32, f32)> =
        row.iter().enumerate().map(|(i, &x)| (i as u32, weight(x))).filter(|&(_, w)| w > 0.0).collect();
    if let Some(k) = max_active.filter(|&k| k < kept.len()) {
        kept.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        kept.truncate(k);
        kept.sort_by_key(|&(i, _)| i);
    }
    SparseVector { indices: kept.iter().map(|&(i, _)| i).collect(), values: kept.iter().map(|&(_, w)| w).collect() }
}

impl<B: Backend> Model<B> {
    /// Whether this model gives sparse vectors, and how: its SpladePooling's `log1p_relu`, or SPLADE's defaults
    /// (`max`, `relu`) for a masked-LM checkpoint without sentence-transformers' modules. A model whose modules make
    /// dense vectors is refused, as is one without a masked-LM head.
    fn splade(&self) -> Result<bool> {
        let log1p_relu = match &self.config.sentence {
            Some(s) if s.splade().is_some() => s.splade().unwrap_or(false),
            Some(s) if !s.modules.is_empty() => {
                return Err(Error::Input(
                    "this model's modules.json makes dense vectors (a Pooling module, no SpladePooling): use embed".into(),
                ))
            }
            _ => false,
        };
        self.heads.masked_lm().map_err(|e| {
            Error::Input(format!("sparse vectors are the masked-LM head's logits, and this model has none: {e}"))
        })?;
        Ok(log1p_relu)
    }

    /// Refuses `embed` on a sparse encoder, whose vectors come from [`Self::embed_sparse`].
    pub(super) fn check_dense(&self) -> Result<()> {
        match self.config.sentence.as_ref().and_then(|s| s.splade()) {
            Some(_) => Err(Error::Input(
                "this is a sparse encoder (its modules.json ends in SpladePooling): its vectors come from embed-sparse \
                 (embedSparse in JavaScript)"
                    .into(),
            )),
            None => Ok(()),
        }
    }

    /// What [`Self::embed_sparse`] checks before any text: the options, the model (a sparse encoder, or a
    /// masked-LM checkpoint) and the prompt. The CLI and the browser call it before their first input, so a call
    /// that cannot work is refused at once. Returns whether the activation is `log1p_relu`.
    pub fn check_sparse(&self, opts: &SparseOptions) -> Result<bool> {
        if opts.batch_size == 0 {
            return Err(Error::Input("batch size must be at least 1".into()));
        }
        if opts.max_active_dims == Some(0) {
            return Err(Error::Input("max_active_dims must be at least 1".into()));
        }
        let log1p_relu = self.splade()?;
        self.prompt_named(opts.prompt.as_deref())?;
        Ok(log1p_relu)
    }

    /// One SPLADE vector per text, in order (see the module documentation).
    pub async fn embed_sparse(&self, texts: &[&str], opts: &SparseOptions) -> Result<Vec<SparseVector>> {
        let log1p_relu = self.check_sparse(opts)?;
        let head = self.heads.masked_lm()?;
        let be = &self.backend;
        let encoded = self.encode_with_prompt(texts, opts.prompt.as_deref())?;
        let v = self.config.vocab_size;
        // The token rows of logits one pass holds: whole texts together where the longest fits, else one text a
        // piece of its tokens at a time.
        let cap = (opts.logits_bytes.min(be.max_tensor_bytes()) / (4 * v)).max(1);
        let longest = encoded.iter().map(|e| e.len()).max().unwrap_or(1).max(1);
        let rows_per_pass = (cap / longest).clamp(1, opts.batch_size);
        let mut out = vec![SparseVector::default(); encoded.len()];
        for (rows, batch) in self.batches_by_length(&encoded, rows_per_pass)? {
            let (b, t) = (batch.b, batch.t);
            if t == 0 {
                return Err(Error::Input("an empty text has no tokens to take a sparse vector of".into()));
            }
            let mask = be.mask(&batch)?; // (B, T)
            let hidden = self.bert.forward_with_mask(be, &batch, &mask)?; // (B*T, H)
            let decoder = self.bert.embeddings.word_embeddings();
            let maxima = if b * t <= cap {
                let logits = head.forward_all(be, &hidden, decoder)?; // (B*T, V)
                be.read(&be.pool_tokens(&logits, &mask, b, t, TokenPool::Max)?).await? // (B, V)
            } else {
                // One long text (B = 1, no padding): the maximum of each piece's maxima.
                let mut best = vec![f32::NEG_INFINITY; v];
                for start in (0..t).step_by(cap) {
                    let piece: Vec<u32> = (start as u32..(start + cap).min(t) as u32).collect();
                    let n = piece.len();
                    let logits = head.forward_rows(be, &hidden, &piece, decoder)?; // (n, V)
                    let ones = be.input(&vec![1.0; n], 1, n)?;
                    let m = be.read(&be.pool_tokens(&logits, &ones, 1, n, TokenPool::Max)?).await?;
                    best.iter_mut().zip(m).for_each(|(a, x)| *a = a.max(x));
                }
                best
            };
            for (&i, row) in rows.iter().zip(maxima.chunks_exact(v)) {
                out[i] = sparse_of(row, log1p_relu, opts.max_active_dims);
            }
        }
        Ok(out)
    }

    /// One vector per token of each text, in order: the encoder's last hidden state as sentence-transformers'
    /// `token_embeddings` gives it (its prompt and `max_seq_length` applied; its Pooling, Dense and Normalize not).
    pub async fn embed_tokens(&self, texts: &[&str], opts: &TokenOptions) -> Result<Vec<TokenVectors>> {
        if opts.batch_size == 0 {
            return Err(Error::Input("batch size must be at least 1".into()));
        }
        let be = &self.backend;
        let prompt_chars = self.prompt_named(opts.prompt.as_deref())?.map_or(0, |p| p.chars().count());
        let encoded = self.encode_with_prompt(texts, opts.prompt.as_deref())?;
        let h = self.config.hidden_size;
        let mut out: Vec<Option<TokenVectors>> = vec![None; encoded.len()];
        for (rows, batch) in self.batches_by_length(&encoded, opts.batch_size)? {
            if batch.t == 0 {
                return Err(Error::Input("an empty text has no tokens".into()));
            }
            let hidden = self.bert.forward(be, &batch)?; // (B*T, H)
            let real: Vec<u32> = rows
                .iter()
                .enumerate()
                .flat_map(|(b, &i)| (0..encoded[i].len()).map(move |t| (b * batch.t + t) as u32))
                .collect();
            let flat = be.read(&be.gather_rows(&hidden, &real)?).await?; // (Σ tokens, H)
            let mut at = 0;
            for &i in &rows {
                let e = &encoded[i];
                let n = e.len();
                let mut vectors = flat[at * h..(at + n) * h].to_vec();
                at += n;
                if opts.normalize {
                    vectors.chunks_exact_mut(h).for_each(crate::heads::l2_normalize);
                }
                let offsets = e
                    .offsets
                    .iter()
                    .zip(&e.special_tokens_mask)
                    .map(|(&(s, end), &special)| match special == 0 && s >= prompt_chars && end > s {
                        true => (s - prompt_chars, end - prompt_chars),
                        false => (0, 0),
                    })
                    .collect();
                let tokens =
                    e.ids.iter().map(|&id| self.tokenizer.id_to_token(id).unwrap_or_default()).collect();
                out[i] = Some(TokenVectors { ids: e.ids.clone(), tokens, offsets, dims: h, vectors });
            }
        }
        Ok(out.into_iter().map(|t| t.unwrap_or(TokenVectors {
            ids: Vec::new(), tokens: Vec::new(), offsets: Vec::new(), dims: h, vectors: Vec::new(),
        })).collect())
    }
}
