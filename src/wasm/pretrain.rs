//! `pretrain` in the browser: continued pre-training of a copy of the model ([`crate::training::job::pretrain`], what
//! the CLI's `pretrain` runs), with `fineTune`'s hooks, checkpoint store and progress events ([`super::train`]).

use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

use super::train::{checkpoints, report, JsHooks, JsProgress};
use super::{js_err, to_js, WasmModel};
use crate::loader::{self, LoadOptions, ModelFiles, ModelSource};
use crate::training::fit::FitOptions;
use crate::training::job;
use crate::training::pretrain_data::{parse_corpus, CorpusFormat, PretrainOptions, MAX_LINE_CHARS};
use crate::{with_model, Error, Result};

/// `pretrain`'s options as JS gives them (the wrapper has taken `onProgress`, `signal`, `checkpoint` and `resume`
/// and checked the types; serde refuses unknown names). Unset ones take the CLI's `pretrain` defaults
/// ([`JsPretrainOptions::resolve`]).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JsPretrainOptions {
    steps: Option<usize>,
    batch_size: Option<usize>,
    /// Tokens per row, special tokens included; default 128, or the model's positions if fewer.
    max_length: Option<usize>,
    mlm_probability: Option<f64>,
    whole_word_mask: Option<bool>,
    /// Mask again every epoch (RoBERTa's dynamic masking; default false: once for the run).
    dynamic_masking: Option<bool>,
    /// Sentence pairs and the next-sentence loss (default true); false: the masked LM alone.
    nsp: Option<bool>,
    short_seq_prob: Option<f64>,
    learning_rate: Option<f32>,
    warmup: Option<f32>,
    weight_decay: Option<f32>,
    validation_split: Option<f32>,
    seed: Option<u64>,
    dropout: Option<bool>,
}

impl JsPretrainOptions {
    /// The rows' options and the loop's, for a model of `positions` positions and `family`. The defaults are the
    /// CLI's: [`FitOptions::pretraining`], and masking and pairs as [`PretrainOptions::default`] (Google's), the
    /// masked fraction the family's ([`PretrainOptions::family_mlm_probability`]).
    fn resolve(self, positions: usize, family: crate::config::Family) -> Result<(PretrainOptions, FitOptions)> {
        let (d, f) = (PretrainOptions::default(), FitOptions::pretraining());
        let max_length = self.max_length.unwrap_or(d.max_length.min(positions));
        if max_length > positions {
            return Err(Error::Input(format!(
                "maxLength {max_length} is beyond the model's {positions} positions: give at most {positions}"
            )));
        }
        let seed = self.seed.unwrap_or(d.seed);
        let data = PretrainOptions {
            max_length,
            mlm_probability: self.mlm_probability.unwrap_or(PretrainOptions::family_mlm_probability(family)),
            whole_word_mask: self.whole_word_mask.unwrap_or(d.whole_word_mask),
            nsp: self.nsp.unwrap_or(d.nsp),
            short_seq_prob: self.short_seq_prob.unwrap_or(d.short_seq_prob),
            dynamic_masking: self.dynamic_masking.unwrap_or(d.dynamic_masking),
            seed,
            ..d
        };
        let fit = FitOptions {
            learning_rate: self.learning_rate.unwrap_or(f.learning_rate),
            batch_size: self.batch_size.unwrap_or(f.batch_size),
            warmup: self.warmup.unwrap_or(f.warmup),
            weight_decay: self.weight_decay.unwrap_or(f.weight_decay),
            validation_split: self.validation_split.unwrap_or(f.validation_split),
            seed,
            dropout: self.dropout.unwrap_or(f.dropout),
            max_steps: self.steps.or(f.max_steps),
            ..f
        };
        Ok((data, fit))
    }
}

