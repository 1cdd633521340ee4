//! Extractive question answering (`BertForQuestionAnswering`): `qa_outputs` `(2, H)` gives a start and an end logit
//! per token; on the host the best span of the context.
//!
//! Decoding, as the former transformers `QuestionAnsweringPipeline` (removed in transformers 5):
//! - the input is `[CLS] question [SEP] context [SEP]` (RoBERTa: `<s> question </s></s> context </s>`: the
//!   tokenizer's own pair template); a context too long for one window of `max_seq_len` tokens is
//!   cut into overlapping windows (`doc_stride` tokens of overlap), the question repeated in each;
//! - in each window `p_start = softmax(start_logits)` and `p_end = softmax(end_logits)` over the context tokens only;
//! - the best span maximises `p_start[s] · p_end[e]` over context tokens with `s ≤ e < s + MAX_ANSWER_LEN`;
//! - the best span over all windows wins; its `start`/`end` are character offsets into the context.

use serde::Serialize;

use super::masked_lm::BertPredictionHeadTransform;
use super::{softmax, Linear};
use crate::backend::{Activation, Backend};
use crate::config::BertConfig;
use crate::tokenizer::{Encoded, Tokenizer};
use crate::weights::Weights;
use crate::{Error, Result};

/// Longest answer in tokens (the pipeline's `max_answer_len` default).
pub const MAX_ANSWER_LEN: usize = 15;
/// Upper bound of a window in tokens (the pipeline's `max_seq_len` default); smaller models use their own limit.
pub const MAX_SEQ_LEN: usize = 384;
/// Upper bound of the overlap between windows (the pipeline's `doc_stride` default), at most half a window.
pub const DOC_STRIDE: usize = 128;

/// `{answer, score, start, end}`: the answer text, `p_start·p_end`, and its character span in the context.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Answer {
    pub answer: String,
    pub score: f32,
    pub start: usize,
    pub end: usize,
}

/// `qa_outputs` of `BertForQuestionAnswering`; ModernBERT's `head` then `classifier` (`ModernBertForQuestionAnswering`).
pub struct QaHead<B: Backend> {
    pub head: Option<BertPredictionHeadTransform<B>>,
    pub qa_outputs: Linear<B>, // (2, H): row 0 start, row 1 end
}

impl<B: Backend> QaHead<B> {
    /// `w` at the root of the checkpoint (`qa_outputs.*`; ModernBERT's `head.*` and `classifier.*`, read as a span
    /// head only when config.json names `ModernBertForQuestionAnswering`: its other classifiers have the same names).
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let modern = cfg.modernbert.is_some();
        if modern && !cfg.architectures.iter().any(|a| a == "ModernBertForQuestionAnswering") {
            return Err(Error::Weights(format!(
                "this checkpoint has no question-answering head: use a ModernBertForQuestionAnswering checkpoint \
                 (architectures: {:?})",
                cfg.architectures
            )));
        }
        let w = w.pp(if modern { "classifier" } else { "qa_outputs" });
        if !w.contains("weight") {
            return Err(Error::Weights(format!(
                "this checkpoint has no question-answering head (`{}.weight` is missing): use a \
                 {}ForQuestionAnswering checkpoint",
                w.prefix(),
                cfg.family.class_prefix()
            )));
        }
        let head = BertPredictionHeadTransform::before_classifier(&w.root(), cfg, backend)?;
        Ok(QaHead { head, qa_outputs: Linear::load(&w, 2, cfg.hidden_size, backend)? })
    }

    /// hidden `(B*T, H)` → `(B*T, 2)`: column 0 the start logit, column 1 the end logit.
    pub fn forward(&self, backend: &B, hidden: &B::Tensor) -> Result<B::Tensor> {
        match &self.head {
            Some(head) => self.qa_outputs.forward(backend, &head.forward(backend, hidden)?, Activation::None),
            None => self.qa_outputs.forward(backend, hidden, Activation::None),
        }
    }
}

/// The window length and overlap for a model: `min(384, max_length)` tokens, overlap `min(window/2, 128)`.
pub fn window_params(tok: &Tokenizer, cfg: &BertConfig) -> (usize, usize) {
    let max_seq_len = MAX_SEQ_LEN.min(tok.max_length()).min(cfg.max_position_embeddings);
    (max_seq_len, DOC_STRIDE.min(max_seq_len / 2))
}

