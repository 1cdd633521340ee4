//! The head tasks on a loaded [`Model`] (and, dispatched by backend, on `crate::engine::Engine`): text in, pipeline-style
//! output structs out. Each runs one forward pass over the batch, one head on the device, and one read-back of the
//! head's small output; the rest is host-side post-processing in the head modules.
//!
//! The `*_logits` methods stop before post-processing; the tests compare them with PyTorch.

use super::Model;
use crate::backend::Backend;
use crate::heads::classifier::{check_pair_allowed, LabelScore, SequenceClassifier};
use crate::heads::discriminator::{self, ReplacedToken};
use crate::heads::masked_lm::{fill_mask_postprocess, mask_positions, FillMaskPrediction, NextSentence};
use crate::heads::qa::{self, Answer};
use crate::heads::token_classifier::{Aggregation, TokenEntity};
use crate::tokenizer::{Batch, Encoded};
use crate::{Error, Result};

/// A text pair of a single-text task: an error naming the task.
fn single_text(task: &str, pair: Option<&str>) -> Result<()> {
    if pair.is_some() {
        return Err(Error::Input(format!(
            "{task} takes a single text, but a text_pair was given; send {{\"text\": ...}} alone"
        )));
    }
    Ok(())
}

/// `top_k` of a classification: at least 1, or `None` for every label.
pub(crate) fn check_top_k(top_k: Option<usize>) -> Result<()> {
    if top_k == Some(0) {
        return Err(Error::Input("top-k must be at least 1 (or unset, for every label)".into()));
    }
    Ok(())
}

/// One document of a [`Model::rerank`]: its index in the input and the cross-encoder's relevance logit.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RankedDocument {
    pub index: usize,
    pub score: f32,
}

/// Whether config.json's `architectures` names `arch` (`BertFor…`) or its twin in another family (`DistilBertFor…`,
/// `RobertaFor…`, `XLMRobertaFor…`, `ElectraFor…`, `AlbertFor…`): used to refuse running the sequence classifier of a token-classification
/// checkpoint (both store `classifier.*`) and vice versa.
pub(super) fn names_architecture(model_archs: &[String], arch: &str) -> bool {
    let Some(task) = arch.strip_prefix("Bert") else { return model_archs.iter().any(|a| a == arch) };
    model_archs.iter().any(|a| {
        ["Bert", "DistilBert", "Roberta", "XLMRoberta", "Electra", "Albert", "ModernBert"]
            .iter()
            .any(|p| a.strip_prefix(p) == Some(task))
    })
}

impl<B: Backend> Model<B> {
    /// The encodings in consecutive groups that one forward pass each can take (see [`Model::fitting_groups`]);
    /// `extra_bytes[i]`: the head output of encoding `i` in bytes.
    fn groups(&self, encoded: &[Encoded], extra_bytes: &[usize]) -> Result<Vec<std::ops::Range<usize>>> {
        if encoded.is_empty() {
            return Err(Error::Input("no input texts".into()));
        }
        let lens: Vec<usize> = encoded.iter().map(Encoded::len).collect();
        self.fitting_groups(&lens, extra_bytes, usize::MAX)
    }

    /// Pads one group, runs the encoder: the batch and its last hidden state `(B*T, H)`.
    fn encode_forward(&self, encoded: &[Encoded]) -> Result<(Batch, B::Tensor)> {
        if encoded.is_empty() {
            return Err(Error::Input("no input texts".into()));
        }
        let batch = self.tokenizer.batch(encoded);
        let hidden = self.bert.forward(&self.backend, &batch)?; // (B*T, H)
        Ok((batch, hidden))
    }

    /// Vocabulary logits `(Σ masks, V)` at the given mask positions of each encoding, texts in order.
    pub async fn fill_mask_logits(&self, encoded: &[Encoded], positions: &[Vec<usize>]) -> Result<Vec<f32>> {
        let head = self.heads.masked_lm()?;
        let row_bytes = 4 * self.config.vocab_size;
        let extra: Vec<usize> = positions.iter().map(|p| p.len().saturating_mul(row_bytes)).collect();
        let mut out = Vec::new();
        for r in self.groups(encoded, &extra)? {
            let (batch, hidden) = self.encode_forward(&encoded[r.clone()])?;
            let rows: Vec<u32> = positions[r]
                .iter()
                .enumerate()
                .flat_map(|(b, ps)| ps.iter().map(move |&p| (b * batch.t + p) as u32))
                .collect();
            let logits = head.forward_rows(&self.backend, &hidden, &rows, self.bert.embeddings.word_embeddings())?;
            out.extend(self.backend.read(&logits).await?); // (rows, V)
        }
        Ok(out)
    }

