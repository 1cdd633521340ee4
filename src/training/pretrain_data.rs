//! Pre-training data as the BERT paper defines it (Devlin et al. 2019, §3.1 and appendix A.1): a corpus of
//! documents → masked rows for masked-LM, with next-sentence-prediction pairs or, for checkpoints without an NSP
//! head, single segments. Seeded with [`SplitMix64`], so a seed gives the same rows natively and in wasm32.
//!
//! # The corpus ([`parse_corpus`])
//! Plain text: one sentence (or line) per line, a blank line between documents. JSON lines: one document per line,
//! `{"text": ...}` (other keys ignored), the text's lines its sentences. Blank lines inside a document are skipped.
//! Lines over [`MAX_LINE_CHARS`] characters and JSON lines over [`MAX_JSONL_LINE_BYTES`] bytes are refused.
//!
//! # Pairs (`nsp: true`), after Google's `create_pretraining_data.py` (`create_instances_from_document`)
//! Sentences are tokenized without special tokens and without truncation (sentences with no token are dropped,
//! then documents with no sentence). With `max_num_tokens = max_length − 3`, each document is walked from its first
//! sentence `i`:
//! 1. a chunk `i..end` takes sentences until it holds `max_num_tokens` tokens, and at least two sentences;
//! 2. A = `i..a_end`, `a_end` uniform in `i+1 ..= end−1` (Google's `rng.randint(1, len(current_chunk) − 1)`);
//! 3. a fair coin: **IsNext** (`nsp_label` 0, as transformers' `next_sentence_label`): B = `a_end..end`, the walk
//!    goes on at `end`; **NotNext** (label 1): B = sentences of a uniformly drawn *other* document from a uniform
//!    start sentence, until B holds `max_num_tokens − len(A)` tokens (at least one sentence), and the walk goes on
//!    at `a_end` (the chunk's unused sentences go back, as Google's `i -= num_unused_segments`).
//! 4. Truncation to `max_num_tokens`: one token at a time from the longer side (B on a tie), from its front or its
//!    back by a coin (Google's `truncate_seq_pair`); both sides keep at least one token.
//! 5. The row: `[CLS] A [SEP] B [SEP]`, token types 0 for `[CLS] A [SEP]` and 1 for `B [SEP]`.
//!
//! One deliberate difference: Google makes every single-sentence chunk (a document's last sentence, a
//! one-sentence document) NotNext, which tips the labels towards NotNext and ties them to the content. Here a
//! chunk always has a second sentence, so every A has a true next sentence and the coin is fair and independent of
//! A: the labels are exactly Bernoulli(½). The price: a document's last sentence is never part of an A (it is the
//! end of an IsNext B, or of other rows' random Bs), and a one-sentence document is seen only as a random B (`nsp:
//! false` uses every sentence).
//!
//! Shorter rows (Google's `short_seq_prob`): with probability [`PretrainOptions::short_seq_prob`] (0.1, as Google)
//! a chunk's target length is drawn uniformly in `2 ..= max_num_tokens` instead of `max_num_tokens`; step 1 stops
//! at that target and a NotNext B fills up to it, so the model also sees the short sequences it will be given
//! later. Google truncates to `max_num_tokens` still, and its short chunks are short because they may hold one
//! sentence; here a chunk always holds two (the difference above), so step 4 truncates a short chunk to its target
//! instead, which gives rows as short as Google's. Single segments are packed full (as transformers' `run_mlm`
//! groups texts), with no shorter rows.
//!
//! # Sentence order (`nsp` and `sentence_order`: ALBERT's `AlbertForPreTraining`)
//! As ALBERT's `create_pretraining_data.py` with `random_next_sentence` off (Lan et al. 2020, §3.2: "the same
//! technique as BERT (two consecutive segments from the same document)" as positives, "the same two consecutive
//! segments but with their order swapped" as negatives): the walk, the chunks, A = `i..a_end` and the short rows are
//! step 1 and 2's; B is always `a_end..end`, the walk goes on at `end`, and the fair coin keeps them in order
//! (`nsp_label` 0, transformers' `sentence_order_label`) or swaps them (label 1): the row is `[CLS] B [SEP] A [SEP]`,
//! token types 0 for `[CLS] B [SEP]`. Truncation (step 4) is of the row's two segments as they stand. One document
//! is enough (no random B).
//!
//! # Single segments (`nsp: false`, MLM only)
//! `[CLS] S [SEP]`, all token types 0; S packs consecutive sentences of one document while they fit in
//! `max_length − 2` tokens (a sentence never straddles two rows unless it alone is longer, in which case it is cut
//! into consecutive windows). `nsp_label` is `None`. No sentence is dropped.
//!
//! # Masking (per row, after the BERT paper; the draws as transformers' `DataCollatorForLanguageModeling`)
//! - Candidates: every token that is not one of the tokenizer's special tokens ([CLS], [SEP], [PAD], [UNK], [MASK]
//!   and any added token marked special), as transformers' `special_tokens_mask`, so they are never selected.
//! - Selection: each candidate independently with probability `mlm_probability` (a Bernoulli draw, not Google's
//!   exact `max(1, round(n·p))`): the expected selected fraction is exactly `p` whatever the row lengths, where a
//!   rounded count over-selects short rows (`round(0.15·7) = 1` is 14%, `round(0.15·10) = 2` is 20%). A row may
//!   select nothing (likely only for rows of a few tokens): it adds no MLM loss, its NSP loss still counts;
//!   a micro-batch of such rows adds none either (no error), and counts as a zero in its step's mean.
//! - Whole-word masking: a word is a first piece and the pieces that continue it (the tokenizer's own word ids; for
//!   WordPiece, a piece and its following `##` pieces), and each word is selected with probability `p`, all its
//!   pieces together, so each token's selection probability is still exactly `p`. A word cut by truncation is a word
//!   of its own in that row.
//! - Each selected token then independently: 80% `[MASK]`, 10% a token drawn uniformly from the whole vocabulary
//!   (`0..vocab_size`, specials included, as both Google's and transformers' code; it can draw the original token),
//!   10% unchanged. RoBERTa-style models ([`TokenizedCorpus::never_draw`]) never draw their padding token there
//!   (drawn again), which their position numbering would take for padding. `mlm_labels` holds the original id at selected positions and [`IGNORE`] (−100) elsewhere, so the
//!   loss is taken only there.
//!
//! The draws, in order, come from one [`SplitMix64`] seeded with `seed`: per document, the pair draws of each row
//! and then that row's masking. Rows come in document order; the training loop shuffles them.

