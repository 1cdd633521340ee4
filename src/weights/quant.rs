//! Q8_0 and Q4_0: llama.cpp's block quantization formats, bit for bit.
//!
//! Both cut a row into blocks of [`QK`] = 32 consecutive values along the last (contiguous) dimension and store
//! one f16 scale `d` per block, little-endian, followed by the quantized values:
//!
//! | format | bytes | values | decode |
//! |---|---|---|---|
//! | Q8_0 | 2 + 32 = 34 | `qs[j]: i8` | `x[j] = qs[j] · d` |
//! | Q4_0 | 2 + 16 = 18 | byte `j` holds element `j` (low nibble) and element `j + 16` (high nibble) | `x[j] = (q − 8) · d` |
//!
//! Encoding follows ggml's reference quantizers (`quantize_row_q8_0_ref` / `quantize_row_q4_0_ref` in
//! `ggml/src/ggml-quants.c`), which llama.cpp's own converter uses for deterministic files:
//! - Q8_0: `d = amax / 127`, `q = round(x / d)` (round half away from zero, like C `roundf`).
//! - Q4_0: `d = m / −8` where `m` is the signed value of largest magnitude (the first one on ties), and
//!   `q = min(15, trunc(x / d + 8.5))`. `m` itself maps to `q = 0` (value `−8·d = m`), the opposite sign reaches
//!   `+7·d` at most, so values within `(7.5·|d|, 8·|d|]` on that side are clipped by up to one step.
//!
//! In both, the scale is computed and applied in f32 (`x · (1/d)`) and only then rounded to f16 for storage, exactly
//! as ggml does; decoding multiplies by the f16 scale widened to f32.

use half::f16;

use crate::dtype::Dtype;
use crate::weights::{HostData, HostTensor};
use crate::{Error, Result};

pub use crate::dtype::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK};

/// One Q8_0 block as llama.cpp lays it out (`block_q8_0` in `ggml-common.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ8_0 {
    /// f16 scale, raw bits.
    pub d: u16,
    pub qs: [i8; QK],
}

/// One Q4_0 block as llama.cpp lays it out (`block_q4_0` in `ggml-common.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4_0 {
    /// f16 scale, raw bits.
    pub d: u16,
    /// `qs[j] = q[j] | q[j + 16] << 4`.
    pub qs: [u8; QK / 2],
}


// The layouts must match ggml's exactly: no padding, the sizes llama.cpp's `static_assert`s state.
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == Q8_0_BLOCK_BYTES);
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == Q4_0_BLOCK_BYTES);
const _: () = assert!(Q8_0_BLOCK_BYTES == 2 + QK);
const _: () = assert!(Q4_0_BLOCK_BYTES == 2 + QK / 2);
// Block sizes are a multiple of 2 but not of 4: GPU code reading blocks from `array<u32>` must handle blocks that
// straddle words. Keep this visible here so nobody assumes 4-byte alignment of blocks.
const _: () = assert!(Q8_0_BLOCK_BYTES % 4 != 0 && Q4_0_BLOCK_BYTES % 4 != 0);

/// Bytes that `n` values take in `kind`; for Q8_0 and Q4_0 `n` must be a multiple of [`QK`].
pub fn quantized_bytes(kind: Dtype, n: usize) -> usize {
    let (per, bytes) = kind.block();
    n / per * bytes
}

fn check_finite(x: &[f32]) -> Result<()> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(Error::Weights(format!(
            "value {} at index {i} is not finite: NaN or infinite weights cannot be quantized; check the checkpoint",
            x[i]
        ))),
        None => Ok(()),
    }
}

pub(crate) fn check_blocks(what: &str, n: usize) -> Result<()> {
    if n % QK != 0 {
        return Err(Error::Weights(format!(
            "{what}: {n} values are not a multiple of the block size {QK}; Q8_0/Q4_0 quantize rows whose length is a \
             multiple of {QK} (keep this tensor in f16 or f32)"
        )));
    }
    Ok(())
}

