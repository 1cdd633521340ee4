//! The `bertgpu` command line: a thin shim over `bertgpu::tasks`.
//!
//! `bertgpu <command> --model M [options]`, M a Hugging Face-style folder (or a `.gguf` file).
//!
//! Input (stdin), one line per item:
//! - a JSON object: `{"text": ..., "text_pair": ...}` (`text_pair` optional), or for `qa`
//!   `{"question": ..., "context": ...}`, for `rerank` `{"query", "documents"}`, for `zero-shot`
//!   `{"text", "labels"}`; other keys are ignored;
//! - any other line is taken as plain text (the whole line, without its `\n` / `\r\n`). A line whose first
//!   non-blank character is `{` must be a valid JSON object: a broken one is an error, not text.
//! - An empty or whitespace-only plain line is an error (`{"error": "empty line ..."}`): it is nearly always a
//!   stray newline. To process an empty text on purpose send `{"text": ""}`.
//!
//! Output (stdout): exactly one JSON value per input line, in order; a line that cannot be processed gives
//! `{"error": "..."}` and the following lines go on. Exit status: 0 when all input was read (even if some lines
//! had errors), 2 when the model cannot be loaded or the command is not available (message on stderr), 1 when
//! stdin/stdout fail. Never a panic trace: a bug prints one line on stderr.

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bertgpu::dtype::Dtype;
use bertgpu::engine::Engine;
use bertgpu::heads::token_classifier::Aggregation;
use bertgpu::heads::Pooling;
use bertgpu::loader::{self, LoadOptions, ModelSource};
use bertgpu::tasks;
use bertgpu::tokenizer::Encoded;
use clap::{Args, Parser, Subcommand};
use bench::cmd_bench;
use load::{load_engine, load_infer, InferArgs};
use lines::{run_lines, shape_hint, Input, Shape};
use serde_json::{json, Value};

mod bench;
mod embed;
mod finetune;
mod lines;
mod load;
mod pretrain;
mod train_tokenizer;
mod tune;
mod zero_shot;

