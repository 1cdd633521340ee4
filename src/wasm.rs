//! The browser entry: a thin wasm-bindgen shim over [`crate::tasks`]; the JavaScript API is in `js/`.
//!
//! Rules of this boundary (wasm-bindgen issue 4440: JS may call again while a Rust future is suspended):
//! methods take `&self`, never `&mut self`; state that async calls share sits in `Rc` and is cloned into the futures;
//! the JS wrapper also queues calls, so two calls never run at once. Errors become rejected promises carrying a JS
//! `Error` with our message. A panic is logged by `console_error_panic_hook` and reported to the listener JS
//! registered ([`set_panic_listener`]), which rejects the call in flight (a trap inside a suspended future would
//! otherwise leave its promise pending forever) and makes the wrapper instantiate a fresh module for the next load.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Once;

use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::tokenizer::Tokenizer;
use crate::Error;

thread_local! {
    static PANIC_LISTENER: RefCell<Option<js_sys::Function>> = const { RefCell::new(None) };
}

fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            console_error_panic_hook::hook(info);
            let message = info.to_string();
            PANIC_LISTENER.with(|l| {
                if let Ok(l) = l.try_borrow() {
                    if let Some(f) = l.as_ref() {
                        let _ = f.call1(&JsValue::NULL, &JsValue::from_str(&message));
                    }
                }
            });
        }));
    });
}

#[wasm_bindgen(start)]
fn start() {
    install_panic_hook();
}

/// Registers `f(message)`, called when Rust panics (after the message is logged to the console).
#[wasm_bindgen(js_name = setPanicListener)]
pub fn set_panic_listener(f: js_sys::Function) {
    install_panic_hook();
    PANIC_LISTENER.with(|l| *l.borrow_mut() = Some(f));
}

/// The crate version, for bug reports.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Panics on purpose, so the browser tests can check that a panic becomes a rejected promise and the next load
/// still works. Not part of the public API.
#[wasm_bindgen(js_name = __debugPanic)]
pub fn debug_panic() {
    panic!("deliberate panic (__debugPanic)");
}

/// A `crate::Error` as a JS `Error` with our message (which says how to fix the problem).
fn js_err(e: Error) -> JsError {
    JsError::new(&e.to_string())
}

/// What the model shares with the futures of its async calls (cloned into them: they outlive the `&self` borrow).
struct Inner {
    tokenizer: Tokenizer,
    device: &'static str,
}

/// A loaded model. JS owns it through the `Bert` wrapper (js/index.js), which frees it on `dispose()`.
#[wasm_bindgen]
pub struct WasmModel {
    inner: Rc<Inner>,
}

/// `tokenize`'s result, with the field names of the Hugging Face tokenizers.
#[derive(Serialize)]
struct Tokenized {
    input_ids: Vec<u32>,
    token_type_ids: Vec<u32>,
    tokens: Vec<String>,
}

/// `max_position_embeddings` of a config.json: the tokenizer truncates there (the longest input the model takes).
fn max_positions(config: &[u8]) -> Result<usize, Error> {
    let v: serde_json::Value = serde_json::from_slice(config)
        .map_err(|e| Error::Config(format!("config.json is not valid JSON ({e})")))?;
    match v.get("max_position_embeddings") {
        None => Ok(512),
        Some(n) => n.as_u64().map(|n| n as usize).ok_or_else(|| {
            Error::Config("config.json: max_position_embeddings must be a positive integer".into())
        }),
    }
}

#[wasm_bindgen]
impl WasmModel {
    /// Loads a model from the bytes of its files: config.json, then tokenizer.json or vocab.txt (with
    /// tokenizer_config.json when present), and model.safetensors. `device` is "webgpu" or "cpu" (the JS wrapper
    /// resolves "auto").
    pub async fn load(
        config: Vec<u8>,
        tokenizer: Option<Vec<u8>>,
        vocab: Option<Vec<u8>>,
        tokenizer_config: Option<Vec<u8>>,
        weights: Vec<u8>,
        device: String,
    ) -> Result<WasmModel, JsError> {
        let device = match device.as_str() {
            "cpu" => "cpu",
            "webgpu" => "webgpu",
            other => return Err(JsError::new(&format!("device must be \"webgpu\" or \"cpu\" (got \"{other}\")"))),
        };
        let max_length = max_positions(&config).map_err(js_err)?;
        let tokenizer = match (tokenizer, vocab) {
            (Some(json), _) => Tokenizer::from_json(&json, tokenizer_config.as_deref(), max_length),
            (None, Some(vocab)) => {
                let vocab = String::from_utf8(vocab)
                    .map_err(|_| Error::Tokenizer("vocab.txt is not UTF-8 text".into()))
                    .map_err(js_err)?;
                Tokenizer::from_vocab(&vocab, tokenizer_config.as_deref(), max_length)
            }
            (None, None) => Err(Error::Tokenizer("give tokenizer.json or vocab.txt".into())),
        }
        .map_err(js_err)?;
        let _ = weights;
        Ok(WasmModel { inner: Rc::new(Inner { tokenizer, device }) })
    }

    /// "webgpu" or "cpu".
    #[wasm_bindgen(getter)]
    pub fn device(&self) -> String {
        self.inner.device.to_string()
    }

    /// Tokenizes a text or a pair: `{ input_ids, token_type_ids, tokens }`, with `[CLS]`/`[SEP]`, no padding.
    pub fn tokenize(&self, text: &str, pair: Option<String>) -> Result<JsValue, JsError> {
        let e = self.inner.tokenizer.encode(text, pair.as_deref()).map_err(js_err)?;
        let out = Tokenized { input_ids: e.ids, token_type_ids: e.type_ids, tokens: e.tokens };
        serde_wasm_bindgen::to_value(&out).map_err(|e| JsError::new(&e.to_string()))
    }
}
