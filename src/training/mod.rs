//! Training on the backend:
//! - fine-tuning the whole model on the BERT paper's shapes: [`encoder`] (every encoder parameter trainable, the
//!   backward through every layer), [`finetune`] (the task heads, their losses, one optimiser step), [`fit`] (the
//!   loop, the schedule, evaluation, the Hugging Face folder), [`data`] (examples to batches, as transformers'
//!   example scripts make them);
//! - a classification head on the frozen encoder's pooled features (`trainHead`): [`head`] (the head, its forward
//!   and backward, AdamW, the seeded PRNG, the head's file) and [`fit_head`], the loop that trains one with a seeded
//!   validation split and early stopping. `Model::train_head` (in `tasks`) computes the features and calls it.

pub mod data;
pub mod encoder;
pub mod finetune;
pub mod fit;
pub mod job;
pub mod lora;
pub mod metrics;
pub mod head;

use crate::backend::Backend;
use crate::heads::Pooling;
use crate::activation::Activation;
use crate::{Error, Result};
use head::{AdamW, HeadSpec, SplitMix64, Trainer, TrainedHead};

/// One labelled training example.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct TrainExample {
    pub text: String,
    pub label: String,
}

/// Options of [`Model::train_head`].
#[derive(Clone, Debug, PartialEq)]
pub struct TrainOptions {
    /// The label set in class order; by default the labels of the examples in order of first appearance.
    pub labels: Option<Vec<String>>,
    pub epochs: usize,
    pub learning_rate: f32,
    pub batch_size: usize,
    /// AdamW's decoupled weight decay (torch's default 0.01).
    pub weight_decay: f32,
    /// Fraction of the examples held out for early stopping, in [0, 1).
    pub validation_split: f32,
    pub seed: u64,
    /// One hidden layer of this width (activation [`Self::activation`]), or a single linear layer.
    pub hidden: Option<usize>,
    pub activation: Activation,
    pub pooling: Pooling,
    /// Epochs without a lower validation loss before stopping.
    pub patience: usize,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            labels: None,
            epochs: 20,
            learning_rate: 1e-3,
            batch_size: 16,
            weight_decay: 0.01,
            validation_split: 0.1,
            seed: 0,
            hidden: None,
            activation: Activation::Relu,
            pooling: Pooling::Mean,
            patience: 5,
        }
    }
}

/// One progress event, after each epoch: mean cross-entropy and accuracy of the head on the training and the
/// validation examples (`None` without a validation split).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EpochProgress {
    pub epoch: usize,
    pub loss: f32,
    pub accuracy: f32,
    pub val_loss: Option<f32>,
    pub val_accuracy: Option<f32>,
}

/// What [`Model::train_head`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainReport {
    pub labels: Vec<String>,
    /// The epoch whose weights were kept (the best validation loss, or the last epoch).
    pub best_epoch: usize,
    pub history: Vec<EpochProgress>,
}

/// ⌈fraction · n⌉ (held-out examples, warm-up steps), the fraction read as the decimal it was written as (0.3 as an
/// f32 is 0.300000012: 10 examples hold out 3, not 4).
pub(crate) fn ceil_fraction(fraction: f32, n: usize) -> usize {
    (fraction as f64 * n as f64 - 1e-6).ceil().max(0.0) as usize
}

/// The checks of every training loop's options (`trainHead`'s and fine-tuning's): at least one epoch and one
/// example per batch, a positive learning rate, a weight decay ≥ 0, and a validation split in [0, 1) that leaves
/// some of the `examples` to train on.
pub(crate) fn check_schedule(epochs: usize, batch_size: usize, learning_rate: f32, weight_decay: f32,
    validation_split: f32, examples: usize) -> Result<()> {
    if epochs == 0 {
        return Err(Error::Input("epochs must be at least 1".into()));
    }
    if batch_size == 0 {
        return Err(Error::Input("batch size must be at least 1".into()));
    }
    if !(learning_rate.is_finite() && learning_rate > 0.0) {
        return Err(Error::Input(format!("learning rate must be a positive number, got {learning_rate}")));
    }
    if !(weight_decay.is_finite() && weight_decay >= 0.0) {
        return Err(Error::Input(format!("weight decay must be ≥ 0, got {weight_decay}")));
    }
    if !(0.0..1.0).contains(&validation_split) {
        return Err(Error::Input(format!("validation split must be a fraction in [0, 1), got {validation_split}")));
    }
    if examples < 2 && validation_split > 0.0 || ceil_fraction(validation_split, examples) >= examples {
        return Err(Error::Input(format!(
            "{examples} examples leave none to train on after a validation split of {validation_split}; add examples \
             or lower the split"
        )));
    }
    Ok(())
}

/// Validates training input and options; returns the label set in class order.
pub(crate) fn check_training_input(examples: &[TrainExample], opts: &TrainOptions) -> Result<Vec<String>> {
    check_schedule(opts.epochs, opts.batch_size, opts.learning_rate, opts.weight_decay, opts.validation_split,
        examples.len())?;
    if opts.hidden == Some(0) {
        return Err(Error::Input("a hidden layer needs at least 1 unit (or leave `hidden` unset)".into()));
    }
    if let Some(i) = examples.iter().position(|e| e.text.trim().is_empty()) {
        return Err(Error::Input(format!("example {i} has an empty text; every example needs some text")));
    }
    if let Some(i) = examples.iter().position(|e| e.label.is_empty()) {
        return Err(Error::Input(format!("example {i} has an empty label")));
    }
    let labels = match &opts.labels {
        Some(given) => {
            let mut seen = std::collections::HashSet::new();
            if let Some(d) = given.iter().find(|l| !seen.insert(l.as_str())) {
                return Err(Error::Input(format!("label `{d}` is listed twice in `labels`")));
            }
            if let Some((i, e)) = examples.iter().enumerate().find(|(_, e)| !seen.contains(e.label.as_str())) {
                return Err(Error::Input(format!(
                    "example {i} has label `{}`, which is not in the given `labels` {given:?}", e.label
                )));
            }
            given.clone()
        }
        None => {
            let mut out: Vec<String> = Vec::new();
            for e in examples {
                if !out.contains(&e.label) {
                    out.push(e.label.clone());
                }
            }
            out
        }
    };
    if labels.len() < 2 {
        return Err(Error::Input(format!(
            "a classifier needs at least 2 labels, the examples have {}: {labels:?}; add examples of another label",
            labels.len()
        )));
    }
    Ok(labels)
}

