//! Fine-tuning on tokenized examples: rows (an example's tokens and target), batches padded to their longest row,
//! [`FineTuner`] as the loop's [`Trainee`] ([`fit`]), evaluation with the tasks' metrics, and the fine-tuned model
//! as a Hugging Face folder.

use std::collections::BTreeMap;

use super::fit::checkpoint::{Checkpoints, Store, TraineeState};
use super::finetune::{FineTuneTask, FineTuner, Targets};
use super::loss::{argmax, IGNORE};
use super::optim::StepOptions;
use super::fit::{fit_loop, Evaluation, FitOptions, FitReport, Hooks, Metrics, StepReport, Trainee};
use super::fit::memory::TrainingMemory;
use super::metrics;
use crate::backend::Backend;
use crate::tokenizer::Batch;
use crate::weights::safetensors::{write_f32, F32Tensor};
use crate::{Error, Result};

/// What one example should predict.
#[derive(Clone, Debug, PartialEq)]
pub enum RowTarget {
    /// A class (sequence classification).
    Sequence(u32),
    /// A class per token, [`IGNORE`] where no loss is taken (token classification).
    Token(Vec<i64>),
    /// The answer's start and end token (QA).
    Qa(u32, u32),
    /// The tokens of the positive text paired with this anchor (embedding fine-tuning; the other rows' positives
    /// in the batch are the negatives).
    Embedding { input_ids: Vec<u32>, token_type_ids: Vec<u32> },
    /// Pre-training: the masked-LM label of each token ([`IGNORE`] where no loss is taken) and, with the NSP head,
    /// whether B is random (1) or follows A (0).
    Pretrain { mlm: Vec<i64>, nsp: Option<u32> },
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
                RowTarget::Token(mut t) => {
                    t.truncate(len);
                    RowTarget::Token(t)
                }
                RowTarget::Pretrain { mut mlm, nsp } => {
                    mlm.truncate(len);
                    RowTarget::Pretrain { mlm, nsp }
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
    /// Pre-training: `tokens` holds the masked-LM labels, and these the next-sentence labels (if any).
    pretrain: Option<Vec<u32>>,
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
                RowTarget::Embedding { input_ids, token_type_ids } => Some(Row {
                    input_ids: input_ids.clone(),
                    token_type_ids: token_type_ids.clone(),
                    target: RowTarget::Sequence(0),
                }),
                _ => None,
            })
            .collect::<Option<Vec<Row>>>();
        let positives = match positives {
            Some(p) if !p.is_empty() => Some(RowBatch::new(&p.iter().collect::<Vec<_>>(), pad, None)?.batch),
            _ => None,
        };
        let (mut classes, mut tokens, mut start, mut end) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut pretrain: Option<Vec<u32>> = None;
        for r in rows {
            let n = r.input_ids.len();
            batch.input_ids.extend(r.input_ids.iter().copied().chain(std::iter::repeat_n(pad, t - n)));
            batch.token_type_ids.extend(r.token_type_ids.iter().copied().chain(std::iter::repeat_n(0, t - n)));
            batch.attention_mask.extend(std::iter::repeat_n(1, n).chain(std::iter::repeat_n(0, t - n)));
            match &r.target {
                RowTarget::Sequence(c) => classes.push(*c),
                RowTarget::Token(l) => tokens.extend(l.iter().copied().chain(std::iter::repeat_n(IGNORE, t - l.len()))),
                RowTarget::Qa(s, e) => {
                    start.push(*s);
                    end.push(*e);
                }
                RowTarget::Embedding { .. } => {}
                RowTarget::Pretrain { mlm, nsp } => {
                    tokens.extend(mlm.iter().copied().chain(std::iter::repeat_n(IGNORE, t - mlm.len())));
                    let labels = pretrain.get_or_insert_with(Vec::new);
                    labels.extend(nsp);
                }
            }
        }
        if pretrain.as_ref().is_some_and(|l| !l.is_empty() && l.len() != rows.len()) {
            return Err(Error::Input("a pre-training batch mixes rows with and without next-sentence labels".into()));
        }
        Ok(RowBatch { batch, positives, classes, tokens, start, end, pretrain })
    }

    pub fn targets(&self) -> Targets<'_> {
        if let Some(positives) = &self.positives {
            Targets::Embedding { positives }
        } else if let Some(nsp) = &self.pretrain {
            Targets::Pretrain { mlm: &self.tokens, nsp: (!nsp.is_empty()).then_some(&nsp[..]) }
        } else if !self.tokens.is_empty() {
            Targets::Token(&self.tokens)
        } else if !self.start.is_empty() {
            Targets::Qa { start: &self.start, end: &self.end }
        } else {
            Targets::Sequence(&self.classes)
        }
    }
}

