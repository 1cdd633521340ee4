//! Tokenization through the `tokenizers` crate: single texts and pairs, truncation, offsets, batches.
//!
//! # Loading
//! - [`Tokenizer::from_json`]: the bytes of a Hugging Face `tokenizer.json` (optionally with the bytes of
//!   `tokenizer_config.json`, which names the special tokens): BERT's and DistilBERT's WordPiece, RoBERTa's
//!   byte-level BPE, XLM-R's SentencePiece Unigram (Metaspace), each framed by the file's own post-processor
//!   (`[CLS] A [SEP] B [SEP]`, `<s> A </s></s> B </s>`). Other model types (WordLevel) are refused by name.
//! - [`Tokenizer::from_vocab`]: the text of a BERT `vocab.txt` (one token per line, id = line number) and optionally
//!   `tokenizer_config.json` (`do_lower_case`, `strip_accents`, `tokenize_chinese_chars`, special tokens). The
//!   pipeline is built the way `transformers` converts a `BertTokenizer`: `BertNormalizer` + `BertPreTokenizer` +
//!   `WordPiece` (`##` continuation, words over 100 chars → unk) + `[CLS] A [SEP] (B [SEP])` post-processing.
//! - [`Tokenizer::from_dir`] (native only): a model folder, preferring `tokenizer.json`.
//!
//! Everything but `from_dir` takes bytes or strings, so the same code runs in the browser (wasm32).
//!
//! # Padding and truncation (deliberate choices)
//! `tokenizer.json` files carry their own padding and truncation settings; all-MiniLM-L6-v2's, for instance,
//! pads every text to a fixed 128 tokens and truncates at 128 (a setting of the sentence-transformers export,
//! not of the model). We ignore both:
//! - **Padding**: none per text; [`Tokenizer::batch`] pads on the right to the longest text of the batch, with the
//!   vocabulary's pad id and an attention mask. Fixed padding would waste compute on padding rows.
//! - **Truncation**: to `max_length` tokens *including* the special tokens, by default the model's
//!   `max_position_embeddings` (512 for BERT): the longest input the model can take at all, so nothing the model
//!   could read is silently dropped, and what a user gets does not depend on an export's setting. Pairs are cut with
//!   the `longest_first` strategy (one token at a time from the longer of the two), the default of `transformers`
//!   when `truncation=True`. This equals `tokenizer(text, pair, truncation=True, max_length=512)` in Python.
//!   [`Encoded::truncated`] tells when something was cut; [`Tokenizer::set_max_length`] changes the limit
//!   (e.g. 128 to match sentence-transformers' `max_seq_length` for all-MiniLM-L6-v2 exactly).
//!
//! # Offsets
//! [`Encoded::offsets`] are **character** offsets (Unicode scalar values, i.e. Rust `char`s / Python `str`
//! indices), `[start, end)` into the original text of the token's own sequence (the pair's second text for tokens
//! of sequence 1), exactly as the offsets of Python's `transformers` fast tokenizers. Special tokens have `(0, 0)`.
//! JavaScript strings index UTF-16 code units: characters outside the Basic Multilingual Plane (most emoji) count
//! as 2 there; [`char_to_utf16_offsets`] converts.
//!
//! # Layout
//! This file builds and runs the pipeline; `files` reads what the tokenizer files say besides it
//! (`tokenizer_config.json`, `vocab.txt`, special-token names, post-processor checks); [`gguf_vocab`] converts the
//! vocabulary forms a GGUF carries; [`train`] trains a WordPiece vocabulary from a corpus.

use serde_json::Value;
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::{AddedToken, PostProcessor, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::error::{Error, Result};

mod files;
pub mod gguf_vocab;
pub mod train;

use files::{check_post_processor, parse_config, parse_vocab, resolve_special, special_names_from_json, SPECIAL_KEYS};

/// A padded batch of token sequences, row-major `(b, t)`, padding on the right.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub input_ids: Vec<u32>,      // (b, t)
    pub token_type_ids: Vec<u32>, // (b, t)
    pub attention_mask: Vec<u32>, // (b, t): 1 real token, 0 padding
    pub b: usize,
    pub t: usize,
}

