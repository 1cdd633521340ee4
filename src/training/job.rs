//! One fine-tuning job, from a user's examples to the files of a Hugging Face folder: what the CLI's `fine-tune`
//! and the browser's `fineTune` both run, so that they check the same things and train the same way.
//!
//! [`Examples`] are the five shapes of data ([`JobTask`]); [`prepare`] tokenizes them into rows as transformers'
//! example scripts do ([`super::data`]) and picks the head (the checkpoint's own when its labels are exactly the
//! data's, else a new one); [`run`] fine-tunes a [`FineTuner`] with [`fit`] and exports the folder's
//! `config.json` and `model.safetensors` ([`rows::export_folder`]). The tokenizer files are the original's,
//! unchanged ([`FOLDER_FILES`]).

use serde::Deserialize;

use sha2::{Digest, Sha256};

use super::fit::checkpoint::{self, Checkpoints, Store};
use super::data::{self, QaExample, TextExample, TokenExample};
use super::finetune::{FineTuneTask, FineTuner};
use super::fit::{FitOptions, FitReport, Hooks, Metrics};
use super::rows::{self, Row, RowTarget};
use super::lora::LoraOptions;
use super::lora_peft;
use super::pretrain_data::{pretrain_rows, PretrainOptions, PretrainRow, TokenizedCorpus};
use super::metrics::QaReference;
use crate::backend::Backend;
use crate::config::BertConfig;
use crate::tokenizer::Tokenizer;
use crate::weights::Weights;
use crate::{Error, Result};

/// What to fine-tune for, named by the data it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
pub enum JobTask {
    /// {"text", "label"}: one label per text
    Classify,
    /// {"text", "text_pair", "label"}: one label per pair (e.g. NLI)
    Pair,
    /// {"tokens": [...], "tags": [...]}: one label per word (NER, slot filling)
    Ner,
    /// SQuAD's {"question", "context", "answers": {"text": [...], "answer_start": [...]}}
    Qa,
    /// {"anchor", "positive"}: sentence embeddings, the batch's other positives as negatives
    Embed,
}

impl JobTask {
    /// The objective this task trains (`classify` and `pair` both classify sequences): the one mapping from what
    /// the CLI and `fineTune` are asked for to [`FineTuneTask`], whose names the targets, rows and heads share.
    pub fn objective(self) -> FineTuneTask {
        match self {
            JobTask::Classify | JobTask::Pair => FineTuneTask::Sequence,
            JobTask::Ner => FineTuneTask::Token,
            JobTask::Qa => FineTuneTask::Qa,
            JobTask::Embed => FineTuneTask::Embedding,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            JobTask::Classify => "classify",
            JobTask::Pair => "pair",
            JobTask::Ner => "ner",
            JobTask::Qa => "qa",
            JobTask::Embed => "embed",
        }
    }
}

impl std::str::FromStr for JobTask {
    type Err = Error;
    fn from_str(s: &str) -> Result<JobTask> {
        [JobTask::Classify, JobTask::Pair, JobTask::Ner, JobTask::Qa, JobTask::Embed]
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| Error::Input(format!("unknown fine-tuning task `{s}`; use classify, pair, ner, qa or embed")))
    }
}

/// One example of embedding data.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct PairExample {
    pub anchor: String,
    pub positive: String,
}

/// A task's examples.
#[derive(Clone, Debug, PartialEq)]
pub enum Examples {
    /// `classify` and `pair`.
    Text(Vec<TextExample>),
    Token(Vec<TokenExample>),
    Qa(Vec<QaExample>),
    Embedding(Vec<PairExample>),
}

impl Examples {
    /// `task`'s examples from JSON lines (or one JSON array), errors naming the line.
    pub fn parse(task: JobTask, text: &str) -> Result<Examples> {
        Ok(match task {
            JobTask::Classify | JobTask::Pair => Examples::Text(data::parse_jsonl(text)?),
            JobTask::Ner => Examples::Token(data::parse_jsonl(text)?),
            JobTask::Qa => Examples::Qa(data::parse_jsonl(text)?),
            JobTask::Embed => Examples::Embedding(data::parse_jsonl(text)?),
        })
    }