/// Trains a classification head on `features` (one pooled vector per example, in order; the labels in class order
/// from [`check_training_input`]). Features are uploaded once, and every step (forward, backward, AdamW) runs on
/// the backend; only the per-epoch evaluation logits are read back. Deterministic for a seed. With a validation
/// split, training stops after `patience` epochs without a lower validation loss and the best epoch's weights are
/// kept.
pub async fn fit_head<B: Backend>(be: &B, features: &[Vec<f32>], labels: Vec<String>, examples: &[TrainExample],
    opts: &TrainOptions, mut on_progress: impl FnMut(&EpochProgress)) -> Result<(TrainedHead<B>, TrainReport)> {
        let index: std::collections::HashMap<&str, u32> =
            labels.iter().enumerate().map(|(i, l)| (l.as_str(), i as u32)).collect();
        let y: Vec<u32> = examples.iter().map(|e| index[e.label.as_str()]).collect();

        // Features once: (N, H) on the device.
        let h = features.first().map_or(0, Vec::len);
        if features.len() != examples.len() || h == 0 || features.iter().any(|f| f.len() != h) {
            return Err(Error::Input(format!(
                "{} feature vectors for {} examples: every example needs one vector of the same non-zero width",
                features.len(),
                examples.len()
            )));
        }
        let flat: Vec<f32> = features.concat();
        let all = be.input(&flat, examples.len(), h)?; // (N, H)

        // Seeded split: one shuffle of the example order, the first ⌈split·N⌉ go to validation.
        let mut rng = SplitMix64::new(opts.seed);
        let mut order: Vec<usize> = (0..examples.len()).collect();
        rng.shuffle(&mut order);
        let n_val = ceil_fraction(opts.validation_split, examples.len()).min(examples.len() - 1);
        let (val_idx, train_idx) = order.split_at(n_val);
        let rows = |idx: &[usize]| idx.iter().map(|&i| i as u32).collect::<Vec<u32>>();
        let train_x = be.gather_rows(&all, &rows(train_idx))?; // (N_train, H)
        let train_y: Vec<u32> = train_idx.iter().map(|&i| y[i]).collect();
        let val_x = if n_val > 0 { Some(be.gather_rows(&all, &rows(val_idx))?) } else { None }; // (N_val, H)
        let val_y: Vec<u32> = val_idx.iter().map(|&i| y[i]).collect();

        let spec = HeadSpec {
            input_size: h,
            hidden: opts.hidden.map(|d| (d, opts.activation)),
            labels: labels.clone(),
            pooling: opts.pooling,
        };
        let init = spec.init(&mut rng);
        let opt = AdamW { lr: opts.learning_rate, weight_decay: opts.weight_decay, ..AdamW::default() };
        let mut tr = Trainer::new(be, spec.clone(), &init, opt)?;
        let c = labels.len();
        let mut history = Vec::new();
        // The best epoch's parameters, copied to the host (a few KB) so later steps cannot touch them.
        let mut best: Option<(f32, usize, Vec<Vec<f32>>)> = None;
        let mut local: Vec<usize> = (0..train_idx.len()).collect();
        for epoch in 1..=opts.epochs {
            rng.shuffle(&mut local);
            for chunk in local.chunks(opts.batch_size) {
                let xb = be.gather_rows(&train_x, &rows(chunk))?; // (b, H)
                let yb: Vec<u32> = chunk.iter().map(|&i| train_y[i]).collect();
                tr.step(be, &xb, &yb)?;
            }
            let eval = |x: &B::Tensor| head::forward(be, &spec, &tr.params, x).map(|a| a.logits);
            let (loss, accuracy) = head::loss_and_accuracy(&be.read(&eval(&train_x)?).await?, c, &train_y);
            let (val_loss, val_accuracy) = match &val_x {
                Some(vx) => {
                    let (l, a) = head::loss_and_accuracy(&be.read(&eval(vx)?).await?, c, &val_y);
                    (Some(l), Some(a))
                }
                None => (None, None),
            };
            let p = EpochProgress { epoch, loss, accuracy, val_loss, val_accuracy };
            on_progress(&p);
            history.push(p);
            if let Some(vl) = val_loss {
                if best.as_ref().is_none_or(|b| vl < b.0) {
                    let mut host = Vec::with_capacity(tr.params.len());
                    for p in &tr.params {
                        host.push(be.read(p).await?);
                    }
                    best = Some((vl, epoch, host));
                } else if best.as_ref().is_some_and(|b| epoch - b.1 >= opts.patience) {
                    break;
                }
            }
        }
        let (best_epoch, host) = match best {
            Some((_, e, host)) => (e, host),
            None => {
                let mut host = Vec::with_capacity(tr.params.len());
                for p in &tr.params {
                    host.push(be.read(p).await?);
                }
                (history.len(), host)
            }
        };
        Ok((TrainedHead::from_host(be, spec, host)?, TrainReport { labels, best_epoch, history }))
}