#[derive(Parser)]
#[command(name = "bertgpu", version, about = "BERT on the GPU (wgpu) and the CPU: embeddings, fill-mask, classification, NER, QA")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone, Debug)]
struct ModelArgs {
    /// Model: a Hugging Face-style folder (config.json, model.safetensors or pytorch_model.bin, tokenizer.json or vocab.txt) or a .gguf
    #[arg(long, short = 'm', value_name = "M")]
    model: PathBuf,
    /// Truncate inputs to N tokens, [CLS]/[SEP] included (default: the model's max_position_embeddings)
    #[arg(long, value_name = "N")]
    max_length: Option<usize>,
    /// A LoRA adapter folder as peft saves it (adapter_config.json, adapter_model.safetensors; e.g. from
    /// `fine-tune --lora`), folded into the model's weights at load
    #[arg(long, value_name = "DIR")]
    adapter: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Token ids, segment ids and tokens of each line (no padding)
    Tokenize {
        #[command(flatten)]
        model: ModelArgs,
    },
    /// One sentence embedding per line: {"embedding": [...]}. With no options, as the model's own
    /// sentence-transformers files say (its pooling, Dense layers, Normalize, default prompt); else mean pooling
    Embed(embed::EmbedArgs),
    /// One SPLADE sparse vector per line, {"indices", "values", "tokens"}: a sparse encoder's (SpladePooling in
    /// its modules.json), or a masked-LM checkpoint's by SPLADE's defaults (max over tokens of log(1 + ReLU))
    EmbedSparse(embed::SparseArgs),
    /// One vector per token of each line (the encoder's last hidden state, special tokens included):
    /// {"tokens", "ids", "offsets", "vectors": [[...], ...]}
    EmbedTokens(embed::TokenArgs),
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
    /// Zero-shot classification through an NLI checkpoint on {"text", "labels": [...]} (or plain text with
    /// --labels): [{"label", "score"}, ...] best first, as transformers' zero-shot-classification pipeline
    ZeroShot(zero_shot::ZeroShotArgs),
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
    /// Continue pre-training (masked LM + next-sentence prediction) on a corpus; a Hugging Face folder out
    Pretrain(pretrain::PretrainArgs),
    /// Fine-tune every parameter on JSON lines and write a Hugging Face folder; progress on stderr
    FineTune {
        #[command(flatten)]
        infer: InferArgs,
        #[arg(long, value_enum)]
        task: bertgpu::training::job::JobTask,
        #[arg(long, value_name = "FILE.jsonl")]
        data: PathBuf,
        /// The folder to write (config.json, model.safetensors, the tokenizer files)
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        #[arg(long, default_value_t = 3)]
        epochs: usize,
        #[arg(long, default_value_t = 5e-5)]
        lr: f32,
        /// Examples per forward pass
        #[arg(long, default_value_t = 16)]
        batch_size: usize,
        /// Forward passes whose mean gradient makes one AdamW step (a batch of batch-size × N in the memory of one)
        #[arg(long, default_value_t = 1)]
        accumulate: usize,
        /// Fraction of the steps with a linearly rising learning rate (then it falls linearly to 0)
        #[arg(long, default_value_t = 0.1)]
        warmup: f32,
        /// AdamW's decoupled weight decay (not on biases and LayerNorm weights)
        #[arg(long, default_value_t = 0.01)]
        weight_decay: f32,
        /// Fraction held out and evaluated after each epoch
        #[arg(long, default_value_t = 0.1)]
        validation_split: f32,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// --task qa: tokens shared by consecutive windows of a long context (run_qa's doc_stride)
        #[arg(long, default_value_t = 128)]
        doc_stride: usize,
        /// Which layers train: `all`, or the top K encoder layers with the head (0: the head alone)
        #[arg(long, default_value = "all", value_parser = finetune::parse_layers)]
        layers: finetune::Layers,
        #[command(flatten)]
        checkpoints: finetune::CheckpointArgs,
        /// Stop after N epochs without a lower validation loss and keep the best epoch's model (needs a validation split)
        #[arg(long, value_name = "N")]
        patience: Option<usize>,
        /// Train without dropout (by default the checkpoint's hidden_dropout_prob, attention_probs_dropout_prob and
        /// classifier_dropout apply, seeded, as in transformers' Trainer)
        #[arg(long)]
        no_dropout: bool,
        /// Train LoRA adapters of rank R on a frozen encoder (and the head's classifier); --out gets peft's
        /// adapter_config.json and adapter_model.safetensors. LoRA usually wants a higher --lr (e.g. 5e-4)
        #[arg(long, value_name = "R")]
        lora: Option<usize>,
        /// LoRA's alpha: the update is scaled by alpha / R (peft's default alpha, 8)
        #[arg(long, default_value_t = bertgpu::training::lora::DEFAULT_ALPHA, requires = "lora")]
        lora_alpha: f32,
        /// Which linears get adapters: qv (query and value, peft's default for BERT; ModernBERT's packed Wqkv), all of
        /// each layer, or all-projection: all and the embeddings' projection (ALBERT's embedding_hidden_mapping_in,
        /// ELECTRA's embeddings_project)
        #[arg(long, value_enum, default_value = "qv", requires = "lora")]
        lora_targets: bertgpu::training::lora::LoraTargets,
        /// With --lora: write the merged model (W + alpha/R·B·A) as a plain Hugging Face folder instead
        #[arg(long, requires = "lora")]
        merge: bool,
    },
    /// Train a BERT WordPiece vocabulary on a corpus (.jsonl: each line's "text"; else one text per line) and write
    /// tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json into --out
    TrainTokenizer {
        #[arg(long, value_name = "CORPUS")]
        data: PathBuf,
        /// Tokens in the vocabulary, the 5 special tokens included
        #[arg(long, value_name = "N")]
        vocab_size: usize,
        /// How often a pair of pieces must occur to become a token
        #[arg(long, value_name = "N", default_value_t = 2)]
        min_frequency: u64,
        /// Lower-case (and strip accents from) the text, as an uncased BERT
        #[arg(long, value_name = "true|false", default_value_t = true, action = clap::ArgAction::Set)]
        lowercase: bool,
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
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
        /// Also time each GPU kernel of one more run (timestamp queries, where the adapter has them)
        #[arg(long)]
        profile: bool,
        /// A GPU row with these kernel knobs, e.g. `matmul=tiled:16x16,attention=vec4:64,row=128` (repeatable;
        /// knobs left out keep their defaults). The rows share one copy of the weights and run round-robin
        #[arg(long, value_name = "SPEC", value_parser = parse_tuning)]
        tuning: Vec<bertgpu::backend::gpu::Tuning>,
        /// The GPU submits its recorded work every N passes (default 32; 0: once per forward), so that it starts
        /// on the first layers while the host records the rest
        #[arg(long, value_name = "N")]
        submit_every: Option<usize>,
    },
}

