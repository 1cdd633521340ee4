//! One training step's gradients against a float64 PyTorch golden (tests/golden/finetune_families.py,
//! pretrain_families.py): the parameters by name and shape, each gradient's relative error, the zero ones, which
//! parameters decay, and the golden's AdamW options.

use std::collections::{BTreeMap, BTreeSet};

use bertgpu::backend::Backend;
use bertgpu::tokenizer::Batch;
use bertgpu::training::finetune::FineTuner;
use bertgpu::training::optim::StepOptions;
use serde_json::Value;

pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// A golden's integers (token ids, labels, masks), flattened: a `(b, t)` table row by row, or a list as it is.
pub fn ints(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().flat_map(|r| match r.as_array() {
        Some(row) => row.iter().map(|x| x.as_i64().unwrap()).collect::<Vec<_>>(),
        None => vec![r.as_i64().unwrap()],
    }).collect()
}

pub fn norm(v: impl Iterator<Item = f64>) -> f64 {
    v.map(|x| x * x).sum::<f64>().sqrt()
}

/// The largest `|a − b|`, after checking that the two have as many values.
pub fn max_diff(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(&x, &y)| (x as f64 - y).abs()).fold(0f64, f64::max)
}

/// The golden's batch: `input_ids`, `token_type_ids` and `attention_mask`, a `(b, t)` table each.
pub fn batch(g: &Value) -> Batch {
    let b = g["input_ids"].as_array().unwrap().len();
    let u32s = |k: &str| ints(&g[k]).into_iter().map(|x| x as u32).collect::<Vec<_>>();
    let input_ids = u32s("input_ids");
    let t = input_ids.len() / b;
    Batch { input_ids, token_type_ids: u32s("token_type_ids"), attention_mask: u32s("attention_mask"), b, t }
}

/// The golden's AdamW options: `lr`, `weight_decay`, and `max_norm` for the gradient clipping.
pub fn step_options(g: &Value) -> StepOptions {
    StepOptions {
        learning_rate: g["lr"].as_f64().unwrap() as f32,
        weight_decay: g["weight_decay"].as_f64().unwrap() as f32,
        max_grad_norm: Some(g["max_norm"].as_f64().unwrap() as f32),
        ..StepOptions::default()
    }
}

/// Checks `ours` (the trainer's named gradients) against `g`'s: every gradient within `grad_rtol` of PyTorch's
/// relative to its own norm, those in `g["zero_grads"]` within `zero_atol` of the global norm; the weight-decay set;
/// prints the worst. Returns the golden's step options and the worst relative error.
pub fn gradients_match<B: Backend>(name: &str, on: &str, tr: &FineTuner<B>, ours: &BTreeMap<String, Vec<f32>>, g: &Value,
    grad_rtol: f64, zero_atol: f64) -> (StepOptions, f64) {
    let zero: BTreeSet<&str> = g["zero_grads"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let want = g["grads"].as_object().unwrap();
    assert_eq!(ours.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{name}: the parameters, by name");
    let shapes = tr.shapes();
    for (n, s) in g["shapes"].as_object().unwrap() {
        let s: Vec<usize> = s.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        assert_eq!(shapes[n], s, "{name}: the shape of {n}");
    }
    let global = norm(want.values().flat_map(floats));
    let mut worst = (String::new(), 0f64);
    for (n, w) in want {
        let (w, o) = (floats(w), &ours[n]);
        assert_eq!(o.len(), w.len(), "{name}: {n}");
        let diff = norm(o.iter().zip(&w).map(|(&a, &b)| a as f64 - b));
        if zero.contains(n.as_str()) {
            assert!(diff <= zero_atol * global, "{name}: {n}'s exact gradient is zero; ours has norm {diff}");
            continue;
        }
        let rel = diff / norm(w.iter().copied());
        if rel > worst.1 {
            worst = (n.clone(), rel);
        }
        assert!(rel <= grad_rtol, "{name}: gradient of {n}: relative error {rel:e} > {grad_rtol:e}");
    }
    eprintln!("{name} on {on}: worst gradient relative error {:e} ({})", worst.1, worst.0);
    let no_decay: BTreeSet<&str> = g["no_decay"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for p in &tr.encoder.params {
        for n in &p.names {
            assert_eq!(!p.decay, no_decay.contains(n.as_str()), "{name}: weight decay of {n}");
        }
    }
    (step_options(g), worst.1)
}
