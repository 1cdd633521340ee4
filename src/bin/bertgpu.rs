//! The `bertgpu` command line: a thin shim over `bertgpu::tasks`.
//!
//! `bertgpu <command> --model M [options]`, M a Hugging Face-style folder (or a `.gguf` file).
//!
//! Input (stdin), one line per item:
//! - a JSON object: `{"text": ..., "text_pair": ...}` (`text_pair` optional), or for `qa`
//!   `{"question": ..., "context": ...}`; other keys are ignored;
//! - any other line is taken as plain text (the whole line, without its `\n` / `\r\n`). A line whose first
//!   non-blank character is `{` must be a valid JSON object: a broken one is an error, not text.
//! - An empty or whitespace-only plain line is an error (`{"error": "empty line ..."}`): it is nearly always a
//!   stray newline. To process an empty text on purpose send `{"text": ""}`.
//!
//! Output (stdout): exactly one JSON value per input line, in order; a line that cannot be processed gives
//! `{"error": "..."}` and the following lines go on. Exit status: 0 when all input was read (even if some lines
//! had errors), 2 when the model cannot be loaded or the command is not available (message on stderr), 1 when
//! stdin/stdout fail. Never a panic trace: a bug prints one line on stderr.

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bertgpu::config::BertConfig;
use bertgpu::heads::token_classifier::Aggregation as TokenAggregation;
use bertgpu::tasks::{self, EmbedOptions, Engine};
use bertgpu::tokenizer::{Encoded, Tokenizer};
use bertgpu::weights::Weights;
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};

#[derive(Parser)]
#[command(name = "bertgpu", version, about = "BERT on the GPU (wgpu) and the CPU: embeddings, fill-mask, classification, NER, QA")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone, Debug)]
struct ModelArgs {
    /// Model: a Hugging Face-style folder (config.json, model.safetensors, tokenizer.json or vocab.txt) or a .gguf
    #[arg(long, short = 'm', value_name = "M")]
    model: PathBuf,
    /// Truncate inputs to N tokens, [CLS]/[SEP] included (default: the model's max_position_embeddings)
    #[arg(long, value_name = "N")]
    max_length: Option<usize>,
}

#[derive(Args, Clone, Debug)]
struct InferArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Where to run: `auto` uses the GPU when an adapter exists
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    device: Device,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Device {
    Auto,
    Gpu,
    Cpu,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Pooling {
    /// Mean over the real (non-padding) tokens
    Mean,
    /// The [CLS] token's hidden state
    Cls,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Aggregation {
    /// One entry per token
    None,
    /// Adjacent tokens of one entity merged (`entity_group`)
    Simple,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Dtype {
    F32,
    F16,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Token ids, segment ids and tokens of each line (no padding)
    Tokenize {
        #[command(flatten)]
        model: ModelArgs,
    },
    /// One sentence embedding per line: {"embedding": [...]}
    Embed {
        #[command(flatten)]
        infer: InferArgs,
        #[arg(long, value_enum, default_value_t = Pooling::Mean)]
        pooling: Pooling,
        /// L2-normalize each embedding
        #[arg(long)]
        normalize: bool,
        /// Lines run through the model together
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
        batch_size: u32,
    },
    /// Predictions for the [MASK] token: [{"score", "token", "token_str", "sequence"}, ...]
    FillMask {
        #[command(flatten)]
        infer: InferArgs,
        #[arg(long, default_value_t = 5, value_parser = at_least_one())]
        top_k: usize,
    },
    /// Sequence classification (text or text pair): [{"label", "score"}, ...] best first
    Classify {
        #[command(flatten)]
        infer: InferArgs,
        /// Keep the K best labels (default: all)
        #[arg(long, value_parser = at_least_one())]
        top_k: Option<usize>,
        /// A classifier head trained with `train-head` (safetensors), used instead of the checkpoint's
        #[arg(long, value_name = "FILE")]
        head: Option<PathBuf>,
    },
    /// Next-sentence prediction on {"text", "text_pair"}: {"is_next": p}
    NextSentence {
        #[command(flatten)]
        infer: InferArgs,
    },
    /// Token classification: [{"entity", "score", "index", "word", "start", "end"}, ...]
    Ner {
        #[command(flatten)]
        infer: InferArgs,
        #[arg(long, value_enum, default_value_t = Aggregation::None)]
        aggregation: Aggregation,
    },
    /// Extractive question answering on {"question", "context"}: {"answer", "score", "start", "end"}
    Qa {
        #[command(flatten)]
        infer: InferArgs,
    },
    /// ELECTRA replaced-token detection (a discriminator checkpoint): [{"index", "token", "start", "end", "score"}, ...]
    /// for every token but the special ones (score: the probability that it was replaced)
    ReplacedTokens {
        #[command(flatten)]
        infer: InferArgs,
    },
    /// Rerank documents for a query with a cross-encoder, on {"query", "documents": [...]}: [{"index", "score",
    /// "document"}, ...] best first (score: the cross-encoder's relevance logit)
    Rerank {
        #[command(flatten)]
        infer: InferArgs,
        /// Keep the K best documents (default: all)
        #[arg(long, value_parser = at_least_one())]
        top_k: Option<usize>,
    },
    /// Write the model as a GGUF file
    Convert {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, value_enum)]
        dtype: Dtype,
        #[arg(long, value_name = "FILE.gguf")]
        out: PathBuf,
    },
    /// Train a classifier head on {"text", "label"} lines; progress on stderr
    TrainHead {
        #[command(flatten)]
        infer: InferArgs,
        #[arg(long, value_name = "FILE.jsonl")]
        data: PathBuf,
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        #[arg(long, default_value_t = 20)]
        epochs: usize,
        #[arg(long, default_value_t = 1e-3)]
        lr: f32,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Examples per AdamW step
        #[arg(long, default_value_t = 16)]
        batch_size: usize,
        /// AdamW's decoupled weight decay
        #[arg(long, default_value_t = 0.01)]
        weight_decay: f32,
        /// Fraction held out for early stopping (0 trains on everything for all epochs)
        #[arg(long, default_value_t = 0.1)]
        validation_split: f32,
        /// Add one hidden layer of this many units (ReLU)
        #[arg(long)]
        hidden: Option<usize>,
        #[arg(long, value_enum, default_value_t = Pooling::Mean)]
        pooling: Pooling,
    },
    /// Speed of the backends on this machine: embeddings of a synthetic batch, a table on stdout
    Bench {
        #[command(flatten)]
        infer: InferArgs,
        /// Texts per forward pass
        #[arg(long, default_value_t = 8)]
        batch: usize,
        /// Tokens per text, [CLS] and [SEP] included (every token real: no padding)
        #[arg(long, default_value_t = 128)]
        seq: usize,
        /// Timed runs per backend (after one warm-up run); the table gives the median
        #[arg(long, default_value_t = 3)]
        reps: usize,
    },
}

/// A count option that must be positive (`--top-k 0` would ask for nothing).
fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000)
}

