//! Fine-tuning MPNet's whole encoder against PyTorch autograd: for each case of tests/golden/finetune_mpnet.json
//! (tests/golden/finetune_mpnet.py, float64) — sequence classification of single texts and of pairs, and token
//! classification — the loss, the gradient of every parameter under MPNet's own names (the relative position bias
//! table's, which sums every layer's, among them), and five AdamW steps with weight decay and clipping, on the CPU
//! and the GPU. The tolerances are tests/finetune_families.rs's (BERT's, tests/finetune_golden.rs).
//!
//! `BERTGPU_FAMILY_EXPORT=DIR` also writes each case's trained model after its steps on the CPU
//! (`rows::export_folder`, what `bertgpu fine-tune` and `fineTune` write) and our logits into `DIR/<case>`, for
//! tests/golden/finetune_families_load.py (transformers loads each as MPNet's own class and gives our logits).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::BertConfig;
use bertgpu::tokenizer::Batch;
use bertgpu::training::finetune::{FineTuneTask, FineTuner, Targets};
use bertgpu::training::lora::LoraOptions;
use bertgpu::training::lora_peft;
use bertgpu::training::optim::StepOptions;
use bertgpu::training::rows::export_folder;
use bertgpu::weights::peft::apply_lora;
use bertgpu::weights::Weights;
use common::golden_grads::{floats, gradients_match};
use serde_json::Value;

mod common;

/// Gradient error per tensor, `‖ours − golden‖ / ‖golden‖`: tests/finetune_golden.rs's `CPU_GRAD_RTOL` (measured
/// worst here: printed as "worst gradient relative error").
const CPU_GRAD_RTOL: f64 = 2e-5;
/// tests/finetune_golden.rs's `GPU_GRAD_RTOL`.
const GPU_GRAD_RTOL: f64 = 2e-5;
/// Tensors whose exact gradient is zero (the attention key bias), relative to the global norm.
const ZERO_GRAD_ATOL: f64 = 1e-5;
/// Parameters after 5 AdamW steps at lr 1e-3 (tests/finetune_golden.rs's `PARAM_ATOL`).
const PARAM_ATOL: f64 = 2e-4;
/// Loss and gradient norm before the first step, relative (tests/finetune_families.rs's `LOSS_RTOL`).
const LOSS_RTOL: f64 = 2e-5;
/// The same at the later steps (tests/finetune_families.rs's `STEP_RTOL`, which says why it is wider).
const STEP_RTOL: f64 = 2e-4;

fn golden() -> &'static Value {
    static G: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    G.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/finetune_mpnet.json");
        serde_json::from_str(&std::fs::read_to_string(path).expect("tests/golden/finetune_mpnet.json")).unwrap()
    })
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().flat_map(|r| match r.as_array() {
        Some(r) => r.iter().map(|x| x.as_i64().unwrap()).collect::<Vec<_>>(),
        None => vec![r.as_i64().unwrap()],
    }).collect()
}

/// A case of the golden: its checkpoint and its batch with the targets.
struct Case {
    dir: std::path::PathBuf,
    cfg: BertConfig,
    weights: Weights,
    batch: Batch,
    task: FineTuneTask,
    labels: Vec<u32>,
    token_labels: Vec<i64>,
}

impl Case {
    fn load(name: &str) -> Case {
        let g = &golden()["cases"][name];
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(g["model"].as_str().unwrap());
        let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
        assert_eq!(cfg.family.model_type(), g["family"].as_str().unwrap());
        let weights = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
        let b = g["input_ids"].as_array().unwrap().len();
        let u32s = |k: &str| ints(&g[k]).into_iter().map(|x| x as u32).collect::<Vec<_>>();
        let input_ids = u32s("input_ids");
        let t = input_ids.len() / b;
        let batch = Batch { input_ids, token_type_ids: u32s("token_type_ids"), attention_mask: u32s("attention_mask"), b, t };
        let task = if g["task"] == "sequence" { FineTuneTask::Sequence } else { FineTuneTask::Token };
        Case { dir, cfg, weights, batch, task, labels: u32s("labels"), token_labels: ints(&g["labels"]) }
    }

