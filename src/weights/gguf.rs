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
//! # BERT in GGUF
//! Encoder tensors use llama.cpp's names (`gguf-py/gguf/constants.py`, `tensor_mapping.py`, `convert_hf_to_gguf.py`
//! `BertModel`), see [`hf_to_gguf_name`]. Task heads, which llama.cpp drops, keep their Hugging Face names:
//! `pooler.dense.*`, `cls.predictions.*` (MLM head; a decoder tied to the word embeddings is not stored),
//! `cls.seq_relationship.*`, `classifier.*`, `qa_outputs.*`. Metadata: llama.cpp's `bert.*` hyper-parameters and
//! `tokenizer.ggml.*` vocabulary (so llama.cpp loads the encoder), plus the whole `config.json` under
//! [`KEY_CONFIG_JSON`] (activation, `id2label`, ...) and the whole `tokenizer.json` under
//! `tokenizer.huggingface.json`, so one `.gguf` is a complete model.

use std::collections::{HashMap, HashSet};


use crate::weights::quant::{self, QuantKind, Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK};
use crate::config::Family;
use crate::weights::{albert, distilbert, electra, roberta, HostData, HostTensor};
use crate::{Error, Result};

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

/// Metadata key holding the model's Hugging Face `config.json`, verbatim.
pub const KEY_CONFIG_JSON: &str = "bertgpu.config_json";
/// Metadata key holding the Hugging Face `tokenizer_config.json` (special-token names), verbatim, when the folder had one.
pub const KEY_TOKENIZER_CONFIG_JSON: &str = "bertgpu.tokenizer_config_json";
/// Metadata key holding the Hugging Face `tokenizer.json`, verbatim (llama.cpp's name for it).
pub const KEY_TOKENIZER_JSON: &str = "tokenizer.huggingface.json";
pub const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub const KEY_ALIGNMENT: &str = "general.alignment";
pub const KEY_ARCHITECTURE: &str = "general.architecture";

fn gguf_err(msg: impl Into<String>) -> Error {
    Error::Gguf(msg.into())
}

// ---------------------------------------------------------------------------------------------------------------
// Tensor types
// ---------------------------------------------------------------------------------------------------------------

/// The ggml tensor types we read and write (`enum ggml_type` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q8_0,
}

impl GgmlType {
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q8_0 => 8,
        }
    }

    pub fn from_id(id: u32, tensor: &str) -> Result<Self> {
        Ok(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            8 => GgmlType::Q8_0,
            other => {
                return Err(gguf_err(format!(
                    "tensor `{tensor}` has unsupported tensor type {} (ggml type {other}); bertgpu reads F32, F16, \
                     Q8_0 and Q4_0: re-convert the model with `bertgpu convert --dtype f16|q8_0|q4_0`",
                    ggml_type_name(other)
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        ggml_type_name(self.id())
    }

    /// (values per block, bytes per block).
    pub fn block(self) -> (u64, u64) {
        match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 => (1, 2),
            GgmlType::Q4_0 => (QK as u64, Q4_0_BLOCK_BYTES as u64),
            GgmlType::Q8_0 => (QK as u64, Q8_0_BLOCK_BYTES as u64),
        }
    }

    pub fn of(data: &HostData) -> Self {
        match data {
            HostData::F32(_) => GgmlType::F32,
            HostData::F16(_) => GgmlType::F16,
            HostData::Q8_0(_) => GgmlType::Q8_0,
            HostData::Q4_0(_) => GgmlType::Q4_0,
        }
    }
}

/// Names of ggml types, for error messages.
fn ggml_type_name(id: u32) -> &'static str {
    const NAMES: [&str; 42] = [
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
        "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16",
        "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4",
        "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4", "NVFP4", "?",
    ];
    NAMES.get(id as usize).copied().unwrap_or("unknown")
}

/// Bytes that `n` values of `ty` take; `None` on overflow.
fn type_bytes(ty: GgmlType, n: u64) -> Option<u64> {
    let (per, bytes) = ty.block();
    (n / per).checked_mul(bytes)
}

// ---------------------------------------------------------------------------------------------------------------
// Metadata values
// ---------------------------------------------------------------------------------------------------------------

/// A metadata value (`gguf_metadata_value_type`).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array: one element type for all elements. Nested arrays are refused (llama.cpp writes none).
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

impl Value {
    fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => T_U8,
            Value::I8(_) => T_I8,
            Value::U16(_) => T_U16,
            Value::I16(_) => T_I16,
            Value::U32(_) => T_U32,
            Value::I32(_) => T_I32,
            Value::F32(_) => T_F32,
            Value::Bool(_) => T_BOOL,
            Value::String(_) => T_STRING,
            Value::Array(_) => T_ARRAY,
            Value::U64(_) => T_U64,
            Value::I64(_) => T_I64,
            Value::F64(_) => T_F64,
        }
    }

    /// The value as a non-negative integer, whatever integer type the file used.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

fn array_type_id(a: &Array) -> (u32, usize) {
    match a {
        Array::U8(v) => (T_U8, v.len()),
        Array::I8(v) => (T_I8, v.len()),
        Array::U16(v) => (T_U16, v.len()),
        Array::I16(v) => (T_I16, v.len()),
        Array::U32(v) => (T_U32, v.len()),
        Array::I32(v) => (T_I32, v.len()),
        Array::F32(v) => (T_F32, v.len()),
        Array::Bool(v) => (T_BOOL, v.len()),
        Array::String(v) => (T_STRING, v.len()),
        Array::U64(v) => (T_U64, v.len()),
        Array::I64(v) => (T_I64, v.len()),
        Array::F64(v) => (T_F64, v.len()),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------------------------------------------

/// A bounds-checked little-endian cursor over the file. Every read says what it was reading when it runs out.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(gguf_err(format!(
                "file is truncated: {} at byte {} needs {n} bytes but only {} remain (incomplete download?)",
                what(),
                self.pos,
                self.remaining()
            )));
        }
        let start = self.pos;
        self.pos += n as usize; // n ≤ remaining ≤ usize::MAX
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let b = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn bytes_of_string(&mut self, cap: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(&|| format!("the length of {}", what()))?;
        if len > cap {
            return Err(gguf_err(format!(
                "{} is {len} bytes long, more than the limit of {cap}: the file is corrupt or hostile",
                what()
            )));
        }
        self.take(len, what)
    }

    /// A key or tensor name: strictly UTF-8.
    fn name(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let b = self.bytes_of_string(MAX_NAME_BYTES, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| gguf_err(format!("{} is not valid UTF-8", what())))
    }

    /// A string value: invalid UTF-8 is replaced rather than refused (some vocabularies carry raw bytes).
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let b = self.bytes_of_string(MAX_STRING_BYTES, what)?;
        Ok(String::from_utf8_lossy(b).into_owned())
    }

    fn value(&mut self, ty: u32, key: &str) -> Result<Value> {
        let what = || format!("the value of `{key}`");
        Ok(match ty {
            T_U8 => Value::U8(self.array::<1>(&what)?[0]),
            T_I8 => Value::I8(self.array::<1>(&what)?[0] as i8),
            T_U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            T_I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            T_U32 => Value::U32(self.u32(&what)?),
            T_I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            T_F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            T_BOOL => Value::Bool(self.bool(key)?),
            T_STRING => Value::String(self.string(&what)?),
            T_ARRAY => Value::Array(self.array_value(key)?),
            T_U64 => Value::U64(self.u64(&what)?),
            T_I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            T_F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            other => {
                return Err(gguf_err(format!(
                    "metadata `{key}` has unknown value type {other} (valid: 0..=12): the file is corrupt"
                )))
            }
        })
    }

    fn bool(&mut self, key: &str) -> Result<bool> {
        match self.array::<1>(&|| format!("the value of `{key}`"))?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(gguf_err(format!("metadata `{key}`: bool byte is {b}, expected 0 or 1: the file is corrupt"))),
        }
    }

    fn array_value(&mut self, key: &str) -> Result<Array> {
        let ety = self.u32(&|| format!("the element type of array `{key}`"))?;
        let n = self.u64(&|| format!("the length of array `{key}`"))?;
        // The smallest encoding of one element: a count that cannot fit in the rest of the file is refused
        // before allocating room for it.
        let min_size: u64 = match ety {
            T_U8 | T_I8 | T_BOOL => 1,
            T_U16 | T_I16 => 2,
            T_U32 | T_I32 | T_F32 => 4,
            T_U64 | T_I64 | T_F64 | T_STRING => 8,
            T_ARRAY => return Err(gguf_err(format!("metadata `{key}` is an array of arrays, which bertgpu does not read"))),
            other => {
                return Err(gguf_err(format!(
                    "array `{key}` has unknown element type {other} (valid: 0..=12): the file is corrupt"
                )))
            }
        };
        if n > MAX_ARRAY_LEN {
            return Err(gguf_err(format!(
                "array `{key}` claims {n} elements, more than the limit of {MAX_ARRAY_LEN}: the file is corrupt or hostile"
            )));
        }
        if n.saturating_mul(min_size) > self.remaining() {
            return Err(gguf_err(format!(
                "file is truncated: array `{key}` claims {n} elements but only {} bytes remain",
                self.remaining()
            )));
        }
        let n = n as usize; // ≤ MAX_ARRAY_LEN
        let what = || format!("an element of array `{key}`");
        macro_rules! prim {
            ($variant:ident, $t:ty) => {{
                let raw = self.take((n * std::mem::size_of::<$t>()) as u64, &what)?;
                Array::$variant(
                    raw.chunks_exact(std::mem::size_of::<$t>())
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk has the type's size")))
                        .collect(),
                )
            }};
        }
        Ok(match ety {
            T_U8 => Array::U8(self.take(n as u64, &what)?.to_vec()),
            T_I8 => Array::I8(self.take(n as u64, &what)?.iter().map(|&b| b as i8).collect()),
            T_U16 => prim!(U16, u16),
            T_I16 => prim!(I16, i16),
            T_U32 => prim!(U32, u32),
            T_I32 => prim!(I32, i32),
            T_F32 => prim!(F32, f32),
            T_U64 => prim!(U64, u64),
            T_I64 => prim!(I64, i64),
            T_F64 => prim!(F64, f64),
            T_BOOL => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.bool(key)?);
                }
                Array::Bool(v)
            }
            _ => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.string(&what)?);
                }
                Array::String(v)
            }
        })
    }
}

