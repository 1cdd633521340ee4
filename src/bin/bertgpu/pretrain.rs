//! `bertgpu pretrain`: pre-training (masked LM, and next-sentence prediction when the model has its head) on a
//! corpus, written as a Hugging Face folder: continued from a checkpoint (`--model`), or from scratch (`--config` and
//! `--tokenizer`: weights initialised as transformers does, `training::init`).

use std::path::{Path, PathBuf};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::engine::{self, Device};
use bertgpu::loader::{self, LoadOptions, ModelFiles, ModelSource, WeightsFile};
use bertgpu::training::init::initial_model;
use bertgpu::training::fit::{FitOptions, Hooks, Progress};
use bertgpu::training::job;
use bertgpu::training::pretrain_data::{parse_corpus, CorpusFormat, PretrainOptions, PretrainRow};
use clap::Args;
use serde_json::json;

use crate::finetune::{read_config, write_folder, CheckpointArgs, CliHooks};
use crate::{load_model, Fail, LoadedModel, ModelArgs};

#[derive(Args, Debug)]
pub(crate) struct PretrainArgs {
    /// The checkpoint to continue: a Hugging Face folder with a masked-LM head (BertForPreTraining, BertForMaskedLM)
    #[arg(long, short = 'm', value_name = "M", required_unless_present = "config", conflicts_with = "config")]
    model: Option<PathBuf>,
    /// Pre-train from scratch: a BERT config.json (`architectures` ["BertForMaskedLM"] for the masked LM alone),
    /// every weight drawn as transformers initialises them, from --seed
    #[arg(long, value_name = "FILE", requires = "tokenizer")]
    config: Option<PathBuf>,
    /// With --config: the tokenizer's folder (tokenizer.json or vocab.txt, and tokenizer_config.json), e.g. from
    /// `bertgpu train-tokenizer`
    #[arg(long, value_name = "DIR", requires = "config")]
    tokenizer: Option<PathBuf>,
    /// Truncate inputs to N tokens, [CLS]/[SEP] included (default: 128, or the model's max_position_embeddings if
    /// lower)
    #[arg(long, value_name = "N")]
    max_length: Option<usize>,
    /// With --model: a LoRA adapter folder as peft saves it, folded into the model's weights at load
    #[arg(long, value_name = "DIR", requires = "model")]
    adapter: Option<PathBuf>,
    /// Where to run: `auto` uses the GPU when an adapter exists
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    device: Device,
    /// The corpus: plain text (a blank line between documents, one sentence or line per line) or .jsonl
    /// ({"text": ...} per document)
    #[arg(long, value_name = "CORPUS")]
    data: PathBuf,
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Optimiser steps (the schedule ends there; the rows are reshuffled each time they have all been seen)
    #[arg(long, default_value_t = FitOptions::pretraining().max_steps.unwrap_or_default())]
    steps: usize,
    #[arg(long, default_value_t = FitOptions::pretraining().batch_size)]
    batch_size: usize,
    #[arg(long, default_value_t = FitOptions::pretraining().learning_rate)]
    lr: f32,
    /// Fraction of the steps with a linearly rising learning rate (then it falls linearly to 0)
    #[arg(long, default_value_t = FitOptions::pretraining().warmup)]
    warmup: f32,
    #[arg(long, default_value_t = FitOptions::pretraining().weight_decay)]
    weight_decay: f32,
    /// Fraction of the tokens selected for the masked-LM loss (of those 80% [MASK], 10% random, 10% unchanged);
    /// default 0.15, ModernBERT's 0.3
    #[arg(long)]
    mlm_probability: Option<f64>,
    /// Select whole words (every piece of a word together)
    #[arg(long)]
    whole_word_mask: bool,
    /// Mask the rows again every epoch (RoBERTa's dynamic masking) instead of once for the run (BERT's)
    #[arg(long)]
    dynamic_masking: bool,
    /// The masked LM alone: segments of one document instead of sentence pairs, no next-sentence (ALBERT's
    /// AlbertForPreTraining: sentence-order) loss
    #[arg(long)]
    no_nsp: bool,
    /// Fraction of the sentence pairs given a shorter random length (Google's BERT: 0.1), in [0, 1]
    #[arg(long, default_value_t = PretrainOptions::default().short_seq_prob)]
    short_seq_prob: f64,
    /// Fraction of the rows held out and evaluated after each pass over the data
    #[arg(long, default_value_t = FitOptions::pretraining().validation_split)]
    validation_split: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Train without dropout (by default the checkpoint's, as transformers' Trainer)
    #[arg(long)]
    no_dropout: bool,
    /// Write every batch trained on to FILE, one JSON line per step (`step`, and the rows' `input_ids`,
    /// `token_type_ids`, masked-LM `labels` with -100 where no loss is taken, `next_sentence_label`: the names
    /// transformers' BertForPreTraining takes), to replay the same batches elsewhere
    #[arg(long, value_name = "FILE")]
    save_batches: Option<PathBuf>,
    #[command(flatten)]
    checkpoints: CheckpointArgs,
}

