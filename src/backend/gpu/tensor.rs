//! [`GpuTensor`], and getting host data onto the device: weights packed as their file stores them, f32 inputs.

use std::borrow::Cow;
use std::rc::Rc;

use super::buffers::{self, PoolBuf};
use super::params::GatherParams;
use super::{shape_err, Dtype, GpuBackend};
use crate::weights::quant::QK;
use crate::weights::{HostData, HostTensor};
use crate::{Error, Result};

/// Weight bytes written between two submissions of the queue at a load ([`GpuBackend::flush_uploads`]): small beside
/// a model (all-MiniLM-L6-v2 is 87 MiB in f32), large beside a submission's cost.
pub(super) const UPLOAD_FLUSH: u64 = 16 << 20;

/// A row-major matrix in a device buffer: an activation in f32, or in f16 (pairs of values a word, value 2j in the
/// low half of word j) in the f16-activation mode ([`GpuBackend::set_f16_activations`]); or a weight in its stored
/// dtype. Cloning shares the buffer.
#[derive(Clone)]
pub struct GpuTensor {
    pub(super) buf: Rc<PoolBuf>,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) dtype: Dtype,
}

impl GpuTensor {
    pub(super) fn buffer(&self) -> &wgpu::Buffer {
        self.buf.buffer()
    }
    pub(super) fn len(&self) -> usize {
        self.rows * self.cols
    }
    /// Bytes a value of an activation takes: 2 in f16, else 4.
    pub(super) fn value_bytes(&self) -> usize {
        if self.dtype == Dtype::F16 { 2 } else { 4 }
    }
    /// How the elements are stored.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
}

impl std::fmt::Debug for GpuTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuTensor({}, {}, {})", self.rows, self.cols, self.dtype.name())
    }
}

/// Fails with a clear error unless every tensor is f32 (only `linear` and `embeddings` read packed weights).
pub(super) fn expect_f32(op: &str, ts: &[&GpuTensor]) -> Result<()> {
    expect_stored(op, ts, &[Dtype::F32])
}

/// [`expect_f32`] for the ops that read the f16 mode's activations as they are: f32 or f16.
pub(super) fn expect_activation(op: &str, ts: &[&GpuTensor]) -> Result<()> {
    expect_stored(op, ts, &[Dtype::F32, Dtype::F16])
}

fn expect_stored(op: &str, ts: &[&GpuTensor], dtypes: &[Dtype]) -> Result<()> {
    match ts.iter().find(|t| !dtypes.contains(&t.dtype)) {
        None => Ok(()),
        Some(t) => Err(Error::Input(format!(
            "{op}: got a {} weight; this op reads f32 tensors only (only linear weights and embedding tables may be \
             stored quantized)",
            t.dtype.name()
        ))),
    }
}

/// A weight's bytes as the device keeps them: f32 and f16 little-endian, Q8_0/Q4_0 blocks as stored; checked
/// against `(rows, cols)` (quantized rows must be whole blocks). 1-D tensors are widened to f32 by the caller.
/// Borrowed where the stored form is the device's (every dtype on a little-endian host): the upload copies the
/// bytes once, into the queue, with no copy of the whole tensor in host memory beside the weights.
fn weight_bytes(t: &HostTensor, rows: usize, cols: usize) -> Result<(Dtype, Cow<'_, [u8]>)> {
    let n = rows * cols;
    let bad = |what: &str, got: usize, want: usize| {
        Error::Weights(format!("{what} tensor of shape {:?} holds {got} bytes, expected {want}", t.shape))
    };
    let blocks = |kind: Dtype, b: &[u8]| -> Result<()> {
        if cols % QK != 0 {
            return Err(Error::Weights(format!(
                "{} weight of shape {:?}: rows of {cols} values are not whole blocks of {QK}; re-convert the model \
                 keeping this tensor in f16 (`bertgpu convert` does)",
                kind.ggml_name(),
                t.shape
            )));
        }
        let want = n / QK * kind.block().1;
        if b.len() != want {
            return Err(bad(kind.ggml_name(), b.len(), want));
        }
        Ok(())
    };
    Ok(match &t.data {
        HostData::F32(v) => {
            if v.len() != n { return Err(bad("f32", v.len() * 4, n * 4)); }
            (Dtype::F32, Cow::Borrowed(bytemuck::cast_slice(v)))
        }
        HostData::F16(v) => {
            if v.len() != n { return Err(bad("f16", v.len() * 2, n * 2)); }
            let bytes = if cfg!(target_endian = "little") {
                Cow::Borrowed(bytemuck::cast_slice(v))
            } else {
                Cow::Owned(v.iter().flat_map(|h| h.to_le_bytes()).collect())
            };
            (Dtype::F16, bytes)
        }
        HostData::Q8_0(b) => {
            blocks(Dtype::Q8_0, b)?;
            (Dtype::Q8_0, Cow::Borrowed(&b[..]))
        }
        HostData::Q4_0(b) => {
            blocks(Dtype::Q4_0, b)?;
            (Dtype::Q4_0, Cow::Borrowed(&b[..]))
        }
        HostData::Placed(_) => return Err(crate::weights::placed_error("copying a weight to the GPU")),
    })
}

