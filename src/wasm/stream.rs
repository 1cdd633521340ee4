//! The weights file as it downloads ([`crate::weights::stream`]): js/loader.js pushes each piece of the response
//! here as it arrives, so the browser never holds the whole file in JS memory, then hands the finished stream to
//! `WasmModel.load` / `loadGguf` in place of the file's bytes.

use wasm_bindgen::prelude::*;

use super::js_err;
use crate::weights::stream::{self, Format, Streamed};

/// A weights file being received (`model.safetensors` or a `.gguf`).
#[wasm_bindgen]
pub struct WeightStream {
    state: State,
}

enum State {
    Receiving(stream::WeightStream),
    Done(Streamed),
    /// Failed, or taken by a load.
    Gone,
}

#[wasm_bindgen]
impl WeightStream {
    /// `gguf`: a `.gguf` (else `model.safetensors`); `length`: the download's announced length, if any; `limit`: the
    /// most bytes it may have (`maxBytes`); `hash`: keep the SHA-256 of its bytes (a pinned file).
    #[wasm_bindgen(constructor)]
    pub fn new(gguf: bool, length: Option<f64>, limit: f64, hash: bool) -> WeightStream {
        let format = if gguf { Format::Gguf } else { Format::Safetensors };
        // (JS numbers of byte counts are whole and below 2⁵³; `as` saturates at this memory's size.)
        let inner = stream::WeightStream::new(format, length.map(|l| l as usize), limit as usize, hash);
        WeightStream { state: State::Receiving(inner) }
    }

    /// The next piece of the file. An error ends the stream.
    pub fn push(&mut self, piece: &[u8]) -> Result<(), JsError> {
        let State::Receiving(s) = &mut self.state else { return Err(JsError::new("the weights stream has ended")) };
        s.push(piece).map_err(|e| {
            self.state = State::Gone;
            js_err(e)
        })
    }

    /// The file is complete: checks it, and returns the SHA-256 of its bytes (lower-case hex) if `hash` was asked.
    pub fn finish(&mut self) -> Result<Option<String>, JsError> {
        let State::Receiving(s) = std::mem::replace(&mut self.state, State::Gone) else {
            return Err(JsError::new("the weights stream has ended"));
        };
        let (read, digest) = s.finish().map_err(js_err)?;
        self.state = State::Done(read);
        Ok(digest)
    }
}

impl WeightStream {
    /// What a finished stream read, taken out of the JS object `value` (a `WeightStream` that `finish` accepted).
    pub(crate) fn take(value: JsValue) -> Result<Streamed, JsError> {
        let bad = || JsError::new("the weights must be a Uint8Array or a finished WeightStream");
        let mut s = <WeightStream as wasm_bindgen::convert::TryFromJsValue>::try_from_js_value(value).map_err(|_| bad())?;
        match std::mem::replace(&mut s.state, State::Gone) {
            State::Done(read) => Ok(read),
            _ => Err(bad()),
        }
    }
}