fn parse_tuning(s: &str) -> Result<bertgpu::backend::gpu::Tuning, String> {
    bertgpu::backend::gpu::Tuning::parse(s)
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

/// Every command runs on a thread of rayon's pool, loading and lines (or training steps) alike: each parallel loop
/// of the CPU backend (about a hundred a sentence's forward) then starts there, where from the main thread each would
/// be handed to the pool and waited for. The pool's threads get the main thread's 8 MiB of stack for the loading.
fn run(command: Command) -> Result<(), Fail> {
    let _ = rayon::ThreadPoolBuilder::new().stack_size(8 << 20).build_global();
    rayon::scope(|_| dispatch(command))
}

fn dispatch(command: Command) -> Result<(), Fail> {
    match command {
        Command::Tokenize { model } => cmd_tokenize(&model),
        Command::Embed(args) => embed::cmd_embed(args),
        Command::EmbedSparse(args) => embed::cmd_embed_sparse(args),
        Command::EmbedTokens(args) => embed::cmd_embed_tokens(args),
        Command::FillMask { infer, top_k } => cmd_fill_mask(&infer, top_k),
        Command::Classify { infer, top_k, head: Some(head) } => cmd_classify_head(&infer, top_k, &head),
        Command::Classify { infer, top_k, head: None } => {
            cmd_classify(&infer, top_k)
        }
        Command::NextSentence { infer } => cmd_next_sentence(&infer),
        Command::Ner { infer, aggregation } => cmd_ner(&infer, aggregation),
        Command::Qa { infer } => cmd_qa(&infer),
        Command::Rerank { infer, top_k } => cmd_rerank(&infer, top_k),
        Command::ZeroShot(args) => zero_shot::cmd_zero_shot(args),
        Command::ReplacedTokens { infer } => cmd_replaced_tokens(&infer),
        Command::Convert { model, dtype, out } => {
            use bertgpu::weights::gguf::convert;
            if model.adapter.is_some() {
                return Err(Fail::Model("convert reads the folder's own files and cannot fold in an --adapter: write \
                    the merged folder first (`fine-tune --lora R --merge`, or load the adapter in the browser and \
                    exportModel)".into()));
            }
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
        Command::Pretrain(a) => pretrain::cmd_pretrain(&a),
        Command::FineTune { infer, task, data, out, epochs, lr, batch_size, accumulate, warmup, weight_decay, validation_split, seed, doc_stride, layers, checkpoints, patience, no_dropout, lora, lora_alpha, lora_targets, merge } => {
            let fit = bertgpu::training::fit::FitOptions {
                epochs,
                learning_rate: lr,
                batch_size,
                accumulate,
                warmup,
                weight_decay,
                validation_split,
                seed,
                dropout: !no_dropout,
                patience,
                ..Default::default()
            };
            let lora = lora.map(|r| bertgpu::training::lora::LoraOptions { r, alpha: lora_alpha, targets: lora_targets, merge });
            finetune::cmd_fine_tune(&infer, &finetune::FineTuneArgs { task, data, out, doc_stride, layers: layers.0, fit, lora, checkpoints })
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
                pooling,
                ..Default::default()
            };
            cmd_train_head(&infer, &data, &out, &opts)
        }
        Command::TrainTokenizer { data, vocab_size, min_frequency, lowercase, out } => {
            let opts = bertgpu::tokenizer::train::WordPieceOptions { vocab_size, min_frequency, lowercase, ..Default::default() };
            train_tokenizer::cmd_train_tokenizer(&data, &out, &opts)
        }
        Command::Bench { infer, batch, seq, reps, profile, tuning, submit_every } => {
            cmd_bench(&infer, batch, seq, reps, profile, &tuning, submit_every)
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Loading a model folder

/// A checked model ([`bertgpu::loader`]) and where it came from (for messages). Its weights are read when an engine
/// is built: `tokenize` needs none.
struct LoadedModel {
    dir: PathBuf,
    model: loader::LoadedModel,
}

/// Loads and checks a model folder's (or `.gguf`'s) config.json and tokenizer, with truncation at `--max-length` or
/// the model's `max_position_embeddings`. Any failure here is "the model cannot be loaded": exit 2 with the reason.
fn load_model(args: &ModelArgs) -> Result<LoadedModel, Fail> {
    let path = &args.model;
    let opts = LoadOptions { max_length: args.max_length };
    let mut model = loader::load(ModelSource::Path(path), &opts)
        .map_err(|e| Fail::Model(format!("cannot load model `{}`: {e}", path.display())))?;
    if let Some(dir) = &args.adapter {
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| Fail::Model(format!("cannot read `{}`: {e}", dir.join(name).display())))
        };
        model = model
            .with_adapter(&read("adapter_config.json")?, &read("adapter_model.safetensors")?)
            .map_err(|e| Fail::Model(format!("cannot apply the adapter `{}`: {e}", dir.display())))?;
    }
    Ok(LoadedModel { dir: path.clone(), model })
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
                let e = m.model.tokenizer.encode(text, pair).map_err(|e| e.to_string())?;
                Ok(json!({ "input_ids": e.ids, "token_type_ids": e.type_ids, "tokens": e.tokens }))
            })
            .collect()
    })
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
    let engine = load_infer(&m, args)?;
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
                _ => Err("qa needs {\"question\": ..., \"context\": ...}".into()),
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
    let engine = load_infer(&m, args)?;
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
    let engine = load_infer(&m, args)?;
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
