//! `bertgpu fine-tune`: the whole model fine-tuned on JSON lines, written as a Hugging Face folder that `bertgpu`,
//! `Bert.load` and transformers' `from_pretrained` load.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::engine;
use bertgpu::training::fit::checkpoint::{self, Checkpoints, DirStore};
use bertgpu::training::fit::{FitOptions, Hooks, Progress};
use bertgpu::training::job::{self, Examples, JobOptions, JobTask};
use bertgpu::training::lora::LoraOptions;
use serde_json::json;

use crate::{load_model, Fail, InferArgs};

pub(crate) struct FineTuneArgs {
    pub task: JobTask,
    pub data: PathBuf,
    pub out: PathBuf,
    pub doc_stride: usize,
    /// Train the top this many layers (and the head); `None`: all.
    pub layers: Option<usize>,
    pub fit: FitOptions,
    /// LoRA adapters instead of the weights themselves.
    pub lora: Option<LoraOptions>,
    pub checkpoints: CheckpointArgs,
}

/// `--checkpoint-dir`, `--checkpoint-every`, `--keep`, `--resume` of the training commands.
#[derive(clap::Args, Debug)]
pub(crate) struct CheckpointArgs {
    /// Save the whole training state into DIR as it goes (every --checkpoint-every steps, at each epoch's end, and
    /// at Ctrl-C), so that --resume can continue an interrupted run
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// Optimiser steps between two checkpoints
    #[arg(long, value_name = "STEPS", default_value_t = checkpoint::DEFAULT_EVERY, requires = "checkpoint_dir")]
    checkpoint_every: usize,
    /// How many of the newest checkpoints to keep
    #[arg(long, value_name = "N", default_value_t = checkpoint::DEFAULT_KEEP, requires = "checkpoint_dir")]
    keep: usize,
    /// Continue from the newest intact checkpoint in --checkpoint-dir (the other options as in the first run); with
    /// none there yet, start from the beginning
    #[arg(long, requires = "checkpoint_dir")]
    resume: bool,
}

impl CheckpointArgs {
    /// The folder's store with these settings, or `None` without `--checkpoint-dir`.
    pub(crate) fn open(&self) -> Result<Option<Checkpoints<DirStore>>, Fail> {
        let Some(dir) = &self.checkpoint_dir else { return Ok(None) };
        let mut c = Checkpoints::new(DirStore::open(dir).map_err(fail)?);
        (c.every, c.keep, c.resume) = (self.checkpoint_every, self.keep, self.resume);
        Ok(Some(c))
    }
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

async fn train<B: Backend>(be: &B, m: &crate::LoadedModel, a: &FineTuneArgs) -> Result<serde_json::Value, Fail> {
    let text = std::fs::read_to_string(&a.data)
        .map_err(|e| fail(format!("cannot read training data `{}`: {e}", a.data.display())))?;
    let at = |e: bertgpu::Error| fail(format!("{}: {e}", a.data.display()));
    if a.task == JobTask::Embed && a.fit.batch_size < 2 {
        return Err(fail("--task embed needs --batch-size of at least 2: the other pairs of a batch are the negatives"));
    }
    let (cfg, tok) = (&m.model.config, &m.model.tokenizer);
    let examples = Examples::parse(a.task, &text).map_err(at)?;
    let prepared = job::prepare(cfg, tok, a.task, &examples, a.doc_stride).map_err(at)?;
    drop(examples);
    let what = match a.lora {
        Some(l) => format!("LoRA r {} alpha {} on {:?} of a frozen encoder; {}", l.r, l.alpha, l.target_modules(),
            prepared.describe(Some(0)).replace("the head alone", "the adapters and the head")),
        None => prepared.describe(a.layers),
    };
    eprintln!("bertgpu: {what} ({}), {} backend", a.task.name(), be.name());
    let original = read_config(m)?;
    let weights = m.model.weights().map_err(fail)?;
    let opts = JobOptions { task: a.task, layers: a.layers, doc_stride: a.doc_stride, fit: a.fit, lora: a.lora };
    let mut progress = CliHooks::new();
    let mut checkpoints = a.checkpoints.open()?;
    let done = job::run(be, cfg, tok, &weights, &original, &opts, &prepared, &mut progress, checkpoints.as_mut())
        .await
        .map_err(fail)?;
    drop(weights);
    if let Some((adapter_config, adapter_weights)) = done.adapter.as_ref().filter(|_| a.lora.is_some_and(|l| !l.merge)) {
        // peft's files, pointing at the base model's folder.
        let mut cfg: serde_json::Value = serde_json::from_str(adapter_config).map_err(fail)?;
        let base = std::fs::canonicalize(&m.dir).unwrap_or_else(|_| m.dir.clone());
        cfg["base_model_name_or_path"] = json!(base.display().to_string());
        let text = serde_json::to_string_pretty(&cfg).map_err(fail)? + "\n";
        write_folder(m, &a.out, &[("adapter_config.json", text.as_bytes()), ("adapter_model.safetensors", adapter_weights)])?;
    } else {
        write_folder(m, &a.out, &[("config.json", done.config_json.as_bytes()), ("model.safetensors", &done.safetensors)])?;
    }
    Ok(json!({ "labels": done.labels, "epochs": done.report.epochs, "best_epoch": done.report.best_epoch, "out": a.out }))
}

/// Set by Ctrl-C (SIGINT): training stops after the step in progress.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The training commands' hooks: each progress event a JSON line on stderr; after Ctrl-C, a stop between two steps
/// (with `--checkpoint-dir`, the loop saves a checkpoint there that `--resume` continues from).
pub(crate) struct CliHooks;

impl CliHooks {
    pub(crate) fn new() -> CliHooks {
        // Once per process; a second Ctrl-C while stopping is then the default (the process ends).
        static HANDLER: std::sync::Once = std::sync::Once::new();
        HANDLER.call_once(|| {
            let _ = ctrlc::set_handler(|| {
                if INTERRUPTED.swap(true, Ordering::SeqCst) {
                    std::process::exit(130);
                }
                eprintln!("bertgpu: stopping after this step (Ctrl-C again to quit at once)");
            });
        });
        CliHooks
    }
}

impl Hooks for CliHooks {
    fn progress(&mut self, p: Progress<'_>) -> bertgpu::Result<()> {
        let line = match p {
            Progress::Step(s) => serde_json::to_string(s),
            Progress::Epoch(e) => serde_json::to_string(e),
            Progress::Checkpoint(c) => serde_json::to_string(c),
            Progress::Memory(m) => Ok(format!("bertgpu: training holds {m} besides the model")),
        };
        eprintln!("{}", line.unwrap_or_default());
        if let Progress::Step(s) = p {
            hold_after(s.step);
        }
        self.check()
    }