/// The corpus as documents of sentences: a string is read as a plain-text corpus file is ([`parse_corpus`]: one
/// sentence or line per line, a blank line between documents); an array holds one string per document, whose lines
/// are its sentences (as a `.jsonl` corpus's texts).
fn documents(corpus: JsValue) -> Result<Vec<Vec<String>>> {
    if let Some(text) = corpus.as_string() {
        return parse_corpus(&text, CorpusFormat::Text);
    }
    let texts: Vec<String> = serde_wasm_bindgen::from_value(corpus).map_err(|_| {
        Error::Input("the corpus must be a string (a blank line between documents) or an array of document strings".into())
    })?;
    if texts.is_empty() {
        return Err(Error::Input("the corpus has no documents: give at least two (one string each)".into()));
    }
    let mut docs = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let doc: Vec<String> = text.lines().map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
        if doc.is_empty() {
            return Err(Error::Input(format!("corpus[{i}] has no text: remove it or give it text")));
        }
        if let Some(long) = doc.iter().find(|s| s.len() > MAX_LINE_CHARS && s.chars().nth(MAX_LINE_CHARS).is_some()) {
            return Err(Error::Input(format!(
                "corpus[{i}]: a line of {} characters, over the limit of {MAX_LINE_CHARS}; put one sentence or line \
                 per line",
                long.chars().count()
            )));
        }
        docs.push(doc);
    }
    Ok(docs)
}

/// What `pretrain`'s call into the module resolves to: the report, and (set as `Uint8Array`s beside it) the new
/// folder's `config` (config.json) and `weights` (model.safetensors), which the wrapper loads as the model's new self.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsPretrained {
    steps: Vec<JsProgress>,
    epochs: Vec<JsProgress>,
}

#[wasm_bindgen]
impl WasmModel {
    /// Pre-trains a copy of this model (masked LM, and next-sentence prediction unless `nsp: false`), given as the
    /// files it was loaded from (with its LoRA adapter, if any), on its backend (see `training::job::pretrain`): `corpus` a string or an array of
    /// documents ([`documents`]), `options` [`JsPretrainOptions`], `hooks` and `checkpoint` as `fineTune`'s. This
    /// model is not changed; resolves to `{ steps, epochs, config, weights }`.
    #[wasm_bindgen(js_name = pretrain)]
    #[allow(clippy::too_many_arguments)]
    pub fn pretrain(&self, config: Vec<u8>, tokenizer: Option<Vec<u8>>, vocab: Option<Vec<u8>>,
        tokenizer_config: Option<Vec<u8>>, weights: JsValue, adapter_config: Option<Vec<u8>>,
        adapter_weights: Option<Vec<u8>>, corpus: JsValue, options: JsValue, hooks: JsValue, checkpoint: JsValue)
        -> Result<js_sys::Promise, JsError> {
        self.engine.expect_f32_activations("pre-training").map_err(js_err)?;
        let opts: JsPretrainOptions = if options.is_undefined() || options.is_null() {
            JsPretrainOptions::default()
        } else {
            serde_wasm_bindgen::from_value(options).map_err(|e| JsError::new(&format!("pretrain: bad options: {e}")))?
        };
        let original: serde_json::Value = serde_json::from_slice(&config).map_err(|e| js_err(e.into()))?;
        // A LoRA adapter loaded with the model is folded in at load: what trains is the model as it runs.
        let adapter = adapter_config.zip(adapter_weights);
        let files = ModelFiles { config, tokenizer, vocab, tokenizer_config, weights: super::weights_file(weights)?.0, adapter, sentence: Vec::new() };
        let m = loader::load(ModelSource::Files(files), &LoadOptions::default()).map_err(js_err)?;
        let own = self.engine.config();
        if m.config.hidden_size != own.hidden_size || m.config.num_hidden_layers != own.num_hidden_layers {
            return Err(js_err(Error::Input("the files to pre-train are not this model's".into())));
        }
        let (data, fit) = opts.resolve(m.config.max_position_embeddings, m.config.family).map_err(js_err)?;
        let corpus = documents(corpus).map_err(js_err)?;
        let engine = self.engine.clone();
        let mut hooks = JsHooks { hooks, method: "pretrain" };
        let mut checkpoints = checkpoints(checkpoint).map_err(js_err)?;
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let weights = m.weights().map_err(|e| JsValue::from(js_err(e)))?;
            let done = with_model!(&*engine, e => job::pretrain(&e.backend, &m.config, &m.tokenizer, &weights, &original,
                &corpus, &data, &fit, &mut hooks, checkpoints.as_mut()).await)
            .map_err(|e| JsValue::from(js_err(e)))?;
            let (steps, epochs) = report(&done.report);
            let out = to_js(&JsPretrained { steps, epochs }).map_err(JsValue::from)?;
            for (key, bytes) in [("config", done.config_json.as_bytes()), ("weights", &done.safetensors[..])] {
                js_sys::Reflect::set(&out, &JsValue::from_str(key), &js_sys::Uint8Array::from(bytes))?;
            }
            Ok(out)
        }))
    }
}
