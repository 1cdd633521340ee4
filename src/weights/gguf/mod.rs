//! GGUF v3: a bounded reader and a writer, and BERT in GGUF (llama.cpp's `bert` names) both ways.
//!
//! Why our own: the file is parsed from a byte slice (the browser hands us bytes; no mmap, no `std::fs`), every
//! length and count in it is untrusted and capped before anything is allocated, and the crate must build for
//! wasm32. The format is small (the spec is `docs/gguf.md` in ggml):
//!
//! ```text
//! "GGUF" | u32 version (3; 2 has the same layout) | u64 tensor_count | u64 kv_count
//! kv_count × (string key | u32 value_type | value)
//! tensor_count × (string name | u32 n_dims | n_dims × u64 ne | u32 ggml_type | u64 offset)
//! padding to `general.alignment` (default 32) | tensor data (each offset relative to here, aligned)
//! ```
//! Strings are `u64 length + UTF-8 bytes`; everything is little-endian. `ne[0]` is the contiguous dimension, so
//! GGUF dims are PyTorch's shape reversed: a linear weight `(out, in)` is stored as `ne = [in, out]`, and
//! Q8_0/Q4_0 blocks run along `in`.
//!
//! # Layout
//! - the container, generic GGUF with nothing BERT-specific: [`value`] (metadata values and their encoding),
//!   [`read`] ([`Gguf::parse`]: bounded, validated header; tensor data located, not copied), [`write`]
//!   ([`GgufWriter`]), and here the format's constants and caps;
//! - [`names`]: BERT's tensor names, Hugging Face ↔ llama.cpp;
//! - [`families`]: the families beyond BERT's layout (NomicBERT, MPNet, GTE, DeBERTa-v2/v3): their architecture
//!   names and the metadata that states their config's choices;
//! - [`bert`]: a BERT model in GGUF, both ways ([`read_bert`], [`load_gguf`], [`write_bert`]); the vocabulary
//!   forms it stores are the tokenizer's ([`crate::tokenizer::gguf_vocab`]);
//! - [`storage`]: how each tensor is stored for a `--dtype` ([`storage_for`]), which the writer applies;
//! - [`convert`]: `bertgpu convert`, a Hugging Face folder → one `.gguf`.
//!
//! # BERT in GGUF
//! Encoder tensors use llama.cpp's names (`gguf-py/gguf/constants.py`, `tensor_mapping.py`, `convert_hf_to_gguf.py`
//! `BertModel`), see [`hf_to_gguf_name`]. Task heads, which llama.cpp drops, keep their Hugging Face names:
//! `pooler.dense.*`, `cls.predictions.*` (MLM head; a decoder tied to the word embeddings is not stored),
//! `cls.seq_relationship.*`, `classifier.*`, `qa_outputs.*`. Metadata: llama.cpp's `bert.*` hyper-parameters and
//! `tokenizer.ggml.*` vocabulary (so llama.cpp loads the encoder), plus the whole `config.json` under
//! [`KEY_CONFIG_JSON`] (activation, `id2label`, ...) and the whole `tokenizer.json` under
//! `tokenizer.huggingface.json`, so one `.gguf` is a complete model.

pub mod bert;
pub mod convert;
pub mod families;
pub mod names;
pub mod read;
pub mod storage;
pub mod value;
pub mod write;

pub use bert::{
    gguf_model, load_gguf, read_bert, write_bert, BertGguf, BertGgufMeta, GgufModel, KEY_CONFIG_JSON, KEY_TOKENIZER_CONFIG_JSON,
    KEY_TOKENIZER_JSON,
};
#[cfg(not(target_arch = "wasm32"))]
pub use bert::read_bert_header;
#[cfg(not(target_arch = "wasm32"))]
pub use convert::convert;
pub use convert::{tensors_from_safetensors, ConvertReport};
pub use storage::storage_for;
pub use names::{canonical_hf_name, gguf_to_hf_name, gguf_to_hf_name_in, hf_to_gguf_name};
pub use read::{Gguf, TensorInfo};
pub use value::{Array, Value};
pub use write::GgufWriter;

use crate::dtype::Dtype;
use crate::Error;

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The version we write. Version 2 has the same layout and is read too; version 1 (u32 counts) is not.
pub const GGUF_VERSION: u32 = 3;
pub const DEFAULT_ALIGNMENT: u64 = 32;

// Caps on untrusted counts and lengths. Every one is also checked against the bytes that remain in the file
// before anything is allocated, so a small hostile file cannot make us allocate much; the caps bound the rest.
/// Longest string value: a `tokenizer.json` of a 250k-token vocabulary is ~20 MB.
pub const MAX_STRING_BYTES: u64 = 64 << 20;
/// Longest key or tensor name (llama.cpp uses `GGML_MAX_NAME` = 64 for tensor names; keys are similar).
pub const MAX_NAME_BYTES: u64 = 1024;
/// Most elements in one metadata array (vocabularies are ≤ ~260k tokens).
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
pub const MAX_KV_COUNT: u64 = 1 << 16;
pub const MAX_TENSOR_COUNT: u64 = 1 << 16;
/// ggml tensors have at most 4 dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Largest allowed `general.alignment`.
pub const MAX_ALIGNMENT: u64 = 1 << 16;

pub const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub const KEY_ALIGNMENT: &str = "general.alignment";
pub const KEY_ARCHITECTURE: &str = "general.architecture";

pub(crate) fn gguf_err(msg: impl Into<String>) -> Error {
    Error::Gguf(msg.into())
}

/// Bytes that `n` values of `ty` take; `None` on overflow.
fn type_bytes(ty: Dtype, n: u64) -> Option<u64> {
    let (per, bytes) = ty.block();
    (n / per as u64).checked_mul(bytes as u64)
}
