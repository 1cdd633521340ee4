//! The GPU forward of the real checkpoints (./models, scripts/fetch-models.sh) against the PyTorch goldens
//! (tests/golden/model.py → model.json): all-MiniLM-L6-v2 batched with padding, and the legacy-named splade-tiny.
//! Short inputs only: on lavapipe (Vulkan on the CPU) the GPU is slow.
//!
//! Skips (saying why) only when there is no GPU adapter.

#![cfg(not(target_arch = "wasm32"))]

use std::path::PathBuf;
use std::sync::OnceLock;

use bertgpu::backend::Backend;
use bertgpu::config::BertConfig;
use bertgpu::model::BertModel;
use bertgpu::tokenizer::Batch;
use bertgpu::weights::Weights;
use serde_json::Value;

mod common;
use common::{gpu, floats, cosine};

/// Min cosine between our pooled (normalized) embeddings and PyTorch's, per sentence (the bar).
const MIN_COSINE: f64 = 0.9999;
/// Max |ours − PyTorch| on hidden-state values. Both are f32; the GPU sums in another order (4-wide partial dot
/// products, tree reductions) than PyTorch's BLAS, which moves values of magnitude ≲ 10 by ~1e-5 after 6 layers;
/// the CPU backend meets the same bound (tests/model_cpu.rs).
const HIDDEN_ATOL: f32 = 1e-4;

/// The f16-activation mode (`GpuBackend::set_f16_activations`) stores every activation between kernels rounded to
/// f16 (relative step 2⁻¹¹..2⁻¹⁰), about 25 roundings a value over 6 layers, each partly undone by the next
/// LayerNorm. Measured against PyTorch (f32) on these sentences (lavapipe): pooled cosine ≥ 0.9999997
/// (all-MiniLM-L6-v2) and 0.9999999 (splade-tiny), hidden values within 2.2e-3 and 2.3e-3 of PyTorch's. The bounds
/// leave 2.5× margin on the values and 30× on 1 − cosine; BENCHMARKS.md ("f16 activations") has the numbers.
const F16_MIN_COSINE: f64 = 0.99999;
const F16_HIDDEN_ATOL: f32 = 6e-3;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn goldens() -> &'static Value {
    static G: OnceLock<Value> = OnceLock::new();
    G.get_or_init(|| {
        let text = std::fs::read_to_string(root().join("tests/golden/model.json")).expect("tests/golden/model.json");
        serde_json::from_str(&text).expect("model.json parses")
    })
}

/// Runs every golden sentence of `name` as one right-padded batch (padded `extra` beyond the longest) on the GPU
/// and checks the golden hidden rows and each sentence's mean-pooled embedding; with `f16`, in the f16-activation
/// mode, to its own bounds.
fn check(name: &str, extra: usize, f16: bool) {
    let Some(g) = gpu() else { return };
    g.set_f16_activations(f16);
    let (min_cosine, hidden_atol) = if f16 { (F16_MIN_COSINE, F16_HIDDEN_ATOL) } else { (MIN_COSINE, HIDDEN_ATOL) };
    let gold = &goldens()[name];
    let dir = root().join("models").join(name);
    assert!(dir.join("model.safetensors").exists(), "{} missing: run scripts/fetch-models.sh", dir.display());
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    let w = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    let model = BertModel::load(&w, &cfg, &g).unwrap();
    let seqs: Vec<Vec<u32>> = gold["input_ids"].as_array().unwrap().iter()
        .map(|s| s.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect())
        .collect();
    let (b, h) = (seqs.len(), cfg.hidden_size);
    let t = seqs.iter().map(Vec::len).max().unwrap() + extra;
    let mut batch = Batch { input_ids: vec![0; b * t], token_type_ids: vec![0; b * t], attention_mask: vec![0; b * t], b, t };
    for (i, s) in seqs.iter().enumerate() {
        batch.input_ids[i * t..i * t + s.len()].copy_from_slice(s);
        batch.attention_mask[i * t..i * t + s.len()].fill(1);
    }
    let mask = g.mask(&batch).unwrap(); // (B, T)
    let hidden = model.forward_with_mask(&g, &batch, &mask).unwrap(); // (B*T, H)
    let pooled = g.mean_pool(&hidden, &mask, b, t).unwrap(); // (B, H)
    // Two reads: the first submits the whole forward; the second only copies the pooled rows back.
    let want_dtype = if f16 { bertgpu::backend::Dtype::F16 } else { bertgpu::backend::Dtype::F32 };
    assert_eq!(g.dtype(&hidden), want_dtype, "the hidden states' dtype");
    let hv = pollster::block_on(g.read(&hidden)).unwrap();
    let mut worst = 0.0f32;
    let pv = pollster::block_on(g.read(&pooled)).unwrap();
    for row in gold["rows"].as_array().unwrap() {
        let s = row["sentence"].as_u64().unwrap() as usize;
        let tok = row["token"].as_u64().unwrap() as usize;
        let got = &hv[(s * t + tok) * h..(s * t + tok + 1) * h];
        let want = floats(&row["values"]);
        let (i, err) = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).enumerate()
            .fold((0, 0.0f32), |a, (i, e)| if e > a.1 || e.is_nan() { (i, e) } else { a });
        assert!(err <= hidden_atol, "{name} sentence {s} token {tok}: max abs err {err} at {i} (T={t}, f16 {f16})");
        worst = worst.max(err);
    }
    eprintln!("{name} (f16 activations: {f16}): hidden states' max |err| {worst:e}");
    for s in 0..b {
        let got = &pv[s * h..(s + 1) * h];
        let c = cosine(got, &floats(&gold["mean"][s]));
        eprintln!("{name} sentence {s} ({} tokens, T={t}, f16 {f16}): cosine {c:.7}", seqs[s].len());
        assert!(c >= min_cosine, "{name} sentence {s}: cosine {c} < {min_cosine} (f16 {f16})");
    }
}

