//! [`HostTensor`]: one tensor on the host in the dtype its file stores (or already placed in device memory), and the
//! checks every reader applies to it.

use std::sync::Arc;

use super::quant;
use crate::dtype::Dtype;
use crate::{Error, Result};

/// A tensor on the host in the dtype its file stores. Shapes are PyTorch's (a linear weight is `(out, in)`).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: HostData,
}

/// Element storage. Quantized formats use llama.cpp's block layouts along the last (contiguous) dimension.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    F32(Vec<f32>),
    /// IEEE half, as raw bits.
    F16(Vec<u16>),
    /// Blocks of 32: an f16 scale then 32 × i8 (34 bytes).
    Q8_0(Vec<u8>),
    /// Blocks of 32: an f16 scale then 16 bytes of 4-bit values offset by 8 (18 bytes).
    Q4_0(Vec<u8>),
    /// Already in a device's memory: the bytes went there as the file arrived ([`stream::DeviceSink`]), and only a
    /// backend on that device reads them (others read them back first: [`Placed`]).
    Placed(Placed),
}

/// A weight whose bytes are in device memory, not here: what the host keeps to use, check and read it back.
#[derive(Clone)]
pub struct Placed {
    /// How the bytes are stored (as the file stores them).
    pub dtype: Dtype,
    /// The tensor's bytes; the device buffer holds them from `offset`, zero-padded to whole words and more.
    pub bytes: usize,
    /// Where in the device buffer they start: 0, but for the q, k and v weights of a layer, which arrive into one
    /// buffer, in that order, as the model joins them (the key's rows after the query's).
    pub offset: usize,
    /// [`word_hash`] of the bytes as they arrived (zero-padded to a whole word): a read-back must give it again.
    pub hash: u64,
    /// The first non-finite value (or Q8_0/Q4_0 block scale) among the bytes, as [`HostTensor::first_non_finite`].
    pub non_finite: Option<(usize, &'static str)>,
    /// The device's buffer, whatever type the sink made it.
    pub handle: Arc<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for Placed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Placed({}, {} bytes)", self.dtype, self.bytes)
    }
}

impl PartialEq for Placed {
    /// The same device memory.
    fn eq(&self, other: &Placed) -> bool {
        Arc::ptr_eq(&self.handle, &other.handle) && self.offset == other.offset
    }
}