/// One tensor's entry in the file: validated, with its bytes located inside the file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// PyTorch order (the reverse of GGUF's `ne`).
    pub shape: Vec<usize>,
    pub dtype: GgmlType,
    /// Absolute byte range of the data in the file.
    pub start: usize,
    pub len: usize,
}

/// A parsed GGUF header: metadata (in file order) and tensor infos, all validated against the file's size.
#[derive(Clone, Debug)]
pub struct Gguf {
    pub version: u32,
    pub alignment: u64,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
}

impl Gguf {
    /// Parses and validates the header of a GGUF file held in memory. Tensor data is not copied.
    pub fn parse(bytes: &[u8]) -> Result<Gguf> {
        let mut c = Cursor { buf: bytes, pos: 0 };
        let magic = c.array::<4>(&|| "the magic number".into())?;
        if magic != GGUF_MAGIC {
            return Err(gguf_err(format!(
                "not a GGUF file: it starts with {magic:02x?}, expected \"GGUF\"; pass a .gguf made by `bertgpu convert` \
                 or llama.cpp, or a Hugging Face model folder"
            )));
        }
        let version = c.u32(&|| "the version".into())?;
        if version != 2 && version != 3 {
            return Err(gguf_err(format!(
                "GGUF version {version} is not supported (bertgpu reads versions 2 and 3); re-convert the model"
            )));
        }
        let n_tensors = c.u64(&|| "the tensor count".into())?;
        let n_kv = c.u64(&|| "the metadata count".into())?;
        if n_tensors > MAX_TENSOR_COUNT {
            return Err(gguf_err(format!(
                "the file claims {n_tensors} tensors, more than the limit of {MAX_TENSOR_COUNT}: it is corrupt or hostile"
            )));
        }
        if n_kv > MAX_KV_COUNT {
            return Err(gguf_err(format!(
                "the file claims {n_kv} metadata entries, more than the limit of {MAX_KV_COUNT}: it is corrupt or hostile"
            )));
        }

        let mut metadata: Vec<(String, Value)> = Vec::new();
        let mut keys = HashSet::new();
        for i in 0..n_kv {
            let key = c.name(&|| format!("metadata key #{i}"))?;
            let ty = c.u32(&|| format!("the type of metadata `{key}`"))?;
            let value = c.value(ty, &key)?;
            if !keys.insert(key.clone()) {
                return Err(gguf_err(format!("metadata key `{key}` appears twice: the file is corrupt")));
            }
            metadata.push((key, value));
        }

        let alignment = match metadata.iter().find(|(k, _)| k == KEY_ALIGNMENT) {
            None => DEFAULT_ALIGNMENT,
            Some((_, v)) => match v.as_u64() {
                Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => a,
                _ => {
                    return Err(gguf_err(format!(
                        "`{KEY_ALIGNMENT}` is {v:?}; it must be a power of two no larger than {MAX_ALIGNMENT}"
                    )))
                }
            },
        };

        struct Raw {
            name: String,
            shape: Vec<usize>,
            dtype: GgmlType,
            offset: u64,
            nbytes: u64,
        }
        let mut raws: Vec<Raw> = Vec::new();
        let mut index = HashMap::new();
        for i in 0..n_tensors {
            let name = c.name(&|| format!("the name of tensor #{i}"))?;
            let n_dims = c.u32(&|| format!("the dimension count of tensor `{name}`"))?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(gguf_err(format!(
                    "tensor `{name}` has {n_dims} dimensions; GGUF tensors have 1 to {MAX_DIMS}"
                )));
            }
            let mut ne = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                ne.push(c.u64(&|| format!("dimension {d} of tensor `{name}`"))?);
            }
            let ty = c.u32(&|| format!("the type of tensor `{name}`"))?;
            let offset = c.u64(&|| format!("the data offset of tensor `{name}`"))?;
            let dtype = GgmlType::from_id(ty, &name)?;