fn fail(what: impl std::fmt::Display) -> Fail {
    Fail::Model(format!("pretrain: {what}"))
}

async fn train<B: Backend>(be: &B, m: &LoadedModel, original: &serde_json::Value, a: &PretrainArgs)
    -> Result<serde_json::Value, Fail> {
    let text = std::fs::read_to_string(&a.data).map_err(|e| fail(format!("cannot read the corpus `{}`: {e}", a.data.display())))?;
    let at = |e: bertgpu::Error| fail(format!("{}: {e}", a.data.display()));
    let format = CorpusFormat::from_file_name(&a.data.to_string_lossy());
    let corpus = parse_corpus(&text, format).map_err(at)?;
    // --max-length: the rows' length, [CLS] and [SEP]s included (default 128, or the model's limit if lower).
    let limit = m.model.config.max_position_embeddings;
    let max_length = a.max_length.unwrap_or(PretrainOptions::default().max_length.min(limit));
    if max_length > limit {
        return Err(fail(format!("--max-length {max_length} is beyond the model's {limit} positions")));
    }
    let data = PretrainOptions {
        max_length,
        mlm_probability: a.mlm_probability.unwrap_or(PretrainOptions::family_mlm_probability(m.model.config.family)),
        whole_word_mask: a.whole_word_mask,
        nsp: !a.no_nsp,
        short_seq_prob: a.short_seq_prob,
        dynamic_masking: a.dynamic_masking,
        seed: a.seed,
        ..PretrainOptions::default()
    };
    let fit = FitOptions {
        learning_rate: a.lr,
        batch_size: a.batch_size,
        warmup: a.warmup,
        weight_decay: a.weight_decay,
        validation_split: a.validation_split,
        seed: a.seed,
        dropout: !a.no_dropout,
        max_steps: Some(a.steps),
        ..FitOptions::pretraining()
    };
    eprintln!("bertgpu: pre-training on {} documents, {} backend", corpus.len(), be.name());
    let (cfg, tok) = (&m.model.config, &m.model.tokenizer);
    let weights = m.model.weights().map_err(fail)?;
    let mut progress = SavingHooks { inner: CliHooks::new(), save: None, step: 1 };
    if let Some(path) = &a.save_batches {
        // The rows job::pretrain trains on, made again the same way (seeded): the hooks see them as indices.
        let rows = job::pretrain_corpus_rows(cfg, &weights, tok, &corpus, &data).map_err(at)?;
        let file = std::fs::File::create(path).map_err(|e| fail(format!("cannot write `{}`: {e}", path.display())))?;
        progress.save = Some(Saved { epoch: 1, rows: rows.rows.clone(), data: rows, out: std::io::BufWriter::new(file) });
    }
    let mut checkpoints = a.checkpoints.open()?;
    let done = job::pretrain(be, cfg, tok, &weights, original, &corpus, &data, &fit, &mut progress, checkpoints.as_mut())
        .await
        .map_err(at)?;
    if let Some(Saved { mut out, .. }) = progress.save.take() {
        use std::io::Write;
        out.flush().map_err(|e| fail(format!("--save-batches: {e}")))?;
    }
    drop(weights);
    write_folder(m, &a.out, &[("config.json", done.config_json.as_bytes()), ("model.safetensors", &done.safetensors)])?;
    Ok(json!({ "steps": done.report.steps.len(), "epochs": done.report.epochs, "out": a.out }))
}

/// `--save-batches`' file and the rows it writes from.
struct Saved {
    data: job::PretrainData,
    /// The rows of epoch `epoch` ([`job::PretrainData::epoch`]).
    epoch: usize,
    rows: Vec<PretrainRow>,
    out: std::io::BufWriter<std::fs::File>,
}

