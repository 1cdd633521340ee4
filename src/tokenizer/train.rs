//! A BERT WordPiece vocabulary trained from a corpus, as Python's `tokenizers.BertWordPieceTokenizer(...)
//! .train_from_iterator(...)` trains it: the same `tokenizers` trainer (`WordPieceTrainer`, which is its BPE trainer
//! with `##` continuation pieces), BERT's normaliser (`BertNormalizer`: control characters removed, CJK characters
//! set apart, lower-casing and accent stripping as configured) and pre-tokeniser (`BertPreTokenizer`: whitespace and
//! punctuation), the five special tokens first (`[PAD] [UNK] [CLS] [SEP] [MASK]`, ids 0 to 4), at most 1000
//! alphabet characters (the Python class's `limit_alphabet`). The result is the files of a Hugging Face tokenizer
//! folder, which `transformers`' `AutoTokenizer.from_pretrained` and our [`super::Tokenizer`] load.
//!
//! # What is and is not reproducible (the trainer's, in Python as here)
//! The trainer numbers the alphabet in code-point order after the special tokens, but then the `##c` pieces in the
//! order it meets them while iterating a hash map with per-process random keys (`ahash`), and it breaks ties
//! between equally frequent merges by those numbers. So two runs on the same corpus give the same first
//! `5 + alphabet` ids, and the same *set* of tokens unless merges tie at the vocabulary-size cut-off, but not the same
//! ids after the alphabet: Python's trainer differs from itself the same way (tests/golden/wordpiece.py measures
//! it). A WordPiece encoding depends only on the set of tokens (longest match first), so where the sets agree the
//! tokens of every text agree.
//!
//! Differences from the Python class's result, on purpose: the tokenizer it trains has no post-processor (it sets
//! one only when given a vocabulary, `BertWordPieceTokenizer(vocab)`), so its `encode` adds no `[CLS]`/`[SEP]`; ours
//! has transformers' `TemplateProcessing` (`[CLS] $A [SEP]`, `[CLS] $A [SEP] $B:1 [SEP]:1`), what a
//! `BertTokenizerFast` saves.

use serde_json::{json, Value};
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::wordpiece::{WordPiece, WordPieceTrainer};
use tokenizers::models::TrainerWrapper;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::AddedToken;

use crate::error::{Error, Result};

/// The special tokens of a trained vocabulary, in id order (`BertWordPieceTokenizer.train`'s default list).
pub const SPECIAL_TOKENS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// `BertWordPieceTokenizer.train`'s `limit_alphabet`: the most frequent characters kept as the alphabet; the rarer
/// ones are left out of the vocabulary (they become `[UNK]`).
pub const DEFAULT_LIMIT_ALPHABET: usize = 1000;

/// The truncation limit written into tokenizer_config.json (`model_max_length`), BERT's 512 positions.
const MODEL_MAX_LENGTH: usize = 512;

/// Texts in one corpus at most (a line is a text): bounds what a file or a page can ask the trainer to hold.
pub const MAX_TEXTS: usize = 10_000_000;

/// How to train a WordPiece vocabulary (the defaults are `BertWordPieceTokenizer`'s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WordPieceOptions {
    /// Tokens in the vocabulary, the special tokens included (30000 by default). The trainer stops earlier when
    /// no pair of pieces is left that occurs `min_frequency` times.
    pub vocab_size: usize,
    /// How often a pair of pieces must occur to be merged into one token (2 by default; 0 and 1 mean any).
    pub min_frequency: u64,
    /// Lower-case the text before training and tokenizing (`do_lower_case`, true by default).
    pub lowercase: bool,
    /// Strip accents (NFD, then the combining marks removed); `None`: when lower-casing, as `BertNormalizer`.
    pub strip_accents: Option<bool>,
    /// At most this many alphabet characters, the most frequent ([`DEFAULT_LIMIT_ALPHABET`]); `None`: all.
    pub limit_alphabet: Option<usize>,
}

impl Default for WordPieceOptions {
    fn default() -> Self {
        WordPieceOptions {
            vocab_size: 30_000,
            min_frequency: 2,
            lowercase: true,
            strip_accents: None,
            limit_alphabet: Some(DEFAULT_LIMIT_ALPHABET),
        }
    }
}