    async fn pause(&mut self) -> bertgpu::Result<()> {
        self.check()
    }
}

/// With `BERTGPU_HOLD_AFTER_STEP=N` (for tests that stop a run at a known step): after step N's line, wait for
/// Ctrl-C (at most a minute) before going on, so that the stop falls between steps N and N + 1 however the machine
/// schedules the two processes.
fn hold_after(step: usize) {
    static HOLD: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let hold = HOLD.get_or_init(|| std::env::var("BERTGPU_HOLD_AFTER_STEP").ok().and_then(|v| v.parse().ok()));
    if *hold == Some(step) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !INTERRUPTED.load(Ordering::SeqCst) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

impl CliHooks {
    fn check(&self) -> bertgpu::Result<()> {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err(bertgpu::Error::Stopped("interrupted (Ctrl-C)".into()));
        }
        Ok(())
    }
}

/// Whether `path` is a `.gguf` file (LoRA trains over it, its weights as stored).
fn is_gguf(path: &Path) -> bool {
    path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// A `.gguf`'s config.json, tokenizer.json and tokenizer_config.json, as the file records them (`None` where it
/// has none).
fn gguf_files(path: &Path) -> Result<[(&'static str, Option<String>); 3], Fail> {
    let g = bertgpu::weights::gguf::bert::read_bert_header(path).map_err(fail)?;
    Ok([("config.json", Some(g.config_json)), ("tokenizer.json", Some(g.tokenizer_json)), ("tokenizer_config.json", g.tokenizer_config_json)])
}

pub(crate) fn read_config(m: &crate::LoadedModel) -> Result<serde_json::Value, Fail> {
    if is_gguf(&m.dir) {
        let [(_, config), ..] = gguf_files(&m.dir)?;
        return serde_json::from_str(config.as_deref().unwrap_or_default()).map_err(|e| fail(format!("config.json: {e}")));
    }
    let bytes = std::fs::read(m.dir.join("config.json")).map_err(|e| fail(format!("config.json: {e}")))?;
    serde_json::from_slice(&bytes).map_err(|e| fail(format!("config.json: {e}")))
}

/// `files` (config.json and model.safetensors, or a LoRA adapter's two) and the original folder's other files
/// ([`job::FOLDER_FILES`]) into `out`.
pub(crate) fn write_folder(m: &crate::LoadedModel, out: &Path, files: &[(&str, &[u8])]) -> Result<(), Fail> {
    let read = |name: &str| std::fs::read(m.dir.join(name));
    std::fs::create_dir_all(out).map_err(|e| fail(format!("cannot create `{}`: {e}", out.display())))?;
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(out.join(name), bytes).map_err(|e| fail(format!("cannot write `{}`: {e}", out.join(name).display())))
    };
    for (name, bytes) in files {
        write(name, bytes)?;
    }
    if is_gguf(&m.dir) {
        // A .gguf's tokenizer as it records it (the written config.json, if any, is the trained model's).
        for (name, text) in gguf_files(&m.dir)?.into_iter().skip(1) {
            if let Some(text) = text {
                write(name, text.as_bytes())?;
            }
        }
        return Ok(());
    }
    // The tokenizer, and a sentence-transformers model's pipeline files (pooling, normalisation) as they were.
    for name in job::FOLDER_FILES {
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
    if args.activations == crate::load::Activations::F16 {
        return Err(fail("fine-tuning needs f32 activations: --activations f16 is for inference only"));
    }
    if !args.model.model.is_dir() && !(is_gguf(&args.model.model) && a.lora.is_some()) {
        return Err(fail(format!(
            "`{}` is not a folder: fine-tuning reads and writes Hugging Face folders (config.json, model.safetensors, \
             the tokenizer files); a .gguf trains LoRA adapters only (--lora R), its weights kept as stored",
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