    /// `task`'s examples from any serde source giving an array of objects (the browser's), errors naming the
    /// example.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(task: JobTask, d: D) -> Result<Examples>
    where
        D::Error: std::fmt::Display,
    {
        let values = Vec::<serde_json::Value>::deserialize(d)
            .map_err(|e| Error::Input(format!("examples must be an array of objects: {e}")))?;
        fn each<T: serde::de::DeserializeOwned>(task: JobTask, values: Vec<serde_json::Value>) -> Result<Vec<T>> {
            values
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    serde_json::from_value(v)
                        .map_err(|e| Error::Input(format!("examples[{i}] is not an example of task \"{}\": {e}", task.name())))
                })
                .collect()
        }
        Ok(match task {
            JobTask::Classify | JobTask::Pair => Examples::Text(each(task, values)?),
            JobTask::Ner => Examples::Token(each(task, values)?),
            JobTask::Qa => Examples::Qa(each(task, values)?),
            JobTask::Embed => Examples::Embedding(each(task, values)?),
        })
    }
}

/// How to fine-tune.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JobOptions {
    pub task: JobTask,
    /// Train the top this many encoder layers and the head (0: the head alone); `None`: every parameter.
    pub layers: Option<usize>,
    /// QA: context tokens shared by consecutive windows (run_qa's `doc_stride`).
    pub doc_stride: usize,
    pub fit: FitOptions,
    /// Train LoRA adapters on a frozen encoder instead ([`super::lora`]); the job then exports the adapter (peft's
    /// files), or with `merge` the merged folder.
    pub lora: Option<LoraOptions>,
}

impl JobOptions {
    pub fn new(task: JobTask) -> JobOptions {
        JobOptions { task, layers: None, doc_stride: data::QA_DOC_STRIDE, fit: FitOptions::default(), lora: None }
    }
}

/// The rows to train on, the label list (for a classifier), and whether the checkpoint's own head fits them.
pub struct Prepared {
    pub rows: Vec<Row>,
    /// The example each row comes from, where an example gives several rows (QA windows).
    pub groups: Option<Vec<usize>>,
    pub labels: Option<Vec<String>>,
    pub keep_head: bool,
    pub task: FineTuneTask,
    /// QA: what exact match and F1 need (the windows, contexts and gold answers).
    pub qa: Option<QaReference>,
}

impl Prepared {
    /// One line on what will train, for progress output.
    pub fn describe(&self, layers: Option<usize>) -> String {
        let what = match layers {
            None => "every parameter".to_string(),
            Some(0) => "the head alone".to_string(),
            Some(k) => format!("the top {k} layers and the head"),
        };
        let head = match (&self.labels, self.keep_head) {
            (Some(l), true) => format!("{} labels, the checkpoint's head", l.len()),
            (Some(l), false) => format!("{} labels, a new head", l.len()),
            (None, _) if self.task == FineTuneTask::Embedding => "mean pooling, in-batch negatives".to_string(),
            (None, _) => "the checkpoint's QA head, or a new one".to_string(),
        };
        format!("fine-tuning {what} on {} rows ({head})", self.rows.len())
    }
}

