//! Task heads against PyTorch `transformers` goldens (tests/golden/heads.json, made by tests/golden/heads.py from
//! the tiny seeded checkpoints in tests/models/ and the real splade-tiny checkpoint in models/).
//!
//! Two layers:
//! - post-processing only: the golden PyTorch logits through our host-side decoding (top-k, sequences, label
//!   names, B-/I- grouping, span search, windows) must give the pipelines' outputs;
//! - end to end: text → tokenizer → encoder → head on the CPU backend (and the GPU backend when an adapter exists)
//!   must give the same logits and pipeline outputs.

use std::path::{Path, PathBuf};

use bertgpu::config::BertConfig;
use bertgpu::heads::classifier::ScoreFunction;
use bertgpu::heads::masked_lm::{fill_mask_postprocess, mask_positions, NextSentence};
use bertgpu::heads::token_classifier::{self, Aggregation};
use bertgpu::heads::qa;
use bertgpu::tokenizer::Tokenizer;
use serde_json::Value;

/// Post-processing of the golden logits is f32 arithmetic on the same numbers PyTorch used: only rounding differs.
const POSTPROCESS_TOL: f32 = 1e-6;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn golden() -> Value {
    let text = std::fs::read_to_string(root().join("tests/golden/heads.json")).expect("tests/golden/heads.json");
    serde_json::from_str(&text).expect("golden JSON")
}

fn tiny(name: &str) -> PathBuf {
    root().join("tests/models").join(name)
}

fn config(dir: &Path) -> BertConfig {
    BertConfig::from_file(dir.join("config.json")).expect("config.json")
}

fn tokenizer(dir: &Path) -> Tokenizer {
    Tokenizer::from_dir(dir, config(dir).max_position_embeddings).expect("tokenizer")
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number") as f32).collect()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("integer") as u32).collect()
}

fn close(got: f32, want: f32, tol: f32, what: &str) {
    assert!((got - want).abs() <= tol, "{what}: got {got}, want {want} (tolerance {tol})");
}

/// Compares a ranked list of `(id, score)` with the golden one. Two candidates whose golden scores are within
/// `2·tol` may come out in either order (a near-tie that rounding can flip); everything else must match in order.
pub fn check_ranking(got: &[(String, f32)], want: &[(String, f32)], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {} results, want {}", got.len(), want.len());
    for (i, ((gi, gs), (wi, ws))) in got.iter().zip(want).enumerate() {
        close(*gs, *ws, tol, &format!("{what}[{i}] score"));
        if gi != wi {
            let tied = want.iter().any(|(id, s)| id == gi && (s - ws).abs() <= 2.0 * tol);
            assert!(tied, "{what}[{i}]: got {gi}, want {wi} (golden scores are not tied)");
        }
    }
}

#[test]
fn fill_mask_postprocess_matches_pipeline() {
    let g = golden();
    let dir = tiny("tiny-pretraining");
    let tok = tokenizer(&dir);
    let v = config(&dir).vocab_size;
    for case in g["tiny_fill_mask"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let enc = tok.encode(text, None).unwrap();
        assert_eq!(enc.ids, u32s(&case["input_ids"]), "token ids of {text:?}");
        let pos = mask_positions(&tok, &enc.ids, text).unwrap();
        assert_eq!(pos, u32s(&case["mask_rows"]).iter().map(|&p| p as usize).collect::<Vec<_>>());
        let logits: Vec<f32> = case["mask_logits"].as_array().unwrap().iter().flat_map(f32s).collect();
        let out = fill_mask_postprocess(&tok, &enc.ids, &pos, &logits, v, 5).unwrap();
        let want = case["predictions"].as_array().unwrap();
        assert_eq!(out.len(), want.len(), "{text}: one list per mask");
        for (row, wrow) in out.iter().zip(want) {
            for (p, w) in row.iter().zip(wrow.as_array().unwrap()) {
                assert_eq!(p.token as u64, w["token"].as_u64().unwrap(), "{text}");
                close(p.score, w["score"].as_f64().unwrap() as f32, POSTPROCESS_TOL, text);
                assert_eq!(p.token_str, w["token_str"].as_str().unwrap(), "{text}");
                assert_eq!(p.sequence, w["sequence"].as_str().unwrap(), "{text}");
            }
        }
    }
}

#[test]
fn fill_mask_without_mask_token_is_a_clear_error() {
    let tok = tokenizer(&tiny("tiny-pretraining"));
    let enc = tok.encode("there is nothing to fill here.", None).unwrap();
    let e = mask_positions(&tok, &enc.ids, "there is nothing to fill here.").unwrap_err().to_string();
    assert!(e.contains("no mask token") && e.contains("[MASK]"), "{e}");
}