/// Why the command stopped. Every variant maps to an exit status and a one-line message on stderr.
enum Fail {
    /// The model cannot be loaded, or the command cannot run with it: exit 2.
    Model(String),
    /// Reading stdin or writing stdout failed: exit 1.
    Io(io::Error),
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Self {
        Fail::Io(e)
    }
}

fn main() -> ExitCode {
    install_panic_hook();
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS, // e.g. `| head`
        Err(Fail::Io(e)) => {
            eprintln!("bertgpu: i/o error: {e}");
            ExitCode::from(1)
        }
        Err(Fail::Model(msg)) => {
            eprintln!("bertgpu: {msg}");
            ExitCode::from(2)
        }
    }
}

/// A panic is a bug: print one line (message and place) instead of a trace, and exit with Rust's 101.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown error".into());
        let place = info.location().map(|l| format!(" ({}:{})", l.file(), l.line())).unwrap_or_default();
        let msg = msg.replace('\n', " ");
        eprintln!("bertgpu: internal error: {msg}{place}; this is a bug, please report it with the input");
    }));
}

fn run(command: Command) -> Result<(), Fail> {
    match command {
        Command::Tokenize { model } => cmd_tokenize(&model),
        Command::Embed { infer, pooling, normalize, batch_size } => cmd_embed(&infer, pooling, normalize, batch_size),
        Command::FillMask { infer, top_k } => cmd_fill_mask(&infer, top_k),
        Command::Classify { infer, top_k, head: Some(head) } => cmd_classify_head(&infer, top_k, &head),
        Command::Classify { infer, top_k, head: None } => {
            cmd_classify(&infer, top_k)
        }
        Command::NextSentence { infer } => cmd_next_sentence(&infer),
        Command::Ner { infer, aggregation } => cmd_ner(&infer, aggregation),
        Command::Qa { infer } => cmd_qa(&infer),
        Command::Rerank { infer, top_k } => cmd_rerank(&infer, top_k),
        Command::ReplacedTokens { infer } => cmd_replaced_tokens(&infer),
        Command::Convert { model, dtype, out } => {
            use bertgpu::weights::gguf::convert;
            let dtype = match dtype {
                Dtype::F32 => bertgpu::dtype::Dtype::F32,
                Dtype::F16 => bertgpu::dtype::Dtype::F16,
                Dtype::Q8_0 => bertgpu::dtype::Dtype::Q8_0,
                Dtype::Q4_0 => bertgpu::dtype::Dtype::Q4_0,
            };
            let r = convert(&model.model, dtype, &out)
                .map_err(|e| Fail::Model(format!("cannot convert `{}`: {e}", model.model.display())))?;
            eprintln!(
                "wrote {} ({} tensors, {} bytes, {:.3} × model.safetensors)",
                out.display(),
                r.tensors,
                r.gguf_bytes,
                r.gguf_bytes as f64 / r.safetensors_bytes as f64
            );
            Ok(())
        }
        Command::TrainHead { infer, data, out, epochs, lr, seed, batch_size, weight_decay, validation_split, hidden, pooling } => {
            let opts = tasks::TrainOptions {
                epochs,
                learning_rate: lr,
                seed,
                batch_size,
                weight_decay,
                validation_split,
                hidden,
                pooling: match pooling {
                    Pooling::Mean => tasks::Pooling::Mean,
                    Pooling::Cls => tasks::Pooling::Cls,
                },
                ..Default::default()
            };
            cmd_train_head(&infer, &data, &out, &opts)
        }
        Command::Bench { infer, batch, seq, reps } => cmd_bench(&infer, batch, seq, reps),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Loading a model folder

/// What the commands need of a model. Grows as tasks land (weights, heads, the engine on a device).
struct LoadedModel {
    dir: PathBuf,
    config: BertConfig,
    tokenizer: Tokenizer,
    /// A `.gguf` holds the weights with the config and tokenizer; a folder's are read when an engine is built.
    weights: Option<Weights>,
}

/// Loads and checks a model folder's config.json and tokenizer, with truncation at `--max-length` or the model's
/// `max_position_embeddings`. Any failure here is "the model cannot be loaded": exit 2 with the reason.
fn load_model(args: &ModelArgs) -> Result<LoadedModel, Fail> {
    let path = &args.model;
    let fail = |why: String| Fail::Model(format!("cannot load model `{}`: {why}", path.display()));
    let (config, mut tokenizer, weights) = if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read it ({e})")))?;
        let g = bertgpu::weights::gguf::load_gguf(&bytes).map_err(|e| fail(e.to_string()))?;
        (g.config, g.tokenizer, Some(g.weights))
    } else {
        if !path.is_dir() {
            let why = if path.exists() { "it is not a folder" } else { "no such folder" };
            return Err(fail(format!(
                "{why}; pass a Hugging Face-style folder with config.json, model.safetensors and tokenizer.json \
                 (scripts/fetch-models.sh fetches the test models into models/)"
            )));
        }
        let config = BertConfig::from_file(path.join("config.json")).map_err(|e| fail(e.to_string()))?;
        // Truncation is set again below; the folder's tokenizer starts at the model's own limit.
        let tokenizer =
            Tokenizer::from_dir(path, config.max_position_embeddings).map_err(|e| fail(e.to_string()))?;
        (config, tokenizer, None)
    };
    let max_positions = config.max_position_embeddings;
    let max_length = args.max_length.unwrap_or(max_positions);
    if max_length > max_positions {
        return Err(fail(format!(
            "--max-length {max_length} exceeds the model's max_position_embeddings ({max_positions})"
        )));
    }
    tokenizer.set_max_length(max_length).map_err(|e| fail(e.to_string()))?;
    // Every id the tokenizer can produce must have a row in the word embeddings.
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(fail(format!(
            "the tokenizer has {} tokens but the config says vocab_size {}: the tokenizer belongs to another model",
            tokenizer.vocab_size(),
            config.vocab_size
        )));
    }
    Ok(LoadedModel { dir: path.clone(), config, tokenizer, weights })
}

