//! Entry points for the fuzz targets (`fuzz/`) and for `tests/fuzz_corpus.rs`, which replays every committed corpus
//! file through them on each `cargo test`. Each function feeds untrusted bytes to one parser or task the way a user's
//! file or text reaches it, and checks what must hold whatever the input:
//! - no panic, no hang, no allocation the input's size does not justify (the fuzzer's limits catch those);
//! - an `Err` is an answer (bad input gives a clear error), but an `Ok` must be well formed: sizes that agree with
//!   the config, finite scores, probabilities in [0, 1], offsets inside the text. A violated check panics, so the
//!   fuzzer records the input as a finding.
//!
//! Native only (the targets run under libFuzzer; the corpus test under `cargo test`).

use std::path::Path;

use crate::config::BertConfig;
use crate::heads::token_classifier::Aggregation;
use crate::engine::{Device, Engine};
use crate::tasks::{EmbedOptions, Pooling};
use crate::tokenizer::{Encoded, Tokenizer};
use crate::weights::gguf::{self, Gguf};
use crate::weights::stream::{Format, Streamed, WeightStream};
use crate::weights::Weights;
use pollster::block_on as block;

/// Truncation limit for the tokenizer targets: small, so long inputs exercise truncation.
const FUZZ_MAX_LENGTH: usize = 16;

/// Texts every loaded tokenizer is run on (a pair, an empty text, a long word, accents, CJK, emoji).
const PROBE_TEXTS: [(&str, Option<&str>); 4] = [
    ("Hello, world! [MASK] [CLS]", Some("A second text, longer than the first one by some words.")),
    ("", None),
    ("Ünïcödé 日本語 🙂 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", None),
    ("\u{0}\u{7}\t\r\n", Some(" ")),
];

/// `config.json` text: [`BertConfig::from_json_str`]. An accepted config must pass its own validation.
pub fn config_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(cfg) = BertConfig::from_json_str(text) {
        assert!(cfg.validate().is_ok(), "an accepted config fails validate(): {cfg:?}");
        assert_eq!(cfg.head_dim() * cfg.num_attention_heads, cfg.hidden_size);
        for id in 0..cfg.num_labels() {
            let _ = cfg.label(id);
        }
    }
}

/// `model.safetensors` bytes: [`Weights::from_safetensors`], every tensor read back as f32; the same bytes as a
/// trained-head file (`load_head`), and through the GGUF converter's safetensors reader.
pub fn safetensors(data: &[u8]) {
    if let Ok(w) = Weights::from_safetensors(data) {
        for name in w.names() {
            let Ok(t) = w.get(name, &[]).or_else(|e| match e {
                crate::Error::Shape { got, .. } => w.get(name, &got),
                other => Err(other),
            }) else {
                continue;
            };
            let (rows, cols) = t.rows_cols();
            if let Ok(v) = t.to_f32() {
                assert_eq!(v.len(), t.numel(), "tensor `{name}` {:?} decodes to {} values", t.shape, v.len());
                assert_eq!(rows * cols, t.numel());
            }
        }
    }
    let _ = crate::training::head::import_safetensors(data, 32);
    let _ = gguf::tensors_from_safetensors(data);
    let whole = Weights::from_safetensors(data);
    for streamed in streamed(Format::Safetensors, data) {
        match (&whole, streamed) {
            (Ok(w), Ok(Streamed::Safetensors(s))) => {
                let tensors = |w: &Weights| w.names().into_iter().map(|n| (n.to_string(), bits(w.stored(n)))).collect::<Vec<_>>();
                assert!(tensors(w) == tensors(&s), "streamed, the tensors differ");
            }
            (Err(_), Err(_)) => {}
            (w, s) => panic!("whole: {:?}; streamed: {:?}", w.as_ref().err(), s.err()),
        }
    }
}