#[test]
fn next_sentence_and_classification_scores_match_pipeline() {
    let g = golden();
    for case in g["tiny_next_sentence"].as_array().unwrap() {
        let p = NextSentence::from_logits(&f32s(&case["logits"]));
        close(p.is_next, case["is_next"].as_f64().unwrap() as f32, POSTPROCESS_TOL, "is_next");
    }
    for (name, key, expect) in [
        ("tiny-classifier", "tiny_classifier", ScoreFunction::Softmax),
        ("tiny-multilabel", "tiny_multilabel", ScoreFunction::Sigmoid),
    ] {
        let cfg = config(&tiny(name));
        assert_eq!(ScoreFunction::for_config(&cfg), expect, "{name}");
        for case in g[key].as_array().unwrap() {
            let scores = ScoreFunction::for_config(&cfg).apply(&f32s(&case["logits"]));
            let mut got: Vec<(String, f32)> = scores.iter().enumerate().map(|(i, &s)| (cfg.label(i), s)).collect();
            got.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
            let want: Vec<(String, f32)> = case["pipeline"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r["label"].as_str().unwrap().to_string(), r["score"].as_f64().unwrap() as f32))
                .collect();
            check_ranking(&got, &want, POSTPROCESS_TOL, &format!("{name} {}", case["text"]));
        }
    }
}

#[test]
fn token_classification_postprocess_matches_pipeline() {
    let g = golden();
    let dir = tiny("tiny-ner");
    let (tok, cfg) = (tokenizer(&dir), config(&dir));
    let labels: Vec<String> = (0..cfg.id2label.len()).map(|i| cfg.label(i)).collect();
    for case in g["tiny_ner"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let enc = tok.encode(text, None).unwrap();
        assert_eq!(enc.ids, u32s(&case["input_ids"]), "token ids of {text:?}");
        let logits: Vec<f32> = case["logits"].as_array().unwrap().iter().flat_map(f32s).collect();
        for (agg, key) in [(Aggregation::None, "none"), (Aggregation::Simple, "simple")] {
            let got = token_classifier::postprocess(&tok, &labels, text, &enc, &logits, agg).unwrap();
            let want = case[key].as_array().unwrap();
            assert_eq!(got.len(), want.len(), "{text} ({key}): {got:?}");
            for (e, w) in got.iter().zip(want) {
                let label = e.entity.as_deref().or(e.entity_group.as_deref()).unwrap();
                let wlabel = w.get("entity").or(w.get("entity_group")).unwrap().as_str().unwrap();
                assert_eq!(label, wlabel, "{text} ({key})");
                close(e.score, w["score"].as_f64().unwrap() as f32, POSTPROCESS_TOL, text);
                assert_eq!(e.word, w["word"].as_str().unwrap(), "{text} ({key})");
                assert_eq!((e.start as u64, e.end as u64), (w["start"].as_u64().unwrap(), w["end"].as_u64().unwrap()));
                if let Some(i) = w.get("index") {
                    assert_eq!(e.index, Some(i.as_u64().unwrap() as usize), "{text}");
                }
            }
        }
    }
}

#[test]
fn qa_windows_and_decoding_match_reference() {
    let g = golden();
    let dir = tiny("tiny-qa");
    let (tok, cfg) = (tokenizer(&dir), config(&dir));
    for case in g["tiny_qa"].as_array().unwrap() {
        let (q, c) = (case["question"].as_str().unwrap(), case["context"].as_str().unwrap());
        let (len, stride) = qa::window_params(&tok, &cfg);
        assert_eq!((len as u64, stride as u64), (case["max_seq_len"].as_u64().unwrap(), case["doc_stride"].as_u64().unwrap()));
        let windows = qa::windows(&tok, q, c, len, stride).unwrap();
        let want = case["windows"].as_array().unwrap();
        assert_eq!(windows.len(), want.len(), "{q}: number of windows");
        let mut logits = Vec::new();
        for (w, gw) in windows.iter().zip(want) {
            assert_eq!(w.ids, u32s(&gw["input_ids"]), "{q}: window ids");
            let (s, e) = (f32s(&gw["start_logits"]), f32s(&gw["end_logits"]));
            logits.push(s.iter().zip(&e).flat_map(|(a, b)| [*a, *b]).collect::<Vec<f32>>());
        }
        let ans = qa::decode(c, &windows, &logits).unwrap();
        let wa = &case["answer"];
        assert_eq!(ans.answer, wa["answer"].as_str().unwrap(), "{q}");
        assert_eq!((ans.start as u64, ans.end as u64), (wa["start"].as_u64().unwrap(), wa["end"].as_u64().unwrap()));
        close(ans.score, wa["score"].as_f64().unwrap() as f32, POSTPROCESS_TOL, q);
        // The character offsets really index the context (it has a non-ASCII character before some answers).
        assert_eq!(c.chars().skip(ans.start).take(ans.end - ans.start).collect::<String>(), ans.answer);
    }
}

#[test]
fn qa_rejects_empty_question_or_context() {
    let dir = tiny("tiny-qa");
    let (tok, cfg) = (tokenizer(&dir), config(&dir));
    let (len, stride) = qa::window_params(&tok, &cfg);
    let e = qa::windows(&tok, "  ", "some context", len, stride).unwrap_err().to_string();
    assert!(e.contains("question is empty"), "{e}");
    let e = qa::windows(&tok, "who?", "", len, stride).unwrap_err().to_string();
    assert!(e.contains("context is empty"), "{e}");
    let long_question = "why ".repeat(60);
    let e = qa::windows(&tok, &long_question, "some context", len, stride).unwrap_err().to_string();
    assert!(e.contains("question is too long"), "{e}");
}