use serde::{Deserialize, Serialize};

use super::loss::IGNORE;
use super::rng::SplitMix64;
use crate::tokenizer::{Batch, Tokenizer};
use crate::{Error, Result};

/// The longest sentence (a line of a plain-text corpus, or of a JSON line's text) accepted, in characters. Longer
/// lines are almost always a file without line breaks, whose one "sentence" would be mostly truncated away.
pub const MAX_LINE_CHARS: usize = 100_000;

/// The longest line of a `.jsonl` corpus (one document) accepted, in bytes.
pub const MAX_JSONL_LINE_BYTES: usize = 16 << 20;

/// How a corpus file is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CorpusFormat {
    /// One sentence or line per line, a blank line between documents.
    Text,
    /// One document per line: `{"text": "..."}`, the text's lines its sentences.
    Jsonl,
}

impl CorpusFormat {
    /// `.jsonl` (any case) is [`CorpusFormat::Jsonl`], anything else plain text.
    pub fn from_file_name(name: &str) -> CorpusFormat {
        if name.to_ascii_lowercase().ends_with(".jsonl") {
            CorpusFormat::Jsonl
        } else {
            CorpusFormat::Text
        }
    }
}

/// How rows are made from a corpus.
#[derive(Clone, Debug, PartialEq)]
pub struct PretrainOptions {
    /// Tokens per row, special tokens included (at least 5 with NSP, 3 without). Keep it at most the model's
    /// `max_position_embeddings`; the model checks.
    pub max_length: usize,
    /// The fraction of candidate tokens selected for the MLM loss, in (0, 1].
    pub mlm_probability: f64,
    /// Select whole words (every piece of a word together).
    pub whole_word_mask: bool,
    /// Sentence pairs with NSP labels; `false`: single segments, no NSP label (checkpoints without an NSP head).
    pub nsp: bool,
    /// With `nsp`, ALBERT's sentence-order pairs instead (module doc): B always follows A in the document, and the
    /// label says whether the row swapped them.
    pub sentence_order: bool,
    /// The fraction of NSP chunks given a shorter random target length (module doc), in [0, 1].
    pub short_seq_prob: f64,
    /// Masks drawn again every epoch (RoBERTa's dynamic masking) instead of once for the whole run (the BERT
    /// paper's static masking): [`PretrainRow::remasked`].
    pub dynamic_masking: bool,
    pub seed: u64,
}