/// `pytorch_model.bin` bytes (either of torch.save's formats): [`Weights::from_torch_bin`], every tensor read back as
/// f32; the same bytes told apart from safetensors by their first bytes ([`Weights::from_file_source`], the browser's
/// and the bytes loader's path), which must give the same answer; and the GGUF converter's reader. Whatever the
/// pickle names, only values are built (src/weights/pickle.rs): a refusal is an answer, a panic or an allocation
/// the file's size does not justify is a finding. Bytes that are neither format are taken for the state dict's
/// pickle and what follows it in the format before torch 1.6 (the list of storages, the storages), after that
/// format's three opening pickles: the zip archive's CRC would refuse almost every change to a pickle inside it, so
/// this is how the fuzzer reaches the stack machine with arbitrary pickles.
pub fn torch_bin(data: &[u8]) {
    if !crate::weights::torch_bin::is_torch_bin(data) {
        /// The magic number, the protocol version 1001, `{'little_endian': True}`: each a pickle.
        const LEGACY_HEAD: &[u8] = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02M\xe9\x03.\
            \x80\x02}(X\x0d\x00\x00\x00little_endian\x88u.";
        let file = [LEGACY_HEAD, data].concat();
        assert!(crate::weights::torch_bin::is_torch_bin(&file));
        return torch_bin(&file);
    }
    let whole = Weights::from_torch_bin(data);
    if let Ok(w) = &whole {
        for name in w.names() {
            let t = w.stored(name).expect("listed");
            assert!(t.shape.len() <= crate::weights::torch_bin::MAX_DIMS, "`{name}` has {} dimensions", t.shape.len());
            let v = t.to_f32().expect("f32 or f16");
            assert_eq!(v.len(), t.numel(), "tensor `{name}` {:?} decodes to {} values", t.shape, v.len());
        }
    }
    {
        let sniffed = Weights::from_file_source(data);
        match (&whole, &sniffed) {
            (Ok(a), Ok(b)) => {
                let tensors = |w: &Weights| w.names().into_iter().map(|n| (n.to_string(), bits(w.stored(n)))).collect::<Vec<_>>();
                assert!(tensors(a) == tensors(b), "told apart by its bytes, the tensors differ");
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!("as pytorch_model.bin: {:?}; told apart: {:?}", a.as_ref().err(), b.as_ref().err()),
        }
        let _ = gguf::tensors_from_safetensors(data);
    }
}

/// A tensor's shape, dtype and stored bits (NaN is a value like any other here: the same bits must come out).
fn bits(t: Option<&crate::weights::HostTensor>) -> Option<(Vec<usize>, crate::dtype::Dtype, Vec<u8>)> {
    use crate::weights::HostData;
    let t = t?;
    let raw: Vec<u8> = match &t.data {
        HostData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::Q8_0(v) | HostData::Q4_0(v) => v.clone(),
        HostData::Placed(p) => p.hash.to_le_bytes().to_vec(),
    };
    Some((t.shape.clone(), t.data.dtype(), raw))
}

/// The same bytes as a download gives them ([`WeightStream`]): in pieces of 1, 7 and 4093 bytes and whole, its
/// length announced or not. The answer must be the whole-file reader's, whatever the cut.
fn streamed(format: Format, data: &[u8]) -> Vec<crate::Result<Streamed>> {
    [(1, false), (7, true), (4093, false), (data.len().max(1), true)]
        .into_iter()
        .map(|(piece, announced)| {
            let mut s = WeightStream::new(format, announced.then_some(data.len()), 2 * data.len() + 1, false);
            for p in data.chunks(piece) {
                s.push(p)?;
            }
            s.finish().map(|(out, _)| out)
        })
        .collect()
}

/// GGUF bytes: the bounded reader ([`Gguf::parse`], every tensor loaded), then the whole BERT loader
/// ([`gguf::load_gguf`]: config, tokenizer and weights from one file).
pub fn gguf(data: &[u8]) {
    if let Ok(g) = Gguf::parse(data) {
        if let Ok(tensors) = g.load_all(data) {
            for (name, t) in &tensors {
                if let Ok(v) = t.to_f32() {
                    assert_eq!(v.len(), t.numel(), "tensor `{name}` {:?} decodes to {} values", t.shape, v.len());
                }
            }
        }
    }
    if let Ok(m) = gguf::load_gguf(data) {
        probe_tokenizer(&m.tokenizer);
    }
    let whole = gguf::read_bert(data);
    for streamed in streamed(Format::Gguf, data) {
        match (&whole, streamed) {
            (Ok(w), Ok(Streamed::Gguf(s))) => {
                let tensors = |m: &gguf::BertGguf| m.tensors.iter().map(|(n, t)| (n.clone(), bits(Some(t)))).collect::<Vec<_>>();
                assert!(tensors(w) == tensors(&s), "streamed, the tensors differ");
                assert_eq!(
                    (&w.config_json, &w.tokenizer_json, &w.tokenizer_config_json, &w.vocab, w.pooling),
                    (&s.config_json, &s.tokenizer_json, &s.tokenizer_config_json, &s.vocab, s.pooling)
                );
            }
            (Err(_), Err(_)) => {}
            (w, s) => panic!("whole: {:?}; streamed: {:?}", w.as_ref().err(), s.err()),
        }
    }
}

/// `tokenizer.json` bytes, optionally followed by a 0 byte and `tokenizer_config.json`: [`Tokenizer::from_json`],
/// then a few texts through the loaded tokenizer.
pub fn tokenizer_json(data: &[u8]) {
    let (json, config) = split_at_zero(data);
    if let Ok(tok) = Tokenizer::from_json(json, config, FUZZ_MAX_LENGTH) {
        probe_tokenizer(&tok);
    }
}

/// `vocab.txt` text, optionally followed by a 0 byte and `tokenizer_config.json`: [`Tokenizer::from_vocab`], then a
/// few texts through the loaded tokenizer.
pub fn vocab_txt(data: &[u8]) {
    let (vocab, config) = split_at_zero(data);
    let Ok(vocab) = std::str::from_utf8(vocab) else { return };
    if let Ok(tok) = Tokenizer::from_vocab(vocab, config, FUZZ_MAX_LENGTH) {
        probe_tokenizer(&tok);
    }
}

fn split_at_zero(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    }
}

