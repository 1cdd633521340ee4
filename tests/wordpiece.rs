//! WordPiece vocabulary training (`bertgpu::tokenizer::train`, `bertgpu train-tokenizer`) against Python's trainer:
//! tests/golden/wordpiece.json, made by tests/golden/wordpiece.py with Python `tokenizers` 0.23.3 (the golden file
//! records the version) and `transformers` 5.24.0; ours is the Rust `tokenizers` crate 0.23.2 (Cargo.toml pins it).
//! Both run the same trainer code (`WordPieceTrainer`, the BPE trainer with `##` pieces); 0.23.3 changed nothing in
//! it that these settings show.
//!
//! What is compared, and why not the whole id order: the trainer numbers the `##c` pieces in the iteration order of a
//! hash map with per-process random keys and breaks ties between equally frequent merges by those numbers, so
//! Python's own runs give 20 different id orders in 20 runs (the golden's `distinct_orders`). What every run agrees
//! on, and what is checked here: the special tokens and the alphabet in id order, the `##c` pieces right after them
//! (as a set), the whole vocabulary as a set (the golden's settings are ones where Python's runs all agree on it:
//! no tie at the size cut-off), and the tokens of held-out texts and a pair, which WordPiece's longest match
//! derives from the set alone. The ids of those tokens are checked against our own vocab.txt.
//! The folder the CLI writes is checked by transformers in `wordpiece.py --check DIR SETTING` (its header says how).

use std::path::{Path, PathBuf};
use std::process::Command;

use bertgpu::tokenizer::train::{corpus_texts, train_wordpiece, TrainedTokenizer, WordPieceOptions};
use bertgpu::tokenizer::Tokenizer;
use bertgpu::Error;
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn golden() -> Value {
    let path = root().join("tests/golden/wordpiece.json");
    let text = std::fs::read_to_string(&path).expect("tests/golden/wordpiece.json (make it with tests/golden/wordpiece.py)");
    serde_json::from_str(&text).expect("golden json")
}