/// The rows of an epoch (from 1), when they change by epoch (pre-training's dynamic masking): the same rows in
/// the same order, their targets made for that epoch.
pub type EpochRows<'a> = &'a dyn Fn(usize) -> Vec<Row>;

/// [`FineTuner`] on tokenized rows, batched as [`RowBatch`] pads them.
struct RowTrainee<'a, B: Backend> {
    tuner: &'a mut FineTuner<B>,
    /// What the validation evaluates (and, without `by_epoch`, what trains).
    rows: &'a [Row],
    by_epoch: Option<EpochRows<'a>>,
    /// `by_epoch`'s rows of the current epoch.
    epoch_rows: Option<Vec<Row>>,
    pad: u32,
    opts: &'a FitOptions,
    metrics: Metrics<'a>,
}

impl<B: Backend> Trainee<B> for RowTrainee<'_, B> {
    async fn accumulate(&mut self, be: &B, which: &[usize]) -> Result<()> {
        let rows = self.epoch_rows.as_deref().unwrap_or(self.rows);
        let batch = RowBatch::new(&which.iter().map(|&i| &rows[i]).collect::<Vec<_>>(), self.pad, self.opts.pad_to)?;
        self.tuner.accumulate(be, &batch.batch, &batch.targets()).await
    }

    async fn apply(&mut self, be: &B, opt: &StepOptions) -> Result<StepReport> {
        self.tuner.apply(be, opt).await
    }

    fn memory(&self) -> Option<TrainingMemory> {
        let longest = self.rows.iter().map(|r| r.input_ids.len()).max().unwrap_or(0).max(self.opts.pad_to.unwrap_or(0));
        Some(self.tuner.memory(self.opts.batch_size, longest))
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

    async fn state(&self, be: &B) -> Result<TraineeState> {
        self.tuner.train_state(be).await
    }

    fn set_state(&mut self, be: &B, state: TraineeState) -> Result<()> {
        self.tuner.set_train_state(be, state)
    }

    fn begin_epoch(&mut self, epoch: usize) -> Result<()> {
        if let Some(f) = self.by_epoch {
            let rows = f(epoch);
            if rows.len() != self.rows.len() {
                return Err(Error::Input(format!("epoch {epoch} has {} rows, not {}", rows.len(), self.rows.len())));
            }
            self.epoch_rows = Some(rows);
        }
        Ok(())
    }
}

