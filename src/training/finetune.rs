//! `FineTuner`: the whole BERT fine-tuned on one of the paper's shapes, with the head the inference side already
//! has, or pre-trained. It holds the trainable encoder, the task's head (indices of its parameters) and AdamW's
//! state, checks each batch's targets, and runs the encoder's forward and backward around the objective's head:
//! one file per objective holds its head's forward and backward, its loss and its accuracy ([`super::sequence`],
//! [`super::token`], [`super::qa`], [`super::embedding`], [`super::pretrain`]). The loss is the model's own
//! (transformers'); the optimiser step is [`super::step`]'s, AdamW as transformers' Trainer sets it up (no weight
//! decay on biases and LayerNorm weights, gradients clipped by their global norm).
//!
//! A head the checkpoint lacks starts from transformers' initialiser (`_init_weights`: weights ~ N(0,
//! initializer_range), biases 0), drawn from a seeded [`SplitMix64`].
//!
//! Checked against PyTorch's float64 autograd by `tests/finetune_golden.rs` (goldens: `tests/golden/finetune.py`).

use super::fit::memory::TrainingMemory;
use super::embedding;
use super::encoder::{get, DropoutOptions, DropoutPlan, Encoder, Saved, HEAD_STREAM};
use super::rng::SplitMix64;
use super::metrics::PretrainEval;
use super::pretrain::PretrainHead;
use super::modern_head::ModernHead;
use super::sequence::SequenceHead;
use super::{qa, sequence, token};
use super::optim::AdamW;
use crate::backend::Backend;
use crate::config::{BertConfig, Family};
use crate::tokenizer::Batch;
use crate::weights::{HostTensor, Weights};
use crate::{Error, Result};

/// Which of the fine-tuning shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FineTuneTask {
    /// `BertForSequenceClassification`: one label per text (or text pair).
    Sequence,
    /// `BertForTokenClassification`: one label per token.
    Token,
    /// `BertForQuestionAnswering`: the answer's start and end token.
    Qa,
    /// Sentence embeddings (mean pooling, L2-normalised) from (anchor, positive) pairs with the other pairs'
    /// positives as negatives: sentence-transformers' `MultipleNegativesRankingLoss`, scale [`super::embedding::MNRL_SCALE`].
    Embedding,
    /// `BertForPreTraining` (masked LM + next-sentence prediction), or `BertForMaskedLM` for a checkpoint without
    /// the NSP head ([`super::pretrain`]).
    Pretrain,
}