/// A trained tokenizer: the vocabulary in id order and the files of its folder.
#[derive(Clone, Debug)]
pub struct TrainedTokenizer {
    /// Token strings by id: the special tokens, the alphabet, the `##` pieces of the alphabet, the merged pieces.
    pub vocab: Vec<String>,
    /// `tokenizer.json`: normaliser, pre-tokeniser, WordPiece model, post-processor, decoder.
    pub tokenizer_json: String,
    /// `vocab.txt`: one token per line, line number = id.
    pub vocab_txt: String,
    /// `tokenizer_config.json`: `do_lower_case`, `strip_accents`, the special tokens, `model_max_length`,
    /// `tokenizer_class` (`BertTokenizer`).
    pub tokenizer_config: String,
    /// `special_tokens_map.json`.
    pub special_tokens_map: String,
}

impl TrainedTokenizer {
    /// The folder's files: (file name, contents).
    pub fn files(&self) -> [(&'static str, &str); 4] {
        [
            ("tokenizer.json", &self.tokenizer_json),
            ("vocab.txt", &self.vocab_txt),
            ("tokenizer_config.json", &self.tokenizer_config),
            ("special_tokens_map.json", &self.special_tokens_map),
        ]
    }
}

/// The texts of a corpus file: for `.jsonl` (`jsonl` true) the `"text"` string of each line's object, otherwise
/// each line (blank lines, which separate documents, are skipped: the vocabulary counts words, not documents).
pub fn corpus_texts(text: &str, jsonl: bool) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if out.len() == MAX_TEXTS {
            return Err(Error::Input(format!(
                "the corpus has more than {MAX_TEXTS} lines; train on a sample of it"
            )));
        }
        if !jsonl {
            out.push(line.to_owned());
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| {
            Error::Input(format!("corpus line {}: {e}; each line of a .jsonl corpus must be one JSON object", n + 1))
        })?;
        match v.get("text") {
            Some(Value::String(s)) => out.push(s.clone()),
            _ => {
                return Err(Error::Input(format!(
                    "corpus line {}: no \"text\" string; each line of a .jsonl corpus must be {{\"text\": \"...\"}}",
                    n + 1
                )))
            }
        }
    }
    Ok(out)
}