// ---------------------------------------------------------------------------------------------------------------
// Commands

fn cmd_tokenize(args: &ModelArgs) -> Result<(), Fail> {
    let m = load_model(args)?;
    run_lines(Shape::Text, 1, |inputs| {
        inputs
            .iter()
            .map(|input| {
                let (text, pair) = input.text_and_pair();
                let e = m.tokenizer.encode(text, pair).map_err(|e| e.to_string())?;
                Ok(json!({ "input_ids": e.ids, "token_type_ids": e.type_ids, "tokens": e.tokens }))
            })
            .collect()
    })
}

fn cmd_embed(args: &InferArgs, pooling: Pooling, normalize: bool, batch_size: u32) -> Result<(), Fail> {
    let m = load_model(&args.model)?;
    let engine = load_engine(&m, args.device)?;
    let opts = EmbedOptions {
        pooling: match pooling {
            Pooling::Mean => tasks::Pooling::Mean,
            Pooling::Cls => tasks::Pooling::Cls,
        },
        normalize,
        batch_size: batch_size as usize,
    };
    run_lines(Shape::Text, opts.batch_size, |inputs| {
        // Tokenize each line on its own (a line that fails gets its own error), embed the rest together.
        let encoded: Vec<Result<Encoded, String>> = inputs
            .iter()
            .map(|i| {
                let (text, pair) = i.text_and_pair();
                engine.tokenizer().encode(text, pair).map_err(|e| e.to_string())
            })
            .collect();
        let ok: Vec<Encoded> = encoded.iter().filter_map(|e| e.as_ref().ok().cloned()).collect();
        let vectors = match pollster::block_on(engine.embed_encoded(&ok, &opts)) {
            Ok(v) => v,
            Err(e) => return vec![Err(e.to_string())], // a batch-level failure: the loop retries line by line
        };
        let mut vectors = vectors.into_iter();
        encoded
            .into_iter()
            .map(|e| {
                e.and_then(|_| vectors.next().map(|v| json!({ "embedding": v })).ok_or_else(|| "no result".to_string()))
            })
            .collect()
    })
}

