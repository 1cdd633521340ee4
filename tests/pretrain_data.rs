//! Pre-training rows (src/training/pretrain_data.rs) checked against the BERT paper's definition on a real corpus:
//! the quotations of tests/data/fortunes-large (each quotation a document, its sentences split on ". "), tokenized
//! with all-MiniLM-L6-v2's real WordPiece vocabulary (30522 tokens, so words have `##` pieces) and, for the quick
//! checks, tests/models/tiny-pretraining's.
//!
//! The statistics are counted from the rows alone (the original token of a position is its label where one is
//! set, else its input), never from the code's own bookkeeping: selected fraction, 80/10/10, NSP labels, whole
//! words, special tokens, segment ids, lengths, and every segment's tokens found in the sentences it names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bertgpu::tokenizer::Tokenizer;
use bertgpu::training::loss::IGNORE;
use bertgpu::training::pretrain_data::{
    parse_corpus, pretrain_rows, CorpusFormat, PretrainBatch, PretrainOptions, PretrainRow, Span,
    TokenizedCorpus, MAX_LINE_CHARS,
};
use bertgpu::Error;

/// The bounds: selected 15% ± 0.5 points, of those 80/10/10 ± 1 point, NSP 50/50 ± 2 points.
const SELECTED_TOL: f64 = 0.005;
const SPLIT_TOL: f64 = 0.01;
const NSP_TOL: f64 = 0.02;
/// The "over ≥ 100k tokens": candidates counted over all rows (the corpus is made again with other seeds
/// until there are this many).
const MIN_TOKENS: usize = 100_000;
/// With NSP, also this many pairs: the IsNext fraction's standard deviation is then 0.5/√10000 = 0.5 points, so
/// the ± 2 points bound is 4σ (a deterministic run either way, but a coin biased by 2 points would not pass by luck).
const MIN_PAIRS: usize = 10_000;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn minilm() -> Tokenizer {
    Tokenizer::from_dir(root().join("models/all-MiniLM-L6-v2"), 512)
        .expect("models/all-MiniLM-L6-v2 (scripts/fetch-models.sh)")
}

fn tiny() -> Tokenizer {
    Tokenizer::from_dir(root().join("tests/models/tiny-pretraining"), 64).unwrap()
}

fn data(name: &str) -> PathBuf {
    root().join("tests/data/fortunes-large").join(name)
}

/// Each quotation a document, its sentences split on ". ".
fn fortunes() -> Vec<Vec<String>> {
    let mut docs = Vec::new();
    for file in ["train.jsonl", "test.jsonl"] {
        let text = std::fs::read_to_string(data(file)).unwrap();
        for doc in parse_corpus(&text, CorpusFormat::Jsonl).unwrap() {
            assert_eq!(doc.len(), 1, "a fortunes quotation is one line");
            let sentences: Vec<String> =
                doc[0].split(". ").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
            docs.push(sentences);
        }
    }
    assert_eq!(docs.len(), 880);
    docs
}

/// The token at each position before masking.
fn original(row: &PretrainRow) -> Vec<u32> {
    row.input_ids.iter().zip(&row.mlm_labels).map(|(&i, &l)| if l == IGNORE { i } else { l as u32 }).collect()
}

fn input_err<T: std::fmt::Debug>(r: bertgpu::Result<T>, words: &[&str]) {
    match r {
        Err(Error::Input(m)) => {
            for w in words {
                assert!(m.contains(w), "`{m}` should say `{w}`");
            }
        }
        other => panic!("expected an input error saying {words:?}, got {other:?}"),
    }
}