impl PretrainOptions {
    /// The fraction selected for the masked-LM loss when none is given: ModernBERT's 30% (its paper's), the
    /// others' 15% (BERT's).
    pub fn family_mlm_probability(family: crate::config::Family) -> f64 {
        if family == crate::config::Family::ModernBert { 0.3 } else { PretrainOptions::default().mlm_probability }
    }
}

impl Default for PretrainOptions {
    /// Google's `create_pretraining_data.py` defaults: 128 tokens, 15%, pairs, no whole-word masking, 10% of
    /// chunks shorter.
    fn default() -> Self {
        PretrainOptions { max_length: 128, mlm_probability: 0.15, whole_word_mask: false, nsp: true, sentence_order: false,
            short_seq_prob: 0.1, dynamic_masking: false, seed: 0 }
    }
}

/// Where a segment of a row comes from: sentences `sentences` of document `document` (indices into the documents
/// and sentences that [`TokenizedCorpus`] kept), possibly truncated at either end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Span {
    pub document: usize,
    pub sentences: std::ops::Range<usize>,
}

/// One masked row, unpadded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PretrainRow {
    /// `[CLS] A [SEP] B [SEP]` (or `[CLS] S [SEP]`) after masking.
    pub input_ids: Vec<u32>,
    /// 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`.
    pub token_type_ids: Vec<u32>,
    /// The original id at the selected positions, [`IGNORE`] (−100) elsewhere.
    pub mlm_labels: Vec<i64>,
    /// 0 = B follows A (IsNext), 1 = B is from another document; `None` without NSP. Sentence order: 0 = the
    /// segments in their document's order, 1 = swapped.
    pub nsp_label: Option<u32>,
    /// Segment A (or S) and segment B, as the row holds them (sentence order: `b` before `a` in the document when
    /// swapped).
    pub a: Span,
    pub b: Option<Span>,
    /// The row before masking: each token's id and whether it starts a word (what [`Self::remasked`] masks again).
    #[serde(skip)]
    pub unmasked: Vec<(u32, bool)>,
}

