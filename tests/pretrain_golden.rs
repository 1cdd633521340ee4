//! Pre-training (masked LM + next-sentence prediction, `BertForPreTraining`) against PyTorch autograd: one batch of
//! tests/golden/pretrain.json (tests/golden/pretrain.py, float64) — the loss and its two parts, the gradient of every
//! parameter (the word embeddings' holding both their uses, as the tied decoder and as the input table), and five
//! AdamW steps with weight decay and clipping — on the CPU and on the GPU.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::BertConfig;
use bertgpu::tokenizer::Batch;
use bertgpu::training::finetune::{FineTuneTask, FineTuner, Targets};
use bertgpu::training::optim::StepOptions;
use bertgpu::weights::Weights;
use serde_json::Value;

mod common;

use common::golden_grads::{floats, ints, norm};

/// The kinds of bound of tests/finetune_golden.rs, for the same reasons (f32 against a float64 reference through two
/// layers; the GPU's reductions sum in other orders; the MLM decoder adds one more reduction, over the 21 selected
/// rows), each from what this test measures and prints (`cargo test --test pretrain_golden -- --nocapture`).
/// Gradients per tensor, relative: measured worst 1.3e-6 on the CPU, 1.1e-6 on lavapipe; 1e-5 is 7.6× that.
const CPU_GRAD_RTOL: f64 = 1e-5;
const GPU_GRAD_RTOL: f64 = 1e-5;
/// Exactly-zero gradients: noise level relative to the global norm (tests/finetune_golden.rs).
const ZERO_GRAD_ATOL: f64 = 1e-5;
/// Parameters after the steps at lr 1e-3: measured worst 2.8e-6 (the masked LM's transform); 1.5e-5 is 5.4× that.
const PARAM_ATOL: f64 = 1.5e-5;
/// Losses and gradient norms per step, relative: measured worst 1.0e-6 on the CPU and on lavapipe; 5e-6 is 4.8×.
const LOSS_RTOL: f64 = 5e-6;
const GPU_LOSS_RTOL: f64 = 5e-6;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The golden, the tiny checkpoint, and the golden's batch with its masked-LM and NSP labels.
struct Golden {
    g: Value,
    cfg: BertConfig,
    weights: Weights,
    batch: Batch,
    mlm: Vec<i64>,
    nsp: Vec<u32>,
}

fn golden() -> Golden {
    let g: Value = serde_json::from_str(&std::fs::read_to_string(root().join("tests/golden/pretrain.json")).unwrap()).unwrap();
    let dir = root().join("tests/models/tiny-pretraining");
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    let weights = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    let u32s = |k: &str| ints(&g[k]).into_iter().map(|x| x as u32).collect::<Vec<u32>>();
    let (b, t) = (g["input_ids"].as_array().unwrap().len(), g["input_ids"][0].as_array().unwrap().len());
    let batch = Batch { input_ids: u32s("input_ids"), token_type_ids: u32s("token_type_ids"),
        attention_mask: u32s("attention_mask"), b, t };
    let (mlm, nsp) = (ints(&g["labels"]), u32s("next_sentence_label"));
    Golden { g, cfg, weights, batch, mlm, nsp }
}