/// Quantizes `x` (a whole number of blocks) to Q8_0 bytes, as `quantize_row_q8_0_ref` does.
pub fn quantize_q8_0(x: &[f32]) -> Result<Vec<u8>> {
    check_blocks("Q8_0", x.len())?;
    check_finite(x)?;
    let mut out = Vec::with_capacity(quantized_bytes(Dtype::Q8_0, x.len()));
    for block in x.chunks_exact(QK) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        // |x·id| ≤ 127 up to one rounding, so `as i8` (saturating) never clips a real value.
        out.extend(block.iter().map(|v| (v * id).round() as i8 as u8));
    }
    Ok(out)
}

/// Quantizes `x` (a whole number of blocks) to Q4_0 bytes, as `quantize_row_q4_0_ref` does.
pub fn quantize_q4_0(x: &[f32]) -> Result<Vec<u8>> {
    check_blocks("Q4_0", x.len())?;
    check_finite(x)?;
    let mut out = Vec::with_capacity(quantized_bytes(Dtype::Q4_0, x.len()));
    for block in x.chunks_exact(QK) {
        // The signed value of largest magnitude; strict `<` keeps the first one on ties, like ggml.
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in block {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        // ggml: `MIN(15, (int8_t)(x·id + 8.5f))`: the cast truncates toward zero. x·id ≥ −8 (up to rounding), so
        // the sum is ≥ 0.5 − ε and truncates to ≥ 0; the clamp at 0 only guards against that ε.
        let q = |v: f32| -> u8 { ((v * id + 8.5) as i8).clamp(0, 15) as u8 };
        for j in 0..QK / 2 {
            out.push(q(block[j]) | (q(block[j + QK / 2]) << 4));
        }
    }
    Ok(out)
}

pub(crate) fn check_len(kind: Dtype, bytes: usize, n: usize) -> Result<()> {
    check_blocks(kind.ggml_name(), n)?;
    if bytes != quantized_bytes(kind, n) {
        return Err(Error::Weights(format!(
            "{}: {bytes} bytes do not hold {n} values (expected {} bytes)",
            kind.ggml_name(),
            quantized_bytes(kind, n)
        )));
    }
    Ok(())
}

#[inline]
fn scale(block: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32()
}

/// Decodes Q8_0 bytes into `out` (`out.len()` values), as `dequantize_row_q8_0` does.
pub fn dequantize_q8_0(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    check_len(Dtype::Q8_0, bytes.len(), out.len())?;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        unsafe { dequantize_q8_0_avx2(bytes, out) };
        return Ok(());
    }
    dequantize_q8_0_scalar(bytes, out);
    Ok(())
}

/// [`dequantize_q8_0`] one value at a time (lengths checked by the caller).
fn dequantize_q8_0_scalar(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(Q8_0_BLOCK_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = scale(block);
        for (yj, &q) in y.iter_mut().zip(&block[2..]) {
            *yj = (q as i8) as f32 * d;
        }
    }
}

/// [`dequantize_q8_0`] 8 values an instruction: the CPU backend decodes every Q8_0 weight on every product (4 rows
/// at a time for a sentence), where the scalar loop took a quarter of the product's time (MiniLM's QKV on 15 rows,
/// one thread: 55 of 244 µs; 36 µs with this, `examples/linear_bench`). The same values: a byte widens to f32
/// exactly, and each is one product with the block's scale.
///
/// SAFETY: the CPU has AVX2; `bytes` holds whole blocks for `out` (checked by the caller).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dequantize_q8_0_avx2(bytes: &[u8], out: &mut [f32]) {
    use std::arch::x86_64::*;
    for (block, y) in bytes.chunks_exact(Q8_0_BLOCK_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = _mm256_set1_ps(scale(block));
        for h in 0..QK / 8 {
            // SAFETY: bytes 2 + 8h..2 + 8h + 8 of the block (34 bytes) and floats 8h..8h + 8 of y (32).
            unsafe {
                let q = _mm_loadl_epi64(block.as_ptr().add(2 + 8 * h) as *const __m128i);
                let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
                _mm256_storeu_ps(y.as_mut_ptr().add(8 * h), v);
            }
        }
    }
}