fn probe_tokenizer(tok: &Tokenizer) {
    for (text, pair) in PROBE_TEXTS {
        if let Ok(e) = tok.encode(text, pair) {
            check_encoding(tok, &e, text, pair);
        }
    }
}

/// What every encoding must satisfy: one entry per token in every vector, at most `max_length` tokens, offsets
/// inside the text their token came from. (Ids outside the model's vocabulary or segment types, which a hostile
/// tokenizer.json can produce, are refused by the backends' embedding lookup.)
fn check_encoding(tok: &Tokenizer, e: &Encoded, text: &str, pair: Option<&str>) {
    let n = e.ids.len();
    for (what, len) in [
        ("type_ids", e.type_ids.len()),
        ("tokens", e.tokens.len()),
        ("offsets", e.offsets.len()),
        ("special_tokens_mask", e.special_tokens_mask.len()),
        ("sequence_ids", e.sequence_ids.len()),
        ("word_ids", e.word_ids.len()),
    ] {
        assert_eq!(len, n, "{what} has {len} entries for {n} ids");
    }
    assert!(n <= tok.max_length(), "{n} tokens over the limit of {}", tok.max_length());
    let chars = [text.chars().count(), pair.map_or(0, |p| p.chars().count())];
    for i in 0..n {
        let (s, end) = e.offsets[i];
        assert!(s <= end, "offsets {s}..{end} of token {i} run backwards");
        if let Some(seq) = e.sequence_ids[i] {
            assert!(seq <= 1 && end <= chars[seq], "offsets {s}..{end} past the {} chars of text {seq}", chars[seq]);
        }
    }
}

/// The tiny checkpoints of `tests/models/` on the CPU backend: one engine per head family.
pub struct InferenceModels {
    /// `BertForSequenceClassification`: embed (both poolings) and classify.
    pub classifier: Engine,
    /// `BertForTokenClassification`: ner.
    pub ner: Engine,
    /// `BertForQuestionAnswering`: qa.
    pub qa: Engine,
    /// `BertForPreTraining`: fill-mask and next-sentence.
    pub pretraining: Engine,
}

impl InferenceModels {
    /// `dir` is the repository's `tests/models`.
    pub fn load(dir: &Path) -> crate::Result<InferenceModels> {
        let load = |name: &str| pollster::block_on(Engine::from_dir(dir.join(name), Device::Cpu));
        Ok(InferenceModels {
            classifier: load("tiny-classifier")?,
            ner: load("tiny-ner")?,
            qa: load("tiny-qa")?,
            pretraining: load("tiny-pretraining")?,
        })
    }
}

