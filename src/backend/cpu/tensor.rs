//! [`CpuTensor`]: the CPU backend's matrices, and the forms a weight is kept in.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::q8;
use crate::dtype::Dtype;
use crate::weights::quant::RowView;
use crate::weights::{HostData, HostTensor};
use crate::{Error, Result};

/// A row-major matrix `(rows, cols)`: f32 values, or a weight matrix kept in its stored dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTensor {
    pub(super) rows: usize,
    pub(super) cols: usize,
    /// The values when the tensor is f32 (every activation); empty for a packed weight.
    data: Values,
    /// A weight stored as f16, Q8_0 or Q4_0 (shape `[rows, cols]`, blocks along `cols`); `None` for f32.
    packed: Option<Packed>,
}

/// How a weight that is not f32 is kept.
#[derive(Clone, Debug, PartialEq)]
enum Packed {
    /// As loaded (f16, Q8_0, Q4_0). A Q8_0 table where the integer kernel runs gets its repacked form at its first
    /// `linear` (the MLM decoder tied to the word embeddings), kept beside the blocks that lookups read.
    Host(Arc<HostTensor>, Q8Cache),
    /// A Q8_0 linear weight where the integer kernel runs (`upload` of [`super::CpuBackend`]).
    Q8(Arc<LazyQ8>),
}

/// A Q8_0 linear weight for the integer kernel: its blocks until its first `linear` repacks them, then the repacked
/// form only. The blocks are released then, so that the model holds one form of each weight (the loaded weights
/// are gone by the first call); repacking at upload instead kept both forms at once during the load, beside the
/// fetched file's garbage, and raised the load's peak (BENCHMARKS.md, issue 29).
#[derive(Debug)]
pub(crate) struct LazyQ8 {
    blocks: Mutex<Option<Arc<HostTensor>>>,
    q8: OnceLock<q8::Q8Matrix>,
}

