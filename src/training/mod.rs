//! Training on the backend. The files, lowest first: each uses only files listed before it (tests/layout.rs checks
//! that no folder has a circle of imports).
//! - Small shared pieces: [`rng`] (the seeded PRNG of every draw), [`loss`] (cross-entropy over the rows with a
//!   target, the ignored label, argmax), [`optim`] (AdamW, owning its moments and step count, and the step's
//!   options: it knows no model), [`params`] (a trainable tensor and the gradient list), [`metrics`] (the tasks' own
//!   metrics: entity F1, SQuAD's, pre-training's heads'), [`init`] (a BERT from scratch, initialised as
//!   transformers does).
//! - [`fit`], the one loop of every trainer: its options and schedule, its report and hooks, checkpoints and resume,
//!   the memory a step holds; it trains any [`fit::Trainee`].
//! - The whole encoder fine-tuned on the BERT paper's shapes: [`lora`] (LoRA adapters: their forward and
//!   backward), [`encoder`] (every encoder parameter trainable, the backward through every layer); one file per
//!   objective, each its head's forward and backward, its loss and its accuracy: [`sequence`] (classification of
//!   texts and pairs), [`token`] (token classification), [`qa`] (extractive QA), [`embedding`] (sentence
//!   embeddings, MultipleNegativesRankingLoss), [`pretrain`] (masked LM and next-sentence prediction); then
//!   [`finetune`] (`FineTuner`: encoder, head and AdamW's state, the batch's checks, the objective's pass), [`step`]
//!   (one optimiser step: micro-batches accumulated, clipping, [`optim::AdamW`]; the trained state), [`lora_peft`]
//!   (LoRA on a `FineTuner` as peft does it: the adapters set, exported, merged).
//! - Their data and their runs: [`data`] (examples to batches, as transformers' example scripts make them),
//!   [`pretrain_data`] (a corpus to NSP pairs or segments, masked as the BERT paper does), [`rows`] (tokenized
//!   examples as the loop's trainee, evaluation, the Hugging Face folder), [`job`] (the CLI's and `fineTune`'s
//!   whole job).
//! - A classification head on the frozen encoder's pooled features (`trainHead`): [`head`] (the head, its forward
//!   and backward, its file) and here [`fit_head`], which trains one by the same loop ([`fit::fit_loop`]) on features
//!   computed once. `Model::train_head` (in `tasks`) computes them and calls it.
//!
//! One vocabulary for the objective from the CLI to the loss: a job's task (`job::JobTask`, named by the data it
//! takes: classify, pair, ner, qa, embed) gives one [`finetune::FineTuneTask`] (`JobTask::objective`): Sequence,
//! Token, Qa, Embedding, Pretrain; a row's target (`rows::RowTarget`), a batch's (`finetune::Targets`) and the
//! tuner's head carry the same five names.

pub mod data;
pub mod embedding;
pub mod encoder;
pub mod finetune;
pub mod fit;
pub mod init;
pub mod job;
pub mod lora;
pub mod lora_peft;
pub mod loss;
pub mod metrics;
pub mod modern_head;
pub mod optim;
pub mod params;
pub mod pretrain;
pub mod pretrain_data;
pub mod qa;
pub mod rng;
pub mod rows;
pub mod sequence;
pub mod step;
pub mod token;
pub mod head;

use crate::backend::Backend;
use crate::heads::Pooling;
use crate::activation::Activation;
use crate::{Error, Result};
use head::{HeadSpec, Trainer, TrainedHead};
use optim::AdamWOptions;
use rng::SplitMix64;
use fit::checkpoint::{Checkpoints, NoStore};
use fit::StepReport;
use optim::StepOptions;

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

