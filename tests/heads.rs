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
            let wrow = wrow.as_array().unwrap();
            assert_eq!(row.len(), wrow.len(), "{text}: top-5 per mask");
            for (p, w) in row.iter().zip(wrow) {
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

// ---------------------------------------------------------------------------------------------------------------
// End to end: text → tokenizer → encoder → head, on each backend, against PyTorch.

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::tasks::Model;
use bertgpu::weights::Weights;

mod common;
use common::gpu;

/// How close a backend's outputs must be to PyTorch's.
#[derive(Clone, Copy)]
struct Tol {
    /// On logits: `|ours − torch| ≤ atol + rtol·|torch|`.
    logit_atol: f32,
    logit_rtol: f32,
    /// On probabilities and scores in [0, 1] (the bar for fill-mask is 1e-4).
    score: f32,
}

/// CPU: f32 like PyTorch, sums in another order (blocked GEMM, FMA). Measured worst |ours − torch| on the logits
/// of every golden (tiny models with logits up to ~10, and 30522-wide splade vocabulary rows): 8.6e-6. 1e-4 leaves
/// ~10× margin and stays far below a real error (a dropped bias or LayerNorm moves logits by ~0.1).
const CPU_TOL: Tol = Tol { logit_atol: 1e-4, logit_rtol: 1e-4, score: 1e-4 };
/// GPU: on top of the CPU's differences, the GPU's erf (Abramowitz–Stegun, |error| ≤ 1.5e-7) and exp/tanh (a few
/// ulps) in every layer. Measured worst on lavapipe: 1.1e-5. Twice the CPU budget on logits; scores keep the
/// issue's 1e-4.
const GPU_TOL: Tol = Tol { logit_atol: 2e-4, logit_rtol: 2e-4, score: 1e-4 };

#[cfg(not(target_arch = "wasm32"))]
fn load_model_with<B: Backend>(dir: &Path, backend: B, edit: impl FnOnce(&mut BertConfig, &mut Weights))
    -> bertgpu::Result<Model<B>> {
    let mut cfg = config(dir);
    let mut w = Weights::from_safetensors_file(dir.join("model.safetensors")).expect("weights");
    edit(&mut cfg, &mut w);
    Model::new(backend, cfg, tokenizer(dir), &w)
}

fn load_model<B: Backend>(dir: &Path, backend: B) -> Model<B> {
    load_model_with(dir, backend, |_, _| {}).expect("model loads")
}

fn splade_dir() -> PathBuf {
    let dir = root().join("models/splade-tiny");
    assert!(dir.join("model.safetensors").exists(), "{} missing: run scripts/fetch-models.sh", dir.display());
    dir
}

/// `|got − want| ≤ atol + rtol·|want|` everywhere, else a panic naming the worst index.
fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: {} values, want {}", got.len(), want.len());
    let mut worst: Option<(usize, f32)> = None;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let excess = (g - w).abs() / (atol + rtol * w.abs());
        if !(excess <= 1.0) && worst.is_none_or(|(_, e)| excess > e || e.is_nan()) {
            worst = Some((i, excess));
        }
    }
    if let Some((i, _)) = worst {
        panic!("{what}: index {i}: got {}, want {} (atol {atol}, rtol {rtol})", got[i], want[i]);
    }
    let max_abs = got.iter().zip(want).map(|(g, w)| (g - w).abs()).fold(0.0f32, f32::max);
    eprintln!("{what}: max |ours − torch| = {max_abs:.2e} over {} values", got.len());
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