            if let Some(d) = ne.iter().position(|&d| d == 0) {
                return Err(gguf_err(format!("tensor `{name}` has dimension {d} of size 0 (ne = {ne:?})")));
            }
            let n = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| {
                gguf_err(format!("tensor `{name}` has dimensions {ne:?} whose product overflows: the file is corrupt or hostile"))
            })?;
            let (per_block, _) = dtype.block();
            if ne[0] % per_block != 0 {
                return Err(gguf_err(format!(
                    "tensor `{name}` is {} but its rows have {} values, not a multiple of the block size {per_block}",
                    dtype.name(),
                    ne[0]
                )));
            }
            let nbytes = type_bytes(dtype, n).ok_or_else(|| {
                gguf_err(format!("tensor `{name}` ({ne:?}, {}) has a byte size that overflows", dtype.name()))
            })?;
            if offset % alignment != 0 {
                return Err(gguf_err(format!(
                    "tensor `{name}` starts at data offset {offset}, which is not a multiple of the alignment {alignment}"
                )));
            }
            let shape = ne
                .iter()
                .rev()
                .map(|&d| usize::try_from(d))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|_| gguf_err(format!("tensor `{name}` has dimensions {ne:?} too large for this platform")))?;
            if index.insert(name.clone(), raws.len()).is_some() {
                return Err(gguf_err(format!("tensor `{name}` appears twice: the file is corrupt")));
            }
            raws.push(Raw { name, shape, dtype, offset, nbytes });
        }

        // The data section starts at the next multiple of the alignment after the header.
        let header_end = c.pos as u64;
        let data_start = header_end.div_ceil(alignment) * alignment;
        let file_len = bytes.len() as u64;
        if !raws.is_empty() && data_start > file_len {
            return Err(gguf_err(format!(
                "file is truncated: the tensor data should start at byte {data_start} but the file has {file_len} bytes"
            )));
        }
        let mut tensors = Vec::with_capacity(raws.len());
        for r in raws {
            let end = data_start.checked_add(r.offset).and_then(|s| s.checked_add(r.nbytes));
            match end {
                Some(end) if end <= file_len => {}
                _ => {
                    return Err(gguf_err(format!(
                        "tensor `{}` ({:?}, {}) needs bytes {}..{} of the data section, past the end of the file \
                         ({} data bytes): the file is truncated or corrupt",
                        r.name,
                        r.shape,
                        r.dtype.name(),
                        r.offset,
                        r.offset as u128 + r.nbytes as u128,
                        file_len.saturating_sub(data_start)
                    )))
                }
            }
            // Both fit in the file, hence in usize.
            tensors.push(TensorInfo {
                name: r.name,
                shape: r.shape,
                dtype: r.dtype,
                start: (data_start + r.offset) as usize,
                len: r.nbytes as usize,
            });
        }
        // No two tensors may share bytes: a tensor whose size does not match its type and shape shows up here.
        let mut order: Vec<&TensorInfo> = tensors.iter().collect();
        order.sort_by_key(|t| t.start);
        for w in order.windows(2) {
            if w[0].start + w[0].len > w[1].start {
                return Err(gguf_err(format!(
                    "tensors `{}` (bytes {}..{}) and `{}` (from byte {}) overlap: the file is corrupt",
                    w[0].name,
                    w[0].start,
                    w[0].start + w[0].len,
                    w[1].name,
                    w[1].start
                )));
            }
        }
        Ok(Gguf { version, alignment, metadata, tensors, index })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// Copies one tensor's data out of `bytes` (the same bytes given to [`Gguf::parse`]).
    pub fn load(&self, bytes: &[u8], info: &TensorInfo) -> Result<HostTensor> {
        let raw = bytes.get(info.start..info.start + info.len).ok_or_else(|| {
            gguf_err(format!("tensor `{}` lies outside the bytes given: pass the same file that was parsed", info.name))
        })?;
        let data = match info.dtype {
            GgmlType::F32 => HostData::F32(raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
            GgmlType::F16 => HostData::F16(raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()),
            GgmlType::Q8_0 => HostData::Q8_0(raw.to_vec()),
            GgmlType::Q4_0 => HostData::Q4_0(raw.to_vec()),
        };
        Ok(HostTensor { shape: info.shape.clone(), data })
    }

    /// Every tensor, in file order.
    pub fn load_all(&self, bytes: &[u8]) -> Result<Vec<(String, HostTensor)>> {
        self.tensors.iter().map(|t| Ok((t.name.clone(), self.load(bytes, t)?))).collect()
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------------------------------------------

/// Builds a GGUF v3 file in memory: metadata in insertion order, tensors aligned to `general.alignment` (32).
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, HostTensor)>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a metadata entry. `general.alignment` is written by [`GgufWriter::to_bytes`].
    pub fn set(&mut self, key: &str, value: Value) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
    }

    /// Adds a tensor (PyTorch shape). Its storage must match its shape; quantized tensors need a last dimension
    /// that is a multiple of 32.
    pub fn add_tensor(&mut self, name: &str, t: HostTensor) -> Result<()> {
        if t.shape.is_empty() || t.shape.len() > MAX_DIMS as usize {
            return Err(gguf_err(format!("tensor `{name}` has shape {:?}; GGUF holds 1 to 4 dimensions", t.shape)));
        }
        if name.len() as u64 > MAX_NAME_BYTES {
            return Err(gguf_err(format!("tensor name `{name}` is longer than {MAX_NAME_BYTES} bytes")));
        }
        if self.tensors.iter().any(|(n, _)| n == name) {
            return Err(gguf_err(format!("tensor `{name}` added twice")));
        }
        let n = quant::numel(&t.shape)?;
        let dtype = GgmlType::of(&t.data);
        let (per, _) = dtype.block();
        let last = *t.shape.last().unwrap_or(&0) as u64;
        if n == 0 || last % per != 0 {
            return Err(gguf_err(format!(
                "tensor `{name}` of shape {:?} cannot be stored as {} (rows must be non-empty and a multiple of {per})",
                t.shape,
                dtype.name()
            )));
        }
        let stored = match &t.data {
            HostData::F32(v) => v.len() as u64 * 4,
            HostData::F16(v) => v.len() as u64 * 2,
            HostData::Q8_0(b) | HostData::Q4_0(b) => b.len() as u64,
        };
        if Some(stored) != type_bytes(dtype, n as u64) {
            return Err(gguf_err(format!(
                "tensor `{name}` of shape {:?} has {stored} bytes of {} data, which does not match its shape",
                t.shape,
                dtype.name()
            )));
        }
        self.tensors.push((name.to_string(), t));
        Ok(())
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let align = DEFAULT_ALIGNMENT as usize;
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&GGUF_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        let has_align = self.metadata.iter().any(|(k, _)| k == KEY_ALIGNMENT);
        out.extend_from_slice(&((self.metadata.len() + usize::from(!has_align)) as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            let v = if k == KEY_ALIGNMENT { &Value::U32(align as u32) } else { v };
            write_string(&mut out, k);
            out.extend_from_slice(&v.type_id().to_le_bytes());
            write_value(&mut out, v);
        }
        if !has_align {
            write_string(&mut out, KEY_ALIGNMENT);
            out.extend_from_slice(&T_U32.to_le_bytes());
            out.extend_from_slice(&(align as u32).to_le_bytes());
        }
        let mut offset = 0usize;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for (name, t) in &self.tensors {
            write_string(&mut out, name);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for &d in t.shape.iter().rev() {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            out.extend_from_slice(&GgmlType::of(&t.data).id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + data_bytes(&t.data)).div_ceil(align) * align;
        }
        out.resize(out.len().div_ceil(align) * align, 0);
        let data_start = out.len();
        for ((_, t), off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off, 0);
            match &t.data {
                HostData::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                HostData::F16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                HostData::Q8_0(b) | HostData::Q4_0(b) => out.extend_from_slice(b),
            }
        }
        Ok(out)
    }
}

