//! The GPU backend: `wgpu` + the WGSL kernels in `shaders/`.
//!
//! Ops are recorded, not run: each op appends one compute pass to a pending command encoder, and
//! [`Backend::read`] submits everything recorded so far at once and maps one staging buffer. The device comes from
//! [`Gpu`] (acquired separately, async); pipelines are cached by (shader, entry point, override constants); weights
//! are uploaded once; activation buffers come from a pool (see `pool.rs`), so a repeated forward allocates nothing.
//!
//! Weight matrices stay on the device in the dtype of their file (f32, f16, Q8_0, Q4_0 as raw bytes in an
//! `array<u32>` buffer, see `shaders/lib/quant.wgsl`): `linear` dispatches the matmul variant of the weight's
//! dtype, which decodes in registers, and `embeddings` decodes the table elements it reads. So a Q8_0 model takes about
//! 0.28× the f32 bytes of device memory ([`GpuBackend::weight_bytes`]) and the matmuls read 0.27× the weight bytes.

mod context;
pub mod params;
mod pool;
mod train;
pub mod wgsl;

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use wgpu::util::DeviceExt;

pub use context::Gpu;
use params::*;
use pool::{Kind, Pool, PoolBuf};

use super::{Activation, AdamWStep, AttentionShape, Backend, Dtype, EmbeddingTables};
use crate::tokenizer::Batch;
use crate::weights::quant::QK;
use crate::weights::{HostData, HostTensor};
use crate::{Error, Result};

/// A row-major matrix in a device buffer: f32 (every activation), or a weight in its stored dtype. Cloning shares
/// the buffer.
#[derive(Clone)]
pub struct GpuTensor {
    buf: Rc<PoolBuf>,
    rows: usize,
    cols: usize,
    dtype: Dtype,
}

impl GpuTensor {
    fn buffer(&self) -> &wgpu::Buffer {
        self.buf.buffer()
    }
    fn len(&self) -> usize {
        self.rows * self.cols
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
fn expect_f32(op: &str, ts: &[&GpuTensor]) -> Result<()> {
    match ts.iter().find(|t| t.dtype != Dtype::F32) {
        None => Ok(()),
        Some(t) => Err(Error::Input(format!(
            "{op}: got a {} weight; this op reads f32 tensors only (only linear weights and embedding tables may be \
             stored quantized)",
            t.dtype.name()
        ))),
    }
}

/// Tuning knobs, passed to the shaders as `override` constants (and so part of the pipeline key). The defaults are
/// the fastest measured on lavapipe (BENCHMARKS.md); [`GpuBackend::new`] clamps them to the adapter's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// matmul workgroup (x over output columns, y over rows); each invocation computes 4×8 outputs.
    pub matmul_wg: (u32, u32),
    /// attention: queries (invocations) per workgroup.
    pub attention_wg: u32,
    /// layernorm / embeddings invocations per row (power of two ≤ 256).
    pub row_wg: u32,
    /// mean_pool / gather_rows invocations per workgroup.
    pub elem_wg: u32,
    /// Always the scalar attention kernel (attention.wgsl), even where head_dim allows attention_vec4.wgsl: for
    /// tests and benchmarks of the two.
    pub scalar_attention: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning { matmul_wg: (8, 8), attention_wg: 64, row_wg: 128, elem_wg: 64, scalar_attention: false }
    }
}