impl PretrainRow {
    /// Row `index` as epoch `epoch` trains on it: with [`PretrainOptions::dynamic_masking`] and from the second epoch
    /// on, its tokens masked again as the module doc says, from a seed of their own (the options' seed, the epoch,
    /// the row), so that a run resumed mid-way masks as the first did; otherwise the row itself.
    pub fn remasked(&self, c: &TokenizedCorpus, o: &PretrainOptions, epoch: usize, index: usize) -> PretrainRow {
        if !o.dynamic_masking || epoch <= 1 {
            return self.clone();
        }
        const SALT: u64 = 0x5EED_0F_E90C_4A11;
        let seed = (o.seed ^ SALT).wrapping_add((epoch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).rotate_left(17)
            ^ (index as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
        let mut rng = SplitMix64::new(seed);
        masked(c, &self.unmasked, self.token_type_ids.clone(), self.nsp_label, self.a.clone(), self.b.clone(), o, &mut rng)
    }
}

/// Rows padded on the right to the longest (pad id, token type 0, attention mask 0, label [`IGNORE`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PretrainBatch {
    pub batch: Batch,
    /// (b, t)
    pub mlm_labels: Vec<i64>,
    /// (b); `None` when the rows have no NSP label.
    pub nsp_labels: Option<Vec<u32>>,
}

impl PretrainBatch {
    /// All rows must agree on having NSP labels.
    pub fn new(rows: &[&PretrainRow], pad: u32) -> Result<PretrainBatch> {
        let t = rows.iter().map(|r| r.input_ids.len()).max().unwrap_or(0);
        if rows.is_empty() || t == 0 {
            return Err(Error::Input("an empty batch cannot be trained on".into()));
        }
        let nsp_labels: Option<Vec<u32>> = rows.iter().map(|r| r.nsp_label).collect();
        if nsp_labels.is_none() && rows.iter().any(|r| r.nsp_label.is_some()) {
            return Err(Error::Input("a batch mixes rows with and without NSP labels; make them with one `nsp`".into()));
        }
        let mut batch = Batch { b: rows.len(), t, ..Default::default() };
        let mut mlm_labels = Vec::with_capacity(rows.len() * t);
        for r in rows {
            let pad_n = t - r.input_ids.len();
            batch.input_ids.extend(r.input_ids.iter().copied().chain(std::iter::repeat_n(pad, pad_n)));
            batch.token_type_ids.extend(r.token_type_ids.iter().copied().chain(std::iter::repeat_n(0, pad_n)));
            batch.attention_mask.extend(std::iter::repeat_n(1, r.input_ids.len()).chain(std::iter::repeat_n(0, pad_n)));
            mlm_labels.extend(r.mlm_labels.iter().copied().chain(std::iter::repeat_n(IGNORE, pad_n)));
        }
        Ok(PretrainBatch { batch, mlm_labels, nsp_labels })
    }
}

#[derive(Deserialize)]
struct JsonDocument {
    text: String,
}

/// The documents of a corpus, each a list of sentences (lines, trimmed; blank ones skipped). See the module doc for
/// the formats. Errors: an empty corpus, a line over the limits, a JSON line that is not `{"text": "..."}`.
pub fn parse_corpus(text: &str, format: CorpusFormat) -> Result<Vec<Vec<String>>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut docs: Vec<Vec<String>> = Vec::new();
    match format {
        CorpusFormat::Text => {
            let mut doc = Vec::new();
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() {
                    if !doc.is_empty() {
                        docs.push(std::mem::take(&mut doc));
                    }
                    continue;
                }
                check_line(line, || format!("corpus, line {}", n + 1))?;
                doc.push(line.to_string());
            }
            if !doc.is_empty() {
                docs.push(doc);
            }
        }
        CorpusFormat::Jsonl => {
            for (n, line) in text.lines().enumerate() {
                let at = || format!("corpus, line {}", n + 1);
                if line.trim().is_empty() {
                    continue;
                }
                if line.len() > MAX_JSONL_LINE_BYTES {
                    return Err(Error::Input(format!(
                        "{}: {} bytes, over the limit of {MAX_JSONL_LINE_BYTES} for one document; split it into \
                         several documents",
                        at(),
                        line.len()
                    )));
                }
                let d: JsonDocument = serde_json::from_str(line).map_err(|e| {
                    Error::Input(format!("{}: {e}; each line must be one JSON object with a string \"text\"", at()))
                })?;
                let mut doc = Vec::new();
                for s in d.text.lines().map(str::trim).filter(|s| !s.is_empty()) {
                    check_line(s, at)?;
                    doc.push(s.to_string());
                }
                if doc.is_empty() {
                    return Err(Error::Input(format!("{}: the text is empty; remove the line or give it text", at())));
                }
                docs.push(doc);
            }
        }
    }
    if docs.is_empty() {
        let how = match format {
            CorpusFormat::Text => "one sentence or line per line, a blank line between documents",
            CorpusFormat::Jsonl => "one {\"text\": ...} object per line",
        };
        return Err(Error::Input(format!("the corpus has no text; give documents ({how})")));
    }
    Ok(docs)
}

fn check_line(line: &str, at: impl Fn() -> String) -> Result<()> {
    if line.len() > MAX_LINE_CHARS && line.chars().nth(MAX_LINE_CHARS).is_some() {
        return Err(Error::Input(format!(
            "{}: a line of {} characters, over the limit of {MAX_LINE_CHARS}; put one sentence or line per line",
            at(),
            line.chars().count()
        )));
    }
    Ok(())
}

/// One token of a sentence: its id and whether it starts a word (see the module doc's whole-word masking).
type Piece = (u32, bool);