fn data_bytes(d: &HostData) -> usize {
    match d {
        HostData::F32(v) => v.len() * 4,
        HostData::F16(v) => v.len() * 2,
        HostData::Q8_0(b) | HostData::Q4_0(b) => b.len(),
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => write_string(out, s),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Array(a) => {
            let (ty, n) = array_type_id(a);
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(n as u64).to_le_bytes());
            macro_rules! each {
                ($v:expr) => {
                    $v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()))
                };
            }
            match a {
                Array::U8(v) => out.extend_from_slice(v),
                Array::I8(v) => v.iter().for_each(|x| out.push(*x as u8)),
                Array::U16(v) => each!(v),
                Array::I16(v) => each!(v),
                Array::U32(v) => each!(v),
                Array::I32(v) => each!(v),
                Array::F32(v) => each!(v),
                Array::U64(v) => each!(v),
                Array::I64(v) => each!(v),
                Array::F64(v) => each!(v),
                Array::Bool(v) => v.iter().for_each(|x| out.push(*x as u8)),
                Array::String(v) => v.iter().for_each(|s| write_string(out, s)),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// BERT in GGUF: names
// ---------------------------------------------------------------------------------------------------------------

/// The Hugging Face name without the `bert.` prefix and with legacy `LayerNorm.gamma/beta` spelled
/// `weight/bias` (the form `convert_hf_to_gguf.py` normalizes to before mapping).
pub fn canonical_hf_name(name: &str) -> String {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    if let Some(stem) = name.strip_suffix(".gamma") {
        format!("{stem}.weight")
    } else if let Some(stem) = name.strip_suffix(".beta") {
        format!("{stem}.bias")
    } else {
        name.to_string()
    }
}

/// Encoder modules: Hugging Face path → llama.cpp path (within one layer for the `encoder.layer.N.` ones).
const EMBEDDING_NAMES: [(&str, &str); 4] = [
    ("embeddings.word_embeddings", "token_embd"),
    ("embeddings.position_embeddings", "position_embd"),
    ("embeddings.token_type_embeddings", "token_types"),
    ("embeddings.LayerNorm", "token_embd_norm"),
];
const LAYER_NAMES: [(&str, &str); 8] = [
    ("attention.self.query", "attn_q"),
    ("attention.self.key", "attn_k"),
    ("attention.self.value", "attn_v"),
    ("attention.output.dense", "attn_output"),
    ("attention.output.LayerNorm", "attn_output_norm"),
    ("intermediate.dense", "ffn_up"),
    ("output.dense", "ffn_down"),
    ("output.LayerNorm", "layer_output_norm"),
];

/// A Hugging Face tensor name → its name in a BERT GGUF: llama.cpp's for the encoder, the (canonical) Hugging
/// Face name for everything else (task heads).
pub fn hf_to_gguf_name(hf: &str) -> String {
    let name = canonical_hf_name(hf);
    let Some((module, param)) = name.rsplit_once('.') else { return name };
    if let Some((_, g)) = EMBEDDING_NAMES.iter().find(|(h, _)| *h == module) {
        return format!("{g}.{param}");
    }
    if let Some(rest) = module.strip_prefix("encoder.layer.") {
        if let Some((n, sub)) = rest.split_once('.') {
            if n.parse::<usize>().is_ok() {
                if let Some((_, g)) = LAYER_NAMES.iter().find(|(h, _)| *h == sub) {
                    return format!("blk.{n}.{g}.{param}");
                }
            }
        }
    }
    name
}

/// A BERT GGUF tensor name → the Hugging Face name (inverse of [`hf_to_gguf_name`]); unknown names pass through.
pub fn gguf_to_hf_name(g: &str) -> String {
    let Some((module, param)) = g.rsplit_once('.') else { return g.to_string() };
    if let Some((h, _)) = EMBEDDING_NAMES.iter().find(|(_, n)| *n == module) {
        return format!("{h}.{param}");
    }
    if let Some(rest) = module.strip_prefix("blk.") {
        if let Some((n, sub)) = rest.split_once('.') {
            if n.parse::<usize>().is_ok() {
                if let Some((h, _)) = LAYER_NAMES.iter().find(|(_, l)| *l == sub) {
                    return format!("encoder.layer.{n}.{h}.{param}");
                }
            }
        }
    }
    g.to_string()
}

// ---------------------------------------------------------------------------------------------------------------
// BERT in GGUF: vocabulary
// ---------------------------------------------------------------------------------------------------------------

/// llama.cpp token types (`gguf.TokenType`).
const TOKEN_NORMAL: i32 = 1;
const TOKEN_CONTROL: i32 = 3;
/// The word-start marker of llama.cpp's BERT vocabulary ("phantom space").
const PHANTOM: char = '\u{2581}';

/// WordPiece vocabulary → llama.cpp's form (`convert_hf_to_gguf.py` `BertModel.set_vocab`): special tokens as
/// they are, `##piece` → `piece`, a word start `w` → `▁w`.
pub fn to_phantom_vocab(vocab: &[String], special: &HashSet<usize>) -> (Vec<String>, Vec<i32>) {
    vocab
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if special.contains(&i) {
                (t.clone(), TOKEN_CONTROL)
            } else if let Some(p) = t.strip_prefix("##") {
                (p.to_string(), TOKEN_NORMAL)
            } else {
                (format!("{PHANTOM}{t}"), TOKEN_NORMAL)
            }
        })
        .unzip()
}

/// llama.cpp's BERT vocabulary → WordPiece (the inverse of [`to_phantom_vocab`]). Control tokens (or, without
/// token types, bracketed tokens like `[CLS]`) are kept as they are.
pub fn from_phantom_vocab(tokens: &[String], types: Option<&[i32]>) -> Vec<String> {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let control = match types {
                Some(ty) => ty.get(i) == Some(&TOKEN_CONTROL),
                None => BERT_SPECIALS.contains(&t.as_str()),
            };
            if control {
                t.clone()
            } else if let Some(w) = t.strip_prefix(PHANTOM) {
                w.to_string()
            } else {
                format!("##{t}")
            }
        })
        .collect()
}

/// BERT's special tokens, for vocabularies that do not mark them (`vocab.txt`, llama.cpp files without token types).
const BERT_SPECIALS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

fn standard_specials(vocab: &[String]) -> HashSet<usize> {
    vocab.iter().enumerate().filter(|(_, t)| BERT_SPECIALS.contains(&t.as_str())).map(|(i, _)| i).collect()
}

/// The model type of a `tokenizer.json` (`WordPiece`, `BPE`, `Unigram`, ...).
fn tokenizer_model_type(json: &serde_json::Value) -> Option<&str> {
    json.get("model").and_then(|m| m.get("type")).and_then(|t| t.as_str())
}

