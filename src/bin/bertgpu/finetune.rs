//! `bertgpu fine-tune`: the whole model fine-tuned on JSON lines, written as a Hugging Face folder that `bertgpu`,
//! `Bert.load` and transformers' `from_pretrained` load.

use std::path::{Path, PathBuf};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::GpuBackend;
use bertgpu::backend::Backend;
use bertgpu::engine::Device;
use bertgpu::training::finetune::{FineTuneTask, FineTuner};
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
}

/// One line of classification data.
#[derive(serde::Deserialize)]
struct Labelled {
    text: String,
    #[serde(default)]
    text_pair: Option<String>,
    label: String,
}

pub(crate) struct FineTuneArgs {
    pub task: Task,
    pub data: PathBuf,
    pub out: PathBuf,
    pub fit: FitOptions,
}

fn fail(what: impl std::fmt::Display) -> Fail {
    Fail::Model(format!("fine-tune: {what}"))
}

/// Reads the data file into rows and the label list (the checkpoint's, when it has a classifier whose labels cover
/// the data; else the labels in order of first appearance, for a new classifier).
fn classification_rows(m: &crate::LoadedModel, a: &FineTuneArgs) -> Result<(Vec<Row>, Vec<String>, bool), Fail> {
    let text = std::fs::read_to_string(&a.data)
        .map_err(|e| fail(format!("cannot read training data `{}`: {e}", a.data.display())))?;
    let mut examples = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let ex: Labelled = serde_json::from_str(line).map_err(|e| {
            fail(format!("{}:{}: expected {{\"text\", \"label\"}} (and \"text_pair\" for --task pair) ({e})", a.data.display(), i + 1))
        })?;
        if (a.task == Task::Pair) != ex.text_pair.as_deref().is_some_and(|p| !p.is_empty()) {
            let want = if a.task == Task::Pair { "needs" } else { "must not have" };
            return Err(fail(format!("{}:{}: --task {:?} {want} a \"text_pair\"", a.data.display(), i + 1, a.task)));
        }
        examples.push((i + 1, ex));
    }
    let cfg = &m.model.config;
    let known = cfg.architectures.iter().any(|x| x.ends_with("ForSequenceClassification"))
        && examples.iter().all(|(_, e)| cfg.label2id.contains_key(&e.label));
    let labels: Vec<String> = if known {
        cfg.id2label.values().cloned().collect()
    } else {
        let mut out: Vec<String> = Vec::new();
        for (_, e) in &examples {
            if !out.contains(&e.label) {
                out.push(e.label.clone());
            }
        }
        out
    };
    if labels.len() < 2 {
        return Err(fail(format!("a classifier needs at least 2 labels; the data has {labels:?}")));
    }
    let mut rows = Vec::with_capacity(examples.len());
    for (line, e) in &examples {
        let enc = m.model.tokenizer.encode(&e.text, e.text_pair.as_deref())
            .map_err(|err| fail(format!("{}:{line}: {err}", a.data.display())))?;
        let class = labels.iter().position(|l| *l == e.label).expect("every label is listed") as u32;
        rows.push(Row { input_ids: enc.ids, token_type_ids: enc.type_ids, target: RowTarget::Class(class) });
    }
    Ok((rows, labels, known))
}

async fn train<B: Backend>(be: &B, m: &crate::LoadedModel, a: &FineTuneArgs) -> Result<serde_json::Value, Fail> {
    let (rows, labels, known) = classification_rows(m, a)?;
    let weights = m.model.weights().map_err(fail)?;
    let cfg = &m.model.config;
    let n = (!known).then_some(labels.len());
    let mut tuner = FineTuner::new(be, cfg, &weights, FineTuneTask::Sequence, n, a.fit.seed).map_err(fail)?;
    drop(weights);
    eprintln!(
        "bertgpu: fine-tuning every parameter on {} examples, {} labels ({}), {} backend",
        rows.len(),
        labels.len(),
        if known { "the checkpoint's classifier" } else { "a new classifier" },
        be.name()
    );
    let report = fit::fit(be, &mut tuner, &rows, cfg.pad_token_id, &a.fit, |p| {
        let line = match p {
            Progress::Step(s) => serde_json::to_string(s),
            Progress::Epoch(e) => serde_json::to_string(e),
        };
        eprintln!("{}", line.unwrap_or_default());
    })
    .await
    .map_err(fail)?;
    write_folder(be, &tuner, m, &a.out, &labels).await?;
    Ok(json!({ "labels": labels, "epochs": report.epochs, "out": a.out }))
}

/// config.json, model.safetensors and the original folder's tokenizer files into `out`.
async fn write_folder<B: Backend>(be: &B, tuner: &FineTuner<B>, m: &crate::LoadedModel, out: &Path, labels: &[String])
    -> Result<(), Fail> {
    let read = |name: &str| std::fs::read(m.dir.join(name));
    let original: serde_json::Value = serde_json::from_slice(&read("config.json").map_err(|e| fail(format!("config.json: {e}")))?)
        .map_err(|e| fail(format!("config.json: {e}")))?;
    let (config, weights) = fit::export_folder(be, tuner, &original, Some(labels)).await.map_err(fail)?;
    std::fs::create_dir_all(out).map_err(|e| fail(format!("cannot create `{}`: {e}", out.display())))?;
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(out.join(name), bytes).map_err(|e| fail(format!("cannot write `{}`: {e}", out.join(name).display())))
    };
    write("config.json", config.as_bytes())?;
    write("model.safetensors", &weights)?;
    for name in ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"] {
        if let Ok(bytes) = read(name) {
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
    let report = match args.device {
        Device::Cpu => pollster::block_on(train(&CpuBackend::new(), &m, a))?,
        Device::Gpu | Device::Auto => match GpuBackend::new_blocking() {
            // `auto` trains where inference runs: on a software adapter (lavapipe, SwiftShader) the CPU is faster.
            Ok(g) if args.device == Device::Gpu || g.gpu().info.device_type != wgpu::DeviceType::Cpu => {
                pollster::block_on(train(&g, &m, a))?
            }
            Err(e) if args.device == Device::Gpu => return Err(fail(e)),
            _ => pollster::block_on(train(&CpuBackend::new(), &m, a))?,
        },
    };
    println!("{report}");
    Ok(())
}