/// A corpus tokenized once, from which [`pretrain_rows`] makes rows for any seed.
#[derive(Clone, Debug)]
pub struct TokenizedCorpus {
    /// documents → sentences → pieces; no empty sentence, no empty document.
    docs: Vec<Vec<Vec<Piece>>>,
    cls: u32,
    sep: u32,
    mask: u32,
    vocab_size: usize,
    /// Indexed by id: the tokenizer's special tokens, never selected.
    special: Vec<bool>,
    /// An id the 10% random replacements never draw (drawn again instead): RoBERTa's padding token, which its
    /// models take for padding wherever it stands ([`TokenizedCorpus::never_draw`]).
    never: Option<u32>,
}

impl TokenizedCorpus {
    /// Tokenizes every sentence with `tok` (no special tokens, no truncation). Sentences with no token are dropped,
    /// then documents with no sentence. The tokenizer needs a mask token.
    pub fn new(tok: &Tokenizer, documents: &[Vec<String>]) -> Result<TokenizedCorpus> {
        let mask = tok.mask_token()?.id;
        let mut inner = tok.inner().clone();
        inner
            .with_truncation(None)
            .map_err(|e| Error::Tokenizer(format!("cannot turn the tokenizer's truncation off: {e}")))?;
        let vocab_size = tok.vocab_size();
        let mut special = vec![false; vocab_size];
        let specials = tok.special_tokens();
        let named = [&specials.cls, &specials.sep, &specials.pad, &specials.unk].into_iter().chain(&specials.mask);
        let added = inner.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id);
        for id in named.map(|s| s.id).chain(added) {
            if let Some(s) = special.get_mut(id as usize) {
                *s = true;
            }
        }
        let mut docs = Vec::with_capacity(documents.len());
        for (d, doc) in documents.iter().enumerate() {
            let mut sentences = Vec::with_capacity(doc.len());
            for (s, text) in doc.iter().enumerate() {
                let enc = inner.encode(text.as_str(), false).map_err(|e| {
                    Error::Input(format!("corpus: document {d}, sentence {s}: cannot tokenize it: {e}"))
                })?;
                let words = enc.get_word_ids();
                let pieces: Vec<Piece> = enc
                    .get_ids()
                    .iter()
                    .enumerate()
                    .map(|(k, &id)| (id, k == 0 || words[k].is_none() || words[k] != words[k - 1]))
                    .collect();
                if !pieces.is_empty() {
                    sentences.push(pieces);
                }
            }
            if !sentences.is_empty() {
                docs.push(sentences);
            }
        }
        Ok(TokenizedCorpus { docs, cls: tok.cls().id, sep: tok.sep().id, mask, vocab_size, special, never: None })
    }

    /// The random replacements never draw `id` (they draw again): for RoBERTa-style models, whose positions skip
    /// the padding token wherever it stands, so that a row holding it as a token is no valid input.
    pub fn never_draw(mut self, id: u32) -> TokenizedCorpus {
        self.never = Some(id);
        self
    }

    /// The documents kept (those with at least one token), which [`Span::document`] indexes.
    pub fn documents(&self) -> usize {
        self.docs.len()
    }

    /// The sentences of a kept document, which [`Span::sentences`] indexes.
    pub fn sentences(&self, document: usize) -> usize {
        self.docs.get(document).map_or(0, Vec::len)
    }

    /// The token ids of one sentence (no special tokens), for checking rows against their source.
    pub fn sentence_ids(&self, document: usize, sentence: usize) -> Option<Vec<u32>> {
        Some(self.docs.get(document)?.get(sentence)?.iter().map(|p| p.0).collect())
    }

    /// Whether `id` is one of the tokenizer's special tokens (never selected for masking).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    fn pieces(&self, span: &Span) -> Vec<Piece> {
        self.docs[span.document][span.sentences.clone()].concat()
    }
}