fn corpus(g: &Value) -> Vec<String> {
    let path = root().join(g["corpus"].as_str().unwrap());
    let texts = corpus_texts(&std::fs::read_to_string(path).unwrap(), true).unwrap();
    assert_eq!(texts.len(), 440, "the golden's corpus is fortunes-large's 440 training quotations");
    texts
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

fn options(s: &Value) -> WordPieceOptions {
    WordPieceOptions {
        vocab_size: s["vocab_size"].as_u64().unwrap() as usize,
        min_frequency: s["min_frequency"].as_u64().unwrap(),
        lowercase: s["lowercase"].as_bool().unwrap(),
        ..Default::default()
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Our tokenizer, through both of our loading paths, encodes the held-out texts into the golden's tokens, with ids
/// from our own vocabulary.
fn check_encodings(name: &str, trained: &TrainedTokenizer, s: &Value) {
    let config = trained.tokenizer_config.as_bytes();
    let loaded = [
        ("tokenizer.json", Tokenizer::from_json(trained.tokenizer_json.as_bytes(), Some(config), 512).unwrap()),
        ("vocab.txt", Tokenizer::from_vocab(&trained.vocab_txt, Some(config), 512).unwrap()),
    ];
    let encodings = s["encodings"].as_array().unwrap();
    assert_eq!(encodings.len(), 9, "{name}: 8 texts and a pair");
    for (path, tok) in &loaded {
        assert_eq!(tok.vocab_size(), trained.vocab.len(), "{name} {path}");
        assert_eq!((tok.pad().id, tok.unk().id, tok.cls().id, tok.sep().id), (0, 1, 2, 3), "{name} {path}");
        assert_eq!(tok.mask_token().unwrap().id, 4, "{name} {path}");
        for e in encodings {
            let text = e["text"].as_str().unwrap();
            let enc = tok.encode(text, e["pair"].as_str()).unwrap();
            assert_eq!(enc.tokens, strings(&e["tokens"]), "{name} {path}: {text:?}");
            let ids: Vec<u32> = enc.tokens.iter().map(|t| trained.vocab.iter().position(|v| v == t).unwrap() as u32).collect();
            assert_eq!(enc.ids, ids, "{name} {path}: {text:?}: ids are not vocab.txt's line numbers");
            if let Some(type_ids) = e["type_ids"].as_array() {
                let want: Vec<u32> = type_ids.iter().map(|t| t.as_u64().unwrap() as u32).collect();
                assert_eq!(enc.type_ids, want, "{name} {path}: {text:?}");
            }
        }
    }
}

#[test]
fn same_vocabulary_and_encodings_as_python() {
    let g = golden();
    let texts = corpus(&g);
    let settings = g["settings"].as_object().unwrap();
    assert_eq!(settings.len(), 3);
    for (name, s) in settings {
        let trained = train_wordpiece(&texts, &options(s)).unwrap();
        let vocab = &trained.vocab;
        let size = s["size"].as_u64().unwrap() as usize;
        assert_eq!(vocab.len(), size, "{name}: vocabulary size");
        assert_eq!(size, s["vocab_size"].as_u64().unwrap() as usize, "{name}: the golden reaches the target size");

        // The specials and the alphabet, in the same order.
        let prefix = strings(&s["prefix"]);
        assert!(prefix.len() > 40, "{name}: an alphabet of {} characters is too few to mean anything", prefix.len());
        assert_eq!(vocab[..prefix.len()], prefix[..], "{name}: special tokens and alphabet");
        // Then the alphabet's `##` pieces (their order is the trainer's hash order: compared as sets).
        let continuation = strings(&s["continuation"]);
        let n = prefix.len() + continuation.len();
        assert_eq!(sorted(vocab[prefix.len()..n].to_vec()), continuation, "{name}: the ## pieces after the alphabet");
        // The same set of tokens, and the merged pieces after the `##` pieces.
        assert_eq!(sorted(vocab.clone()), strings(&s["tokens"]), "{name}: the vocabulary as a set");
        assert!(vocab[n..].iter().all(|t| t.trim_start_matches("##").chars().count() >= 2), "{name}: merges last");

        // vocab.txt lists the vocabulary by id.
        assert_eq!(trained.vocab_txt.lines().collect::<Vec<_>>(), *vocab, "{name}: vocab.txt");
        let json: Value = serde_json::from_str(&trained.tokenizer_json).unwrap();
        assert_eq!(json["model"]["type"], "WordPiece");
        assert_eq!(json["normalizer"]["lowercase"], s["lowercase"], "{name}");
        assert_eq!(json["model"]["vocab"].as_object().unwrap().len(), size, "{name}");
        let config: Value = serde_json::from_str(&trained.tokenizer_config).unwrap();
        assert_eq!(config["do_lower_case"], s["lowercase"], "{name}");
        assert_eq!((config["tokenizer_class"].as_str(), config["model_max_length"].as_u64()), (Some("BertTokenizer"), Some(512)));

        check_encodings(name, &trained, s);
    }
}

#[test]
fn bad_options_and_corpora_are_errors() {
    let texts = corpus(&golden());
    let small = WordPieceOptions { vocab_size: 50, ..Default::default() };
    let e = train_wordpiece(&texts, &small).unwrap_err();
    assert!(matches!(&e, Error::Input(m) if m.contains("vocab_size 50 is too small") && m.contains("are 98 tokens; ask for at least 98")), "{e}");
    for size in [0, 5] {
        let e = train_wordpiece(&texts, &WordPieceOptions { vocab_size: size, ..Default::default() }).unwrap_err();
        assert!(matches!(&e, Error::Input(m) if m.contains("too small")), "{e}");
    }
    for empty in [vec![], vec!["", "  \n\t "]] {
        let e = train_wordpiece(&empty, &WordPieceOptions::default()).unwrap_err();
        assert!(matches!(&e, Error::Input(m) if m.contains("corpus is empty")), "{e}");
    }
    // min_frequency 0 is any pair, as 1 is.
    let zero = train_wordpiece(&texts, &WordPieceOptions { vocab_size: 200, min_frequency: 0, ..Default::default() });
    let one = train_wordpiece(&texts, &WordPieceOptions { vocab_size: 200, min_frequency: 1, ..Default::default() });
    assert_eq!(sorted(zero.unwrap().vocab), sorted(one.unwrap().vocab));
    // A high min_frequency stops the merges early: a smaller vocabulary, not an error.
    // Python's trainer at min_frequency 300: the 98 specials, alphabet and ## pieces, then 11 merges (`th`, `##er`,
    // `##in`, `the`, ...); at 1000 none.
    let rare = |min_frequency| {
        train_wordpiece(&texts, &WordPieceOptions { vocab_size: 30_000, min_frequency, ..Default::default() }).unwrap()
    };
    assert_eq!(rare(300).vocab.len(), 109);
    assert!(rare(300).vocab[98..].contains(&"the".to_string()));
    assert_eq!(rare(1000).vocab.len(), 98);

    let e = corpus_texts("{\"text\": \"a\"}\n{\"label\": 1}\n", true).unwrap_err();
    assert!(e.to_string().contains("line 2: no \"text\" string"), "{e}");
    let e = corpus_texts("{\"text\": \"a\"}\nnot json\n", true).unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    assert_eq!(corpus_texts("one\n\n two \r\n\nthree", false).unwrap(), ["one", " two ", "three"]);
}

/// Settings beyond the golden's: accents kept or stripped, CJK characters split into words of their own.
#[test]
fn normaliser_settings() {
    let texts = ["Café déjà vu, CAFÉ", "東京 東京 東京", "naïve naïve café"];
    let vocab = |lowercase, strip_accents| {
        let o = WordPieceOptions { vocab_size: 100, min_frequency: 1, lowercase, strip_accents, ..Default::default() };
        train_wordpiece(&texts, &o).unwrap().vocab
    };
    let uncased = vocab(true, None);
    // (Python's trainer on these texts: `cafe`, `deja`, `naive`, `東`, `京` among its words.)
    assert!(uncased.contains(&"cafe".into()) && uncased.contains(&"deja".into()), "{uncased:?}");
    assert!(!uncased[5..].iter().any(|t| t.contains('é') || t.contains('C')), "{uncased:?}");
    assert!(uncased.contains(&"東".into()) && !uncased.contains(&"東京".into()), "CJK characters are words");
    let kept = vocab(true, Some(false));
    assert!(kept.contains(&"café".into()) && !kept.contains(&"cafe".into()), "{kept:?}");
    let cased = vocab(false, None);
    assert!(cased.contains(&"CAFÉ".into()) || cased.contains(&"C".into()) && cased.contains(&"É".into()), "{cased:?}");
    let config: Value = serde_json::from_str(
        &train_wordpiece(&texts, &WordPieceOptions { vocab_size: 100, lowercase: false, ..Default::default() })
            .unwrap()
            .tokenizer_config,
    )
    .unwrap();
    assert_eq!((config["do_lower_case"].as_bool(), config["strip_accents"].is_null()), (Some(false), true));
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bertgpu-wordpiece-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn cli_writes_a_folder_our_loader_reads() {
    let g = golden();
    let s = &g["settings"]["uncased-300"];
    let out = tmp("cli");
    let data = root().join(g["corpus"].as_str().unwrap());
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_bertgpu")).args(args).output().unwrap();
    let o = run(&["train-tokenizer", "--data", data.to_str().unwrap(), "--vocab-size", "300", "--min-frequency", "2",
        "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("300 tokens from 440 texts"));
    for f in ["tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"] {
        assert!(out.join(f).is_file(), "{f} was not written");
    }
    let vocab: Vec<String> = std::fs::read_to_string(out.join("vocab.txt")).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(sorted(vocab.clone()), strings(&s["tokens"]));
    let tok = Tokenizer::from_dir(&out, 512).unwrap();
    let e = &s["encodings"][0];
    assert_eq!(tok.encode(e["text"].as_str().unwrap(), None).unwrap().tokens, strings(&e["tokens"]));
    let map: Value = serde_json::from_slice(&std::fs::read(out.join("special_tokens_map.json")).unwrap()).unwrap();
    assert_eq!(map["mask_token"], "[MASK]");

    // --lowercase false: a cased vocabulary (the golden's cased-500 set).
    let cased = tmp("cli-cased");
    let o = run(&["train-tokenizer", "--data", data.to_str().unwrap(), "--vocab-size", "500", "--lowercase", "false",
        "--out", cased.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let vocab: Vec<String> = std::fs::read_to_string(cased.join("vocab.txt")).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(sorted(vocab), strings(&g["settings"]["cased-500"]["tokens"]));

    // Errors: exit 2 and the reason on stderr.
    let o = run(&["train-tokenizer", "--data", data.to_str().unwrap(), "--vocab-size", "20", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("vocab_size 20 is too small"), "{}", String::from_utf8_lossy(&o.stderr));
    let missing = out.join("no-such-corpus.txt");
    let o = run(&["train-tokenizer", "--data", missing.to_str().unwrap(), "--vocab-size", "300", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read"));
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&cased);
}