/// Tokenizes `examples` for `task` (see [`super::data`]) and checks that they can be trained on.
pub fn prepare(cfg: &BertConfig, tok: &Tokenizer, task: JobTask, examples: &Examples, doc_stride: usize)
    -> Result<Prepared> {
    let own = |labels: &[String], arch: &str| {
        cfg.architectures.iter().any(|x| x.ends_with(arch)) && cfg.id2label.values().eq(labels.iter())
    };
    let mismatch = || Error::Input(format!("the examples are not the data of task \"{}\"", task.name()));
    Ok(match (task, examples) {
        (JobTask::Classify | JobTask::Pair, Examples::Text(examples)) => {
            let pair = task == JobTask::Pair;
            if let Some(i) = examples.iter().position(|e| pair != e.text_pair.as_deref().is_some_and(|p| !p.is_empty())) {
                let want = if pair { "needs" } else { "must not have" };
                return Err(Error::Input(format!("example {i}: task \"{}\" {want} a \"text_pair\"", task.name())));
            }
            let labels = data::sequence_label_list(examples, &cfg.label2id)?;
            if labels.len() < 2 {
                return Err(Error::Input(format!("a classifier needs at least 2 labels; the examples have {labels:?}")));
            }
            let b = data::sequence_batch(tok, examples, &labels)?;
            let rows = rows::rows_from_batch(&b.batch, b.labels.iter().map(|&c| RowTarget::Sequence(c)));
            let keep_head = own(&labels, "ForSequenceClassification");
            Prepared { rows, groups: None, keep_head, labels: Some(labels), task: task.objective(), qa: None }
        }
        (JobTask::Ner, Examples::Token(examples)) => {
            let labels = data::token_label_list(examples, &cfg.label2id)?;
            let b = data::token_batch(tok, examples, &labels)?;
            let t = b.batch.t;
            let rows = rows::rows_from_batch(&b.batch, b.labels.chunks(t.max(1)).map(|l| RowTarget::Token(l.to_vec())));
            let keep_head = own(&labels, "ForTokenClassification");
            Prepared { rows, groups: None, keep_head, labels: Some(labels), task: task.objective(), qa: None }
        }
        (JobTask::Embed, Examples::Embedding(pairs)) => {
            if pairs.len() < 2 {
                return Err(Error::Input("embedding fine-tuning needs at least 2 pairs: the other pairs are the negatives".into()));
            }
            let mut rows = Vec::with_capacity(pairs.len());
            for (i, pr) in pairs.iter().enumerate() {
                if pr.anchor.trim().is_empty() || pr.positive.trim().is_empty() {
                    return Err(Error::Input(format!("pair {i} has an empty text")));
                }
                let (x, y) = (tok.encode(&pr.anchor, None)?, tok.encode(&pr.positive, None)?);
                let target = RowTarget::Embedding { input_ids: y.ids, token_type_ids: y.type_ids };
                rows.push(Row { input_ids: x.ids, token_type_ids: x.type_ids, target });
            }
            Prepared { rows, groups: None, keep_head: true, labels: None, task: task.objective(), qa: None }
        }
        (JobTask::Qa, Examples::Qa(examples)) => {
            let max_length = tok.max_length().min(data::QA_MAX_LENGTH);
            let b = data::qa_batch(tok, examples, max_length, doc_stride)?;
            let rows = rows::rows_from_batch(&b.batch, b.start.iter().zip(&b.end).map(|(&s, &e)| RowTarget::Qa(s, e)));
            let qa = QaReference {
                windows: b.windows,
                example: b.example.clone(),
                contexts: examples.iter().map(|e| e.context.clone()).collect(),
                answers: examples.iter().map(|e| e.answers.text.clone()).collect(),
            };
            Prepared {
                rows,
                groups: Some(b.example),
                keep_head: true,
                labels: None,
                task: task.objective(),
                qa: Some(qa),
            }
        }
        _ => return Err(mismatch()),
    })
}

/// What a job made: its report, the label list of a classifier, and the folder's `config.json` and
/// `model.safetensors` (f32; after LoRA, the adapters merged in), and after LoRA also peft's `adapter_config.json`
/// and `adapter_model.safetensors` (to load beside the base model).
pub struct FineTuned {
    pub report: FitReport,
    pub labels: Option<Vec<String>>,
    pub config_json: String,
    pub safetensors: Vec<u8>,
    pub adapter: Option<(String, Vec<u8>)>,
}

/// The files of a Hugging Face folder besides config.json and model.safetensors that a fine-tuned folder copies from
/// the original: the tokenizer, and a sentence-transformers model's pipeline (pooling, normalisation).
pub const FOLDER_FILES: [&str; 9] = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
    "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling/config.json",
    "2_Normalize/config.json"];