/// The masked rows of `corpus` (see the module doc). Errors: options out of range; with NSP, fewer than two
/// documents, or no document of two sentences.
pub fn pretrain_rows(corpus: &TokenizedCorpus, options: &PretrainOptions) -> Result<Vec<PretrainRow>> {
    let o = options;
    let min_length = if o.nsp { 5 } else { 3 };
    if o.max_length < min_length {
        return Err(Error::Input(format!(
            "max_length {} leaves no room: {} needs at least {min_length} tokens (the special tokens and one token \
             per segment)",
            o.max_length,
            if o.nsp { "[CLS] A [SEP] B [SEP]" } else { "[CLS] S [SEP]" }
        )));
    }
    if !(o.mlm_probability > 0.0 && o.mlm_probability <= 1.0) {
        return Err(Error::Input(format!(
            "mlm_probability {} is not in (0, 1]; the BERT paper uses 0.15",
            o.mlm_probability
        )));
    }
    if !(0.0..=1.0).contains(&o.short_seq_prob) {
        return Err(Error::Input(format!(
            "short_seq_prob {} is not in [0, 1]; Google's BERT uses 0.1",
            o.short_seq_prob
        )));
    }
    if corpus.docs.is_empty() {
        return Err(Error::Input("the corpus has no token: every sentence tokenized to nothing".into()));
    }
    let mut rng = SplitMix64::new(o.seed);
    let mut rows = Vec::new();
    if o.nsp {
        if corpus.docs.len() < 2 && !o.sentence_order {
            return Err(Error::Input(format!(
                "next-sentence prediction needs at least 2 documents (B is a sentence of another document half the \
                 time), and the corpus has {}; separate documents by a blank line (or one JSON line each), or turn \
                 NSP off",
                corpus.docs.len()
            )));
        }
        for d in 0..corpus.docs.len() {
            pairs(corpus, d, o, &mut rng, &mut rows);
        }
        if rows.is_empty() {
            return Err(Error::Input(format!(
                "{} needs documents of at least 2 sentences (A and the sentence that follows it), and every \
                 document has one; put one sentence per line, or turn NSP off",
                if o.sentence_order { "sentence-order prediction" } else { "next-sentence prediction" }
            )));
        }
    } else {
        for d in 0..corpus.docs.len() {
            segments(corpus, d, o, &mut rng, &mut rows);
        }
    }
    Ok(rows)
}

/// The NSP rows of document `d` (module doc, steps 1 to 5).
fn pairs(c: &TokenizedCorpus, d: usize, o: &PretrainOptions, rng: &mut SplitMix64, rows: &mut Vec<PretrainRow>) {
    let max_num_tokens = o.max_length - 3;
    let doc = &c.docs[d];
    let mut i = 0;
    // A needs a next sentence in its document.
    while i + 1 < doc.len() {
        // Google draws the target for every chunk (`rng.random() < short_seq_prob`), and `randint(2, max)` only
        // for the short ones.
        let target = if rng.next_f64() < o.short_seq_prob { 2 + rng.below(max_num_tokens - 1) } else { max_num_tokens };
        let (mut end, mut len) = (i + 1, doc[i].len());
        while end < doc.len() && (end - i < 2 || len < target) {
            len += doc[end].len();
            end += 1;
        }
        let a_end = i + 1 + rng.below(end - i - 1);
        let a = Span { document: d, sentences: i..a_end };
        let is_next = rng.next_f64() < 0.5;
        // Sentence order: B is always A's continuation, and the coin's tails swaps them.
        let (a, b) = if o.sentence_order {
            i = end;
            let b = Span { document: d, sentences: a_end..end };
            if is_next { (a, b) } else { (b, a) }
        } else if is_next {
            i = end;
            (a, Span { document: d, sentences: a_end..end })
        } else {
            i = a_end;
            let a_len: usize = doc[a.sentences.clone()].iter().map(Vec::len).sum();
            let target_b = target.saturating_sub(a_len);
            let other = match rng.below(c.docs.len() - 1) {
                k if k >= d => k + 1,
                k => k,
            };
            let od = &c.docs[other];
            let start = rng.below(od.len());
            let (mut stop, mut b_len) = (start, 0);
            while stop < od.len() && (stop == start || b_len < target_b) {
                b_len += od[stop].len();
                stop += 1;
            }
            (a, Span { document: other, sentences: start..stop })
        };
        let (mut ta, mut tb) = (c.pieces(&a), c.pieces(&b));
        let (ra, rb) = truncate_pair(ta.len(), tb.len(), target, rng);
        let (ta, tb) = (&mut ta[ra], &mut tb[rb]);
        // A word cut by the truncation is a word of its own.
        ta[0].1 = true;
        tb[0].1 = true;
        let mut pieces = vec![(c.cls, true)];
        pieces.extend_from_slice(ta);
        pieces.push((c.sep, true));
        let types = std::iter::repeat_n(0, pieces.len()).chain(std::iter::repeat_n(1, tb.len() + 1)).collect();
        pieces.extend_from_slice(tb);
        pieces.push((c.sep, true));
        rows.push(masked(c, &pieces, types, Some(u32::from(!is_next)), a, Some(b), o, rng));
    }
}