impl LazyQ8 {
    /// The blocks, unless the repacked form has replaced them.
    fn blocks(&self) -> Option<Arc<HostTensor>> {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The repacked form, made now if it is not yet (and the blocks released).
    fn repacked(&self) -> Result<&q8::Q8Matrix> {
        if let Some(m) = self.q8.get() {
            return Ok(m);
        }
        // Another call may have repacked it and released the blocks since `get`: then the form is there.
        let Some(t) = self.blocks() else { return Ok(self.q8.get().expect("the blocks go only once repacked")) };
        let m = repack(&t)?;
        let m = self.q8.get_or_init(|| m);
        *self.blocks.lock().unwrap_or_else(PoisonError::into_inner) = None;
        Ok(m)
    }
}

impl PartialEq for LazyQ8 {
    /// The same values: compared in the repacked form, made for the comparison where it is not yet (tests only).
    fn eq(&self, other: &LazyQ8) -> bool {
        let form = |l: &LazyQ8| {
            l.q8.get().map(|m| Ok(m.clone())).unwrap_or_else(|| l.blocks().as_deref().map_or_else(
                || Err(Error::Weights("no form".into())),
                repack,
            ))
        };
        matches!((form(self), form(other)), (Ok(a), Ok(b)) if a == b)
    }
}

/// The integer kernel's form of a Q8_0 matrix `t`.
fn repack(t: &HostTensor) -> Result<q8::Q8Matrix> {
    match (&t.data, &t.shape[..]) {
        (HostData::Q8_0(bytes), &[n, k]) => q8::Q8Matrix::from_q8_0(bytes, n, k),
        _ => Err(Error::Weights("an integer-kernel weight must be a Q8_0 matrix".into())),
    }
}

/// A packed weight's rows, decoded on demand.
pub(crate) enum Rows<'a> {
    View(RowView<'a>),
    /// An integer-kernel weight not yet repacked.
    Blocks(Arc<HostTensor>),
    Q8(&'a q8::Q8Matrix),
}

impl Rows<'_> {
    /// Rows `r, r+1, …` as f32 into `out` (`out.len()` a multiple of the column count).
    pub(crate) fn rows_into(&self, r: usize, out: &mut [f32]) {
        match self {
            Rows::View(v) => v.rows_into(r, out),
            // Validated by `RowView::new` at upload, so this cannot fail.
            Rows::Blocks(t) => RowView::new(t).expect("validated at upload").rows_into(r, out),
            Rows::Q8(m) => m.rows_into(r, out),
        }
    }
}

/// The f32 values of a tensor: its own (every activation), or an f32 weight's, shared with the loaded weights
/// ([`CpuTensor::shared`]).
#[derive(Clone, Debug)]
enum Values {
    Own(Arc<Vec<f32>>),
    /// An f32 [`HostTensor`] of the loaded weights.
    Weight(Arc<HostTensor>),
}

impl Default for Values {
    fn default() -> Values {
        Values::Own(Arc::new(Vec::new()))
    }
}

impl Values {
    fn as_slice(&self) -> &[f32] {
        match self {
            Values::Own(v) => v,
            Values::Weight(t) => match &t.data {
                HostData::F32(v) => v,
                _ => &[], // `CpuTensor::shared` puts only f32 tensors here
            },
        }
    }
}

impl PartialEq for Values {
    fn eq(&self, other: &Values) -> bool {
        self.as_slice() == other.as_slice()
    }
}

/// The lazily repacked form of a Q8_0 table, made if a backend that runs the integer kernel multiplies by it (`None`
/// for every other tensor); equal for all tensors (it is derived from the blocks).
#[derive(Clone, Debug, Default)]
struct Q8Cache(Option<Arc<OnceLock<q8::Q8Matrix>>>);

impl PartialEq for Q8Cache {
    fn eq(&self, _: &Q8Cache) -> bool {
        true
    }
}

impl Packed {
    fn host_bytes(t: &HostTensor) -> usize {
        match &t.data {
            HostData::F32(v) => v.len() * 4,
            HostData::F16(v) => v.len() * 2,
            HostData::Q8_0(b) | HostData::Q4_0(b) => b.len(),
            HostData::Placed(p) => p.bytes,
        }
    }
}

impl CpuTensor {
    /// Wraps `data` as a `(rows, cols)` matrix.
    pub fn new(data: Vec<f32>, rows: usize, cols: usize) -> Result<CpuTensor> {
        if data.len() != rows * cols {
            return Err(Error::Input(format!("a ({rows}, {cols}) tensor needs {} values, got {}", rows * cols, data.len())));
        }
        Ok(CpuTensor { rows, cols, data: Values::Own(Arc::new(data)), packed: None })
    }

    /// A 2-D weight `(rows, cols)` that keeps `t`, shared with the loaded weights, instead of a copy: f32 values as
    /// the tensor's own, other dtypes as [`CpuTensor::packed`] keeps them. A tensor of another shape is copied.
    pub fn shared(t: &Arc<HostTensor>, rows: usize, cols: usize) -> Result<CpuTensor> {
        if t.shape != [rows, cols] {
            return CpuTensor::packed(t, rows, cols);
        }
        if let HostData::F32(v) = &t.data {
            if v.len() != rows * cols {
                return Err(Error::Input(format!("a ({rows}, {cols}) tensor needs {} values, got {}", rows * cols, v.len())));
            }
            return Ok(CpuTensor { rows, cols, data: Values::Weight(t.clone()), packed: None });
        }
        RowView::new(t)?; // validates the storage length and the block alignment of rows
        Ok(CpuTensor::host(t.clone(), rows, cols))
    }

    fn host(t: Arc<HostTensor>, rows: usize, cols: usize) -> CpuTensor {
        let q8 = Q8Cache(matches!(t.data, HostData::Q8_0(_)).then(|| Arc::new(OnceLock::new())));
        CpuTensor { rows, cols, data: Values::default(), packed: Some(Packed::Host(t, q8)) }
    }

