//! Continued pre-training (masked LM) of BERT's relatives against PyTorch autograd: for each case of
//! tests/golden/pretrain_families.json (tests/golden/pretrain_families.py, float64) — RoBERTa, XLM-R, CamemBERT,
//! DistilBERT, ALBERT and an ELECTRA generator (`ElectraForMaskedLM`: `generator_predictions` H → E, the tied
//! `generator_lm_head`, `embeddings_project` E → H before the encoder), each with its own masked-LM head, and ALBERT's
//! `AlbertForPreTraining` with sentence-order prediction beside it (`albert_sop`) — the loss, the gradient of every parameter under the
//! family's own names (the word embeddings' holding both their uses, as the tied decoder and as the input table),
//! and five AdamW steps with weight decay and clipping, on the CPU and the GPU. The tolerances are
//! tests/finetune_families.rs's (the same tiny sizes; the MLM decoder adds one reduction over ≤ 16 selected rows,
//! as tests/pretrain_golden.rs's for BERT). NomicBERT and GTE are the cases of tests/golden/pretrain_rotary.json
//! (tests/golden/pretrain_rotary.py), and MPNet (`MPNetForMaskedLM`'s `lm_head`; its relative position bias table's
//! gradient sums every layer's) of tests/golden/pretrain_mpnet.json (tests/golden/pretrain_mpnet.py), checked the same
//! way; tests/golden/pretrain_mpnet_load.py loads the folder MPNet's `pretrain` writes in transformers. ModernBERT
//! (`head`, the tied decoder and `decoder.bias`) is the case of tests/golden/pretrain_modernbert.json
//! (tests/golden/pretrain_modernbert.py).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::BertConfig;
use bertgpu::training::finetune::{FineTuneTask, FineTuner, Targets};
use bertgpu::weights::Weights;
use common::golden_grads::{batch, floats, gradients_match, ints};
use serde_json::Value;

mod common;

/// Gradients per tensor, `‖ours − golden‖ / ‖golden‖` (tests/finetune_families.rs's bound; measured worst printed as
/// "worst gradient relative error").
const CPU_GRAD_RTOL: f64 = 2e-5;
const GPU_GRAD_RTOL: f64 = 2e-5;
/// Tensors whose exact gradient is zero (the attention key biases), relative to the global norm.
const ZERO_GRAD_ATOL: f64 = 1e-5;
/// Parameters after 5 AdamW steps at lr 1e-3 (tests/finetune_families.rs's `PARAM_ATOL`).
const PARAM_ATOL: f64 = 2e-4;
/// The loss and gradient norm before the first step, relative; and at the later steps (tests/finetune_families.rs's
/// `LOSS_RTOL` and `STEP_RTOL`, whose comments say why the later steps get more).
const LOSS_RTOL: f64 = 2e-5;
const STEP_RTOL: f64 = 2e-4;

const CASES: [(&str, &str); 7] = [("roberta", "RobertaForMaskedLM"), ("xlmr", "XLMRobertaForMaskedLM"),
    ("camembert", "CamembertForMaskedLM"), ("distilbert", "DistilBertForMaskedLM"), ("albert", "AlbertForMaskedLM"),
    ("albert_sop", "AlbertForPreTraining"), ("electra", "ElectraForMaskedLM")];

/// NomicBERT and GTE (tests/golden/pretrain_rotary.py).
const ROTARY_CASES: [(&str, &str); 2] = [("gte", "GteForMaskedLM"), ("nomic", "NomicBertForMaskedLM")];

/// ModernBERT (tests/golden/pretrain_modernbert.py): `head` and the tied decoder with `decoder.bias`.
const MODERN_CASES: [(&str, &str); 1] = [("modern", "ModernBertForMaskedLM")];

#[test]
fn modernbert_pretrains_as_pytorch_on_the_cpu() {
    let be = CpuBackend::new();
    for (name, arch) in MODERN_CASES {
        check(&be, name, arch, CPU_GRAD_RTOL);
    }
}

#[test]
fn modernbert_pretrains_as_pytorch_on_the_gpu() {
    let Some(g) = common::gpu() else { return };
    for (name, arch) in MODERN_CASES {
        check(&g, name, arch, GPU_GRAD_RTOL);
    }
}

/// MPNet (tests/golden/pretrain_mpnet.py).
const MPNET_CASES: [(&str, &str); 1] = [("mpnet", "MPNetForMaskedLM")];

/// The cases of tests/golden/pretrain_{families,rotary,mpnet,modernbert}.json, under `cases`.
fn golden() -> &'static Value {
    static G: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    G.get_or_init(|| {
        let mut all = serde_json::Map::new();
        for file in ["tests/golden/pretrain_families.json", "tests/golden/pretrain_rotary.json",
            "tests/golden/pretrain_mpnet.json", "tests/golden/pretrain_deberta.json",
            "tests/golden/pretrain_modernbert.json"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
            let g: Value = serde_json::from_str(&std::fs::read_to_string(path).expect(file)).unwrap();
            all.extend(g["cases"].as_object().unwrap().clone());
        }
        serde_json::json!({ "cases": all })
    })
}



