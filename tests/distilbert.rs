//! DistilBERT, the first of BERT's relatives that bertgpu runs, against PyTorch `transformers`
//! (tests/golden/distilbert.json, made by tests/golden/distilbert.py from the tiny seeded checkpoints
//! tests/models/tiny-distilbert-*): embeddings, fill-mask, sequence classification (pairs included: DistilBERT has
//! no token types), token classification and QA, end to end on the CPU and the GPU backend, from its own
//! safetensors names and from a GGUF that `convert` wrote under BERT's names; and through the CLI.

mod common;

use std::path::Path;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::Family;
use bertgpu::tasks::Model;
use bertgpu::dtype::Dtype;
use bertgpu::weights::gguf;
use common::family::{self, block_on, dir};
use common::gpu;
use serde_json::Value;

/// The CPU backend on f32 weights: tests/heads.rs's CPU_TOL. Measured worst |ours − torch| here: 6.6e-6 on logits
/// (QA, 4-window context), 3.2e-6 on hidden states (`--nocapture` after making `assert_close` print its return
/// value); 1e-4 leaves ~15× margin and is far below what a mistake moves (tanh where ReLU belongs, or segment 1's
/// embedding added to a pair: logits move by 2.2 and 2.3).
const CPU_ATOL: f32 = 1e-4;
/// The GPU: tests/heads.rs's GPU_TOL (its erf, exp and tanh differ from the CPU's by a few ulps in every layer).
/// Measured worst on lavapipe here: 9.4e-6 (token logits).
const GPU_ATOL: f32 = 2e-4;

fn golden() -> Value {
    family::golden("distilbert.json")
}

fn load<B: Backend>(d: &Path, backend: B) -> Model<B> {
    let m = family::load(d, backend);
    assert_eq!(m.config.family, Family::DistilBert);
    m
}

/// DistilBERT's goldens hold no near-ties (smallest fill-mask gap 2.6e-3, classifier 0.031, QA span 6.5e-4: the
/// script prints them), so the order of every prediction must match exactly.
const NEAR_TIES: bool = false;

fn everything<B: Backend>(mk: impl Fn() -> B, atol: f32) {
    let g = golden();
    let mlm = load(&dir("tiny-distilbert-mlm"), mk());
    family::embeddings("distilbert", &g, &mlm, atol, false);
    family::fill_mask("distilbert", &g, &mlm, atol, NEAR_TIES);
    family::classify("distilbert", &g, &load(&dir("tiny-distilbert-classifier"), mk()), atol, false);
    family::token_logits("distilbert", &g, &load(&dir("tiny-distilbert-ner"), mk()), atol);
    family::answer("distilbert", &g, &load(&dir("tiny-distilbert-qa"), mk()), atol);
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
    let g = golden();
    for name in ["tiny-distilbert-mlm", "tiny-distilbert-classifier"] {
        let bytes = family::gguf_bytes(name, Dtype::F32);
        let header = gguf::read_bert(&bytes).unwrap();
        assert!(header.tensors.iter().all(|(n, _)| !n.contains("q_lin") && !n.contains("distilbert")),
            "tensors are stored under BERT's names");
        let m = gguf::load_gguf(&bytes).unwrap();
        assert_eq!(m.config.family, Family::DistilBert);
        let model = Model::new(CpuBackend::new(), m.config, m.tokenizer, &m.weights).unwrap();
        if name.ends_with("mlm") {
            family::embeddings("distilbert", &g, &model, CPU_ATOL, false);
            family::fill_mask("distilbert", &g, &model, CPU_ATOL, NEAR_TIES);
        } else {
            family::classify("distilbert", &g, &model, CPU_ATOL, false);
        }
    }
}

/// The CLI: `embed` on a DistilBERT folder gives the golden mean-pooled vectors, `classify` takes a pair.
#[test]
fn distilbert_through_the_cli() {
    let g = golden();
    family::cli_embeddings("distilbert", &g, &dir("tiny-distilbert-mlm"), CPU_ATOL);
    family::cli_classify(&g, &dir("tiny-distilbert-classifier"));
}