/// Validates training input and options; returns the label set in class order.
pub(crate) fn check_training_input(examples: &[TrainExample], opts: &TrainOptions) -> Result<Vec<String>> {
    fit::options::check_schedule(opts.epochs, opts.batch_size, opts.learning_rate, opts.weight_decay, opts.validation_split,
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

/// `trainHead`'s head on its cached features `(N, H)`, trained by the loop every trainer shares ([`fit::fit_loop`]).
struct FeatureTrainee<B: Backend> {
    trainer: Trainer<B>,
    x: B::Tensor,
    y: Vec<u32>,
    /// The losses of the micro-batches of the step being accumulated.
    losses: Vec<f32>,
}

impl<B: Backend> FeatureTrainee<B> {
    fn rows(&self, be: &B, which: &[usize]) -> Result<(B::Tensor, Vec<u32>)> {
        let idx: Vec<u32> = which.iter().map(|&i| i as u32).collect();
        Ok((be.gather_rows(&self.x, &idx)?, which.iter().map(|&i| self.y[i]).collect()))
    }
}

impl<B: Backend> fit::Trainee<B> for FeatureTrainee<B> {
    async fn accumulate(&mut self, be: &B, which: &[usize]) -> Result<()> {
        let (x, y) = self.rows(be, which)?;
        let logits = self.trainer.accumulate(be, &x, &y)?;
        let (loss, _) = head::loss_and_accuracy(&be.read(&logits).await?, self.trainer.spec.labels.len(), &y);
        self.losses.push(loss);
        Ok(())
    }

    async fn apply(&mut self, be: &B, opt: &StepOptions) -> Result<StepReport> {
        let loss = self.losses.drain(..).sum::<f32>() / self.trainer.pending_batches().max(1) as f32;
        if !loss.is_finite() {
            return Err(Error::Input(format!("the loss ({loss}) is not finite: lower the learning rate")));
        }
        self.trainer.apply(be, opt.learning_rate)?;
        Ok(StepReport { loss, grad_norm: f32::NAN, pretrain: None })
    }

    async fn evaluate(&self, be: &B, which: &[usize]) -> Result<fit::Evaluation> {
        let (x, y) = self.rows(be, which)?;
        let logits = head::forward(be, &self.trainer.spec, &self.trainer.params, &x)?.logits;
        let (loss, accuracy) = head::loss_and_accuracy(&be.read(&logits).await?, self.trainer.spec.labels.len(), &y);
        Ok(fit::Evaluation { loss, accuracy, ..Default::default() })
    }

    async fn save(&self, be: &B) -> Result<Vec<Vec<f32>>> {
        self.trainer.read_params(be).await
    }

    fn restore(&mut self, be: &B, saved: &[Vec<f32>]) -> Result<()> {
        self.trainer.set_params(be, saved)
    }
}

/// Trains a classification head on `features` (one pooled vector per example, in order; the labels in class order
/// from [`check_training_input`]): the features are uploaded once, and the loop is fine-tuning's
/// ([`fit::fit_loop`]) with `trainHead`'s recipe: a constant learning rate, AdamW on every parameter, no clipping,
/// the training set's loss and accuracy after each epoch, and with a validation split early stopping after
/// `patience` epochs without a lower validation loss, ending with the best epoch's weights. Each step reads back
/// only its batch's logits (for the loss). Deterministic for a seed.
pub async fn fit_head<B: Backend>(be: &B, features: &[Vec<f32>], labels: Vec<String>, examples: &[TrainExample],
    opts: &TrainOptions, mut on_progress: impl FnMut(&EpochProgress)) -> Result<(TrainedHead<B>, TrainReport)> {
    let index: std::collections::HashMap<&str, u32> = labels.iter().enumerate().map(|(i, l)| (l.as_str(), i as u32)).collect();
    let y: Vec<u32> = examples.iter().map(|e| index[e.label.as_str()]).collect();
    let h = features.first().map_or(0, Vec::len);
    if features.len() != examples.len() || h == 0 || features.iter().any(|f| f.len() != h) {
        return Err(Error::Input(format!(
            "{} feature vectors for {} examples: every example needs one vector of the same non-zero width",
            features.len(),
            examples.len()
        )));
    }
    let x = be.input(&features.concat(), examples.len(), h)?; // (N, H)
    let spec = HeadSpec { input_size: h, hidden: opts.hidden.map(|d| (d, opts.activation)), labels: labels.clone(), pooling: opts.pooling };
    let init = spec.init(&mut SplitMix64::new(opts.seed));
    let opt = AdamWOptions { lr: opts.learning_rate, weight_decay: opts.weight_decay, ..AdamWOptions::default() };
    let mut trainee = FeatureTrainee { trainer: Trainer::new(be, spec.clone(), &init, opt)?, x, y, losses: Vec::new() };
    let fit_opts = fit::FitOptions {
        epochs: opts.epochs,
        learning_rate: opts.learning_rate,
        batch_size: opts.batch_size,
        accumulate: 1,
        warmup: 0.0,
        schedule: fit::Schedule::Constant,
        weight_decay: opts.weight_decay,
        max_grad_norm: None,
        validation_split: opts.validation_split,
        seed: opts.seed,
        pad_to: None,
        dropout: false,
        patience: (opts.validation_split > 0.0).then_some(opts.patience),
        max_steps: None,
        evaluate_train: true,
    };
    let mut history = Vec::new();
    let mut hooks = |p: fit::Progress<'_>| {
        if let fit::Progress::Epoch(m) = p {
            let e = EpochProgress {
                epoch: m.epoch,
                loss: m.train_loss,
                accuracy: m.train_accuracy.unwrap_or(f32::NAN),
                val_loss: m.val_loss,
                val_accuracy: m.val_accuracy,
            };
            on_progress(&e);
            history.push(e);
        }
    };
    let report = fit::fit_loop(be, &mut trainee, examples.len(), None, &fit_opts, &mut hooks, None::<&mut Checkpoints<NoStore>>)
        .await?;
    let host = trainee.trainer.read_params(be).await?;
    Ok((TrainedHead::from_host(be, spec, host)?, TrainReport { labels, best_epoch: report.best_epoch, history }))
}
