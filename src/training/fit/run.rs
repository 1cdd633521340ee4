//! The loop itself, [`fit_loop`], and what it trains, a [`Trainee`]: the split, the epochs and their batches,
//! the learning rate at each step, evaluation, early stopping, and checkpoints saved and resumed.

use super::checkpoint::{self, Checkpoints, LoopState, Store, TraineeState};
use super::memory::TrainingMemory;
use super::options::{ceil_fraction, check_options, FitOptions, Schedule};
use super::report::{CheckpointEvent, EpochMetrics, Evaluation, FitReport, Hooks, Progress, StepProgress, StepReport};
use crate::backend::Backend;
use crate::training::optim::StepOptions;
use crate::training::rng::SplitMix64;
use crate::{Error, Result};

/// What [`fit_loop`] trains: a model with its examples, addressed by row index. `FineTuner` on tokenized rows
/// ([`crate::training::rows::fit`]) and `trainHead`'s head on cached features (`super::fit_head`) are the two.
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
    /// Before epoch `epoch` (from 1; again for the epoch a resumed run continues): a trainee whose rows change by
    /// epoch (pre-training's dynamic masking) makes them here.
    fn begin_epoch(&mut self, _epoch: usize) -> Result<()> {
        Ok(())
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
        trainee.begin_epoch(epoch)?;
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
                hooks.batch(epoch, chunk)?;
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
pub(super) fn split(rows: usize, groups: Option<&[usize]>, opts: &FitOptions, rng: &mut SplitMix64)
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
