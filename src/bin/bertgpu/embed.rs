//! The `embed` command: one vector per line, as the model's own sentence-transformers files say unless an option
//! overrides them (its pooling, Dense layers, Normalize, prompts; `--dimensions` for Matryoshka truncation;
//! `--precision` for int8, uint8, binary or ubinary codes). `embed-sparse`: SPLADE's sparse vectors;
//! `embed-tokens`: one vector per token.

use std::path::Path;

use std::path::PathBuf;

use bertgpu::heads::quantize::{quantize, Precision, Quantized, Ranges};
use bertgpu::heads::Pooling;
use bertgpu::tasks::vectors::{SparseOptions, TokenOptions};
use bertgpu::tasks::EmbedOptions;
use bertgpu::tokenizer::Encoded;
use serde_json::{json, Value};

use crate::lines::{run_lines, Shape};
use crate::load::{load_infer, InferArgs};
use crate::{load_model, Fail};

#[derive(clap::Args, Debug)]
pub(crate) struct EmbedArgs {
    #[command(flatten)]
    infer: InferArgs,
    /// Overrides the model's pooling
    #[arg(long, value_enum)]
    pooling: Option<Pooling>,
    /// L2-normalize each embedding (the default where the model ends in Normalize)
    #[arg(long, conflicts_with = "no_normalize")]
    normalize: bool,
    /// Do not L2-normalize, even where the model ends in Normalize
    #[arg(long)]
    no_normalize: bool,
    /// One of the model's prompts by name (config_sentence_transformers.json), put before every text
    #[arg(long)]
    prompt: Option<String>,
    /// Keep the first N values of each embedding (Matryoshka), normalized again where normalizing
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    dimensions: Option<u32>,
    /// Lines run through the model together
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    batch_size: u32,
    /// The vectors' encoding, as sentence-transformers' quantize_embeddings: int8 and uint8 need --ranges;
    /// binary and ubinary are bits packed eight to a byte
    #[arg(long, value_enum, default_value_t = Precision::Float32)]
    precision: Precision,
    /// int8/uint8: each dimension's range, a JSON file [[min, ...], [max, ...]] over a representative set of
    /// vectors
    #[arg(long, value_name = "FILE")]
    ranges: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub(crate) struct SparseArgs {
    #[command(flatten)]
    infer: InferArgs,
    /// One of the model's prompts by name, put before every text
    #[arg(long)]
    prompt: Option<String>,
    /// Keep the N largest weights of each vector
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_active_dims: Option<u32>,
    /// Lines run through the model together
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    batch_size: u32,
}

#[derive(clap::Args, Debug)]
pub(crate) struct TokenArgs {
    #[command(flatten)]
    infer: InferArgs,
    /// One of the model's prompts by name, put before every text (its tokens are among the vectors)
    #[arg(long)]
    prompt: Option<String>,
    /// L2-normalize each token's vector
    #[arg(long)]
    normalize: bool,
    /// Lines run through the model together
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    batch_size: u32,
}

/// `--ranges FILE`: sentence-transformers' `(2, dim)` ranges as JSON, `[[min, ...], [max, ...]]`.
fn read_ranges(path: &Path) -> Result<Ranges, Fail> {
    let fail = |why: String| Fail::Model(format!("--ranges {}: {why}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let (min, max): (Vec<f32>, Vec<f32>) = serde_json::from_str(&text)
        .map_err(|e| fail(format!("{e}; expected [[min, ...], [max, ...]], one value per dimension")))?;
    Ok(Ranges { min, max })
}

pub(crate) fn cmd_embed(a: EmbedArgs) -> Result<(), Fail> {
    let opts = EmbedOptions {
        pooling: a.pooling,
        normalize: if a.normalize { Some(true) } else if a.no_normalize { Some(false) } else { None },
        prompt: a.prompt,
        dimensions: a.dimensions.map(|d| d as usize),
        batch_size: a.batch_size as usize,
    };
    let (args, precision) = (&a.infer, a.precision);
    let ranges = match (precision.needs_ranges(), a.ranges.as_deref()) {
        (true, Some(p)) => Some(read_ranges(p)?),
        (true, None) => {
            return Err(Fail::Model(format!(
                "--precision {} needs --ranges FILE: each dimension's [[min, ...], [max, ...]] over a representative \
                 set of vectors (the float32 output of `bertgpu embed` on hundreds of texts)",
                precision.name()
            )))
        }
        (false, Some(_)) => {
            return Err(Fail::Model(format!("--ranges applies to --precision int8 and uint8, not {}", precision.name())))
        }
        (false, None) => None,
    };
    let m = load_model(&args.model)?;
    let engine = load_infer(&m, args)?;
    // An unknown prompt name or dimensions beyond the vectors' width: refused before any line, naming the choices.
    engine.check_embed_options(&opts).map_err(|e| Fail::Model(e.to_string()))?;
    let prompt = engine.prompt_text(&opts).map_err(|e| Fail::Model(e.to_string()))?.unwrap_or_default();
    run_lines(Shape::Text, opts.batch_size, |inputs| {
        // Tokenize each line on its own (a line that fails gets its own error), embed the rest together.
        let encoded: Vec<Result<Encoded, String>> = inputs
            .iter()
            .map(|i| {
                let (text, pair) = i.text_and_pair();
                engine.embedding_tokenizer().encode(&format!("{prompt}{text}"), pair).map_err(|e| e.to_string())
            })
            .collect();
        let ok: Vec<Encoded> = encoded.iter().filter_map(|e| e.as_ref().ok().cloned()).collect();
        let vectors = match pollster::block_on(engine.embed_encoded(&ok, &opts)) {
            Ok(v) => v,
            Err(e) => return vec![Err(e.to_string())], // a batch-level failure: the loop retries line by line
        };
        let vectors: Vec<Value> = match quantize(vectors, precision, ranges.as_ref()) {
            Ok(Quantized::Float32(v)) => v.into_iter().map(|v| json!(v)).collect(),
            Ok(Quantized::Int8(v)) => v.into_iter().map(|v| json!(v)).collect(),
            Ok(Quantized::Uint8(v)) => v.into_iter().map(|v| json!(v)).collect(),
            Err(e) => return vec![Err(e.to_string())],
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

/// Each line's text, or an error for a line with a pair: sparse and per-token vectors are of one text.
fn single_texts<'a>(inputs: &'a [crate::lines::Input], what: &str) -> Vec<Result<&'a str, String>> {
    inputs
        .iter()
        .map(|i| match i.text_and_pair() {
            (text, None) => Ok(text),
            (_, Some(_)) => Err(format!("{what} takes one text per line, not a text_pair")),
        })
        .collect()
}

/// Runs `f` on the lines' texts together, putting each result back on its line.
fn per_text<T>(texts: Vec<Result<&str, String>>, f: impl FnOnce(&[&str]) -> Result<Vec<T>, String>,
    to_json: impl Fn(T) -> Value) -> Vec<Result<Value, String>> {
    let ok: Vec<&str> = texts.iter().filter_map(|t| t.as_ref().ok().copied()).collect();
    let results = match f(&ok) {
        Ok(r) => r,
        Err(e) => return vec![Err(e)], // a batch-level failure: the loop retries line by line
    };
    let mut results = results.into_iter();
    texts
        .into_iter()
        .map(|t| t.and_then(|_| results.next().map(&to_json).ok_or_else(|| "no result".to_string())))
        .collect()
}

/// `embed-sparse`: one SPLADE vector per line, `{"indices", "values", "tokens"}` (the vocabulary entries' tokens).
pub(crate) fn cmd_embed_sparse(a: SparseArgs) -> Result<(), Fail> {
    let opts = SparseOptions {
        prompt: a.prompt,
        max_active_dims: a.max_active_dims.map(|n| n as usize),
        batch_size: a.batch_size as usize,
        ..SparseOptions::default()
    };
    let args = &a.infer;
    let m = load_model(&args.model)?;
    let engine = load_infer(&m, args)?;
    // The model (a sparse encoder, or a masked-LM checkpoint) and the prompt: refused before any line.
    engine.check_sparse(&opts).map_err(|e| Fail::Model(e.to_string()))?;
    let tokenizer = engine.tokenizer();
    run_lines(Shape::Text, opts.batch_size, |inputs| {
        per_text(
            single_texts(inputs, "embed-sparse"),
            |texts| pollster::block_on(engine.embed_sparse(texts, &opts)).map_err(|e| e.to_string()),
            |v| {
                let tokens: Vec<String> =
                    v.indices.iter().map(|&i| tokenizer.id_to_token(i).unwrap_or_default()).collect();
                json!({ "indices": v.indices, "values": v.values, "tokens": tokens })
            },
        )
    })
}

/// `embed-tokens`: one line per input, `{"tokens", "ids", "offsets", "vectors": [[...], ...]}`.
pub(crate) fn cmd_embed_tokens(a: TokenArgs) -> Result<(), Fail> {
    let opts = TokenOptions { prompt: a.prompt, normalize: a.normalize, batch_size: a.batch_size as usize };
    let args = &a.infer;
    let m = load_model(&args.model)?;
    let engine = load_infer(&m, args)?;
    engine.prompt_named(opts.prompt.as_deref()).map_err(|e| Fail::Model(e.to_string()))?;
    run_lines(Shape::Text, opts.batch_size, |inputs| {
        per_text(
            single_texts(inputs, "embed-tokens"),
            |texts| pollster::block_on(engine.embed_tokens(texts, &opts)).map_err(|e| e.to_string()),
            |t| {
                let vectors: Vec<&[f32]> = t.vectors.chunks_exact(t.dims.max(1)).collect();
                json!({ "tokens": t.tokens, "ids": t.ids, "offsets": t.offsets, "vectors": vectors })
            },
        )
    })
}
