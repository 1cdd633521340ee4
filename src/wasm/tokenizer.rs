//! What a model from nothing starts with, no model needed: `trainTokenizer`, a BERT WordPiece vocabulary trained on
//! the page's texts ([`crate::tokenizer::train`]); and `initialModel`, a BERT's weights drawn for a config.json
//! ([`crate::training::init`]), which `Bert.create` loads with that tokenizer. The JS wrapper (js/index.js) checks
//! the options' types first.

use serde::Deserialize;
use wasm_bindgen::prelude::*;

use super::js_err;
use crate::tokenizer::train::{train_wordpiece, WordPieceOptions};
use crate::training::init::initial_model;

/// The wrapper's options, as it passes them on (absent ones are left out: the Rust defaults apply).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JsTokenizerOptions {
    vocab_size: Option<usize>,
    min_frequency: Option<u64>,
    lowercase: Option<bool>,
}

/// Trains on `texts` with `options` `{ vocabSize, minFrequency, lowercase }`; returns the folder's files as
/// `{ "tokenizer.json": Uint8Array, "vocab.txt", "tokenizer_config.json", "special_tokens_map.json" }`.
#[wasm_bindgen(js_name = trainTokenizer)]
pub fn train_tokenizer(texts: Vec<String>, options: JsValue) -> Result<js_sys::Object, JsError> {
    let o: JsTokenizerOptions = if options.is_undefined() || options.is_null() {
        JsTokenizerOptions::default()
    } else {
        serde_wasm_bindgen::from_value(options).map_err(|e| JsError::new(&format!("trainTokenizer: bad options: {e}")))?
    };
    let d = WordPieceOptions::default();
    let opts = WordPieceOptions {
        vocab_size: o.vocab_size.unwrap_or(d.vocab_size),
        min_frequency: o.min_frequency.unwrap_or(d.min_frequency),
        lowercase: o.lowercase.unwrap_or(d.lowercase),
        ..d
    };
    let trained = train_wordpiece(&texts, &opts).map_err(js_err)?;
    let out = js_sys::Object::new();
    for (name, contents) in trained.files() {
        js_sys::Reflect::set(&out, &JsValue::from_str(name), &js_sys::Uint8Array::from(contents.as_bytes()))
            .map_err(|e| JsError::new(&format!("trainTokenizer: cannot set {name}: {e:?}")))?;
    }
    Ok(out)
}

/// `initialModel`'s options.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct JsInitOptions {
    seed: Option<u64>,
}

/// A BERT from scratch for `config` (config.json's text) with `{ seed }`: `{ config: Uint8Array, weights:
/// Uint8Array }`, its config.json (architectures set) and model.safetensors.
#[wasm_bindgen(js_name = initialModel)]
pub fn initial_model_files(config: &str, options: JsValue) -> Result<js_sys::Object, JsError> {
    let o: JsInitOptions = if options.is_undefined() || options.is_null() {
        JsInitOptions::default()
    } else {
        serde_wasm_bindgen::from_value(options).map_err(|e| JsError::new(&format!("Bert.create: bad options: {e}")))?
    };
    let (config, weights) = initial_model(config, o.seed.unwrap_or(0)).map_err(js_err)?;
    let out = js_sys::Object::new();
    for (name, bytes) in [("config", config.as_bytes()), ("weights", &weights[..])] {
        js_sys::Reflect::set(&out, &JsValue::from_str(name), &js_sys::Uint8Array::from(bytes))
            .map_err(|e| JsError::new(&format!("Bert.create: cannot set {name}: {e:?}")))?;
    }
    Ok(out)
}