/// The CLI's progress, and with `--save-batches` each batch's rows written as a JSON line.
struct SavingHooks {
    inner: CliHooks,
    save: Option<Saved>,
    /// The optimiser step the next batch belongs to.
    step: usize,
}

impl Hooks for SavingHooks {
    fn progress(&mut self, p: Progress<'_>) -> bertgpu::Result<()> {
        if let Progress::Step(s) = &p {
            self.step = s.step + 1;
        }
        self.inner.progress(p)
    }

    async fn pause(&mut self) -> bertgpu::Result<()> {
        self.inner.pause().await
    }

    fn batch(&mut self, epoch: usize, which: &[usize]) -> bertgpu::Result<()> {
        let Some(s) = &mut self.save else { return Ok(()) };
        if s.epoch != epoch {
            s.rows = s.data.epoch(epoch);
            s.epoch = epoch;
        }
        let (rows, out) = (&s.rows, &mut s.out);
        let rows: Vec<&PretrainRow> = which.iter().map(|&i| &rows[i]).collect();
        // ALBERT's AlbertForPreTraining names its pair labels `sentence_order_label`.
        let pair_label = if s.data.options.sentence_order { "sentence_order_label" } else { "next_sentence_label" };
        let mut line = json!({
            "step": self.step,
            "input_ids": rows.iter().map(|r| &r.input_ids).collect::<Vec<_>>(),
            "token_type_ids": rows.iter().map(|r| &r.token_type_ids).collect::<Vec<_>>(),
            "labels": rows.iter().map(|r| &r.mlm_labels).collect::<Vec<_>>(),
        });
        line[pair_label] = json!(rows.iter().map(|r| r.nsp_label).collect::<Option<Vec<_>>>());
        use std::io::Write;
        writeln!(out, "{line}").map_err(|e| bertgpu::Error::Input(format!("--save-batches: {e}")))
    }
}

/// A model from scratch: `config`'s BERT with weights drawn from `seed`, and the tokenizer of the folder `tokenizer`
/// (whose files the output folder copies).
fn from_scratch(config: &Path, tokenizer: &Path, max_length: Option<usize>, seed: u64)
    -> Result<(LoadedModel, serde_json::Value), Fail> {
    let text = std::fs::read_to_string(config).map_err(|e| fail(format!("cannot read `{}`: {e}", config.display())))?;
    let (config_json, weights) = initial_model(&text, seed).map_err(|e| fail(format!("{}: {e}", config.display())))?;
    if !tokenizer.is_dir() {
        return Err(fail(format!("--tokenizer `{}` is not a folder", tokenizer.display())));
    }
    let read = |name: &str| std::fs::read(tokenizer.join(name)).ok();
    let files = ModelFiles {
        config: config_json.clone().into_bytes(),
        tokenizer: read("tokenizer.json"),
        vocab: read("vocab.txt"),
        tokenizer_config: read("tokenizer_config.json"),
        weights: WeightsFile::Bytes(Box::new(weights)),
        adapter: None,
        sentence: Vec::new(),
    };
    let model = loader::load(ModelSource::Files(files), &LoadOptions { max_length })
        .map_err(|e| fail(format!("{} with the tokenizer in `{}`: {e}", config.display(), tokenizer.display())))?;
    let original = serde_json::from_str(&config_json).map_err(|e| fail(format!("config.json: {e}")))?;
    Ok((LoadedModel { dir: tokenizer.to_path_buf(), model }, original))
}

pub(crate) fn cmd_pretrain(a: &PretrainArgs) -> Result<(), Fail> {
    let (m, original) = match (&a.model, &a.config, &a.tokenizer) {
        (Some(model), _, _) => {
            if !model.is_dir() {
                return Err(fail(format!(
                    "`{}` is not a folder: pre-training reads and writes Hugging Face folders",
                    model.display()
                )));
            }
            let m = load_model(&ModelArgs { model: model.clone(), max_length: a.max_length, adapter: a.adapter.clone() })?;
            let original = read_config(&m)?;
            (m, original)
        }
        (None, Some(config), Some(tokenizer)) => from_scratch(config, tokenizer, a.max_length, a.seed)?,
        _ => return Err(fail("give --model, or --config and --tokenizer")),
    };
    let report = match pollster::block_on(engine::gpu_for(a.device)).map_err(fail)? {
        Some(g) => pollster::block_on(train(&g, &m, &original, a))?,
        None => pollster::block_on(train(&CpuBackend::new(), &m, &original, a))?,
    };
    println!("{report}");
    Ok(())
}