fn contains(hay: &[u32], needle: &[u32]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// The tokens of the sentences a span names, in order.
fn span_ids(corpus: &TokenizedCorpus, span: &Span) -> Vec<u32> {
    span.sentences.clone().flat_map(|s| corpus.sentence_ids(span.document, s).unwrap()).collect()
}

/// Counts over many rows.
#[derive(Default, Debug)]
struct Stats {
    candidates: usize,
    selected: usize,
    masked: usize,
    unchanged: usize,
    random: usize,
    is_next: usize,
    not_next: usize,
    /// Words (a piece and its `##` pieces) partly selected.
    split_words: usize,
    rows: usize,
}

/// Checks one row's structure against the corpus and adds its counts.
fn check_row(row: &PretrainRow, tok: &Tokenizer, corpus: &TokenizedCorpus, o: &PretrainOptions, st: &mut Stats) {
    let (cls, sep, mask) = (tok.cls().id, tok.sep().id, tok.mask_token().unwrap().id);
    let n = row.input_ids.len();
    assert!(n <= o.max_length, "a row of {n} tokens, over {}", o.max_length);
    assert_eq!(row.token_type_ids.len(), n);
    assert_eq!(row.mlm_labels.len(), n);
    let orig = original(row);
    // Special tokens are never selected.
    for (k, &id) in orig.iter().enumerate() {
        if corpus.is_special(id) {
            assert_eq!(row.mlm_labels[k], IGNORE, "special token {id} at {k} selected");
        } else {
            st.candidates += 1;
        }
    }
    // Framing and segment ids: [CLS] A [SEP] (0) B [SEP] (1).
    assert_eq!(orig[0], cls);
    assert_eq!(orig[n - 1], sep);
    let seps: Vec<usize> = (0..n).filter(|&k| orig[k] == sep).collect();
    let a_end = seps[0];
    match (row.nsp_label, &row.b) {
        (Some(label), Some(b)) => {
            assert_eq!(seps.len(), 2, "a pair has two [SEP]");
            let want: Vec<u32> = (0..n).map(|k| u32::from(k > a_end)).collect();
            assert_eq!(row.token_type_ids, want);
            let b_ids = &orig[a_end + 1..n - 1];
            assert!(contains(&span_ids(corpus, b), b_ids), "B is not a piece of the sentences it names");
            match label {
                0 => {
                    st.is_next += 1;
                    assert_eq!(b.document, row.a.document, "IsNext B from another document");
                    assert_eq!(b.sentences.start, row.a.sentences.end, "IsNext B does not follow A");
                }
                // ALBERT's sentence order: the row's second segment comes first in the document.
                1 if o.sentence_order => {
                    st.not_next += 1;
                    assert_eq!(b.document, row.a.document, "a swapped pair from two documents");
                    assert_eq!(row.a.sentences.start, b.sentences.end, "a swapped pair's segments are not consecutive");
                }
                1 => {
                    st.not_next += 1;
                    assert_ne!(b.document, row.a.document, "NotNext B from A's own document");
                }
                l => panic!("NSP label {l}"),
            }
        }
        (None, None) => {
            assert_eq!(seps.len(), 1, "a single segment has one [SEP]");
            assert!(row.token_type_ids.iter().all(|&t| t == 0));
        }
        other => panic!("nsp_label and b disagree: {other:?}"),
    }
    let a_ids = &orig[1..a_end];
    let a = &row.a;
    assert!(!a.sentences.is_empty() && a.sentences.end <= corpus.sentences(a.document));
    assert!(contains(&span_ids(corpus, a), a_ids), "A is not a piece of the sentences it names");
    // 80/10/10 of the selected.
    for ((&id, &label), &was) in row.input_ids.iter().zip(&row.mlm_labels).zip(&orig) {
        if label == IGNORE {
            continue;
        }
        st.selected += 1;
        match id {
            id if id == mask => st.masked += 1,
            id if id == was => st.unchanged += 1,
            _ => st.random += 1,
        }
    }
    // Words by the `##` rule (a special token ends a word; a word cut by truncation starts after [CLS] or [SEP]).
    let mut k = 1;
    while k < n {
        if corpus.is_special(orig[k]) {
            k += 1;
            continue;
        }
        let mut end = k + 1;
        while end < n && !corpus.is_special(orig[end]) && tok.id_to_token(orig[end]).unwrap().starts_with("##") {
            end += 1;
        }
        let chosen = (k..end).filter(|&j| row.mlm_labels[j] != IGNORE).count();
        if chosen != 0 && chosen != end - k {
            st.split_words += 1;
        }
        k = end;
    }
    st.rows += 1;
}

/// Rows of the fortunes with seeds 0, 1, ... until [`MIN_TOKENS`] candidates (and with NSP [`MIN_PAIRS`] pairs),
/// checked and counted.
fn run(tok: &Tokenizer, corpus: &TokenizedCorpus, o: &PretrainOptions) -> Stats {
    let mut st = Stats::default();
    let mut seed = 0;
    while st.candidates < MIN_TOKENS || (o.nsp && st.is_next + st.not_next < MIN_PAIRS) {
        let rows = pretrain_rows(corpus, &PretrainOptions { seed, ..o.clone() }).unwrap();
        assert!(!rows.is_empty());
        for row in &rows {
            check_row(row, tok, corpus, o, &mut st);
        }
        seed += 1;
    }
    eprintln!("{o:?} ({seed} seeds): {st:?}");
    st
}

fn check_masking(st: &Stats, tok: &Tokenizer, p: f64) {
    let frac = st.selected as f64 / st.candidates as f64;
    eprintln!("selected {:.4} of {} candidates", frac, st.candidates);
    assert!((frac - p).abs() <= SELECTED_TOL, "selected {frac}, want {p} ± {SELECTED_TOL}");
    // A random replacement draws [MASK] or the original token with probability 1/V each.
    let v = tok.vocab_size() as f64;
    let sel = st.selected as f64;
    for (what, got, want) in [
        ("[MASK]", st.masked, 0.8 + 0.1 / v),
        ("unchanged", st.unchanged, 0.1 + 0.1 / v),
        ("random", st.random, 0.1 - 0.2 / v),
    ] {
        let got = got as f64 / sel;
        eprintln!("{what} {got:.4} (want {want:.4})");
        assert!((got - want).abs() <= SPLIT_TOL, "{what}: {got}, want {want} ± {SPLIT_TOL}");
    }
}

#[test]
fn nsp_pairs_and_masking_statistics() {
    let tok = minilm();
    let corpus = TokenizedCorpus::new(&tok, &fortunes()).unwrap();
    let o = PretrainOptions { max_length: 64, ..Default::default() };
    let st = run(&tok, &corpus, &o);
    check_masking(&st, &tok, 0.15);
    let pairs = (st.is_next + st.not_next) as f64;
    let is_next = st.is_next as f64 / pairs;
    eprintln!("IsNext {is_next:.4} of {pairs} pairs");
    assert!((is_next - 0.5).abs() <= NSP_TOL, "IsNext {is_next}, want 0.5 ± {NSP_TOL}");
    // Token-level masking splits words: the whole-word check below would see it.
    assert!(st.split_words > 100, "only {} words split without whole-word masking", st.split_words);
}

/// ALBERT's sentence-order pairs (`sentence_order`): both segments consecutive in one document, in order (label 0)
/// or swapped (label 1: the row's first segment follows its second in the document), the coin fair; every row's
/// segments are the tokens of the sentences they name (`check_row`). A one-document corpus is enough.
#[test]
fn sentence_order_pairs_are_consecutive_segments_swapped_at_random() {
    let tok = minilm();
    let corpus = TokenizedCorpus::new(&tok, &fortunes()).unwrap();
    let o = PretrainOptions { max_length: 64, sentence_order: true, ..Default::default() };
    let st = run(&tok, &corpus, &o);
    check_masking(&st, &tok, 0.15);
    let pairs = (st.is_next + st.not_next) as f64;
    let in_order = st.is_next as f64 / pairs;
    eprintln!("in order {in_order:.4} of {pairs} pairs");
    assert!((in_order - 0.5).abs() <= NSP_TOL, "in order {in_order}, want 0.5 ± {NSP_TOL}");
    // The swap is of whole segments: a swapped row's first segment is the later sentences, token for token.
    let one = TokenizedCorpus::new(&tok, &[vec!["the first sentence is here.".into(), "then comes the second one.".into(),
        "and a third follows them.".into()]]).unwrap();
    let mut labels = BTreeMap::new();
    for seed in 0..40 {
        // No shorter rows: nothing is truncated.
        for row in pretrain_rows(&one, &PretrainOptions { short_seq_prob: 0.0, seed, ..o.clone() }).unwrap() {
            let (a, b) = (row.a.clone(), row.b.clone().unwrap());
            let first = &original(&row)[1..1 + span_ids(&one, &a).len()];
            assert_eq!(first, &span_ids(&one, &a)[..], "the row holds segment a first, whole");
            let swapped = a.sentences.start == b.sentences.end;
            assert_eq!(row.nsp_label, Some(u32::from(swapped)), "{a:?} then {b:?}");
            *labels.entry(swapped).or_insert(0) += 1;
        }
    }
    assert_eq!(labels.len(), 2, "both orders drawn over 40 seeds: {labels:?}");
}

#[test]
fn whole_word_masking_keeps_words_whole() {
    let tok = minilm();
    let corpus = TokenizedCorpus::new(&tok, &fortunes()).unwrap();
    let o = PretrainOptions { max_length: 64, whole_word_mask: true, ..Default::default() };
    let st = run(&tok, &corpus, &o);
    assert_eq!(st.split_words, 0, "whole-word masking split words");
    check_masking(&st, &tok, 0.15);
    // Another probability is honoured too.
    let o = PretrainOptions { mlm_probability: 0.3, nsp: false, ..o };
    let st = run(&tok, &corpus, &o);
    assert_eq!(st.split_words, 0);
    check_masking(&st, &tok, 0.3);
}

#[test]
fn mlm_only_segments_cover_every_token_once() {
    let tok = minilm();
    let docs = fortunes();
    let corpus = TokenizedCorpus::new(&tok, &docs).unwrap();
    assert_eq!(corpus.documents(), docs.len());
    let o = PretrainOptions { max_length: 24, nsp: false, ..Default::default() };
    let rows = pretrain_rows(&corpus, &o).unwrap();
    let mut st = Stats::default();
    let mut per_doc: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for row in &rows {
        check_row(row, &tok, &corpus, &o, &mut st);
        let orig = original(row);
        per_doc.entry(row.a.document).or_default().extend_from_slice(&orig[1..orig.len() - 1]);
    }
    assert_eq!(per_doc.len(), corpus.documents());
    for (d, got) in per_doc {
        let want: Vec<u32> = (0..corpus.sentences(d)).flat_map(|s| corpus.sentence_ids(d, s).unwrap()).collect();
        assert_eq!(got, want, "document {d}: the segments are not its tokens in order");
    }
    // Packed: a row and its successor of the same document would not have fitted together.
    for w in rows.windows(2) {
        if w[0].a.document == w[1].a.document && w[0].a.sentences.end == w[1].a.sentences.start {
            let next = corpus.sentence_ids(w[1].a.document, w[1].a.sentences.start).unwrap().len();
            assert!(w[0].input_ids.len() + next > o.max_length, "rows that fit together were not packed");
        }
    }
}

#[test]
fn seeded_and_reproducible() {
    let tok = tiny();
    let corpus = TokenizedCorpus::new(&tok, &fortunes()).unwrap();
    for nsp in [true, false] {
        let o = PretrainOptions { max_length: 48, nsp, whole_word_mask: nsp, seed: 7, ..Default::default() };
        let a = pretrain_rows(&corpus, &o).unwrap();
        assert!(a.len() > 100);
        assert_eq!(a, pretrain_rows(&corpus, &o).unwrap(), "the same seed gave other rows");
        let b = pretrain_rows(&corpus, &PretrainOptions { seed: 8, ..o.clone() }).unwrap();
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(same * 10 < a.len().min(b.len()), "seeds 7 and 8 gave {same} identical rows of {}", a.len());
        let mut st = Stats::default();
        for row in &a {
            check_row(row, &tok, &corpus, &o, &mut st);
        }
    }
}

#[test]
fn rows_as_json_and_padded_batches() {
    let tok = tiny();
    let corpus = TokenizedCorpus::new(&tok, &fortunes()).unwrap();
    let rows = pretrain_rows(&corpus, &PretrainOptions { max_length: 32, ..Default::default() }).unwrap();
    let rows = &rows[..5];
    let json: serde_json::Value = serde_json::to_value(rows).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 5);
    for (r, j) in rows.iter().zip(json.as_array().unwrap()) {
        let ints = |k: &str| -> Vec<i64> { j[k].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect() };
        assert_eq!(ints("input_ids"), r.input_ids.iter().map(|&x| x as i64).collect::<Vec<_>>());
        assert_eq!(ints("token_type_ids"), r.token_type_ids.iter().map(|&x| x as i64).collect::<Vec<_>>());
        assert_eq!(ints("mlm_labels"), r.mlm_labels);
        assert_eq!(j["nsp_label"].as_u64(), r.nsp_label.map(u64::from));
    }
    let pad = tok.pad().id;
    let refs: Vec<&PretrainRow> = rows.iter().collect();
    let b = PretrainBatch::new(&refs, pad).unwrap();
    let t = rows.iter().map(|r| r.input_ids.len()).max().unwrap();
    assert_eq!((b.batch.b, b.batch.t), (5, t));
    assert_eq!(b.mlm_labels.len(), 5 * t);
    assert_eq!(b.nsp_labels, Some(rows.iter().map(|r| r.nsp_label.unwrap()).collect()));
    for (i, r) in rows.iter().enumerate() {
        let (n, row) = (r.input_ids.len(), i * t);
        assert_eq!(&b.batch.input_ids[row..row + n], r.input_ids.as_slice());
        assert!(b.batch.input_ids[row + n..row + t].iter().all(|&x| x == pad));
        assert!(b.batch.attention_mask[row..row + t].iter().enumerate().all(|(k, &m)| m == u32::from(k < n)));
        assert!(b.mlm_labels[row + n..row + t].iter().all(|&l| l == IGNORE));
        assert_eq!(&b.mlm_labels[row..row + n], r.mlm_labels.as_slice());
    }
    let mlm = pretrain_rows(&corpus, &PretrainOptions { max_length: 32, nsp: false, ..Default::default() }).unwrap();
    input_err(PretrainBatch::new(&[&rows[0], &mlm[0]], pad), &["NSP"]);
    input_err(PretrainBatch::new(&[], pad), &["empty"]);
}