#[allow(clippy::too_many_arguments)]
/// Fine-tunes the checkpoint (`cfg`, `weights`, its `config.json` as `original_config`) on `prepared` rows on `be`.
/// The checkpoint is not changed: the job trains a copy, and a failure (bad options, a non-finite loss, a stop asked
/// by `hooks`) returns an error and nothing else.
/// With `checkpoints`, the run is saved as it goes and can be resumed ([`super::checkpoint`]); its identity is the
/// options, the prepared rows and the model, so a resume with anything else is refused.
pub async fn run<B: Backend, S: Store>(be: &B, cfg: &BertConfig, tok: &Tokenizer, weights: &Weights,
    original_config: &serde_json::Value, opts: &JobOptions, prepared: &Prepared, hooks: &mut impl Hooks,
    mut checkpoints: Option<&mut Checkpoints<S>>) -> Result<FineTuned> {
    super::encoder::check_config_keys(cfg, original_config)?;
    let p = prepared;
    let mut fit_opts = opts.fit;
    if p.task == FineTuneTask::Embedding && fit_opts.batch_size < 2 {
        return Err(Error::Input(
            "embedding fine-tuning needs a batch size of at least 2: the other pairs of a batch are the negatives".into(),
        ));
    }
    if p.task == FineTuneTask::Qa {
        // run_qa pads every window to max_length, and the loss's softmax sees the padding: do the same.
        fit_opts.pad_to = Some(tok.max_length().min(data::QA_MAX_LENGTH));
    }
    let fresh = (!p.keep_head).then(|| p.labels.as_ref().map_or(0, Vec::len));
    // With LoRA the encoder's linears are frozen: they stay in the checkpoint's dtype (a Q8_0 base stays Q8_0).
    let mut tuner = FineTuner::new_with(be, cfg, weights, p.task, fresh, fit_opts.seed, opts.lora.is_some())?;
    tuner.set_top_layers(opts.layers)?;
    if let Some(l) = opts.lora {
        tuner.set_lora(be, l, fit_opts.seed)?;
    }
    let metrics = Metrics {
        tags: p.labels.as_deref().filter(|_| p.task == FineTuneTask::Token),
        qa: p.qa.as_ref(),
    };
    if let Some(c) = checkpoints.as_deref_mut() {
        let extra = [("task", opts.task.name().into()), ("layers", serde_json::json!(opts.layers)),
            ("doc_stride", opts.doc_stride.into()), ("lora", serde_json::json!(opts.lora.map(|l| format!("{l:?}"))))];
        c.run = identity(&fit_opts, &extra, &p.rows, &format!("{:?}{:?}", p.groups, p.labels), weights, original_config)?;
    }
    let report = rows::fit(be, &mut tuner, &p.rows, p.groups.as_deref(), cfg.pad_token_id, &fit_opts, metrics, hooks,
        checkpoints).await?;
    let adapter = match opts.lora {
        Some(_) => Some(lora_peft::export_adapter(be, &tuner, original_config["_name_or_path"].as_str(), p.labels.as_deref()).await?),
        None => None,
    };
    let (config_json, safetensors) = rows::export_folder(be, &tuner, original_config, p.labels.as_deref()).await?;
    Ok(FineTuned { report, labels: p.labels.clone(), config_json, safetensors, adapter })
}

/// `data` as `cfg`'s family pre-trains (`weights` its checkpoint's): BERT's relatives with the masked LM alone (none
/// has a next-sentence head; `nsp`'s default of true is BERT's, not theirs), but ALBERT's `AlbertForPreTraining`
/// (`sop_classifier`), whose pairs are sentence-order ones (`sentence_order`).
pub fn family_options(cfg: &BertConfig, weights: &Weights, data: &PretrainOptions) -> PretrainOptions {
    use crate::config::Family;
    let sop = cfg.family == Family::Albert && super::pretrain::has_sentence_order_head(weights);
    PretrainOptions { nsp: data.nsp && (cfg.family == Family::Bert || sop), sentence_order: sop, ..data.clone() }
}

/// The rows [`pretrain`] trains on, and what masks them again each epoch.
pub struct PretrainData {
    pub corpus: TokenizedCorpus,
    /// As made, masked once: the first epoch's (and with static masking every epoch's) and the validation's.
    pub rows: Vec<PretrainRow>,
    /// The options they were made with ([`family_options`]).
    pub options: PretrainOptions,
}

impl PretrainData {
    /// The rows epoch `epoch` (from 1) trains on: [`PretrainRow::remasked`].
    pub fn epoch(&self, epoch: usize) -> Vec<PretrainRow> {
        self.rows.iter().enumerate().map(|(i, r)| r.remasked(&self.corpus, &self.options, epoch, i)).collect()
    }
}

/// The rows [`pretrain`] trains `cfg`'s model on (seeded: made again the same way, they are the same rows): the
/// options as [`family_options`] has them, and for RoBERTa-style models no random replacement by the padding token.
pub fn pretrain_corpus_rows(cfg: &BertConfig, weights: &Weights, tok: &Tokenizer, corpus: &[Vec<String>],
    data: &PretrainOptions) -> Result<PretrainData> {
    let mut tokenized = TokenizedCorpus::new(tok, corpus)?;
    if cfg.position_offset > 0 {
        tokenized = tokenized.never_draw(cfg.pad_token_id);
    }
    let options = family_options(cfg, weights, data);
    let rows = pretrain_rows(&tokenized, &options)?;
    Ok(PretrainData { corpus: tokenized, rows, options })
}