    /// Fill-mask: per text, one list of the `top_k` best tokens per mask token, best first.
    pub async fn fill_mask(&self, texts: &[&str], top_k: usize) -> Result<Vec<Vec<Vec<FillMaskPrediction>>>> {
        if top_k == 0 {
            return Err(Error::Input("top-k must be at least 1".into()));
        }
        self.heads.masked_lm()?;
        let encoded = self.encode_texts(texts)?;
        let positions = encoded
            .iter()
            .zip(texts)
            .map(|(e, t)| mask_positions(&self.tokenizer, &e.ids, t))
            .collect::<Result<Vec<_>>>()?;
        let logits = self.fill_mask_logits(&encoded, &positions).await?;
        let v = self.config.vocab_size;
        let mut offset = 0;
        let mut out = Vec::with_capacity(texts.len());
        for (e, ps) in encoded.iter().zip(&positions) {
            let n = ps.len() * v;
            out.push(fill_mask_postprocess(&self.tokenizer, &e.ids, ps, &logits[offset..offset + n], v, top_k)?);
            offset += n;
        }
        Ok(out)
    }

    /// Next-sentence logits `(2)` per pair: index 0 "B follows A".
    pub async fn next_sentence_logits(&self, encoded: &[Encoded]) -> Result<Vec<Vec<f32>>> {
        let (pooler, nsp) = self.heads.next_sentence()?;
        let mut out = Vec::with_capacity(encoded.len());
        for r in self.groups(encoded, &[])? {
            let (batch, hidden) = self.encode_forward(&encoded[r])?;
            let pooled = pooler.forward(&self.backend, &hidden, batch.b, batch.t)?; // (B, H)
            let logits = self.backend.read(&nsp.forward(&self.backend, &pooled)?).await?; // (B, 2)
            out.extend(logits.chunks_exact(2).map(<[f32]>::to_vec));
        }
        Ok(out)
    }

    /// `{is_next}` per `(a, b)` pair: the probability that `b` follows `a`.
    pub async fn next_sentence(&self, pairs: &[(&str, &str)]) -> Result<Vec<NextSentence>> {
        self.heads.next_sentence()?;
        let encoded = pairs.iter().map(|(a, b)| self.tokenizer.encode(a, Some(b))).collect::<Result<Vec<_>>>()?;
        Ok(self.next_sentence_logits(&encoded).await?.iter().map(|l| NextSentence::from_logits(l)).collect())
    }

