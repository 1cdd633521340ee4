//! Tokenizer parity with Python `transformers` on the golden table (tests/golden/tokens.json, made by
//! tests/golden/tokens.py), for both models and both loading paths, plus batching, limits and broken files.

use std::path::{Path, PathBuf};

use bertgpu::tokenizer::{char_to_utf16_offsets, Encoded, Tokenizer};
use bertgpu::Error;
use serde_json::Value;

const MODELS: [&str; 2] = ["all-MiniLM-L6-v2", "splade-tiny"];

fn model_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name);
    assert!(dir.join("config.json").exists(), "{} is missing: run scripts/fetch-models.sh", dir.display());
    dir
}

fn golden() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/tokens.json");
    let text = std::fs::read_to_string(&path).expect("tests/golden/tokens.json (make it with tests/golden/tokens.py)");
    serde_json::from_str(&text).expect("golden json")
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// vocab.txt of a model: the real file when it ships one, else tokenizer.json's vocabulary written in id order
/// (splade-tiny ships only tokenizer.json).
fn vocab_txt(dir: &Path) -> String {
    if let Ok(t) = std::fs::read_to_string(dir.join("vocab.txt")) {
        return t;
    }
    let json: Value = serde_json::from_slice(&std::fs::read(dir.join("tokenizer.json")).unwrap()).unwrap();
    let vocab = json["model"]["vocab"].as_object().unwrap();
    let mut by_id: Vec<(&String, u64)> = vocab.iter().map(|(t, id)| (t, id.as_u64().unwrap())).collect();
    by_id.sort_by_key(|(_, id)| *id);
    for (i, (_, id)) in by_id.iter().enumerate() {
        assert_eq!(*id, i as u64, "vocabulary ids must be 0..n");
    }
    by_id.iter().map(|(t, _)| format!("{t}\n")).collect()
}

