//! The training loop, one for every trainer ([`Trainee`]): a seeded validation split, shuffled batches, gradient
//! accumulation, transformers' learning-rate schedules (warm-up, then linear decay to 0 or constant), a validation
//! pass after each epoch, early stopping. Fine-tuning runs it on examples as rows, padded per batch to their longest
//! ([`fit`]), and ends with the model as a Hugging Face folder; `trainHead` runs it on cached features.

use std::collections::BTreeMap;

use super::finetune::{FineTuneTask, FineTuner, StepOptions, StepReport, Targets, IGNORE};
use super::encoder::DropoutOptions;
use super::head::{argmax, SplitMix64};
use super::ceil_fraction;
use super::metrics::{self, QaReference};
use crate::backend::Backend;
use crate::tokenizer::Batch;
use crate::weights::safetensors::{write_f32, F32Tensor};
use crate::{Error, Result};

/// What one example should predict.
#[derive(Clone, Debug, PartialEq)]
pub enum RowTarget {
    /// A class (sequence classification).
    Class(u32),
    /// A class per token, [`IGNORE`] where no loss is taken (token classification).
    Tokens(Vec<i64>),
    /// The answer's start and end token (QA).
    Span(u32, u32),
    /// The tokens of the positive text paired with this anchor (embedding fine-tuning; the other rows' positives
    /// in the batch are the negatives).
    Positive { input_ids: Vec<u32>, token_type_ids: Vec<u32> },
}

/// One tokenized example, unpadded.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub input_ids: Vec<u32>,
    pub token_type_ids: Vec<u32>,
    pub target: RowTarget,
}

/// The rows of a padded batch (padding dropped by its attention mask) with one target each.
pub fn rows_from_batch(batch: &Batch, targets: impl IntoIterator<Item = RowTarget>) -> Vec<Row> {
    targets
        .into_iter()
        .enumerate()
        .take(batch.b)
        .map(|(r, target)| {
            let span = r * batch.t..(r + 1) * batch.t;
            let len = batch.attention_mask[span.clone()].iter().filter(|&&m| m != 0).count();
            let target = match target {
                RowTarget::Tokens(mut t) => {
                    t.truncate(len);
                    RowTarget::Tokens(t)
                }
                other => other,
            };
            Row {
                input_ids: batch.input_ids[span.start..span.start + len].to_vec(),
                token_type_ids: batch.token_type_ids[span.start..span.start + len].to_vec(),
                target,
            }
        })
        .collect()
}

/// The batch of `rows` padded to the longest (pad id `pad`), and its targets.
pub struct RowBatch {
    pub batch: Batch,
    /// The positives of embedding pairs, padded as a batch of their own.
    positives: Option<Batch>,
    classes: Vec<u32>,
    tokens: Vec<i64>,
    start: Vec<u32>,
    end: Vec<u32>,
}

impl RowBatch {
    /// Padded to the longest row, and to at least `min_t` tokens.
    pub fn new(rows: &[&Row], pad: u32, min_t: Option<usize>) -> Result<RowBatch> {
        let t = rows.iter().map(|r| r.input_ids.len()).max().unwrap_or(0).max(min_t.unwrap_or(0));
        if rows.is_empty() || t == 0 {
            return Err(Error::Input("an empty batch cannot be trained on".into()));
        }
        let mut batch = Batch { b: rows.len(), t, ..Default::default() };
        let positives = rows
            .iter()
            .map(|r| match &r.target {
                RowTarget::Positive { input_ids, token_type_ids } => Some(Row {
                    input_ids: input_ids.clone(),
                    token_type_ids: token_type_ids.clone(),
                    target: RowTarget::Class(0),
                }),
                _ => None,
            })
            .collect::<Option<Vec<Row>>>();
        let positives = match positives {
            Some(p) if !p.is_empty() => Some(RowBatch::new(&p.iter().collect::<Vec<_>>(), pad, None)?.batch),
            _ => None,
        };
        let (mut classes, mut tokens, mut start, mut end) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in rows {
            let n = r.input_ids.len();
            batch.input_ids.extend(r.input_ids.iter().copied().chain(std::iter::repeat_n(pad, t - n)));
            batch.token_type_ids.extend(r.token_type_ids.iter().copied().chain(std::iter::repeat_n(0, t - n)));
            batch.attention_mask.extend(std::iter::repeat_n(1, n).chain(std::iter::repeat_n(0, t - n)));
            match &r.target {
                RowTarget::Class(c) => classes.push(*c),
                RowTarget::Tokens(l) => tokens.extend(l.iter().copied().chain(std::iter::repeat_n(IGNORE, t - l.len()))),
                RowTarget::Span(s, e) => {
                    start.push(*s);
                    end.push(*e);
                }
                RowTarget::Positive { .. } => {}
            }
        }
        Ok(RowBatch { batch, positives, classes, tokens, start, end })
    }

