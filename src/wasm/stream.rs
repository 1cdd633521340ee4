//! The weights file as it downloads ([`crate::weights::stream`]): js/loader.js pushes each piece of the response
//! here as it arrives, so the browser never holds the whole file in JS memory, then hands the finished stream to
//! `WasmModel.load` / `loadGguf` in place of the file's bytes.

use wasm_bindgen::prelude::*;

use super::{js_err, parse_device};
use crate::engine::Placement;
use crate::weights::stream::{self, DeviceSink, Format, Streamed};

/// A weights file being received (`model.safetensors` or a `.gguf`).
#[wasm_bindgen]
pub struct WeightStream {
    state: State,
    /// [`WeightStream::on_device`]: the GPU its matrices go to as they arrive, which the model is then loaded on.
    placement: Option<Placement>,
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
        WeightStream { state: State::Receiving(inner), placement: None }
    }

    /// [`WeightStream::new`] for a model bound for `device` ("webgpu" or "auto"): the GPU is acquired now, as a load
    /// would acquire it, and where there is one the file's matrices are written into its memory as they arrive,
    /// never into this module's memory ([`stream::WeightStream::place_on_device`]). The load then uses that GPU.
    #[wasm_bindgen(js_name = onDevice)]
    pub async fn on_device(gguf: bool, length: Option<f64>, limit: f64, hash: bool, device: String)
        -> Result<WeightStream, JsError> {
        let placement = Placement::pick(parse_device(&device)?).await.map_err(js_err)?;
        let mut s = WeightStream::new(gguf, length, limit, hash);
        if let (Some(_), State::Receiving(inner)) = (&placement.gpu, &mut s.state) {
            inner.place_on_device();
        }
        s.placement = Some(placement);
        Ok(s)
    }

    /// The next piece of the file. An error ends the stream.
    pub fn push(&mut self, piece: &[u8]) -> Result<(), JsError> {
        let State::Receiving(s) = &mut self.state else { return Err(JsError::new("the weights stream has ended")) };
        let sink = sink_of(&self.placement);
        s.push_to(piece, sink).map_err(|e| {
            self.state = State::Gone;
            js_err(e)
        })
    }

    /// The file is complete: checks it, and returns the SHA-256 of its bytes (lower-case hex) if `hash` was asked.
    pub fn finish(&mut self) -> Result<Option<String>, JsError> {
        let State::Receiving(s) = std::mem::replace(&mut self.state, State::Gone) else {
            return Err(JsError::new("the weights stream has ended"));
        };
        let sink = sink_of(&self.placement);
        let (read, digest) = s.finish_to(sink).map_err(js_err)?;
        self.state = State::Done(read);
        Ok(digest)
    }
}

impl WeightStream {
    /// What a finished stream read, taken out of the JS object `value` (a `WeightStream` that `finish` accepted), and
    /// the device it was made for ([`WeightStream::on_device`]).
    pub(crate) fn take(value: JsValue) -> Result<(Streamed, Option<Placement>), JsError> {
        let bad = || JsError::new("the weights must be a Uint8Array or a finished WeightStream");
        let mut s = <WeightStream as wasm_bindgen::convert::TryFromJsValue>::try_from_js_value(value).map_err(|_| bad())?;
        match std::mem::replace(&mut s.state, State::Gone) {
            State::Done(read) => Ok((read, s.placement.take())),
            _ => Err(bad()),
        }
    }
}

/// The GPU a stream made with [`WeightStream::on_device`] writes its matrices to, if it found one.
fn sink_of(placement: &Option<Placement>) -> Option<&dyn DeviceSink> {
    placement.as_ref().and_then(|p| p.gpu.as_ref()).map(|g| g as &dyn DeviceSink)
}