    /// A Q8_0 linear weight `(rows, cols)` for the integer kernel ([`LazyQ8`]): kept as `t`'s blocks, shared, until
    /// its first `linear` repacks them, then in that form only. Any other tensor as [`CpuTensor::shared`] keeps it.
    pub fn repacked(t: &Arc<HostTensor>, rows: usize, cols: usize) -> Result<CpuTensor> {
        if !matches!(t.data, HostData::Q8_0(_)) || t.shape != [rows, cols] {
            return CpuTensor::shared(t, rows, cols);
        }
        RowView::new(t)?; // validates the storage length and the block alignment of rows
        let lazy = LazyQ8 { blocks: Mutex::new(Some(t.clone())), q8: OnceLock::new() };
        Ok(CpuTensor { rows, cols, data: Values::default(), packed: Some(Packed::Q8(Arc::new(lazy))) })
    }

    /// Keeps a 2-D f16 / Q8_0 / Q4_0 weight as stored (checked to hold `(rows, cols)`; quantized rows must be whole
    /// blocks of 32). An f32 host tensor becomes a plain f32 tensor.
    pub fn packed(t: &HostTensor, rows: usize, cols: usize) -> Result<CpuTensor> {
        if let HostData::F32(v) = &t.data {
            return CpuTensor::new(v.clone(), rows, cols);
        }
        let t = HostTensor { shape: vec![rows, cols], data: t.data.clone() };
        RowView::new(&t)?; // validates the storage length and the block alignment of rows
        Ok(CpuTensor::host(Arc::new(t), rows, cols))
    }

    /// How the elements are stored.
    pub fn dtype(&self) -> Dtype {
        match &self.packed {
            None => Dtype::F32,
            Some(Packed::Host(t, _)) => t.data.dtype(),
            Some(Packed::Q8(_)) => Dtype::Q8_0,
        }
    }

    /// Bytes the elements occupy in memory (a Q8_0 weight: 34 per 32 values; repacked, 36 or 40).
    pub fn bytes(&self) -> usize {
        match &self.packed {
            None => self.data().len() * 4,
            Some(Packed::Q8(l)) => l.q8.get().map_or_else(|| l.blocks().map_or(0, |t| Packed::host_bytes(&t)), |m| m.bytes()),
            Some(Packed::Host(t, _)) => Packed::host_bytes(t),
        }
    }

    /// The rows of a packed weight (`None` for f32).
    pub(crate) fn row_view(&self) -> Option<Rows<'_>> {
        match self.packed.as_ref()? {
            // Validated by `RowView::new` when it was made, so this cannot fail.
            Packed::Host(t, _) => RowView::new(t).ok().map(Rows::View),
            Packed::Q8(l) => Some(match (l.q8.get(), l.blocks()) {
                (Some(m), _) => Rows::Q8(m),
                (None, Some(t)) => Rows::Blocks(t),
                // Repacked between the two reads.
                (None, None) => Rows::Q8(l.q8.get().expect("the blocks go only once repacked")),
            }),
        }
    }

    /// The integer kernel's form of a Q8_0 weight (`None` for other dtypes), repacked at the first call; only a
    /// backend that runs that kernel asks.
    pub(crate) fn q8(&self) -> Result<Option<&q8::Q8Matrix>> {
        let (t, cache) = match &self.packed {
            Some(Packed::Q8(l)) => return l.repacked().map(Some),
            // (`host` gives a cache to Q8_0 tensors only, of shape (rows, cols).)
            Some(Packed::Host(t, Q8Cache(Some(cache)))) => (t, cache),
            _ => return Ok(None),
        };
        if let Some(m) = cache.get() {
            return Ok(Some(m));
        }
        let m = repack(t)?;
        Ok(Some(cache.get_or_init(|| m)))
    }

    /// Fails with a clear error unless the tensor is f32 (ops other than `linear` and `embeddings` take f32 only).
    pub(crate) fn expect_f32(&self, what: &str) -> Result<()> {
        match self.dtype() {
            Dtype::F32 => Ok(()),
            d => Err(Error::Input(format!(
                "{what} is a {} weight; this op reads f32 tensors only (only linear weights and embedding tables may be \
                 stored quantized)",
                d.name()
            ))),
        }
    }

