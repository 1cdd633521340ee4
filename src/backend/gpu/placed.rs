//! Weights written into GPU memory as their file arrives ([`crate::weights::stream::DeviceSink`]): the host never
//! holds them. What the host keeps of each is a [`Placed`] (its buffer, dtype, length and a hash of its bytes); the
//! model takes the buffer as is ([`GpuBackend::adopt`]), and so the fused q/k/v weight, whose three parts arrive into
//! one buffer ([`GpuBackend::upload_rows_placed`]), and whatever must run on the CPU (the load-time check's reference, a
//! fallback to the CPU) reads the bytes back and checks them against the hash ([`GpuBackend::host_copy`]).

use std::any::Any;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use super::buffers::{self, Kind, PoolBuf};
use super::tensor::GpuTensor;
use super::{Dtype, GpuBackend};
use crate::weights::stream::DeviceSink;
use crate::weights::{word_hash, HostData, HostTensor, Placed, WORD_HASH_SEED};
use crate::{Error, Result};

/// A weight's device buffer, as a [`Placed`] holds it.
pub(super) struct DeviceBuffer {
    buf: wgpu::Buffer,
    /// Whose buffer it is: only a backend on the same device may use it.
    device: wgpu::Device,
}

// In the browser wgpu's handles are JS objects, which wgpu marks neither `Send` nor `Sync`. A `Placed` weight is only
// ever used on the thread that made it: the GPU backend is single-threaded, and the CPU backend, which alone spreads
// work over threads, refuses placed weights (it reads them back first, on this thread). Natively they are both.
#[cfg(target_arch = "wasm32")]
unsafe impl Send for DeviceBuffer {}
#[cfg(target_arch = "wasm32")]
unsafe impl Sync for DeviceBuffer {}

impl DeviceSink for GpuBackend {
    fn create(&self, dtype: Dtype, shape: &[usize], bytes: usize) -> Result<Arc<dyn Any + Send + Sync>> {
        let buf = self.weight_buffer(dtype, bytes, &format!("weight of shape {shape:?}"))?;
        Ok(Arc::new(DeviceBuffer { buf, device: self.gpu.device.clone() }))
    }

    fn write(&self, handle: &(dyn Any + Send + Sync), offset: usize, data: &[u8]) -> Result<()> {
        let d = self.own(handle)?;
        self.gpu.queue.write_buffer(&d.buf, offset as u64, data);
        self.flush_uploads(data.len() as u64);
        Ok(())
    }
}