    fn targets(&self) -> Targets<'_> {
        match self.task {
            FineTuneTask::Sequence => Targets::Sequence(&self.labels),
            _ => Targets::Token(&self.token_labels),
        }
    }
}

/// Runs case `name` on `be`; returns the worst gradient relative error and the worst parameter error after the steps.
fn check<B: Backend>(be: &B, name: &str, grad_rtol: f64) -> (f64, f64) {
    let g = &golden()["cases"][name];
    let c = Case::load(name);
    let (batch, targets) = (&c.batch, c.targets());
    let mut tr = FineTuner::new(be, &c.cfg, &c.weights, c.task, None, 0).unwrap();
    let (grads, logits) = tr.gradients(be, batch, &targets).unwrap();
    let loss = tr.loss(&pollster::block_on(be.read(&logits)).unwrap(), batch.t, &targets) as f64;
    let want_loss = g["loss"].as_f64().unwrap();
    assert!((loss - want_loss).abs() <= LOSS_RTOL * want_loss, "{name}: loss {loss} vs PyTorch {want_loss}");
    let ours: BTreeMap<String, Vec<f32>> = pollster::block_on(tr.named(be, Some(&grads))).unwrap().into_iter().collect();
    let table = "mpnet.encoder.relative_attention_bias.weight";
    assert!(ours[table].iter().any(|&v| v != 0.0), "{name}: the relative bias table gets a gradient");
    let (opt, worst) = gradients_match(name, be.name(), &tr, &ours, g, grad_rtol, ZERO_GRAD_ATOL);
    let zero: BTreeSet<&str> = g["zero_grads"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let mut worst_step = 0f64;
    for (s, (wl, wn)) in floats(&g["losses"]).iter().zip(&floats(&g["grad_norms"])).enumerate() {
        let r = pollster::block_on(tr.step(be, batch, &targets, &opt)).unwrap();
        let e = ((r.loss as f64 - wl).abs() / wl).max((r.grad_norm as f64 - wn).abs() / wn);
        worst_step = worst_step.max(e);
        let tol = if s == 0 { LOSS_RTOL } else { STEP_RTOL };
        assert!(e <= tol, "{name}: step {s}: loss {} vs PyTorch {wl}, grad norm {} vs {wn}", r.loss, r.grad_norm);
    }
    let after: BTreeMap<String, Vec<f32>> = pollster::block_on(tr.named(be, None)).unwrap().into_iter().collect();
    let mut worst_param = (String::new(), 0f64);
    for (n, w) in g["params_after"].as_object().unwrap() {
        if zero.contains(n.as_str()) {
            continue; // AdamW normalises noise-level gradients to full steps in either run (finetune.py says more)
        }
        let (w, o) = (floats(w), &after[n]);
        let (i, d) = o.iter().zip(&w).map(|(&a, &b)| (a as f64 - b).abs()).enumerate().fold((0, 0f64), |m, (i, d)| if d > m.1 { (i, d) } else { m });
        assert!(d <= PARAM_ATOL, "{name}: {n}[{i}] after 5 steps: ours {} vs PyTorch {}", o[i], w[i]);
        if d > worst_param.1 {
            worst_param = (format!("{n}[{i}]"), d);
        }
    }
    if let (Ok(dir), "cpu") = (std::env::var("BERTGPU_FAMILY_EXPORT"), be.name()) {
        let dir = Path::new(&dir).join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let original: Value = serde_json::from_str(&std::fs::read_to_string(c.dir.join("config.json")).unwrap()).unwrap();
        let (config, st) = pollster::block_on(export_folder(be, &tr, &original, None)).unwrap();
        std::fs::write(dir.join("config.json"), config).unwrap();
        std::fs::write(dir.join("model.safetensors"), st).unwrap();
        let logits = pollster::block_on(be.read(&tr.logits(be, batch).unwrap())).unwrap();
        std::fs::write(dir.join("logits.json"), serde_json::json!({ "logits": logits, "input_ids": g["input_ids"],
            "token_type_ids": g["token_type_ids"], "attention_mask": g["attention_mask"], "task": g["task"] }).to_string())
            .unwrap();
    }
    eprintln!("{name} on {}: worst parameter error after the steps {:.2e} ({}), worst relative loss/grad-norm error \
        {worst_step:.2e}", be.name(), worst_param.1, worst_param.0);
    (worst, worst_param.1)
}

const CASES: [&str; 3] = ["mpnet_classify", "mpnet_pair", "mpnet_ner"];

#[test]
fn mpnet_matches_pytorch_on_the_cpu() {
    let be = CpuBackend::new();
    for name in CASES {
        check(&be, name, CPU_GRAD_RTOL);
    }
}

#[test]
fn mpnet_matches_pytorch_on_the_gpu() {
    let Some(g) = common::gpu() else { return };
    for name in CASES {
        check(&g, name, GPU_GRAD_RTOL);
    }
}

/// LoRA on MPNet: peft's `target_modules` for MPNet are its own module names (`q`, `v` of `attention.attn`), the
/// adapter file names MPNet's modules, and our loader folds it into the checkpoint's tensors to the weights we merge.
#[test]
fn lora_adapters_carry_mpnets_module_names() {
    /// Both merges compute `W + s·B·A` from the same f32 values, in f64 here and in f32 at load.
    const MERGE_ATOL: f64 = 1e-6;
    let be = CpuBackend::new();
    let c = Case::load("mpnet_classify");
    let mut tr = FineTuner::new(&be, &c.cfg, &c.weights, c.task, None, 0).unwrap();
    tr.set_lora(&be, LoraOptions::new(2), 0).unwrap();
    let opt = StepOptions { learning_rate: 1e-2, ..StepOptions::default() };
    for _ in 0..2 {
        pollster::block_on(tr.step(&be, &c.batch, &c.targets(), &opt)).unwrap();
    }
    let (config, st) = pollster::block_on(lora_peft::export_adapter(&be, &tr, None, None)).unwrap();
    let cj: Value = serde_json::from_str(&config).unwrap();
    assert_eq!(cj["target_modules"], serde_json::json!(["q", "v"]));
    let header_len = u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&st[8..8 + header_len]).unwrap();
    for ab in ["lora_A", "lora_B"] {
        let n = format!("base_model.model.mpnet.encoder.layer.1.attention.attn.v.{ab}.weight");
        assert!(header.get(&n).is_some(), "{n} missing from {:?}", header.as_object().unwrap().keys());
    }
    let mut cfg = c.cfg.clone();
    let loaded = apply_lora(&c.weights, &mut cfg, config.as_bytes(), &st).unwrap();
    let merged = pollster::block_on(lora_peft::merged(&be, &tr)).unwrap();
    let mut moved = 0f64;
    for (n, v) in &merged {
        let before = c.weights.stored(n).unwrap().to_f32().unwrap();
        moved = moved.max(v.iter().zip(&before).map(|(&a, &b)| (a as f64 - b as f64).abs()).fold(0f64, f64::max));
        let t = loaded.stored(n).unwrap_or_else(|| panic!("the loaded adapter has no {n}")).to_f32().unwrap();
        let d = v.iter().zip(&t).map(|(&a, &b)| (a as f64 - b as f64).abs()).fold(0f64, f64::max);
        assert!(d <= MERGE_ATOL, "{n} differs by {d:e}");
    }
    assert!(moved > 1e-3, "the adapters did not train (largest change {moved:e})");
}