/// The vocabulary (by id, added tokens included) and special-token ids of a `tokenizer.json`: WordPiece (BERT,
/// DistilBERT), byte-level BPE (RoBERTa) or Unigram (XLM-R).
fn vocab_from_tokenizer_json(json: &serde_json::Value) -> Result<(Vec<String>, HashSet<usize>)> {
    let bad = |m: &str| {
        Error::Tokenizer(format!("tokenizer.json: {m}; bertgpu reads WordPiece, BPE and Unigram tokenizers"))
    };
    let model = json.get("model").ok_or_else(|| bad("no `model`"))?;
    let mut by_id: Vec<(usize, String)> = Vec::new();
    match tokenizer_model_type(json) {
        Some("WordPiece" | "BPE") => {
            let map = model.get("vocab").and_then(|v| v.as_object()).ok_or_else(|| bad("no `model.vocab` object"))?;
            for (tok, id) in map {
                let id = id.as_u64().ok_or_else(|| bad(&format!("token `{tok}` has id {id}, not an integer")))?;
                by_id.push((id as usize, tok.clone()));
            }
        }
        Some("Unigram") => {
            let list = model.get("vocab").and_then(|v| v.as_array()).ok_or_else(|| bad("no `model.vocab` list"))?;
            for (id, piece) in list.iter().enumerate() {
                let tok = piece.get(0).and_then(|t| t.as_str()).ok_or_else(|| bad("a Unigram piece is not [token, score]"))?;
                by_id.push((id, tok.to_string()));
            }
        }
        Some(other) => return Err(bad(&format!("the model is {other}"))),
        None => return Err(bad("the model has no `type`")),
    }
    let mut special = HashSet::new();
    for t in json.get("added_tokens").and_then(|a| a.as_array()).into_iter().flatten() {
        let (Some(id), Some(content)) = (t.get("id").and_then(|i| i.as_u64()), t.get("content").and_then(|c| c.as_str()))
        else {
            continue;
        };
        let id = id as usize;
        // An added token may repeat a model token (same id) or extend the vocabulary past it (RoBERTa's `<mask>`).
        match by_id.iter().find(|(i, _)| *i == id) {
            Some((_, tok)) if tok != content => {
                return Err(bad(&format!("added token `{content}` has id {id}, which the model gives to `{tok}`")))
            }
            Some(_) => {}
            None => by_id.push((id, content.to_string())),
        }
        if t.get("special").and_then(|s| s.as_bool()) == Some(true) {
            special.insert(id);
        }
    }
    let n = by_id.len();
    let mut vocab = vec![None; n];
    for (id, tok) in by_id {
        let slot = vocab
            .get_mut(id)
            .ok_or_else(|| bad(&format!("token `{tok}` has id {id}, outside 0..{n}: ids must be dense")))?;
        if slot.is_some() {
            return Err(bad(&format!("two tokens share the id {id}")));
        }
        *slot = Some(tok);
    }
    let vocab = vocab.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| bad("two tokens share an id"))?;
    Ok((vocab, special))
}

/// A BERT WordPiece `tokenizer.json` equivalent to `transformers`' `BertTokenizerFast` for this vocabulary, for
/// GGUF files that carry only `tokenizer.ggml.tokens` (llama.cpp's). Lower-casing is inferred from the vocabulary:
/// an uncased vocabulary has no ASCII capitals outside its special tokens (it may hold symbols such as `ℝ`, which
/// Unicode counts as upper case), a cased one has thousands.
pub fn wordpiece_tokenizer_json(vocab: &[String], special: &HashSet<usize>) -> Result<String> {
    let id_of = |t: &str| vocab.iter().position(|v| v == t);
    let need = |t: &str| {
        id_of(t).ok_or_else(|| Error::Tokenizer(format!("the GGUF vocabulary has no `{t}` token; it is not a BERT vocabulary")))
    };
    let (cls, sep) = (need("[CLS]")?, need("[SEP]")?);
    need("[UNK]")?;
    let lowercase = !vocab
        .iter()
        .enumerate()
        .any(|(i, t)| !special.contains(&i) && !(t.starts_with('[') && t.ends_with(']')) && t.chars().any(|c| c.is_ascii_uppercase()));
    let added: Vec<serde_json::Value> = vocab
        .iter()
        .enumerate()
        .filter(|(i, _)| special.contains(i))
        .map(|(i, t)| {
            serde_json::json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                               "normalized": false, "special": true})
        })
        .collect();
    let vocab_map: serde_json::Map<String, serde_json::Value> =
        vocab.iter().enumerate().map(|(i, t)| (t.clone(), serde_json::Value::from(i))).collect();
    let tok = |id: &str, type_id: u32| serde_json::json!({"SpecialToken": {"id": id, "type_id": type_id}});
    let seq = |id: &str, type_id: u32| serde_json::json!({"Sequence": {"id": id, "type_id": type_id}});
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": lowercase},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [tok("[CLS]", 0), seq("A", 0), tok("[SEP]", 0)],
            "pair": [tok("[CLS]", 0), seq("A", 0), tok("[SEP]", 0), seq("B", 1), tok("[SEP]", 1)],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]}
            }
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab_map}
    });
    Ok(json.to_string())
}

// ---------------------------------------------------------------------------------------------------------------
// BERT in GGUF: reading
// ---------------------------------------------------------------------------------------------------------------

/// Everything a BERT `.gguf` holds, in the form a Hugging Face folder would give it.
#[derive(Debug)]
pub struct BertGguf {
    /// Tensors under Hugging Face names (no `bert.` prefix), PyTorch shapes, stored dtypes.
    pub tensors: Vec<(String, HostTensor)>,
    /// `config.json` text: the original one, or one rebuilt from llama.cpp's `bert.*` keys.
    pub config_json: String,
    /// `tokenizer.json` text: the original one, or a WordPiece tokenizer rebuilt from `tokenizer.ggml.tokens`.
    pub tokenizer_json: String,
    /// `tokenizer_config.json` text, if the file carries one.
    pub tokenizer_config_json: Option<String>,
    /// The WordPiece vocabulary by id (`##` continuation form).
    pub vocab: Vec<String>,
    /// Sentence-embedding pooling from `bert.pooling_type` (llama.cpp: 0 none, 1 mean, 2 cls), if present.
    pub pooling: Option<&'static str>,
    /// The parsed header (all metadata).
    pub header: Gguf,
}

fn meta_u64(g: &Gguf, key: &str) -> Result<u64> {
    g.get(key).and_then(|v| v.as_u64()).ok_or_else(|| {
        gguf_err(format!("metadata `{key}` is missing or not an unsigned integer; this BERT GGUF is incomplete"))
    })
}