    /// The tasks this model can run besides `embed`, by their JavaScript names: "fillMask", "nextSentence",
    /// "classify" (the checkpoint's classifier or a trained head), "rerank" (a one-output classifier: a cross-encoder),
    /// "tokenClassify", "answer", "replacedTokens" (an ELECTRA discriminator), "zeroShot" (a sequence classifier with
    /// an entailment label: an NLI checkpoint, [`super::zero_shot`]). Mirrors the checks the
    /// tasks make, so a task listed here does not fail for want of its head.
    pub fn available_tasks(&self) -> Vec<&'static str> {
        let archs = &self.config.architectures;
        let mut out = Vec::new();
        if self.heads.masked_lm().is_ok() {
            out.push("fillMask");
        }
        if self.heads.next_sentence().is_ok() {
            out.push("nextSentence");
        }
        if self.has_head()
            || (self.heads.sequence_classifier().is_ok() && !names_architecture(archs, "BertForTokenClassification"))
        {
            out.push("classify");
        }
        if self.cross_encoder().is_ok()
            && !names_architecture(archs, "BertForTokenClassification")
        {
            out.push("rerank");
        }
        if self.nli_labels().is_ok() {
            out.push("zeroShot");
        }
        if self.heads.token_classifier().is_ok() && !names_architecture(archs, "BertForSequenceClassification") {
            out.push("tokenClassify");
        }
        if self.heads.qa().is_ok() {
            out.push("answer");
        }
        if self.heads.discriminator().is_ok() {
            out.push("replacedTokens");
        }
        out
    }

    /// Sequence-classification logits `(num_labels)` per encoding.
    pub async fn classify_logits(&self, encoded: &[Encoded]) -> Result<Vec<Vec<f32>>> {
        let head = self.heads.sequence_classifier()?;
        let mut out = Vec::with_capacity(encoded.len());
        for r in self.groups(encoded, &[])? {
            let (batch, hidden) = self.encode_forward(&encoded[r])?;
            let logits = self.backend.read(&head.forward(&self.backend, &hidden, &batch)?).await?; // (B, L)
            out.extend(logits.chunks_exact(head.labels.len()).map(<[f32]>::to_vec));
        }
        Ok(out)
    }

    /// Sequence classification of texts or pairs: `{label, score}` best first, the `top_k` best or all.
    /// A head trained with `train_head` (or loaded with `load_head`) takes precedence over the checkpoint's.
    pub async fn classify(&self, inputs: &[(&str, Option<&str>)], top_k: Option<usize>) -> Result<Vec<Vec<LabelScore>>> {
        check_top_k(top_k)?;
        if self.has_head() {
            let mut encoded = Vec::with_capacity(inputs.len());
            for (text, pair) in inputs {
                if pair.is_some() {
                    return Err(Error::Input("a trained head classifies single texts; send {\"text\": ...} alone".into()));
                }
                encoded.push(self.tokenizer.encode(text, None)?);
            }
            return self.classify_with_head(&encoded, top_k).await;
        }
        if names_architecture(&self.config.architectures, "BertForTokenClassification") {
            return Err(Error::Input(
                "this is a token-classification checkpoint (architectures: BertForTokenClassification): use `ner`"
                    .into(),
            ));
        }
        let head = self.heads.sequence_classifier()?;
        let mut encoded = Vec::with_capacity(inputs.len());
        for (text, pair) in inputs {
            check_pair_allowed(&self.config, pair.is_some(), "classify")?;
            encoded.push(self.tokenizer.encode(text, *pair)?);
        }
        let logits = self.classify_logits(&encoded).await?;
        Ok(logits.iter().map(|l| head.postprocess(l, top_k)).collect())
    }

    /// The checkpoint's classifier if it is a cross-encoder (one output, a relevance score), else the error saying what
    /// it is: what `rerank` needs, `available_tasks` lists, and the CLI checks at load.
    pub fn cross_encoder(&self) -> Result<&SequenceClassifier<B>> {
        let head = self.heads.sequence_classifier().map_err(|e| {
            Error::Input(format!("rerank needs a cross-encoder (a sequence classifier with one output): {e}"))
        })?;
        if head.labels.len() != 1 {
            return Err(Error::Input(format!(
                "rerank needs a cross-encoder, whose classifier has one output (a relevance score); this one has {} \
                 labels ({}): use classify",
                head.labels.len(),
                head.labels.join(", ")
            )));
        }
        Ok(head)
    }

    /// Reranks `documents` for `query` with a cross-encoder (a sequence classifier with one output, as
    /// sentence-transformers' `CrossEncoder` saves them): each `(query, document)` pair is scored by that output's
    /// logit, best first, the `top_k` best or all. Ties keep the input order.
    pub async fn rerank(&self, query: &str, documents: &[&str], top_k: Option<usize>) -> Result<Vec<RankedDocument>> {
        check_top_k(top_k)?;
        self.cross_encoder()?;
        check_pair_allowed(&self.config, true, "rerank")?;
        if documents.is_empty() {
            return Ok(Vec::new());
        }
        let encoded = documents.iter().map(|d| self.tokenizer.encode(query, Some(d))).collect::<Result<Vec<_>>>()?;
        let logits = self.classify_logits(&encoded).await?;
        let mut ranked: Vec<RankedDocument> =
            logits.iter().enumerate().map(|(index, l)| RankedDocument { index, score: l[0] }).collect();
        // Stable: equal scores keep the documents' order.
        ranked.sort_by(|a, b| b.score.partial_cmp(&a.score).unwrap_or(std::cmp::Ordering::Equal));
        ranked.truncate(top_k.unwrap_or(usize::MAX));
        Ok(ranked)
    }

    /// Token-classification logits `(len, num_labels)` per encoding, padding dropped.
    pub async fn token_logits(&self, encoded: &[Encoded]) -> Result<Vec<Vec<f32>>> {
        let head = self.heads.token_classifier()?;
        let l = head.labels.len();
        let mut out = Vec::with_capacity(encoded.len());
        for r in self.groups(encoded, &[])? {
            let group = &encoded[r];
            let (batch, hidden) = self.encode_forward(group)?;
            let logits = self.backend.read(&head.forward(&self.backend, &hidden)?).await?; // (B*T, L)
            out.extend(group.iter().enumerate().map(|(b, e)| logits[b * batch.t * l..(b * batch.t + e.len()) * l].to_vec()));
        }
        Ok(out)
    }

    /// Token classification (NER): per text, the entities (see [`Aggregation`]).
    pub async fn token_classify(&self, inputs: &[(&str, Option<&str>)], aggregation: Aggregation)
        -> Result<Vec<Vec<TokenEntity>>> {
        if names_architecture(&self.config.architectures, "BertForSequenceClassification") {
            return Err(Error::Input(
                "this is a sequence-classification checkpoint (architectures: BertForSequenceClassification): use \
                 `classify`"
                    .into(),
            ));
        }
        let head = self.heads.token_classifier()?;
        let mut encoded = Vec::with_capacity(inputs.len());
        for (text, pair) in inputs {
            single_text("ner", *pair)?;
            encoded.push(self.tokenizer.encode(text, None)?);
        }
        let logits = self.token_logits(&encoded).await?;
        inputs
            .iter()
            .zip(&encoded)
            .zip(&logits)
            .map(|(((text, _), e), l)| head.postprocess(&self.tokenizer, text, e, l, aggregation))
            .collect()
    }

    /// QA start/end logits per window, interleaved `(len, 2)`, padding dropped.
    pub async fn qa_logits(&self, windows: &[Encoded]) -> Result<Vec<Vec<f32>>> {
        let head = self.heads.qa()?;
        let mut out = Vec::with_capacity(windows.len());
        for r in self.groups(windows, &[])? {
            let group = &windows[r];
            let (batch, hidden) = self.encode_forward(group)?;
            let logits = self.backend.read(&head.forward(&self.backend, &hidden)?).await?; // (B*T, 2)
            out.extend(group.iter().enumerate().map(|(b, e)| logits[b * batch.t * 2..(b * batch.t + e.len()) * 2].to_vec()));
        }
        Ok(out)
    }

    /// ELECTRA's replaced-token logits, one per token of each encoding (padding dropped): positive where the
    /// discriminator thinks the token was replaced.
    pub async fn replaced_token_logits(&self, encoded: &[Encoded]) -> Result<Vec<Vec<f32>>> {
        let head = self.heads.discriminator()?;
        let mut out = Vec::with_capacity(encoded.len());
        for r in self.groups(encoded, &[])? {
            let group = &encoded[r];
            let (batch, hidden) = self.encode_forward(group)?;
            let logits = self.backend.read(&head.forward(&self.backend, &hidden)?).await?; // (B*T, 1)
            out.extend(group.iter().enumerate().map(|(b, e)| logits[b * batch.t..b * batch.t + e.len()].to_vec()));
        }
        Ok(out)
    }

    /// Replaced-token detection with an ELECTRA discriminator: per text (or pair), every token but the special
    /// ones with the probability that it was replaced.
    pub async fn replaced_tokens(&self, inputs: &[(&str, Option<&str>)]) -> Result<Vec<Vec<ReplacedToken>>> {
        self.heads.discriminator()?;
        let encoded = inputs.iter().map(|(a, b)| self.tokenizer.encode(a, *b)).collect::<Result<Vec<_>>>()?;
        let logits = self.replaced_token_logits(&encoded).await?;
        encoded.iter().zip(&logits).map(|(e, l)| discriminator::postprocess(e, l)).collect()
    }

    /// Extractive QA: the best span of `context` answering `question`, all windows of a long context in one batch.
    pub async fn answer(&self, question: &str, context: &str) -> Result<Answer> {
        self.heads.qa()?;
        let (len, stride) = qa::window_params(&self.tokenizer, &self.config);
        let windows = qa::windows(&self.tokenizer, question, context, len, stride)?;
        let logits = self.qa_logits(&windows).await?;
        qa::decode(context, &windows, &logits)
    }
}
