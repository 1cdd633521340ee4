//! The vectors beside `embed`'s ([`crate::tasks::vectors`]): `embedSparse` (SPLADE), `embedTokens` (one vector per
//! token) and `quantize` (`embed`'s `precision`). Typed arrays out, so that a vocabulary-wide or per-token result
//! crosses into JavaScript without a JSON detour. The JS wrapper (js/index.js) checks the options' types first.

use wasm_bindgen::prelude::*;

use super::{js_err, WasmModel};
use crate::heads::quantize::{quantize, Precision, Quantized, Ranges};
use crate::tasks::vectors::{SparseOptions, TokenOptions};
use crate::tokenizer::char_to_utf16_offsets;
use crate::Error;

fn set(o: &js_sys::Object, key: &str, value: &JsValue) -> Result<(), JsValue> {
    js_sys::Reflect::set(o, &key.into(), value).map(|_| ())
}

#[wasm_bindgen]
impl WasmModel {
    /// SPLADE vectors of `texts`: per text `{ indices: Uint32Array, values: Float32Array }`, indices ascending.
    #[wasm_bindgen(js_name = embedSparse)]
    pub fn embed_sparse(&self, texts: Vec<String>, prompt: Option<String>, max_active_dims: Option<u32>)
        -> Result<js_sys::Promise, JsError> {
        let opts = SparseOptions {
            prompt,
            max_active_dims: max_active_dims.map(|n| n as usize),
            batch_size: texts.len().max(1),
            ..SparseOptions::default()
        };
        // The model and the prompt checked before the promise: a bad call throws at once.
        self.engine.check_sparse(&opts).map_err(js_err)?;
        let engine = self.engine.clone();
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = engine.embed_sparse(&refs, &opts).await.map_err(|e| JsValue::from(js_err(e)))?;
            let out = js_sys::Array::new();
            for v in vectors {
                let o = js_sys::Object::new();
                set(&o, "indices", &js_sys::Uint32Array::from(v.indices.as_slice()).into())?;
                set(&o, "values", &js_sys::Float32Array::from(v.values.as_slice()).into())?;
                out.push(&o);
            }
            Ok(out.into())
        }))
    }

    /// Per-token vectors of `texts`: per text `{ ids: Uint32Array, tokens, offsets: [[start, end], ...] (UTF-16,
    /// into the text given), dims, vectors: Float32Array (tokens × dims) }`.
    #[wasm_bindgen(js_name = embedTokens)]
    pub fn embed_tokens(&self, texts: Vec<String>, prompt: Option<String>, normalize: bool)
        -> Result<js_sys::Promise, JsError> {
        let opts = TokenOptions { prompt, normalize, batch_size: texts.len().max(1) };
        self.engine.prompt_named(opts.prompt.as_deref()).map_err(js_err)?;
        let engine = self.engine.clone();
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let all = engine.embed_tokens(&refs, &opts).await.map_err(|e| JsValue::from(js_err(e)))?;
            let out = js_sys::Array::new();
            for (t, text) in all.into_iter().zip(&texts) {
                let o = js_sys::Object::new();
                set(&o, "ids", &js_sys::Uint32Array::from(t.ids.as_slice()).into())?;
                let tokens: js_sys::Array = t.tokens.iter().map(|s| JsValue::from_str(s)).collect();
                set(&o, "tokens", &tokens.into())?;
                let offsets: js_sys::Array = char_to_utf16_offsets(text, &t.offsets)
                    .into_iter()
                    .map(|(s, e)| -> JsValue { js_sys::Array::of2(&(s as u32).into(), &(e as u32).into()).into() })
                    .collect();
                set(&o, "offsets", &offsets.into())?;
                set(&o, "dims", &(t.dims as u32).into())?;
                set(&o, "vectors", &js_sys::Float32Array::from(t.vectors.as_slice()).into())?;
                out.push(&o);
            }
            Ok(out.into())
        }))
    }

    /// `embed`'s vectors (`flat`, `n` rows) in `precision` ("int8", "uint8", "binary", "ubinary"), as
    /// sentence-transformers' `quantize_embeddings`: an `Int8Array` or `Uint8Array` of `n` rows. int8/uint8 take
    /// `ranges_min` / `ranges_max` per dimension, or the rows' own where absent.
    pub fn quantize(&self, flat: Vec<f32>, n: usize, precision: &str, ranges_min: Option<Vec<f32>>,
        ranges_max: Option<Vec<f32>>) -> Result<JsValue, JsError> {
        let precision: Precision = precision.parse().map_err(js_err)?;
        if n == 0 || flat.len() % n != 0 {
            return Err(js_err(Error::Input(format!("quantize: {} values are not {n} rows", flat.len()))));
        }
        let rows: Vec<Vec<f32>> = flat.chunks_exact(flat.len() / n).map(<[f32]>::to_vec).collect();
        let ranges = match (ranges_min, ranges_max) {
            (Some(min), Some(max)) => Some(Ranges { min, max }),
            (None, None) => None,
            _ => return Err(js_err(Error::Input("ranges: give both the minimums and the maximums".into()))),
        };
        Ok(match quantize(rows, precision, ranges.as_ref()).map_err(js_err)? {
            Quantized::Float32(v) => js_sys::Float32Array::from(v.concat().as_slice()).into(),
            Quantized::Int8(v) => js_sys::Int8Array::from(v.concat().as_slice()).into(),
            Quantized::Uint8(v) => js_sys::Uint8Array::from(v.concat().as_slice()).into(),
        })
    }
}