/// Reads a BERT GGUF (ours or llama.cpp's) from memory.
pub fn read_bert(bytes: &[u8]) -> Result<BertGguf> {
    let g = Gguf::parse(bytes)?;
    match g.get(KEY_ARCHITECTURE).and_then(|v| v.as_str()) {
        Some("bert") => {}
        Some(other) => {
            return Err(gguf_err(format!(
                "this GGUF holds a `{other}` model (general.architecture); bertgpu runs `bert` models only"
            )))
        }
        None => return Err(gguf_err(format!("`{KEY_ARCHITECTURE}` is missing; is this a model file?"))),
    }
    let mut tensors = Vec::with_capacity(g.tensors.len());
    for t in &g.tensors {
        tensors.push((gguf_to_hf_name(&t.name), g.load(bytes, t)?));
    }

    let types: Option<Vec<i32>> = match g.get("tokenizer.ggml.token_type") {
        Some(Value::Array(Array::I32(v))) => Some(v.clone()),
        _ => None,
    };
    let ggml_vocab = match g.get(KEY_TOKENS) {
        Some(Value::Array(Array::String(t))) => Some(from_phantom_vocab(t, types.as_deref())),
        Some(_) => return Err(gguf_err(format!("`{KEY_TOKENS}` is not an array of strings"))),
        None => None,
    };

    let (tokenizer_json, vocab) = match g.get(KEY_TOKENIZER_JSON) {
        Some(v) => {
            let text = v.as_str().ok_or_else(|| gguf_err(format!("`{KEY_TOKENIZER_JSON}` is not a string")))?;
            let json: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| gguf_err(format!("`{KEY_TOKENIZER_JSON}` is not valid JSON: {e}")))?;
            (text.to_string(), vocab_from_tokenizer_json(&json)?.0)
        }
        None => {
            let vocab = ggml_vocab.ok_or_else(|| {
                gguf_err(format!("the file has neither `{KEY_TOKENIZER_JSON}` nor `{KEY_TOKENS}`: no tokenizer"))
            })?;
            let special: HashSet<usize> = match &types {
                Some(t) => t.iter().enumerate().filter(|(_, &ty)| ty == TOKEN_CONTROL).map(|(i, _)| i).collect(),
                None => standard_specials(&vocab),
            };
            (wordpiece_tokenizer_json(&vocab, &special)?, vocab)
        }
    };

    let config_json = match g.get(KEY_CONFIG_JSON) {
        Some(v) => v.as_str().ok_or_else(|| gguf_err(format!("`{KEY_CONFIG_JSON}` is not a string")))?.to_string(),
        None => {
            // llama.cpp's keys; the type-vocabulary size and vocabulary size come from the tensors themselves.
            let rows = |hf: &str| tensors.iter().find(|(n, _)| n == hf).and_then(|(_, t)| t.shape.first().copied());
            let eps = g.get("bert.attention.layer_norm_epsilon").and_then(|v| v.as_f64()).unwrap_or(1e-12);
            let pad = g.get("tokenizer.ggml.padding_token_id").and_then(|v| v.as_u64()).unwrap_or(0);
            serde_json::json!({
                "model_type": "bert",
                "architectures": ["BertModel"],
                "vocab_size": rows("embeddings.word_embeddings.weight").unwrap_or(vocab.len()),
                "hidden_size": meta_u64(&g, "bert.embedding_length")?,
                "num_hidden_layers": meta_u64(&g, "bert.block_count")?,
                "num_attention_heads": meta_u64(&g, "bert.attention.head_count")?,
                "intermediate_size": meta_u64(&g, "bert.feed_forward_length")?,
                "max_position_embeddings": meta_u64(&g, "bert.context_length")?,
                "type_vocab_size": rows("embeddings.token_type_embeddings.weight").unwrap_or(2),
                // llama.cpp stores ε as f32; 1e-12 comes back as 9.9999999e-13, which is what it computes with.
                "layer_norm_eps": eps,
                "hidden_act": "gelu",
                "pad_token_id": pad,
            })
            .to_string()
        }
    };
    let pooling = match g.get("bert.pooling_type").and_then(|v| v.as_u64()) {
        Some(1) => Some("mean"),
        Some(2) => Some("cls"),
        _ => None,
    };
    let tokenizer_config_json = g.get(KEY_TOKENIZER_CONFIG_JSON).and_then(|v| v.as_str()).map(String::from);
    Ok(BertGguf { tensors, config_json, tokenizer_json, tokenizer_config_json, vocab, pooling, header: g })
}

/// A BERT `.gguf` loaded like a model folder: config, tokenizer and weights (in their stored dtypes).
pub struct GgufModel {
    pub config: crate::config::BertConfig,
    pub tokenizer: crate::tokenizer::Tokenizer,
    pub weights: crate::weights::Weights,
    /// Sentence-embedding pooling recorded in the file (`bert.pooling_type`), if any.
    pub pooling: Option<&'static str>,
}

/// Loads a BERT `.gguf` (ours or llama.cpp's) from its bytes.
pub fn load_gguf(bytes: &[u8]) -> Result<GgufModel> {
    let m = read_bert(bytes)?;
    let config = crate::config::BertConfig::from_json_str(&m.config_json)?;
    let tokenizer = crate::tokenizer::Tokenizer::from_json(
        m.tokenizer_json.as_bytes(),
        m.tokenizer_config_json.as_deref().map(str::as_bytes),
        config.max_position_embeddings,
    )?;
    let mut weights = crate::weights::Weights::new();
    for (name, t) in m.tensors {
        weights.insert(name, t);
    }
    Ok(GgufModel { config, tokenizer, weights, pooling: m.pooling })
}

// ---------------------------------------------------------------------------------------------------------------
// BERT in GGUF: writing and converting
// ---------------------------------------------------------------------------------------------------------------

/// The `--dtype` of `bertgpu convert`: the format of the encoder's linear weights (and word embeddings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvertDType {
    F32,
    F16,
    Q8_0,
    Q4_0,
}

impl std::str::FromStr for ConvertDType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "f32" => ConvertDType::F32,
            "f16" => ConvertDType::F16,
            "q8_0" => ConvertDType::Q8_0,
            "q4_0" => ConvertDType::Q4_0,
            _ => return Err(Error::Input(format!("unknown dtype `{s}`: use f32, f16, q8_0 or q4_0"))),
        })
    }
}

impl ConvertDType {
    /// llama.cpp's `general.file_type` (`LlamaFileType`: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7).
    fn file_type(self) -> u32 {
        match self {
            ConvertDType::F32 => 0,
            ConvertDType::F16 => 1,
            ConvertDType::Q4_0 => 2,
            ConvertDType::Q8_0 => 7,
        }
    }
}

/// How one tensor is stored for a given `--dtype`, in a model of `n_layers` encoder layers. The policy was
/// measured on all-MiniLM-L6-v2 with `scripts/gguf_accuracy.py` (cosine of mean-pooled embeddings against f32
/// PyTorch; numbers in docs/GGUF.md):
/// - 1-D tensors (biases, LayerNorm γ/β, the MLM output bias) stay f32 at every dtype: they are 0.1% of the bytes
///   and feed additions and normalizations directly.
/// - Encoder linear weights (`blk.N.attn_*`, `ffn_*`) take the requested dtype: they are the matmul inputs whose
///   errors average out over a dot product of length H or 4H. Except for Q4_0, which alone costs too much
///   (min cosine 0.88, 0.94 on "Hello world!"): `attn_v` in every layer and `ffn_up` in the last half of the layers
///   stay Q8_0 (min cosine 0.95, ≥ 0.97 on the golden sentences, at 0.174× the f32 size instead of 0.159×). Like
///   llama.cpp's `Q4_K_M`, which also gives `attn_v` and half of the FFN layers more bits.
/// - The word embeddings take the requested dtype too: they are half of MiniLM's bytes and the size targets
///   (Q8_0 ≤ 0.30×, Q4_0 ≤ 0.18× of f32) cannot be met otherwise; measured, Q8_0 word embeddings cost nothing
///   (min cosine 0.99999) and Q4_0 ones 0.003.
/// - Position and token-type embeddings and the task-head matrices (pooler, classifier, MLM transform, QA): f16
///   for every dtype but f32. They are small, and their errors are not averaged by a long dot product before
///   they reach the output (head logits).
/// - A quantized dtype on a matrix whose rows are not a multiple of 32 falls back to f16.
pub fn storage_for(gguf_name: &str, shape: &[usize], dtype: ConvertDType, n_layers: usize) -> GgmlType {
    let quant = match dtype {
        ConvertDType::F32 => return GgmlType::F32,
        _ if shape.len() < 2 => return GgmlType::F32,
        ConvertDType::F16 => return GgmlType::F16,
        ConvertDType::Q8_0 => GgmlType::Q8_0,
        ConvertDType::Q4_0 => GgmlType::Q4_0,
    };
    let rows_fit = shape.last().is_some_and(|c| c % QK == 0);
    if !rows_fit {
        return GgmlType::F16;
    }
    if gguf_name == "token_embd.weight" {
        return quant;
    }
    let Some(rest) = gguf_name.strip_prefix("blk.") else { return GgmlType::F16 };
    if !gguf_name.ends_with(".weight") {
        return GgmlType::F16;
    }
    if quant == GgmlType::Q4_0 {
        let (layer, module) = rest.split_once('.').unwrap_or((rest, ""));
        let layer: usize = layer.parse().unwrap_or(0);
        if module == "attn_v.weight" || (module == "ffn_up.weight" && 2 * layer >= n_layers) {
            return GgmlType::Q8_0;
        }
    }
    quant
}

