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
//! (tests/golden/pretrain_modernbert.py). JinaBERT (`JinaBertForMaskedLM`: BERT's `cls.predictions` on an encoder
//! with ALiBi and the gated `mlp.gated_layers`) is the case of tests/golden/pretrain_jina.json
//! (tests/golden/pretrain_jina.py, the float64 transcription of the authors' code; transformers has no JinaBERT
//! class), whose written folder is also loaded back (`jina_reloads`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::BertConfig;
use bertgpu::tasks::Model;
use bertgpu::tokenizer::{Encoded, Tokenizer};
use bertgpu::training::finetune::{FineTuneTask, FineTuner, Targets};
use bertgpu::weights::Weights;
use common::golden_grads::{batch, floats, gradients_match, ints};
use serde_json::Value;

mod common;

/// Gradients per tensor, `‖ours − golden‖ / ‖golden‖` (tests/finetune_families.rs's bound; measured worst printed as
/// "worst gradient relative error").
const CPU_GRAD_RTOL: f64 = 2e-5;
const GPU_GRAD_RTOL: f64 = 2e-5;
/// The loss of the folder written after the steps, loaded back, against the trained model's: the fine-tuner built
/// from it (the same f32 values through the same code) and the inference model's fill-mask logits at the selected
/// tokens (its own forward and head: other summation orders). Measured: 0 (the fine-tuner, both backends), 4.4e-8
/// (fill-mask, trained on the CPU), 1.6e-8 (trained on lavapipe); 1e-6 is 23× that, and the steps moved the loss by
/// 3.3.
const RELOAD_RTOL: f64 = 1e-6;
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
            "tests/golden/pretrain_modernbert.json", "tests/golden/pretrain_jina.json"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
            let g: Value = serde_json::from_str(&std::fs::read_to_string(path).expect(file)).unwrap();
            all.extend(g["cases"].as_object().unwrap().clone());
        }
        serde_json::json!({ "cases": all })
    })
}



/// Runs case `name` on `be`; returns the worst gradient relative error and the worst parameter error after the steps,
/// and the model after them.
fn check<B: Backend>(be: &B, name: &str, arch: &str, grad_rtol: f64) -> (f64, f64, FineTuner<B>) {
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
    (worst, worst_param.1, tr)
}

/// JinaBERT (tests/golden/pretrain_jina.py): `cls.predictions` and the tied decoder on ALiBi and the gated block.
const JINA_CASES: [(&str, &str); 1] = [("jina", "JinaBertForMaskedLM")];

/// The folder `pretrain` writes after case `name`'s steps: the checkpoint's tensor names exactly, and loaded back
/// (as a fine-tuner, and as an inference model's fill-mask head) it gives the trained model's loss on the batch.
fn reloads<B: Backend>(be: &B, name: &str, tr: &FineTuner<B>) {
    let g = &golden()["cases"][name];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(g["model"].as_str().unwrap());
    let (batch, mlm) = (batch(g), ints(&g["labels"]));
    let original: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let (config, st) = pollster::block_on(bertgpu::training::rows::export_folder(be, tr, &original, None)).unwrap();
    let weights = Weights::from_safetensors(&st).unwrap();
    let names = |w: &Weights| w.names().into_iter().map(String::from).collect::<BTreeSet<_>>();
    let base = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    assert_eq!(names(&weights), names(&base), "{name}: the written folder's tensors are the checkpoint's");
    let cfg = BertConfig::from_json_str(&config).unwrap();
    let want = pollster::block_on(tr.pretrain_eval(be, &batch, &mlm, None)).unwrap().loss() as f64;
    let moved = (want - g["loss"].as_f64().unwrap()).abs();
    let again = FineTuner::new(be, &cfg, &weights, FineTuneTask::Pretrain, None, 0).unwrap();
    let got = pollster::block_on(again.pretrain_eval(be, &batch, &mlm, None)).unwrap().loss() as f64;
    // The inference model's fill-mask logits at the selected tokens, and their mean cross-entropy.
    let tok = Tokenizer::from_dir(&dir, cfg.max_position_embeddings).unwrap();
    let model = Model::new(CpuBackend::new(), cfg.clone(), tok, &weights).unwrap();
    let t = batch.t;
    let (mut encoded, mut positions, mut labels) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..batch.b {
        let n = batch.attention_mask[i * t..(i + 1) * t].iter().filter(|&&m| m == 1).count();
        let ids = batch.input_ids[i * t..i * t + n].to_vec();
        encoded.push(Encoded { type_ids: batch.token_type_ids[i * t..i * t + n].to_vec(), ids, ..Encoded::default() });
        positions.push((0..n).filter(|&j| mlm[i * t + j] != -100).collect::<Vec<_>>());
        labels.extend(positions[i].iter().map(|&j| mlm[i * t + j] as usize));
    }
    let logits = pollster::block_on(model.fill_mask_logits(&encoded, &positions)).unwrap();
    let v = cfg.vocab_size;
    let ce: f64 = labels.iter().enumerate().map(|(r, &y)| {
        let row: Vec<f64> = logits[r * v..(r + 1) * v].iter().map(|&x| x as f64).collect();
        let m = row.iter().cloned().fold(f64::MIN, f64::max);
        m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln() - row[y]
    }).sum::<f64>() / labels.len() as f64;
    let (e1, e2) = ((got - want).abs() / want, (ce - want).abs() / want);
    assert!(e1 <= RELOAD_RTOL, "{name}: the folder loaded back as a fine-tuner: loss {got} vs the trained {want}");
    assert!(e2 <= RELOAD_RTOL, "{name}: the folder's fill-mask head (CPU): loss {ce} vs the trained {want}");
    assert!(moved > 0.3, "{name}: the steps moved the loss by only {moved}");
    eprintln!("{name} on {}: the written folder reloaded: loss {e1:.1e} (fine-tuner), {e2:.1e} (fill-mask, CPU) from \
        the trained model's; the steps moved it by {moved:.2}", be.name());
}

#[test]
fn jina_pretrains_as_its_authors_code_and_reloads_on_the_cpu() {
    let be = CpuBackend::new();
    for (name, arch) in JINA_CASES {
        let (_, _, tr) = check(&be, name, arch, CPU_GRAD_RTOL);
        reloads(&be, name, &tr);
    }
}

#[test]
fn jina_pretrains_as_its_authors_code_and_reloads_on_the_gpu() {
    let Some(g) = common::gpu() else { return };
    for (name, arch) in JINA_CASES {
        let (_, _, tr) = check(&g, name, arch, GPU_GRAD_RTOL);
        reloads(&g, name, &tr);
    }
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