#[test]
fn minilm_gpu_batched_with_padding_matches_pytorch() {
    check("all-MiniLM-L6-v2", 3, false);
}

#[test]
fn legacy_mlm_checkpoint_gpu_matches_pytorch() {
    check("splade-tiny", 0, false);
}

/// The f16-activation mode against PyTorch's f32: the accuracy it costs, per sentence.
#[test]
fn minilm_with_f16_activations_matches_pytorch() {
    check("all-MiniLM-L6-v2", 3, true);
}

#[test]
fn legacy_mlm_checkpoint_with_f16_activations_matches_pytorch() {
    check("splade-tiny", 0, true);
}

/// `bertgpu embed --device gpu` (and `extra` arguments) from the command line, batches of 2 (so batches pad
/// differently): the golden sentences' normalised embeddings.
fn cli_embed(extra: &[&str]) -> Vec<Vec<f32>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let sentences = goldens()["all-MiniLM-L6-v2"]["sentences"].as_array().unwrap();
    let input: String = sentences.iter().map(|s| serde_json::json!({ "text": s }).to_string() + "\n").collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bertgpu"))
        .args(["embed", "--model", "models/all-MiniLM-L6-v2", "--device", "gpu", "--normalize", "--batch-size", "2"])
        .args(extra)
        .current_dir(root())
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), sentences.len());
    lines.iter().map(|l| floats(&l["embedding"])).collect()
}

/// The command line's embeddings on the GPU against the normalised sentence-transformers embeddings; with
/// `--activations f16`, to that mode's bound, and not the f32 values (the flag took effect).
#[test]
fn cli_embed_on_gpu_matches_goldens() {
    if gpu().is_none() {
        return;
    }
    let gold = &goldens()["all-MiniLM-L6-v2"];
    let f32_vectors = cli_embed(&[]);
    let f16_vectors = cli_embed(&["--activations", "f16"]);
    for (i, (a, b)) in f32_vectors.iter().zip(&f16_vectors).enumerate() {
        let want = floats(&gold["mean_normalized"][i]);
        let c = cosine(a, &want);
        assert!(c >= MIN_COSINE, "cli --device gpu, sentence {i}: cosine {c} < {MIN_COSINE}");
        let c = cosine(b, &want);
        assert!(c >= F16_MIN_COSINE, "cli --activations f16, sentence {i}: cosine {c} < {F16_MIN_COSINE}");
        assert_ne!(a, b, "sentence {i}: --activations f16 gave the f32 values");
    }
}

/// Loading on the GPU builds every pipeline a forward needs (the load-time check's forward, then the pooling kernels
/// on a row of zeros), so the first real call compiles nothing: embedding texts of other lengths and batch sizes
/// afterwards adds no pipeline.
#[test]
fn load_builds_the_pipelines_of_a_forward() {
    use bertgpu::engine::{Device, Engine};
    use bertgpu::tasks::{EmbedOptions, Pooling};
    if gpu().is_none() {
        return;
    }
    let engine = pollster::block_on(Engine::from_dir(root().join("models/splade-tiny"), Device::Gpu)).unwrap();
    let Engine::Gpu(model) = &engine else { panic!("Device::Gpu gave a {} engine", engine.device()) };
    let built = model.backend.pipeline_count();
    assert!(built >= 5, "only {built} pipelines after load");
    let texts = ["a", "a sentence of another length than the load-time check's inputs", "three"];
    for pooling in [Pooling::Mean, Pooling::Cls] {
        let opts = EmbedOptions { pooling: Some(pooling), normalize: Some(true), batch_size: 2, ..EmbedOptions::default() };
        pollster::block_on(engine.embed(&texts, &opts)).unwrap();
    }
    assert_eq!(model.backend.pipeline_count(), built, "the first calls built pipelines the load did not");
}