fn store(t: &HostTensor, ty: GgmlType) -> Result<HostTensor> {
    match ty {
        GgmlType::F32 => match &t.data {
            HostData::F32(_) => Ok(t.clone()),
            _ => Ok(HostTensor { shape: t.shape.clone(), data: HostData::F32(quant::to_f32(t)?) }),
        },
        GgmlType::F16 => match &t.data {
            HostData::F16(_) => Ok(t.clone()),
            _ => quant::to_f16(t),
        },
        GgmlType::Q8_0 => quant::quantize(t, QuantKind::Q8_0),
        GgmlType::Q4_0 => quant::quantize(t, QuantKind::Q4_0),
    }
}

/// What [`write_bert`] needs besides the tensors.
pub struct BertGgufMeta<'a> {
    pub name: &'a str,
    pub config_json: &'a str,
    pub tokenizer_json: &'a str,
    /// `tokenizer_config.json`, if the folder has one.
    pub tokenizer_config_json: Option<&'a str>,
    /// Sentence-embedding pooling (`"mean"` or `"cls"`), from sentence-transformers' `1_Pooling/config.json`.
    pub pooling: Option<&'a str>,
}

/// Writes a complete BERT GGUF: tensors (Hugging Face names in, llama.cpp names out) stored per [`storage_for`],
/// llama.cpp's `bert.*` and `tokenizer.ggml.*` metadata, and the original config and tokenizer JSON.
pub fn write_bert(meta: &BertGgufMeta, tensors: &[(String, HostTensor)], dtype: ConvertDType) -> Result<Vec<u8>> {
    // Parsed and checked as a load would (a family the loader refuses is refused here too); DistilBERT's sizes under
    // its own names come out as BERT's.
    let cfg = crate::config::BertConfig::from_json_str(meta.config_json)?;
    let num = |v: usize| -> Result<u32> {
        u32::try_from(v).map_err(|_| Error::Config(format!("config.json: {v} does not fit the GGUF's 32-bit field")))
    };
    let tok_json: serde_json::Value = serde_json::from_str(meta.tokenizer_json)
        .map_err(|e| Error::Tokenizer(format!("tokenizer.json is not valid JSON: {e}")))?;
    let (vocab, special) = vocab_from_tokenizer_json(&tok_json)?;
    // llama.cpp's vocabulary: WordPiece in its "phantom space" form (`bert`); RoBERTa's byte-level BPE (`gpt2`, with
    // its merges) and XLM-R's Unigram (`t5`, with the piece scores) as they are, the form llama.cpp's converter
    // writes them in. bertgpu itself reads the tokenizer.json stored beside them.
    let model_type = tokenizer_model_type(&tok_json).unwrap_or_default().to_string();
    let (tokens, types) = if model_type == "WordPiece" {
        to_phantom_vocab(&vocab, &special)
    } else {
        let types = (0..vocab.len()).map(|i| if special.contains(&i) { TOKEN_CONTROL } else { TOKEN_NORMAL }).collect();
        (vocab.clone(), types)
    };

    let mut w = GgufWriter::new();
    w.set(KEY_ARCHITECTURE, Value::String("bert".into()));
    w.set("general.name", Value::String(meta.name.into()));
    w.set("general.file_type", Value::U32(dtype.file_type()));
    w.set("general.quantization_version", Value::U32(2));
    w.set("bert.context_length", Value::U32(num(cfg.max_position_embeddings)?));
    w.set("bert.embedding_length", Value::U32(num(cfg.hidden_size)?));
    w.set("bert.feed_forward_length", Value::U32(num(cfg.intermediate_size)?));
    w.set("bert.attention.head_count", Value::U32(num(cfg.num_attention_heads)?));
    w.set("bert.block_count", Value::U32(num(cfg.num_hidden_layers)?));
    w.set("bert.attention.layer_norm_epsilon", Value::F32(cfg.layer_norm_eps));
    w.set("bert.attention.causal", Value::Bool(false));
    match meta.pooling {
        Some("mean") => w.set("bert.pooling_type", Value::U32(1)),
        Some("cls") => w.set("bert.pooling_type", Value::U32(2)),
        _ => {}
    }
    let ggml_model = match model_type.as_str() {
        "BPE" => "gpt2",
        "Unigram" => "t5",
        _ => "bert",
    };
    w.set("tokenizer.ggml.model", Value::String(ggml_model.into()));
    w.set(KEY_TOKENS, Value::Array(Array::String(tokens)));
    w.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    w.set("tokenizer.ggml.token_type_count", Value::U32(num(cfg.type_vocab_size)?));
    let model = &tok_json["model"];
    if let Some(merges) = model["merges"].as_array().filter(|_| ggml_model == "gpt2") {
        // Merges are "a b" strings in older files and ["a", "b"] pairs in newer ones; llama.cpp reads the former.
        let merges = merges
            .iter()
            .map(|m| match m {
                serde_json::Value::String(s) => Ok(s.clone()),
                serde_json::Value::Array(p) if p.len() == 2 => Ok(format!("{} {}", p[0].as_str().unwrap_or(""), p[1].as_str().unwrap_or(""))),
                _ => Err(Error::Tokenizer("tokenizer.json: a BPE merge is neither \"a b\" nor [\"a\", \"b\"]".into())),
            })
            .collect::<Result<Vec<_>>>()?;
        w.set("tokenizer.ggml.merges", Value::Array(Array::String(merges)));
    }
    if ggml_model == "t5" {
        let scores: Vec<f32> = model["vocab"].as_array().into_iter().flatten().map(|p| p[1].as_f64().unwrap_or(0.0) as f32).collect();
        // Added tokens past the Unigram vocabulary score 0, as llama.cpp's converter gives them.
        let mut scores = scores;
        scores.resize(vocab.len(), 0.0);
        w.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    }
    // BERT's names, RoBERTa's (`<s>` is llama.cpp's BOS and CLS, `</s>` its EOS and SEP).
    for (key, names) in [
        ("tokenizer.ggml.unknown_token_id", ["[UNK]", "<unk>"]),
        ("tokenizer.ggml.seperator_token_id", ["[SEP]", "</s>"]), // sic: llama.cpp's spelling
        ("tokenizer.ggml.padding_token_id", ["[PAD]", "<pad>"]),
        // llama.cpp (gguf-py `SpecialVocab`) records BERT's [CLS] as BOS and [SEP] as EOS.
        ("tokenizer.ggml.bos_token_id", ["[CLS]", "<s>"]),
        ("tokenizer.ggml.eos_token_id", ["[SEP]", "</s>"]),
        ("tokenizer.ggml.mask_token_id", ["[MASK]", "<mask>"]),
    ] {
        // The tokenizer's own kind first; ALBERT's Unigram vocabulary has BERT's `[CLS]`, `[SEP]` and `[MASK]` beside
        // `<unk>` and `<pad>`, so the other kind's name is tried next.
        let order = if model_type == "WordPiece" { [names[0], names[1]] } else { [names[1], names[0]] };
        if let Some(id) = order.iter().find_map(|pick| vocab.iter().position(|v| v == pick)) {
            w.set(key, Value::U32(id as u32));
        }
    }
    w.set(KEY_TOKENIZER_JSON, Value::String(meta.tokenizer_json.into()));
    w.set(KEY_CONFIG_JSON, Value::String(meta.config_json.into()));
    if let Some(tc) = meta.tokenizer_config_json {
        w.set(KEY_TOKENIZER_CONFIG_JSON, Value::String(tc.into()));
    }

    let n_layers = cfg.num_hidden_layers;
    // Every family is stored under BERT's names (llama.cpp's for the encoder); the config JSON says which it is.
    let bert_name = |n: &str| match cfg.family {
        Family::Bert => canonical_hf_name(n),
        Family::DistilBert => canonical_hf_name(&distilbert::to_bert(n)),
        Family::Roberta | Family::XlmRoberta => canonical_hf_name(&roberta::to_bert(n)),
        Family::Electra => canonical_hf_name(&electra::to_bert(n)),
        Family::Albert => canonical_hf_name(&albert::to_bert(n)),
    };
    let word = tensors.iter().find(|(n, _)| bert_name(n) == "embeddings.word_embeddings.weight");
    for (name, t) in tensors {
        let hf = bert_name(name);
        // A decoder tied to the word embeddings is not stored; loaders tie it back (as for HF checkpoints).
        if hf == "cls.predictions.decoder.weight" && word.is_some_and(|(_, wt)| wt == t) {
            continue;
        }
        // RoBERTa's positions start at pad_token_id + 1: the rows before are dropped, as llama.cpp's converter does,
        // so that row j is token j's position and `bert.context_length` rows remain (the loader takes either form).
        let sliced;
        let t = if hf == "embeddings.position_embeddings.weight" && cfg.position_offset > 0 {
            let (rows, offset) = (t.rows_cols().0, cfg.position_offset);
            if rows != cfg.max_position_embeddings + offset {
                return Err(Error::Config(format!(
                    "`{name}` has {rows} rows but config.json's max_position_embeddings is {}",
                    cfg.max_position_embeddings + offset
                )));
            }
            sliced = t.slice_rows(offset..rows)?;
            &sliced
        } else {
            t
        };
        let g = hf_to_gguf_name(&hf);
        let ty = storage_for(&g, &t.shape, dtype, n_layers);
        let stored = store(t, ty).map_err(|e| gguf_err(format!("tensor `{hf}`: {e}")))?;
        w.add_tensor(&g, stored)?;
    }
    w.to_bytes()
}