    pub fn targets(&self) -> Targets<'_> {
        if let Some(positives) = &self.positives {
            Targets::Pairs { positives }
        } else if !self.tokens.is_empty() {
            Targets::Token(&self.tokens)
        } else if !self.start.is_empty() {
            Targets::Spans { start: &self.start, end: &self.end }
        } else {
            Targets::Sequence(&self.classes)
        }
    }
}

/// How to fine-tune.
#[derive(Clone, Copy, Debug, PartialEq)]
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
    /// After each epoch, evaluate every training row as well (its loss and accuracy replace the mean of the steps'
    /// losses in [`EpochMetrics`]): cheap where the features are cached, as `trainHead`'s are.
    pub evaluate_train: bool,
}

/// How the learning rate moves after the warm-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
            evaluate_train: false,
        }
    }
}

/// After each optimiser step.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StepProgress {
    pub epoch: usize,
    pub step: usize,
    pub total_steps: usize,
    pub loss: f32,
    pub learning_rate: f32,
}

/// After each epoch: the mean training loss of its steps, and on the validation rows the loss and the accuracy
/// (classes of sequences, of labelled tokens, windows whose answer start and end both match, or anchors whose own
/// positive scores highest among their batch's), and the task's own metric where [`Metrics`] allows it:
/// entity-level F1 for token classification, SQuAD's exact match and F1 (over examples) for QA ([`super::metrics`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
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
}

/// What [`fit`] did.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
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

/// What [`fit_loop`] trains: a model with its examples, addressed by row index. [`FineTuner`] on tokenized rows
/// ([`fit`]) and `trainHead`'s head on cached features (`super::fit_head`) are the two.
pub trait Trainee<B: Backend> {
    /// Adds the gradients of the rows `which` (one micro-batch) to the step being accumulated; returns their loss.
    fn accumulate(&mut self, be: &B, which: &[usize]) -> impl std::future::Future<Output = Result<f32>>;
    /// The optimiser step with the accumulated gradients; its loss is the micro-batches' mean.
    fn apply(&mut self, be: &B, opt: &StepOptions) -> impl std::future::Future<Output = Result<StepReport>>;
    /// Loss, accuracy and the task's metric over the rows `which`, without dropout.
    fn evaluate(&self, be: &B, which: &[usize]) -> impl std::future::Future<Output = Result<Evaluation>>;
    /// The trained parameters on the host (early stopping keeps the best epoch's), and back.
    fn save(&self, be: &B) -> impl std::future::Future<Output = Result<Vec<Vec<f32>>>>;
    fn restore(&mut self, be: &B, saved: &[Vec<f32>]) -> Result<()>;
}

/// [`FineTuner`] on tokenized rows, batched as [`RowBatch`] pads them.
struct RowTrainee<'a, B: Backend> {
    tuner: &'a mut FineTuner<B>,
    rows: &'a [Row],
    pad: u32,
    opts: &'a FitOptions,
    metrics: Metrics<'a>,
}

