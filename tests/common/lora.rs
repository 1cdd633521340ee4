//! LoRA against a Hugging Face `peft` golden (tests/golden/lora*.py, float64): a case's checkpoint, batch and labels,
//! the golden's starting A and B, and the checks every LoRA golden test makes (tests/lora_golden.rs,
//! lora_modernbert_albert.rs, finetune_families.rs's rotary and DeBERTa cases): which parameters train, the loss,
//! every trained gradient, the AdamW steps and the parameters after them. The tolerances are each caller's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use bertgpu::backend::Backend;
use bertgpu::config::{BertConfig, Family};
use bertgpu::tokenizer::Batch;
use bertgpu::training::finetune::{FineTuneTask, FineTuner, Targets};
use bertgpu::training::lora::{LoraOptions, LoraTargets};
use bertgpu::training::rows::export_folder;
use bertgpu::weights::Weights;
use serde_json::Value;

use super::golden_grads::{batch, floats, ints, max_diff, norm, step_options};

/// A case of a LoRA golden (`task_type` SEQ_CLS or TOKEN_CLS): its checkpoint, tests/models/`g["model"]`, and its
/// batch with the labels.
pub struct LoraCase {
    pub g: Value,
    pub dir: PathBuf,
    pub cfg: BertConfig,
    pub weights: Weights,
    pub batch: Batch,
    pub task: FineTuneTask,
    pub labels: Vec<u32>,
    pub token_labels: Vec<i64>,
}

impl LoraCase {
    pub fn load(g: &Value) -> LoraCase {
        assert!(g.is_object(), "no such case");
        let dir = super::family::dir(g["model"].as_str().unwrap());
        let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
        let weights = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
        let task = if g["task_type"] == "SEQ_CLS" { FineTuneTask::Sequence } else { FineTuneTask::Token };
        let (labels, token_labels) = match task {
            FineTuneTask::Sequence => (ints(&g["labels"]).into_iter().map(|x| x as u32).collect(), vec![]),
            _ => (vec![], ints(&g["labels"])),
        };
        LoraCase { g: g.clone(), dir, cfg, weights, batch: batch(g), task, labels, token_labels }
    }

    pub fn targets(&self) -> Targets<'_> {
        match self.task {
            FineTuneTask::Sequence => Targets::Sequence(&self.labels),
            _ => Targets::Token(&self.token_labels),
        }
    }
}

/// The golden's `r` and `lora_alpha` on `targets`.
pub fn options(g: &Value, targets: LoraTargets) -> LoraOptions {
    LoraOptions { r: g["r"].as_u64().unwrap() as usize, alpha: g["lora_alpha"].as_f64().unwrap() as f32, targets, merge: false }
}

/// Overwrites every adapter's A and B with the golden's starting values (`g["init"]`, by name); every adapter of the
/// golden must exist here. Returns how many tensors were set.
pub fn set_init<B: Backend>(be: &B, tr: &mut FineTuner<B>, g: &Value, name: &str) -> usize {
    let init = g["init"].as_object().unwrap();
    let mut set = 0;
    for p in tr.encoder.params.iter_mut() {
        if let Some(v) = init.get(&p.names[0]) {
            let v: Vec<f32> = floats(v).into_iter().map(|x| x as f32).collect();
            assert_eq!(v.len(), p.rows * p.cols, "{name}: {}", p.names[0]);
            p.tensor = be.input(&v, p.rows, p.cols).unwrap();
            set += 1;
        }
    }
    assert_eq!(set, init.len(), "{name}: every adapter of the golden exists here");
    set
}

/// A golden's list of names (`trainable`, `saved_keys`, `target_modules`) as a set.
pub fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

/// Which parameters train (exactly the golden's `trainable`), the loss within `loss_rtol` of the golden's, every
/// trained gradient within `grad_rtol` of it relative to its own norm. Returns the trained names and the worst
/// gradient (name, relative error).
pub fn check_gradients<B: Backend>(be: &B, tr: &mut FineTuner<B>, batch: &Batch, targets: &Targets, g: &Value,
    name: &str, grad_rtol: f64, loss_rtol: f64) -> (BTreeSet<String>, (String, f64)) {
    let (grads, logits) = tr.trainable_gradients(be, batch, targets).unwrap();
    let trained: BTreeSet<String> =
        tr.encoder.params.iter().zip(&grads).filter(|(_, g)| g.is_some()).map(|(p, _)| p.names[0].clone()).collect();
    assert_eq!(trained, strings(&g["trainable"]), "{name}: the parameters that train are exactly peft's");
    let loss = tr.loss(&pollster::block_on(be.read(&logits)).unwrap(), batch.t, targets) as f64;
    let want_loss = g["loss"].as_f64().unwrap();
    assert!((loss - want_loss).abs() <= loss_rtol * want_loss, "{name}: loss {loss} vs peft {want_loss}");
    let mut worst = (String::new(), 0f64);
    for (p, gr) in tr.encoder.params.iter().zip(&grads) {
        let Some(gr) = gr else { continue };
        let (ours, want) = (pollster::block_on(be.read(gr)).unwrap(), floats(&g["grads"][&p.names[0]]));
        assert_eq!(ours.len(), want.len(), "{name}: {}", p.names[0]);
        let rel = norm(ours.iter().zip(&want).map(|(&a, &b)| a as f64 - b)) / norm(want.iter().copied());
        assert!(rel <= grad_rtol, "{name}: gradient of {}: relative error {rel:e} > {grad_rtol:e}", p.names[0]);
        if rel > worst.1 {
            worst = (p.names[0].clone(), rel);
        }
    }
    (trained, worst)
}

