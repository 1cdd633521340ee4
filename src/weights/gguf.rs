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

use std::collections::{BTreeMap, HashMap, HashSet};

use half::f16;

use crate::weights::quant::{self, QuantKind, Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK};
use crate::weights::{HostData, HostTensor};
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