fn fill_mask_cases<B: Backend>(m: &Model<B>, cases: &Value, tol: Tol, with_logits: bool) {
    let cases = cases.as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    if with_logits {
        let encoded: Vec<_> = texts.iter().map(|t| m.tokenizer.encode(t, None).unwrap()).collect();
        let positions: Vec<Vec<usize>> =
            cases.iter().map(|c| u32s(&c["mask_rows"]).iter().map(|&p| p as usize).collect()).collect();
        let got = block_on(m.fill_mask_logits(&encoded, &positions)).unwrap();
        let want: Vec<f32> =
            cases.iter().flat_map(|c| c["mask_logits"].as_array().unwrap().iter().flat_map(f32s)).collect();
        assert_close("fill-mask logits", &got, &want, tol.logit_atol, tol.logit_rtol);
    }
    // All texts in one batch: different lengths, so padding is exercised.
    let out = block_on(m.fill_mask(&texts, 5)).unwrap();
    assert_eq!(out.len(), cases.len(), "fill-mask: one result per text");
    for (case, per_text) in cases.iter().zip(&out) {
        let text = case["text"].as_str().unwrap();
        let want = case["predictions"].as_array().unwrap();
        assert_eq!(per_text.len(), want.len(), "{text}: one list per mask");
        for (row, wrow) in per_text.iter().zip(want) {
            let wrow = wrow.as_array().unwrap();
            let got: Vec<(String, f32)> = row.iter().map(|p| (p.token.to_string(), p.score)).collect();
            let exp: Vec<(String, f32)> =
                wrow.iter().map(|w| (w["token"].to_string(), w["score"].as_f64().unwrap() as f32)).collect();
            check_ranking(&got, &exp, tol.score, text);
            for (p, w) in row.iter().zip(wrow) {
                if p.token as u64 == w["token"].as_u64().unwrap() {
                    assert_eq!(p.token_str, w["token_str"].as_str().unwrap(), "{text}");
                    assert_eq!(p.sequence, w["sequence"].as_str().unwrap(), "{text}");
                }
            }
        }
    }
}

fn next_sentence_cases<B: Backend>(m: &Model<B>, tol: Tol) {
    let g = golden();
    let cases = g["tiny_next_sentence"].as_array().unwrap();
    let pairs: Vec<(&str, &str)> =
        cases.iter().map(|c| (c["text"].as_str().unwrap(), c["text_pair"].as_str().unwrap())).collect();
    let encoded: Vec<_> = pairs.iter().map(|(a, b)| m.tokenizer.encode(a, Some(b)).unwrap()).collect();
    let logits: Vec<f32> = block_on(m.next_sentence_logits(&encoded)).unwrap().concat();
    let want: Vec<f32> = cases.iter().flat_map(|c| f32s(&c["logits"])).collect();
    assert_close("next-sentence logits", &logits, &want, tol.logit_atol, tol.logit_rtol);
    let out = block_on(m.next_sentence(&pairs)).unwrap();
    assert_eq!(out.len(), cases.len(), "next-sentence: one result per pair");
    for (p, c) in out.iter().zip(cases) {
        close(p.is_next, c["is_next"].as_f64().unwrap() as f32, tol.score, "is_next");
    }
}