/// Embedding fine-tuning of an MPNet (all-mpnet-base-v2's shape: MultipleNegativesRankingLoss on mean-pooled,
/// normalised vectors, scale 20) against PyTorch's float64 autograd (tests/golden/finetune_embed_mpnet.py): the loss
/// and every encoder parameter's gradient under `MPNetModel`'s names, with tests/finetune_golden.rs's embedding
/// tolerances; then steps lower the loss.
fn check_embedding<B: Backend>(be: &B, grad_rtol: f64) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/finetune_embed_mpnet.json");
    let g: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(g["model"].as_str().unwrap());
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    let weights = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    let side = |k: &str| {
        let rows = g[k]["input_ids"].as_array().unwrap();
        let (b, t) = (rows.len(), rows[0].as_array().unwrap().len());
        let u32s = |f: &str| ints(&g[k][f]).into_iter().map(|x| x as u32).collect::<Vec<_>>();
        Batch { input_ids: u32s("input_ids"), token_type_ids: u32s("token_type_ids"), attention_mask: u32s("attention_mask"), b, t }
    };
    let (anchors, positives) = (side("anchors"), side("positives"));
    let mut tr = FineTuner::new(be, &cfg, &weights, FineTuneTask::Embedding, None, 0).unwrap();
    let (grads, loss) = pollster::block_on(tr.embedding_gradients(be, &anchors, &positives)).unwrap();
    let want_loss = g["loss"].as_f64().unwrap();
    assert!((loss as f64 - want_loss).abs() <= LOSS_RTOL * want_loss, "embedding loss {loss} vs PyTorch {want_loss}");
    let want = g["grads"].as_object().unwrap();
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
    let (mut compared, mut worst) = (0, (String::new(), 0f64));
    for (p, gr) in tr.encoder.params.iter().zip(&grads) {
        let v = pollster::block_on(be.read(gr.as_ref().expect("every encoder parameter trains"))).unwrap();
        let each = v.len() / p.names.len();
        for (i, n) in p.names.iter().enumerate() {
            let key = n.strip_prefix("mpnet.").unwrap();
            let w = floats(&want[key]);
            assert_eq!(w.len(), each, "{key}");
            let diff = norm(&mut v[i * each..(i + 1) * each].iter().zip(&w).map(|(&a, &b)| a as f64 - b));
            let wn = norm(&mut w.iter().copied());
            if key.ends_with("attention.attn.k.bias") {
                assert!(diff <= ZERO_GRAD_ATOL * 10.0, "{key}: exact gradient zero, ours {diff}");
            } else {
                assert!(diff <= grad_rtol * wn, "embedding: gradient of {key}: relative error {:e}", diff / wn);
                if diff / wn > worst.1 {
                    worst = (key.to_string(), diff / wn);
                }
            }
            compared += 1;
        }
    }
    assert_eq!(compared, want.len(), "every golden tensor compared");
    eprintln!("mpnet embedding on {}: worst gradient relative error {:.2e} ({})", be.name(), worst.1, worst.0);
    let opt = StepOptions { learning_rate: 1e-3, ..StepOptions::default() };
    let targets = Targets::Embedding { positives: &positives };
    let first = pollster::block_on(tr.step(be, &anchors, &targets, &opt)).unwrap().loss;
    let mut last = first;
    for _ in 0..4 {
        last = pollster::block_on(tr.step(be, &anchors, &targets, &opt)).unwrap().loss;
    }
    assert!(last < first * 0.8, "embedding loss {first} → {last} after 5 steps on one batch");
}

#[test]
fn mpnet_embedding_matches_pytorch_on_the_cpu() {
    check_embedding(&CpuBackend::new(), CPU_GRAD_RTOL);
}

#[test]
fn mpnet_embedding_matches_pytorch_on_the_gpu() {
    let Some(g) = common::gpu() else { return };
    check_embedding(&g, GPU_GRAD_RTOL);
}