/// One special token: its string and its id in this tokenizer's vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecialToken {
    pub token: String,
    pub id: u32,
}

/// The special tokens of a BERT vocabulary, read from the tokenizer files (never assumed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecialTokens {
    pub cls: SpecialToken,
    pub sep: SpecialToken,
    pub pad: SpecialToken,
    pub unk: SpecialToken,
    /// Absent from vocabularies of models without a masked-LM objective.
    pub mask: Option<SpecialToken>,
}

/// One tokenized text (or pair), without padding. All vectors have one entry per token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    /// Segment ids: 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`.
    pub type_ids: Vec<u32>,
    pub tokens: Vec<String>,
    /// `[start, end)` in **characters** (not bytes) of the token's own text; `(0, 0)` for special tokens.
    pub offsets: Vec<(usize, usize)>,
    /// 1 for `[CLS]`/`[SEP]` added by post-processing, 0 for tokens of the texts.
    pub special_tokens_mask: Vec<u32>,
    /// `Some(0)` for tokens of the first text, `Some(1)` of the pair's second, `None` for special tokens.
    pub sequence_ids: Vec<Option<usize>>,
    /// Index of the pre-tokenized word a token belongs to (within its sequence); `None` for special tokens.
    pub word_ids: Vec<Option<u32>>,
    /// Whether truncation to [`Tokenizer::max_length`] removed tokens.
    pub truncated: bool,
}

impl Encoded {
    pub fn len(&self) -> usize {
        self.ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// A tokenizer of the BERT family with deliberate truncation and no implicit padding (see the module doc).
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    special: SpecialTokens,
    max_length: usize,
    /// transformers' `clean_up_tokenization` after decoding (tokenizer_config.json's `clean_up_tokenization_spaces`),
    /// for the models whose decoder does not do it itself (see [`Tokenizer::decode`]).
    clean_up: bool,
    /// `inner` without truncation or post-processor, made the first time a pair must be truncated (see
    /// [`Tokenizer::encode`]) and shared by the clones.
    untruncated: std::sync::Arc<std::sync::OnceLock<tokenizers::Tokenizer>>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("special", &self.special)
            .field("max_length", &self.max_length)
            .finish()
    }
}

/// The smallest `max_length` accepted for BERT: `[CLS] a [SEP] b [SEP]` keeps one token of each text of a pair.
/// Other framings need their own count (`<s> a </s></s> b </s>`: 6): see [`Tokenizer::min_max_length`].
pub const MIN_MAX_LENGTH: usize = 5;

/// The tokenizer.json model types whose pipelines the BERT family's checkpoints use.
const MODEL_TYPES: [&str; 3] = ["WordPiece", "BPE", "Unigram"];