#[test]
fn corpus_formats() {
    let docs = parse_corpus("\u{feff}First one.\r\nSecond one.\r\n\r\n \n\nOther doc.\n", CorpusFormat::Text).unwrap();
    assert_eq!(docs, vec![vec!["First one.", "Second one."], vec!["Other doc."]]);
    let jsonl = "{\"text\": \"a b.\\nc d.\\n\\n\", \"label\": 3}\n\n{\"text\": \"e\"}\n";
    assert_eq!(parse_corpus(jsonl, CorpusFormat::Jsonl).unwrap(), vec![vec!["a b.", "c d."], vec!["e"]]);
    assert_eq!(CorpusFormat::from_file_name("x/corpus.JSONL"), CorpusFormat::Jsonl);
    assert_eq!(CorpusFormat::from_file_name("corpus.txt"), CorpusFormat::Text);
    // The fortunes as plain text give back the same documents.
    let docs = fortunes();
    let text: String = docs.iter().map(|d| d.join("\n") + "\n\n").collect();
    assert_eq!(parse_corpus(&text, CorpusFormat::Text).unwrap(), docs);
}

#[test]
fn bad_corpora_and_options_are_clear_errors() {
    for f in [CorpusFormat::Text, CorpusFormat::Jsonl] {
        input_err(parse_corpus("", f), &["no text"]);
        input_err(parse_corpus("\n  \n\t\n", f), &["no text"]);
    }
    input_err(parse_corpus("not json\n", CorpusFormat::Jsonl), &["line 1", "\"text\""]);
    input_err(parse_corpus("{\"text\": \"a\"}\n[1, 2]\n", CorpusFormat::Jsonl), &["line 2"]);
    input_err(parse_corpus("{\"body\": \"a\"}\n", CorpusFormat::Jsonl), &["line 1", "text"]);
    input_err(parse_corpus("{\"text\": 5}\n", CorpusFormat::Jsonl), &["line 1"]);
    input_err(parse_corpus("{\"text\": \"a\"}\n{\"text\": \" \\n \"}\n", CorpusFormat::Jsonl), &["line 2", "empty"]);
    let long = "é".repeat(MAX_LINE_CHARS + 1);
    input_err(parse_corpus(&format!("ok\n{long}\n"), CorpusFormat::Text), &["line 2", "100000"]);
    input_err(parse_corpus(&format!("{{\"text\": \"ok\\n{long}\"}}"), CorpusFormat::Jsonl), &["line 1", "100000"]);
    assert!(parse_corpus(&"é".repeat(MAX_LINE_CHARS), CorpusFormat::Text).is_ok(), "the limit itself is allowed");

    let tok = tiny();
    let rows = |docs: &[&[&str]], o: PretrainOptions| {
        let docs: Vec<Vec<String>> = docs.iter().map(|d| d.iter().map(|s| s.to_string()).collect()).collect();
        pretrain_rows(&TokenizedCorpus::new(&tok, &docs).unwrap(), &o)
    };
    let nsp = PretrainOptions::default();
    input_err(rows(&[&["the man went to the store.", "he bought milk."]], nsp.clone()), &["2 documents", "has 1"]);
    input_err(rows(&[&["the man went.", "he bought."], &["\u{0}"]], nsp.clone()), &["2 documents", "has 1"]);
    input_err(rows(&[&["one sentence."], &["another one."]], nsp.clone()), &["at least 2 sentences"]);
    input_err(rows(&[&["\u{0}"]], PretrainOptions { nsp: false, ..nsp.clone() }), &["no token"]);
    let two: &[&[&str]] = &[&["the man went.", "he bought."], &["a b."]];
    input_err(rows(two, PretrainOptions { max_length: 4, ..nsp.clone() }), &["max_length 4", "at least 5"]);
    input_err(rows(two, PretrainOptions { max_length: 2, nsp: false, ..nsp.clone() }), &["at least 3"]);
    for p in [0.0, -0.1, 1.5, f64::NAN] {
        input_err(rows(two, PretrainOptions { mlm_probability: p, ..nsp.clone() }), &["mlm_probability"]);
    }
    // The smallest rows work: one token of A and one of B, or of S.
    let ok = rows(two, PretrainOptions { max_length: 5, ..nsp.clone() }).unwrap();
    assert!(ok.iter().all(|r| r.input_ids.len() == 5));
    let ok = rows(two, PretrainOptions { max_length: 3, nsp: false, mlm_probability: 1.0, ..nsp }).unwrap();
    assert!(ok.iter().all(|r| r.input_ids.len() == 3 && r.mlm_labels[1] != IGNORE));
}