impl GpuBackend {
    /// `t` as f32: itself, or, for an f16 tensor (an activation of the f16 mode), a widened copy; fails with
    /// [`expect_f32`]'s error for a quantized one. How an op with no f16 kernel reads the f16 mode's activations.
    pub(super) fn f32_of(&self, op: &str, t: &GpuTensor) -> Result<GpuTensor> {
        if t.dtype != Dtype::F16 {
            expect_f32(op, &[t])?;
            return Ok(t.clone());
        }
        let out = self.alloc(t.rows, t.cols)?;
        let n = t.len();
        let p = GatherParams { out_rows: n as u32, cols: 1, _pad0: 0, _pad1: 0 };
        let wg = self.tuning.get().elem_wg;
        self.dispatch("gather", "widen", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, &self.dummy, false),
            (2, t.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid(n.div_ceil(wg as usize)))?;
        Ok(out)
    }

    /// Whether an op that can write f16 writes its (rows × `cols`) output in f16, reading `input` (its activation
    /// input): where the input is f16 and rows are whole words (an even `cols`), so each word has one writer.
    pub(super) fn writes_f16(input: &GpuTensor, cols: usize) -> bool {
        input.dtype == Dtype::F16 && cols % 2 == 0
    }

    /// [`Backend::upload`](super::Backend::upload): a weight in its own device buffer, outside the pool.
    pub(super) fn upload_weight(&self, t: &HostTensor) -> Result<GpuTensor> {
        let (rows, cols) = match t.shape.as_slice() {
            [] => return Err(Error::Weights("a 0-dimensional tensor cannot be a weight".into())),
            [n] => (1, *n),
            [lead @ .., last] => (lead.iter().product(), *last),
        };
        if let HostData::Placed(p) = &t.data {
            return self.adopt(p, rows, cols);
        }
        // Matrices keep their stored bytes (the kernels decode them); 1-D tensors (biases, LayerNorm γ/β: 0.1% of
        // the bytes, read by additions in several kernels) are widened to f32.
        let widened;
        let (dtype, bytes) = if t.shape.len() == 1 {
            widened = t.to_f32()?;
            (Dtype::F32, Cow::Borrowed(bytemuck::cast_slice::<f32, u8>(&widened)))
        } else {
            weight_bytes(t, rows, cols)?
        };
        let buf = self.weight_buffer(dtype, bytes.len(), &format!("weight of shape {:?}", t.shape))?;
        // Written from the bytes as they are, not from a padded copy mapped at creation (which, in the browser,
        // held the tensor twice more in wasm memory): whole words at once, then the last partial word; the padding
        // is zero, as every new buffer is.
        let whole = bytes.len() / 4 * 4;
        if whole > 0 {
            self.gpu.queue.write_buffer(&buf, 0, &bytes[..whole]);
        }
        if whole < bytes.len() {
            let mut tail = [0u8; 4];
            tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
            self.gpu.queue.write_buffer(&buf, whole as u64, &tail);
        }
        self.flush_uploads(bytes.len() as u64);
        Ok(GpuTensor { buf: Rc::new(PoolBuf::weight(buf, self.weight_bytes.clone(), &self.pool)), rows, cols, dtype })
    }

    /// A zeroed device buffer for a weight of `bytes` bytes stored as `dtype` (`what`, for the error if the device
    /// cannot hold it). The packed kernels read whole words and may read one word past a block that ends mid-word:
    /// it is padded to 16 bytes with a spare word.
    pub(super) fn weight_buffer(&self, dtype: Dtype, bytes: usize, what: &str) -> Result<wgpu::Buffer> {
        let size = buffers::round_size(bytes as u64 + 4 * (dtype != Dtype::F32) as u64);
        self.check_size(size as usize, what)?;
        Ok(self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("weight"),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }))
    }

    /// Natively, wgpu keeps each `write_buffer`'s staging copy until the queue's next submission, and a load submits
    /// nothing before its first forward: every weight would be staged at once beside its buffer. An empty submission
    /// after each [`UPLOAD_FLUSH`] bytes frees them as the load goes (never while passes wait in a recording: they
    /// go with their own submission). In the browser the GPU process stages the writes itself, and the same
    /// submissions measured no gain there (BENCHMARKS.md, issue 29's item 4), so it does not submit.
    pub(super) fn flush_uploads(&self, written: u64) {
        if cfg!(target_arch = "wasm32") {
            return;
        }
        let total = self.unsubmitted.get() + written;
        if total < UPLOAD_FLUSH || self.pending.borrow().is_some() {
            self.unsubmitted.set(total);
            return;
        }
        self.gpu.queue.submit(None);
        self.unsubmitted.set(0);
    }

    /// An activation as the f16 mode stores it ([`GpuBackend::set_f16_activations`]), from f32 values rounded to
    /// the nearest f16: for tests and benchmarks of the f16 kernels. `cols` must be even (rows of whole words).
    pub fn input_f16(&self, data: &[f32], rows: usize, cols: usize) -> Result<GpuTensor> {
        if data.len() != rows * cols || cols % 2 != 0 {
            return Err(shape_err("input_f16", format!("{} values for a ({rows}, {cols}) matrix of f16 pairs", data.len())));
        }
        let halves: Vec<half::f16> = data.iter().map(|&v| half::f16::from_f32(v)).collect();
        let buf = self.host_buffer(bytemuck::cast_slice(&halves))?;
        Ok(GpuTensor { buf: Rc::new(buf), rows, cols, dtype: Dtype::F16 })
    }

    /// [`Backend::input`](super::Backend::input): an f32 matrix from the host in a pooled buffer.
    pub(super) fn upload_input(&self, data: &[f32], rows: usize, cols: usize) -> Result<GpuTensor> {
        if data.len() != rows * cols {
            return Err(shape_err("input", format!("{} values for a ({rows}, {cols}) matrix", data.len())));
        }
        let buf = self.host_buffer(bytemuck::cast_slice(data))?;
        Ok(GpuTensor { buf: Rc::new(buf), rows, cols, dtype: Dtype::F32 })
    }
}
