//! The training loop, one for every trainer ([`Trainee`]): a seeded validation split, shuffled batches, gradient
//! accumulation, transformers' learning-rate schedules (warm-up, then linear decay to 0 or constant), a validation
//! pass after each epoch, early stopping, checkpoints and resume. Fine-tuning runs it on tokenized rows
//! ([`super::rows`]); `trainHead` on cached features (`super::fit_head`). It knows no model: a trainee steps, and
//! the loop decides when.
//!
//! Lowest first: [`memory`] (what a step holds besides the model), [`options`] ([`FitOptions`], the
//! [`Schedule`]), [`report`] (progress, metrics, [`Hooks`]), [`checkpoint`] (saving and resuming a run), [`run`]
//! ([`fit_loop`] and [`Trainee`]).

pub mod checkpoint;
pub mod memory;
pub mod options;
pub mod report;
pub mod run;

pub use options::{FitOptions, Schedule};
pub use report::{CheckpointEvent, EpochMetrics, Evaluation, FitReport, Hooks, Metrics, Progress, StepProgress, StepReport};
pub use run::{fit_loop, Trainee};

#[cfg(test)]
mod tests;