/// Per-pass GPU time from timestamp queries, accumulated by label (kernel name) until taken.
struct Profiler {
    set: wgpu::QuerySet,
    capacity: u32,
    labels: Vec<&'static str>,
    totals: Vec<(&'static str, f64, usize)>,
}

struct Pipeline {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

/// Pipeline cache key: (shader, entry point, override constants as (name, f64 bits)).
type PipelineKey = (&'static str, &'static str, Vec<(&'static str, u64)>);

/// A storage binding of one dispatch: (binding index, buffer, written by the kernel).
type Binding<'a> = (u32, &'a wgpu::Buffer, bool);

pub struct GpuBackend {
    gpu: Gpu,
    tuning: Tuning,
    modules: RefCell<HashMap<&'static str, wgpu::ShaderModule>>,
    pipelines: RefCell<HashMap<PipelineKey, Rc<Pipeline>>>,
    pool: Pool,
    pending: RefCell<Option<wgpu::CommandEncoder>>,
    profiler: RefCell<Option<Profiler>>,
    /// Bound where a kernel declares an input it does not read in this variant (e.g. no bias).
    dummy: wgpu::Buffer,
    /// Bytes of the weight buffers alive now (uploads minus dropped), see [`GpuBackend::weight_bytes`].
    weight_bytes: Rc<std::cell::Cell<u64>>,
}

/// Largest head_dim the attention kernel holds per invocation (`DMAX` in shaders/lib/attention.wgsl).
const ATTENTION_MAX_HEAD_DIM: usize = 128;

fn prev_pow2(v: u32) -> u32 {
    if v == 0 { 0 } else { 1 << (31 - v.leading_zeros()) }
}

impl GpuBackend {
    /// A backend on `gpu` with the default tuning.
    pub fn new(gpu: Gpu) -> Result<GpuBackend> {
        GpuBackend::with_tuning(gpu, Tuning::default())
    }

    /// A backend with explicit tuning knobs (benchmarks), clamped to what the adapter allows.
    pub fn with_tuning(gpu: Gpu, tuning: Tuning) -> Result<GpuBackend> {
        let l = &gpu.limits;
        let max_inv = l.max_compute_invocations_per_workgroup;
        let cap = |v: u32| prev_pow2(v.min(256).min(max_inv).min(l.max_compute_workgroup_size_x)).max(1);
        let mut t = tuning;
        t.row_wg = cap(t.row_wg);
        t.elem_wg = cap(t.elem_wg);
        t.attention_wg = cap(t.attention_wg);
        let (mut wx, mut wy) = t.matmul_wg;
        wx = wx.clamp(1, l.max_compute_workgroup_size_x);
        wy = wy.clamp(1, l.max_compute_workgroup_size_y);
        while wx * wy > max_inv {
            if wy >= wx { wy = (wy / 2).max(1) } else { wx = (wx / 2).max(1) }
        }
        t.matmul_wg = (wx, wy);
        // The embeddings kernel binds the most storage buffers: 7 (ids, 3 tables, gamma, beta, output).
        if l.max_storage_buffers_per_shader_stage < 7 {
            return Err(Error::Gpu(format!(
                "adapter `{}` allows {} storage buffers per shader stage; the kernels need 7. \
                 Use the CPU backend (`--device cpu`)",
                gpu.info.name, l.max_storage_buffers_per_shader_stage
            )));
        }
        if !gpu.downlevel.contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32) {
            return Err(Error::Gpu(format!(
                "adapter `{}` cannot run `unpack2x16float`, which the kernels use to decode f16 and quantized \
                 weights. Use the CPU backend (`--device cpu`)",
                gpu.info.name
            )));
        }
        if l.max_compute_workgroup_storage_size < 256 * 4 {
            return Err(Error::Gpu(format!(
                "adapter `{}` offers {} bytes of workgroup memory; the layernorm kernels need 1024. \
                 Use the CPU backend (`--device cpu`)",
                gpu.info.name, l.max_compute_workgroup_storage_size
            )));
        }
        let dummy = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("unused binding"),
            size: 16,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        Ok(GpuBackend {
            gpu,
            tuning: t,
            modules: RefCell::new(HashMap::new()),
            pipelines: RefCell::new(HashMap::new()),
            pool: Rc::new(RefCell::new(pool::PoolState::default())),
            pending: RefCell::new(None),
            profiler: RefCell::new(None),
            dummy,
            weight_bytes: Rc::new(std::cell::Cell::new(0)),
        })
    }

    /// [`Gpu::new_blocking`] + [`GpuBackend::new`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking() -> Result<GpuBackend> {
        GpuBackend::new(Gpu::new_blocking()?)
    }