/// Tokenizes `question` + `context` into windows of at most `max_seq_len` tokens, `[CLS] question [SEP] part of
/// the context [SEP]`, consecutive parts overlapping by `stride` tokens: the windows of transformers'
/// `tokenizer(question, context, truncation="only_second", max_length=max_seq_len, stride=stride,
/// return_overflowing_tokens=True)`.
///
/// The windows are assembled here rather than by the `tokenizers` crate's own overflow handling: in 0.23.2 its
/// truncation stops tokenizing a long text early (`tokenize_with_limit`), which silently drops every window after
/// the second.
pub fn windows(tok: &Tokenizer, question: &str, context: &str, max_seq_len: usize, stride: usize)
    -> Result<Vec<Encoded>> {
    if question.trim().is_empty() {
        return Err(Error::Input("qa: the question is empty; send {\"question\": ..., \"context\": ...}".into()));
    }
    if context.trim().is_empty() {
        return Err(Error::Input("qa: the context is empty; send the text to find the answer in as `context`".into()));
    }
    let mut inner = tok.inner().clone();
    inner
        .with_truncation(None)
        .map_err(|e| Error::Input(format!("qa: cannot tokenize without truncation: {e}")))?;
    let encode = |text: &str| {
        inner
            .encode_char_offsets(text, false)
            .map_err(|e| Error::Input(format!("qa: cannot tokenize the question or context: {e}")))
    };
    let (q, c) = (encode(question)?, encode(context)?);
    if c.is_empty() {
        return Err(Error::Input("qa: the context has no tokens (only whitespace or control characters?)".into()));
    }
    let frame = PairFrame::of(tok)?;
    // `[CLS] question [SEP] ... [SEP]`: the context needs more than `stride` tokens of room per window, or the
    // windows would not advance.
    let room = max_seq_len.saturating_sub(q.len() + frame.specials());
    if room <= stride {
        return Err(Error::Input(format!(
            "qa: the question is too long ({} tokens) for this model's windows of {max_seq_len} tokens; shorten it",
            q.len()
        )));
    }
    // Window ranges over the context tokens, as `tokenizers::Encoding::truncate` cuts them (direction right).
    let mut ranges = Vec::new();
    let mut start = 0;
    loop {
        let stop = (start + room).min(c.len());
        ranges.push((start, stop));
        if stop == c.len() {
            break;
        }
        start += room - stride;
    }
    let specials = |e: &mut Encoded, ts: &[(u32, String, u32)]| {
        for (id, token, type_id) in ts {
            e.ids.push(*id);
            e.type_ids.push(*type_id);
            e.tokens.push(token.clone());
            e.offsets.push((0, 0));
            e.special_tokens_mask.push(1);
            e.sequence_ids.push(None);
            e.word_ids.push(None);
        }
    };
    let part = |e: &mut Encoded, src: &tokenizers::Encoding, (a, b): (usize, usize), seq: usize| {
        e.ids.extend_from_slice(&src.get_ids()[a..b]);
        e.type_ids.extend(std::iter::repeat_n(frame.type_ids[seq], b - a));
        e.tokens.extend_from_slice(&src.get_tokens()[a..b]);
        e.offsets.extend_from_slice(&src.get_offsets()[a..b]);
        e.special_tokens_mask.extend(std::iter::repeat_n(0, b - a));
        e.sequence_ids.extend(std::iter::repeat_n(Some(seq), b - a));
        e.word_ids.extend_from_slice(&src.get_word_ids()[a..b]);
    };
    Ok(ranges
        .into_iter()
        .map(|r| {
            let mut e = Encoded::default();
            specials(&mut e, &frame.before);
            part(&mut e, &q, (0, q.len()), 0);
            specials(&mut e, &frame.between);
            part(&mut e, &c, r, 1);
            specials(&mut e, &frame.after);
            e.truncated = r != (0, c.len());
            e
        })
        .collect())
}