    /// Row `r` as f32 into `out` (`cols` values), decoding a packed weight's row.
    pub(crate) fn row_into(&self, r: usize, out: &mut [f32]) {
        match self.row_view() {
            None => out.copy_from_slice(&self.data()[r * self.cols..(r + 1) * self.cols]),
            Some(v) => v.rows_into(r, out),
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The values, row-major, of an f32 tensor (empty for a packed weight: ops check [`CpuTensor::dtype`] first).
    pub fn data(&self) -> &[f32] {
        self.data.as_slice()
    }

    /// A copy of the values, row-major, as f32 (a packed weight is dequantized): the synchronous twin of
    /// [`Backend::read`].
    pub fn to_vec(&self) -> Vec<f32> {
        match self.row_view() {
            None => self.data().to_vec(),
            Some(v) => {
                let mut out = vec![0f32; self.rows * self.cols];
                if self.cols > 0 {
                    for (r, row) in out.chunks_exact_mut(self.cols).enumerate() {
                        v.rows_into(r, row);
                    }
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Activation, Backend};
    use crate::backend::cpu::CpuBackend;
    use crate::weights::quant;

    /// A Q8_0 linear weight for the integer kernel (as wasm keeps them) reads as its blocks do before and after its
    /// first `linear`, which repacks it and releases the blocks: the same values decoded, the same products through
    /// the dequantizing GEMM, and the kernel's own form.
    #[test]
    fn repacked_q8_reads_as_its_blocks() {
        // N = 6: a ragged last group of 4 columns; K = 96: three blocks.
        let (n, k) = (6, 96);
        let values: Vec<f32> = (0..n * k).map(|i| ((i * 53) % 97) as f32 / 40.0 - 1.2).collect();
        let q = Arc::new(quant::quantize(&HostTensor::f32(vec![n, k], values).unwrap(), Dtype::Q8_0).unwrap());
        let blocks = CpuTensor::shared(&q, n, k).unwrap();
        let lazy = CpuTensor::repacked(&q, n, k).unwrap();
        let Some(Packed::Q8(l)) = &lazy.packed else { panic!("not an integer-kernel weight") };
        let x: Vec<f32> = (0..5 * k).map(|i| ((i * 29) % 31) as f32 / 10.0 - 1.5).collect();
        let (cpu, x) = (CpuBackend::new(), CpuTensor::new(x, 5, k).unwrap());
        let bias = cpu.upload(&HostTensor::f32(vec![n], (0..n).map(|i| i as f32).collect()).unwrap()).unwrap();
        // (Natively `linear` dequantizes: the integer kernel runs in wasm.)
        let y = |w: &CpuTensor| cpu.linear(&x, w, Some(&bias), Activation::Gelu).unwrap().to_vec();
        let row = |w: &CpuTensor| {
            let mut r = vec![0f32; k];
            w.row_into(3, &mut r);
            r
        };
        for repacked in [false, true] {
            assert_eq!(l.q8.get().is_some(), repacked);
            assert_eq!(l.blocks().is_some(), !repacked, "the blocks are released once repacked");
            assert_eq!(lazy.dtype(), Dtype::Q8_0);
            let form = 8 * (k / 32) * if cfg!(all(target_arch = "wasm32", feature = "relaxed-simd")) { 40 } else { 36 };
            assert_eq!(lazy.bytes(), if repacked { form } else { blocks.bytes() });
            assert_eq!(lazy.to_vec(), q.to_f32().unwrap());
            assert_eq!(row(&lazy), row(&blocks));
            assert_eq!(y(&lazy), y(&blocks));
            assert_eq!(lazy, CpuTensor::repacked(&q, n, k).unwrap());
            let HostData::Q8_0(bytes) = &q.data else { unreachable!() };
            assert_eq!(lazy.q8().unwrap(), Some(&q8::Q8Matrix::from_q8_0(bytes, n, k).unwrap()));
        }
        assert_eq!(Arc::strong_count(&q), 2, "`q` and `blocks` hold the blocks; the repacked weight no longer does");
        // A tensor of another dtype is kept as `shared` keeps it.
        let f16 = Arc::new(quant::to_f16(&HostTensor::f32(vec![n, k], vec![0.5; n * k]).unwrap()).unwrap());
        assert_eq!(CpuTensor::repacked(&f16, n, k).unwrap(), CpuTensor::shared(&f16, n, k).unwrap());
    }
}
