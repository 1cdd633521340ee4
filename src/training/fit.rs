//! The training loop, one for every trainer ([`Trainee`]): a seeded validation split, shuffled batches, gradient
//! accumulation, transformers' learning-rate schedules (warm-up, then linear decay to 0 or constant), a validation
//! pass after each epoch, early stopping, checkpoints and resume ([`super::checkpoint`]). Fine-tuning runs it on
//! tokenized rows ([`super::rows`]); `trainHead` on cached features (`super::fit_head`).

use super::ceil_fraction;
use super::checkpoint::{self, Checkpoints, LoopState, Store, TraineeState};
use super::finetune::{StepOptions, StepReport};
use super::head::SplitMix64;
use super::memory::TrainingMemory;
use super::metrics::QaReference;
use super::pretrain::PretrainStep;
use crate::backend::Backend;
use crate::{Error, Result};

pub use super::rows::{evaluate, export_folder, fit, rows_from_batch, Row, RowBatch, RowTarget};

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
    /// losses in [`EpochMetrics`]): cheap where the features are cached, as `trainHead`'s are.
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

/// After each optimiser step; pre-training's also with each head's loss and accuracy (flat: `mlm_loss`, ...;
/// absent in other tasks' and in checkpoints written before they were reported).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepProgress {
    pub epoch: usize,
    pub step: usize,
    pub total_steps: usize,
    pub loss: f32,
    pub learning_rate: f32,
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub pretrain: Option<PretrainStep>,
}

/// After each epoch: the mean training loss of its steps, and on the validation rows the loss and the accuracy
/// (classes of sequences, of labelled tokens, windows whose answer start and end both match, or anchors whose own
/// positive scores highest among their batch's), and the task's own metric where [`Metrics`] allows it:
/// entity-level F1 for token classification, SQuAD's exact match and F1 (over examples) for QA ([`super::metrics`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochMetrics {
    pub epoch: usize,
    pub train_loss: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_accuracy: Option<f32>,
    pub val_loss: Option<f32>,
    pub val_accuracy: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_f1: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_exact_match: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_nsp_accuracy: Option<f32>,
}

/// What the tasks' own metrics need besides the rows.
#[derive(Clone, Copy, Debug, Default)]
pub struct Metrics<'a> {
    /// Token classification: the class names (IOB tags), for entity-level F1.
    pub tags: Option<&'a [String]>,
    /// QA: the windows, contexts and gold answers, for exact match and F1.
    pub qa: Option<&'a QaReference>,
}

/// One evaluation: mean loss, accuracy, and the task's metric (see [`EpochMetrics`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Evaluation {
    pub loss: f32,
    pub accuracy: f32,
    pub f1: Option<f32>,
    pub exact_match: Option<f32>,
    /// Pre-training with the NSP head: the next-sentence predictions' accuracy (`accuracy` is the masked LM's).
    pub nsp_accuracy: Option<f32>,
}

/// What [`fit`] did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FitReport {
    pub steps: Vec<StepProgress>,
    pub epochs: Vec<EpochMetrics>,
    /// The epoch whose parameters the model ends with: the last, or with early stopping the best.
    pub best_epoch: usize,
}