/// A 64-bit FNV-1a over little-endian 32-bit words, continued from `h` (start from [`WORD_HASH_SEED`]): fast enough
/// to run over every weight as it arrives (a word a multiply), and what a read-back of device memory is checked
/// with. Not a defence against anyone: a check that the device holds what was written. `bytes` is whole words.
pub fn word_hash(mut h: u64, bytes: &[u8]) -> u64 {
    for w in bytes.chunks_exact(4) {
        h = (h ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Where [`word_hash`] starts: FNV-1a's offset basis.
pub const WORD_HASH_SEED: u64 = 0xcbf2_9ce4_8422_2325;

fn kind_f32(x: f32) -> &'static str {
    if x.is_nan() { "NaN" } else { "an infinity" }
}

/// An f16 with all exponent bits set is an infinity (mantissa 0) or a NaN.
fn half_kind(b: u16) -> Option<&'static str> {
    (b & 0x7c00 == 0x7c00).then(|| if b & 0x03ff == 0 { "an infinity" } else { "NaN" })
}

/// [`HostTensor::first_non_finite`] of `dtype` data as its little-endian bytes (whole values or blocks).
pub(crate) fn non_finite_in(dtype: Dtype, bytes: &[u8]) -> Option<(usize, &'static str)> {
    let scales = |block: usize| {
        bytes.chunks(block).enumerate().find_map(|(i, c)| half_kind(u16::from_le_bytes([c[0], *c.get(1)?])).map(|k| (i, k)))
    };
    match dtype {
        Dtype::F32 => bytes.chunks_exact(4).enumerate().find_map(|(i, c)| {
            let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            (!x.is_finite()).then(|| (i, kind_f32(x)))
        }),
        Dtype::F16 => bytes.chunks_exact(2).enumerate().find_map(|(i, c)| half_kind(u16::from_le_bytes([c[0], c[1]])).map(|k| (i, k))),
        Dtype::Q8_0 => scales(quant::Q8_0_BLOCK_BYTES),
        Dtype::Q4_0 => scales(quant::Q4_0_BLOCK_BYTES),
    }
}

/// The error of a host operation on a [`HostData::Placed`] tensor.
pub(crate) fn placed_error(what: &str) -> Error {
    Error::Weights(format!(
        "{what}: the weight is in GPU memory (it went there as the file arrived), not on the host; load the model \
         with device \"cpu\" to run this on the host"
    ))
}

impl HostData {
    /// How the values are stored.
    pub fn dtype(&self) -> Dtype {
        match self {
            HostData::F32(_) => Dtype::F32,
            HostData::F16(_) => Dtype::F16,
            HostData::Q8_0(_) => Dtype::Q8_0,
            HostData::Q4_0(_) => Dtype::Q4_0,
            HostData::Placed(p) => p.dtype,
        }
    }
}

impl HostTensor {
    pub fn f32(shape: Vec<usize>, data: Vec<f32>) -> Result<HostTensor> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::Weights(format!("shape {shape:?} needs {n} values, got {}", data.len())));
        }
        Ok(HostTensor { shape, data: HostData::F32(data) })
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// `(rows, cols)` as a backend sees it: 1-D tensors become `(1, n)`; higher ranks fold the leading dimensions.
    pub fn rows_cols(&self) -> (usize, usize) {
        match self.shape.len() {
            0 => (1, 1),
            1 => (1, self.shape[0]),
            _ => {
                let cols = self.shape[self.shape.len() - 1];
                (self.numel() / cols.max(1), cols)
            }
        }
    }

    /// The values as f32, whatever the storage.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        match &self.data {
            HostData::F32(v) => Ok(v.clone()),
            HostData::F16(v) => Ok(v.iter().map(|&b| half::f16::from_bits(b).to_f32()).collect()),
            // Block dequantization, bit-exact with ggml's `dequantize_row_q8_0/q4_0`.
            HostData::Q8_0(_) | HostData::Q4_0(_) => quant::to_f32(self),
            HostData::Placed(_) => Err(placed_error("reading its values")),
        }
    }

    /// The index (in elements, or blocks for Q8_0/Q4_0) and kind of the first NaN or infinite value, if any. For
    /// quantized data the f16 block scales are what can be non-finite.
    pub fn first_non_finite(&self) -> Option<(usize, &'static str)> {
        match &self.data {
            HostData::F32(v) => v.iter().position(|x| !x.is_finite()).map(|i| (i, kind_f32(v[i]))),
            HostData::F16(v) => v.iter().enumerate().find_map(|(i, &b)| half_kind(b).map(|k| (i, k))),
            HostData::Q8_0(v) => non_finite_in(Dtype::Q8_0, v),
            HostData::Q4_0(v) => non_finite_in(Dtype::Q4_0, v),
            HostData::Placed(p) => p.non_finite,
        }
    }

    /// Concatenates tensors along their first dimension (e.g. the q, k, v weights `(H, H)` ×3 → `(3H, H)`, or their
    /// biases `(H)` ×3 → `(3H)`). All parts must share the dtype and every other dimension. Works for block-quantized
    /// data too: blocks run along the last dimension, so rows stay contiguous.
    pub fn concat_rows(parts: &[&HostTensor]) -> Result<HostTensor> {
        if parts.iter().any(|p| matches!(p.data, HostData::Placed(_))) {
            return Err(placed_error("joining rows of weights on the host"));
        }
        let is = |p: &&HostTensor, d: Dtype| p.data.dtype() == d;
        if parts.iter().any(|p| is(p, Dtype::Q4_0)) && parts.iter().any(|p| is(p, Dtype::Q8_0))
            && parts.iter().all(|p| p.data.dtype().is_quantized())
        {
            // A mixed-precision GGUF (e.g. attn_v kept at Q8_0 in a Q4_0 file): Q4_0 widens to Q8_0 exactly.
            let widened = parts.iter().map(|p| quant::widen_q4_0_to_q8_0(p)).collect::<Result<Vec<_>>>()?;
            return Self::concat_rows(&widened.iter().collect::<Vec<_>>());
        }
        let first = parts.first().ok_or_else(|| Error::Weights("concat_rows of no tensors".into()))?;
        if first.shape.is_empty() {
            return Err(Error::Weights("concat_rows of a scalar".into()));
        }
        let mut rows = 0;
        for p in parts {
            if p.shape.len() != first.shape.len() || p.shape[1..] != first.shape[1..] {
                return Err(Error::Weights(format!(
                    "cannot fuse tensors of shapes {:?} and {:?}: they differ beyond the first dimension",
                    first.shape, p.shape
                )));
            }
            if p.data.dtype() != first.data.dtype() {
                return Err(Error::Weights(format!(
                    "cannot fuse a {} tensor with a {} one; store the parts in one dtype",
                    first.data.dtype(),
                    p.data.dtype()
                )));
            }
            rows += p.shape[0];
        }
        let mut shape = first.shape.clone();
        shape[0] = rows;
        macro_rules! cat {
            ($variant:ident) => {{
                let mut out = Vec::new();
                for p in parts {
                    if let HostData::$variant(v) = &p.data {
                        out.extend_from_slice(v);
                    }
                }
                HostData::$variant(out)
            }};
        }
        let data = match first.data {
            HostData::F32(_) => cat!(F32),
            HostData::F16(_) => cat!(F16),
            HostData::Q8_0(_) => cat!(Q8_0),
            HostData::Q4_0(_) => cat!(Q4_0),
            HostData::Placed(_) => return Err(placed_error("joining rows of weights on the host")),
        };
        Ok(HostTensor { shape, data })
    }

    /// Rows `rows` of the first dimension (of a 2-D tensor `(rows, cols)`), e.g. the positions a table keeps.
    pub fn slice_rows(&self, rows: std::ops::Range<usize>) -> Result<HostTensor> {
        self.check_storage()?;
        let (m, n) = self.rows_cols();
        if self.shape.len() != 2 || rows.start > rows.end || rows.end > m {
            return Err(Error::Weights(format!("rows {rows:?} of a tensor of shape {:?}", self.shape)));
        }
        let cut = |row_len: usize| rows.start * row_len..rows.end * row_len;
        let data = match &self.data {
            HostData::F32(v) => HostData::F32(v[cut(n)].to_vec()),
            HostData::F16(v) => HostData::F16(v[cut(n)].to_vec()),
            HostData::Q8_0(v) => HostData::Q8_0(v[cut(quant::quantized_bytes(Dtype::Q8_0, n))].to_vec()),
            HostData::Q4_0(v) => HostData::Q4_0(v[cut(quant::quantized_bytes(Dtype::Q4_0, n))].to_vec()),
            HostData::Placed(_) => return Err(placed_error("taking rows of a weight on the host")),
        };
        Ok(HostTensor { shape: vec![rows.len(), n], data })
    }

    /// Rows `rows` of a 2-D tensor, in that order (repeats allowed).
    pub fn gather_rows(&self, rows: &[usize]) -> Result<HostTensor> {
        let mut parts = Vec::with_capacity(rows.len());
        for &r in rows {
            parts.push(self.slice_rows(r..r + 1)?);
        }
        if parts.is_empty() {
            return self.slice_rows(0..0);
        }
        HostTensor::concat_rows(&parts.iter().collect::<Vec<_>>())
    }

    /// Fails unless the storage holds exactly the shape's elements (quantized: rows of whole blocks of 32), with
    /// the checks [`quant::RowView::new`] makes of a matrix.
    fn check_storage(&self) -> Result<()> {
        let (rows, n) = self.rows_cols();
        let quantized = |kind: Dtype, bytes: usize| {
            quant::check_len(kind, bytes, rows * n).and_then(|_| quant::check_blocks(&format!("{} row", kind.ggml_name()), n))
        };
        match &self.data {
            HostData::F32(v) if v.len() == rows * n => Ok(()),
            HostData::F16(v) if v.len() == rows * n => Ok(()),
            HostData::Q8_0(b) => quantized(Dtype::Q8_0, b.len()),
            HostData::Q4_0(b) => quantized(Dtype::Q4_0, b.len()),
            _ => Err(Error::Weights(format!("storage does not hold shape {:?}", self.shape))),
        }
    }
}
