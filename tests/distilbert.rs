//! DistilBERT, the first of BERT's relatives that bertgpu runs, against PyTorch `transformers`
//! (tests/golden/distilbert.json, made by tests/golden/distilbert.py from the tiny seeded checkpoints
//! tests/models/tiny-distilbert-*): embeddings, fill-mask, sequence classification (pairs included: DistilBERT has
//! no token types), token classification and QA, end to end on the CPU and the GPU backend, from its own
//! safetensors names and from a GGUF that `convert` wrote under BERT's names; and through the CLI.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::{BertConfig, Family};
use bertgpu::heads::qa;
use bertgpu::tasks::{EmbedOptions, Model, Pooling};
use bertgpu::tokenizer::Tokenizer;
use bertgpu::weights::gguf::{self, ConvertDType};
use bertgpu::weights::Weights;
use common::{assert_close, floats, gpu};
use serde_json::Value;

/// The CPU backend on f32 weights: tests/heads.rs's CPU_TOL. Measured worst |ours − torch| here: 6.6e-6 on logits
/// (QA, 4-window context), 3.2e-6 on hidden states (`--nocapture` after making `assert_close` print its return
/// value); 1e-4 leaves ~15× margin and is far below what a mistake moves (tanh where ReLU belongs, or segment 1's
/// embedding added to a pair: logits move by 2.2 and 2.3).
const CPU_ATOL: f32 = 1e-4;
/// The GPU: tests/heads.rs's GPU_TOL (its erf, exp and tanh differ from the CPU's by a few ulps in every layer).
/// Measured worst on lavapipe here: 9.4e-6 (token logits).
const GPU_ATOL: f32 = 2e-4;
/// Pipeline scores (softmax/sigmoid outputs): the issue-wide 1e-4.
const SCORE_TOL: f32 = 1e-4;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn golden() -> Value {
    let text = std::fs::read_to_string(root().join("tests/golden/distilbert.json")).expect("distilbert.json");
    serde_json::from_str(&text).unwrap()
}

fn dir(name: &str) -> PathBuf {
    root().join("tests/models").join(name)
}