impl<B: Backend> Trainee<B> for RowTrainee<'_, B> {
    async fn accumulate(&mut self, be: &B, which: &[usize]) -> Result<f32> {
        let batch = RowBatch::new(&which.iter().map(|&i| &self.rows[i]).collect::<Vec<_>>(), self.pad, self.opts.pad_to)?;
        self.tuner.accumulate(be, &batch.batch, &batch.targets()).await
    }

    async fn apply(&mut self, be: &B, opt: &StepOptions) -> Result<StepReport> {
        self.tuner.apply(be, opt).await
    }

    async fn evaluate(&self, be: &B, which: &[usize]) -> Result<Evaluation> {
        evaluate(be, self.tuner, self.rows, which, self.pad, self.opts.batch_size, self.opts.pad_to, self.metrics).await
    }

    async fn save(&self, be: &B) -> Result<Vec<Vec<f32>>> {
        self.tuner.read_trained(be).await
    }

    fn restore(&mut self, be: &B, saved: &[Vec<f32>]) -> Result<()> {
        self.tuner.set_trained(be, saved)
    }
}

/// Fine-tunes `tuner` on `rows` ([`fit_loop`]). `groups[i]` names the example row `i` comes from (a long QA
/// context gives several windows): an example's rows all fall on the same side of the split, so that validation
/// never sees a window of a context trained on. `None`: one example per row.
#[allow(clippy::too_many_arguments)]
pub async fn fit<B: Backend>(be: &B, tuner: &mut FineTuner<B>, rows: &[Row], groups: Option<&[usize]>, pad: u32,
    opts: &FitOptions, metrics: Metrics<'_>, hooks: &mut impl Hooks) -> Result<FitReport> {
    tuner.set_dropout(opts.dropout.then(|| DropoutOptions::of_config(&tuner.encoder.config, opts.seed)))?;
    let mut trainee = RowTrainee { tuner, rows, pad, opts, metrics };
    fit_loop(be, &mut trainee, rows.len(), groups, opts, hooks).await
}