    /// How many compute pipelines have been built (each shader × entry point × override constants used so far).
    pub fn pipeline_count(&self) -> usize {
        self.pipelines.borrow().len()
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The tuning in effect (after clamping to the adapter's limits).
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Device bytes held by the weights uploaded and still alive: a weight takes its stored size (a Q8_0 matrix 34
    /// bytes per 32 values), padded to 16 bytes plus the spare word the packed kernels may read past the end.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes.get()
    }

    /// Buffers the pool has created so far, and their total bytes (a repeated forward must not raise them).
    pub fn pool_stats(&self) -> (usize, u64) {
        let p = self.pool.borrow();
        (p.created, p.created_bytes)
    }

    /// Starts timing every following pass with timestamp queries (if the adapter has them). Returns whether it did.
    pub fn enable_profiling(&self) -> bool {
        if !self.gpu.has_timestamps() {
            return false;
        }
        let capacity = 4096;
        let set = self.gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("pass timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: capacity,
        });
        *self.profiler.borrow_mut() = Some(Profiler { set, capacity, labels: Vec::new(), totals: Vec::new() });
        true
    }

    /// (kernel, total ms, passes) accumulated since profiling was enabled or last taken.
    pub fn take_profile(&self) -> Vec<(&'static str, f64, usize)> {
        match self.profiler.borrow_mut().as_mut() {
            Some(p) => std::mem::take(&mut p.totals),
            None => Vec::new(),
        }
    }

    fn pipeline(&self, shader: &'static str, entry: &'static str, consts: &[(&'static str, f64)],
        bindings: &[Binding<'_>]) -> Result<Rc<Pipeline>> {
        let key: PipelineKey = (shader, entry, consts.iter().map(|(k, v)| (*k, v.to_bits())).collect());
        if let Some(p) = self.pipelines.borrow().get(&key) {
            return Ok(p.clone());
        }
        let device = &self.gpu.device;
        let mut modules = self.modules.borrow_mut();
        if !modules.contains_key(shader) {
            let src = params::source(shader).map_err(Error::Gpu)?;
            let m = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(shader),
                source: wgpu::ShaderSource::Wgsl(src.text.as_str().into()),
            });
            // Compiler errors cite lines of the composed text: name the file and line under shaders/ instead.
            self.gpu.check_errors().map_err(|e| src.annotate_error(e, shader))?;
            modules.insert(shader, m);
        }
        let module = &modules[shader];
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }];
        for &(binding, _, writable) in bindings {
            entries.push(wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: !writable },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            });
        }
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(entry),
            entries: &entries,
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(entry),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: Some(&pl),
            module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions { constants: consts, ..Default::default() },
            cache: None,
        });
        self.gpu.check_errors()?;
        let p = Rc::new(Pipeline { pipeline, layout });
        self.pipelines.borrow_mut().insert(key, p.clone());
        Ok(p)
    }

    /// Records one compute pass: `shader::entry` with `params` at binding 0 and `bindings`, over `groups`.
    #[allow(clippy::too_many_arguments)]
    fn dispatch(&self, shader: &'static str, entry: &'static str, consts: &[(&'static str, f64)], params: &[u8],
        bindings: &[Binding<'_>], groups: (u32, u32, u32)) -> Result<()> {
        let max = self.gpu.limits.max_compute_workgroups_per_dimension;
        if groups.0 > max || groups.1 > max || groups.2 > max {
            return Err(Error::Gpu(format!(
                "{entry}: grid {groups:?} exceeds the adapter's {max} workgroups per dimension; use a smaller batch"
            )));
        }
        let pipe = self.pipeline(shader, entry, consts, bindings)?;
        let device = &self.gpu.device;
        let uniform = pool::take(&self.pool, device, Kind::Uniform, params.len() as u64, true);
        self.gpu.queue.write_buffer(uniform.buffer(), 0, params);
        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: uniform.buffer().as_entire_binding() }];
        for &(binding, buf, _) in bindings {
            entries.push(wgpu::BindGroupEntry { binding, resource: buf.as_entire_binding() });
        }
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(entry),
            layout: &pipe.layout,
            entries: &entries,
        });
        self.pool.borrow_mut().recording = true;
        let mut pending = self.pending.borrow_mut();
        let encoder = pending.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") })
        });
        let mut prof = self.profiler.borrow_mut();
        let timestamps = match prof.as_mut() {
            Some(p) if (p.labels.len() as u32 + 1) * 2 <= p.capacity => {
                let i = p.labels.len() as u32 * 2;
                p.labels.push(entry);
                Some(wgpu::ComputePassTimestampWrites {
                    query_set: &p.set,
                    beginning_of_pass_write_index: Some(i),
                    end_of_pass_write_index: Some(i + 1),
                })
            }
            _ => None,
        };
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(entry),
                timestamp_writes: timestamps,
            });
            pass.set_pipeline(&pipe.pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(groups.0, groups.1, groups.2);
        }
        Ok(())
    }

    /// A fresh output tensor from the pool.
    fn alloc(&self, rows: usize, cols: usize) -> Result<GpuTensor> {
        let bytes = self.check_size(rows * cols * 4, "activation")?;
        let buf = pool::take(&self.pool, &self.gpu.device, Kind::Storage, bytes, false);
        Ok(GpuTensor { buf: Rc::new(buf), rows, cols, dtype: Dtype::F32 })
    }

    /// A pooled buffer filled from the host (32-bit words).
    fn host_buffer(&self, data: &[u8]) -> Result<PoolBuf> {
        let bytes = self.check_size(data.len(), "input")?;
        let buf = pool::take(&self.pool, &self.gpu.device, Kind::Storage, bytes, true);
        if !data.is_empty() {
            self.gpu.queue.write_buffer(buf.buffer(), 0, data);
        }
        Ok(buf)
    }

    fn check_size(&self, bytes: usize, what: &str) -> Result<u64> {
        let l = &self.gpu.limits;
        let max = (l.max_storage_buffer_binding_size as u64).min(l.max_buffer_size);
        if bytes as u64 > max {
            return Err(Error::Gpu(format!(
                "{what} of {bytes} bytes exceeds this adapter's largest storage binding ({max} bytes, adapter `{}`); \
                 for activations use a smaller batch; for a weight, a quantized file (`bertgpu convert --dtype q8_0`); \
                 or the CPU backend (`--device cpu`)",
                self.gpu.info.name
            )));
        }
        Ok(bytes as u64)
    }

    /// A 2-D grid of at least `n` workgroups (x ≤ the per-dimension limit); shaders linearise `wid.y*nwg.x + wid.x`.
    fn grid(&self, n: usize) -> (u32, u32, u32) {
        let max = self.gpu.limits.max_compute_workgroups_per_dimension as usize;
        let x = n.clamp(1, max);
        (x as u32, n.div_ceil(x).max(1) as u32, 1)
    }

    /// Submits the pending work (if any) plus `extra` commands; returns after queuing, not after completion.
    fn submit(&self, extra: impl FnOnce(&mut wgpu::CommandEncoder)) {
        let device = &self.gpu.device;
        let mut encoder = self.pending.borrow_mut().take().unwrap_or_else(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") })
        });
        extra(&mut encoder);
        self.gpu.queue.submit(Some(encoder.finish()));
        pool::after_submit(&self.pool);
    }

    /// Waits until `bufs` are mapped for reading: polls natively; in a browser the event loop resolves it.
    async fn map_read(&self, bufs: &[(&wgpu::Buffer, u64)]) -> Result<()> {
        let futures: Vec<MapFuture> = bufs
            .iter()
            .map(|(buf, size)| {
                let state = Arc::new(Mutex::new(MapState::default()));
                let s = state.clone();
                buf.slice(..*size).map_async(wgpu::MapMode::Read, move |r| {
                    if let Ok(mut st) = s.lock() {
                        st.result = Some(r.map_err(|e| e.to_string()));
                        if let Some(w) = st.waker.take() {
                            w.wake();
                        }
                    }
                });
                MapFuture(state)
            })
            .collect();
        #[cfg(not(target_arch = "wasm32"))]
        self.gpu
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("waiting for the GPU failed: {e}")))?;
        for f in futures {
            f.await.map_err(|e| {
                self.gpu.lost_error().unwrap_or_else(|| Error::Gpu(format!("reading back a buffer failed: {e}")))
            })?;
        }
        Ok(())
    }

    /// Runs everything recorded so far (no read-back), e.g. to time a forward.
    pub async fn flush(&self) -> Result<()> {
        let staging = pool::take(&self.pool, &self.gpu.device, Kind::Staging, 16, false);
        self.submit(|_| {});
        self.map_read(&[(staging.buffer(), 16)]).await?;
        staging.buffer().unmap();
        self.gpu.check_errors()
    }
}