/// Fine-tunes `tuner` on `rows` ([`fit_loop`]). `groups[i]` names the example row `i` comes from (a long QA
/// context gives several windows): an example's rows all fall on the same side of the split, so that validation
/// never sees a window of a context trained on. `None`: one example per row.
#[allow(clippy::too_many_arguments)]
pub async fn fit<B: Backend, S: Store>(be: &B, tuner: &mut FineTuner<B>, rows: &[Row], groups: Option<&[usize]>,
    pad: u32, opts: &FitOptions, metrics: Metrics<'_>, hooks: &mut impl Hooks, checkpoints: Option<&mut Checkpoints<S>>)
    -> Result<FitReport> {
    fit_by_epoch(be, tuner, rows, None, groups, pad, opts, metrics, hooks, checkpoints).await
}

/// [`fit`] whose training rows are `by_epoch(epoch)` in each epoch (`None`: `rows` in every one); the validation
/// keeps `rows`, so that its losses compare across epochs.
#[allow(clippy::too_many_arguments)]
pub async fn fit_by_epoch<B: Backend, S: Store>(be: &B, tuner: &mut FineTuner<B>, rows: &[Row],
    by_epoch: Option<EpochRows<'_>>, groups: Option<&[usize]>, pad: u32, opts: &FitOptions, metrics: Metrics<'_>,
    hooks: &mut impl Hooks, checkpoints: Option<&mut Checkpoints<S>>) -> Result<FitReport> {
    tuner.set_dropout(opts.dropout.then(|| tuner.checkpoint_dropout(opts.seed)))?;
    let mut trainee = RowTrainee { tuner, rows, by_epoch, epoch_rows: None, pad, opts, metrics };
    fit_loop(be, &mut trainee, rows.len(), groups, opts, hooks, checkpoints).await
}

/// Mean loss (weighted by batch rows), accuracy and the task's metric over the rows `which` of `rows`.
#[allow(clippy::too_many_arguments)]
pub async fn evaluate<B: Backend>(be: &B, tuner: &FineTuner<B>, rows: &[Row], which: &[usize], pad: u32,
    batch_size: usize, pad_to: Option<usize>, metrics: Metrics<'_>) -> Result<Evaluation> {
    let (mut loss, mut weight, mut right, mut count) = (0f64, 0usize, 0usize, 0usize);
    let (mut nsp_right, mut nsp_count) = (0usize, 0usize);
    let (mut gold_tags, mut pred_tags) = (Vec::new(), Vec::new());
    let mut spans: Vec<Vec<f32>> = Vec::new();
    for chunk in which.chunks(batch_size.max(1)) {
        let chunk_rows: Vec<&Row> = chunk.iter().map(|&i| &rows[i]).collect();
        let b = RowBatch::new(&chunk_rows, pad, pad_to)?;
        let targets = b.targets();
        if let Targets::Pretrain { mlm, nsp } = targets {
            // Accuracy: of the masked-LM predictions; the NSP head's, over the sequences, apart.
            let e = tuner.pretrain_eval(be, &b.batch, mlm, nsp).await?;
            loss += e.loss() as f64 * chunk.len() as f64;
            weight += chunk.len();
            right += e.mlm_correct;
            count += e.mlm_count;
            if nsp.is_some() {
                nsp_right += e.nsp_correct;
                nsp_count += chunk.len();
            }
            continue;
        }
        if let Targets::Embedding { positives } = targets {
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
        loss += tuner.loss(&logits, b.batch.t, &targets) as f64 * n as f64;
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
            (Targets::Qa { .. }, _, Some(_)) => {
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
        nsp_accuracy: (nsp_count > 0).then(|| nsp_right as f32 / nsp_count as f32),
    })
}

/// The fine-tuned model as the files of a Hugging Face folder: `config.json` (the original's, with `architectures`
/// and, for classifiers, `id2label` / `label2id` set) and `model.safetensors` (f32, transformers' names; LoRA
/// adapters merged into their weights). The
/// tokenizer files are the original folder's, unchanged.
pub async fn export_folder<B: Backend>(be: &B, tuner: &FineTuner<B>, original_config: &serde_json::Value,
    labels: Option<&[String]>) -> Result<(String, Vec<u8>)> {
    // A hub-form NomicBERT/GTE config is written in transformers' keys, as the tensors are under its names.
    let mut cfg = super::encoder::transformers_config(&tuner.encoder.config, original_config)?;
    let obj = cfg.as_object_mut().ok_or_else(|| Error::Config("config.json is not a JSON object".into()))?;
    let family = tuner.encoder.config.family;
    let kind = match tuner.task() {
        FineTuneTask::Sequence => "ForSequenceClassification",
        FineTuneTask::Token => "ForTokenClassification",
        FineTuneTask::Qa => "ForQuestionAnswering",
        FineTuneTask::Embedding => "Model",
        FineTuneTask::Pretrain if tuner.pretrain_head().is_ok_and(|h| !h.has_nsp()) => "ForMaskedLM",
        FineTuneTask::Pretrain => "ForPreTraining",
    };
    let arch = format!("{}{kind}", family.class_prefix()); // the family's own class: `RobertaForTokenClassification`
    // A bare encoder is stored as `BertModel` (`RobertaModel`, ...) names it, without the task models' prefix, as
    // sentence-transformers' folders are.
    let bare = tuner.task() == FineTuneTask::Embedding;
    let prefix = crate::weights::family_prefix(family).unwrap_or("bert.");
    obj.insert("architectures".into(), serde_json::json!([arch]));
    if let Some(labels) = labels {
        let id2label: BTreeMap<String, &str> = labels.iter().enumerate().map(|(i, l)| (i.to_string(), l.as_str())).collect();
        let label2id: BTreeMap<&str, usize> = labels.iter().enumerate().map(|(i, l)| (l.as_str(), i)).collect();
        obj.insert("id2label".into(), serde_json::json!(id2label));
        obj.insert("label2id".into(), serde_json::json!(label2id));
    } else if tuner.task() == FineTuneTask::Qa && family == crate::config::Family::ModernBert {
        // `ModernBertForQuestionAnswering` sizes its span head `classifier` by `num_labels`, which transformers reads
        // from id2label: two (start, end), whatever the checkpoint's classifier had.
        obj.insert("id2label".into(), serde_json::json!({"0": "LABEL_0", "1": "LABEL_1"}));
        obj.insert("label2id".into(), serde_json::json!({"LABEL_0": 0, "LABEL_1": 1}));
        obj.remove("num_labels");
    }
    let named = super::lora_peft::merged(be, tuner).await?; // LoRA adapters folded in, if any
    let shapes = tuner.shapes();
    let tensors: Vec<F32Tensor<'_>> = named
        .iter()
        .map(|(name, values)| F32Tensor {
            name: if bare { name.strip_prefix(prefix).unwrap_or(name).to_string() } else { name.clone() },
            shape: shapes[name].clone(),
            values,
        })
        .collect();
    let mut meta = BTreeMap::new();
    meta.insert("format", "pt".to_string());
    Ok((serde_json::to_string_pretty(&cfg)? + "\n", write_f32(&tensors, &meta)?))
}