/// Either progress event.
pub enum Progress<'a> {
    Step(&'a StepProgress),
    Epoch(&'a EpochMetrics),
    /// A checkpoint was saved, or the run resumed from one (see [`CheckpointEvent`]).
    Checkpoint(&'a CheckpointEvent),
    /// Before the first step: what training will hold besides the model ([`Trainee::memory`]).
    Memory(&'a TrainingMemory),
}

/// What happened to a checkpoint: `saved` (after `step` optimiser steps), `resumed` from it, or `skipped` as
/// damaged (`reason`) on the way to an intact one.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CheckpointEvent {
    pub checkpoint: &'static str,
    pub name: String,
    pub step: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `saved`: the bytes written (the three files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<usize>,
}

/// What [`fit`] calls as it goes. A closure `FnMut(Progress)` is the simplest one.
pub trait Hooks {
    /// After each optimiser step and each epoch. An error stops fitting and is returned (a cancel button).
    fn progress(&mut self, p: Progress<'_>) -> Result<()>;

    /// Awaited before each step: lets a browser's event loop run between steps (a click on a cancel button, the
    /// page's drawing), which a CPU step alone never gives it. An error stops fitting, as in [`Self::progress`].
    fn pause(&mut self) -> impl std::future::Future<Output = Result<()>> {
        std::future::ready(Ok(()))
    }

    /// Before each micro-batch is trained on: its rows, as indices into the rows being fitted, in the batch's order
    /// (`bertgpu pretrain --save-batches` writes them out, so that another framework can replay the same batches).
    fn batch(&mut self, _rows: &[usize]) -> Result<()> {
        Ok(())
    }
}

impl<F: FnMut(Progress<'_>)> Hooks for F {
    fn progress(&mut self, p: Progress<'_>) -> Result<()> {
        self(p);
        Ok(())
    }
}

fn check_options(o: &FitOptions, rows: usize) -> Result<()> {
    if o.accumulate == 0 {
        return Err(Error::Input("accumulation steps must be at least 1".into()));
    }
    if !(0.0..1.0).contains(&o.warmup) {
        return Err(Error::Input(format!("warm-up must be a fraction in [0, 1), got {}", o.warmup)));
    }
    super::check_schedule(o.epochs, o.batch_size, o.learning_rate, o.weight_decay, o.validation_split, rows)
}

/// What [`fit_loop`] trains: a model with its examples, addressed by row index. `FineTuner` on tokenized rows
/// ([`fit`]) and `trainHead`'s head on cached features (`super::fit_head`) are the two.
pub trait Trainee<B: Backend> {
    /// Adds the gradients of the rows `which` (one micro-batch) to the step being accumulated.
    fn accumulate(&mut self, be: &B, which: &[usize]) -> impl std::future::Future<Output = Result<()>>;
    /// The optimiser step with the accumulated gradients; its loss is the micro-batches' mean.
    fn apply(&mut self, be: &B, opt: &StepOptions) -> impl std::future::Future<Output = Result<StepReport>>;
    /// Loss, accuracy and the task's metric over the rows `which`, without dropout.
    fn evaluate(&self, be: &B, which: &[usize]) -> impl std::future::Future<Output = Result<Evaluation>>;
    /// The trained parameters on the host (early stopping keeps the best epoch's), and back.
    fn save(&self, be: &B) -> impl std::future::Future<Output = Result<Vec<Vec<f32>>>>;
    fn restore(&mut self, be: &B, saved: &[Vec<f32>]) -> Result<()>;
    /// Everything of the trainer a checkpoint must hold to continue exactly: trained parameters, optimiser state,
    /// counters. A trainer without checkpoints says so.
    fn state(&self, _be: &B) -> impl std::future::Future<Output = Result<TraineeState>> {
        std::future::ready(Err(Error::Input("this trainer does not save checkpoints".into())))
    }
    fn set_state(&mut self, _be: &B, _state: TraineeState) -> Result<()> {
        Err(Error::Input("this trainer does not resume from checkpoints".into()))
    }
    /// What a step holds besides the model, for the run's batch size and longest row; `None`: not stated.
    fn memory(&self) -> Option<TrainingMemory> {
        None
    }
}

/// The training loop of every trainer: the rows are split once by a seeded shuffle (the first ⌈split·N⌉ examples
/// validate, with all their rows), the training rows reshuffled every epoch and taken `batch_size` at a time,
/// `accumulate` micro-batches to an optimiser step, the learning rate as `opts.schedule` says, an evaluation after
/// each epoch, and early stopping if asked. With `checkpoints`, the whole state is saved every `every` steps and at
/// each epoch's end, and a resume continues from the newest intact checkpoint ([`checkpoint`]). A non-finite loss
/// stops with an error and the parameters of the last good step; so does an error from `hooks`.
pub async fn fit_loop<B: Backend, S: Store>(be: &B, trainee: &mut impl Trainee<B>, rows: usize, groups: Option<&[usize]>,
    opts: &FitOptions, hooks: &mut impl Hooks, mut checkpoints: Option<&mut Checkpoints<S>>) -> Result<FitReport> {
    let mut rng = SplitMix64::new(opts.seed);
    let (val, mut train) = split(rows, groups, opts, &mut rng)?;
    if opts.patience.is_some() && val.is_empty() {
        return Err(Error::Input("early stopping needs a validation split to watch: set one, or no patience".into()));
    }
    if checkpoints.as_ref().is_some_and(|c| c.every == 0) {
        return Err(Error::Input("checkpoints need an interval of at least 1 step".into()));
    }
    if let Some(m) = trainee.memory() {
        m.check_fits(be.memory_limit())?;
        hooks.progress(Progress::Memory(&m))?;
    }
    // One optimiser step per `accumulate` micro-batches of `batch_size` rows.
    let rows_per_step = opts.batch_size * opts.accumulate;
    let per_epoch = train.len().div_ceil(rows_per_step);
    let (epochs, total) = match opts.max_steps {
        Some(0) => return Err(Error::Input("max steps must be at least 1".into())),
        Some(m) => (m.div_ceil(per_epoch), m),
        None => (opts.epochs, per_epoch * opts.epochs),
    };
    let warm = ceil_fraction(opts.warmup, total);
    let mut report = FitReport::default();
    // The lowest validation loss so far, its epoch and (with early stopping) its parameters.
    let mut best: Option<(f32, usize, Vec<Vec<f32>>)> = None;
    let (mut first_epoch, mut resumed_in_epoch) = (1, None);
    if let Some(c) = checkpoints.as_deref_mut().filter(|c| c.resume) {
        if let Some(r) = checkpoint::resume(c).await? {
            for (name, why) in &r.skipped {
                let e = CheckpointEvent { checkpoint: "skipped", name: name.clone(), step: 0, reason: Some(why.clone()), bytes: None };
                hooks.progress(Progress::Checkpoint(&e))?;
            }
            let p = r.position;
            let mut sorted = p.order.clone();
            sorted.sort_unstable();
            let mut expected = train.clone();
            expected.sort_unstable();
            if sorted != expected {
                return Err(Error::Input(format!("checkpoint {}: its training rows are not this run's", r.name)));
            }
            trainee.set_state(be, r.trainee)?;
            (train, rng, report, first_epoch) = (p.order, SplitMix64::new(p.rng), p.report, p.epoch);
            best = p.best.zip(r.best).map(|((loss, epoch), params)| (loss, epoch, params));
            resumed_in_epoch = p.shuffled.then_some((p.in_epoch, p.losses));
            let e = CheckpointEvent { checkpoint: "resumed", name: r.name, step: report.steps.len(), reason: None, bytes: None };
            hooks.progress(Progress::Checkpoint(&e))?;
        }
    }
    for epoch in first_epoch..=epochs {
        let (done, mut losses) = match resumed_in_epoch.take() {
            Some(resumed) => resumed,
            None => {
                rng.shuffle(&mut train);
                (0, Vec::with_capacity(per_epoch))
            }
        };
        for (k, group) in train.chunks(rows_per_step).enumerate().skip(done) {
            let step = report.steps.len();
            if step == total {
                break; // max_steps reached part way through the epoch
            }
            // get_linear_schedule_with_warmup: s/warm while warming up, then (total − s)/(total − warm).
            let factor = match opts.schedule {
                _ if step < warm => step as f64 / warm.max(1) as f64,
                Schedule::Linear => (total - step) as f64 / (total - warm).max(1) as f64,
                Schedule::Constant => 1.0,
            };
            let lr = (opts.learning_rate as f64 * factor) as f32;
            if let Err(e) = hooks.pause().await {
                // Asked to stop, between two steps: with checkpoints, the run can go on from here (`resume`).
                let at = position(epoch, k, true, &train, &rng, &losses, &report, &best);
                return Err(checkpoint_on_stop(be, trainee, checkpoints, e, &at, best.as_ref().map(|b| &b.2[..])).await);
            }
            for chunk in group.chunks(opts.batch_size) {
                hooks.batch(chunk)?;
                trainee.accumulate(be, chunk).await?;
            }
            let step_opts = StepOptions {
                learning_rate: lr,
                weight_decay: opts.weight_decay,
                max_grad_norm: opts.max_grad_norm,
                ..StepOptions::default()
            };
            let r = trainee.apply(be, &step_opts).await?;
            losses.push(r.loss);
            let p = StepProgress { epoch, step: step + 1, total_steps: total, loss: r.loss, learning_rate: lr,
                pretrain: r.pretrain };
            report.steps.push(p.clone());
            if let Err(e) = hooks.progress(Progress::Step(&p)) {
                let at = position(epoch, k + 1, true, &train, &rng, &losses, &report, &best);
                return Err(checkpoint_on_stop(be, trainee, checkpoints, e, &at, best.as_ref().map(|b| &b.2[..])).await);
            }
            // Every `every` steps, but not on an epoch's last (its end saves, below).
            if let Some(c) = checkpoints.as_deref_mut().filter(|c| (step + 1) % c.every == 0 && k + 1 < per_epoch) {
                let at = position(epoch, k + 1, true, &train, &rng, &losses, &report, &best);
                save_checkpoint(be, trainee, c, hooks, &at, best.as_ref().map(|b| &b.2[..])).await?;
            }
        }
        let e = if val.is_empty() { None } else { Some(trainee.evaluate(be, &val).await?) };
        let (train_loss, train_accuracy) = if opts.evaluate_train {
            let t = trainee.evaluate(be, &train).await?;
            (t.loss, Some(t.accuracy))
        } else {
            (losses.iter().sum::<f32>() / losses.len().max(1) as f32, None)
        };
        let m = EpochMetrics {
            epoch,
            train_loss,
            train_accuracy,
            val_loss: e.map(|e| e.loss),
            val_accuracy: e.map(|e| e.accuracy),
            val_f1: e.and_then(|e| e.f1),
            val_exact_match: e.and_then(|e| e.exact_match),
            val_nsp_accuracy: e.and_then(|e| e.nsp_accuracy),
        };
        hooks.progress(Progress::Epoch(&m))?;
        report.epochs.push(m);
        report.best_epoch = epoch;
        if let (Some(patience), Some(e)) = (opts.patience, e) {
            if best.as_ref().is_none_or(|b| e.loss < b.0) {
                best = Some((e.loss, epoch, trainee.save(be).await?));
            } else if best.as_ref().is_some_and(|b| epoch - b.1 >= patience) {
                break;
            }
        }
        if let Some(c) = checkpoints.as_deref_mut() {
            let at = position(epoch + 1, 0, false, &train, &rng, &[], &report, &best);
            save_checkpoint(be, trainee, c, hooks, &at, best.as_ref().map(|b| &b.2[..])).await?;
        }
    }
    if let Some((_, epoch, saved)) = best.filter(|b| b.1 != report.best_epoch) {
        trainee.restore(be, &saved)?;
        report.best_epoch = epoch;
    }
    Ok(report)
}

/// A stop asked by the caller (`Error::Stopped`) of a checkpointed run: a checkpoint at `at`, so that `resume`
/// continues from there ("when asked"); the stop is returned, saying where the run can resume. Any other error as
/// it is.
async fn checkpoint_on_stop<B: Backend, S: Store>(be: &B, trainee: &impl Trainee<B>,
    checkpoints: Option<&mut Checkpoints<S>>, e: Error, at: &LoopState, best: Option<&[Vec<f32>]>) -> Error {
    let (Error::Stopped(why), Some(c)) = (&e, checkpoints) else { return e };
    let step = at.report.steps.len();
    let saved = match trainee.state(be).await {
        Ok(state) => checkpoint::save(c, step, at, &state, best).await,
        Err(err) => Err(err),
    };
    match saved {
        Ok((name, _)) => saved_stop(why, &name, step),
        Err(err) => Error::Stopped(format!("{why}; the checkpoint at step {step} could not be saved: {err}")),
    }
}

/// The stop `why` of a run whose checkpoint `name` holds it after `step`.
fn saved_stop(why: &str, name: &str, step: usize) -> Error {
    Error::Stopped(format!("{why}; saved as {name} after step {step}: resume to go on from there"))
}

/// Where the loop stands, as a checkpoint records it: `in_epoch` steps of `epoch` done, over the rows in `train`'s
/// order (`shuffled`: already this epoch's).
#[allow(clippy::too_many_arguments)]
fn position(epoch: usize, in_epoch: usize, shuffled: bool, train: &[usize], rng: &SplitMix64, losses: &[f32],
    report: &FitReport, best: &Option<(f32, usize, Vec<Vec<f32>>)>) -> LoopState {
    LoopState { epoch, in_epoch, order: train.to_vec(), shuffled, rng: rng.state(), losses: losses.to_vec(),
        report: report.clone(), best: best.as_ref().map(|b| (b.0, b.1)) }
}

async fn save_checkpoint<B: Backend, S: Store>(be: &B, trainee: &impl Trainee<B>, c: &mut Checkpoints<S>,
    hooks: &mut impl Hooks, at: &LoopState, best: Option<&[Vec<f32>]>) -> Result<()> {
    let step = at.report.steps.len();
    let (name, bytes) = checkpoint::save(c, step, at, &trainee.state(be).await?, best).await?;
    let event = CheckpointEvent { checkpoint: "saved", name: name.clone(), step, reason: None, bytes: Some(bytes) };
    // A stop asked while the hook heard of this checkpoint (Ctrl-C during an epoch's last step) is where it stops:
    // it says so, as a stop between steps does.
    hooks.progress(Progress::Checkpoint(&event)).map_err(|e| match e {
        Error::Stopped(why) => saved_stop(&why, &name, step),
        e => e,
    })
}

/// The validation and training row indices: examples (a row's group, or the row itself) shuffled, the first
/// ⌈split·examples⌉ held out with all their rows; the training rows shuffled.
fn split(rows: usize, groups: Option<&[usize]>, opts: &FitOptions, rng: &mut SplitMix64)
    -> Result<(Vec<usize>, Vec<usize>)> {
    if groups.is_some_and(|g| g.len() != rows) {
        return Err(Error::Input("one example index per row is needed to keep an example's rows together".into()));
    }
    let group = |i: usize| groups.map_or(i, |g| g[i]);
    let mut examples: Vec<usize> = (0..rows).map(group).collect();
    examples.sort_unstable();
    examples.dedup();
    check_options(opts, examples.len())?;
    rng.shuffle(&mut examples);
    let n_val = ceil_fraction(opts.validation_split, examples.len());
    let held: std::collections::HashSet<usize> = examples[..n_val].iter().copied().collect();
    let (val, mut train): (Vec<usize>, Vec<usize>) = (0..rows).partition(|&i| held.contains(&group(i)));
    rng.shuffle(&mut train);
    Ok((val, train))
}

#[cfg(test)]
mod tests;