#[derive(Default)]
struct MapState {
    result: Option<std::result::Result<(), String>>,
    waker: Option<Waker>,
}

/// Resolves when a `map_async` callback has fired.
struct MapFuture(Arc<Mutex<MapState>>);

impl Future for MapFuture {
    type Output = std::result::Result<(), String>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut st = match self.0.lock() {
            Ok(st) => st,
            Err(_) => return Poll::Ready(Err("map state poisoned".into())),
        };
        match st.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                st.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A weight's bytes as the device keeps them: f32 and f16 little-endian, Q8_0/Q4_0 blocks as stored; checked
/// against `(rows, cols)` (quantized rows must be whole blocks). 1-D tensors are widened to f32 by the caller.
fn weight_bytes(t: &HostTensor, rows: usize, cols: usize) -> Result<(Dtype, Vec<u8>)> {
    let n = rows * cols;
    let bad = |what: &str, got: usize, want: usize| {
        Error::Weights(format!("{what} tensor of shape {:?} holds {got} bytes, expected {want}", t.shape))
    };
    let blocks = |kind: Dtype, b: &Vec<u8>| -> Result<Vec<u8>> {
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
        Ok(b.clone())
    };
    Ok(match &t.data {
        HostData::F32(v) => {
            if v.len() != n { return Err(bad("f32", v.len() * 4, n * 4)); }
            (Dtype::F32, bytemuck::cast_slice(v).to_vec())
        }
        HostData::F16(v) => {
            if v.len() != n { return Err(bad("f16", v.len() * 2, n * 2)); }
            (Dtype::F16, v.iter().flat_map(|h| h.to_le_bytes()).collect())
        }
        HostData::Q8_0(b) => (Dtype::Q8_0, blocks(Dtype::Q8_0, b)?),
        HostData::Q4_0(b) => (Dtype::Q4_0, blocks(Dtype::Q4_0, b)?),
    })
}

fn shape_err(op: &str, msg: String) -> Error {
    Error::Input(format!("{op}: {msg}"))
}

impl Backend for GpuBackend {
    type Tensor = GpuTensor;

    fn name(&self) -> &'static str {
        "gpu"
    }