fn classify_cases<B: Backend>(m: &Model<B>, key: &str, tol: Tol) {
    let g = golden();
    let cases = g[key].as_array().unwrap();
    let inputs: Vec<(&str, Option<&str>)> =
        cases.iter().map(|c| (c["text"].as_str().unwrap(), c.get("text_pair").and_then(Value::as_str))).collect();
    let encoded: Vec<_> = inputs.iter().map(|(a, b)| m.tokenizer.encode(a, *b).unwrap()).collect();
    for (e, c) in encoded.iter().zip(cases) {
        assert_eq!(e.ids, u32s(&c["input_ids"]), "{key}: token ids of {}", c["text"]);
    }
    let logits: Vec<f32> = block_on(m.classify_logits(&encoded)).unwrap().concat();
    let want: Vec<f32> = cases.iter().flat_map(|c| f32s(&c["logits"])).collect();
    assert_close(&format!("{key} logits"), &logits, &want, tol.logit_atol, tol.logit_rtol);
    let out = block_on(m.classify(&inputs, None)).unwrap();
    assert_eq!(out.len(), cases.len(), "{key}: one result per input");
    for (got, c) in out.iter().zip(cases) {
        let got: Vec<(String, f32)> = got.iter().map(|l| (l.label.clone(), l.score)).collect();
        let want: Vec<(String, f32)> = c["pipeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["label"].as_str().unwrap().to_string(), r["score"].as_f64().unwrap() as f32))
            .collect();
        check_ranking(&got, &want, tol.score, &format!("{key} {}", c["text"]));
    }
    // top_k keeps the best k.
    let top1 = block_on(m.classify(&inputs[..1], Some(1))).unwrap();
    assert_eq!(top1[0].len(), 1);
    assert_eq!(top1[0][0].label, cases[0]["pipeline"][0]["label"].as_str().unwrap());
}

/// `cases`: heads.json's `tiny_ner` or head_widths.json's `tiny_ner_8` (the same fields).
fn ner_cases<B: Backend>(m: &Model<B>, cases: &Value, tol: Tol) {
    let cases = cases.as_array().unwrap();
    assert!(!cases.is_empty(), "token classification: no cases in the golden");
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let encoded: Vec<_> = texts.iter().map(|t| m.tokenizer.encode(t, None).unwrap()).collect();
    let logits: Vec<f32> = block_on(m.token_logits(&encoded)).unwrap().concat();
    let want: Vec<f32> =
        cases.iter().flat_map(|c| c["logits"].as_array().unwrap().iter().flat_map(f32s)).collect();
    assert_close("token-classification logits", &logits, &want, tol.logit_atol, tol.logit_rtol);
    let inputs: Vec<(&str, Option<&str>)> = texts.iter().map(|t| (*t, None)).collect();
    for (agg, key) in [(Aggregation::None, "none"), (Aggregation::Simple, "simple")] {
        let out = block_on(m.token_classify(&inputs, agg)).unwrap();
        assert_eq!(out.len(), cases.len(), "token classification ({key}): one result per text");
        for (got, c) in out.iter().zip(cases) {
            let want = c[key].as_array().unwrap();
            let text = c["text"].as_str().unwrap();
            assert_eq!(got.len(), want.len(), "{text} ({key})");
            for (e, w) in got.iter().zip(want) {
                let label = e.entity.as_deref().or(e.entity_group.as_deref()).unwrap();
                let wlabel = w.get("entity").or(w.get("entity_group")).unwrap().as_str().unwrap();
                assert_eq!(label, wlabel, "{text} ({key})");
                assert_eq!(e.word, w["word"].as_str().unwrap(), "{text} ({key})");
                assert_eq!((e.start as u64, e.end as u64), (w["start"].as_u64().unwrap(), w["end"].as_u64().unwrap()));
                close(e.score, w["score"].as_f64().unwrap() as f32, tol.score, text);
            }
        }
    }
}

fn qa_cases<B: Backend>(m: &Model<B>, tol: Tol) {
    let g = golden();
    for case in g["tiny_qa"].as_array().unwrap() {
        let (q, c) = (case["question"].as_str().unwrap(), case["context"].as_str().unwrap());
        let (len, stride) = qa::window_params(&m.tokenizer, &m.config);
        let windows = qa::windows(&m.tokenizer, q, c, len, stride).unwrap();
        let logits = block_on(m.qa_logits(&windows)).unwrap();
        let want_windows = case["windows"].as_array().unwrap();
        assert_eq!(logits.len(), want_windows.len(), "{q}: number of windows");
        for (l, w) in logits.iter().zip(want_windows) {
            let want: Vec<f32> =
                f32s(&w["start_logits"]).into_iter().zip(f32s(&w["end_logits"])).flat_map(|(a, b)| [a, b]).collect();
            assert_close(&format!("qa logits ({q})"), l, &want, tol.logit_atol, tol.logit_rtol);
        }
        let ans = block_on(m.answer(q, c)).unwrap();
        let wa = &case["answer"];
        assert_eq!(ans.answer, wa["answer"].as_str().unwrap(), "{q}");
        assert_eq!((ans.start as u64, ans.end as u64), (wa["start"].as_u64().unwrap(), wa["end"].as_u64().unwrap()));
        close(ans.score, wa["score"].as_f64().unwrap() as f32, tol.score, q);
    }
}

/// Every head of every tiny checkpoint, and fill-mask on the real splade-tiny, each checkpoint loaded by `load`.
/// Head widths (the narrowest products a model runs; the GPU's kernels read 4 columns at a time where a width
/// allows): fill-mask 480 and splade's 30522, next-sentence and QA 2, classification 3 and 4, token classification 7
/// and 8.
fn all_heads<B: Backend>(load: impl Fn(&Path) -> Model<B>, tol: Tol) {
    let g = golden();
    let widths: Value = serde_json::from_str(&std::fs::read_to_string(root().join("tests/golden/head_widths.json"))
        .expect("tests/golden/head_widths.json")).unwrap();
    let pretraining = load(&tiny("tiny-pretraining"));
    fill_mask_cases(&pretraining, &g["tiny_fill_mask"], tol, true);
    next_sentence_cases(&pretraining, tol);
    fill_mask_cases(&load(&splade_dir()), &g["splade_fill_mask"], tol, false);
    classify_cases(&load(&tiny("tiny-classifier")), "tiny_classifier", tol);
    classify_cases(&load(&tiny("tiny-multilabel")), "tiny_multilabel", tol);
    ner_cases(&load(&tiny("tiny-ner")), &g["tiny_ner"], tol);
    ner_cases(&load(&tiny("tiny-ner-8")), &widths["tiny_ner_8"], tol);
    qa_cases(&load(&tiny("tiny-qa")), tol);
}

#[test]
fn heads_match_pytorch_on_cpu() {
    all_heads(|dir| load_model(dir, CpuBackend::new()), CPU_TOL);
}

/// The ways a model reaches the GPU natively: weights handed over from the host (`Model::new`), a folder's file
/// streamed into device memory as it is read, a `.gguf` file streamed the same way, and a `.gguf`'s bytes held on
/// the host (the browser streams as the folder and GGUF files do: tests/browser/heads.test.mjs).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Copy, Debug)]
enum GpuLoad {
    Host,
    Folder,
    GgufFile,
    GgufBytes,
}

/// `dir` converted to an f32 `.gguf` (the values exactly as in the folder) in the temporary folder.
#[cfg(not(target_arch = "wasm32"))]
fn gguf_of(dir: &Path) -> PathBuf {
    let name = dir.file_name().unwrap().to_string_lossy();
    let out = std::env::temp_dir().join(format!("bertgpu-heads-{}-{name}.gguf", std::process::id()));
    bertgpu::weights::gguf::convert(dir, bertgpu::dtype::Dtype::F32, &out).expect("convert to GGUF");
    out
}

/// `dir` on the GPU by way of `how`.
#[cfg(not(target_arch = "wasm32"))]
fn load_gpu(dir: &Path, how: GpuLoad) -> Model<bertgpu::backend::gpu::GpuBackend> {
    use bertgpu::engine::{Device, Engine};
    use bertgpu::loader::{LoadOptions, ModelSource};
    let engine = |source: ModelSource<'_>| {
        match block_on(Engine::load(source, &LoadOptions::default(), Device::Gpu)).expect("loads on the GPU") {
            Engine::Gpu(m) => m,
            Engine::Cpu(_) => panic!("{}: Device::Gpu put the model on the CPU", dir.display()),
        }
    };
    match how {
        GpuLoad::Host => load_model(dir, gpu().expect("adapter")),
        GpuLoad::Folder => engine(ModelSource::Path(dir)),
        GpuLoad::GgufFile => {
            let file = gguf_of(dir);
            let m = engine(ModelSource::Path(&file));
            std::fs::remove_file(&file).unwrap();
            m
        }
        GpuLoad::GgufBytes => {
            let file = gguf_of(dir);
            let bytes = std::fs::read(&file).unwrap();
            std::fs::remove_file(&file).unwrap();
            engine(ModelSource::Gguf(&bytes))
        }
    }
}