/// Runs case `name` on `be`; returns the worst gradient relative error and the worst parameter error after the steps.
fn check<B: Backend>(be: &B, name: &str, arch: &str, grad_rtol: f64) -> (f64, f64) {
    let g = &golden()["cases"][name];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(g["model"].as_str().unwrap());
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    assert_eq!(cfg.family.model_type(), g["family"].as_str().unwrap());
    let weights = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    let batch = batch(g);
    let mlm = ints(&g["labels"]);
    // ALBERT's sentence order (AlbertForPreTraining): 0 in order, 1 swapped.
    let sop: Option<Vec<u32>> = g.get("sentence_order_label")
        .map(|v| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect());
    let mut tr = FineTuner::new(be, &cfg, &weights, FineTuneTask::Pretrain, None, 0).unwrap();

    let (grads, eval) = pollster::block_on(tr.pretrain_gradients(be, &batch, &mlm, sop.as_deref())).unwrap();
    let want_loss = g["loss"].as_f64().unwrap();
    let loss = eval.loss() as f64;
    assert!((loss - want_loss).abs() <= LOSS_RTOL * want_loss, "{name}: loss {loss} vs PyTorch {want_loss}");
    assert_eq!(eval.nsp_loss.is_some(), sop.is_some(), "{name}: a sentence-order loss exactly with its head");
    assert_eq!(eval.mlm_count, mlm.iter().filter(|&&l| l != -100).count());
    let grads: Vec<B::Tensor> = grads.into_iter().map(|g| g.expect("every parameter trains")).collect();
    let ours: BTreeMap<String, Vec<f32>> = pollster::block_on(tr.named(be, Some(&grads))).unwrap().into_iter().collect();
    let zero: BTreeSet<&str> = g["zero_grads"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let (opt, worst) = gradients_match(name, be.name(), &tr, &ours, g, grad_rtol, ZERO_GRAD_ATOL);
    let targets = Targets::Pretrain { mlm: &mlm, nsp: sop.as_deref() };
    let mut worst_step = 0f64;
    for (s, (wl, wn)) in floats(&g["losses"]).iter().zip(&floats(&g["grad_norms"])).enumerate() {
        let r = pollster::block_on(tr.step(be, &batch, &targets, &opt)).unwrap();
        let e = ((r.loss as f64 - wl).abs() / wl).max((r.grad_norm as f64 - wn).abs() / wn);
        worst_step = worst_step.max(e);
        let tol = if s == 0 { LOSS_RTOL } else { STEP_RTOL };
        assert!(e <= tol, "{name}: step {s}: loss {} vs PyTorch {wl}, grad norm {} vs {wn}", r.loss, r.grad_norm);
    }
    let after: BTreeMap<String, Vec<f32>> = pollster::block_on(tr.named(be, None)).unwrap().into_iter().collect();
    let mut worst_param = (String::new(), 0f64);
    for (n, w) in g["params_after"].as_object().unwrap() {
        if zero.contains(n.as_str()) {
            continue; // AdamW normalises noise-level gradients to full steps in either run
        }
        let (w, o) = (floats(w), &after[n]);
        let (i, d) = o.iter().zip(&w).map(|(&a, &b)| (a as f64 - b).abs()).enumerate()
            .fold((0, 0f64), |m, (i, d)| if d > m.1 { (i, d) } else { m });
        assert!(d <= PARAM_ATOL, "{name}: {n}[{i}] after 5 steps: ours {} vs PyTorch {}", o[i], w[i]);
        if d > worst_param.1 {
            worst_param = (format!("{n}[{i}]"), d);
        }
    }
    // The folder `pretrain` writes is the family's own masked-LM class, under the names PyTorch's model has.
    let original: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let (config, _) = pollster::block_on(bertgpu::training::rows::export_folder(be, &tr, &original, None)).unwrap();
    let config: Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["architectures"], serde_json::json!([arch]), "{name}");
    eprintln!("{name} on {}: worst parameter error after the steps {:.2e} ({}), worst relative loss/grad-norm error \
        {worst_step:.2e}", be.name(), worst_param.1, worst_param.0);
    (worst, worst_param.1)
}

#[test]
fn every_family_pretrains_as_pytorch_on_the_cpu() {
    let be = CpuBackend::new();
    for (name, arch) in CASES {
        check(&be, name, arch, CPU_GRAD_RTOL);
    }
}

#[test]
fn every_family_pretrains_as_pytorch_on_the_gpu() {
    let Some(g) = common::gpu() else { return };
    for (name, arch) in CASES {
        check(&g, name, arch, GPU_GRAD_RTOL);
    }
}

#[test]
fn rotary_families_pretrain_as_pytorch_on_the_cpu() {
    let be = CpuBackend::new();
    for (name, arch) in ROTARY_CASES {
        check(&be, name, arch, CPU_GRAD_RTOL);
    }
}

#[test]
fn rotary_families_pretrain_as_pytorch_on_the_gpu() {
    let Some(g) = common::gpu() else { return };
    for (name, arch) in ROTARY_CASES {
        check(&g, name, arch, GPU_GRAD_RTOL);
    }
}

/// DeBERTa-v3-like (tests/golden/pretrain_deberta.py): `lm_predictions.lm_head`, tied to the word embeddings.
const DEBERTA_CASES: [(&str, &str); 1] = [("deberta", "DebertaV2ForMaskedLM")];

#[test]
fn deberta_pretrains_as_pytorch_on_the_cpu() {
    let be = CpuBackend::new();
    for (name, arch) in DEBERTA_CASES {
        check(&be, name, arch, CPU_GRAD_RTOL);
    }
}

#[test]
fn deberta_pretrains_as_pytorch_on_the_gpu() {
    let Some(g) = common::gpu() else { return };
    for (name, arch) in DEBERTA_CASES {
        check(&g, name, arch, GPU_GRAD_RTOL);
    }
}

#[test]
fn mpnet_pretrains_as_pytorch_on_the_cpu() {
    let be = CpuBackend::new();
    for (name, arch) in MPNET_CASES {
        check(&be, name, arch, CPU_GRAD_RTOL);
    }
}

#[test]
fn mpnet_pretrains_as_pytorch_on_the_gpu() {
    let Some(g) = common::gpu() else { return };
    for (name, arch) in MPNET_CASES {
        check(&g, name, arch, GPU_GRAD_RTOL);
    }
}