/// The special tokens the tokenizer's pair template puts around and between two texts, each `(id, token, type id)`,
/// and the type id of each text's tokens: `[CLS] A [SEP] B [SEP]` with types 0 and 1 for BERT,
/// `<s> A </s></s> B </s>` all of type 0 for RoBERTa. Read from the encoding of a probe pair, so that the windows
/// are framed exactly as the tokenizer frames a pair.
struct PairFrame {
    before: Vec<(u32, String, u32)>,
    between: Vec<(u32, String, u32)>,
    after: Vec<(u32, String, u32)>,
    type_ids: [u32; 2],
}

impl PairFrame {
    fn of(tok: &Tokenizer) -> Result<PairFrame> {
        let probe = tok.encode("a", Some("b"))?;
        let seq = &probe.sequence_ids;
        let first = |s: usize| seq.iter().position(|&x| x == Some(s));
        let last = |s: usize| seq.iter().rposition(|&x| x == Some(s));
        let (Some(a0), Some(a1), Some(b0), Some(b1)) = (first(0), last(0), first(1), last(1)) else {
            return Err(Error::Tokenizer("qa: the tokenizer does not encode a text pair as two sequences".into()));
        };
        let pick = |range: std::ops::Range<usize>| -> Vec<(u32, String, u32)> {
            range.map(|i| (probe.ids[i], probe.tokens[i].clone(), probe.type_ids[i])).collect()
        };
        Ok(PairFrame {
            before: pick(0..a0),
            between: pick(a1 + 1..b0),
            after: pick(b1 + 1..probe.len()),
            type_ids: [probe.type_ids[a0], probe.type_ids[b0]],
        })
    }

    fn specials(&self) -> usize {
        self.before.len() + self.between.len() + self.after.len()
    }
}

/// The best span of one window: `(score, start token, end token)`, or `None` if the window has no context token.
/// `start_logits`/`end_logits` have one entry per token of `enc`.
pub fn best_span(enc: &Encoded, start_logits: &[f32], end_logits: &[f32]) -> Option<(f64, usize, usize)> {
    let ctx: Vec<usize> = (0..enc.len()).filter(|&i| enc.sequence_ids[i] == Some(1)).collect();
    if ctx.is_empty() {
        return None;
    }
    // Softmax over the context tokens only: the question, [CLS] and [SEP] cannot be (part of) an answer.
    let ps = softmax(&ctx.iter().map(|&i| start_logits[i]).collect::<Vec<_>>());
    let pe = softmax(&ctx.iter().map(|&i| end_logits[i]).collect::<Vec<_>>());
    let mut best: Option<(f64, usize, usize)> = None;
    for s in 0..ctx.len() {
        // Context tokens of a window are contiguous, so `e - s` counts tokens.
        for e in s..ctx.len().min(s + MAX_ANSWER_LEN) {
            let score = ps[s] as f64 * pe[e] as f64;
            if best.is_none_or(|(b, _, _)| score > b) {
                best = Some((score, ctx[s], ctx[e]));
            }
        }
    }
    best
}

/// The best answer over all windows. `logits` holds, per window, `(len, 2)` start/end pairs (padding dropped).
pub fn decode(context: &str, windows: &[Encoded], logits: &[Vec<f32>]) -> Result<Answer> {
    let mut best: Option<(f64, usize, usize, usize)> = None; // (score, window, start token, end token)
    for (w, (enc, l)) in windows.iter().zip(logits).enumerate() {
        if l.len() != 2 * enc.len() {
            return Err(Error::Input(format!("qa: {} logits for a window of {} tokens", l.len(), enc.len())));
        }
        let start: Vec<f32> = l.iter().step_by(2).copied().collect();
        let end: Vec<f32> = l.iter().skip(1).step_by(2).copied().collect();
        if let Some((score, s, e)) = best_span(enc, &start, &end) {
            if best.is_none_or(|(b, ..)| score > b) {
                best = Some((score, w, s, e));
            }
        }
    }
    let (score, w, s, e) = best.ok_or_else(|| {
        Error::Input("qa: the context produced no tokens (only whitespace or control characters?)".into())
    })?;
    let (start, end) = (windows[w].offsets[s].0, windows[w].offsets[e].1);
    Ok(Answer {
        answer: context.chars().skip(start).take(end.saturating_sub(start)).collect(),
        score: score as f32,
        start,
        end,
    })
}
