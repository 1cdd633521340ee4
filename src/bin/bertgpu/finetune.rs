//! `bertgpu fine-tune`: the whole model fine-tuned on JSON lines, written as a Hugging Face folder that `bertgpu`,
//! `Bert.load` and transformers' `from_pretrained` load.

use std::path::{Path, PathBuf};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::engine;
use bertgpu::training::finetune::{FineTuneTask, FineTuner};
use bertgpu::training::data;
use bertgpu::training::fit::{self, FitOptions, Progress, Row, RowTarget};
use serde_json::json;

use crate::{load_model, Fail, InferArgs};

/// The shapes `--task` takes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Task {
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

/// One line of embedding data.
#[derive(serde::Deserialize)]
struct Pair {
    anchor: String,
    positive: String,
}

pub(crate) struct FineTuneArgs {
    pub task: Task,
    pub data: PathBuf,
    pub out: PathBuf,
    pub doc_stride: usize,
    /// Train the top this many layers (and the head); `None`: all.
    pub layers: Option<usize>,
    pub fit: FitOptions,
}

/// `--layers`: `all` or a number of top layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layers(pub Option<usize>);

pub(crate) fn parse_layers(s: &str) -> Result<Layers, String> {
    match s {
        "all" => Ok(Layers(None)),
        n => n.parse().map(|k| Layers(Some(k))).map_err(|_| format!("`{n}` is neither `all` nor a number of layers")),
    }
}

fn fail(what: impl std::fmt::Display) -> Fail {
    Fail::Model(format!("fine-tune: {what}"))
}

/// The rows to train on, the label list (for a classifier), and whether the checkpoint's own classifier fits them
/// (its labels are exactly these, in this order).
struct Prepared {
    rows: Vec<Row>,
    /// The example each row comes from, where an example gives several rows (QA windows).
    groups: Option<Vec<usize>>,
    labels: Option<Vec<String>>,
    keep_head: bool,
    task: FineTuneTask,
}

fn prepare(m: &crate::LoadedModel, a: &FineTuneArgs) -> Result<Prepared, Fail> {
    let text = std::fs::read_to_string(&a.data)
        .map_err(|e| fail(format!("cannot read training data `{}`: {e}", a.data.display())))?;
    let at = |e: bertgpu::Error| fail(format!("{}: {e}", a.data.display()));
    let (cfg, tok) = (&m.model.config, &m.model.tokenizer);
    let own = |labels: &[String], arch: &str| {
        cfg.architectures.iter().any(|x| x.ends_with(arch)) && cfg.id2label.values().eq(labels.iter())
    };
    Ok(match a.task {
        Task::Classify | Task::Pair => {
            let examples: Vec<data::TextExample> = data::parse_jsonl(&text).map_err(at)?;
            if let Some(i) = examples.iter().position(|e| (a.task == Task::Pair) != e.text_pair.as_deref().is_some_and(|p| !p.is_empty())) {
                let want = if a.task == Task::Pair { "needs" } else { "must not have" };
                return Err(fail(format!("{}: example {i}: --task {:?} {want} a \"text_pair\"", a.data.display(), a.task)));
            }
            let labels = data::sequence_label_list(&examples, &cfg.label2id).map_err(at)?;
            if labels.len() < 2 {
                return Err(fail(format!("a classifier needs at least 2 labels; the data has {labels:?}")));
            }
            let b = data::sequence_batch(tok, &examples, &labels).map_err(at)?;
            let rows = fit::rows_from_batch(&b.batch, b.labels.iter().map(|&c| RowTarget::Class(c)));
            let keep_head = own(&labels, "ForSequenceClassification");
            Prepared { rows, groups: None, keep_head, labels: Some(labels), task: FineTuneTask::Sequence }
        }
        Task::Ner => {
            let examples: Vec<data::TokenExample> = data::parse_jsonl(&text).map_err(at)?;
            let labels = data::token_label_list(&examples, &cfg.label2id).map_err(at)?;
            let b = data::token_batch(tok, &examples, &labels).map_err(at)?;
            let t = b.batch.t;
            let rows = fit::rows_from_batch(&b.batch, b.labels.chunks(t.max(1)).map(|l| RowTarget::Tokens(l.to_vec())));
            let keep_head = own(&labels, "ForTokenClassification");
            Prepared { rows, groups: None, keep_head, labels: Some(labels), task: FineTuneTask::Token }
        }
        Task::Embed => {
            let pairs: Vec<Pair> = data::parse_jsonl(&text).map_err(at)?;
            if pairs.len() < 2 {
                return Err(fail("embedding fine-tuning needs at least 2 pairs: the other pairs are the negatives"));
            }
            let mut rows = Vec::with_capacity(pairs.len());
            for (i, pr) in pairs.iter().enumerate() {
                if pr.anchor.trim().is_empty() || pr.positive.trim().is_empty() {
                    return Err(fail(format!("{}: pair {i} has an empty text", a.data.display())));
                }
                let (x, y) = (tok.encode(&pr.anchor, None).map_err(at)?, tok.encode(&pr.positive, None).map_err(at)?);
                let target = RowTarget::Positive { input_ids: y.ids, token_type_ids: y.type_ids };
                rows.push(Row { input_ids: x.ids, token_type_ids: x.type_ids, target });
            }
            Prepared { rows, groups: None, keep_head: true, labels: None, task: FineTuneTask::Embedding }
        }
        Task::Qa => {
            let examples: Vec<data::QaExample> = data::parse_jsonl(&text).map_err(at)?;
            let max_length = tok.max_length().min(data::QA_MAX_LENGTH);
            let b = data::qa_batch(tok, &examples, max_length, a.doc_stride).map_err(at)?;
            let rows = fit::rows_from_batch(&b.batch, b.start.iter().zip(&b.end).map(|(&s, &e)| RowTarget::Span(s, e)));
            Prepared { rows, groups: Some(b.example), keep_head: true, labels: None, task: FineTuneTask::QuestionAnswering }
        }
    })
}