impl Tokenizer {
    /// Loads a `tokenizer.json` (as bytes). `config` is the optional `tokenizer_config.json`, whose `*_token`
    /// keys name the special tokens; without it they are read from the tokenizer.json itself (the post-processor's
    /// `[CLS]`/`[SEP]`, the model's unk token, the padding token, the special added token called mask).
    /// `max_length`: see the module doc (pass the model's `max_position_embeddings`).
    pub fn from_json(json: &[u8], config: Option<&[u8]>, max_length: usize) -> Result<Self> {
        let raw: Value = serde_json::from_slice(json).map_err(|e| {
            Error::Tokenizer(format!("tokenizer.json is not valid JSON ({e}); re-download or re-export it"))
        })?;
        check_post_processor(&raw["post_processor"])?;
        let model_type = raw["model"]["type"].as_str();
        if !model_type.is_some_and(|t| MODEL_TYPES.contains(&t)) {
            return Err(Error::Tokenizer(format!(
                "tokenizer.json: the tokenizer model {} is not supported; the BERT family's checkpoints use {}",
                model_type.map_or("without a `type`".to_string(), |t| format!("`{t}`")),
                MODEL_TYPES.join(", ")
            )));
        }
        let mut inner = tokenizers::Tokenizer::from_bytes(json).map_err(|e| {
            Error::Tokenizer(format!(
                "tokenizer.json could not be read as a Hugging Face tokenizer ({e}); \
                 re-export it with `tokenizer.save_pretrained()` or provide vocab.txt instead"
            ))
        })?;
        let cfg = parse_config(config)?;

        let from_json = special_names_from_json(&raw);
        let name = |key: &'static str| -> Option<String> {
            cfg.special.get(key).cloned().or_else(|| from_json.get(key).cloned())
        };
        let special = resolve_special(&inner, name, "tokenizer.json")?;
        if inner.get_post_processor().is_none() {
            // BERT needs `[CLS] A [SEP] B [SEP]`; a file without a post-processor would silently drop them.
            inner.with_post_processor(Some(BertProcessing::new(
                (special.sep.token.clone(), special.sep.id),
                (special.cls.token.clone(), special.cls.id),
            )));
        }
        // transformers (5.x `TokenizersBackend._decode`) cleans up after the decoder when the config asks, except for
        // BPE; a WordPiece decoder cleans up itself (its `cleanup` flag), so only Unigram is left to do here.
        let clean_up = model_type == Some("Unigram") && cfg.clean_up_tokenization_spaces == Some(true);
        let mut tok = Self::finish(inner, special, max_length)?;
        tok.clean_up = clean_up;
        Ok(tok)
    }

    /// Builds a BERT tokenizer from the text of `vocab.txt` and the optional bytes of `tokenizer_config.json`
    /// (`do_lower_case` default true, `strip_accents` default: follows lowercasing, `tokenize_chinese_chars`
    /// default true, `*_token` defaults `[CLS]` `[SEP]` `[PAD]` `[UNK]` `[MASK]` as in `BertTokenizer`).
    pub fn from_vocab(vocab_txt: &str, config: Option<&[u8]>, max_length: usize) -> Result<Self> {
        let vocab = parse_vocab(vocab_txt)?;
        let cfg = parse_config(config)?;
        let name = |key: &'static str| -> String {
            cfg.special.get(key).cloned().unwrap_or_else(|| {
                SPECIAL_KEYS.iter().find(|(k, _)| *k == key).map(|(_, d)| d.to_string()).unwrap_or_default()
            })
        };
        let unk = name("unk_token");
        if !vocab.contains_key(&unk) {
            return Err(Error::Tokenizer(format!(
                "vocab.txt has no unknown token `{unk}`; set `unk_token` in tokenizer_config.json"
            )));
        }
        let model = WordPiece::builder()
            // The same `AHashMap<String, u32>` WordPiece uses (only the BPE module exports a name for it).
            .vocab(vocab.into_iter().collect::<tokenizers::models::bpe::Vocab>())
            .unk_token(unk)
            .continuing_subword_prefix("##".into())
            .max_input_chars_per_word(100)
            .build()
            .map_err(|e| Error::Tokenizer(format!("cannot build a WordPiece model from vocab.txt: {e}")))?;
        let lowercase = cfg.do_lower_case.unwrap_or(true);
        let mut inner = tokenizers::Tokenizer::new(model);
        inner
            .with_normalizer(Some(BertNormalizer::new(
                true,
                cfg.tokenize_chinese_chars.unwrap_or(true),
                cfg.strip_accents,
                lowercase,
            )))
            .map_err(|e| Error::Tokenizer(format!("cannot set the BERT normalizer: {e}")))?;
        inner.with_pre_tokenizer(Some(BertPreTokenizer));
        inner.with_decoder(Some(WordPieceDecoder::new("##".into(), true)));

        // Special tokens match as whole strings before normalization, like `transformers`' converted tokenizers.
        let mut added: Vec<AddedToken> = Vec::new();
        for (key, _) in SPECIAL_KEYS {
            let t = name(key);
            if inner.token_to_id(&t).is_some() {
                added.push(AddedToken::from(t, true));
            }
        }
        let mut extra = cfg.added.clone();
        extra.sort_by_key(|(id, _)| *id);
        for (id, tok) in extra {
            match inner.token_to_id(&tok.content) {
                Some(have) if have == id => {
                    if !added.iter().any(|a| a.content == tok.content) {
                        added.push(tok)
                    }
                }
                _ => {
                    return Err(Error::Tokenizer(format!(
                        "tokenizer_config.json: added token `{}` (id {id}) is not at that id in vocab.txt; \
                         use the tokenizer.json that came with the model",
                        tok.content
                    )))
                }
            }
        }
        inner
            .add_special_tokens(added)
            .map_err(|e| Error::Tokenizer(format!("cannot register the special tokens: {e}")))?;

        let special = resolve_special(&inner, |k| Some(name(k)), "vocab.txt")?;
        inner.with_post_processor(Some(BertProcessing::new(
            (special.sep.token.clone(), special.sep.id),
            (special.cls.token.clone(), special.cls.id),
        )));
        Self::finish(inner, special, max_length)
    }

    /// Loads the tokenizer of a Hugging Face-style model folder: `tokenizer.json` when present (with
    /// `tokenizer_config.json` if present), else `vocab.txt` + `tokenizer_config.json`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_dir(dir: impl AsRef<std::path::Path>, max_length: usize) -> Result<Self> {
        let dir = dir.as_ref();
        let read = |name: &str| -> Result<Option<Vec<u8>>> {
            let p = dir.join(name);
            match std::fs::read(&p) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(Error::io(format!("cannot read {}", p.display()), e)),
            }
        };
        let config = read("tokenizer_config.json")?;
        if let Some(json) = read("tokenizer.json")? {
            return Self::from_json(&json, config.as_deref(), max_length);
        }
        if let Some(vocab) = read("vocab.txt")? {
            let vocab = String::from_utf8(vocab)
                .map_err(|_| Error::Tokenizer(format!("{}/vocab.txt is not UTF-8 text", dir.display())))?;
            return Self::from_vocab(&vocab, config.as_deref(), max_length);
        }
        Err(Error::Tokenizer(format!(
            "{} has neither tokenizer.json nor vocab.txt; copy the tokenizer files of the model into it",
            dir.display()
        )))
    }

    fn finish(mut inner: tokenizers::Tokenizer, special: SpecialTokens, max_length: usize) -> Result<Self> {
        // No padding per text: batches are padded to their longest row (see the module doc).
        inner.with_padding(None);
        let mut tok = Tokenizer { inner, special, max_length: 0, clean_up: false, untruncated: Default::default() };
        tok.set_max_length(max_length)?;
        Ok(tok)
    }

    /// The truncation limit in tokens, special tokens included.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// Changes the truncation limit (special tokens included). Must be at least [`MIN_MAX_LENGTH`]; should not
    /// exceed the model's `max_position_embeddings`, which the model checks.
    pub fn set_max_length(&mut self, max_length: usize) -> Result<()> {
        let min = self.min_max_length();
        if max_length < min {
            return Err(Error::Input(format!(
                "max length {max_length} is too small: it counts {} and {}, so it must be at least {min}",
                self.special.cls.token, self.special.sep.token
            )));
        }
        self.inner
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| Error::Input(format!("cannot truncate to {max_length} tokens: {e}")))?;
        self.max_length = max_length;
        Ok(())
    }

    /// The smallest truncation limit that keeps one token of each text of a pair: the pair template's special
    /// tokens plus 2 ([`MIN_MAX_LENGTH`] for BERT).
    pub fn min_max_length(&self) -> usize {
        self.inner.get_post_processor().map_or(0, |p| p.added_tokens(true)) + 2
    }

    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }
    pub fn cls(&self) -> &SpecialToken {
        &self.special.cls
    }
    pub fn sep(&self) -> &SpecialToken {
        &self.special.sep
    }
    pub fn pad(&self) -> &SpecialToken {
        &self.special.pad
    }
    pub fn unk(&self) -> &SpecialToken {
        &self.special.unk
    }

    /// The mask token, for fill-mask; an error for vocabularies without one.
    pub fn mask_token(&self) -> Result<&SpecialToken> {
        self.special.mask.as_ref().ok_or_else(|| {
            Error::Input(
                "this tokenizer has no mask token (no `mask_token` in tokenizer_config.json and no [MASK]-like \
                 special token): fill-mask needs a masked-language-model checkpoint"
                    .into(),
            )
        })
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Decodes ids to text as transformers' `tokenizer.decode` does: the file's decoder (WordPiece joining with `##`
    /// removed, byte-level BPE, Metaspace), optionally dropping special tokens, then `clean_up_tokenization` where
    /// tokenizer_config.json asks for it and the decoder has not done it.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        let text = self
            .inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| Error::Input(format!("cannot decode token ids: {e}")))?;
        Ok(if self.clean_up { clean_up_tokenization(&text) } else { text })
    }

    /// Tokenizes a text or a pair: `[CLS] text [SEP]` or `[CLS] text [SEP] pair [SEP]`, truncated to
    /// [`Self::max_length`] (longest first). Empty and whitespace-only texts give no tokens of their own
    /// (`[CLS] [SEP]`); an empty `pair` is treated as no pair, as `transformers` does.
    pub fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoded> {
        // An empty second text means no second text, as in `transformers` (`if text_pair:`), so that
        // `{"text": "a", "text_pair": ""}` gives `[CLS] a [SEP]`, not `[CLS] a [SEP] [SEP]`.
        let err = |e: tokenizers::Error| Error::Input(format!("cannot tokenize the input: {e}"));
        let pair = pair.filter(|p| !p.is_empty());
        let mut enc = match pair {
            None => self.inner.encode_char_offsets(text, true),
            Some(p) => self.inner.encode_char_offsets((text, p), true),
        }
        .map_err(err)?;
        if let (Some(p), false) = (pair, enc.get_overflowing().is_empty()) {
            // A truncated pair, again from the whole texts. With truncation set, the `tokenizers` crate (0.23.2)
            // tokenizes each text only up to about `max_length` tokens (`tokenize_with_limit`) and then compares
            // those partial lengths to choose which text gives up the odd token of longest_first, so two long texts
            // can be cut one token off transformers' split (whose library tokenizes them whole).
            // Each text is tokenized whole, without truncation or post-processing; `post_process` then truncates and
            // frames the pair once, as `encode` does.
            let whole = self.untruncated.get_or_init(|| {
                let mut t = self.inner.clone();
                let _ = t.with_truncation(None);
                t.with_post_processor(None::<tokenizers::PostProcessorWrapper>);
                t
            });
            let a = whole.encode_char_offsets(text, false).map_err(err)?;
            let b = whole.encode_char_offsets(p, false).map_err(err)?;
            enc = self.inner.post_process(a, Some(b), true).map_err(err)?;
        }
        Ok(encoded(&enc))
    }

    /// Tokenizes a text already split into words, as transformers' `tokenizer(words, is_split_into_words=True,
    /// truncation=True, max_length=...)`: each word is tokenized on its own, [`Encoded::word_ids`] give the index
    /// of its word in `words`, `[CLS] pieces [SEP]`, truncated to [`Self::max_length`]. Word offsets are relative
    /// to each word. Byte-level BPE (RoBERTa) marks a word start with `Ġ` only when its pre-tokenizer adds a prefix
    /// space: see [`Self::for_split_words`].
    pub fn encode_words<S: AsRef<str>>(&self, words: &[S]) -> Result<Encoded> {
        let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
        let enc = self
            .inner
            .encode_char_offsets(words.as_slice(), true)
            .map_err(|e| Error::Input(format!("cannot tokenize the words: {e}")))?;
        Ok(encoded(&enc))
    }

    /// This tokenizer as transformers' `run_ner.py` loads it for pre-split words: RoBERTa-family (byte-level)
    /// tokenizers with `add_prefix_space=True`, so that every word starts with `Ġ` as it does inside a sentence
    /// (without it a word is tokenized as if glued to the previous one). Other tokenizers are returned unchanged.
    pub fn for_split_words(&self) -> Tokenizer {
        use tokenizers::pre_tokenizers::PreTokenizerWrapper as P;
        use tokenizers::processors::PostProcessorWrapper as Post;
        fn prefix(p: &mut P) -> bool {
            match p {
                P::ByteLevel(b) => !std::mem::replace(&mut b.add_prefix_space, true),
                P::Sequence(s) => {
                    let mut any = false;
                    for p in s.as_mut() {
                        any |= prefix(p);
                    }
                    any
                }
                _ => false,
            }
        }
        let mut pre = self.inner.get_pre_tokenizer().cloned();
        if !pre.as_mut().is_some_and(prefix) {
            return self.clone();
        }
        let mut inner = self.inner.clone();
        inner.with_pre_tokenizer(pre);
        if let Some(Post::Roberta(r)) = inner.get_post_processor().cloned() {
            // Only the offsets' trimming reads this flag.
            inner.with_post_processor(Some(Post::Roberta(r.add_prefix_space(true))));
        }
        // The untruncated twin is built from `inner`, so it must not be shared with `self`.
        Tokenizer {
            inner,
            special: self.special.clone(),
            max_length: self.max_length,
            clean_up: self.clean_up,
            untruncated: Default::default(),
        }
    }

    /// Pads encodings on the right to the longest one, with the pad id, type id 0 and attention mask 0.
    pub fn batch(&self, encoded: &[Encoded]) -> Batch {
        let b = encoded.len();
        let t = encoded.iter().map(Encoded::len).max().unwrap_or(0);
        let mut out = Batch {
            input_ids: vec![self.special.pad.id; b * t],
            token_type_ids: vec![0; b * t],
            attention_mask: vec![0; b * t],
            b,
            t,
        };
        for (row, e) in encoded.iter().enumerate() {
            let n = e.len();
            let r = row * t;
            out.input_ids[r..r + n].copy_from_slice(&e.ids);
            out.token_type_ids[r..r + n].copy_from_slice(&e.type_ids);
            out.attention_mask[r..r + n].fill(1);
        }
        out
    }

    /// The underlying `tokenizers` tokenizer (padding disabled, truncation as configured).
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// A `tokenizers` encoding as an [`Encoded`] (also `tasks::zero_shot`'s pairs cut `only_first`).
pub(crate) fn encoded(enc: &tokenizers::Encoding) -> Encoded {
    Encoded {
        ids: enc.get_ids().to_vec(),
        type_ids: enc.get_type_ids().to_vec(),
        tokens: enc.get_tokens().to_vec(),
        offsets: enc.get_offsets().to_vec(),
        special_tokens_mask: enc.get_special_tokens_mask().to_vec(),
        sequence_ids: enc.get_sequence_ids(),
        word_ids: enc.get_word_ids().to_vec(),
        truncated: !enc.get_overflowing().is_empty(),
    }
}

/// transformers' `PreTrainedTokenizerBase.clean_up_tokenization`: no space before punctuation and English
/// contractions.
fn clean_up_tokenization(text: &str) -> String {
    [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"),
        (" 've", "'ve"), (" 're", "'re")]
        .iter()
        .fold(text.to_string(), |t, (from, to)| t.replace(from, to))
}

/// Converts character offsets of `text` (as in [`Encoded::offsets`]) to UTF-16 code-unit offsets (JavaScript
/// string indices). Offsets past the end of the text are clamped to its UTF-16 length.
pub fn char_to_utf16_offsets(text: &str, offsets: &[(usize, usize)]) -> Vec<(usize, usize)> {
    // prefix[i] = UTF-16 length of the first i chars
    let mut prefix = Vec::with_capacity(text.len() + 1);
    prefix.push(0usize);
    for c in text.chars() {
        prefix.push(prefix.last().copied().unwrap_or(0) + c.len_utf16());
    }
    let at = |i: usize| prefix[i.min(prefix.len() - 1)];
    offsets.iter().map(|&(s, e)| (at(s), at(e))).collect()
}