fn load<B: Backend>(d: &Path, backend: B) -> Model<B> {
    let cfg = BertConfig::from_file(d.join("config.json")).unwrap();
    assert_eq!(cfg.family, Family::DistilBert);
    let tok = Tokenizer::from_dir(d, cfg.max_position_embeddings).unwrap();
    let w = Weights::from_safetensors_file(d.join("model.safetensors")).unwrap();
    Model::new(backend, cfg, tok, &w).unwrap()
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

fn rows(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().flat_map(floats).collect()
}

fn embeddings<B: Backend>(m: &Model<B>, atol: f32) {
    let g = golden();
    let cases = g["embeddings"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    for (pooling, key) in [(Pooling::Mean, "mean"), (Pooling::Cls, "cls")] {
        let opts = EmbedOptions { pooling, normalize: false, batch_size: 4 };
        let got = block_on(m.embed(&texts, &opts)).unwrap();
        assert_eq!(got.len(), cases.len(), "one vector per text");
        let want: Vec<f32> = cases.iter().flat_map(|c| floats(&c[key])).collect();
        assert_close(&format!("distilbert {key} embeddings"), &got.concat(), &want, atol, 0.0);
    }
}

fn fill_mask<B: Backend>(m: &Model<B>, atol: f32) {
    let g = golden();
    let cases = g["fill_mask"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let encoded: Vec<_> = texts.iter().map(|t| m.tokenizer.encode(t, None).unwrap()).collect();
    let positions: Vec<Vec<usize>> = cases
        .iter()
        .map(|c| c["mask_rows"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap() as usize).collect())
        .collect();
    let got = block_on(m.fill_mask_logits(&encoded, &positions)).unwrap();
    let want: Vec<f32> = cases.iter().flat_map(|c| rows(&c["mask_logits"])).collect();
    assert_close("distilbert fill-mask logits", &got, &want, atol, atol);
    let out = block_on(m.fill_mask(&texts, 5)).unwrap();
    assert_eq!(out.len(), cases.len());
    for (per_text, c) in out.iter().zip(cases) {
        let want = c["predictions"].as_array().unwrap();
        assert_eq!(per_text.len(), want.len(), "{}: one list per mask", c["text"]);
        for (row, wrow) in per_text.iter().zip(want) {
            let wrow = wrow.as_array().unwrap();
            assert_eq!(row.len(), wrow.len());
            // The golden's smallest gap between neighbours is 2.6e-3 (the script prints it): far above SCORE_TOL, so
            // the order must match exactly.
            for (p, w) in row.iter().zip(wrow) {
                assert_eq!(p.token as u64, w["token"].as_u64().unwrap(), "{}", c["text"]);
                assert_eq!(p.sequence, w["sequence"].as_str().unwrap());
                assert!((p.score - w["score"].as_f64().unwrap() as f32).abs() <= SCORE_TOL, "{}", c["text"]);
            }
        }
    }
}

fn classify<B: Backend>(m: &Model<B>, atol: f32) {
    let g = golden();
    let cases = g["classifier"].as_array().unwrap();
    let inputs: Vec<(&str, Option<&str>)> =
        cases.iter().map(|c| (c["text"].as_str().unwrap(), c.get("text_pair").and_then(Value::as_str))).collect();
    assert!(inputs.iter().any(|(_, p)| p.is_some()), "the goldens include pairs");
    let encoded: Vec<_> = inputs.iter().map(|(a, b)| m.tokenizer.encode(a, *b).unwrap()).collect();
    for (e, c) in encoded.iter().zip(cases) {
        let want: Vec<u32> = c["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_eq!(e.ids, want, "token ids of {}", c["text"]);
    }
    let logits = block_on(m.classify_logits(&encoded)).unwrap();
    assert_eq!(logits.len(), cases.len());
    let want: Vec<f32> = cases.iter().flat_map(|c| floats(&c["logits"])).collect();
    assert_close("distilbert classifier logits", &logits.concat(), &want, atol, atol);
    let out = block_on(m.classify(&inputs, None)).unwrap();
    assert_eq!(out.len(), cases.len());
    for (got, c) in out.iter().zip(cases) {
        let want = c["pipeline"].as_array().unwrap();
        assert_eq!(got.len(), want.len());
        // Smallest golden score gap 0.031: the order must match exactly.
        for (l, w) in got.iter().zip(want) {
            assert_eq!(l.label, w["label"].as_str().unwrap(), "{}", c["text"]);
            assert!((l.score - w["score"].as_f64().unwrap() as f32).abs() <= SCORE_TOL, "{}", c["text"]);
        }
    }
}

fn ner<B: Backend>(m: &Model<B>, atol: f32) {
    let g = golden();
    let cases = g["ner"].as_array().unwrap();
    let encoded: Vec<_> = cases.iter().map(|c| m.tokenizer.encode(c["text"].as_str().unwrap(), None).unwrap()).collect();
    let got = block_on(m.token_logits(&encoded)).unwrap();
    assert_eq!(got.len(), cases.len());
    let want: Vec<f32> = cases.iter().flat_map(|c| rows(&c["logits"])).collect();
    assert_close("distilbert token logits", &got.concat(), &want, atol, atol);
}

fn answer<B: Backend>(m: &Model<B>, atol: f32) {
    let g = golden();
    let cases = g["qa"].as_array().unwrap();
    assert!(cases.iter().any(|c| c["windows"].as_array().unwrap().len() > 1), "a multi-window context is covered");
    for case in cases {
        let (q, c) = (case["question"].as_str().unwrap(), case["context"].as_str().unwrap());
        let (len, stride) = qa::window_params(&m.tokenizer, &m.config);
        let windows = qa::windows(&m.tokenizer, q, c, len, stride).unwrap();
        let logits = block_on(m.qa_logits(&windows)).unwrap();
        let want_windows = case["windows"].as_array().unwrap();
        assert_eq!(logits.len(), want_windows.len(), "{q}: number of windows");
        for (l, w) in logits.iter().zip(want_windows) {
            let want: Vec<f32> =
                floats(&w["start_logits"]).into_iter().zip(floats(&w["end_logits"])).flat_map(|(a, b)| [a, b]).collect();
            assert_close(&format!("distilbert qa logits ({q})"), l, &want, atol, atol);
        }
        let ans = block_on(m.answer(q, c)).unwrap();
        let wa = &case["answer"];
        assert_eq!(ans.answer, wa["answer"].as_str().unwrap(), "{q}");
        assert_eq!((ans.start as u64, ans.end as u64), (wa["start"].as_u64().unwrap(), wa["end"].as_u64().unwrap()));
        assert!((ans.score - wa["score"].as_f64().unwrap() as f32).abs() <= SCORE_TOL, "{q}");
    }
}

fn everything<B: Backend>(mk: impl Fn() -> B, atol: f32) {
    let mlm = load(&dir("tiny-distilbert-mlm"), mk());
    embeddings(&mlm, atol);
    fill_mask(&mlm, atol);
    classify(&load(&dir("tiny-distilbert-classifier"), mk()), atol);
    ner(&load(&dir("tiny-distilbert-ner"), mk()), atol);
    answer(&load(&dir("tiny-distilbert-qa"), mk()), atol);
}

#[test]
fn distilbert_matches_pytorch_on_cpu() {
    everything(CpuBackend::new, CPU_ATOL);
}

#[test]
fn distilbert_matches_pytorch_on_gpu() {
    if gpu().is_none() {
        return;
    }
    everything(|| gpu().expect("adapter"), GPU_ATOL);
}

/// Each checkpoint offers the tasks of its head and no other: a token classifier's `classifier.*` is not a sequence
/// classifier's, nor the reverse, though both are named so.
#[test]
fn distilbert_tasks_follow_the_checkpoint() {
    for (name, tasks) in [
        ("tiny-distilbert-mlm", vec!["fillMask"]),
        ("tiny-distilbert-classifier", vec!["classify"]),
        ("tiny-distilbert-ner", vec!["tokenClassify"]),
        ("tiny-distilbert-qa", vec!["answer"]),
    ] {
        let m = load(&dir(name), CpuBackend::new());
        assert_eq!(m.available_tasks(), tasks, "{name}");
    }
    let clf = load(&dir("tiny-distilbert-classifier"), CpuBackend::new());
    let e = block_on(clf.token_classify(&[("a text", None)], bertgpu::heads::token_classifier::Aggregation::None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("sequence-classification checkpoint"), "{e}");
}

/// `convert` stores DistilBERT under BERT's (llama.cpp's) names with its own config JSON; the GGUF runs to the same
/// goldens (f32: the same numbers, so the same tolerance).
#[test]
fn distilbert_through_gguf_matches_pytorch() {
    for name in ["tiny-distilbert-mlm", "tiny-distilbert-classifier"] {
        let out = std::env::temp_dir().join(format!("{name}-{}.gguf", std::process::id()));
        gguf::convert(&dir(name), ConvertDType::F32, &out).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        std::fs::remove_file(&out).unwrap();
        let header = gguf::read_bert(&bytes).unwrap();
        assert!(header.tensors.iter().all(|(n, _)| !n.contains("q_lin") && !n.contains("distilbert")),
            "tensors are stored under BERT's names");
        let m = gguf::load_gguf(&bytes).unwrap();
        assert_eq!(m.config.family, Family::DistilBert);
        let model = Model::new(CpuBackend::new(), m.config, m.tokenizer, &m.weights).unwrap();
        if name.ends_with("mlm") {
            embeddings(&model, CPU_ATOL);
            fill_mask(&model, CPU_ATOL);
        } else {
            classify(&model, CPU_ATOL);
        }
    }
}

/// The CLI: `embed` on a DistilBERT folder gives the golden mean-pooled vectors, `classify` takes a pair.
#[test]
fn distilbert_through_the_cli() {
    let g = golden();
    let run = |args: &[&str], input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bertgpu"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect::<Vec<_>>()
    };
    let cases = g["embeddings"].as_array().unwrap();
    let input: String = cases.iter().map(|c| format!("{}\n", serde_json::json!({"text": c["text"]}))).collect();
    let mlm = dir("tiny-distilbert-mlm");
    let out = run(&["embed", "--model", mlm.to_str().unwrap(), "--device", "cpu"], &input);
    assert_eq!(out.len(), cases.len(), "one line per text");
    let got: Vec<f32> = out.iter().flat_map(|o| floats(&o["embedding"])).collect();
    let want: Vec<f32> = cases.iter().flat_map(|c| floats(&c["mean"])).collect();
    assert_close("cli distilbert embeddings", &got, &want, CPU_ATOL, 0.0);

    let cases = g["classifier"].as_array().unwrap();
    let input: String = cases
        .iter()
        .map(|c| format!("{}\n", serde_json::json!({"text": c["text"], "text_pair": c.get("text_pair")})))
        .collect();
    let clf = dir("tiny-distilbert-classifier");
    let out = run(&["classify", "--model", clf.to_str().unwrap(), "--device", "cpu"], &input);
    assert_eq!(out.len(), cases.len(), "one line per input");
    for (o, c) in out.iter().zip(cases) {
        let (got, want) = (o.as_array().unwrap(), c["pipeline"].as_array().unwrap());
        assert_eq!(got.len(), want.len(), "{o}");
        for (l, w) in got.iter().zip(want) {
            assert_eq!(l["label"], w["label"]);
            assert!((l["score"].as_f64().unwrap() - w["score"].as_f64().unwrap()).abs() <= SCORE_TOL as f64, "{o}");
        }
    }
}