/// The training loop of every trainer: the rows are split once by a seeded shuffle (the first ⌈split·N⌉ examples
/// validate, with all their rows), the training rows reshuffled every epoch and taken `batch_size` at a time,
/// `accumulate` micro-batches to an optimiser step, the learning rate as `opts.schedule` says, an evaluation after
/// each epoch, and early stopping if asked. A non-finite loss stops with an error and the parameters of the last
/// good step; so does an error from `hooks`.
pub async fn fit_loop<B: Backend>(be: &B, trainee: &mut impl Trainee<B>, rows: usize, groups: Option<&[usize]>,
    opts: &FitOptions, hooks: &mut impl Hooks) -> Result<FitReport> {
    let mut rng = SplitMix64::new(opts.seed);
    let (val, mut train) = split(rows, groups, opts, &mut rng)?;
    if opts.patience.is_some() && val.is_empty() {
        return Err(Error::Input("early stopping needs a validation split to watch: set one, or no patience".into()));
    }
    // One optimiser step per `accumulate` micro-batches of `batch_size` rows.
    let per_epoch = train.len().div_ceil(opts.batch_size).div_ceil(opts.accumulate);
    let total = per_epoch * opts.epochs;
    let warm = ceil_fraction(opts.warmup, total);
    let mut report = FitReport { steps: Vec::new(), epochs: Vec::new(), best_epoch: 0 };
    // The lowest validation loss so far, its epoch and (with early stopping) its parameters.
    let mut best: Option<(f32, usize, Vec<Vec<f32>>)> = None;
    for epoch in 1..=opts.epochs {
        rng.shuffle(&mut train);
        let mut losses = Vec::with_capacity(per_epoch);
        for group in train.chunks(opts.batch_size * opts.accumulate) {
            let step = report.steps.len();
            // get_linear_schedule_with_warmup: s/warm while warming up, then (total − s)/(total − warm).
            let factor = match opts.schedule {
                _ if step < warm => step as f64 / warm.max(1) as f64,
                Schedule::Linear => (total - step) as f64 / (total - warm).max(1) as f64,
                Schedule::Constant => 1.0,
            };
            let lr = (opts.learning_rate as f64 * factor) as f32;
            hooks.pause().await?;
            for chunk in group.chunks(opts.batch_size) {
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
            let p = StepProgress { epoch, step: step + 1, total_steps: total, loss: r.loss, learning_rate: lr };
            hooks.progress(Progress::Step(&p))?;
            report.steps.push(p);
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
    }
    if let Some((_, epoch, saved)) = best.filter(|b| b.1 != report.best_epoch) {
        trainee.restore(be, &saved)?;
        report.best_epoch = epoch;
    }
    Ok(report)
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

/// Mean loss (weighted by batch rows), accuracy and the task's metric over the rows `which` of `rows`.
#[allow(clippy::too_many_arguments)]
pub async fn evaluate<B: Backend>(be: &B, tuner: &FineTuner<B>, rows: &[Row], which: &[usize], pad: u32,
    batch_size: usize, pad_to: Option<usize>, metrics: Metrics<'_>) -> Result<Evaluation> {
    let (mut loss, mut weight, mut right, mut count) = (0f64, 0usize, 0usize, 0usize);
    let (mut gold_tags, mut pred_tags) = (Vec::new(), Vec::new());
    let mut spans: Vec<Vec<f32>> = Vec::new();
    for chunk in which.chunks(batch_size.max(1)) {
        let chunk_rows: Vec<&Row> = chunk.iter().map(|&i| &rows[i]).collect();
        let b = RowBatch::new(&chunk_rows, pad, pad_to)?;
        let targets = b.targets();
        if let Targets::Pairs { positives } = targets {
            let (l, r) = tuner.embedding_eval(be, &b.batch, positives).await?;
            loss += l as f64 * chunk.len() as f64;
            weight += chunk.len();
            right += r;
            count += chunk.len();
            continue;
        }
        let logits = be.read(&tuner.logits(be, &b.batch)?).await?;
        let n = match targets {
            Targets::Token(y) => y.iter().filter(|&&l| l != IGNORE).count(),
            _ => chunk.len(),
        };
        loss += tuner.loss(&logits, &b.batch, &targets) as f64 * n as f64;
        weight += n;
        let (r, c) = tuner.correct(&logits, &b.batch, &targets);
        right += r;
        count += c;
        let t = b.batch.t;
        match (targets, metrics.tags, metrics.qa) {
            (Targets::Token(y), Some(tags), _) => {
                let classes = tags.len();
                for (row, rl) in chunk_rows.iter().enumerate() {
                    let (mut g, mut p) = (Vec::new(), Vec::new());
                    for i in (0..rl.input_ids.len()).filter(|&i| y[row * t + i] != IGNORE) {
                        let at = (row * t + i) * classes;
                        g.push(tags[y[row * t + i] as usize].as_str());
                        p.push(tags[argmax(&logits[at..at + classes])].as_str());
                    }
                    gold_tags.push(g);
                    pred_tags.push(p);
                }
            }
            (Targets::Spans { .. }, _, Some(_)) => {
                for (row, rl) in chunk_rows.iter().enumerate() {
                    spans.push(logits[row * t * 2..(row * t + rl.input_ids.len()) * 2].to_vec());
                }
            }
            _ => {}
        }
    }
    let f1 = (!gold_tags.is_empty()).then(|| metrics::entity_f1(&gold_tags, &pred_tags));
    let (exact_match, qa_f1) = match metrics.qa {
        Some(q) if !spans.is_empty() => {
            let (em, f1) = q.scores(which, &spans)?;
            (Some(em), Some(f1))
        }
        _ => (None, None),
    };
    Ok(Evaluation {
        loss: (loss / weight.max(1) as f64) as f32,
        accuracy: right as f32 / count.max(1) as f32,
        f1: f1.or(qa_f1),
        exact_match,
    })
}

/// The fine-tuned model as the files of a Hugging Face folder: `config.json` (the original's, with `architectures`
/// and, for classifiers, `id2label` / `label2id` set) and `model.safetensors` (f32, transformers' names; LoRA
/// adapters merged into their weights). The
/// tokenizer files are the original folder's, unchanged.
pub async fn export_folder<B: Backend>(be: &B, tuner: &FineTuner<B>, original_config: &serde_json::Value,
    labels: Option<&[String]>) -> Result<(String, Vec<u8>)> {
    let mut cfg = original_config.clone();
    let obj = cfg.as_object_mut().ok_or_else(|| Error::Config("config.json is not a JSON object".into()))?;
    let arch = match tuner.task() {
        FineTuneTask::Sequence => "BertForSequenceClassification",
        FineTuneTask::Token => "BertForTokenClassification",
        FineTuneTask::QuestionAnswering => "BertForQuestionAnswering",
        FineTuneTask::Embedding => "BertModel",
    };
    // A bare encoder is stored as BertModel names it (no `bert.` prefix), as sentence-transformers' folders are.
    let bare = tuner.task() == FineTuneTask::Embedding;
    obj.insert("architectures".into(), serde_json::json!([arch]));
    if let Some(labels) = labels {
        let id2label: BTreeMap<String, &str> = labels.iter().enumerate().map(|(i, l)| (i.to_string(), l.as_str())).collect();
        let label2id: BTreeMap<&str, usize> = labels.iter().enumerate().map(|(i, l)| (l.as_str(), i)).collect();
        obj.insert("id2label".into(), serde_json::json!(id2label));
        obj.insert("label2id".into(), serde_json::json!(label2id));
    }
    let named = super::lora::merged(be, tuner).await?; // LoRA adapters folded in, if any
    let shapes = tuner.shapes();
    let tensors: Vec<F32Tensor<'_>> = named
        .iter()
        .map(|(name, values)| F32Tensor {
            name: if bare { name.strip_prefix("bert.").unwrap_or(name).to_string() } else { name.clone() },
            shape: shapes[name].clone(),
            values,
        })
        .collect();
    let mut meta = BTreeMap::new();
    meta.insert("format", "pt".to_string());
    Ok((serde_json::to_string_pretty(&cfg)? + "\n", write_f32(&tensors, &meta)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;
    use std::cell::Cell;

    /// A trainee whose one "parameter" is the number of steps taken and whose validation loss after each epoch is
    /// scripted: what the loop does with them (schedule, batches, early stopping) is what these tests check.
    struct Scripted {
        steps: usize,
        val_losses: Vec<f32>,
        evaluations: Cell<usize>,
        lrs: Vec<f32>,
        batches: Vec<usize>,
    }

    impl Trainee<CpuBackend> for Scripted {
        async fn accumulate(&mut self, _: &CpuBackend, which: &[usize]) -> Result<f32> {
            self.batches.push(which.len());
            Ok(1.0)
        }
        async fn apply(&mut self, _: &CpuBackend, opt: &StepOptions) -> Result<StepReport> {
            self.steps += 1;
            self.lrs.push(opt.learning_rate);
            Ok(StepReport { loss: 1.0, grad_norm: 0.0 })
        }
        async fn evaluate(&self, _: &CpuBackend, _: &[usize]) -> Result<Evaluation> {
            let epoch = self.evaluations.replace(self.evaluations.get() + 1);
            Ok(Evaluation { loss: self.val_losses[epoch], ..Default::default() })
        }
        async fn save(&self, _: &CpuBackend) -> Result<Vec<Vec<f32>>> {
            Ok(vec![vec![self.steps as f32]])
        }
        fn restore(&mut self, _: &CpuBackend, saved: &[Vec<f32>]) -> Result<()> {
            self.steps = saved[0][0] as usize;
            Ok(())
        }
    }

    fn run(opts: &FitOptions, val_losses: &[f32], rows: usize) -> (Scripted, Result<FitReport>) {
        let mut t = Scripted { steps: 0, val_losses: val_losses.to_vec(), evaluations: Cell::new(0), lrs: Vec::new(), batches: Vec::new() };
        let r = pollster::block_on(fit_loop(&CpuBackend::new(), &mut t, rows, None, opts, &mut |_: Progress<'_>| {}));
        (t, r)
    }

    #[test]
    fn schedules_warm_up_then_decay_or_stay() {
        // 40 rows, 10 validate: 30 train in micro-batches of 4, 2 to a step → 4 steps an epoch (the last of 6 rows).
        let base = FitOptions { epochs: 2, learning_rate: 1.0, batch_size: 4, accumulate: 2, warmup: 0.25,
            validation_split: 0.25, ..FitOptions::default() };
        let (t, r) = run(&base, &[1.0; 2], 40);
        let r = r.unwrap();
        assert_eq!(t.batches, [4, 4, 4, 4, 4, 4, 4, 2].repeat(2));
        // 8 steps, 2 warm: 0, 1/2, then (8 − s)/6 for s = 2..7.
        let want = [0.0, 0.5, 1.0, 5.0 / 6.0, 4.0 / 6.0, 0.5, 2.0 / 6.0, 1.0 / 6.0];
        assert!(t.lrs.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6), "{:?}", t.lrs);
        assert_eq!((r.steps.len(), r.epochs.len(), r.best_epoch), (8, 2, 2));
        let (t, _) = run(&FitOptions { schedule: Schedule::Constant, ..base }, &[1.0; 2], 40);
        assert_eq!(t.lrs, [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn early_stopping_ends_with_the_best_epochs_parameters() {
        let opts = FitOptions { epochs: 10, batch_size: 10, patience: Some(2), ..FitOptions::default() };
        // 20 rows, 2 validate, 18 train: 2 steps an epoch. Best at epoch 2; epochs 3 and 4 are no better → stop.
        let (t, r) = run(&opts, &[0.9, 0.5, 0.6, 0.5, 0.1], 20);
        let r = r.unwrap();
        assert_eq!((r.epochs.len(), r.best_epoch), (4, 2));
        assert_eq!(t.steps, 4, "the parameters after epoch 2 (4 steps) are restored");
        // Without patience every epoch runs and the last is kept.
        let (t, r) = run(&FitOptions { epochs: 5, patience: None, ..opts }, &[0.9, 0.5, 0.6, 0.5, 0.1], 20);
        assert_eq!((r.unwrap().best_epoch, t.steps), (5, 10));
        // Patience with nothing to validate on is refused, not ignored.
        let e = run(&FitOptions { validation_split: 0.0, ..opts }, &[0.0; 10], 20).1.unwrap_err();
        assert!(e.to_string().contains("validation split"), "{e}");
    }

    #[test]
    fn an_examples_rows_stay_on_one_side_of_the_split() {
        // 10 examples; example 3 has five rows (a long QA context), the others one each.
        let groups: Vec<usize> = [0, 1, 2, 3, 3, 3, 3, 3, 4, 5, 6, 7, 8, 9].to_vec();
        for seed in 0..20 {
            let opts = FitOptions { validation_split: 0.3, seed, ..FitOptions::default() };
            let (val, train) = split(groups.len(), Some(&groups), &opts, &mut SplitMix64::new(seed)).unwrap();
            assert_eq!(val.len() + train.len(), groups.len());
            let held: std::collections::HashSet<usize> = val.iter().map(|&i| groups[i]).collect();
            assert_eq!(held.len(), 3, "⌈0.3 · 10⌉ examples validate (seed {seed})");
            assert!(train.iter().all(|&i| !held.contains(&groups[i])), "seed {seed}: an example on both sides");
        }
        let (val, train) = split(4, None, &FitOptions { validation_split: 0.5, ..FitOptions::default() },
            &mut SplitMix64::new(0)).unwrap();
        assert_eq!((val.len(), train.len()), (2, 2));
        assert!(split(3, Some(&[0, 0]), &FitOptions::default(), &mut SplitMix64::new(0)).is_err());
    }
}
