//! What the loop tells as it goes and returns: each step's and epoch's metrics ([`StepProgress`],
//! [`EpochMetrics`], [`FitReport`]), checkpoint events, and the [`Hooks`] that hear them; and what a trainee's step
//! and evaluation give back to the loop ([`StepReport`], [`Evaluation`]).

use super::memory::TrainingMemory;
use crate::training::metrics::{PretrainStep, QaReference};
use crate::Result;

/// What one step did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepReport {
    /// The batch's loss before the update.
    pub loss: f32,
    /// The gradients' global L2 norm before clipping.
    pub grad_norm: f32,
    /// Pre-training: each head's loss and accuracy on the step's micro-batches; `None` for other tasks.
    pub pretrain: Option<PretrainStep>,
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
/// entity-level F1 for token classification, SQuAD's exact match and F1 (over examples) for QA ([`crate::training::metrics`]).
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

/// What [`super::fit_loop`] did.
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
    /// Before the first step: what training will hold besides the model ([`super::Trainee::memory`]).
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

/// What [`super::fit_loop`] calls as it goes. A closure `FnMut(Progress)` is the simplest one.
pub trait Hooks {
    /// After each optimiser step and each epoch. An error stops fitting and is returned (a cancel button).
    fn progress(&mut self, p: Progress<'_>) -> Result<()>;

    /// Awaited before each step: lets a browser's event loop run between steps (a click on a cancel button, the
    /// page's drawing), which a CPU step alone never gives it. An error stops fitting, as in [`Self::progress`].
    fn pause(&mut self) -> impl std::future::Future<Output = Result<()>> {
        std::future::ready(Ok(()))
    }

    /// Before each micro-batch is trained on: its epoch (from 1) and rows, as indices into the rows being fitted, in
    /// the batch's order (`bertgpu pretrain --save-batches` writes them out, so that another framework can replay the
    /// same batches).
    fn batch(&mut self, _epoch: usize, _rows: &[usize]) -> Result<()> {
        Ok(())
    }
}

impl<F: FnMut(Progress<'_>)> Hooks for F {
    fn progress(&mut self, p: Progress<'_>) -> Result<()> {
        self(p);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_lines_carry_the_metrics_only_where_there_are_some() {
        let base = StepProgress { epoch: 1, step: 2, total_steps: 3, loss: 0.1, learning_rate: 1e-4, pretrain: None };
        // Fine-tuning's line, and a checkpoint's step written before the metrics were reported: as they were.
        let old = r#"{"epoch":1,"step":2,"total_steps":3,"loss":0.1,"learning_rate":0.0001}"#;
        assert_eq!(serde_json::to_string(&base).unwrap(), old);
        assert_eq!(serde_json::from_str::<StepProgress>(old).unwrap(), base);
        // Pre-training's, with and without NSP: flat keys, and back exactly (a resumed run's report).
        for nsp in [Some((0.69, 0.5)), None] {
            let p = StepProgress { pretrain: Some(PretrainStep { mlm_loss: 6.1, mlm_accuracy: 1.0 / 3.0,
                nsp_loss: nsp.map(|n| n.0), nsp_accuracy: nsp.map(|n| n.1) }), ..base.clone() };
            let line = serde_json::to_string(&p).unwrap();
            assert!(line.contains(r#""mlm_loss":6.1,"mlm_accuracy":0.33333334"#), "{line}");
            assert_eq!(line.contains("nsp_accuracy"), nsp.is_some(), "{line}");
            assert_eq!(serde_json::from_str::<StepProgress>(&line).unwrap(), p);
        }
    }
}