/// Times `embed` (forward + mean pool + read-back) of `batch` texts of exactly `seq` tokens on each backend the
/// `--device` allows (`auto`: the CPU and, when an adapter exists, the GPU), runs interleaved round-robin so the
/// backends see the same machine load, and prints a Markdown table of medians and ratios.
fn cmd_bench(args: &InferArgs, batch: usize, seq: usize, reps: usize) -> Result<(), Fail> {
    if batch == 0 || seq < 2 || reps == 0 {
        return Err(Fail::Model("bench needs --batch ≥ 1, --seq ≥ 2 ([CLS] and [SEP]) and --reps ≥ 1".into()));
    }
    let mut m = load_model(&args.model)?;
    let max = m.config.max_position_embeddings;
    if seq > max {
        return Err(Fail::Model(format!("--seq {seq} exceeds the model's max_position_embeddings ({max})")));
    }
    m.tokenizer.set_max_length(seq).map_err(|e| Fail::Model(e.to_string()))?;
    // Texts longer than `seq` tokens, cut to exactly `seq` by truncation; each starts differently.
    let words = "the quick brown fox jumps over the lazy dog while seven wizards quietly judge boxing matches";
    let texts: Vec<String> = (0..batch).map(|i| format!("{i} {}", words.repeat(seq / 8 + 2))).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();

    let devices: &[Device] = match args.device {
        Device::Cpu => &[Device::Cpu],
        Device::Gpu => &[Device::Gpu],
        Device::Auto => &[Device::Cpu, Device::Gpu],
    };
    let mut engines = Vec::new();
    for &d in devices {
        match load_engine(&m, d) {
            Ok(e) => engines.push((d, e)),
            Err(Fail::Model(why)) if args.device == Device::Auto && d == Device::Gpu => {
                eprintln!("bertgpu bench: no GPU row ({why})");
            }
            Err(e) => return Err(e),
        }
    }
    let opts = EmbedOptions { pooling: tasks::Pooling::Mean, normalize: true, batch_size: batch };
    let run = |e: &Engine| -> Result<f64, Fail> {
        let start = std::time::Instant::now();
        pollster::block_on(e.embed(&texts, &opts)).map_err(|e| Fail::Model(format!("bench failed: {e}")))?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    };
    let mut times = vec![Vec::with_capacity(reps); engines.len()];
    for (_, e) in &engines {
        run(e)?; // warm-up: pipelines, buffer pools, caches
    }
    for _ in 0..reps {
        for (i, (_, e)) in engines.iter().enumerate() {
            times[i].push(run(e)?);
        }
    }
    // Matmul FLOPs of the encoder (2 per multiply-add): per layer, QKV + output projection (4·H²) and the
    // feed-forward (2·H·I) per token, plus QKᵀ and AV (2·T·H per token).
    let (h, i, l) = (m.config.hidden_size as f64, m.config.intermediate_size as f64, m.config.num_hidden_layers as f64);
    let tokens = (batch * seq) as f64;
    let gflop = l * 2.0 * tokens * (4.0 * h * h + 2.0 * h * i + 2.0 * seq as f64 * h) / 1e9;
    let medians: Vec<f64> = times
        .iter_mut()
        .map(|t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
        .collect();
    println!(
        "model `{}` ({} layers, hidden {}), batch {batch} × {seq} tokens, {gflop:.2} GFLOP, median of {reps} (min–max)",
        m.dir.display(),
        m.config.num_hidden_layers,
        m.config.hidden_size
    );
    println!("| backend | ms | min–max ms | GFLOP/s | time / first row's |");
    println!("|---|---|---|---|---|");
    for (k, ((_, e), t)) in engines.iter().zip(&times).enumerate() {
        let name = match e {
            Engine::Cpu(_) => "cpu".to_string(),
            Engine::Gpu(g) => format!("gpu ({})", g.backend.gpu().info.name),
        };
        let med = medians[k];
        println!(
            "| {name} | {med:.1} | {:.1}–{:.1} | {:.2} | {:.3} |",
            t[0],
            t[t.len() - 1],
            gflop / (med / 1e3),
            med / medians[0]
        );
    }
    Ok(())
}

/// Lines per forward pass for the head commands.
const HEAD_BATCH: usize = 8;

/// Loads the engine and checks that the checkpoint carries the head `check` asks for: a model without it cannot
/// run the command (exit 2, with the reason), rather than failing on every line.
fn load_head_engine<H>(args: &InferArgs, check: H) -> Result<Engine, Fail>
where
    H: Fn(&Engine) -> bertgpu::Result<()>,
{
    let m = load_model(&args.model)?;
    let engine = load_engine(&m, args.device)?;
    check(&engine).map_err(|e| Fail::Model(format!("cannot use model `{}`: {e}", m.dir.display())))?;
    Ok(engine)
}

/// Runs a batch task; a batch-level failure becomes one error, which makes the loop retry line by line.
fn per_line<T, F>(inputs: &[Input], run: F) -> Vec<Result<Value, String>>
where
    T: serde::Serialize,
    F: FnOnce() -> bertgpu::Result<Vec<T>>,
{
    match run() {
        Ok(v) if v.len() == inputs.len() => {
            v.into_iter().map(|x| serde_json::to_value(x).map_err(|e| e.to_string())).collect()
        }
        Ok(_) => vec![Err("internal error: wrong number of results".into())],
        Err(e) => vec![Err(e.to_string())],
    }
}

fn cmd_fill_mask(args: &InferArgs, top_k: usize) -> Result<(), Fail> {
    let engine = load_head_engine(args, |e| bertgpu::with_model!(e, m => m.heads.masked_lm().map(|_| ())))?;
    run_lines(Shape::Text, HEAD_BATCH, |inputs| {
        per_line(inputs, || {
            let mut texts = Vec::with_capacity(inputs.len());
            for i in inputs {
                let (text, pair) = i.text_and_pair();
                if pair.is_some() {
                    return Err(bertgpu::Error::Input("fill-mask takes a single text; drop text_pair".into()));
                }
                texts.push(text);
            }
            // As the transformers pipeline: a text with one mask gives a list, several masks a list per mask.
            let out = pollster::block_on(engine.fill_mask(&texts, top_k))?;
            Ok(out.into_iter().map(|mut per_mask| if per_mask.len() == 1 { json!(per_mask.remove(0)) } else { json!(per_mask) }).collect())
        })
    })
}

fn cmd_classify(args: &InferArgs, top_k: Option<usize>) -> Result<(), Fail> {
    let engine =
        load_head_engine(args, |e| bertgpu::with_model!(e, m => m.heads.sequence_classifier().map(|_| ())))?;
    run_lines(Shape::Text, HEAD_BATCH, |inputs| {
        per_line(inputs, || {
            let pairs: Vec<(&str, Option<&str>)> = inputs.iter().map(Input::text_and_pair).collect();
            pollster::block_on(engine.classify(&pairs, top_k))
        })
    })
}

fn cmd_next_sentence(args: &InferArgs) -> Result<(), Fail> {
    let engine = load_head_engine(args, |e| bertgpu::with_model!(e, m => m.heads.next_sentence().map(|_| ())))?;
    run_lines(Shape::Text, HEAD_BATCH, |inputs| {
        per_line(inputs, || {
            let mut pairs = Vec::with_capacity(inputs.len());
            for i in inputs {
                match i.text_and_pair() {
                    (a, Some(b)) => pairs.push((a, b)),
                    (_, None) => {
                        return Err(bertgpu::Error::Input(
                            "next-sentence needs two texts: {\"text\": A, \"text_pair\": B}".into(),
                        ))
                    }
                }
            }
            pollster::block_on(engine.next_sentence(&pairs))
        })
    })
}

fn cmd_ner(args: &InferArgs, aggregation: Aggregation) -> Result<(), Fail> {
    let engine = load_head_engine(args, |e| bertgpu::with_model!(e, m => m.heads.token_classifier().map(|_| ())))?;
    let aggregation = match aggregation {
        Aggregation::None => TokenAggregation::None,
        Aggregation::Simple => TokenAggregation::Simple,
    };
    run_lines(Shape::Text, HEAD_BATCH, |inputs| {
        per_line(inputs, || {
            let texts: Vec<(&str, Option<&str>)> = inputs.iter().map(Input::text_and_pair).collect();
            pollster::block_on(engine.token_classify(&texts, aggregation))
        })
    })
}

fn cmd_qa(args: &InferArgs) -> Result<(), Fail> {
    let engine = load_head_engine(args, |e| bertgpu::with_model!(e, m => m.heads.qa().map(|_| ())))?;
    // One question per forward pass: its batch is the windows of its context.
    run_lines(Shape::Qa, 1, |inputs| {
        inputs
            .iter()
            .map(|i| match i {
                Input::Qa { question, context } => pollster::block_on(engine.answer(question, context))
                    .map_err(|e| e.to_string())
                    .and_then(|a| serde_json::to_value(a).map_err(|e| e.to_string())),
                Input::Text { .. } | Input::Rerank { .. } => Err("qa needs {\"question\": ..., \"context\": ...}".into()),
            })
            .collect()
    })
}

fn cmd_replaced_tokens(args: &InferArgs) -> Result<(), Fail> {
    let engine = load_head_engine(args, |e| bertgpu::with_model!(e, m => m.heads.discriminator().map(|_| ())))?;
    run_lines(Shape::Text, HEAD_BATCH, |inputs| {
        per_line(inputs, || {
            let texts: Vec<(&str, Option<&str>)> = inputs.iter().map(Input::text_and_pair).collect();
            pollster::block_on(engine.replaced_tokens(&texts))
        })
    })
}

fn cmd_rerank(args: &InferArgs, top_k: Option<usize>) -> Result<(), Fail> {
    let engine = load_head_engine(args, |e| bertgpu::with_model!(e, m => m.cross_encoder().map(|_| ())))?;
    // One query per forward pass: its batch is its documents.
    run_lines(Shape::Rerank, 1, |inputs| {
        inputs
            .iter()
            .map(|i| match i {
                Input::Rerank { query, documents } => {
                    let docs: Vec<&str> = documents.iter().map(String::as_str).collect();
                    pollster::block_on(engine.rerank(query, &docs, top_k)).map_err(|e| e.to_string()).map(|ranked| {
                        json!(ranked
                            .iter()
                            .map(|r| json!({"index": r.index, "score": r.score, "document": documents[r.index]}))
                            .collect::<Vec<_>>())
                    })
                }
                _ => Err(format!("rerank needs {}", shape_hint(Shape::Rerank))),
            })
            .collect()
    })
}

/// `train-head`: reads `{"text", "label"}` lines, trains, writes the head; one JSON progress line per epoch on
/// stderr. Bad data or options exit 2 with the reason (training needs every line, so nothing is skipped).
fn cmd_train_head(args: &InferArgs, data: &Path, out: &Path, opts: &tasks::TrainOptions) -> Result<(), Fail> {
    let text = std::fs::read_to_string(data)
        .map_err(|e| Fail::Model(format!("cannot read training data `{}`: {e}", data.display())))?;
    let mut examples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let ex: tasks::TrainExample = serde_json::from_str(line).map_err(|e| {
            Fail::Model(format!(
                "{}:{}: expected a JSON object {{\"text\": \"...\", \"label\": \"...\"}} ({e})",
                data.display(),
                i + 1
            ))
        })?;
        examples.push(ex);
    }
    let m = load_model(&args.model)?;
    let engine = load_engine(&m, args.device)?;
    eprintln!("bertgpu: training a head on {} examples ({} backend)", examples.len(), engine.device());
    let report = pollster::block_on(engine.train_head(&examples, opts, |p| {
        eprintln!("{}", serde_json::to_string(p).unwrap_or_default());
    }))
    .map_err(|e| Fail::Model(format!("train-head: {e}")))?;
    let bytes = engine.export_head().map_err(|e| Fail::Model(e.to_string()))?;
    std::fs::write(out, bytes).map_err(|e| Fail::Model(format!("cannot write `{}`: {e}", out.display())))?;
    eprintln!(
        "bertgpu: kept epoch {} of {}; labels {:?}; wrote {}",
        report.best_epoch,
        report.history.len(),
        report.labels,
        out.display()
    );
    Ok(())
}

