//! bertgpu's side of `bench/ner_gap.py` (BENCHMARKS.md, "Fine-tuning", token classification): what `bertgpu
//! fine-tune --task ner --validation-split 0 --no-dropout --seed SEED` trains on, laid open for a comparison with
//! PyTorch. Writes into OUT:
//!
//! - `rows.json`: the label list and every training row (input_ids, token_type_ids, labels) as `job::prepare` makes
//!   them;
//! - `order.json`: the rows of each optimiser step, in order (fit's seeded split and per-epoch shuffles for SEED, or
//!   the steps of `--order FILE`, a JSON list of lists of row indices);
//! - `head.json`: the new classifier's initial weight `(labels, hidden)` and bias, as `FineTuner::new` draws them
//!   (or as `--head FILE` gives them, a JSON object of the same shape);
//! - `steps.json`: per step the learning rate, the batch's loss and the gradient norm before clipping, for the first
//!   `--steps N` steps of the schedule (default: all);
//!
//! and with `--export`, the trained model's `config.json` and `model.safetensors` in OUT.
//!
//! `cargo run --release --example ner_trajectory -- models/all-MiniLM-L6-v2 tests/data/fortunes-attributions/ner/train.jsonl
//!  OUT [--seed 0] [--epochs 3] [--lr 1e-4] [--steps N] [--order FILE] [--head FILE] [--export]`

use std::path::PathBuf;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::loader::{self, LoadOptions, ModelSource};
use bertgpu::training::finetune::{FineTuneTask, FineTuner};
use bertgpu::training::optim::StepOptions;
use bertgpu::training::rows::{self, RowBatch, RowTarget};
use bertgpu::training::rng::SplitMix64;
use bertgpu::training::job::{self, Examples, JobTask};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (model, data, out) = (PathBuf::from(&args[1]), PathBuf::from(&args[2]), PathBuf::from(&args[3]));
    let flag = |name: &str| args.iter().position(|a| a == name).map(|i| args[i + 1].clone());
    let seed: u64 = flag("--seed").map_or(Ok(0), |s| s.parse())?;
    let epochs: usize = flag("--epochs").map_or(Ok(3), |s| s.parse())?;
    let lr: f32 = flag("--lr").map_or(Ok(1e-4), |s| s.parse())?;
    let (batch_size, warmup, weight_decay) = (16usize, 0.1f32, 0.01f32);
    std::fs::create_dir_all(&out)?;

    let m = loader::load(ModelSource::Path(&model), &LoadOptions { max_length: None })?;
    let (cfg, tok) = (&m.config, &m.tokenizer);
    let examples = Examples::parse(JobTask::Ner, &std::fs::read_to_string(&data)?)?;
    let p = job::prepare(cfg, tok, JobTask::Ner, &examples, 128)?;
    let labels = p.labels.clone().expect("a token classifier's labels");
    let rows_json: Vec<_> = p
        .rows
        .iter()
        .map(|r| {
            let RowTarget::Token(l) = &r.target else { unreachable!("token rows") };
            json!({"input_ids": r.input_ids, "token_type_ids": r.token_type_ids, "labels": l})
        })
        .collect();
    std::fs::write(out.join("rows.json"), json!({"labels": labels, "keep_head": p.keep_head, "rows": rows_json}).to_string())?;

    // The steps: fit's order for `seed` (split with validation 0: one shuffle of the examples, one of the training
    // rows, then one per epoch), or the given one.
    let steps: Vec<Vec<usize>> = match flag("--order") {
        Some(f) => serde_json::from_str(&std::fs::read_to_string(f)?)?,
        None => {
            let mut rng = SplitMix64::new(seed);
            let mut ex: Vec<usize> = (0..p.rows.len()).collect();
            rng.shuffle(&mut ex);
            let mut train: Vec<usize> = (0..p.rows.len()).collect();
            rng.shuffle(&mut train);
            let mut steps = Vec::new();
            for _ in 0..epochs {
                rng.shuffle(&mut train);
                steps.extend(train.chunks(batch_size).map(<[usize]>::to_vec));
            }
            steps
        }
    };
    std::fs::write(out.join("order.json"), serde_json::to_string(&steps)?)?;

    let be = CpuBackend::new();
    let weights = m.weights()?;
    let fresh = (!p.keep_head).then_some(labels.len());
    let mut tuner = FineTuner::new(&be, cfg, &weights, FineTuneTask::Token, fresh, seed)?;
    if let Some(f) = flag("--head") {
        // Another initial classifier (e.g. PyTorch's for a seed): {"weight": [labels·hidden], "bias": [labels]}.
        let h: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f)?)?;
        for p in tuner.encoder.params.iter_mut() {
            let key = match p.names[0].as_str() {
                "classifier.weight" => "weight",
                "classifier.bias" => "bias",
                _ => continue,
            };
            let v: Vec<f32> = serde_json::from_value(h[key].clone())?;
            assert_eq!(v.len(), p.rows * p.cols, "{key}: {} values for ({}, {})", v.len(), p.rows, p.cols);
            p.tensor = be.input(&v, p.rows, p.cols)?;
        }
    }
    let named = pollster::block_on(tuner.named(&be, None))?;
    let get = |n: &str| named.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).expect(n);
    std::fs::write(out.join("head.json"),
        json!({"weight": get("classifier.weight"), "bias": get("classifier.bias"), "shape": [labels.len(), cfg.hidden_size]})
            .to_string())?;

    // get_linear_schedule_with_warmup as fit.rs computes it.
    let total = steps.len();
    let warm = (warmup as f64 * total as f64 - 1e-6).ceil().max(0.0) as usize;
    let run = flag("--steps").map_or(Ok(total), |s| s.parse())?.min(total);
    let mut log = Vec::new();
    for (step, idx) in steps.iter().take(run).enumerate() {
        let factor = if step < warm {
            step as f64 / warm.max(1) as f64
        } else {
            (total - step) as f64 / (total - warm).max(1) as f64
        };
        let rate = (lr as f64 * factor) as f32;
        let batch = RowBatch::new(&idx.iter().map(|&i| &p.rows[i]).collect::<Vec<_>>(), cfg.pad_token_id, None)?;
        let opt = StepOptions { learning_rate: rate, weight_decay, max_grad_norm: Some(1.0), ..StepOptions::default() };
        let r = pollster::block_on(tuner.step(&be, &batch.batch, &batch.targets(), &opt))?;
        eprintln!("step {} lr {rate:.3e} loss {:.6} grad_norm {:.6}", step + 1, r.loss, r.grad_norm);
        log.push(json!({"step": step + 1, "lr": rate, "loss": r.loss, "grad_norm": r.grad_norm}));
    }
    std::fs::write(out.join("steps.json"), serde_json::to_string(&log)?)?;
    if args.iter().any(|a| a == "--export") {
        let original: serde_json::Value = serde_json::from_slice(&std::fs::read(model.join("config.json"))?)?;
        let (config_json, st) = pollster::block_on(rows::export_folder(&be, &tuner, &original, Some(&labels)))?;
        std::fs::write(out.join("config.json"), config_json)?;
        std::fs::write(out.join("model.safetensors"), st)?;
    }
    Ok(())
}
