//! A checkpoint saved in shards as js/loader.js fetches it: `{ index, indexName, shards: [[name, Uint8Array |
//! WeightStream], ...] }` (model.safetensors.index.json, or `indexName` pytorch_model.bin.index.json, and each
//! shard it names, read on the host). Loading, training and `toGguf` all take it where they take one weights file.

use wasm_bindgen::prelude::*;

use super::{js_err, stream, JsBytes};
use crate::weights::sharded::{ShardIndex, BIN_INDEX_FILE, INDEX_FILE};
use crate::weights::stream::Streamed;
use crate::weights::Weights;

/// The index's bytes, its file name, and the shards as JS values, if `weights` is a sharded checkpoint's files.
fn parts(weights: &JsValue) -> Result<Option<(Vec<u8>, &'static str, Vec<(String, JsValue)>)>, JsError> {
    if !weights.is_object() || weights.is_instance_of::<js_sys::Uint8Array>() {
        return Ok(None);
    }
    let index = js_sys::Reflect::get(weights, &JsValue::from_str("index")).map_err(|_| JsError::new("load: weights"))?;
    if index.is_undefined() {
        return Ok(None);
    }
    let index: js_sys::Uint8Array =
        index.dyn_into().map_err(|_| JsError::new(&format!("load: the sharded weights' {INDEX_FILE} must be bytes")))?;
    let name = js_sys::Reflect::get(weights, &JsValue::from_str("indexName")).ok().and_then(|n| n.as_string());
    let file = if name.as_deref() == Some(BIN_INDEX_FILE) { BIN_INDEX_FILE } else { INDEX_FILE };
    let list = js_sys::Reflect::get(weights, &JsValue::from_str("shards")).map_err(|_| JsError::new("load: weights"))?;
    let list: js_sys::Array =
        list.dyn_into().map_err(|_| JsError::new("load: the sharded weights' shards must be [[name, bytes], ...]"))?;
    let mut shards = Vec::with_capacity(list.length() as usize);
    for entry in list.iter() {
        let pair: js_sys::Array = entry.dyn_into().map_err(|_| JsError::new("load: a shard must be [name, bytes]"))?;
        let name = pair.get(0).as_string().ok_or_else(|| JsError::new("load: a shard's name must be a string"))?;
        shards.push((name, pair.get(1)));
    }
    Ok(Some((index.to_vec(), file, shards)))
}

/// The shards' tensors joined after the index's checks ([`crate::weights::sharded`]); `None` for any other value.
pub(super) fn sharded_weights(weights: &JsValue) -> Result<Option<Weights>, JsError> {
    let Some((index, file, list)) = parts(weights)? else { return Ok(None) };
    let index = ShardIndex::parse_as(&index, file).map_err(js_err)?;
    let mut shards = Vec::with_capacity(list.len());
    for (name, value) in list {
        let w = match value.dyn_into::<js_sys::Uint8Array>() {
            Ok(bytes) => Weights::from_file_source(&JsBytes(bytes)),
            Err(other) => match stream::WeightStream::take(other)? {
                (Streamed::Safetensors(w), None) => Ok(w),
                _ => return Err(JsError::new(&format!("load: shard {name} is not a safetensors file read on the host"))),
            },
        };
        shards.push((name.clone(), w.map_err(|e| JsError::new(&format!("shard {name}: {e}")))?));
    }
    shards.sort_by(|a, b| a.0.cmp(&b.0));
    index.join_weights(shards).map(Some).map_err(js_err)
}

/// The index's bytes, its file name and each shard's bytes (`toGguf`, which reads files, not tensors); `None` for
/// any other value. Every shard must be bytes here (the loader streams shards only for a load).
pub(super) fn shard_bytes(weights: &JsValue) -> Result<Option<(Vec<u8>, &'static str, Vec<(String, Vec<u8>)>)>, JsError> {
    let Some((index, file, list)) = parts(weights)? else { return Ok(None) };
    let shards = list
        .into_iter()
        .map(|(name, value)| match value.dyn_into::<js_sys::Uint8Array>() {
            Ok(bytes) => Ok((name, bytes.to_vec())),
            Err(_) => Err(JsError::new(&format!("shard {name}: its bytes must be a Uint8Array"))),
        })
        .collect::<Result<_, _>>()?;
    Ok(Some((index, file, shards)))
}