/// `classify --head FILE`: the trained head on the model's pooled features.
fn cmd_classify_head(args: &InferArgs, top_k: Option<usize>, head: &Path) -> Result<(), Fail> {
    let m = load_model(&args.model)?;
    let engine = load_engine(&m, args.device)?;
    let bytes =
        std::fs::read(head).map_err(|e| Fail::Model(format!("cannot read head file `{}`: {e}", head.display())))?;
    engine.load_head(&bytes).map_err(|e| Fail::Model(format!("cannot load head `{}`: {e}", head.display())))?;
    run_lines(Shape::Text, 8, |inputs| {
        let encoded: Vec<Result<Encoded, String>> = inputs
            .iter()
            .map(|i| match i.text_and_pair() {
                (_, Some(_)) => Err("a trained head classifies single texts; send {\"text\": ...} alone".to_string()),
                (text, None) => engine.tokenizer().encode(text, None).map_err(|e| e.to_string()),
            })
            .collect();
        let ok: Vec<Encoded> = encoded.iter().filter_map(|e| e.as_ref().ok().cloned()).collect();
        let results = match pollster::block_on(engine.classify_with_head(&ok, top_k)) {
            Ok(v) => v,
            Err(e) => return vec![Err(e.to_string())],
        };
        let mut results = results.into_iter();
        encoded
            .into_iter()
            .map(|e| e.and_then(|_| results.next().map(|r| json!(r)).ok_or_else(|| "no result".to_string())))
            .collect()
    })
}