async fn train<B: Backend>(be: &B, m: &crate::LoadedModel, a: &FineTuneArgs) -> Result<serde_json::Value, Fail> {
    let p = prepare(m, a)?;
    let weights = m.model.weights().map_err(fail)?;
    let cfg = &m.model.config;
    let fresh = (!p.keep_head).then(|| p.labels.as_ref().map_or(0, Vec::len));
    let mut tuner = FineTuner::new(be, cfg, &weights, p.task, fresh, a.fit.seed).map_err(fail)?;
    drop(weights);
    tuner.set_top_layers(a.layers).map_err(fail)?;
    eprintln!(
        "bertgpu: fine-tuning {} on {} rows ({:?}; {}), {} backend",
        match a.layers {
            None => "every parameter".to_string(),
            Some(0) => "the head alone".to_string(),
            Some(k) => format!("the top {k} layers and the head"),
        },
        p.rows.len(),
        a.task,
        match (&p.labels, p.keep_head) {
            (Some(l), true) => format!("{} labels, the checkpoint's head", l.len()),
            (Some(l), false) => format!("{} labels, a new head", l.len()),
            (None, _) if p.task == FineTuneTask::Embedding => "mean pooling, in-batch negatives".to_string(),
            (None, _) => "the checkpoint's QA head, or a new one".to_string(),
        },
        be.name()
    );
    let mut opts = a.fit;
    if p.task == FineTuneTask::Embedding && opts.batch_size < 2 {
        return Err(fail("--task embed needs --batch-size of at least 2: the other pairs of a batch are the negatives"));
    }
    if p.task == FineTuneTask::QuestionAnswering {
        // run_qa pads every window to max_length, and the loss's softmax sees the padding: do the same.
        opts.pad_to = Some(m.model.tokenizer.max_length().min(data::QA_MAX_LENGTH));
    }
    let report = fit::fit(be, &mut tuner, &p.rows, p.groups.as_deref(), cfg.pad_token_id, &opts, |p| {
        let line = match p {
            Progress::Step(s) => serde_json::to_string(s),
            Progress::Epoch(e) => serde_json::to_string(e),
        };
        eprintln!("{}", line.unwrap_or_default());
    })
    .await
    .map_err(fail)?;
    write_folder(be, &tuner, m, &a.out, p.labels.as_deref()).await?;
    Ok(json!({ "labels": p.labels, "epochs": report.epochs, "out": a.out }))
}

/// config.json, model.safetensors and the original folder's tokenizer files into `out`.
async fn write_folder<B: Backend>(be: &B, tuner: &FineTuner<B>, m: &crate::LoadedModel, out: &Path, labels: Option<&[String]>)
    -> Result<(), Fail> {
    let read = |name: &str| std::fs::read(m.dir.join(name));
    let original: serde_json::Value = serde_json::from_slice(&read("config.json").map_err(|e| fail(format!("config.json: {e}")))?)
        .map_err(|e| fail(format!("config.json: {e}")))?;
    let (config, weights) = fit::export_folder(be, tuner, &original, labels).await.map_err(fail)?;
    std::fs::create_dir_all(out).map_err(|e| fail(format!("cannot create `{}`: {e}", out.display())))?;
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(out.join(name), bytes).map_err(|e| fail(format!("cannot write `{}`: {e}", out.join(name).display())))
    };
    write("config.json", config.as_bytes())?;
    write("model.safetensors", &weights)?;
    // The tokenizer, and a sentence-transformers model's pipeline files (pooling, normalisation) as they were.
    for name in ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "modules.json",
        "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling/config.json", "2_Normalize/config.json"] {
        if let Ok(bytes) = read(name) {
            if let Some(parent) = Path::new(name).parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(out.join(parent)).map_err(|e| fail(format!("cannot create `{}`: {e}", out.display())))?;
            }
            write(name, &bytes)?;
        }
    }
    Ok(())
}

pub(crate) fn cmd_fine_tune(args: &InferArgs, a: &FineTuneArgs) -> Result<(), Fail> {
    if !args.model.model.is_dir() {
        return Err(fail(format!(
            "`{}` is not a folder: fine-tuning reads and writes Hugging Face folders (config.json, model.safetensors, \
             the tokenizer files)",
            args.model.model.display()
        )));
    }
    let m = load_model(&args.model)?;
    // `auto` trains where inference runs: on a software adapter (lavapipe, SwiftShader) the CPU is faster.
    let report = match pollster::block_on(engine::gpu_for(args.device)).map_err(fail)? {
        Some(g) => pollster::block_on(train(&g, &m, a))?,
        None => pollster::block_on(train(&CpuBackend::new(), &m, a))?,
    };
    println!("{report}");
    Ok(())
}