/// Every head on the GPU, on each way a load takes. A head whose load failed after taking a weight that arrived
/// straight into device memory used to destroy that buffer while another head still used it (token classification
/// on a folder: "Buffer with 'weight' label has been destroyed").
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn heads_match_pytorch_on_gpu() {
    if gpu().is_none() {
        return;
    }
    for how in [GpuLoad::Host, GpuLoad::Folder, GpuLoad::GgufFile, GpuLoad::GgufBytes] {
        eprintln!("--- heads on the GPU, loaded from {how:?}");
        all_heads(|dir| load_gpu(dir, how), GPU_TOL);
    }
}

/// A command the GPU refuses (a real validation error from wgpu, injected) fails that call with one line that says
/// what failed and what to do, and the model answers the next call as before. (Once, a failed submission left its
/// read-back buffers mapped in the pool, and every later call failed to map them.)
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn after_a_refused_command_the_next_call_answers() {
    if gpu().is_none() {
        return;
    }
    let g = golden();
    let m = load_gpu(&tiny("tiny-ner"), GpuLoad::Folder);
    let text = g["tiny_ner"][0]["text"].as_str().unwrap();
    let before = block_on(m.token_classify(&[(text, None)], Aggregation::None)).unwrap();
    for _ in 0..2 {
        m.backend.inject_refused_submission();
        let e = block_on(m.token_classify(&[(text, None)], Aggregation::None)).expect_err("a refused command fails");
        let msg = e.to_string();
        assert!(!msg.contains('\n'), "one line: {msg}");
        assert!(msg.starts_with("gpu: the GPU refused a command ("), "{msg}");
        assert!(msg.contains("this is a bug in bertgpu: please report it"), "{msg}");
        let after = block_on(m.token_classify(&[(text, None)], Aggregation::None)).expect("the next call answers");
        assert_eq!(after, before, "the call after the error");
    }
    ner_cases(&m, &g["tiny_ner"], GPU_TOL);
}