/// Pre-trains the checkpoint (`cfg`, `weights`, its `config.json` as `original_config`) on `corpus` (documents of
/// sentences, [`super::pretrain_data::parse_corpus`]): masked LM, with next-sentence prediction when `data.nsp` (the
/// checkpoint must then have the NSP head; `data.nsp` false trains the masked LM alone, as `BertForMaskedLM`). The
/// rows are made once from `data.seed`, masked once for the run (static masking, as the BERT paper's data) or again
/// each epoch (`data.dynamic_masking`, as RoBERTa); the loop is fine-tuning's.
#[allow(clippy::too_many_arguments)]
pub async fn pretrain<B: Backend, S: Store>(be: &B, cfg: &BertConfig, tok: &Tokenizer, weights: &Weights,
    original_config: &serde_json::Value, corpus: &[Vec<String>], data: &PretrainOptions, fit_opts: &FitOptions,
    hooks: &mut impl Hooks, mut checkpoints: Option<&mut Checkpoints<S>>) -> Result<FineTuned> {
    super::encoder::check_config_keys(cfg, original_config)?;
    let mut tuner = FineTuner::new(be, cfg, weights, FineTuneTask::Pretrain, None, fit_opts.seed)?;
    let has_nsp = tuner.pretrain_head()?.has_nsp();
    let data = &family_options(cfg, weights, data);
    if data.nsp && !has_nsp {
        return Err(Error::Input(
            "this checkpoint has no next-sentence head (cls.seq_relationship): pre-train it with the masked LM alone \
             (--no-nsp, nsp: false)"
                .into(),
        ));
    }
    let made = pretrain_corpus_rows(cfg, weights, tok, corpus, data)?;
    let to_rows = |rows: Vec<PretrainRow>| -> Vec<Row> {
        rows.into_iter()
            .map(|r| Row {
                input_ids: r.input_ids,
                token_type_ids: r.token_type_ids,
                target: RowTarget::Pretrain { mlm: r.mlm_labels, nsp: r.nsp_label.filter(|_| has_nsp) },
            })
            .collect()
    };
    let rows = to_rows(made.rows.clone());
    if let Some(c) = checkpoints.as_deref_mut() {
        // (Dynamic masking named only when on: a static run's identity is what it was before the option existed.)
        let mut extra = vec![("task", "pretrain".into())];
        if data.dynamic_masking {
            extra.push(("dynamic_masking", true.into()));
        }
        c.run = identity(fit_opts, &extra, &rows, "", weights, original_config)?;
    }
    let by_epoch = |epoch: usize| to_rows(made.epoch(epoch));
    let by_epoch = data.dynamic_masking.then_some(&by_epoch as rows::EpochRows<'_>);
    let report = rows::fit_by_epoch(be, &mut tuner, &rows, by_epoch, None, cfg.pad_token_id, fit_opts,
        Metrics::default(), hooks, checkpoints)
        .await?;
    let (config_json, safetensors) = rows::export_folder(be, &tuner, original_config, None).await?;
    Ok(FineTuned { report, labels: None, config_json, safetensors, adapter: None })
}

/// What a resumed run must share with the run that made its checkpoint: every option (`fit`'s and `extra`), the rows
/// (data, tokenizer, windows, masking: hashed, with `groups_and_labels`), and the model (its weights and config.json,
/// hashed).
fn identity(fit: &FitOptions, extra: &[(&str, serde_json::Value)], rows: &[Row], groups_and_labels: &str,
    weights: &Weights, original_config: &serde_json::Value) -> Result<serde_json::Value> {
    let mut h = Sha256::new();
    for r in rows {
        h.update(format!("{r:?}\n").as_bytes());
    }
    h.update(groups_and_labels.as_bytes());
    let model = checkpoint::sha256(format!("{}{original_config}", checkpoint::weights_fingerprint(weights)).as_bytes());
    // Through text, so that an f32 option reads as written (0.01, not the f64 0.009999999776482582).
    let mut id: serde_json::Value = serde_json::from_str(&serde_json::to_string(fit)?)?;
    let o = id.as_object_mut().ok_or_else(|| Error::Input("fit options are not an object".into()))?;
    for (k, v) in extra {
        o.insert(k.to_string(), v.clone());
    }
    o.insert("data".into(), checkpoint::hex(&h.finalize()).into());
    o.insert("model".into(), model.into());
    Ok(id)
}