/// Google's `short_seq_prob`: that fraction of the NSP chunks gets a target length drawn uniformly in
/// `2 ..= max_length − 3`. With it at 0 no row is short but by the document's end; at 1 the rows' mean length falls
/// well below the full one; outside [0, 1] it is refused.
#[test]
fn shorter_rows_at_short_seq_prob() {
    let tok = tiny();
    let corpus = TokenizedCorpus::new(&tok, &fortunes()).unwrap();
    let max_length = 64;
    let mean_len = |p: f64| {
        let o = PretrainOptions { max_length, short_seq_prob: p, seed: 3, ..Default::default() };
        let rows = pretrain_rows(&corpus, &o).unwrap();
        let mut st = Stats::default();
        for row in &rows {
            check_row(row, &tok, &corpus, &o, &mut st);
        }
        rows.iter().map(|r| r.input_ids.len() as f64).sum::<f64>() / rows.len() as f64
    };
    let (full, default, short) = (mean_len(0.0), mean_len(0.1), mean_len(1.0));
    eprintln!("mean row length: {full:.1} (short_seq_prob 0), {default:.1} (0.1), {short:.1} (1)");
    // Uniform targets in 2..=61 average ~32 tokens, plus the chunk's last sentence and the 3 special tokens.
    assert!(short < 0.75 * full, "short_seq_prob 1 should shorten the rows: {short:.1} against {full:.1}");
    assert!(default < full && default > short, "0.1 lies between: {default:.1}");
    for bad in [-0.1, 1.5, f64::NAN] {
        let o = PretrainOptions { short_seq_prob: bad, ..Default::default() };
        let err = pretrain_rows(&corpus, &o).unwrap_err().to_string();
        assert!(err.contains("short_seq_prob"), "{bad}: {err}");
    }
}