fn check<B: Backend>(be: &B, grad_rtol: f64, loss_rtol: f64) {
    let Golden { g, cfg, weights, batch, mlm, nsp } = golden();
    let mut tr = FineTuner::new(be, &cfg, &weights, FineTuneTask::Pretrain, None, 0).unwrap();
    let zero: BTreeSet<String> = g["zero_grads"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();

    // The losses and every gradient at the checkpoint's weights.
    let (grads, eval) = pollster::block_on(tr.pretrain_gradients(be, &batch, &mlm, Some(&nsp))).unwrap();
    for (what, got, want) in [("loss", eval.loss(), &g["loss"]), ("MLM loss", eval.mlm_loss, &g["mlm_loss"]),
        ("NSP loss", eval.nsp_loss.unwrap(), &g["nsp_loss"])] {
        let want = want.as_f64().unwrap();
        assert!((got as f64 - want).abs() <= loss_rtol * want, "{what} {got} vs PyTorch {want}");
    }
    assert_eq!(eval.mlm_count, mlm.iter().filter(|&&l| l != -100).count());
    let grads: Vec<B::Tensor> = grads.into_iter().map(|g| g.expect("every parameter trains")).collect();
    let ours: BTreeMap<String, Vec<f32>> = pollster::block_on(tr.named(be, Some(&grads))).unwrap().into_iter().collect();
    let want = g["grads"].as_object().unwrap();
    assert_eq!(ours.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "the parameters we train are PyTorch's");
    let global = norm(want.values().flat_map(floats));
    let mut worst = (String::new(), 0f64);
    for (n, w) in want {
        let (w, o) = (floats(w), &ours[n]);
        assert_eq!(o.len(), w.len(), "{n}");
        let diff = norm(o.iter().zip(&w).map(|(&a, &b)| a as f64 - b));
        if zero.contains(n) {
            assert!(diff <= ZERO_GRAD_ATOL * global, "{n}'s exact gradient is zero; ours has norm {diff}");
            continue;
        }
        let rel = diff / norm(w.iter().copied());
        if rel > worst.1 {
            worst = (n.clone(), rel);
        }
        assert!(rel <= grad_rtol, "gradient of {n}: relative error {rel:e} > {grad_rtol:e}");
    }
    eprintln!("pre-training on {}: worst gradient relative error {:e} ({})", be.name(), worst.1, worst.0);

    // Five AdamW steps on the same batch.
    let no_decay: BTreeSet<&str> = g["no_decay"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for p in &tr.encoder.params {
        assert_eq!(!p.decay, no_decay.contains(p.names[0].as_str()), "weight decay of {}", p.names[0]);
    }
    let opt = StepOptions {
        learning_rate: g["lr"].as_f64().unwrap() as f32,
        weight_decay: g["weight_decay"].as_f64().unwrap() as f32,
        max_grad_norm: Some(g["max_norm"].as_f64().unwrap() as f32),
        ..StepOptions::default()
    };
    let targets = Targets::Pretrain { mlm: &mlm, nsp: Some(&nsp) };
    let (losses, norms) = (floats(&g["losses"]), floats(&g["grad_norms"]));
    assert!(!losses.is_empty(), "the golden's step losses");
    assert_eq!(norms.len(), losses.len(), "the golden's step gradient norms, one per step");
    let mut worst_step = 0f64;
    for (s, (wl, wn)) in losses.iter().zip(norms).enumerate() {
        let r = pollster::block_on(tr.step(be, &batch, &targets, &opt)).unwrap();
        assert!((r.loss as f64 - wl).abs() <= loss_rtol * wl, "step {s} loss {} vs PyTorch {wl}", r.loss);
        assert!((r.grad_norm as f64 - wn).abs() <= loss_rtol * wn, "step {s} grad norm {} vs {wn}", r.grad_norm);
        worst_step = worst_step.max((r.loss as f64 - wl).abs() / wl).max((r.grad_norm as f64 - wn).abs() / wn);
    }
    eprintln!("pre-training on {}: worst relative loss/grad-norm error {worst_step:e}", be.name());
    let after: BTreeMap<String, Vec<f32>> = pollster::block_on(tr.named(be, None)).unwrap().into_iter().collect();
    let mut compared = 0;
    for (n, w) in g["params_after"].as_object().unwrap() {
        if zero.contains(n) {
            continue; // AdamW normalises noise-level gradients to full steps (finetune.py explains)
        }
        let (w, o) = (floats(w), &after[n]);
        assert_eq!(o.len(), w.len(), "{n}'s values after the steps");
        let d = o.iter().zip(&w).map(|(&a, &b)| (a as f64 - b).abs()).fold(0f64, f64::max);
        eprintln!("measured parameter {n}: {d:.2e}");
        assert!(d <= PARAM_ATOL, "{n} after 5 steps: off by {d}");
        compared += 1;
    }
    assert!(compared >= 40, "only {compared} tensors compared after the steps");
}

#[test]
fn pretraining_matches_pytorch_on_the_cpu() {
    check(&CpuBackend::new(), CPU_GRAD_RTOL, LOSS_RTOL);
}

#[test]
fn pretraining_matches_pytorch_on_the_gpu() {
    let Some(g) = common::gpu() else { return };
    check(&g, GPU_GRAD_RTOL, GPU_LOSS_RTOL);
}

/// Bad targets are clear errors, not panics: labels outside the vocabulary, NSP labels out of range, a fine-tuner of
/// another task (and without NSP labels the masked LM alone trains, with nothing selected NSP alone).
#[test]
fn bad_pretraining_targets_are_clear_errors() {
    let be = CpuBackend::new();
    let Golden { cfg, weights, .. } = golden();
    let tr = FineTuner::new(&be, &cfg, &weights, FineTuneTask::Pretrain, None, 0).unwrap();
    let batch = Batch { input_ids: vec![2, 10, 11, 3], token_type_ids: vec![0; 4], attention_mask: vec![1; 4], b: 1, t: 4 };
    let run = |mlm: &[i64], nsp: Option<&[u32]>| pollster::block_on(tr.pretrain_gradients(&be, &batch, mlm, nsp)).err().map(|e| e.to_string());
    assert!(run(&[-100, 10, -100, -100], Some(&[0])).is_none());
    assert!(run(&[-100, 480, -100, -100], Some(&[0])).unwrap().contains("outside the vocabulary"));
    assert!(run(&[-100; 4], Some(&[0])).is_none(), "nothing selected: NSP alone");
    assert!(run(&[-100, 10, -100, -100], None).is_none(), "the masked LM alone");
    assert!(run(&[-100, 10, -100, -100], Some(&[2])).unwrap().contains("0 (B follows A) or 1"));
    assert!(run(&[-100, 10], Some(&[0])).unwrap().contains("masked-LM labels for a batch"));
    let other = FineTuner::new(&be, &cfg, &weights, FineTuneTask::Embedding, None, 0).unwrap();
    let e = pollster::block_on(other.pretrain_gradients(&be, &batch, &[-100, 10, -100, -100], Some(&[0]))).unwrap_err();
    assert!(e.to_string().contains("not pre-training"), "{e}");
}

/// Pre-training rows go through the loop every trainer shares: padded batches of `RowTarget::Pretrain`, the
/// evaluation giving the golden's loss (MLM + NSP) and the two accuracies, and a few epochs lowering the loss.
#[test]
fn pretraining_rows_evaluate_and_train_through_the_loop() {
    use bertgpu::training::fit::checkpoint::{Checkpoints, NoStore};
    use bertgpu::training::fit::{FitOptions, Metrics, Progress};
    use bertgpu::training::rows::{self, RowTarget};
    let be = CpuBackend::new();
    let Golden { g, cfg, weights, batch, mlm, nsp } = golden();
    let (b, t) = (batch.b, batch.t);
    let targets = (0..b).map(|i| RowTarget::Pretrain { mlm: mlm[i * t..(i + 1) * t].to_vec(), nsp: Some(nsp[i]) });
    let rows = rows::rows_from_batch(&batch, targets);
    let mut tr = FineTuner::new(&be, &cfg, &weights, FineTuneTask::Pretrain, None, 0).unwrap();
    let e = pollster::block_on(rows::evaluate(&be, &tr, &rows, &[0, 1, 2], cfg.pad_token_id, 3, None, Metrics::default())).unwrap();
    let want = g["loss"].as_f64().unwrap();
    assert!((e.loss as f64 - want).abs() <= LOSS_RTOL * want, "evaluated loss {} vs PyTorch {want}", e.loss);
    assert!(e.nsp_accuracy.is_some() && (0.0..=1.0).contains(&e.accuracy));
    // Six copies of the batch, 12 epochs of 2 steps (batches of 3, in shuffled order): the loss falls.
    let many: Vec<_> = (0..6).flat_map(|_| rows.iter().cloned()).collect();
    let opts = FitOptions { epochs: 12, learning_rate: 2e-3, batch_size: 3, validation_split: 0.3, dropout: false, ..FitOptions::default() };
    let report = pollster::block_on(rows::fit(&be, &mut tr, &many, None, cfg.pad_token_id, &opts, Metrics::default(),
        &mut |_: Progress<'_>| {}, None::<&mut Checkpoints<NoStore>>)).unwrap();
    let (first, last) = (report.epochs[0].val_loss.unwrap(), report.epochs.last().unwrap().val_loss.unwrap());
    assert!(last < 0.5 * first, "validation loss {first} → {last}");
    assert!(report.epochs.iter().all(|e| e.val_nsp_accuracy.is_some()));
}

/// A step's pre-training metrics are those of the rows it trained on, as `pretrain_eval` gives them before the
/// update: with two micro-batches (of 7 and of 14 selected tokens), each head's loss their mean (as the step's loss
/// is), each accuracy right over all predictions, and `loss = mlm_loss + nsp_loss`. On the CPU the training forward
/// and the evaluation's are the same operations (no dropout here), so the losses agree to f32 rounding of the mean
/// (`STEP_LOSS_ULPS`); the counts, exactly.
#[test]
fn a_steps_metrics_are_those_of_its_micro_batches() {
    /// The mean of two f32 losses summed in f64 and rounded once, against the same done another way: ≤ 2 ulps.
    const STEP_LOSS_ULPS: f32 = 2.0 * f32::EPSILON;
    const STEPS: usize = 12;
    let be = CpuBackend::new();
    let Golden { cfg, weights, batch, mlm, nsp, .. } = golden();
    let t = batch.t;
    let part = |r: std::ops::Range<usize>| {
        let take = |v: &[u32]| v[r.start * t..r.end * t].to_vec();
        let b = Batch { input_ids: take(&batch.input_ids), token_type_ids: take(&batch.token_type_ids),
            attention_mask: take(&batch.attention_mask), b: r.len(), t };
        (b, mlm[r.start * t..r.end * t].to_vec(), nsp[r].to_vec())
    };
    let parts = [part(0..1), part(1..batch.b)];
    let mut tr = FineTuner::new(&be, &cfg, &weights, FineTuneTask::Pretrain, None, 0).unwrap();
    // A high learning rate, so that the predictions become right on the way (at the checkpoint's weights none is) and
    // the micro-batches' accuracies differ: a mean of their ratios, or one micro-batch's, would then be caught.
    let opt = StepOptions { learning_rate: 2e-2, ..StepOptions::default() };
    let close = |a: f32, b: f32| (a - b).abs() <= STEP_LOSS_ULPS * b.abs();
    let mut telling = 0;
    for step in 1..=STEPS {
        let evals: Vec<_> = parts.iter().map(|(b, m, n)| pollster::block_on(tr.pretrain_eval(&be, b, m, Some(n))).unwrap()).collect();
        for (b, m, n) in &parts {
            pollster::block_on(tr.accumulate(&be, b, &Targets::Pretrain { mlm: m, nsp: Some(n) })).unwrap();
        }
        let r = pollster::block_on(tr.apply(&be, &opt)).unwrap();
        let p = r.pretrain.expect("a pre-training step reports its metrics");
        let mean = |f: fn(&bertgpu::training::metrics::PretrainEval) -> f32| (f(&evals[0]) + f(&evals[1])) / 2.0;
        assert!(close(p.mlm_loss, mean(|e| e.mlm_loss)), "step {step}: {p:?} vs {evals:?}");
        assert!(close(p.nsp_loss.unwrap(), mean(|e| e.nsp_loss.unwrap())), "step {step}: {p:?} vs {evals:?}");
        let right = (evals[0].mlm_correct + evals[1].mlm_correct) as f32;
        assert_eq!((evals[0].mlm_count, evals[1].mlm_count), (7, 14));
        assert_eq!(p.mlm_accuracy, right / 21.0, "step {step}");
        assert_eq!(p.nsp_accuracy, Some((evals[0].nsp_correct + evals[1].nsp_correct) as f32 / 3.0), "step {step}");
        assert!(close(r.loss, p.mlm_loss + p.nsp_loss.unwrap()), "step {step}: {r:?}");
        let ratio = |e: &bertgpu::training::metrics::PretrainEval| e.mlm_correct as f32 / e.mlm_count as f32;
        telling += usize::from(ratio(&evals[0]) != ratio(&evals[1]));
    }
    assert!(telling >= 3, "only {telling} steps whose micro-batches' MLM accuracies differ");
    // The masked LM alone (no NSP labels): no NSP part.
    let (b, m, _) = &parts[1];
    let r = pollster::block_on(tr.step(&be, b, &Targets::Pretrain { mlm: m, nsp: None }, &opt)).unwrap();
    let p = r.pretrain.unwrap();
    assert_eq!((p.nsp_loss, p.nsp_accuracy, r.loss), (None, None, p.mlm_loss));
    // Fine-tuning's steps have none.
    let mut c = FineTuner::new(&be, &cfg, &weights, FineTuneTask::Sequence, Some(2), 0).unwrap();
    let r = pollster::block_on(c.step(&be, b, &Targets::Sequence(&[0, 1]), &opt)).unwrap();
    assert_eq!(r.pretrain, None);
}

/// A micro-batch that selected no token for the masked LM (likely for a few short rows at 15%) is no error: it adds
/// no loss and no gradient, and counts in the step's mean as a zero. Two micro-batches, one of them empty, give the
/// step half the gradient of the other alone, in either order (an empty first micro-batch must not drop the
/// second's gradients); a step of empty micro-batches without NSP labels updates nothing. Norms of the same
/// gradients summed in another order: within `NORM_RTOL`.
#[test]
fn a_micro_batch_that_selects_nothing_adds_nothing() {
    /// The same f32 gradients, halved and summed in another order: a few ulps of the norm.
    const NORM_RTOL: f32 = 1e-5;
    let be = CpuBackend::new();
    let Golden { cfg, weights, batch, mlm, .. } = golden();
    let none = vec![-100i64; mlm.len()];
    let opt = StepOptions { learning_rate: 1e-3, ..StepOptions::default() };
    let step = |parts: &[&[i64]]| {
        let mut tr = FineTuner::new(&be, &cfg, &weights, FineTuneTask::Pretrain, None, 0).unwrap();
        for m in parts {
            pollster::block_on(tr.accumulate(&be, &batch, &Targets::Pretrain { mlm: m, nsp: None })).unwrap();
        }
        let r = pollster::block_on(tr.apply(&be, &opt)).unwrap();
        (r, pollster::block_on(tr.read_trained(&be)).unwrap())
    };
    let (alone, _) = step(&[&mlm]);
    for parts in [[&mlm[..], &none[..]], [&none[..], &mlm[..]]] {
        let (r, _) = step(&parts);
        assert!((r.grad_norm - alone.grad_norm / 2.0).abs() <= NORM_RTOL * alone.grad_norm, "{r:?} vs {alone:?}");
        assert!((r.loss - alone.loss / 2.0).abs() <= NORM_RTOL * alone.loss, "{r:?} vs {alone:?}");
        let p = r.pretrain.unwrap();
        assert!(p.mlm_accuracy == alone.pretrain.unwrap().mlm_accuracy, "accuracy over the selected tokens: {p:?}");
    }
    let (r, trained) = step(&[&none, &none]);
    assert_eq!((r.loss, r.grad_norm), (0.0, 0.0));
    assert!(trained.is_empty(), "no parameter was updated");
}