/// Hugging Face safetensors bytes → tensors (f32, f16 and bf16 kept as f32/f16; integer buffers such as
/// `embeddings.position_ids` are skipped: they are not weights).
pub fn tensors_from_safetensors(bytes: &[u8]) -> Result<Vec<(String, HostTensor)>> {
    use safetensors::{Dtype, SafeTensors};
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| Error::Weights(format!("model.safetensors cannot be read: {e}")))?;
    let mut out = Vec::new();
    let mut names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
    names.sort();
    for name in names {
        let v = st.tensor(&name).map_err(|e| Error::Weights(format!("tensor `{name}`: {e}")))?;
        let raw = v.data();
        let data = match v.dtype() {
            Dtype::F32 => HostData::F32(raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
            Dtype::F16 => HostData::F16(raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()),
            Dtype::BF16 => HostData::F32(
                raw.chunks_exact(2).map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect(),
            ),
            Dtype::I64 | Dtype::I32 | Dtype::U8 | Dtype::BOOL => continue,
            other => return Err(Error::Weights(format!("tensor `{name}` has dtype {other:?}; expected f32, f16 or bf16"))),
        };
        out.push((name, HostTensor { shape: v.shape().to_vec(), data }));
    }
    Ok(out)
}

/// Sizes reported by [`convert`].
#[derive(Clone, Debug)]
pub struct ConvertReport {
    pub safetensors_bytes: u64,
    pub gguf_bytes: u64,
    pub tensors: usize,
}

/// `bertgpu convert`: a Hugging Face BERT folder (`config.json`, `model.safetensors`, `tokenizer.json` or
/// `vocab.txt`, optional sentence-transformers `1_Pooling/config.json`) → one `.gguf` file.
#[cfg(not(target_arch = "wasm32"))]
pub fn convert(model_dir: &std::path::Path, dtype: ConvertDType, out: &std::path::Path) -> Result<ConvertReport> {
    let read = |name: &str| {
        std::fs::read(model_dir.join(name)).map_err(|e| {
            let why = format!(
                "cannot read {} (convert takes a Hugging Face folder with config.json, model.safetensors and \
                 tokenizer.json or vocab.txt)",
                model_dir.join(name).display()
            );
            Error::io(why, e)
        })
    };
    let text = |name: &str| -> Result<String> {
        String::from_utf8(read(name)?).map_err(|_| Error::Input(format!("{name} is not UTF-8")))
    };
    let config_json = text("config.json")?;
    let tokenizer_json = if model_dir.join("tokenizer.json").exists() {
        text("tokenizer.json")?
    } else if model_dir.join("vocab.txt").exists() {
        let vocab: Vec<String> = text("vocab.txt")?.lines().map(|l| l.to_string()).collect();
        let special = standard_specials(&vocab);
        wordpiece_tokenizer_json(&vocab, &special)?
    } else {
        return Err(Error::Tokenizer(format!("{} has neither tokenizer.json nor vocab.txt", model_dir.display())));
    };
    let pooling = std::fs::read_to_string(model_dir.join("1_Pooling/config.json")).ok().and_then(|s| {
        let v: serde_json::Value = serde_json::from_str(&s).ok()?;
        if v.get("pooling_mode_mean_tokens")?.as_bool()? {
            Some("mean")
        } else if v.get("pooling_mode_cls_token")?.as_bool()? {
            Some("cls")
        } else {
            None
        }
    });
    let st = read("model.safetensors")?;
    let tensors = tensors_from_safetensors(&st)?;
    let name = model_dir.file_name().and_then(|n| n.to_str()).unwrap_or("bert");
    let tokenizer_config_json = std::fs::read_to_string(model_dir.join("tokenizer_config.json")).ok();
    let meta = BertGgufMeta {
        name,
        config_json: &config_json,
        tokenizer_json: &tokenizer_json,
        tokenizer_config_json: tokenizer_config_json.as_deref(),
        pooling,
    };
    let bytes = write_bert(&meta, &tensors, dtype)?;
    std::fs::write(out, &bytes).map_err(|e| Error::io(format!("writing {}", out.display()), e))?;
    Ok(ConvertReport { safetensors_bytes: st.len() as u64, gguf_bytes: bytes.len() as u64, tensors: tensors.len() })
}