/// Config, weights and tokenizer of the folder, on the requested device. Failures exit 2.
fn load_engine(m: &LoadedModel, device: Device) -> Result<Engine, Fail> {
    let fail = |e: bertgpu::Error| Fail::Model(format!("cannot load model `{}`: {e}", m.dir.display()));
    let config = m.config.clone();
    let weights = match &m.weights {
        Some(w) => w.clone(),
        None => Weights::from_safetensors_file(m.dir.join("model.safetensors")).map_err(fail)?,
    };
    let device = match device {
        Device::Auto => tasks::Device::Auto,
        Device::Gpu => tasks::Device::Gpu,
        Device::Cpu => tasks::Device::Cpu,
    };
    pollster::block_on(Engine::from_parts(config, m.tokenizer.clone(), &weights, device)).map_err(fail)
}

// ---------------------------------------------------------------------------------------------------------------
// The JSON-lines loop

/// Which JSON object a command reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `{"text", "text_pair"?}` or a plain-text line
    Text,
    /// `{"question", "context"}`
    Qa,
    /// `{"query", "documents": [...]}`
    Rerank,
}

/// One input line, parsed.
#[derive(Clone, Debug, PartialEq)]
enum Input {
    Text { text: String, pair: Option<String> },
    Qa { question: String, context: String },
    Rerank { query: String, documents: Vec<String> },
}