/// Decodes Q4_0 bytes into `out` (`out.len()` values), as `dequantize_row_q4_0` does.
pub fn dequantize_q4_0(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    check_len(Dtype::Q4_0, bytes.len(), out.len())?;
    for (block, y) in bytes.chunks_exact(Q4_0_BLOCK_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = scale(block);
        let (lo, hi) = y.split_at_mut(QK / 2);
        for j in 0..QK / 2 {
            let b = block[2 + j];
            lo[j] = ((b & 0x0F) as i32 - 8) as f32 * d;
            hi[j] = ((b >> 4) as i32 - 8) as f32 * d;
        }
    }
    Ok(())
}

/// A read-only view of one weight matrix `(rows, cols)` in any host dtype, decoded a few rows at a time.
///
/// The CPU backend keeps weights packed: `linear` decodes a panel of rows before each GEMM and the embedding
/// lookup decodes the rows it gathers ([`RowView::rows_into`]), so the f32 copy of a matrix never exists whole.
#[derive(Clone, Copy, Debug)]
pub struct RowView<'a> {
    pub rows: usize,
    pub cols: usize,
    data: RowData<'a>,
}

#[derive(Clone, Copy, Debug)]
enum RowData<'a> {
    F32(&'a [f32]),
    F16(&'a [u16]),
    Q8_0(&'a [u8]),
    Q4_0(&'a [u8]),
}

impl<'a> RowView<'a> {
    /// Views a 2-D tensor; errors if it is not 2-D or its storage does not match its shape.
    pub fn new(t: &'a HostTensor) -> Result<Self> {
        let [rows, cols] = t.shape[..] else {
            return Err(Error::Weights(format!("expected a 2-D matrix, got shape {:?}", t.shape)));
        };
        let n = rows.checked_mul(cols).ok_or_else(|| Error::Weights(format!("shape {:?} overflows", t.shape)))?;
        let data = match &t.data {
            HostData::F32(v) if v.len() == n => RowData::F32(v),
            HostData::F16(v) if v.len() == n => RowData::F16(v),
            HostData::Q8_0(b) => {
                check_len(Dtype::Q8_0, b.len(), n).and_then(|_| check_blocks("Q8_0 row", cols))?;
                RowData::Q8_0(b)
            }
            HostData::Q4_0(b) => {
                check_len(Dtype::Q4_0, b.len(), n).and_then(|_| check_blocks("Q4_0 row", cols))?;
                RowData::Q4_0(b)
            }
            _ => return Err(Error::Weights(format!("storage does not hold shape {:?}", t.shape))),
        };
        Ok(RowView { rows, cols, data })
    }

    /// Rows `r, r+1, …` decoded to f32 into `out` (`out.len()` a multiple of `cols`): an embedding lookup, or a
    /// panel of weight rows the CPU backend's `linear` dequantizes before its GEMM. Panics if the rows run past the
    /// matrix (a programming error, not user input).
    pub fn rows_into(&self, r: usize, out: &mut [f32]) {
        let c = self.cols;
        let n = if c == 0 { 0 } else { out.len() / c };
        assert!(out.len() == n * c && r + n <= self.rows, "RowView::rows_into: rows {r}..{} of {}", r + n, self.rows);
        match self.data {
            RowData::F32(w) => out.copy_from_slice(&w[r * c..(r + n) * c]),
            RowData::F16(w) => {
                // half's slice conversion uses the F16C instructions when the CPU has them.
                use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
                w[r * c..(r + n) * c].reinterpret_cast::<f16>().convert_to_f32_slice(out);
            }
            // Lengths and whole-block rows were checked in `new`, so these cannot fail.
            RowData::Q8_0(w) => {
                let rb = quantized_bytes(Dtype::Q8_0, c);
                let _ = dequantize_q8_0(&w[r * rb..(r + n) * rb], out);
            }
            RowData::Q4_0(w) => {
                let rb = quantized_bytes(Dtype::Q4_0, c);
                let _ = dequantize_q4_0(&w[r * rb..(r + n) * rb], out);
            }
        }
    }
}

/// Number of elements of a shape, with overflow reported as an error.
pub fn numel(shape: &[usize]) -> Result<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(|| {
        Error::Weights(format!("shape {shape:?} has more elements than this platform can address"))
    })
}

/// Every element of `t` as f32 (dequantizing Q8_0/Q4_0, widening F16). Errors if the storage does not match the
/// shape.
pub fn to_f32(t: &HostTensor) -> Result<Vec<f32>> {
    let n = numel(&t.shape)?;
    let bad = |len: usize| {
        Error::Weights(format!("tensor of shape {:?} has {len} stored elements, expected {n}", t.shape))
    };
    match &t.data {
        HostData::F32(v) => {
            if v.len() != n {
                return Err(bad(v.len()));
            }
            Ok(v.clone())
        }
        HostData::F16(v) => {
            if v.len() != n {
                return Err(bad(v.len()));
            }
            Ok(v.iter().map(|h| f16::from_bits(*h).to_f32()).collect())
        }
        HostData::Q8_0(b) => {
            check_last_dim(Dtype::Q8_0, &t.shape)?;
            let mut out = vec![0.0f32; n];
            dequantize_q8_0(b, &mut out)?;
            Ok(out)
        }
        HostData::Q4_0(b) => {
            check_last_dim(Dtype::Q4_0, &t.shape)?;
            let mut out = vec![0.0f32; n];
            dequantize_q4_0(b, &mut out)?;
            Ok(out)
        }
        HostData::Placed(_) => Err(crate::weights::placed_error("reading its values")),
    }
}

fn check_last_dim(kind: Dtype, shape: &[usize]) -> Result<()> {
    match shape.last() {
        Some(&c) if c % QK == 0 => Ok(()),
        _ => Err(Error::Weights(format!(
            "{}: shape {shape:?}: blocks of {QK} run along the last dimension, which must be a multiple of {QK}",
            kind.ggml_name()
        ))),
    }
}

/// Quantizes an f32 tensor to `kind` (Q8_0 or Q4_0), blocks along its last dimension (which must be a multiple of
/// [`QK`]).
pub fn quantize(t: &HostTensor, kind: Dtype) -> Result<HostTensor> {
    if !kind.is_quantized() {
        return Err(Error::Weights(format!("cannot quantize to {kind}: quantize takes q8_0 or q4_0 (to_f16 makes f16)")));
    }
    check_last_dim(kind, &t.shape)?;
    let x = to_f32(t)?;
    let data = match kind {
        Dtype::Q4_0 => HostData::Q4_0(quantize_q4_0(&x)?),
        _ => HostData::Q8_0(quantize_q8_0(&x)?),
    };
    Ok(HostTensor { shape: t.shape.clone(), data })
}

/// Re-encodes a Q4_0 tensor as Q8_0, exactly: a Q4_0 value is `(q − 8)·d` with `q − 8 ∈ [−8, 7]`, which is the
/// Q8_0 value `q8·d` with the same f16 scale and `q8 = q − 8`. Lets a mixed Q4_0/Q8_0 file fuse tensors (q, k, v)
/// that were stored at different precisions without losing anything. Other dtypes are returned unchanged.
pub fn widen_q4_0_to_q8_0(t: &HostTensor) -> Result<HostTensor> {
    let HostData::Q4_0(b) = &t.data else { return Ok(t.clone()) };
    check_last_dim(Dtype::Q4_0, &t.shape)?;
    check_len(Dtype::Q4_0, b.len(), numel(&t.shape)?)?;
    let mut out = Vec::with_capacity(b.len() / Q4_0_BLOCK_BYTES * Q8_0_BLOCK_BYTES);
    for block in b.chunks_exact(Q4_0_BLOCK_BYTES) {
        out.extend_from_slice(&block[..2]);
        let qs = &block[2..];
        out.extend(qs.iter().map(|&v| ((v & 0x0F) as i8 - 8) as u8));
        out.extend(qs.iter().map(|&v| ((v >> 4) as i8 - 8) as u8));
    }
    Ok(HostTensor { shape: t.shape.clone(), data: HostData::Q8_0(out) })
}

/// Converts a tensor to f16 (round to nearest even, like `GGML_FP32_TO_FP16`).
pub fn to_f16(t: &HostTensor) -> Result<HostTensor> {
    let x = to_f32(t)?;
    Ok(HostTensor { shape: t.shape.clone(), data: HostData::F16(x.iter().map(|v| f16::from_f32(*v).to_bits()).collect()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random sequence (the op tests' xorshift), values in [-scale, scale).
    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        crate::testutil::rand_vec(n, seed).into_iter().map(|v| v * scale).collect()
    }

    fn block_scale(bytes: &[u8], block_bytes: usize, b: usize) -> f32 {
        scale(&bytes[b * block_bytes..])
    }

    #[test]
    fn q8_0_known_block() {
        // amax = 127 makes d = 1 exactly (f16 0x3C00), so q = round(x) with halves away from zero.
        let mut x = [0.0f32; 32];
        x[0] = -127.0;
        x[1] = 1.5; // → 2
        x[2] = -2.5; // → −3
        x[3] = 0.49; // → 0
        x[4] = 126.6; // → 127
        x[31] = -0.5; // → −1
        let b = quantize_q8_0(&x).unwrap();
        assert_eq!(b.len(), 34);
        assert_eq!(&b[..2], &[0x00, 0x3C]);
        let q: Vec<i8> = b[2..].iter().map(|&v| v as i8).collect();
        assert_eq!(&q[..5], &[-127, 2, -3, 0, 127]);
        assert_eq!(q[31], -1);
        assert!(q[5..31].iter().all(|&v| v == 0));
        let mut y = [0.0f32; 32];
        dequantize_q8_0(&b, &mut y).unwrap();
        assert_eq!(&y[..5], &[-127.0, 2.0, -3.0, 0.0, 127.0]);
    }

    #[test]
    fn q4_0_known_block() {
        // max = −8 (largest magnitude, negative) makes d = 1 exactly; q = min(15, trunc(x + 8.5)).
        let mut x = [0.0f32; 32];
        x[0] = -8.0; // 0.5 → 0 (decodes to −8)
        x[1] = 7.0; // 15.5 → 15 (7)
        x[2] = 7.9; // 16.4 → 16 → clipped to 15 (7)
        x[3] = -0.5; // 8.0 → 8 (0)
        x[4] = 0.5; // 9.0 → 9 (1): halves round up
        x[5] = -0.6; // 7.9 → 7 (−1)
        x[16] = 3.0; // 11.5 → 11, high nibble of byte 0
        x[31] = -3.2; // 5.3 → 5, high nibble of byte 15
        let b = quantize_q4_0(&x).unwrap();
        assert_eq!(b.len(), 18);
        assert_eq!(&b[..2], &[0x00, 0x3C]);
        // zeros encode as 8 (0x8 nibbles)
        assert_eq!(b[2], 0 | (11 << 4));
        assert_eq!(b[3], 15 | (8 << 4));
        assert_eq!(b[4], 15 | (8 << 4));
        assert_eq!(b[5], 8 | (8 << 4));
        assert_eq!(b[6], 9 | (8 << 4));
        assert_eq!(b[7], 7 | (8 << 4));
        assert_eq!(b[17], 8 | (5 << 4));
        let mut y = [0.0f32; 32];
        dequantize_q4_0(&b, &mut y).unwrap();
        assert_eq!(&y[..6], &[-8.0, 7.0, 7.0, 0.0, 1.0, -1.0]);
        assert_eq!((y[16], y[31]), (3.0, -3.0));
    }

    #[test]
    fn zero_block_has_zero_scale() {
        let x = [0.0f32; 64];
        let b8 = quantize_q8_0(&x).unwrap();
        assert!(b8.iter().all(|&v| v == 0));
        let b4 = quantize_q4_0(&x).unwrap();
        // d = 0 / −8 = −0.0 (f16 0x8000, as ggml stores it) and every nibble trunc(0 + 8.5) = 8.
        assert_eq!(&b4[..2], &[0x00, 0x80]);
        assert!(b4[2..18].iter().all(|&v| v == 0x88));
    }

    /// Q8_0: with d the f32 scale and d16 the stored one, |x − q·d16| ≤ |x − q·d| + |q|·|d − d16|
    /// ≤ d/2 + 127·|d − d16|. Float rounding of x·(1/d) adds at most a few ulps of 127, i.e. ~1e-5·d.
    #[test]
    fn q8_0_round_trip_bound() {
        for (seed, scale) in [(1u64, 1.0f32), (2, 0.02), (3, 300.0), (4, 1e-6)] {
            let x = values(32 * 64, seed, scale);
            let b = quantize_q8_0(&x).unwrap();
            let mut y = vec![0.0; x.len()];
            dequantize_q8_0(&b, &mut y).unwrap();
            for (blk, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
                let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let d16 = block_scale(&b, 34, blk);
                let bound = d / 2.0 * (1.0 + 1e-4) + 127.0 * (d - d16).abs();
                for (a, c) in xb.iter().zip(yb) {
                    assert!((a - c).abs() <= bound, "block {blk}: {a} vs {c}, bound {bound}");
                }
            }
        }
    }

    /// Q4_0: the step is |d| = |m|/8; values on the side of m round to the nearest step (error ≤ |d|/2), values
    /// on the other side beyond 7.5·|d| are clipped to 7·|d| (error ≤ |d|). Storing d in f16 adds ≤ 8·|d − d16|.
    #[test]
    fn q4_0_round_trip_bound() {
        for (seed, scale) in [(5u64, 1.0f32), (6, 0.05), (7, 40.0)] {
            let x = values(32 * 64, seed, scale);
            let b = quantize_q4_0(&x).unwrap();
            let mut y = vec![0.0; x.len()];
            dequantize_q4_0(&b, &mut y).unwrap();
            for (blk, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
                let m = xb.iter().fold(0.0f32, |m, v| if m.abs() < v.abs() { *v } else { m });
                let d = m / -8.0;
                let d16 = block_scale(&b, 18, blk);
                let slack = 1.0 + 1e-4;
                for (a, c) in xb.iter().zip(yb) {
                    let clipped = a / d > 7.5;
                    let step = if clipped { d.abs() } else { d.abs() / 2.0 };
                    let bound = step * slack + 8.0 * (d - d16).abs();
                    assert!((a - c).abs() <= bound, "block {blk}: {a} vs {c}, bound {bound}");
                }
            }
        }
    }

    #[test]
    fn not_a_multiple_of_32_is_a_clear_error() {
        let e = quantize_q8_0(&[1.0; 33]).unwrap_err().to_string();
        assert!(e.contains("multiple of the block size 32"), "{e}");
        let e = quantize_q4_0(&[1.0; 31]).unwrap_err().to_string();
        assert!(e.contains("multiple of the block size 32"), "{e}");
        let t = HostTensor { shape: vec![2, 48], data: HostData::F32(vec![0.0; 96]) };
        // 96 values are 3 blocks, but rows of 48 would split a block across rows.
        let e = quantize(&t, Dtype::Q8_0).unwrap_err().to_string();
        assert!(e.contains("last dimension"), "{e}");
        let e = dequantize_q8_0(&[0u8; 33], &mut [0.0; 32]).unwrap_err().to_string();
        assert!(e.contains("expected 34 bytes"), "{e}");
    }

    #[test]
    fn quantize_takes_only_quantized_dtypes() {
        let t = HostTensor { shape: vec![32], data: HostData::F32(vec![1.0; 32]) };
        for d in [Dtype::F32, Dtype::F16] {
            let e = quantize(&t, d).unwrap_err().to_string();
            assert!(e.contains(&format!("cannot quantize to {d}")) && e.contains("q8_0 or q4_0"), "{e}");
        }
        assert_eq!(quantized_bytes(Dtype::Q8_0, 64), 68);
        assert_eq!(quantized_bytes(Dtype::Q4_0, 64), 36);
        assert_eq!(quantized_bytes(Dtype::F16, 64), 128);
    }

    #[test]
    fn widening_q4_0_to_q8_0_is_exact() {
        let t = HostTensor { shape: vec![3, 64], data: HostData::F32(values(192, 21, 0.7)) };
        let q4 = quantize(&t, Dtype::Q4_0).unwrap();
        let q8 = widen_q4_0_to_q8_0(&q4).unwrap();
        assert!(matches!(q8.data, HostData::Q8_0(ref b) if b.len() == 6 * 34));
        assert_eq!(to_f32(&q8).unwrap(), to_f32(&q4).unwrap());
    }

    #[test]
    fn nan_is_refused() {
        let mut x = vec![0.5f32; 32];
        x[7] = f32::NAN;
        assert!(quantize_q8_0(&x).unwrap_err().to_string().contains("index 7"));
        assert!(quantize_q4_0(&x).is_err());
    }

    /// Decoding any run of rows gives exactly the values of dequantizing the whole matrix.
    /// The AVX2 decode against the scalar one bit for bit, on blocks holding every byte value and scales from
    /// subnormal to the largest f16 (and ∞: its products are ±∞ or NaN, both paths alike).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn q8_0_avx2_decode_equals_scalar() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            eprintln!("no AVX2 on this CPU: the scalar decode runs alone");
            return;
        }
        let scales = [0x0001u16, 0x03ff, 0x0400, 0x2e66, 0x3c00, 0xbc00, 0x7bff, 0x7c00];
        let mut bytes = Vec::new();
        for (b, &d) in scales.iter().enumerate() {
            bytes.extend_from_slice(&d.to_le_bytes());
            bytes.extend((0..QK).map(|j| ((b * QK + j) * 37 % 256) as u8));
        }
        let n = scales.len() * QK;
        let (mut fast, mut slow) = (vec![f32::NAN; n], vec![0f32; n]);
        // SAFETY: AVX2 checked above; whole blocks for n values.
        unsafe { dequantize_q8_0_avx2(&bytes, &mut fast) };
        dequantize_q8_0_scalar(&bytes, &mut slow);
        assert!(slow.iter().any(|v| *v != 0.0), "the blocks decode to something");
        assert!(fast.iter().zip(&slow).all(|(a, b)| a.to_bits() == b.to_bits()), "AVX2 ≠ scalar");
    }

    #[test]
    fn rows_into_matches_dequantized() {
        let (rows, cols) = (7, 96);
        let wt = HostTensor { shape: vec![rows, cols], data: HostData::F32(values(rows * cols, 11, 0.3)) };
        for t in [
            quantize(&wt, Dtype::Q8_0).unwrap(),
            quantize(&wt, Dtype::Q4_0).unwrap(),
            to_f16(&wt).unwrap(),
            wt.clone(),
        ] {
            let deq = to_f32(&t).unwrap();
            let view = RowView::new(&t).unwrap();
            for (r, n) in [(0, 1), (3, 2), (0, rows), (6, 1)] {
                let mut out = vec![f32::NAN; n * cols];
                view.rows_into(r, &mut out);
                assert_eq!(out, &deq[r * cols..(r + n) * cols], "{} rows {r}..{}", t.data.dtype(), r + n);
            }
        }
        let bad = HostTensor { shape: vec![2, 48], data: quantize(&HostTensor { shape: vec![96], data: HostData::F32(values(96, 1, 1.0)) }, Dtype::Q8_0).unwrap().data };
        assert!(RowView::new(&bad).unwrap_err().to_string().contains("multiple of the block size"));
    }
}
