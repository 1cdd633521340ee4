//! `bertgpu zero-shot`: zero-shot classification through an NLI checkpoint ([`bertgpu::tasks::zero_shot`]), as
//! transformers' `zero-shot-classification` pipeline. Each line is `{"text", "labels": [...]}`, or plain text (or a
//! JSON line without "labels") scored against `--labels`; the answer is `[{"label", "score"}, ...]` best first.

use bertgpu::engine::Engine;
use bertgpu::tasks::zero_shot::{check_labels, hypothesis, ZeroShotOptions, DEFAULT_TEMPLATE};
use serde_json::Value;

use crate::lines::{run_lines, shape_hint, Input, Shape};
use crate::load::{load_infer, InferArgs};
use crate::{load_model, Fail};

#[derive(clap::Args, Debug)]
pub(crate) struct ZeroShotArgs {
    #[command(flatten)]
    infer: InferArgs,
    /// The candidate labels of lines that do not carry their own, comma-separated (`--labels sports,politics`)
    #[arg(long, value_name = "A,B,...", value_parser = parse_labels)]
    labels: Option<Labels>,
    /// The hypothesis, with {} where the label goes
    #[arg(long, value_name = "T", default_value = DEFAULT_TEMPLATE)]
    template: String,
    /// Score each label on its own (softmax of its contradiction and entailment logits) instead of one softmax of
    /// the entailment logits over the labels
    #[arg(long)]
    multi_label: bool,
}

/// `--labels`, split at commas and trimmed.
#[derive(Clone, Debug)]
pub(crate) struct Labels(Vec<String>);

fn parse_labels(s: &str) -> Result<Labels, String> {
    let labels: Vec<String> = s.split(',').map(|l| l.trim().to_string()).collect();
    check_labels(&labels).map_err(|e| e.to_string())?;
    Ok(Labels(labels))
}

/// Lines per batch: consecutive lines with the same labels run as one call, their pairs batched together.
const LINES_PER_BATCH: usize = 8;

pub(crate) fn cmd_zero_shot(args: ZeroShotArgs) -> Result<(), Fail> {
    let opts = ZeroShotOptions { template: args.template, multi_label: args.multi_label };
    // A template that formats no label is the command's error, not every line's.
    hypothesis(&opts.template, "x").map_err(|e| Fail::Model(e.to_string()))?;
    let m = load_model(&args.infer.model)?;
    let engine = load_infer(&m, &args.infer)?;
    bertgpu::with_model!(&engine, e => e.nli_labels())
        .map_err(|e| Fail::Model(format!("cannot use model `{}`: {e}", m.dir.display())))?;
    let default = args.labels.map(|l| l.0);
    run_lines(Shape::ZeroShot, LINES_PER_BATCH, |inputs| {
        let mut out: Vec<Result<Value, String>> = Vec::with_capacity(inputs.len());
        let mut start = 0;
        while start < inputs.len() {
            let labels = labels_of(&inputs[start], default.as_deref());
            let end = (start + 1..inputs.len())
                .find(|&i| labels_of(&inputs[i], default.as_deref()) != labels)
                .unwrap_or(inputs.len());
            let group = &inputs[start..end];
            out.extend(match labels {
                Ok(labels) => run(&engine, group, labels, &opts),
                Err(e) => group.iter().map(|_| Err(e.clone())).collect(),
            });
            start = end;
        }
        out
    })
}

/// A line's candidate labels: its own, else `--labels`.
fn labels_of<'a>(input: &'a Input, default: Option<&'a [String]>) -> Result<&'a [String], String> {
    match input {
        Input::ZeroShot { labels: Some(l), .. } => Ok(l),
        Input::ZeroShot { labels: None, .. } => default.ok_or_else(|| {
            format!("no candidate labels: send {} or pass --labels", shape_hint(Shape::ZeroShot))
        }),
        _ => Err(format!("zero-shot needs {}", shape_hint(Shape::ZeroShot))),
    }
}

/// Lines with the same labels in one call; where it fails, each line alone, so the error lands on its line.
fn run(engine: &Engine, group: &[Input], labels: &[String], opts: &ZeroShotOptions) -> Vec<Result<Value, String>> {
    let call = |inputs: &[Input]| {
        let texts: Vec<&str> = inputs.iter().map(|i| i.text_and_pair().0).collect();
        pollster::block_on(engine.zero_shot(&texts, labels, opts))
            .map_err(|e| e.to_string())
    };
    match call(group) {
        Ok(results) if results.len() == group.len() => results.into_iter().map(|r| Ok(serde_json::json!(r))).collect(),
        _ if group.len() > 1 => group.iter().flat_map(|i| run(engine, std::slice::from_ref(i), labels, opts)).collect(),
        Ok(_) => vec![Err("internal error: wrong number of results".into())],
        Err(e) => vec![Err(e)],
    }
}