impl Input {
    /// The text and optional pair of a text input (a qa input reads as question + context).
    fn text_and_pair(&self) -> (&str, Option<&str>) {
        match self {
            Input::Text { text, pair } => (text, pair.as_deref()),
            Input::Qa { question, context } => (question, Some(context)),
            Input::Rerank { query, .. } => (query, None),
        }
    }
}

fn parse_line(line: &str, shape: Shape) -> Result<Input, String> {
    let trimmed = line.trim();
    if !trimmed.starts_with('{') {
        if trimmed.is_empty() {
            return Err("empty line: nothing to process (send {\"text\": \"\"} to process an empty text)".into());
        }
        return match shape {
            Shape::Text => Ok(Input::Text { text: line.to_owned(), pair: None }),
            Shape::Qa | Shape::Rerank => Err(format!("expected a JSON object {}", shape_hint(shape))),
        };
    }
    let v: Value = serde_json::from_str(trimmed).map_err(|e| {
        // JavaScript strings may hold lone UTF-16 surrogates, which `JSON.stringify` writes as `\udXXX` escapes.
        let hint = if e.to_string().contains("escape") && trimmed.to_ascii_lowercase().contains("\\ud") {
            " (a \\uD800-\\uDFFF escape must be half of a surrogate pair; replace lone surrogates, e.g. with \\uFFFD)"
        } else {
            ""
        };
        format!("invalid JSON ({e}){hint}; send one JSON object per line, or plain text not starting with '{{'")
    })?;
    let Value::Object(obj) = v else {
        return Err("expected a JSON object".into()); // unreachable for input starting with '{', kept for safety
    };
    let string = |key: &str, required: bool| -> Result<Option<String>, String> {
        match obj.get(key) {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            None | Some(Value::Null) if !required => Ok(None),
            None | Some(Value::Null) => Err(format!("missing \"{key}\": expected {}", shape_hint(shape))),
            Some(other) => Err(format!("\"{key}\" must be a string, found {}", json_kind(other))),
        }
    };
    match shape {
        Shape::Text => Ok(Input::Text {
            text: string("text", true)?.unwrap_or_default(),
            pair: string("text_pair", false)?,
        }),
        Shape::Qa => Ok(Input::Qa {
            question: string("question", true)?.unwrap_or_default(),
            context: string("context", true)?.unwrap_or_default(),
        }),
        Shape::Rerank => {
            let documents = match obj.get("documents") {
                Some(Value::Array(items)) => items
                    .iter()
                    .enumerate()
                    .map(|(i, d)| match d {
                        Value::String(s) => Ok(s.clone()),
                        other => Err(format!("\"documents\"[{i}] must be a string, found {}", json_kind(other))),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                None | Some(Value::Null) => return Err(format!("missing \"documents\": expected {}", shape_hint(shape))),
                Some(other) => return Err(format!("\"documents\" must be an array of strings, found {}", json_kind(other))),
            };
            Ok(Input::Rerank { query: string("query", true)?.unwrap_or_default(), documents })
        }
    }
}

fn shape_hint(shape: Shape) -> &'static str {
    match shape {
        Shape::Text => "{\"text\": ..., \"text_pair\": ... (optional)}",
        Shape::Qa => "{\"question\": ..., \"context\": ...}",
        Shape::Rerank => "{\"query\": ..., \"documents\": [...]}",
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads stdin line by line, hands up to `batch_size` parsed inputs at a time to `process` (which returns one
/// result per input), and writes exactly one JSON line per input line, in order, flushing after each batch.
/// When `process` fails for a whole batch it is called again on each input alone, so one bad input does not take
/// its neighbours down with it (tasks may signal that by returning a single error for the batch).
fn run_lines<F>(shape: Shape, batch_size: usize, mut process: F) -> Result<(), Fail>
where
    F: FnMut(&[Input]) -> Vec<Result<Value, String>>,
{
    let stdin = io::stdin();
    let mut reader = stdin.lock();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    // Each pending line: its parse result; parsed inputs are batched.
    let mut pending: Vec<Result<Input, String>> = Vec::new();
    let mut n_ok = 0usize;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        if n > 0 {
            let mut line = &buf[..];
            if let Some(l) = line.strip_suffix(b"\n") {
                line = l;
            }
            if let Some(l) = line.strip_suffix(b"\r") {
                line = l;
            }
            let parsed = match std::str::from_utf8(line) {
                Ok(s) => parse_line(s, shape),
                Err(_) => Err("the line is not valid UTF-8 text".into()),
            };
            n_ok += parsed.is_ok() as usize;
            pending.push(parsed);
        }
        if (n == 0 && !pending.is_empty()) || n_ok >= batch_size {
            flush_batch(&mut pending, &mut process, &mut out)?;
            n_ok = 0;
        }
        if n == 0 {
            break;
        }
    }
    out.flush()?;
    Ok(())
}

fn flush_batch<F, W>(pending: &mut Vec<Result<Input, String>>, process: &mut F, out: &mut W) -> Result<(), Fail>
where
    F: FnMut(&[Input]) -> Vec<Result<Value, String>>,
    W: Write,
{
    let inputs: Vec<Input> = pending.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
    let mut results = if inputs.is_empty() { Vec::new() } else { process(&inputs) };
    if results.len() != inputs.len() {
        // A batch-level failure (one error for all): retry one by one to attach errors to the right lines.
        results = inputs
            .iter()
            .map(|i| process(std::slice::from_ref(i)).into_iter().next().unwrap_or_else(|| Err("no result".into())))
            .collect();
    }
    let mut results = results.into_iter();
    for p in pending.drain(..) {
        let value = match p {
            Err(msg) => json!({ "error": msg }),
            Ok(_) => match results.next() {
                Some(Ok(v)) => v,
                Some(Err(msg)) => json!({ "error": msg }),
                None => json!({ "error": "no result" }),
            },
        };
        serde_json::to_writer(&mut *out, &value).map_err(io::Error::from)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_json_lines() {
        let t = |s: &str| Input::Text { text: s.into(), pair: None };
        assert_eq!(parse_line("hello world", Shape::Text), Ok(t("hello world")));
        assert_eq!(parse_line("  leading space kept", Shape::Text), Ok(t("  leading space kept")));
        assert_eq!(parse_line("\"a json string\"", Shape::Text), Ok(t("\"a json string\"")));
        assert_eq!(parse_line("[1, 2]", Shape::Text), Ok(t("[1, 2]")));
        assert_eq!(
            parse_line(r#"{"text": "a", "text_pair": "b", "label": 3}"#, Shape::Text),
            Ok(Input::Text { text: "a".into(), pair: Some("b".into()) })
        );
        assert_eq!(parse_line(r#"{"text": "", "text_pair": null}"#, Shape::Text), Ok(t("")));
        assert_eq!(
            parse_line(r#"{"question": "q", "context": "c"}"#, Shape::Qa),
            Ok(Input::Qa { question: "q".into(), context: "c".into() })
        );
    }

    #[test]
    fn bad_lines() {
        let err = |s: &str, shape| parse_line(s, shape).unwrap_err();
        assert!(err("", Shape::Text).contains("empty line"));
        assert!(err(" \t ", Shape::Text).contains("empty line"));
        assert!(err("{\"text\": ", Shape::Text).contains("invalid JSON"));
        assert!(err("{\"txt\": \"a\"}", Shape::Text).contains("missing \"text\""));
        assert!(err("{\"text\": 5}", Shape::Text).contains("must be a string, found a number"));
        assert!(err("{\"text\": \"a\", \"text_pair\": [1]}", Shape::Text).contains("\"text_pair\" must be a string"));
        assert!(err("plain", Shape::Qa).contains("question"));
        assert!(err("{\"question\": \"q\"}", Shape::Qa).contains("missing \"context\""));
    }
}