/// The golden's AdamW steps (`losses`, `grad_norms`, with its `lr`, `weight_decay` and `max_norm`): each step's loss
/// and gradient norm within `rtol` of PyTorch's, relative. Returns the worst.
pub fn check_steps<B: Backend>(be: &B, tr: &mut FineTuner<B>, batch: &Batch, targets: &Targets, g: &Value,
    name: &str, rtol: f64) -> f64 {
    let opt = step_options(g);
    let (losses, norms) = (floats(&g["losses"]), floats(&g["grad_norms"]));
    assert!(!losses.is_empty(), "{name}: the golden's step losses");
    assert_eq!(norms.len(), losses.len(), "{name}: the golden's step gradient norms, one per step");
    let mut worst = 0f64;
    for (s, (wl, wn)) in losses.iter().zip(norms).enumerate() {
        let r = pollster::block_on(tr.step(be, batch, targets, &opt)).unwrap();
        let (el, en) = ((r.loss as f64 - wl).abs() / wl, (r.grad_norm as f64 - wn).abs() / wn);
        assert!(el <= rtol && en <= rtol, "{name}: step {s}: loss {} vs {wl}, grad norm {} vs {wn}", r.loss, r.grad_norm);
        worst = worst.max(el).max(en);
    }
    worst
}

/// Every parameter of the golden's `params_after` within `atol` of ours after the steps (`after`, by name). Returns
/// the worst difference.
pub fn check_params_after(after: &BTreeMap<String, Vec<f32>>, g: &Value, name: &str, atol: f64) -> f64 {
    let mut worst = 0f64;
    for (n, w) in g["params_after"].as_object().unwrap() {
        let d = max_diff(&after[n], &floats(w));
        assert!(d <= atol, "{name}: {n} after the steps differs from peft's by {d}");
        worst = worst.max(d);
    }
    worst
}

/// With `BERTGPU_LORA_EXPORT=DIR` and on the CPU, writes case `name`'s trained adapter (`adapter`: the
/// `adapter_config.json` and `adapter_model.safetensors` of `lora_peft::export_adapter`), its merged folder
/// (`merged/`, `rows::export_folder` from tests/models/`model`'s config.json) and our logits on `batch` (`logits.json`,
/// with the golden `g`'s token ids, the task and the base model) into `DIR/<name>`, for tests/golden/lora_peft_load.py
/// (peft loads them and must give our logits and our merge). ModernBERT reads no token types: none are written.
pub fn export_for_peft<B: Backend>(be: &B, tr: &FineTuner<B>, name: &str, model: &str, cfg: &BertConfig,
    task: FineTuneTask, batch: &Batch, g: &Value, adapter: (&str, &[u8])) {
    let (Ok(dir), "cpu") = (std::env::var("BERTGPU_LORA_EXPORT"), be.name()) else { return };
    let dir = std::path::Path::new(&dir).join(name);
    std::fs::create_dir_all(dir.join("merged")).unwrap();
    std::fs::write(dir.join("adapter_config.json"), adapter.0).unwrap();
    std::fs::write(dir.join("adapter_model.safetensors"), adapter.1).unwrap();
    let config = std::fs::read_to_string(super::family::dir(model).join("config.json")).unwrap();
    let original: Value = serde_json::from_str(&config).unwrap();
    let (mc, mst) = pollster::block_on(export_folder(be, tr, &original, None)).unwrap();
    std::fs::write(dir.join("merged/config.json"), mc).unwrap();
    std::fs::write(dir.join("merged/model.safetensors"), mst).unwrap();
    let logits = pollster::block_on(be.read(&tr.logits(be, batch).unwrap())).unwrap();
    let task = if task == FineTuneTask::Sequence { "sequence" } else { "token" };
    let mut out = serde_json::json!({ "logits": logits, "input_ids": g["input_ids"],
        "attention_mask": g["attention_mask"], "task": task, "base": model });
    if cfg.family != Family::ModernBert {
        out["token_type_ids"] = g["token_type_ids"].clone();
    }
    std::fs::write(dir.join("logits.json"), out.to_string()).unwrap();
    eprintln!("wrote {name}'s adapter, merged folder and logits into {}", dir.display());
}
