//! How the loop trains: [`FitOptions`] (epochs, batches, accumulation, the learning-rate [`Schedule`], the
//! validation split, early stopping), with the BERT paper's and pre-training's defaults, and their checks.

use crate::{Error, Result};

/// How to fine-tune.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct FitOptions {
    pub epochs: usize,
    pub learning_rate: f32,
    pub batch_size: usize,
    /// Micro-batches of `batch_size` rows whose mean gradient makes one optimiser step (transformers'
    /// `gradient_accumulation_steps`): a larger effective batch in the memory of a small one.
    pub accumulate: usize,
    /// Fraction of the steps over which the learning rate rises linearly from 0 (the BERT paper's 10%); it then
    /// falls linearly to 0 at the last step (`get_linear_schedule_with_warmup`).
    pub warmup: f32,
    pub weight_decay: f32,
    pub max_grad_norm: Option<f32>,
    /// Fraction of the rows held out and evaluated after each epoch, in [0, 1).
    pub validation_split: f32,
    pub seed: u64,
    /// Pad every batch to at least this many tokens. QA's loss takes its softmax over every position, padding
    /// included, so run_qa's default (windows padded to `max_length`) changes it; `None` pads to the longest row.
    pub pad_to: Option<usize>,
    /// Dropout with the checkpoint's probabilities in the training steps (as transformers' Trainer), masks seeded
    /// from `seed`; never in evaluation. `false`: none.
    pub dropout: bool,
    /// After the warm-up: fall linearly to 0 at the last step (transformers' "linear", the BERT paper's), or stay
    /// (`Constant`: "constant_with_warmup").
    pub schedule: Schedule,
    /// Early stopping: stop after this many epochs without a lower validation loss, and end with the parameters of
    /// the epoch that had the lowest (transformers' `EarlyStoppingCallback` with `load_best_model_at_end`). Needs a
    /// validation split; `None`: every epoch runs and the last one's parameters are kept.
    pub patience: Option<usize>,
    /// Stop after this many optimiser steps (the schedule ends there), running as many epochs as that takes
    /// (transformers' `max_steps`); `None`: `epochs` whole epochs.
    pub max_steps: Option<usize>,
    /// After each epoch, evaluate every training row as well (its loss and accuracy replace the mean of the steps'
    /// losses in [`super::EpochMetrics`]): cheap where the features are cached, as `trainHead`'s are.
    pub evaluate_train: bool,
}

/// How the learning rate moves after the warm-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum Schedule {
    #[default]
    Linear,
    Constant,
}

impl Default for FitOptions {
    /// The BERT paper's fine-tuning recipe, within its ranges: 3 epochs, learning rate 5e-5, batch 16, 10% warm-up,
    /// weight decay 0.01; gradients clipped at 1.0 as transformers does.
    fn default() -> Self {
        FitOptions {
            epochs: 3,
            learning_rate: 5e-5,
            batch_size: 16,
            accumulate: 1,
            warmup: 0.1,
            weight_decay: 0.01,
            max_grad_norm: Some(1.0),
            validation_split: 0.1,
            seed: 0,
            pad_to: None,
            dropout: true,
            schedule: Schedule::Linear,
            patience: None,
            max_steps: None,
            evaluate_train: false,
        }
    }
}

impl FitOptions {
    /// Pre-training's defaults, `bertgpu pretrain`'s and `bert.pretrain`'s: 1000 steps of 16 rows, learning rate 1e-4
    /// with 10% warm-up, weight decay 0.01, 5% of the rows held out, the checkpoint's dropout.
    pub fn pretraining() -> FitOptions {
        FitOptions { learning_rate: 1e-4, validation_split: 0.05, max_steps: Some(1000), ..FitOptions::default() }
    }
}

/// Refuses options the loop cannot run on `rows` examples.
pub(super) fn check_options(o: &FitOptions, rows: usize) -> Result<()> {
    if o.accumulate == 0 {
        return Err(Error::Input("accumulation steps must be at least 1".into()));
    }
    if !(0.0..1.0).contains(&o.warmup) {
        return Err(Error::Input(format!("warm-up must be a fraction in [0, 1), got {}", o.warmup)));
    }
    check_schedule(o.epochs, o.batch_size, o.learning_rate, o.weight_decay, o.validation_split, rows)
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