/// Arbitrary text (and a pair) through every task: byte 0 picks the options, the rest is split at the first 0xFF
/// byte (never part of UTF-8, so texts stay arbitrary) into `text` and `text_pair`; invalid UTF-8 is replaced as a
/// JSON or JavaScript string would carry it.
pub fn inference(models: &InferenceModels, data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else { return };
    let (a, b) = match rest.iter().position(|&x| x == 0xFF) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let a = String::from_utf8_lossy(a);
    let b = b.map(String::from_utf8_lossy);
    let (a, b) = (a.as_ref(), b.as_deref());

    // tokenize
    let m = &models.classifier;
    if let Ok(e) = m.tokenizer().encode(a, b) {
        check_encoding(m.tokenizer(), &e, a, b.filter(|p| !p.is_empty()));
    }

    // embed: the texts alone and as a batch of two (padding), each pooling; one vector of H finite values each.
    let h = m.config().hidden_size;
    let opts = EmbedOptions {
        pooling: Some(Pooling::ALL[((flags as usize & 1) | (flags as usize >> 6) << 1) % Pooling::ALL.len()]),
        normalize: Some(flags & 2 != 0),
        batch_size: 1 + (flags >> 4) as usize % 4,
        ..EmbedOptions::default()
    };
    let texts: Vec<&str> = std::iter::once(a).chain(b).collect();
    if let Ok(vs) = block(m.embed(&texts, &opts)) {
        assert_eq!(vs.len(), texts.len());
        for v in &vs {
            assert_eq!(v.len(), h);
            assert!(v.iter().all(|x| x.is_finite()), "non-finite embedding of {texts:?}: {v:?}");
        }
    }

    // classify: a probability per label, summing to 1.
    if let Ok(out) = block(m.classify(&[(a, b)], None)) {
        let scores = &out[0];
        assert_eq!(scores.len(), m.config().num_labels());
        check_probabilities(scores.iter().map(|s| s.score), true);
    }

    // ner: spans inside the text.
    let agg = if flags & 4 == 0 { Aggregation::None } else { Aggregation::Simple };
    if let Ok(out) = block(models.ner.token_classify(&[(a, None)], agg)) {
        let chars = a.chars().count();
        for ent in &out[0] {
            assert!(ent.start <= ent.end && ent.end <= chars, "entity {ent:?} outside the {chars} chars of {a:?}");
            check_probabilities([ent.score], false);
        }
    }

    // qa: `b` is the context; the answer is the context's text between the offsets.
    if let Some(ctx) = b {
        if let Ok(ans) = block(models.qa.answer(a, ctx)) {
            let chars = ctx.chars().count();
            assert!(ans.start <= ans.end && ans.end <= chars, "answer {ans:?} outside the {chars} chars of the context");
            let want: String = ctx.chars().skip(ans.start).take(ans.end - ans.start).collect();
            assert_eq!(ans.answer, want);
            check_probabilities([ans.score], false);
        }
    }

    // fill-mask (needs a [MASK] in the text) and next-sentence.
    let p = &models.pretraining;
    if let Ok(out) = block(p.fill_mask(&[a], 1 + (flags >> 3) as usize % 3)) {
        for per_mask in &out[0] {
            check_probabilities(per_mask.iter().map(|x| x.score), false);
            assert!(per_mask.windows(2).all(|w| w[0].score >= w[1].score), "fill-mask not best first");
        }
    }
    if let Some(b) = b {
        if let Ok(out) = block(p.next_sentence(&[(a, b)])) {
            check_probabilities([out[0].is_next], false);
        }
    }
}

/// Every score is a probability; with `sums_to_one`, they are a distribution (up to f32 rounding).
fn check_probabilities(scores: impl IntoIterator<Item = f32>, sums_to_one: bool) {
    let v: Vec<f32> = scores.into_iter().collect();
    assert!(v.iter().all(|p| (0.0..=1.0).contains(p)), "scores outside [0, 1]: {v:?}");
    if sums_to_one && !v.is_empty() {
        let s: f32 = v.iter().sum();
        assert!((s - 1.0).abs() < 1e-4, "scores sum to {s}: {v:?}");
    }
}