/// A cross-encoder's ranking of `documents` for a fixed query: (index, score) best first.
#[cfg(not(target_arch = "wasm32"))]
fn ranked<B: Backend>(m: &Model<B>, documents: &[&str]) -> Vec<(usize, f32)> {
    let r = block_on(m.rerank("where is paris?", documents, None)).unwrap();
    assert_eq!(r.len(), documents.len(), "rerank: one result per document");
    r.iter().map(|d| (d.index, d.score)).collect()
}

/// The heads that tests/electra_albert.rs and tests/rerank.rs hold to PyTorch with weights from the host (ELECTRA's
/// replaced-token detection, a cross-encoder's rerank: one output each), on the GPU loaded by each other way,
/// against the CPU backend (a mismatch of `GPU_TOL`'s logit bound fails).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn one_output_heads_on_gpu_loads_match_the_cpu() {
    if gpu().is_none() {
        return;
    }
    let texts = ["the cat sat on the mat.", "John Smith visited Paris and Berlin last year."];
    let disc = tiny("tiny-electra-discriminator");
    let cpu = load_model(&disc, CpuBackend::new());
    let encoded: Vec<_> = texts.iter().map(|t| cpu.tokenizer.encode(t, None).unwrap()).collect();
    let want = block_on(cpu.replaced_token_logits(&encoded)).unwrap().concat();
    let cross = tiny("tiny-cross-encoder");
    let cpu = load_model(&cross, CpuBackend::new());
    let want_rank = ranked(&cpu, &texts);
    for how in [GpuLoad::Folder, GpuLoad::GgufFile, GpuLoad::GgufBytes] {
        let m = load_gpu(&disc, how);
        let got = block_on(m.replaced_token_logits(&encoded)).unwrap().concat();
        assert_close(&format!("replaced-token logits ({how:?})"), &got, &want, GPU_TOL.logit_atol, GPU_TOL.logit_rtol);
        let got = ranked(&load_gpu(&cross, how), &texts);
        let order = |r: &[(usize, f32)]| r.iter().map(|d| d.0).collect::<Vec<_>>();
        assert_eq!(order(&got), order(&want_rank), "rerank order ({how:?})");
        for (g, w) in got.iter().zip(&want_rank) {
            close(g.1, w.1, GPU_TOL.score, &format!("rerank score ({how:?})"));
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Errors: clear messages, never a panic.

fn err<T: std::fmt::Debug>(r: bertgpu::Result<T>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn task_errors_are_clear() {
    let pre = load_model(&tiny("tiny-pretraining"), CpuBackend::new());
    let e = err(block_on(pre.fill_mask(&["no mask in this text."], 5)));
    assert!(e.contains("no mask token") && e.contains("[MASK]"), "{e}");
    let e = err(block_on(pre.fill_mask(&["the [MASK] sat."], 0)));
    assert!(e.contains("top-k"), "{e}");
    let e = err(block_on(pre.classify(&[("a text", None)], None)));
    assert!(e.contains("no sequence-classification head") && e.contains("train-head"), "{e}");

    let clf = load_model(&tiny("tiny-classifier"), CpuBackend::new());
    let e = err(block_on(clf.fill_mask(&["the [MASK] sat."], 5)));
    assert!(e.contains("no masked-LM head"), "{e}");
    let e = err(block_on(clf.next_sentence(&[("a", "b")])));
    assert!(e.contains("no next-sentence head"), "{e}");
    let e = err(block_on(clf.answer("who?", "me")));
    assert!(e.contains("no question-answering head"), "{e}");
    let e = err(block_on(clf.token_classify(&[("a text", None)], Aggregation::None)));
    assert!(e.contains("use `classify`"), "{e}");

    let ner = load_model(&tiny("tiny-ner"), CpuBackend::new());
    let e = err(block_on(ner.token_classify(&[("a text", Some("a pair"))], Aggregation::Simple)));
    assert!(e.contains("single text") && e.contains("text_pair"), "{e}");
    let e = err(block_on(ner.classify(&[("a text", None)], None)));
    assert!(e.contains("use `ner`"), "{e}");

    let qa_model = load_model(&tiny("tiny-qa"), CpuBackend::new());
    assert!(err(block_on(qa_model.answer("", "some context"))).contains("question is empty"));
    assert!(err(block_on(qa_model.answer("who?", " \n"))).contains("context is empty"));
}

#[test]
fn classifier_labels_missing_from_config() {
    let dir = tiny("tiny-classifier");
    let m = load_model_with(&dir, CpuBackend::new(), |cfg, _| {
        cfg.id2label.clear();
        cfg.label2id.clear();
    })
    .expect("the encoder still loads");
    let e = err(block_on(m.classify(&[("a text", None)], None)));
    assert!(e.contains("id2label") && e.contains("one entry per output"), "{e}");
    // id2label naming fewer labels than the classifier has outputs.
    let m = load_model_with(&dir, CpuBackend::new(), |cfg, _| {
        cfg.id2label.remove(&2);
    })
    .unwrap();
    let e = err(block_on(m.classify(&[("a text", None)], None)));
    assert!(e.contains("names 2 labels") && e.contains("[3, 32]"), "{e}");
}

#[test]
fn pair_given_to_a_single_segment_classifier() {
    // A checkpoint with one token type (type_vocab_size 1) was never trained on pairs.
    let dir = tiny("tiny-classifier");
    let m = load_model_with(&dir, CpuBackend::new(), |cfg, w| {
        cfg.type_vocab_size = 1;
        let tt = w.get("bert.embeddings.token_type_embeddings.weight", &[2, 32]).unwrap();
        let first_row = tt.to_f32().unwrap()[..32].to_vec();
        w.insert("bert.embeddings.token_type_embeddings.weight",
            bertgpu::weights::HostTensor::f32(vec![1, 32], first_row).unwrap());
    })
    .unwrap();
    let e = err(block_on(m.classify(&[("a text", Some("a pair"))], None)));
    assert!(e.contains("single texts only") && e.contains("type_vocab_size 1"), "{e}");
    // Single texts still work.
    assert_eq!(block_on(m.classify(&[("a text", None)], None)).unwrap()[0].len(), 3);
}

#[test]
fn fill_mask_with_the_mask_cut_off_by_truncation() {
    let pre = load_model(&tiny("tiny-pretraining"), CpuBackend::new());
    // tiny-pretraining reads 64 tokens: the mask at the end of a 100-word text is cut off.
    let text = format!("{} [MASK].", "the cat sat on the mat. ".repeat(20));
    let e = err(block_on(pre.fill_mask(&[text.as_str()], 5)));
    assert!(e.contains("cut off") && e.contains("64 tokens"), "{e}");
}

/// The task list the JS API exposes (`bert.tasks`) names exactly the heads each checkpoint carries, and a trained
/// head adds "classify" to a base model.
#[test]
fn available_tasks_follow_the_checkpoint() {
    let want: [(&str, &[&str]); 5] = [
        ("tiny-pretraining", &["fillMask", "nextSentence"]),
        ("tiny-classifier", &["classify"]),
        ("tiny-multilabel", &["classify"]),
        ("tiny-ner", &["tokenClassify"]),
        ("tiny-qa", &["answer"]),
    ];
    for (name, tasks) in want {
        assert_eq!(load_model(&tiny(name), CpuBackend::new()).available_tasks(), tasks, "{name}");
    }
    let pre = load_model(&tiny("tiny-pretraining"), CpuBackend::new());
    let examples: Vec<bertgpu::tasks::TrainExample> = [("a cat", "x"), ("a dog", "y"), ("the cat", "x"), ("a pup", "y")]
        .iter()
        .map(|(t, l)| bertgpu::tasks::TrainExample { text: t.to_string(), label: l.to_string() })
        .collect();
    let opts = bertgpu::tasks::TrainOptions { epochs: 1, validation_split: 0.0, ..Default::default() };
    block_on(pre.train_head(&examples, &opts, |_| {})).unwrap();
    assert_eq!(pre.available_tasks(), ["fillMask", "nextSentence", "classify"]);
    pre.clear_head();
    assert_eq!(pre.available_tasks(), ["fillMask", "nextSentence"]);
}