/// Google's `truncate_seq_pair`: while the pair is over `max`, one token off the longer side (B on a tie), from
/// its front or its back by a coin. Returns the kept ranges; each keeps at least one token when `max ≥ 2`.
fn truncate_pair(
    a: usize,
    b: usize,
    max: usize,
    rng: &mut SplitMix64,
) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
    let (mut ra, mut rb) = (0..a, 0..b);
    while ra.len() + rb.len() > max {
        let side = if ra.len() > rb.len() { &mut ra } else { &mut rb };
        if rng.next_f64() < 0.5 {
            side.start += 1;
        } else {
            side.end -= 1;
        }
    }
    (ra, rb)
}

/// The MLM-only rows of document `d`: consecutive sentences packed into `[CLS] S [SEP]`.
fn segments(c: &TokenizedCorpus, d: usize, o: &PretrainOptions, rng: &mut SplitMix64, rows: &mut Vec<PretrainRow>) {
    let cap = o.max_length - 2;
    let doc = &c.docs[d];
    let mut emit = |pieces: &[Piece], sentences: std::ops::Range<usize>, rng: &mut SplitMix64| {
        let mut row = vec![(c.cls, true)];
        row.extend_from_slice(pieces);
        row[1].1 = true;
        row.push((c.sep, true));
        let types = vec![0; row.len()];
        rows.push(masked(c, &row, types, None, Span { document: d, sentences }, None, o, rng));
    };
    let (mut cur, mut first): (Vec<Piece>, usize) = (Vec::new(), 0);
    for (s, sentence) in doc.iter().enumerate() {
        if !cur.is_empty() && cur.len() + sentence.len() > cap {
            emit(&cur, first..s, rng);
            cur.clear();
        }
        if cur.is_empty() {
            first = s;
        }
        if sentence.len() <= cap {
            cur.extend_from_slice(sentence);
            continue;
        }
        // A sentence longer than a row: consecutive full windows, the rest starts the next row.
        let mut windows = sentence.chunks(cap).peekable();
        while let Some(w) = windows.next() {
            if windows.peek().is_none() && w.len() < cap {
                cur = w.to_vec();
            } else {
                emit(w, s..s + 1, rng);
            }
        }
    }
    if !cur.is_empty() {
        emit(&cur, first..doc.len(), rng);
    }
}

/// Masks one framed row (module doc, masking) and makes it a [`PretrainRow`].
#[allow(clippy::too_many_arguments)]
fn masked(
    c: &TokenizedCorpus,
    pieces: &[Piece],
    token_type_ids: Vec<u32>,
    nsp_label: Option<u32>,
    a: Span,
    b: Option<Span>,
    o: &PretrainOptions,
    rng: &mut SplitMix64,
) -> PretrainRow {
    let mut input_ids: Vec<u32> = pieces.iter().map(|p| p.0).collect();
    let candidate: Vec<bool> = input_ids.iter().map(|&id| !c.is_special(id)).collect();
    let mut mlm_labels = vec![IGNORE; input_ids.len()];
    let mut selected = false;
    for k in 0..input_ids.len() {
        if !candidate[k] {
            continue;
        }
        let starts_word = !o.whole_word_mask || pieces[k].1 || k == 0 || !candidate[k - 1];
        if starts_word {
            selected = rng.next_f64() < o.mlm_probability;
        }
        if !selected {
            continue;
        }
        mlm_labels[k] = i64::from(input_ids[k]);
        let r = rng.next_f64();
        if r < 0.8 {
            input_ids[k] = c.mask;
        } else if r < 0.9 {
            input_ids[k] = loop {
                let id = rng.below(c.vocab_size) as u32;
                if Some(id) != c.never {
                    break id;
                }
            };
        }
    }
    PretrainRow { input_ids, token_type_ids, mlm_labels, nsp_label, a, b, unmasked: pieces.to_vec() }
}