    fn max_tensor_bytes(&self) -> usize {
        let l = &self.gpu.limits;
        (l.max_storage_buffer_binding_size as u64).min(l.max_buffer_size).try_into().unwrap_or(usize::MAX)
    }

    fn upload(&self, t: &HostTensor) -> Result<GpuTensor> {
        let (rows, cols) = match t.shape.as_slice() {
            [] => return Err(Error::Weights("a 0-dimensional tensor cannot be a weight".into())),
            [n] => (1, *n),
            [lead @ .., last] => (lead.iter().product(), *last),
        };
        // Matrices keep their stored bytes (the kernels decode them); 1-D tensors (biases, LayerNorm γ/β: 0.1% of
        // the bytes, read by additions in several kernels) are widened to f32.
        let (dtype, mut bytes) = if t.shape.len() == 1 {
            (Dtype::F32, bytemuck::cast_slice(&t.to_f32()?).to_vec())
        } else {
            weight_bytes(t, rows, cols)?
        };
        // The packed kernels read whole words and may read one word past a block that ends mid-word: pad to 16
        // bytes with a spare word.
        let padded = pool::round_size(bytes.len() as u64 + 4 * (dtype != Dtype::F32) as u64);
        self.check_size(padded as usize, &format!("weight of shape {:?}", t.shape))?;
        bytes.resize(padded as usize, 0);
        let buf = self.gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("weight"),
            contents: &bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        });
        Ok(GpuTensor { buf: Rc::new(PoolBuf::weight(buf, self.weight_bytes.clone())), rows, cols, dtype })
    }

    fn input(&self, data: &[f32], rows: usize, cols: usize) -> Result<GpuTensor> {
        if data.len() != rows * cols {
            return Err(shape_err("input", format!("{} values for a ({rows}, {cols}) matrix", data.len())));
        }
        let buf = self.host_buffer(bytemuck::cast_slice(data))?;
        Ok(GpuTensor { buf: Rc::new(buf), rows, cols, dtype: Dtype::F32 })
    }

    fn dims(&self, t: &GpuTensor) -> (usize, usize) {
        (t.rows, t.cols)
    }

    fn dtype(&self, t: &GpuTensor) -> Dtype {
        t.dtype
    }

    fn embeddings(&self, batch: &Batch, tables: &EmbeddingTables<'_, GpuTensor>) -> Result<GpuTensor> {
        let n = batch.b * batch.t;
        if n == 0 || batch.input_ids.len() != n || batch.token_type_ids.len() != n {
            return Err(shape_err("embeddings", format!(
                "batch of {}×{} needs {n} input ids and token type ids, got {} and {}",
                batch.b, batch.t, batch.input_ids.len(), batch.token_type_ids.len()
            )));
        }
        let (vocab, h) = (tables.word.rows, tables.word.cols);
        let check = |name: &str, t: &GpuTensor, rows: Option<usize>| {
            if t.cols != h || rows.is_some_and(|r| t.rows != r) {
                return Err(shape_err("embeddings", format!("{name} is ({}, {}), hidden size is {h}", t.rows, t.cols)));
            }
            Ok(())
        };
        check("position table", tables.position, None)?;
        check("token type table", tables.token_type, None)?;
        check("LayerNorm gamma", tables.ln_gamma, Some(1))?;
        check("LayerNorm beta", tables.ln_beta, Some(1))?;
        expect_f32("embeddings LayerNorm", &[tables.ln_gamma, tables.ln_beta])?;
        for (name, t) in [("word", tables.word), ("position", tables.position), ("token type", tables.token_type)] {
            if matches!(t.dtype, Dtype::Q8_0 | Dtype::Q4_0) && h % QK != 0 {
                return Err(shape_err("embeddings", format!("{name} table is {} with rows of {h}, not whole blocks", t.dtype.name())));
            }
        }
        if batch.t > tables.position.rows {
            return Err(Error::Input(format!(
                "sequence of {} tokens is longer than the model's {} positions; truncate the input",
                batch.t, tables.position.rows
            )));
        }
        if let Some(&id) = batch.input_ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(Error::Input(format!("token id {id} is outside the vocabulary of {vocab}: wrong tokenizer?")));
        }
        if let Some(&id) = batch.token_type_ids.iter().find(|&&i| i as usize >= tables.token_type.rows) {
            return Err(Error::Input(format!(
                "token type id {id} is outside the model's {} token types", tables.token_type.rows
            )));
        }
        let mut ids = Vec::with_capacity(2 * n); // (2, B*T): token ids, then token type ids
        ids.extend_from_slice(&batch.input_ids);
        ids.extend_from_slice(&batch.token_type_ids);
        let ids = self.host_buffer(bytemuck::cast_slice(&ids))?;
        let out = self.alloc(n, h)?;
        let p = EmbeddingsParams { rows: n as u32, seq: batch.t as u32, hidden: h as u32, eps: tables.eps };
        let consts = [
            ("WG", self.tuning.row_wg as f64),
            ("WORD_DT", tables.word.dtype.shader_code() as f64),
            ("POS_DT", tables.position.dtype.shader_code() as f64),
            ("TYPE_DT", tables.token_type.dtype.shader_code() as f64),
        ];
        self.dispatch("embeddings", "embeddings", &consts, bytemuck::bytes_of(&p), &[
            (1, ids.buffer(), false),
            (2, tables.word.buffer(), false),
            (3, tables.position.buffer(), false),
            (4, tables.token_type.buffer(), false),
            (5, tables.ln_gamma.buffer(), false),
            (6, tables.ln_beta.buffer(), false),
            (7, out.buffer(), true),
        ], self.grid(n))?;
        Ok(out)
    }

    fn linear(&self, x: &GpuTensor, w: &GpuTensor, bias: Option<&GpuTensor>, act: Activation) -> Result<GpuTensor> {
        let (m, k) = (x.rows, x.cols);
        let n = w.rows;
        expect_f32("linear (input, bias)", &[x])?;
        if let Some(b) = bias {
            expect_f32("linear bias", &[b])?;
        }
        if w.cols != k {
            return Err(shape_err("linear", format!("x is ({m}, {k}) but the weight is ({n}, {}): inner sizes differ", w.cols)));
        }
        if let Some(b) = bias {
            if b.len() != n {
                return Err(shape_err("linear", format!("bias has {} values for {n} outputs", b.len())));
            }
        }
        if m == 0 || n == 0 || k == 0 {
            return Err(shape_err("linear", format!("empty matrix: x ({m}, {k}), w ({n}, {k})")));
        }
        let out = self.alloc(m, n)?;
        let act_id = act.shader_code() as f64;
        let (wx, wy) = self.tuning.matmul_wg;
        let p = MatmulParams { m: m as u32, n: n as u32, k: k as u32, _pad: 0 };
        let bias_buf = bias.map(|b| b.buffer()).unwrap_or(&self.dummy);
        // One entry point per weight layout; outputs per invocation: 4 rows × 8 columns (vec4, packed), 4 × 4
        // (scalar). vec4 loads of x need K % 4 == 0 (every BERT); otherwise the scalar entry point views x as f32
        // and the weight as words (f32 or f16). Quantized rows are whole blocks of 32, so K % 32 == 0 there.
        let (shader, entry, xb, wb, cols) = match w.dtype {
            Dtype::Q8_0 | Dtype::Q4_0 if k % QK != 0 => {
                return Err(shape_err("linear", format!(
                    "a {} weight needs K to be a multiple of {QK}, got {k}", w.dtype.name()
                )));
            }
            Dtype::F32 if k % 4 == 0 => ("matmul", "matmul_vec4", 1, 2, 8),
            Dtype::F16 | Dtype::Q8_0 | Dtype::Q4_0 if k % 4 == 0 => ("matmul_packed", "matmul_packed", 1, 6, 8),
            _ => ("matmul_packed", "matmul_scalar", 5, 6, 4),
        };
        let mut consts = vec![
            ("WG_X", wx as f64),
            ("WG_Y", wy as f64),
            ("ACT", act_id),
            ("HAS_BIAS", if bias.is_some() { 1.0 } else { 0.0 }),
        ];
        if shader == "matmul_packed" {
            // matmul.wgsl reads only f32 weights: it declares no WDT (and a pipeline may not set what is not there).
            consts.push(("WDT", w.dtype.shader_code() as f64));
        }
        let groups = (n.div_ceil(cols * wx as usize) as u32, m.div_ceil(4 * wy as usize) as u32, 1);
        self.dispatch(shader, entry, &consts, bytemuck::bytes_of(&p), &[
            (xb, x.buffer(), false),
            (wb, w.buffer(), false),
            (3, bias_buf, false),
            (4, out.buffer(), true),
        ], groups)?;
        Ok(out)
    }

    fn layernorm(&self, x: &GpuTensor, residual: Option<&GpuTensor>, gamma: &GpuTensor, beta: &GpuTensor, eps: f32)
        -> Result<GpuTensor> {
        let (m, n) = (x.rows, x.cols);
        expect_f32("layernorm", &[x, gamma, beta])?;
        if let Some(r) = residual {
            expect_f32("layernorm residual", &[r])?;
            if (r.rows, r.cols) != (m, n) {
                return Err(shape_err("layernorm", format!("residual is ({}, {}), x is ({m}, {n})", r.rows, r.cols)));
            }
        }
        if gamma.len() != n || beta.len() != n {
            return Err(shape_err("layernorm", format!("gamma/beta have {}/{} values for rows of {n}", gamma.len(), beta.len())));
        }
        let out = self.alloc(m, n)?;
        let p = LayerNormParams { rows: m as u32, cols: n as u32, eps, _pad: 0 };
        let consts = [("WG", self.tuning.row_wg as f64), ("HAS_RES", if residual.is_some() { 1.0 } else { 0.0 })];
        let res = residual.map(|r| r.buffer()).unwrap_or(&self.dummy);
        self.dispatch("layernorm", "layernorm", &consts, bytemuck::bytes_of(&p), &[
            (1, x.buffer(), false),
            (2, res, false),
            (3, gamma.buffer(), false),
            (4, beta.buffer(), false),
            (5, out.buffer(), true),
        ], self.grid(m))?;
        Ok(out)
    }

    fn mask(&self, batch: &Batch) -> Result<GpuTensor> {
        if batch.attention_mask.len() != batch.b * batch.t {
            return Err(shape_err("mask", format!(
                "batch of {}×{} has {} mask values", batch.b, batch.t, batch.attention_mask.len()
            )));
        }
        let m: Vec<f32> = batch.attention_mask.iter().map(|&v| if v != 0 { 1.0 } else { 0.0 }).collect();
        self.input(&m, batch.b, batch.t)
    }

    fn attention(&self, qkv: &GpuTensor, mask: &GpuTensor, s: AttentionShape) -> Result<GpuTensor> {
        let h = s.heads * s.head_dim;
        expect_f32("attention", &[qkv, mask])?;
        if (qkv.rows, qkv.cols) != (s.batch * s.seq, 3 * h) {
            return Err(shape_err("attention", format!(
                "qkv is ({}, {}), expected ({}, {}) for {s:?}", qkv.rows, qkv.cols, s.batch * s.seq, 3 * h
            )));
        }
        if (mask.rows, mask.cols) != (s.batch, s.seq) {
            return Err(shape_err("attention", format!("mask is ({}, {}), expected ({}, {})", mask.rows, mask.cols, s.batch, s.seq)));
        }
        if s.head_dim == 0 || s.head_dim > ATTENTION_MAX_HEAD_DIM || s.seq == 0 {
            return Err(shape_err("attention", format!(
                "head_dim {} (supported: 1..={ATTENTION_MAX_HEAD_DIM}) / seq {} not supported", s.head_dim, s.seq
            )));
        }
        let out = self.alloc(s.batch * s.seq, h)?;
        let p = AttentionParams {
            batch: s.batch as u32,
            seq: s.seq as u32,
            heads: s.heads as u32,
            head_dim: s.head_dim as u32,
            hidden: h as u32,
            scale: 1.0 / (s.head_dim as f32).sqrt(),
            _pad0: 0,
            _pad1: 0,
        };
        let groups = (s.seq.div_ceil(self.tuning.attention_wg as usize) as u32, s.heads as u32, s.batch as u32);
        // The vec4 kernel when head_dim and hidden split into vec4s (every BERT); the scalar one otherwise.
        let (shader, entry) = if s.head_dim % 4 == 0 && !self.tuning.scalar_attention {
            ("attention_vec4", "attention_vec4")
        } else {
            ("attention", "attention")
        };
        self.dispatch(shader, entry, &[("WG", self.tuning.attention_wg as f64)], bytemuck::bytes_of(&p), &[
            (1, qkv.buffer(), false),
            (2, mask.buffer(), false),
            (3, out.buffer(), true),
        ], groups)?;
        Ok(out)
    }

    fn mean_pool(&self, x: &GpuTensor, mask: &GpuTensor, batch: usize, seq: usize) -> Result<GpuTensor> {
        expect_f32("mean_pool", &[x, mask])?;
        if x.rows != batch * seq || (mask.rows, mask.cols) != (batch, seq) {
            return Err(shape_err("mean_pool", format!(
                "x ({}, {}) and mask ({}, {}) do not fit batch {batch} × seq {seq}", x.rows, x.cols, mask.rows, mask.cols
            )));
        }
        let hdim = x.cols;
        let out = self.alloc(batch, hdim)?;
        let p = PoolParams { batch: batch as u32, seq: seq as u32, hidden: hdim as u32, _pad: 0 };
        let wg = self.tuning.elem_wg;
        self.dispatch("pool", "mean_pool", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, x.buffer(), false),
            (2, mask.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid((batch * hdim).div_ceil(wg as usize)))?;
        Ok(out)
    }

    fn gather_rows(&self, x: &GpuTensor, rows: &[u32]) -> Result<GpuTensor> {
        expect_f32("gather_rows", &[x])?;
        if rows.is_empty() {
            return Err(shape_err("gather_rows", "no rows asked for".into()));
        }
        if let Some(&r) = rows.iter().find(|&&r| r as usize >= x.rows) {
            return Err(shape_err("gather_rows", format!("row {r} of a matrix with {} rows", x.rows)));
        }
        let idx = self.host_buffer(bytemuck::cast_slice(rows))?;
        let out = self.alloc(rows.len(), x.cols)?;
        let p = GatherParams { out_rows: rows.len() as u32, cols: x.cols as u32, _pad0: 0, _pad1: 0 };
        let wg = self.tuning.elem_wg;
        self.dispatch("gather", "gather_rows", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, idx.buffer(), false),
            (2, x.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid((rows.len() * x.cols).div_ceil(wg as usize)))?;
        Ok(out)
    }

    fn matmul(&self, a: &GpuTensor, trans_a: bool, b: &GpuTensor, trans_b: bool) -> Result<GpuTensor> {
        expect_f32("matmul", &[a, b])?;
        self.train_matmul(a, trans_a, b, trans_b)
    }

    fn softmax_xent_grad(&self, logits: &GpuTensor, labels: &[u32]) -> Result<GpuTensor> {
        expect_f32("softmax_xent_grad", &[logits])?;
        self.train_xent_grad(logits, labels)
    }

    fn activation_grad(&self, dy: &GpuTensor, pre: &GpuTensor, act: Activation) -> Result<GpuTensor> {
        expect_f32("activation_grad", &[dy, pre])?;
        self.train_act_grad(dy, pre, act)
    }

    fn adamw(&self, param: &GpuTensor, grad: &GpuTensor, m: &GpuTensor, v: &GpuTensor, step: &AdamWStep)
        -> Result<(GpuTensor, GpuTensor, GpuTensor)> {
        expect_f32("adamw", &[param, grad, m, v])?;
        self.train_adamw(param, grad, m, v, step)
    }

    async fn read(&self, t: &GpuTensor) -> Result<Vec<f32>> {
        expect_f32("read", &[t])?;
        let bytes = (t.len() * 4) as u64;
        let size = pool::round_size(bytes);
        let staging = pool::take(&self.pool, &self.gpu.device, Kind::Staging, size, false);
        // Timestamps of the passes recorded since the last read are resolved in the same submission.
        let mut prof = self.profiler.borrow_mut().take();
        let mut ts: Option<(wgpu::Buffer, wgpu::Buffer, u64, Vec<&'static str>)> = None;
        if let Some(p) = prof.as_mut() {
            if !p.labels.is_empty() {
                let n = p.labels.len() as u64 * 2;
                let usage = wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC;
                let dev = &self.gpu.device;
                let resolve = dev.create_buffer(&wgpu::BufferDescriptor { label: Some("timestamps"), size: n * 8, usage, mapped_at_creation: false });
                let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
                let read = dev.create_buffer(&wgpu::BufferDescriptor { label: Some("timestamps"), size: n * 8, usage, mapped_at_creation: false });
                ts = Some((resolve, read, n, std::mem::take(&mut p.labels)));
            }
        }
        self.submit(|enc| {
            enc.copy_buffer_to_buffer(t.buffer(), 0, staging.buffer(), 0, size);
            if let (Some(p), Some((resolve, read, n, _))) = (prof.as_ref(), ts.as_ref()) {
                enc.resolve_query_set(&p.set, 0..*n as u32, resolve, 0);
                enc.copy_buffer_to_buffer(resolve, 0, read, 0, n * 8);
            }
        });
        let mut maps = vec![(staging.buffer(), size)];
        if let Some((_, read, n, _)) = ts.as_ref() {
            maps.push((read, n * 8));
        }
        let mapped = self.map_read(&maps).await;
        if let (Some(p), Some((_, read, n, labels))) = (prof.as_mut(), ts.as_ref()) {
            if mapped.is_ok() {
                if let Ok(view) = read.slice(..n * 8).get_mapped_range() {
                    let stamps: &[u64] = bytemuck::cast_slice(&view);
                    let period = self.gpu.queue.get_timestamp_period() as f64;
                    for (i, label) in labels.iter().enumerate() {
                        let ms = stamps[2 * i + 1].saturating_sub(stamps[2 * i]) as f64 * period / 1e6;
                        match p.totals.iter_mut().find(|e| e.0 == *label) {
                            Some(e) => { e.1 += ms; e.2 += 1; }
                            None => p.totals.push((label, ms, 1)),
                        }
                    }
                }
                read.unmap();
            }
        }
        *self.profiler.borrow_mut() = prof;
        mapped?;
        self.gpu.check_errors()?;
        let out = {
            let view = staging
                .buffer()
                .slice(..size)
                .get_mapped_range()
                .map_err(|e| Error::Gpu(format!("mapping the read-back buffer failed: {e}")))?;
            bytemuck::cast_slice::<u8, f32>(&view)[..t.len()].to_vec()
        };
        staging.buffer().unmap();
        Ok(out)
    }
}