/// Checks one tokenizer against the whole golden table of `model`; returns the number of cases checked.
fn check_table(tok: &mut Tokenizer, golden: &Value, model: &str, path: &str) -> usize {
    let cases = golden["cases"].as_array().unwrap();
    let m = &golden["models"][model];
    let default_max = m["max_length"].as_u64().unwrap() as usize;
    let results = m["results"].as_array().unwrap();
    assert_eq!(cases.len(), results.len());
    let mut failures = Vec::new();
    for (case, want) in cases.iter().zip(results) {
        let name = case["name"].as_str().unwrap();
        let max = case.get("max_length").and_then(Value::as_u64).map(|x| x as usize).unwrap_or(default_max);
        tok.set_max_length(max).unwrap();
        let text = case["text"].as_str().unwrap();
        let pair = case.get("text_pair").and_then(Value::as_str);
        let got = tok.encode(text, pair).unwrap();
        let want_ids = u32s(&want["input_ids"]);
        let want_types = u32s(&want["token_type_ids"]);
        let want_tokens: Vec<String> =
            want["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_owned()).collect();
        let want_offsets: Vec<(usize, usize)> = want["offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o[0].as_u64().unwrap() as usize, o[1].as_u64().unwrap() as usize))
            .collect();
        let mut bad = Vec::new();
        if got.ids != want_ids {
            bad.push(format!("ids {:?} != {:?}", got.ids, want_ids));
        }
        if got.type_ids != want_types {
            bad.push(format!("type ids {:?} != {:?}", got.type_ids, want_types));
        }
        if got.tokens != want_tokens {
            bad.push(format!("tokens {:?} != {:?}", got.tokens, want_tokens));
        }
        if got.offsets != want_offsets {
            bad.push(format!("offsets {:?} != {:?}", got.offsets, want_offsets));
        }
        // Internal consistency of the other fields.
        let n = got.len();
        assert!(n <= max, "{model}/{path}/{name}: {n} tokens > max {max}");
        assert_eq!(got.special_tokens_mask.len(), n);
        assert_eq!(got.sequence_ids.len(), n);
        for i in 0..n {
            let special = got.special_tokens_mask[i] == 1;
            assert_eq!(special, got.sequence_ids[i].is_none(), "{model}/{name}: token {i}");
            if let Some(s) = got.sequence_ids[i] {
                assert_eq!(s as u32, got.type_ids[i], "{model}/{name}: sequence id vs type id at {i}");
            }
        }
        if !bad.is_empty() {
            failures.push(format!("{model} via {path}, case `{name}`:\n  {}", bad.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{} golden mismatches:\n{}", failures.len(), failures.join("\n"));
    cases.len()
}

#[test]
fn golden_table_tokenizer_json() {
    let g = golden();
    for model in MODELS {
        let mut tok = Tokenizer::from_dir(model_dir(model), 512).unwrap();
        assert!(check_table(&mut tok, &g, model, "tokenizer.json") >= 40);
    }
}

#[test]
fn golden_table_tokenizer_json_without_config() {
    // Only the tokenizer.json (as from a GGUF file): special tokens come from the json itself.
    let g = golden();
    for model in MODELS {
        let json = std::fs::read(model_dir(model).join("tokenizer.json")).unwrap();
        let mut tok = Tokenizer::from_json(&json, None, 512).unwrap();
        check_table(&mut tok, &g, model, "tokenizer.json alone");
        check_special_tokens(&tok, &g, model);
    }
}

#[test]
fn golden_table_vocab_txt() {
    let g = golden();
    for model in MODELS {
        let dir = model_dir(model);
        let config = std::fs::read(dir.join("tokenizer_config.json")).unwrap();
        let mut tok = Tokenizer::from_vocab(&vocab_txt(&dir), Some(&config), 512).unwrap();
        check_table(&mut tok, &g, model, "vocab.txt + tokenizer_config.json");
        check_special_tokens(&tok, &g, model);
    }
}

#[test]
fn from_dir_falls_back_to_vocab_txt() {
    let src = model_dir("splade-tiny");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vocab-only-splade-tiny");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("vocab.txt"), vocab_txt(&src)).unwrap();
    std::fs::copy(src.join("tokenizer_config.json"), dir.join("tokenizer_config.json")).unwrap();
    let g = golden();
    let mut tok = Tokenizer::from_dir(&dir, 512).unwrap();
    check_table(&mut tok, &g, "splade-tiny", "folder with vocab.txt only");
}

fn check_special_tokens(tok: &Tokenizer, g: &Value, model: &str) {
    let s = &g["models"][model]["special_tokens"];
    let want = |k: &str| (s[k][0].as_str().unwrap().to_owned(), s[k][1].as_u64().unwrap() as u32);
    let st = tok.special_tokens();
    assert_eq!((st.cls.token.clone(), st.cls.id), want("cls_token"));
    assert_eq!((st.sep.token.clone(), st.sep.id), want("sep_token"));
    assert_eq!((st.pad.token.clone(), st.pad.id), want("pad_token"));
    assert_eq!((st.unk.token.clone(), st.unk.id), want("unk_token"));
    let mask = tok.mask_token().unwrap();
    assert_eq!((mask.token.clone(), mask.id), want("mask_token"));
}

#[test]
fn special_tokens_from_vocab() {
    let g = golden();
    for model in MODELS {
        check_special_tokens(&Tokenizer::from_dir(model_dir(model), 512).unwrap(), &g, model);
    }
}

#[test]
fn file_padding_is_ignored_and_truncation_is_ours() {
    // all-MiniLM-L6-v2's tokenizer.json pads to a fixed 128 and truncates at 128.
    let mut tok = Tokenizer::from_dir(model_dir("all-MiniLM-L6-v2"), 512).unwrap();
    let short = tok.encode("a short text", None).unwrap();
    assert_eq!(short.ids.len(), 5, "no padding per text: {:?}", short.tokens);
    assert!(!short.truncated);
    let long_text = "word ".repeat(1000);
    let long = tok.encode(&long_text, None).unwrap();
    assert_eq!(long.len(), 512);
    assert!(long.truncated);
    assert_eq!(long.ids[511], tok.sep().id, "the last kept token is [SEP]");
    tok.set_max_length(128).unwrap();
    assert_eq!(tok.max_length(), 128);
    assert_eq!(tok.encode(&long_text, None).unwrap().len(), 128);
    // A pair's truncation removes from the longer text first (longest_first).
    let pair = tok.encode("short first", Some(&long_text)).unwrap();
    assert_eq!(pair.len(), 128);
    assert_eq!(pair.sequence_ids.iter().filter(|s| **s == Some(0)).count(), 2);
}

#[test]
fn max_length_too_small_is_an_input_error() {
    let mut tok = Tokenizer::from_dir(model_dir("splade-tiny"), 512).unwrap();
    for bad in [0, 1, 4] {
        match tok.set_max_length(bad) {
            Err(Error::Input(msg)) => assert!(msg.contains("at least"), "{msg}"),
            other => panic!("max_length {bad}: expected an input error, got {other:?}"),
        }
    }
    assert_eq!(tok.max_length(), 512, "a rejected limit leaves the old one");
    assert!(matches!(Tokenizer::from_dir(model_dir("splade-tiny"), 2), Err(Error::Input(_))));
}

#[test]
fn batch_pads_right_with_vocab_pad_id() {
    let tok = Tokenizer::from_dir(model_dir("all-MiniLM-L6-v2"), 512).unwrap();
    let texts = ["one", "a somewhat longer sentence here", ""];
    let enc: Vec<Encoded> = texts.iter().map(|t| tok.encode(t, None).unwrap()).collect();
    let pair = tok.encode("question?", Some("answer text")).unwrap();
    let mut all = enc.clone();
    all.push(pair.clone());
    let b = tok.batch(&all);
    let t = all.iter().map(Encoded::len).max().unwrap();
    assert_eq!((b.b, b.t), (4, t));
    assert_eq!(b.input_ids.len(), 4 * t);
    for (row, e) in all.iter().enumerate() {
        let r = &b.input_ids[row * t..(row + 1) * t];
        let m = &b.attention_mask[row * t..(row + 1) * t];
        let ty = &b.token_type_ids[row * t..(row + 1) * t];
        assert_eq!(&r[..e.len()], &e.ids[..]);
        assert!(r[e.len()..].iter().all(|&x| x == tok.pad().id));
        assert_eq!(m.iter().sum::<u32>() as usize, e.len());
        assert!(m[..e.len()].iter().all(|&x| x == 1));
        assert_eq!(&ty[..e.len()], &e.type_ids[..]);
        assert!(ty[e.len()..].iter().all(|&x| x == 0));
    }
    assert!(pair.type_ids.contains(&1));
    let empty = tok.batch(&[]);
    assert_eq!((empty.b, empty.t, empty.input_ids.len()), (0, 0, 0));
}

#[test]
fn utf16_offsets_for_javascript() {
    let tok = Tokenizer::from_dir(model_dir("all-MiniLM-L6-v2"), 512).unwrap();
    let text = "I love 🤗 and 👍🏽, café 中文!";
    let enc = tok.encode(text, None).unwrap();
    let chars: Vec<char> = text.chars().collect();
    let utf16: Vec<u16> = text.encode_utf16().collect();
    let conv = char_to_utf16_offsets(text, &enc.offsets);
    let mut checked = 0;
    for (&(s, e), &(us, ue)) in enc.offsets.iter().zip(&conv) {
        let by_char: String = chars[s..e].iter().collect();
        let by_utf16 = String::from_utf16(&utf16[us..ue]).unwrap();
        assert_eq!(by_char, by_utf16);
        checked += (e > s) as usize;
    }
    assert!(checked >= 8);
    // The emoji is one char but two UTF-16 units.
    let i = enc.offsets.iter().position(|&(s, _)| chars[s] == '🤗').unwrap();
    assert_eq!(enc.offsets[i].1 - enc.offsets[i].0, 1);
    assert_eq!(conv[i].1 - conv[i].0, 2);
}

#[test]
fn broken_files_are_clear_tokenizer_errors() {
    let expect_tok_err = |r: Result<Tokenizer, Error>, what: &str, needle: &str| match r {
        Err(Error::Tokenizer(msg)) => assert!(msg.contains(needle), "{what}: message `{msg}` lacks `{needle}`"),
        other => panic!("{what}: expected Error::Tokenizer, got {other:?}"),
    };
    expect_tok_err(Tokenizer::from_json(b"{ not json", None, 512), "garbage json", "not valid JSON");
    expect_tok_err(Tokenizer::from_json(b"{\"version\": \"1.0\"}", None, 512), "json without a model", "tokenizer");
    let real = std::fs::read(model_dir("splade-tiny").join("tokenizer.json")).unwrap();
    expect_tok_err(Tokenizer::from_json(&real[..real.len() / 2], None, 512), "truncated json", "not valid JSON");
    expect_tok_err(Tokenizer::from_vocab("", None, 512), "empty vocab", "empty");
    expect_tok_err(Tokenizer::from_vocab("[CLS]\n[SEP]\nhello\n", None, 512), "vocab without unk", "[UNK]");
    expect_tok_err(
        Tokenizer::from_vocab("[UNK]\n[CLS]\n[PAD]\nhello\n", None, 512),
        "vocab without sep",
        "sep_token",
    );
    expect_tok_err(
        Tokenizer::from_vocab("[UNK]\n[CLS]\n[SEP]\n[PAD]\n", Some(b"[1, 2]"), 512),
        "config not an object",
        "JSON object",
    );
    expect_tok_err(
        Tokenizer::from_vocab("[UNK]\n[CLS]\n[SEP]\n[PAD]\n", Some(b"{\"do_lower_case\": \"yes\"}"), 512),
        "bad do_lower_case",
        "do_lower_case",
    );
    let empty_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-tokenizer-files");
    std::fs::create_dir_all(&empty_dir).unwrap();
    expect_tok_err(Tokenizer::from_dir(&empty_dir, 512), "empty folder", "neither tokenizer.json nor vocab.txt");
}

#[test]
fn tiny_vocab_without_mask_token() {
    // A vocabulary without [MASK]: everything works except fill-mask, which gets a clear error.
    let tok = Tokenizer::from_vocab("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n##s\n", None, 512).unwrap();
    let e = tok.encode("Hello worlds xyz", None).unwrap();
    assert_eq!(e.tokens, ["[CLS]", "hello", "world", "##s", "[UNK]", "[SEP]"]);
    assert_eq!(e.ids, [2, 4, 5, 6, 1, 3]);
    assert_eq!(e.offsets, [(0, 0), (0, 5), (6, 11), (11, 12), (13, 16), (0, 0)]);
    match tok.mask_token() {
        Err(Error::Input(msg)) => assert!(msg.contains("mask"), "{msg}"),
        other => panic!("expected an input error, got {other:?}"),
    }
    // do_lower_case false keeps case (and accents).
    let cased =
        Tokenizer::from_vocab("[PAD]\n[UNK]\n[CLS]\n[SEP]\nHello\n", Some(b"{\"do_lower_case\": false}"), 512).unwrap();
    assert_eq!(cased.encode("Hello hello", None).unwrap().ids, [2, 4, 1, 3]);
}

#[test]
fn golden_normalizer_flags_of_tokenizer_config() {
    // do_lower_case / strip_accents / tokenize_chinese_chars in tokenizer_config.json, over a real vocab.txt.
    let g = golden();
    let variants = g["variants"].as_object().unwrap();
    assert!(variants.len() >= 4);
    let cases: Vec<&Value> = g["cases"].as_array().unwrap().iter().collect();
    let mut distinct = std::collections::HashSet::new();
    for (vname, v) in variants {
        let dir = model_dir(v["vocab_of"].as_str().unwrap());
        let config = serde_json::to_vec(&v["tokenizer_config"]).unwrap();
        let tok = Tokenizer::from_vocab(&vocab_txt(&dir), Some(&config), 512).unwrap();
        for (name, want) in v["results"].as_object().unwrap() {
            let case = cases.iter().find(|c| c["name"] == name.as_str()).unwrap();
            let got = tok.encode(case["text"].as_str().unwrap(), case.get("text_pair").and_then(Value::as_str)).unwrap();
            assert_eq!(got.ids, u32s(&want["input_ids"]), "variant {vname}, case {name}: ids ({:?})", got.tokens);
            assert_eq!(got.type_ids, u32s(&want["token_type_ids"]), "variant {vname}, case {name}: type ids");
            let offsets: Vec<(usize, usize)> = want["offsets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| (o[0].as_u64().unwrap() as usize, o[1].as_u64().unwrap() as usize))
                .collect();
            assert_eq!(got.offsets, offsets, "variant {vname}, case {name}: offsets");
            distinct.insert((name.clone(), got.ids));
        }
    }
    // The flags matter: on some case the variants disagree with each other.
    let per_case = variants.values().next().unwrap()["results"].as_object().unwrap().len();
    assert!(distinct.len() > per_case, "the variants must not all tokenize alike");
}

/// Found by the tokenizer_json fuzz target: `tokenizers` 0.23.2 reads a `TemplateProcessing` post-processor without
/// checking it and panics while encoding when a template names a special token `special_tokens` lacks (it indexes
/// the map), or when the `single` template uses `$B`. Such files are refused at load with a message.
#[test]
fn inconsistent_template_post_processors_are_refused() {
    let vocab: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"].map(String::from).to_vec();
    let json = bertgpu::tokenizer::gguf_vocab::wordpiece_tokenizer_json(&vocab, &(0..5).collect()).unwrap();
    let sound: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(sound["post_processor"]["type"], "TemplateProcessing");
    let tok = Tokenizer::from_json(json.as_bytes(), None, 16).unwrap();
    assert_eq!(tok.encode("hello", Some("world")).unwrap().ids, vec![2, 5, 3, 6, 3]);

    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut v = sound.clone();
        edit(&mut v["post_processor"]);
        Tokenizer::from_json(v.to_string().as_bytes(), None, 16).map(|_| ()).unwrap_err().to_string()
    };
    // The fuzzer's input: the `[SEP]` entry of special_tokens renamed.
    let e = broken(&|pp| {
        let sep = pp["special_tokens"].as_object_mut().unwrap().remove("[SEP]").unwrap();
        pp["special_tokens"]["[S&EP]"] = sep;
    });
    assert!(e.contains("uses the special token `[SEP]`, which `special_tokens` does not define"), "{e}");
    let e = broken(&|pp| pp["single"][1]["Sequence"]["id"] = "B".into());
    assert!(e.contains("template `single` uses the second sequence"), "{e}");
    let e = broken(&|pp| pp["special_tokens"]["[CLS]"]["tokens"] = serde_json::json!(["[CLS]", "[CLS]"]));
    assert!(e.contains("special token `[CLS]` has 1 ids but 2 tokens"), "{e}");
    // Inside a Sequence of processors too.
    let e = broken(&|pp| {
        let inner = pp.clone();
        *pp = serde_json::json!({"type": "Sequence", "processors": [inner]});
        pp["processors"][0]["pair"][0]["SpecialToken"]["id"] = "[NOPE]".into();
    });
    assert!(e.contains("template `pair` uses the special token `[NOPE]`"), "{e}");
}