/// Trains a BERT WordPiece vocabulary on `texts` (see the module doc). Errors: a corpus without a word, a
/// `vocab_size` below what the corpus needs (the special tokens, its alphabet and the alphabet's `##` forms).
pub fn train_wordpiece<S: AsRef<str> + Sync>(texts: &[S], opts: &WordPieceOptions) -> Result<TrainedTokenizer> {
    if texts.len() > MAX_TEXTS {
        return Err(Error::Input(format!("{} texts are more than {MAX_TEXTS}; train on a sample", texts.len())));
    }
    if texts.iter().all(|t| t.as_ref().trim().is_empty()) {
        return Err(Error::Input("the corpus is empty: give at least one text with words in it".into()));
    }
    if opts.vocab_size < SPECIAL_TOKENS.len() + 1 {
        return Err(Error::Input(format!(
            "vocab_size {} is too small: the vocabulary holds the {} special tokens and the corpus's characters",
            opts.vocab_size,
            SPECIAL_TOKENS.len()
        )));
    }
    let err = |what: &str, e: tokenizers::Error| Error::Tokenizer(format!("WordPiece training: {what}: {e}"));

    // BertWordPieceTokenizer.__init__ without a vocabulary: an empty WordPiece model (unk `[UNK]`, `##`, words over
    // 100 characters → unk), BERT's normaliser and pre-tokeniser, the WordPiece decoder.
    let model = WordPiece::builder()
        .unk_token(SPECIAL_TOKENS[1].into())
        .continuing_subword_prefix("##".into())
        .max_input_chars_per_word(100)
        .build()
        .map_err(|e| err("the empty model", e))?;
    let mut tok = tokenizers::Tokenizer::new(model);
    tok.with_normalizer(Some(BertNormalizer::new(true, true, opts.strip_accents, opts.lowercase)))
        .map_err(|e| err("the normaliser", e))?;
    tok.with_pre_tokenizer(Some(BertPreTokenizer));
    tok.with_decoder(Some(WordPieceDecoder::new("##".into(), true)));

    let mut trainer = WordPieceTrainer::builder()
        .vocab_size(opts.vocab_size)
        .min_frequency(opts.min_frequency)
        .show_progress(false)
        .special_tokens(SPECIAL_TOKENS.iter().map(|t| AddedToken::from(*t, true)).collect())
        .continuing_subword_prefix("##".into())
        .build();
    trainer.set_limit_alphabet(opts.limit_alphabet);
    // wasm32 has one thread: the trainer's rayon bridges would only add their overhead there.
    #[cfg(target_arch = "wasm32")]
    tokenizers::utils::parallelism::set_parallelism(false);
    let mut trainer = TrainerWrapper::WordPieceTrainer(trainer);
    tok.train(&mut trainer, texts.iter().map(AsRef::as_ref)).map_err(|e| err("training", e))?;

    let vocab = vocab_by_id(&tok)?;
    if vocab.len() > opts.vocab_size {
        // The trainer keeps the whole alphabet and its `##` forms whatever the target size.
        return Err(Error::Input(format!(
            "vocab_size {} is too small for this corpus: its {} special tokens, alphabet and `##` forms of the \
             alphabet alone are {n} tokens; ask for at least {n}",
            opts.vocab_size,
            SPECIAL_TOKENS.len(),
            n = vocab.len()
        )));
    }
    let id = |t: &str| tok.token_to_id(t).ok_or_else(|| Error::Tokenizer(format!("the trained vocabulary lacks `{t}`")));
    let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
    let post = TemplateProcessing::builder()
        .try_single("[CLS] $A [SEP]")
        .and_then(|b| b.try_pair("[CLS] $A [SEP] $B:1 [SEP]:1"))
        .map_err(|e| Error::Tokenizer(format!("WordPiece training: the post-processor template: {e}")))?
        .special_tokens(vec![("[CLS]", cls), ("[SEP]", sep)])
        .build()
        .map_err(|e| Error::Tokenizer(format!("WordPiece training: the post-processor: {e}")))?;
    tok.with_post_processor(Some(post));

    let tokenizer_json = tok.to_string(true).map_err(|e| err("writing tokenizer.json", e))?;
    let mut vocab_txt = vocab.join("\n");
    vocab_txt.push('\n');
    let specials = json!({
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]",
    });
    let mut config = specials.clone();
    let fields = [
        ("do_lower_case", json!(opts.lowercase)),
        ("strip_accents", json!(opts.strip_accents)),
        ("tokenize_chinese_chars", json!(true)),
        ("clean_up_tokenization_spaces", json!(true)),
        ("model_max_length", json!(MODEL_MAX_LENGTH)),
        ("tokenizer_class", json!("BertTokenizer")),
    ];
    for (k, v) in fields {
        config[k] = v;
    }
    let pretty = |v: &Value| serde_json::to_string_pretty(v).map_err(Error::from);
    Ok(TrainedTokenizer {
        tokenizer_config: pretty(&config)?,
        special_tokens_map: pretty(&specials)?,
        tokenizer_json,
        vocab_txt,
        vocab,
    })
}

/// The trained model's tokens by id, checked dense (`vocab.txt` has no way to skip an id) and free of line breaks
/// (the normaliser turns them into spaces and the pre-tokeniser splits on them, so none should reach a token).
fn vocab_by_id(tok: &tokenizers::Tokenizer) -> Result<Vec<String>> {
    let map = tok.get_vocab(true);
    let mut vocab = vec![None; map.len()];
    for (t, id) in map {
        if t.contains(['\n', '\r']) {
            return Err(Error::Tokenizer(format!("the trained token {t:?} holds a line break; vocab.txt cannot list it")));
        }
        match vocab.get_mut(id as usize) {
            Some(slot @ None) => *slot = Some(t),
            _ => return Err(Error::Tokenizer(format!("the trained vocabulary's ids are not 0..{}", vocab.len()))),
        }
    }
    let vocab: Vec<String> = vocab.into_iter().flatten().collect();
    let firsts: Vec<&str> = vocab.iter().take(SPECIAL_TOKENS.len()).map(String::as_str).collect();
    if firsts != SPECIAL_TOKENS {
        return Err(Error::Tokenizer(format!("the trained vocabulary starts with {firsts:?}, not {SPECIAL_TOKENS:?}")));
    }
    Ok(vocab)
}