impl GpuBackend {
    /// `handle` as one of this device's buffers.
    fn own<'a>(&self, handle: &'a (dyn Any + Send + Sync)) -> Result<&'a DeviceBuffer> {
        match handle.downcast_ref::<DeviceBuffer>() {
            Some(d) if d.device == self.gpu.device => Ok(d),
            _ => Err(Error::Gpu("a weight placed in another GPU's memory cannot be used on this one".into())),
        }
    }

    /// [`Backend::upload`](crate::backend::Backend::upload) of a placed weight: its buffer as it is, shared by every
    /// tensor made of it (the MLM decoder tied to the word embeddings), so that it is counted, and freed, once.
    /// A weight that shares its buffer from another offset (the key or value of a joined q/k/v) is copied out.
    pub(super) fn adopt(&self, p: &Placed, rows: usize, cols: usize) -> Result<GpuTensor> {
        if p.offset != 0 {
            return self.copied(&[(p, rows)], cols);
        }
        let d = self.own(&*p.handle)?;
        let mut adopted = self.adopted.borrow_mut();
        adopted.retain(|(h, b)| h.strong_count() > 0 && b.strong_count() > 0);
        let key = Arc::downgrade(&p.handle);
        let found = adopted.iter().find(|(h, _)| h.ptr_eq(&key)).and_then(|(_, b)| b.upgrade());
        let buf = match found {
            Some(b) => b,
            None => {
                let b = Rc::new(PoolBuf::adopted(d.buf.clone(), p.handle.clone(), self.weight_bytes.clone(), &self.pool));
                adopted.push((key, Rc::downgrade(&b)));
                b
            }
        };
        Ok(GpuTensor { buf, rows, cols, dtype: p.dtype })
    }

    /// The rows of `parts` stacked into one weight on the device, when any of them is placed (they must all be, in
    /// one dtype and of whole words; the stream places no file's weights otherwise). Parts that arrived into one
    /// buffer in this order (a layer's q, k and v: [`Placed::offset`]) are that buffer, as it is; others are copied.
    pub(super) fn upload_rows_placed(&self, parts: &[&HostTensor]) -> Result<Option<GpuTensor>> {
        if !parts.iter().any(|p| matches!(p.data, HostData::Placed(_))) {
            return Ok(None);
        }
        let mut placed = Vec::with_capacity(parts.len());
        let cols = parts[0].rows_cols().1;
        for t in parts {
            let (r, c) = t.rows_cols();
            match &t.data {
                HostData::Placed(p) if c == cols && p.bytes % 4 == 0 && p.dtype == parts[0].data.dtype() => {
                    placed.push((p, r));
                }
                _ => {
                    return Err(Error::Weights(format!(
                        "cannot join weights of shapes {:?} and {:?} on the GPU (dtypes {} and {})",
                        parts[0].shape,
                        t.shape,
                        parts[0].data.dtype(),
                        t.data.dtype()
                    )))
                }
            }
        }
        let first = placed[0].0;
        let mut at = 0;
        let together = placed.iter().all(|(p, _)| {
            let next = Arc::ptr_eq(&p.handle, &first.handle) && p.offset == at;
            at += p.bytes;
            next
        });
        let rows = placed.iter().map(|(_, r)| r).sum();
        if together {
            return self.adopt(first, rows, cols).map(Some);
        }
        self.copied(&placed, cols).map(Some)
    }

    /// The rows of placed weights (each with its row count), stacked into a new buffer of their own by copies on the
    /// device.
    fn copied(&self, parts: &[(&Placed, usize)], cols: usize) -> Result<GpuTensor> {
        let dtype = parts[0].0.dtype;
        let rows = parts.iter().map(|(_, r)| r).sum();
        let total: usize = parts.iter().map(|(p, _)| p.bytes.div_ceil(4) * 4).sum();
        let from = parts.iter().map(|(p, _)| Ok((self.own(&*p.handle)?, p))).collect::<Result<Vec<_>>>()?;
        let buf = self.weight_buffer(dtype, total, &format!("weight of {rows} × {cols}"))?;
        self.submit(|enc| {
            let mut at = 0;
            for (d, p) in &from {
                let n = p.bytes.div_ceil(4) as u64 * 4;
                enc.copy_buffer_to_buffer(&d.buf, p.offset as u64, &buf, at, n);
                at += n;
            }
        });
        let buf = Rc::new(PoolBuf::weight(buf, self.weight_bytes.clone(), &self.pool));
        Ok(GpuTensor { buf, rows, cols, dtype })
    }

    /// `t` on the host: itself, or, when it is placed, its bytes read back from the device, checked against the hash
    /// taken as they arrived (an error if the device does not give back what was written).
    pub async fn host_copy(&self, t: &HostTensor) -> Result<HostTensor> {
        let HostData::Placed(p) = &t.data else { return Ok(t.clone()) };
        let mut bytes = Vec::with_capacity(p.bytes);
        self.read_placed(p, |_, chunk| bytes.extend_from_slice(chunk)).await?;
        Ok(HostTensor { shape: t.shape.clone(), data: host_data(p.dtype, bytes) })
    }

    /// Rows `rows` of the matrix `t` (`(rows, cols)`), in that order, on the host: for a placed one, the whole
    /// tensor passes back through a small buffer, a chunk at a time, so that its hash is checked while only the rows
    /// asked for are kept (the load-time check's word embeddings: a few dozen rows of a table of tens of MiB).
    pub async fn host_rows(&self, t: &HostTensor, rows: &[usize]) -> Result<HostTensor> {
        let (n, _) = t.rows_cols();
        if let Some(&bad) = rows.iter().find(|&&r| r >= n) {
            return Err(Error::Weights(format!("row {bad} of a tensor of shape {:?}", t.shape)));
        }
        let HostData::Placed(p) = &t.data else { return t.gather_rows(rows) };
        let row = p.bytes / n.max(1);
        let mut out = vec![0u8; rows.len() * row];
        self.read_placed(p, |at, chunk| {
            for (slot, &r) in rows.iter().enumerate() {
                // The part of row `r` inside this chunk, if any.
                let (start, end) = ((r * row).max(at), ((r + 1) * row).min(at + chunk.len()));
                if start < end {
                    let into = slot * row + (start - r * row);
                    out[into..into + end - start].copy_from_slice(&chunk[start - at..end - at]);
                }
            }
        })
        .await?;
        let mut shape = t.shape.clone();
        shape[0] = rows.len();
        Ok(HostTensor { shape, data: host_data(p.dtype, out) })
    }

    /// Reads `p`'s bytes back a chunk at a time, hands each to `keep` with its offset (the tensor's bytes only, not
    /// the padding), and checks them against the hash taken as they arrived: an error if the device does not give
    /// back what was written.
    async fn read_placed(&self, p: &Placed, mut keep: impl FnMut(usize, &[u8])) -> Result<()> {
        let d = self.own(&*p.handle)?;
        let words = p.bytes.div_ceil(4) * 4;
        let chunk = READ_CHUNK.min(words.max(4));
        let staging = buffers::take(&self.pool, &self.gpu.device, Kind::Staging, chunk as u64, false);
        let mut hash = WORD_HASH_SEED;
        let mut at = 0;
        while at < words {
            let n = chunk.min(words - at);
            let from = (p.offset + at) as u64;
            self.submit(|enc| enc.copy_buffer_to_buffer(&d.buf, from, staging.buffer(), 0, n as u64));
            if let Err(e) = self.map_read(&[(staging.buffer(), n as u64)]).await {
                return Err(self.read_failed(vec![staging], e));
            }
            let read = staging.buffer().slice(..n as u64).get_mapped_range().map(|view| {
                hash = word_hash(hash, &view);
                keep(at, &view[..n.min(p.bytes - at)]);
            });
            staging.buffer().unmap();
            read.map_err(|e| Error::Gpu(format!("mapping the read-back buffer failed: {e}")))?;
            at += n;
        }
        self.gpu.check_errors()?;
        if hash != p.hash {
            return Err(Error::Gpu(
                "the GPU gave back other bytes than were written to it for a weight (a driver fault); load the model \
                 with device \"cpu\""
                    .into(),
            ));
        }
        Ok(())
    }
}

/// How much of a placed weight is read back at once ([`GpuBackend::host_rows`]): small beside the weights, large
/// enough that the round trips to the device are few (12 for all-MiniLM-L6-v2's f32 word embeddings).
const READ_CHUNK: usize = 4 << 20;

/// A weight's bytes as they are stored, as host data.
fn host_data(dtype: Dtype, bytes: Vec<u8>) -> HostData {
    match dtype {
        Dtype::F32 => HostData::F32(bytemuck::pod_collect_to_vec(&bytes)),
        Dtype::F16 => HostData::F16(bytemuck::pod_collect_to_vec(&bytes)),
        Dtype::Q8_0 => HostData::Q8_0(bytes),
        Dtype::Q4_0 => HostData::Q4_0(bytes),
    }
}

/// Adopted buffers: a placed weight's handle, and the tensor buffer made of it while any tensor holds it.
pub(super) type Adopted = std::cell::RefCell<Vec<(std::sync::Weak<dyn Any + Send + Sync>, Weak<PoolBuf>)>>;
