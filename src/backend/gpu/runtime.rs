//! Running kernels: the pipeline cache (shader modules composed and compiled once, bind-group layouts built from
//! each dispatch's bindings), recording a pass, allocating from the buffer pool, submitting, and the futures that
//! wait for a read-back.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::buffers::{self, Kind, PoolBuf};
use super::tensor::expect_activation;
use super::{params, Dtype, GpuBackend, GpuTensor};
use crate::{Error, Result};

pub(super) struct Pipeline {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

/// Pipeline cache key: (shader, entry point, override constants as (name, f64 bits)).
pub(super) type PipelineKey = (&'static str, &'static str, Vec<(&'static str, u64)>);

/// The cache key of `shader::entry` with `consts`.
pub(super) fn pipeline_key(shader: &'static str, entry: &'static str, consts: &[(&'static str, f64)]) -> PipelineKey {
    (shader, entry, consts.iter().map(|(k, v)| (*k, v.to_bits())).collect())
}

/// The commands recorded since the last submit. Dispatches share one compute pass (wgpu orders them, with the
/// barriers their buffers need, as it would separate passes), open until the encoder is wanted for something else
/// (the submit, a copy, a profiled pass): a pass per dispatch cost the host a pass's bookkeeping each time, and in a
/// browser a call to the GPU process (BENCHMARKS.md, "Subgroup sums and one compute pass for many dispatches").
pub(super) struct Recording {
    // Declared first so that it drops (ends) before the encoder.
    pass: Option<wgpu::ComputePass<'static>>,
    encoder: wgpu::CommandEncoder,
}

/// A storage binding of one dispatch: (binding index, buffer, written by the kernel).
pub(super) type Binding<'a> = (u32, &'a wgpu::Buffer, bool);

/// The params of the passes recorded since the last submit, each at an aligned offset of a shared uniform buffer,
/// written with one `write_buffer` per buffer when they are submitted: a `write_buffer` per pass made a staging buffer
/// per pass (a training step records over a thousand).
#[derive(Default)]
pub(super) struct Uniforms {
    /// Each buffer and the bytes it will hold.
    arenas: Vec<(PoolBuf, Vec<u8>)>,
}

/// Bytes per uniform buffer of [`Uniforms`]: 64 passes at a 256-byte alignment.
const UNIFORM_ARENA_BYTES: usize = 16 << 10;

impl GpuBackend {
    /// The shader modules compiled so far ([`params::modules`]' names), sorted: which kernels a run used, for tests
    /// and bug reports.
    pub fn compiled_modules(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self.modules.borrow().keys().copied().collect();
        names.sort_unstable();
        names
    }

    fn pipeline(&self, shader: &'static str, entry: &'static str, consts: &[(&'static str, f64)],
        bindings: &[Binding<'_>]) -> Result<Rc<Pipeline>> {
        let key = pipeline_key(shader, entry, consts);
        if let Some(p) = self.pipelines.borrow().get(&key) {
            return Ok(p.clone());
        }
        self.module(shader)?;
        let writable: Vec<(u32, bool)> = bindings.iter().map(|&(b, _, w)| (b, w)).collect();
        let p = build_pipeline(&self.gpu.device, &self.modules.borrow()[shader], entry, consts, &writable);
        self.gpu.check_errors()?;
        let p = Rc::new(p);
        self.pipelines.borrow_mut().insert(key, p.clone());
        Ok(p)
    }

    /// Compiles `shader`'s module unless it is compiled already.
    pub(super) fn module(&self, shader: &'static str) -> Result<()> {
        if self.modules.borrow().contains_key(shader) {
            return Ok(());
        }
        let src = params::source(shader).map_err(Error::Gpu)?;
        let m = self.gpu.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(shader),
            source: wgpu::ShaderSource::Wgsl(src.text.as_str().into()),
        });
        // Compiler errors cite lines of the composed text: name the file and line under shaders/ instead.
        self.gpu.check_errors().map_err(|e| src.annotate_error(e, shader))?;
        self.modules.borrow_mut().insert(shader, m);
        Ok(())
    }

    /// Records one compute pass: `shader::entry` with `params` at binding 0 and `bindings`, over `groups`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dispatch(&self, shader: &'static str, entry: &'static str, consts: &[(&'static str, f64)], params: &[u8],
        bindings: &[Binding<'_>], groups: (u32, u32, u32)) -> Result<()> {
        let max = self.gpu.limits.max_compute_workgroups_per_dimension;
        if groups.0 > max || groups.1 > max || groups.2 > max {
            return Err(Error::Gpu(format!(
                "{entry}: grid {groups:?} exceeds the adapter's {max} workgroups per dimension; use a smaller batch"
            )));
        }
        if self.note_pipeline(shader, entry, consts, bindings) {
            return Ok(()); // only noting which pipelines a recording needs (prebuild.rs)
        }
        let pipe = self.pipeline(shader, entry, consts, bindings)?;
        let device = &self.gpu.device;
        let (uniform, offset) = self.uniform_slot(params);
        let uniform = wgpu::BufferBinding { buffer: &uniform, offset, size: std::num::NonZeroU64::new(params.len() as u64) };
        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::Buffer(uniform) }];
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
        let rec = pending.get_or_insert_with(|| Recording {
            pass: None,
            encoder: device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") }),
        });
        let mut prof = self.profiler.borrow_mut();
        let timestamps = prof.as_mut().and_then(|p| p.pass_writes(device, entry));
        // A profiled dispatch gets a timed pass of its own (ending the shared one), closed right after it.
        let timed = timestamps.is_some();
        if timed {
            rec.pass = None;
            let desc = wgpu::ComputePassDescriptor { label: Some(entry), timestamp_writes: timestamps };
            rec.pass = Some(rec.encoder.begin_compute_pass(&desc).forget_lifetime());
        }
        let pass = rec.pass.get_or_insert_with(|| {
            let desc = wgpu::ComputePassDescriptor { label: Some("kernels"), timestamp_writes: None };
            rec.encoder.begin_compute_pass(&desc).forget_lifetime()
        });
        pass.set_pipeline(&pipe.pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
        if timed {
            rec.pass = None;
        }
        drop((prof, pending));
        self.recorded.set(self.recorded.get() + 1);
        let every = self.submit_every.get();
        if every > 0 && self.recorded.get() >= every {
            self.submit(|_| {});
        }
        Ok(())
    }

    /// A place for one pass's `params` in this submission's uniform buffers: (buffer, offset).
    fn uniform_slot(&self, params: &[u8]) -> (wgpu::Buffer, u64) {
        let align = self.gpu.limits.min_uniform_buffer_offset_alignment.max(4) as usize;
        let mut u = self.uniforms.borrow_mut();
        let fits = u.arenas.last().is_some_and(|(_, b)| b.len().next_multiple_of(align) + params.len() <= UNIFORM_ARENA_BYTES);
        if !fits {
            let size = UNIFORM_ARENA_BYTES.max(params.len());
            let buf = buffers::take(&self.pool, &self.gpu.device, Kind::Uniform, size as u64, true);
            u.arenas.push((buf, Vec::with_capacity(size)));
        }
        let (buf, bytes) = u.arenas.last_mut().expect("an arena was just made");
        let offset = bytes.len().next_multiple_of(align);
        bytes.resize(offset, 0);
        bytes.extend_from_slice(params);
        (buf.buffer().clone(), offset as u64)
    }

    /// A fresh f32 output tensor from the pool.
    pub(super) fn alloc(&self, rows: usize, cols: usize) -> Result<GpuTensor> {
        self.alloc_as(rows, cols, false)
    }

    /// A fresh output tensor from the pool, f16 (`f16`: pairs of values a word, 2 bytes a value) or f32.
    pub(super) fn alloc_as(&self, rows: usize, cols: usize, f16: bool) -> Result<GpuTensor> {
        let bytes = self.check_size(rows * cols * if f16 { 2 } else { 4 }, "activation")?;
        let buf = buffers::take(&self.pool, &self.gpu.device, Kind::Storage, bytes, false);
        Ok(GpuTensor { buf: Rc::new(buf), rows, cols, dtype: if f16 { Dtype::F16 } else { Dtype::F32 } })
    }

    /// A pooled buffer filled from the host (32-bit words).
    pub(super) fn host_buffer(&self, data: &[u8]) -> Result<PoolBuf> {
        let bytes = self.check_size(data.len(), "input")?;
        let buf = buffers::take(&self.pool, &self.gpu.device, Kind::Storage, bytes, true);
        if !data.is_empty() {
            self.gpu.queue.write_buffer(buf.buffer(), 0, data);
        }
        Ok(buf)
    }

    pub(super) fn check_size(&self, bytes: usize, what: &str) -> Result<u64> {
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
    pub(super) fn grid(&self, n: usize) -> (u32, u32, u32) {
        let max = self.gpu.limits.max_compute_workgroups_per_dimension as usize;
        let x = n.clamp(1, max);
        (x as u32, n.div_ceil(x).max(1) as u32, 1)
    }

    /// Submits the pending work (if any) plus `extra` commands; returns after queuing, not after completion.
    pub(super) fn submit(&self, extra: impl FnOnce(&mut wgpu::CommandEncoder)) {
        let device = &self.gpu.device;
        let mut encoder = match self.pending.borrow_mut().take() {
            Some(Recording { pass, encoder }) => {
                drop(pass); // ends the open pass: the encoder takes commands again
                encoder
            }
            None => device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") }),
        };
        extra(&mut encoder);
        if self.refuse_next.take() {
            encoder.copy_buffer_to_buffer(&self.dummy, 0, &self.dummy, 0, 4);
        }
        self.recorded.set(0);
        // The passes' params, one write per uniform buffer, land before the submission's commands run.
        let arenas = std::mem::take(&mut self.uniforms.borrow_mut().arenas);
        for (buf, bytes) in &arenas {
            self.gpu.queue.write_buffer(buf.buffer(), 0, bytes);
        }
        self.gpu.queue.submit(Some(encoder.finish()));
        buffers::after_submit(&self.pool);
        drop(arenas); // back to the pool, free for the next submission's host writes
    }

    /// Waits until `bufs` are mapped for reading: polls natively; in a browser the event loop resolves it.
    pub(super) async fn map_read(&self, bufs: &[(&wgpu::Buffer, u64)]) -> Result<()> {
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
        let staging = buffers::take(&self.pool, &self.gpu.device, Kind::Staging, 16, false);
        self.submit(|_| {});
        if let Err(e) = self.map_read(&[(staging.buffer(), 16)]).await.and_then(|()| self.gpu.check_errors()) {
            return Err(self.read_failed(vec![staging], e));
        }
        staging.buffer().unmap();
        Ok(())
    }

    /// After a failed submission or map: the error wgpu reported (the cause) rather than the failed map (its
    /// consequence), and the staging copies destroyed rather than pooled ([`PoolBuf::discard`]), so that the next
    /// call starts clean: the model stays usable after a GPU error.
    pub(super) fn read_failed(&self, staging: Vec<PoolBuf>, e: Error) -> Error {
        for s in staging {
            s.discard();
        }
        self.gpu.check_errors().err().unwrap_or(e)
    }

    /// [`Backend::read_many`](super::Backend::read_many): submits everything recorded, with a copy of each tensor,
    /// and maps the copies after one wait.
    pub(super) async fn read_back(&self, ts: &[&GpuTensor]) -> Result<Vec<Vec<f32>>> {
        expect_activation("read", ts)?;
        self.read_backs.set(self.read_backs.get() + 1);
        let sizes: Vec<u64> = ts.iter().map(|t| buffers::round_size((t.len() * t.value_bytes()) as u64)).collect();
        let staging: Vec<_> =
            sizes.iter().map(|&size| buffers::take(&self.pool, &self.gpu.device, Kind::Staging, size, false)).collect();
        // Timestamps of the passes recorded since the last read are resolved in the same submission.
        let mut prof = self.profiler.borrow_mut().take();
        let ts_stamps = prof.as_mut().and_then(|p| p.take_stamps(&self.gpu.device));
        self.submit(|enc| {
            for ((t, s), &size) in ts.iter().zip(&staging).zip(&sizes) {
                enc.copy_buffer_to_buffer(t.buffer(), 0, s.buffer(), 0, size);
            }
            if let (Some(p), Some(stamps)) = (prof.as_ref(), ts_stamps.as_ref()) {
                p.resolve(enc, stamps);
            }
        });
        let mut maps: Vec<_> = staging.iter().zip(&sizes).map(|(s, &size)| (s.buffer(), size)).collect();
        if let Some(stamps) = ts_stamps.as_ref() {
            maps.push(stamps.read_buffer());
        }
        let mapped = self.map_read(&maps).await;
        if let (Some(p), Some(stamps)) = (prof.as_mut(), ts_stamps.as_ref()) {
            if mapped.is_ok() {
                p.add(stamps, self.gpu.queue.get_timestamp_period() as f64);
            }
        }
        *self.profiler.borrow_mut() = prof;
        if let Err(e) = mapped.and_then(|()| self.gpu.check_errors()) {
            return Err(self.read_failed(staging, e));
        }
        // Every copy is unmapped before its buffer goes back to the pool, even after an error.
        let mut out = Vec::with_capacity(ts.len());
        let mut failed = None;
        for ((t, s), &size) in ts.iter().zip(&staging).zip(&sizes) {
            match s.buffer().slice(..size).get_mapped_range() {
                // An f16 tensor (an activation of the f16 mode) is widened here, on the host.
                Ok(view) if t.dtype == Dtype::F16 => out.push(
                    bytemuck::cast_slice::<u8, half::f16>(&view)[..t.len()].iter().map(|h| h.to_f32()).collect(),
                ),
                Ok(view) => out.push(bytemuck::cast_slice::<u8, f32>(&view)[..t.len()].to_vec()),
                Err(e) => failed = failed.or(Some(Error::Gpu(format!("mapping the read-back buffer failed: {e}")))),
            }
            s.buffer().unmap();
        }
        failed.map_or(Ok(out), Err)
    }
}

/// A compute pipeline of `module`'s `entry` with `consts`, its bind group's layout made from the dispatch's bindings:
/// a uniform at 0, then each `(binding, written)` storage buffer. Errors go to the device's log
/// ([`super::Gpu::check_errors`]). A free function, so that several threads may build pipelines at once
/// ([`GpuBackend::build_pipelines`]).
pub(super) fn build_pipeline(device: &wgpu::Device, module: &wgpu::ShaderModule, entry: &'static str,
    consts: &[(&'static str, f64)], bindings: &[(u32, bool)]) -> Pipeline {
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
    for &(binding, writable) in bindings {
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
    Pipeline { pipeline, layout }
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
