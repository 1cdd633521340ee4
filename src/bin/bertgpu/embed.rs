//! The `embed` command: one vector per line, as the model's own sentence-transformers files say unless an option
//! overrides them (its pooling, Dense layers, Normalize, prompts; `--dimensions` for Matryoshka truncation).

use bertgpu::tasks::EmbedOptions;
use bertgpu::tokenizer::Encoded;
use serde_json::json;

use crate::lines::{run_lines, Shape};
use crate::load::{load_infer, InferArgs};
use crate::{load_model, Fail};

pub fn cmd_embed(args: &InferArgs, opts: EmbedOptions) -> Result<(), Fail> {
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
        let mut vectors = vectors.into_iter();
        encoded
            .into_iter()
            .map(|e| {
                e.and_then(|_| vectors.next().map(|v| json!({ "embedding": v })).ok_or_else(|| "no result".to_string()))
            })
            .collect()
    })
}
