//! The GGUF reader: a bounds-checked header parse ([`Gguf::parse`]) that locates every tensor's bytes in the file
//! and copies them out on request.

use std::collections::{HashMap, HashSet};

use super::value::*;
use super::{
    gguf_err, type_bytes, DEFAULT_ALIGNMENT, GGUF_MAGIC, KEY_ALIGNMENT, MAX_ALIGNMENT, MAX_ARRAY_LEN,
    MAX_DIMS, MAX_KV_COUNT, MAX_NAME_BYTES, MAX_STRING_BYTES, MAX_TENSOR_COUNT,
};
use crate::dtype::Dtype;
use crate::weights::bytes::{read_le, ByteSource};
use crate::weights::{HostData, HostTensor};
use crate::Result;

/// A bounds-checked little-endian cursor over the file, or over its first bytes (`buf` shorter than `file_len`):
/// every read says what it was reading when it runs out, and `short` records that it ran out of the prefix only.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    file_len: usize,
    short: bool,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            self.short = self.buf.len() < self.file_len;
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
    pub dtype: Dtype,
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

/// The first read of a header outside this memory: a BERT GGUF's header (its vocabulary included) is under 1 MiB.
pub(crate) const HEADER_GUESS: usize = 2 << 20;

impl Gguf {
    /// Parses and validates the header of a GGUF file. Tensor data is not read. A file outside this memory (the
    /// browser's JS bytes) is read from its start in growing prefixes until the header fits, never whole unless the
    /// header is the file.
    pub fn parse(src: &(impl ByteSource + ?Sized)) -> Result<Gguf> {
        let file_len = src.byte_len();
        if let Some(bytes) = src.as_slice() {
            return Self::parse_cursor(&mut Cursor { buf: bytes, pos: 0, file_len, short: false });
        }
        Self::parse_growing(file_len, |at, into| {
            src.read(at, into);
            Ok(())
        })
    }

    /// Parses the header of a file of `file_len` bytes from its start, read in growing prefixes until the header
    /// fits: `read(at, into)` fills `into` with the file's bytes from `at` on.
    pub(crate) fn parse_growing(file_len: usize, mut read: impl FnMut(usize, &mut [u8]) -> Result<()>) -> Result<Gguf> {
        let mut prefix = Vec::new();
        let mut want = file_len.min(HEADER_GUESS);
        loop {
            let have = prefix.len();
            prefix.resize(want, 0);
            read(have, &mut prefix[have..])?;
            let mut c = Cursor { buf: &prefix, pos: 0, file_len, short: false };
            match Self::parse_cursor(&mut c) {
                Err(_) if c.short => want = want.saturating_mul(4).min(file_len),
                parsed => return parsed,
            }
        }
    }

    /// Parses the header from the file's first bytes `head` (the file's length `file_len`, where known): `None`
    /// while `head` ends inside the header. With the length unknown, the tensors' places are checked against
    /// `limit` instead (the most the file may hold), and a tensor past the file's end shows when the file ends.
    pub(crate) fn parse_prefix(head: &[u8], file_len: Option<usize>, limit: usize) -> Result<Option<Gguf>> {
        let mut c = Cursor { buf: head, pos: 0, file_len: file_len.unwrap_or(limit), short: false };
        match Self::parse_cursor(&mut c) {
            Err(_) if c.short => Ok(None),
            parsed => parsed.map(Some),
        }
    }

    fn parse_cursor(c: &mut Cursor<'_>) -> Result<Gguf> {
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
            dtype: Dtype,
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
            let dtype = Dtype::from_ggml_id(ty, &name)?;

            if let Some(d) = ne.iter().position(|&d| d == 0) {
                return Err(gguf_err(format!("tensor `{name}` has dimension {d} of size 0 (ne = {ne:?})")));
            }
            let n = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| {
                gguf_err(format!("tensor `{name}` has dimensions {ne:?} whose product overflows: the file is corrupt or hostile"))
            })?;
            let (per_block, _) = dtype.block();
            if ne[0] % per_block as u64 != 0 {
                return Err(gguf_err(format!(
                    "tensor `{name}` is {} but its rows have {} values, not a multiple of the block size {per_block}",
                    dtype.ggml_name(),
                    ne[0]
                )));
            }
            let nbytes = type_bytes(dtype, n).ok_or_else(|| {
                gguf_err(format!("tensor `{name}` ({ne:?}, {}) has a byte size that overflows", dtype.ggml_name()))
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
        let file_len = c.file_len as u64;
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
                        r.dtype.ggml_name(),
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

    /// Copies one tensor's data out of `src` (the same file given to [`Gguf::parse`]), straight into its storage.
    pub fn load(&self, src: &(impl ByteSource + ?Sized), info: &TensorInfo) -> Result<HostTensor> {
        if info.start.checked_add(info.len).is_none_or(|end| end > src.byte_len()) {
            return Err(gguf_err(format!(
                "tensor `{}` lies outside the bytes given: pass the same file that was parsed",
                info.name
            )));
        }
        let (at, n) = (info.start, info.len);
        let data = match info.dtype {
            Dtype::F32 => HostData::F32(read_le(src, at, n)),
            Dtype::F16 => HostData::F16(read_le(src, at, n)),
            Dtype::Q8_0 => HostData::Q8_0(read_le(src, at, n)),
            Dtype::Q4_0 => HostData::Q4_0(read_le(src, at, n)),
        };
        Ok(HostTensor { shape: info.shape.clone(), data })
    }

    /// Every tensor, in file order.
    pub fn load_all(&self, bytes: &(impl ByteSource + ?Sized)) -> Result<Vec<(String, HostTensor)>> {
        self.tensors.iter().map(|t| Ok((t.name.clone(), self.load(bytes, t)?))).collect()
    }
}