/// Dynamic masking (RoBERTa's): each epoch from the second masks every row again, from a seed of its own; the row's
/// tokens, segments and NSP label stay, the masks obey the same statistics (and whole words stay whole), epoch 1 is
/// the row as made, and the same (epoch, row) always gives the same masks. Without the option every epoch is the row.
#[test]
fn dynamic_masking_masks_each_epoch_anew() {
    let tok = minilm();
    let corpus = TokenizedCorpus::new(&tok, &fortunes()).unwrap();
    for whole_word_mask in [false, true] {
        let o = PretrainOptions { max_length: 64, whole_word_mask, dynamic_masking: true, seed: 3, ..Default::default() };
        let rows = pretrain_rows(&corpus, &o).unwrap();
        let mut st = Stats::default();
        let (mut changed, mut epoch) = (0, 1);
        while st.candidates < MIN_TOKENS {
            epoch += 1;
            for (i, row) in rows.iter().enumerate() {
                assert_eq!(&row.remasked(&corpus, &o, 1, i), row, "epoch 1 is the row as made");
                let again = row.remasked(&corpus, &o, epoch, i);
                check_row(&again, &tok, &corpus, &o, &mut st);
                assert_eq!(original(&again), original(row), "row {i}'s tokens");
                assert_eq!((&again.token_type_ids, again.nsp_label, &again.a, &again.b),
                    (&row.token_type_ids, row.nsp_label, &row.a, &row.b));
                assert_eq!(again, row.remasked(&corpus, &o, epoch, i), "the same epoch and row, the same masks");
                changed += usize::from(again.mlm_labels != row.mlm_labels);
            }
        }
        let seen = (epoch - 1) * rows.len();
        eprintln!("whole words {whole_word_mask}: {changed} of {seen} rows masked otherwise than as made");
        assert!(changed * 10 > seen * 9, "only {changed} of {seen} re-masked rows differ from the row as made");
        check_masking(&st, &tok, 0.15);
        if whole_word_mask {
            assert_eq!(st.split_words, 0, "whole-word masking split words");
        }
        let fixed = PretrainOptions { dynamic_masking: false, ..o };
        assert!(rows.iter().enumerate().all(|(i, r)| &r.remasked(&corpus, &fixed, 5, i) == r), "static: every epoch the same");
    }
}