/// What a batch should predict.
#[derive(Clone, Copy, Debug)]
pub enum Targets<'a> {
    /// A class per sequence (B).
    Sequence(&'a [u32]),
    /// A class per token (B*T), [`super::loss::IGNORE`] where no loss is taken (special tokens, later pieces of a word, padding).
    Token(&'a [i64]),
    /// Start and end token of each sequence's answer (B each).
    Qa { start: &'a [u32], end: &'a [u32] },
    /// Embedding pairs: the batch holds the anchors, this one their positives (row i of each is a pair).
    Embedding { positives: &'a Batch },
    /// Pre-training: masked-LM labels (B*T, [`super::loss::IGNORE`] where no loss is taken) and, with the NSP head, the
    /// next-sentence labels (B; 0: B follows A, 1: B is random).
    Pretrain { mlm: &'a [i64], nsp: Option<&'a [u32]> },
}

/// Every parameter's gradient (`None`: frozen) and the head's logits.
pub type GradientsAndLogits<T> = (Vec<Option<T>>, T);

enum Head {
    Sequence(SequenceHead),
    Token { classifier: [usize; 2], labels: usize, modern: Option<ModernHead> },
    Qa { qa: [usize; 2], modern: Option<ModernHead> },
    Embedding,
    Pretrain(PretrainHead),
}

/// A micro-batch's loss while its step is accumulated: known already (the paths that read back on the way; with
/// pre-training's metrics), or its logits, still on the backend, read with the step's gradient norm once the update
/// is queued.
pub(super) enum PendingLoss<T> {
    Known(f32),
    Pretrain(PretrainEval),
    Logits { logits: T, t: usize, targets: OwnedTargets },
}

/// The [`Targets`] whose loss is taken from logits, owned until the step's read-back.
pub(super) enum OwnedTargets {
    Sequence(Vec<u32>),
    Token(Vec<i64>),
    Qa { start: Vec<u32>, end: Vec<u32> },
}

impl OwnedTargets {
    pub(super) fn new(t: &Targets<'_>) -> Option<OwnedTargets> {
        Some(match t {
            Targets::Sequence(y) => OwnedTargets::Sequence(y.to_vec()),
            Targets::Token(y) => OwnedTargets::Token(y.to_vec()),
            Targets::Qa { start, end } => OwnedTargets::Qa { start: start.to_vec(), end: end.to_vec() },
            Targets::Embedding { .. } | Targets::Pretrain { .. } => return None,
        })
    }

    pub(super) fn targets(&self) -> Targets<'_> {
        match self {
            OwnedTargets::Sequence(y) => Targets::Sequence(y),
            OwnedTargets::Token(y) => Targets::Token(y),
            OwnedTargets::Qa { start, end } => Targets::Qa { start, end },
        }
    }
}

/// A BERT checkpoint being fine-tuned on backend `B`: the encoder, the task's head, AdamW's state.
pub struct FineTuner<B: Backend> {
    pub encoder: Encoder<B::Tensor>,
    head: Head,
    /// AdamW's moments, one pair per trained parameter, and the number of steps taken.
    pub(super) adamw: AdamW<B::Tensor>,
    /// Train only the last this many encoder layers (and the head); `None`: every parameter.
    top_layers: Option<usize>,
    /// Gradients summed over the micro-batches of the step being accumulated, and each one's loss.
    pub(super) pending: Option<(Vec<Option<B::Tensor>>, Vec<PendingLoss<B::Tensor>>)>,
    /// The backend's largest tensor in bytes ([`Backend::max_tensor_bytes`]).
    max_tensor_bytes: usize,
    /// Dropout in [`Self::accumulate`]'s forwards (`None`: off, the default), and the micro-batches it has seen.
    pub(super) dropout: Option<DropoutOptions>,
    pub(super) micro_batches: u64,
}

/// `(out, in)` weight ~ N(0, std) and a zero bias, as transformers' `_init_weights` for a new `nn.Linear`.
fn init_linear(rng: &mut SplitMix64, out: usize, inp: usize, std: f32) -> Result<(HostTensor, HostTensor)> {
    let w = super::init::normal(rng, out * inp, std);
    Ok((HostTensor::f32(vec![out, inp], w)?, HostTensor::f32(vec![out], vec![0.0; out])?))
}

impl<B: Backend> FineTuner<B> {
    /// The checkpoint's encoder and, for `task`, its head under transformers' names, or a new one from the seeded
    /// initialiser when the checkpoint has none (a base model). `labels`: `None` keeps the checkpoint's classes
    /// (config.json's `id2label`) and its classifier; `Some(n)` trains a new classifier of `n` classes (the
    /// checkpoint's, if any, was made for other labels).
    pub fn new(be: &B, cfg: &BertConfig, weights: &Weights, task: FineTuneTask, labels: Option<usize>, seed: u64)
        -> Result<Self> {
        Self::new_with(be, cfg, weights, task, labels, seed, false)
    }

    /// [`Self::new`]; with `frozen_base` (LoRA is set next: [`Self::set_lora`]) the encoder's linear weights stay in
    /// the checkpoint's dtype (f16, Q8_0, Q4_0) on the backend instead of f32 ([`Encoder::push_weight`]).
    pub fn new_with(be: &B, cfg: &BertConfig, weights: &Weights, task: FineTuneTask, labels: Option<usize>, seed: u64,
        frozen_base: bool) -> Result<Self> {
        if task == FineTuneTask::Pretrain
            && !matches!(cfg.family, Family::Bert | Family::Roberta | Family::XlmRoberta | Family::Camembert
                | Family::DistilBert | Family::Albert | Family::Electra | Family::MPNet | Family::NomicBert
                | Family::Gte | Family::DebertaV2 | Family::ModernBert | Family::JinaBert)
        {
            return Err(Error::Config(format!(
                "pre-training (masked LM) supports BERT, RoBERTa, XLM-R, CamemBERT, DistilBERT, ALBERT, ELECTRA \
                 (generators), MPNet, NomicBERT, GTE, DeBERTa-v2/v3, ModernBERT and JinaBERT checkpoints; this one is a {} \
                 (`{}`)",
                cfg.family.class_prefix(),
                cfg.family.model_type()
            )));
        }
        if matches!(task, FineTuneTask::Qa | FineTuneTask::Token) && cfg.family == Family::JinaBert {
            return Err(Error::Config(format!(
                "{} is not trained for JinaBERT checkpoints: jinaai's code has no JinaBertFor{} checkpoint to write \
                 or check against; sequence classification (JinaBertForSequenceClassification) and embeddings are",
                if task == FineTuneTask::Qa { "question answering" } else { "token classification" },
                if task == FineTuneTask::Qa { "QuestionAnswering" } else { "TokenClassification" }
            )));
        }
        if task == FineTuneTask::Qa && matches!(cfg.family, Family::NomicBert | Family::Gte) {
            return Err(Error::Config(format!(
                "question answering is not trained for `{}` checkpoints: transformers has no {}ForQuestionAnswering \
                 to write or check against; sequence and token classification, embeddings and pre-training are",
                cfg.family.model_type(),
                cfg.family.class_prefix()
            )));
        }
        let mut enc = Encoder::load_with(be, cfg, weights, frozen_base)?;
        let h = cfg.hidden_size;
        let mut rng = SplitMix64::new(seed);
        let root = weights.root();
        // ModernBERT's classifiers and span head read `head` first (`ModernBertPredictionHead`), then `classifier`.
        let modern = match task {
            FineTuneTask::Sequence | FineTuneTask::Token | FineTuneTask::Qa if cfg.family == Family::ModernBert => {
                Some(ModernHead::load(be, &mut enc, cfg, &root, &mut rng)?)
            }
            _ => None,
        };
        // The checkpoint's linear at `prefix` if it has one of this shape (and is not `replace`d), else a new one.
        let mut linear = |enc: &mut Encoder<B::Tensor>, w: &Weights, prefix: &str, replace: bool, out: usize, inp: usize|
            -> Result<[usize; 2]> {
            let p = w.pp(prefix);
            let fresh = !p.contains("weight") || replace;
            let (wt, bt) = match (get(&p, "weight", &[out, inp]), get(&p, "bias", &[out])) {
                _ if fresh => init_linear(&mut rng, out, inp, cfg.initializer_range)?,
                (Ok(wt), Ok(bt)) => (wt, bt),
                (Err(e), _) | (_, Err(e)) => return Err(e),
            };
            let names = [format!("{prefix}.weight"), format!("{prefix}.bias")];
            let [wn, bn] = names.map(|n| if w.prefix().is_empty() { n } else { format!("{}.{n}", w.prefix()) });
            Ok([enc.push(be, vec![wn], &wt, out, inp, true)?, enc.push(be, vec![bn], &bt, 1, out, false)?])
        };
        let n_labels = |what: &str| -> Result<usize> {
            let n = labels.unwrap_or(cfg.id2label.len());
            if n < 2 {
                return Err(Error::Input(format!("a {what} needs at least 2 labels, got {n}")));
            }
            Ok(n)
        };
        // `labels`: a new classifier (the checkpoint's, if any, was made for other labels).
        let new = labels.is_some();
        let head = match task {
            FineTuneTask::Sequence | FineTuneTask::Token if modern.is_some() => {
                let labels = n_labels(if task == FineTuneTask::Token { "token classifier" } else { "sequence classifier" })?;
                let classifier = linear(&mut enc, &root, "classifier", new, labels, h)?;
                match task {
                    FineTuneTask::Token => Head::Token { classifier, labels, modern },
                    _ => Head::Sequence(SequenceHead { pool: classifier, classifier, labels, act: cfg.pooler_activation(),
                        drop_first: false, modern }),
                }
            }
            FineTuneTask::Sequence => {
                let labels = n_labels("sequence classifier")?;
                let fam = cfg.family;
                let fam_prefix = crate::weights::family_prefix(fam).unwrap_or("bert.");
                let pooler = if fam == Family::Albert { "pooler" } else { "pooler.dense" };
                // Each family's head under its own names (`heads::classifier` reads them so for inference).
                let (pool, classifier) = if fam.has_classification_head_module() {
                    (linear(&mut enc, &root, "classifier.dense", false, h, h)?,
                        linear(&mut enc, &root, "classifier.out_proj", new, labels, h)?)
                } else {
                    let pool = match fam {
                        Family::DistilBert => linear(&mut enc, &root, "pre_classifier", false, h, h)?,
                        Family::DebertaV2 => linear(&mut enc, &root, "pooler.dense", false, h, h)?, // ContextPooler
                        // BERT's `bert.pooler.dense`, ALBERT's `albert.pooler`.
                        _ => linear(&mut enc, &root.pp(fam_prefix.trim_end_matches('.')), pooler, false, h, h)?,
                    };
                    (pool, linear(&mut enc, &root, "classifier", new, labels, h)?)
                };
                let (act, drop_first) = (cfg.pooler_activation(), fam.has_classification_head_module());
                Head::Sequence(SequenceHead { pool, classifier, labels, act, drop_first, modern: None })
            }
            FineTuneTask::Token => {
                let labels = n_labels("token classifier")?;
                Head::Token { classifier: linear(&mut enc, &root, "classifier", new, labels, h)?, labels, modern: None }
            }
            // `ModernBertForQuestionAnswering`'s span head is its `classifier` (2, H) after `head`; another ModernBERT
            // class's `classifier` (a classifier's labels) is replaced by a new one.
            FineTuneTask::Qa => {
                let span = cfg.architectures.iter().any(|a| a == "ModernBertForQuestionAnswering");
                let (name, replace) = if modern.is_some() { ("classifier", !span) } else { ("qa_outputs", false) };
                Head::Qa { qa: linear(&mut enc, &root, name, replace, 2, h)?, modern }
            }
            FineTuneTask::Embedding => Head::Embedding,
            FineTuneTask::Pretrain => Head::Pretrain(PretrainHead::load(be, &mut enc, cfg, weights)?),
        };
        // Moments are made at a parameter's first update: a frozen one never has any.
        Ok(FineTuner { encoder: enc, head, adamw: AdamW::new(), top_layers: None, pending: None,
            max_tensor_bytes: be.max_tensor_bytes(), dropout: None, micro_batches: 0 })
    }

    /// Trains only the last `k` encoder layers and the head (`Some(0)`: the head alone, on a frozen encoder);
    /// `None`: every parameter. The embeddings and the layers below stay as they are, and the backward stops above
    /// them.
    pub fn set_top_layers(&mut self, k: Option<usize>) -> Result<()> {
        if let Some(k) = k {
            if k > 0 && self.encoder.shares_layers() {
                return Err(Error::Input(format!(
                    "--layers {k}: every layer of this `{}` model is the same shared one; train all (or 0: the head alone)",
                    self.encoder.config.family.model_type()
                )));
            }
            if k > self.encoder.layers() {
                return Err(Error::Input(format!("cannot train the top {k} layers of a {}-layer model", self.encoder.layers())));
            }
        }
        self.top_layers = k;
        Ok(())
    }

    /// Dropout in the training steps' forwards ([`Self::accumulate`], [`Self::step`]), e.g.
    /// [`Self::checkpoint_dropout`] as transformers' Trainer trains; `None` (the default): none. Evaluation
    /// ([`Self::logits`], [`Self::embedding_eval`]) and [`Self::gradients`] never drop.
    pub fn set_dropout(&mut self, dropout: Option<DropoutOptions>) -> Result<()> {
        dropout.as_ref().map_or(Ok(()), DropoutOptions::check)?;
        self.dropout = dropout;
        Ok(())
    }

    /// The dropout transformers' Trainer trains this model with ([`DropoutOptions::of_config`]), the head's
    /// probability the task's: DistilBERT's question answering drops at `qa_dropout` before `qa_outputs`, DeBERTa's
    /// sequence classifier at `cls_dropout` (`hidden_dropout_prob` where absent, as `DebertaV2ForSequenceClassification`)
    /// after its `ContextPooler`, which drops at `pooler_dropout`.
    pub fn checkpoint_dropout(&self, seed: u64) -> DropoutOptions {
        let cfg = &self.encoder.config;
        let d = DropoutOptions::of_config(cfg, seed);
        match (cfg.qa_dropout, &cfg.deberta, &self.head) {
            (Some(qa), _, Head::Qa { modern: None, .. }) => DropoutOptions { classifier: qa, ..d },
            (_, Some(deb), Head::Sequence(_)) => DropoutOptions { classifier: deb.cls_dropout.unwrap_or(cfg.hidden_dropout_prob), ..d },
            _ => d,
        }
    }

    pub(crate) fn top_layers(&self) -> Option<usize> {
        self.top_layers
    }

    /// The head's last linear, which LoRA trains whole (peft's `modules_to_save`): its parameters and module name.
    pub(crate) fn head_modules(&self) -> (Vec<usize>, Option<&'static str>) {
        match &self.head {
            // RoBERTa's and ELECTRA's `classifier` module holds the dense layer too.
            Head::Sequence(SequenceHead { pool, classifier, drop_first: true, .. }) => {
                ([*pool, *classifier].concat(), Some("classifier"))
            }
            Head::Sequence(SequenceHead { classifier, .. }) | Head::Token { classifier, .. } => (classifier.to_vec(), Some("classifier")),
            Head::Qa { qa, modern } => (qa.to_vec(), Some(if modern.is_some() { "classifier" } else { "qa_outputs" })),
            Head::Embedding | Head::Pretrain(_) => (Vec::new(), None),
        }
    }

    /// The pre-training heads, or an error naming what this fine-tuner trains instead.
    pub(super) fn pretrain_head(&self) -> Result<PretrainHead> {
        match &self.head {
            Head::Pretrain(h) => Ok(*h),
            _ => Err(Error::Input(format!("this model is being trained for {:?}, not pre-training", self.task()))),
        }
    }

    /// What a step on micro-batches of `b` × `t` tokens holds besides the model as loaded ([`TrainingMemory`]): the
    /// parameters trained (all, the top layers', or LoRA's) get gradients and moments; the frozen weights of a
    /// quantized base count as stored (f16, Q8_0). Pre-training's masked LM is
    /// counted at 15% of the tokens selected, and one more per sequence (its default, rounded up).
    pub fn memory(&self, b: usize, t: usize) -> TrainingMemory {
        let enc = &self.encoder;
        let first_trained = enc.first_trained(self.top_layers);
        let params = enc.params.iter().enumerate()
            .map(|(i, p)| (p.rows * p.cols, p.bytes(), i >= first_trained && enc.trains(i)));
        let c = &enc.config;
        let (forwards, head_rows, head_width) = match &self.head {
            Head::Sequence(s) => (1, b, s.labels),
            Head::Token { labels, .. } => (1, b * t, *labels),
            Head::Qa { .. } => (1, b * t, 2),
            Head::Embedding => (2, b, b),
            Head::Pretrain(_) => (1, (b * t).div_ceil(20) * 3 + b, c.vocab_size),
        };
        TrainingMemory::of(c, params, b, t, forwards, head_rows, head_width)
    }

    /// Refuses a batch whose largest tensor of the step would not fit the backend (a GPU's largest storage binding,
    /// the CPU's per-tensor budget), naming it and what to lower, rather than failing inside an op.
    pub fn check_memory(&self, b: usize, t: usize) -> Result<()> {
        let c = &self.encoder.config;
        let rows = b * t;
        let widest = [
            (rows * c.feed_forward.up_width(c.intermediate_size), "the feed-forward activation"),
            (rows * 3 * c.hidden_size, "the query/key/value projection"),
            (rows * c.num_attention_heads * t, "the attention backward's probabilities"),
            (b * rows, "the mean-pooling weights"),
        ];
        let (values, what) = widest.into_iter().max_by_key(|w| w.0).expect("four candidates");
        let (bytes, max) = (values as u64 * 4, self.max_tensor_bytes);
        if bytes > max as u64 {
            return Err(Error::Input(format!(
                "a training batch of {b} × {t} tokens needs {what} of {} MB in one tensor, more than the {} MB this \
                 backend holds in one: lower the batch size (and use gradient accumulation for the same effective batch) \
                 or the maximum length",
                bytes >> 20,
                max >> 20
            )));
        }
        Ok(())
    }

    /// Checks targets against the batch and the head.
    fn check(&self, batch: &Batch, targets: &Targets<'_>) -> Result<()> {
        let (b, t) = (batch.b, batch.t);
        self.check_memory(b, t)?;
        match (&self.head, targets) {
            (Head::Sequence(s), Targets::Sequence(y)) => sequence::check(s.labels, b, y)?,
            (Head::Token { labels, .. }, Targets::Token(y)) => token::check(*labels, (b, t), y)?,
            (Head::Qa { .. }, Targets::Qa { start, end }) => qa::check((b, t), start, end)?,
            _ => return Err(Error::Input(
                "these targets are for another task than the one being trained (embedding pairs: FineTuner::embedding_gradients)".into(),
            )),
        }
        Ok(())
    }

    /// Every parameter's gradient of the batch's loss, in parameter order, and the head's logits (sequence:
    /// `(B, C)`; token: `(B*T, C)`; qa: `(B*T, 2)`). An error when some layers are frozen
    /// ([`Self::set_top_layers`]): see [`Self::trainable_gradients`].
    pub fn gradients(&self, be: &B, batch: &Batch, targets: &Targets<'_>) -> Result<(Vec<B::Tensor>, B::Tensor)> {
        let (grads, logits) = self.trainable_gradients(be, batch, targets)?;
        let grads = grads
            .into_iter()
            .enumerate()
            .map(|(i, g)| g.ok_or_else(|| Error::Input(format!("{} is frozen: it has no gradient", self.encoder.params[i].names[0]))))
            .collect::<Result<Vec<_>>>()?;
        Ok((grads, logits))
    }

    /// The gradients of the parameters being trained (`None` for a frozen one), and the logits.
    pub fn trainable_gradients(&self, be: &B, batch: &Batch, targets: &Targets<'_>)
        -> Result<(Vec<Option<B::Tensor>>, B::Tensor)> {
        self.gradients_with(be, batch, targets, None)
    }

    /// [`Self::trainable_gradients`] of a training forward with `dropout` (`None`: none); the logits are the
    /// dropped forward's.
    pub fn gradients_with(&self, be: &B, batch: &Batch, targets: &Targets<'_>, dropout: Option<DropoutPlan>)
        -> Result<GradientsAndLogits<B::Tensor>> {
        self.check(batch, targets)?;
        let enc = &self.encoder;
        let (last, saved) = enc.forward(be, batch, dropout)?;
        // The classifier's input; DistilBERT's token classifier drops at `dropout`, not `seq_classif_dropout`; of
        // the question-answering heads DistilBERT's alone drops (`qa_dropout`, [`Self::checkpoint_dropout`]).
        let distil_token = enc.config.family == Family::DistilBert && matches!(self.head, Head::Token { .. });
        let head_drop = dropout.and_then(|d| d.site(if distil_token { d.hidden } else { d.classifier }, HEAD_STREAM));
        let mut grads: Vec<Option<B::Tensor>> = (0..enc.params.len()).map(|_| None).collect();
        let bt = (batch.b, batch.t);
        let (logits, dlast) = match (&self.head, targets) {
            (Head::Sequence(SequenceHead { modern: Some(m), classifier, .. }), Targets::Sequence(y)) => {
                m.sequence_gradients(be, enc, last, batch, *classifier, y, head_drop, &mut grads)?
            }
            (Head::Token { classifier, modern: Some(m), .. }, Targets::Token(y)) => {
                m.token_gradients(be, enc, last, bt, *classifier, y, head_drop, &mut grads)?
            }
            (Head::Sequence(head), Targets::Sequence(y)) => {
                // `drop₀` of the first token: RoBERTa's and ELECTRA's heads at the classifier's probability,
                // DeBERTa's `ContextPooler` at its `pooler_dropout`.
                let deberta = enc.config.family == Family::DebertaV2;
                let p = |d: DropoutPlan| if head.drop_first { d.classifier } else if deberta { d.pooler } else { 0.0 };
                let first_drop = dropout.and_then(|d| d.site(p(d), sequence::FIRST_STREAM));
                sequence::gradients(be, enc, last, bt, *head, y, (head_drop, first_drop), &mut grads)?
            }
            (Head::Token { classifier, .. }, Targets::Token(y)) => {
                token::gradients(be, enc, last, bt, *classifier, y, head_drop, &mut grads)?
            }
            (Head::Qa { qa, modern: Some(m) }, Targets::Qa { start, end }) => {
                m.qa_gradients(be, enc, last, bt, *qa, (start, end), head_drop, &mut grads)?
            }
            (Head::Qa { qa, .. }, Targets::Qa { start, end }) => {
                let drop = head_drop.filter(|_| enc.config.qa_dropout.is_some());
                qa::gradients(be, enc, last, bt, *qa, (start, end), drop, &mut grads)?
            }
            _ => unreachable!("checked above"),
        };
        enc.backward(be, batch, saved, dlast, &mut grads, self.top_layers)?;
        Ok((grads, logits))
    }

    /// Which shape is being trained.
    pub fn task(&self) -> FineTuneTask {
        match self.head {
            Head::Sequence(_) => FineTuneTask::Sequence,
            Head::Token { .. } => FineTuneTask::Token,
            Head::Qa { .. } => FineTuneTask::Qa,
            Head::Embedding => FineTuneTask::Embedding,
            Head::Pretrain(_) => FineTuneTask::Pretrain,
        }
    }

    /// Every Hugging Face tensor's shape (biases and LayerNorm parameters 1-D, as PyTorch stores them).
    pub fn shapes(&self) -> std::collections::BTreeMap<String, Vec<usize>> {
        let mut out = std::collections::BTreeMap::new();
        for p in &self.encoder.params {
            let rows = p.rows / p.names.len();
            for n in &p.names {
                let shape = if p.matrix { vec![rows, p.cols] } else { vec![p.cols / p.names.len()] };
                out.insert(n.clone(), shape);
            }
        }
        out
    }

    /// The head's logits for a batch (evaluation: no backward).
    pub fn logits(&self, be: &B, batch: &Batch) -> Result<B::Tensor> {
        let enc = &self.encoder;
        let (last, _) = enc.forward(be, batch, None)?;
        match &self.head {
            Head::Sequence(SequenceHead { modern: Some(m), classifier, .. }) => m.sequence_logits(be, enc, &last, batch, *classifier),
            Head::Token { classifier, modern: Some(m), .. } => m.token_logits(be, enc, &last, *classifier),
            Head::Sequence(head) => sequence::logits(be, enc, &last, (batch.b, batch.t), *head),
            Head::Token { classifier, .. } => token::logits(be, enc, &last, *classifier),
            Head::Qa { qa, modern: Some(m) } => m.qa_logits(be, enc, &last, *qa),
            Head::Qa { qa, .. } => qa::logits(be, enc, &last, *qa),
            Head::Embedding => embedding::pooled(be, &last, batch),
            Head::Pretrain(_) => Err(Error::Input("pre-training's logits come from FineTuner::pretrain_eval".into())),
        }
    }

    /// Embedding fine-tuning's gradients for a batch of anchors and one of their positives (row i of each is a
    /// pair), and the loss. The loss and its gradient with respect to the pooled vectors are computed on the host in
    /// f64 from the `(B, H)` vectors read back; everything else runs on the backend:
    /// ```text
    /// u = a/‖a‖, v = p/‖p‖, S = s·u·vᵀ, L = mean_i CE(S_i, i)
    /// dS = (softmax(S) − I)/B, du = s·dS·v, dv = s·dSᵀ·u, da = (du − u(u·du))/‖a‖ (likewise dp)
    /// ```
    pub async fn embedding_gradients(&self, be: &B, anchors: &Batch, positives: &Batch)
        -> Result<(Vec<Option<B::Tensor>>, f32)> {
        self.embedding_gradients_with(be, anchors, positives, None).await
    }

    /// [`Self::embedding_gradients`] of training forwards with `dropout` (the positives' masks from another seed).
    pub async fn embedding_gradients_with(&self, be: &B, anchors: &Batch, positives: &Batch,
        dropout: Option<DropoutPlan>) -> Result<(Vec<Option<B::Tensor>>, f32)> {
        let (m, [saved_a, saved_p]) = self.embedding_forward(be, anchors, positives, dropout).await?;
        let (enc, n, h) = (&self.encoder, anchors.b, self.encoder.config.hidden_size);
        let (da, dp, loss) = (m.da, m.dp, m.loss);
        let mut grads: Vec<Option<B::Tensor>> = (0..enc.params.len()).map(|_| None).collect();
        for (batch, saved, d) in [(anchors, saved_a, da), (positives, saved_p, dp)] {
            let dpooled = be.input(&d, n, h)?;
            let dlast = be.matmul(&embedding::pool_matrix(be, batch)?, true, &dpooled, false)?; // (B*T, H)
            enc.backward(be, batch, saved, dlast, &mut grads, self.top_layers)?;
        }
        Ok((grads, loss))
    }

    /// Embedding pairs without a backward: the loss and how many anchors score their own positive highest among the
    /// batch's positives (in-batch retrieval accuracy).
    pub async fn embedding_eval(&self, be: &B, anchors: &Batch, positives: &Batch) -> Result<(f32, usize)> {
        let (m, _) = self.embedding_forward(be, anchors, positives, None).await?;
        Ok((m.loss, m.right))
    }

    /// The checks of an embedding batch, both sides' forward and pooling, and the loss on the host: what the
    /// gradients and the evaluation share.
    async fn embedding_forward(&self, be: &B, anchors: &Batch, positives: &Batch, dropout: Option<DropoutPlan>)
        -> Result<(embedding::Mnrl, [Saved<B::Tensor>; 2])> {
        if !matches!(self.head, Head::Embedding) {
            return Err(Error::Input("these targets are for another task than the one being trained".into()));
        }
        let n = anchors.b;
        if positives.b != n || n < 2 {
            return Err(Error::Input(format!(
                "embedding pairs: {n} anchors and {} positives; give at least 2 pairs (the other pairs are the negatives)",
                positives.b
            )));
        }
        self.check_memory(anchors.b, anchors.t)?;
        self.check_memory(positives.b, positives.t)?;
        let enc = &self.encoder;
        let (last_a, saved_a) = enc.forward(be, anchors, dropout)?;
        let other = dropout.map(|d| DropoutPlan { seed: crate::backend::pcg_hash(d.seed ^ 0x8000_0000), ..d });
        let (last_p, saved_p) = enc.forward(be, positives, other)?;
        let a = be.read(&embedding::pooled(be, &last_a, anchors)?).await?;
        let p = be.read(&embedding::pooled(be, &last_p, positives)?).await?;
        Ok((embedding::mnrl(&a, &p, n, enc.config.hidden_size), [saved_a, saved_p]))
    }

    /// (right, counted) predictions of a batch from its logits: sequences whose top class is the label, labelled
    /// tokens whose top class is the label, or answers whose best start and best end are both the target's.
    pub fn correct(&self, logits: &[f32], batch: &Batch, targets: &Targets<'_>) -> (usize, usize) {
        match (&self.head, targets) {
            (Head::Sequence(s), Targets::Sequence(y)) => sequence::correct(logits, s.labels, y),
            (Head::Token { labels, .. }, Targets::Token(y)) => token::correct(logits, *labels, y),
            (Head::Qa { .. }, Targets::Qa { start, end }) => qa::correct(logits, (batch.b, batch.t), start, end),
            _ => (0, 0),
        }
    }

    /// The loss of a batch from the head's logits (read back), in f64.
    pub fn loss(&self, logits: &[f32], t: usize, targets: &Targets<'_>) -> f32 {
        match (&self.head, targets) {
            (Head::Sequence(s), Targets::Sequence(y)) => sequence::loss(logits, s.labels, y),
            (Head::Token { labels, .. }, Targets::Token(y)) => token::loss(logits, *labels, y),
            (Head::Qa { .. }, Targets::Qa { start, end }) => qa::loss(logits, t, start, end),
            _ => f32::NAN,
        }
    }

    /// The parameters (or, with `tensors`, other tensors of the parameters' shapes, e.g. gradients) on the host under
    /// their Hugging Face names, the fused projection split into query, key and value.
    pub async fn named(&self, be: &B, tensors: Option<&[B::Tensor]>) -> Result<Vec<(String, Vec<f32>)>> {
        let mut out = Vec::new();
        for (i, p) in self.encoder.params.iter().enumerate() {
            let v = be.read(tensors.map_or(&p.tensor, |ts| &ts[i])).await?;
            let each = v.len() / p.names.len();
            for (k, name) in p.names.iter().enumerate() {
                out.push((name.clone(), v[k * each..(k + 1) * each].to_vec()));
            }
        }
        Ok(out)
    }

    /// Pre-training's gradients of a batch (masked-LM labels `mlm` (B*T), −100 where no loss is taken, and with the
    /// NSP head the next-sentence labels `nsp` (B): 0 = B follows A, 1 = random; without them the masked LM alone
    /// trains and the NSP head gets no gradient), and what the forward gave. The
    /// logits are read back for the losses (the selected rows' (M, V), and (B, 2)); everything else stays on the
    /// backend.
    pub async fn pretrain_gradients(&self, be: &B, batch: &Batch, mlm: &[i64], nsp: Option<&[u32]>)
        -> Result<(Vec<Option<B::Tensor>>, PretrainEval)> {
        self.pretrain_gradients_with(be, batch, mlm, nsp, None).await
    }

    /// [`Self::pretrain_gradients`] of a training forward with `dropout` (`None`: none).
    pub async fn pretrain_gradients_with(&self, be: &B, batch: &Batch, mlm: &[i64], nsp: Option<&[u32]>,
        dropout: Option<DropoutPlan>) -> Result<(Vec<Option<B::Tensor>>, PretrainEval)> {
        let (grads, eval) = self.pretrain_pass(be, batch, mlm, nsp, Some(dropout)).await?;
        Ok((grads.expect("a backward pass was asked for"), eval))
    }

    /// The losses and accuracies of a batch, without gradients or dropout (evaluation).
    pub async fn pretrain_eval(&self, be: &B, batch: &Batch, mlm: &[i64], nsp: Option<&[u32]>) -> Result<PretrainEval> {
        self.pretrain_pass(be, batch, mlm, nsp, None).await.map(|(_, e)| e)
    }

    /// The pre-training heads' pass (checks first, then [`PretrainHead::pass`]).
    async fn pretrain_pass(&self, be: &B, batch: &Batch, mlm: &[i64], nsp: Option<&[u32]>,
        backward: Option<Option<DropoutPlan>>) -> Result<(Option<Vec<Option<B::Tensor>>>, PretrainEval)> {
        let head = self.pretrain_head()?;
        head.check_targets(batch.b, batch.t, mlm, nsp)?;
        self.check_memory(batch.b, batch.t)?;
        head.pass(be, &self.encoder, batch, mlm, nsp, backward).await
    }
}
