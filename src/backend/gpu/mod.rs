//! The GPU backend: `wgpu` + the WGSL kernels in `shaders/`.
//!
//! Ops are recorded, not run: each op appends its dispatches to a compute pass of a pending command encoder,
//! submitted every [`DEFAULT_SUBMIT_EVERY`] dispatches (so the GPU starts while the host records the rest) and by [`Backend::read`],
//! which then maps one staging buffer. The passes' params share uniform buffers written once at each submit. The
//! device comes from [`Gpu`] (acquired separately, async); pipelines are cached by (shader, entry point, override
//! constants); weights are uploaded once; activation buffers come from a pool (see `buffers.rs`), so a repeated
//! forward allocates nothing.
//!
//! Weight matrices stay on the device in the dtype of their file (f32, f16, Q8_0, Q4_0 as raw bytes in an
//! `array<u32>` buffer, see `shaders/lib/quant.wgsl`): `linear` dispatches the matmul variant of the weight's
//! dtype, which decodes in registers, and `embeddings` decodes the table elements it reads. So a Q8_0 model takes about
//! 0.28× the f32 bytes of device memory ([`GpuBackend::weight_bytes`]) and the matmuls read 0.27× the weight bytes.
//!
//! The files, as in `cpu/`: this one holds [`GpuBackend`] and the [`Backend`] impl, which hands each op to the file
//! of its family (`matmul.rs`, `attention.rs`, `norm.rs`, `pool.rs`, `train.rs`; a backward kernel's host side goes
//! beside its forward). Under them: `runtime.rs` (pipelines, dispatch, allocation, submit and read-back),
//! `tensor.rs` ([`GpuTensor`], uploads), `buffers.rs` (the pool), `placed.rs` (weights the stream wrote to the
//! device), `profiler.rs`, `tuning.rs` (the kernels' knobs), `context.rs` (getting a device), `params.rs` and
//! `wgsl.rs` (the shaders' uniforms and sources), `prebuild.rs` (pipelines compiled ahead of the first forward).
//! Above them all, [`calibration`] times the knobs' variants on the adapter at hand and keeps the fastest.

mod attention;
mod buffers;
mod context;
mod matmul;
mod norm;
pub mod params;
mod placed;
mod pool;
mod prebuild;
mod profiler;
mod rotary;
mod runtime;
mod tensor;
mod train;
pub mod calibration;
mod tuning;
pub mod wgsl;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

pub use context::Gpu;
pub use prebuild::PipelineSpec;
pub use tensor::GpuTensor;
pub use calibration::{matmul_candidates, row_candidates, Calibration, Progress, Workload, CALIBRATION_STAGES};
pub use tuning::{split_subgroup_fits, AttentionKernel, MatmulKernel, MatmulVariant, Tuning, SMALL_ROWS};

use buffers::Pool;
use profiler::Profiler;
use runtime::{Pipeline, PipelineKey};
use tensor::expect_f32;

use super::{Activation, AdamWStep, AttentionShape, Backend, Dropout, Dtype, EmbeddingTables};
use crate::tokenizer::Batch;
use crate::weights::HostTensor;
use crate::{Error, Result};

/// [`GpuBackend::set_submit_every`]'s default. On an H100 (BENCHMARKS.md, "A real GPU"), submitting every 16–64
/// passes took a bert-base fine-tuning step from 176–225 ms to 147 and a forward at (b) from 17.1 to 15.4–16.3 ms;
/// one submission per read left the GPU idle while the host recorded.
pub const DEFAULT_SUBMIT_EVERY: usize = 32;

/// The GPU backend on one device: see the module documentation.
pub struct GpuBackend {
    gpu: Gpu,
    /// Set at construction and by [`GpuBackend::set_tuning`] (the adapter's calibration, calibration.rs).
    tuning: std::cell::Cell<Tuning>,
    /// [`GpuBackend::inject_fault`]: the linear kernels return wrong values (tests of the load-time canary): every
    /// matmul kernel (`Some(None)`), or one ([`GpuBackend::inject_fault_in`]).
    fault: std::cell::Cell<Option<Option<MatmulKernel>>>,
    /// [`GpuBackend::inject_refused_submission`]: the next submission carries a command the device refuses.
    refuse_next: std::cell::Cell<bool>,
    /// [`GpuBackend::set_f16_activations`].
    f16_activations: std::cell::Cell<bool>,
    modules: RefCell<HashMap<&'static str, wgpu::ShaderModule>>,
    pipelines: RefCell<HashMap<PipelineKey, Rc<Pipeline>>>,
    /// The pipelines noted while [`GpuBackend::pipelines_of`] runs (prebuild.rs); `None` otherwise.
    noting: RefCell<Option<Vec<PipelineSpec>>>,
    pool: Pool,
    pending: RefCell<Option<runtime::Recording>>,
    /// Passes recorded into `pending`, and how many make a submission of their own ([`GpuBackend::set_submit_every`]).
    recorded: std::cell::Cell<usize>,
    submit_every: std::cell::Cell<usize>,
    /// The recorded passes' params, written at the submit.
    uniforms: RefCell<runtime::Uniforms>,
    profiler: RefCell<Option<Profiler>>,
    /// Bound where a kernel declares an input it does not read in this variant (e.g. no bias).
    dummy: wgpu::Buffer,
    /// Bytes of the weight buffers alive now (uploads minus dropped), see [`GpuBackend::weight_bytes`].
    weight_bytes: Rc<std::cell::Cell<u64>>,
    /// Times the host has waited for the GPU to read results back, see [`GpuBackend::read_backs`].
    read_backs: std::cell::Cell<u64>,
    /// Bytes of weights written since the queue last submitted ([`tensor::UPLOAD_FLUSH`]).
    unsubmitted: std::cell::Cell<u64>,
    /// Placed weights in use as tensors ([`GpuBackend::adopt`]).
    adopted: placed::Adopted,
}

impl GpuBackend {
    /// A backend on `gpu` with the default tuning.
    pub fn new(gpu: Gpu) -> Result<GpuBackend> {
        GpuBackend::with_tuning(gpu, Tuning::default())
    }

    /// A backend with explicit tuning knobs (benchmarks), clamped to what the adapter allows.
    pub fn with_tuning(gpu: Gpu, tuning: Tuning) -> Result<GpuBackend> {
        let l = &gpu.limits;
        let t = tuning.clamped(l, gpu.features);
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
            tuning: std::cell::Cell::new(t),
            fault: std::cell::Cell::new(None),
            refuse_next: std::cell::Cell::new(false),
            f16_activations: std::cell::Cell::new(false),
            modules: RefCell::new(HashMap::new()),
            pipelines: RefCell::new(HashMap::new()),
            noting: RefCell::new(None),
            pool: Rc::new(RefCell::new(buffers::PoolState::default())),
            pending: RefCell::new(None),
            recorded: std::cell::Cell::new(0),
            submit_every: std::cell::Cell::new(DEFAULT_SUBMIT_EVERY),
            uniforms: RefCell::new(runtime::Uniforms::default()),
            profiler: RefCell::new(None),
            dummy,
            weight_bytes: Rc::new(std::cell::Cell::new(0)),
            read_backs: std::cell::Cell::new(0),
            unsubmitted: std::cell::Cell::new(0),
            adopted: Default::default(),
        })
    }

    /// [`Gpu::new_blocking`] + [`GpuBackend::new`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking() -> Result<GpuBackend> {
        GpuBackend::new(Gpu::new_blocking()?)
    }

    /// Submits the recorded work every `n` passes (0: only when results are read; default
    /// [`DEFAULT_SUBMIT_EVERY`]), so that the GPU runs the first passes of a long recording (a training step's
    /// thousand) while the host records the rest. Results are the same either way: submissions run in order.
    pub fn set_submit_every(&self, n: usize) {
        self.submit_every.set(n);
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
        self.tuning.get()
    }

    /// The module of row kernel `name` the tuning runs ([`params::row_module`]).
    pub(super) fn row_shader(&self, name: &'static str) -> &'static str {
        params::row_module(name, self.tuning.get().row_subgroups)
    }

    /// Makes every linear recorded from now on add 0.01 to its outputs (`on`), as a miscompiled kernel would
    /// return wrong values: for the tests of the canary that compares the GPU with the CPU at load. Not for use.
    #[doc(hidden)]
    pub fn inject_fault(&self, on: bool) {
        self.fault.set(on.then_some(None));
    }

    /// [`Self::inject_fault`] in the linears that run matmul kernel `kernel` only, as a driver that miscompiles one
    /// kernel would: for the tests of a tuning that fails the check. Not for use.
    #[doc(hidden)]
    pub fn inject_fault_in(&self, kernel: MatmulKernel) {
        self.fault.set(Some(Some(kernel)));
    }

    /// Makes the next submission carry a command the device refuses (a copy of a buffer onto itself), so that the
    /// call fails with a real validation error from wgpu: for the tests that such an error reaches the caller as one
    /// line and that the model answers the next call. Not for use.
    #[doc(hidden)]
    pub fn inject_refused_submission(&self) {
        self.refuse_next.set(true);
    }

    /// Whether a linear that runs `kernel` is to return wrong values ([`Self::inject_fault`]).
    pub(super) fn faulty(&self, kernel: MatmulKernel) -> bool {
        self.fault.get().is_some_and(|k| k.is_none_or(|k| k == kernel))
    }

    /// The f16-activation mode, for every forward recorded from now on: the embeddings, the linear layers, attention
    /// and LayerNorm write their outputs as f16 (two values a word; an output with an odd number of columns stays
    /// f32) and read them so, with f32 arithmetic inside every kernel and the weights as they are. That halves the
    /// activations' memory and the bytes the kernels move for them; the accuracy it costs, against PyTorch, is in
    /// BENCHMARKS.md ("f16 activations"). Ops with no f16 kernel widen their input first; results are read back as
    /// f32. Inference only: training refuses a backend in this mode ([`GpuBackend::expect_f32_activations`]).
    pub fn set_f16_activations(&self, on: bool) {
        self.f16_activations.set(on);
    }

    /// Whether [`GpuBackend::set_f16_activations`] is on.
    pub fn f16_activations(&self) -> bool {
        self.f16_activations.get()
    }

    /// Fails, naming `what`, in the f16-activation mode: training's gradients are checked against PyTorch in f32.
    pub fn expect_f32_activations(&self, what: &str) -> Result<()> {
        if self.f16_activations.get() {
            return Err(Error::Input(format!(
                "{what} needs f32 activations: this model was loaded with f16 activations (`activations: \"f16\"`), \
                 which is for inference only; load it again without that option to train"
            )));
        }
        Ok(())
    }

    /// Switches the kernels to `tuning` (clamped to the adapter's limits) for every dispatch recorded from now on;
    /// pipelines already built for other knobs stay cached. Returns the tuning in effect.
    pub fn set_tuning(&self, tuning: Tuning) -> Tuning {
        let t = self.clamp(tuning);
        self.tuning.set(t);
        t
    }

    /// `tuning` as [`Self::set_tuning`] clamps it to this adapter.
    pub fn clamp(&self, tuning: Tuning) -> Tuning {
        tuning.clamped(&self.gpu.limits, self.gpu.features)
    }

    /// Device bytes held by the weights uploaded and still alive: a weight takes its stored size (a Q8_0 matrix 34
    /// bytes per 32 values), padded to 16 bytes plus the spare word the packed kernels may read past the end.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes.get()
    }

    /// How many times the host has waited for the GPU to copy results back ([`Backend::read`] and
    /// [`Backend::read_many`] are one wait each): what a training step's "no read-back but the loss" is checked by.
    pub fn read_backs(&self) -> u64 {
        self.read_backs.get()
    }

    /// Buffers the pool has created so far, and their total bytes (a repeated forward must not raise them).
    pub fn pool_stats(&self) -> (usize, u64) {
        let p = self.pool.borrow();
        (p.created, p.created_bytes)
    }

    /// GPU buffers destroyed so far: evicted from the pool, or weights dropped (after the submit of any commands
    /// recorded with them).
    pub fn buffers_destroyed(&self) -> usize {
        self.pool.borrow().destroyed
    }

    /// The pool's bytes held now (in use and free), the most its tensors have used at once, and the buffers it has
    /// dropped to stay within [`buffers::pool_slack`] of that.
    pub fn pool_memory(&self) -> (u64, u64, usize) {
        let p = self.pool.borrow();
        (p.held, p.peak_in_use, p.evicted)
    }
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
        self.upload_weight(t)
    }

    fn upload_rows(&self, parts: &[&HostTensor]) -> Result<GpuTensor> {
        match self.upload_rows_placed(parts)? {
            Some(t) => Ok(t),
            None => self.upload_weight(&HostTensor::concat_rows(parts)?),
        }
    }

    fn input(&self, data: &[f32], rows: usize, cols: usize) -> Result<GpuTensor> {
        self.upload_input(data, rows, cols)
    }

    fn dims(&self, t: &GpuTensor) -> (usize, usize) {
        (t.rows, t.cols)
    }

    fn dtype(&self, t: &GpuTensor) -> Dtype {
        t.dtype
    }

    fn embeddings(&self, batch: &Batch, tables: &EmbeddingTables<'_, GpuTensor>) -> Result<GpuTensor> {
        self.record_embeddings(batch, tables, true)
    }

    fn linear(&self, x: &GpuTensor, w: &GpuTensor, bias: Option<&GpuTensor>, act: Activation) -> Result<GpuTensor> {
        self.record_linear(x, w, bias, act)
    }

    fn layernorm(&self, x: &GpuTensor, residual: Option<&GpuTensor>, gamma: &GpuTensor, beta: &GpuTensor, eps: f32)
        -> Result<GpuTensor> {
        self.record_layernorm(x, residual, gamma, beta, eps)
    }

    fn mask(&self, batch: &Batch) -> Result<GpuTensor> {
        self.attention_mask(batch)
    }

    fn attention_biased(&self, qkv: &GpuTensor, mask: &GpuTensor, bias: Option<&GpuTensor>, s: AttentionShape)
        -> Result<GpuTensor> {
        self.record_attention(qkv, mask, bias.map_or(super::ScoreBias::None, super::ScoreBias::Relative), s, None)
    }

    fn attention_disentangled(&self, qkv: &GpuTensor, mask: &GpuTensor, pos: &GpuTensor, rows: &GpuTensor,
        s: AttentionShape) -> Result<GpuTensor> {
        self.record_attention(qkv, mask, super::ScoreBias::Disentangled { pos, rows }, s, None)
    }

    fn rotary(&self, qkv: &GpuTensor, rope: &GpuTensor, shape: AttentionShape) -> Result<GpuTensor> {
        self.record_rotary(qkv, rope, shape)
    }

    fn glu(&self, x: &GpuTensor, act: Activation) -> Result<GpuTensor> {
        self.record_glu(x, act)
    }

    fn glu_backward(&self, dy: &GpuTensor, x: &GpuTensor, act: Activation) -> Result<GpuTensor> {
        let (dy, x) = (self.f32_of("glu_backward", dy)?, self.f32_of("glu_backward", x)?);
        self.record_glu_backward(&dy, &x, act)
    }

    fn pool_tokens(&self, x: &GpuTensor, mask: &GpuTensor, batch: usize, seq: usize, mode: super::TokenPool)
        -> Result<GpuTensor> {
        self.record_pool(x, mask, batch, seq, mode)
    }

    fn gather_rows(&self, x: &GpuTensor, rows: &[u32]) -> Result<GpuTensor> {
        self.record_gather_rows(x, rows)
    }

    fn reshape(&self, x: &GpuTensor, rows: usize, cols: usize) -> Result<GpuTensor> {
        tensor::expect_activation("reshape", &[x])?;
        if rows * cols != x.rows * x.cols {
            return Err(Error::Input(format!("reshape: ({}, {}) has {} values, not ({rows}, {cols})", x.rows, x.cols, x.rows * x.cols)));
        }
        Ok(GpuTensor { buf: x.buf.clone(), rows, cols, dtype: x.dtype })
    }

    fn matmul_weight(&self, dy: &GpuTensor, w: &GpuTensor) -> Result<GpuTensor> {
        self.record_matmul_weight(dy, w)
    }

    fn matmul(&self, a: &GpuTensor, trans_a: bool, b: &GpuTensor, trans_b: bool) -> Result<GpuTensor> {
        let (a, b) = (self.f32_of("matmul", a)?, self.f32_of("matmul", b)?);
        self.train_matmul(&a, trans_a, &b, trans_b)
    }

    fn softmax_xent_grad(&self, logits: &GpuTensor, labels: &[u32]) -> Result<GpuTensor> {
        self.train_xent_grad(&self.f32_of("softmax_xent_grad", logits)?, labels)
    }

    fn activation_grad(&self, dy: &GpuTensor, pre: &GpuTensor, act: Activation) -> Result<GpuTensor> {
        let (dy, pre) = (self.f32_of("activation_grad", dy)?, self.f32_of("activation_grad", pre)?);
        self.train_act_grad(&dy, &pre, act)
    }

    fn adamw(&self, param: &GpuTensor, grad: &GpuTensor, m: &GpuTensor, v: &GpuTensor, step: &AdamWStep,
        norm_sq: Option<&GpuTensor>) -> Result<(GpuTensor, GpuTensor, GpuTensor)> {
        expect_f32("adamw", &[param, grad, m, v])?;
        if let Some(q) = norm_sq {
            expect_f32("adamw", &[q])?;
        }
        self.train_adamw(param, grad, m, v, step, norm_sq)
    }

    fn add(&self, a: &GpuTensor, b: &GpuTensor) -> Result<GpuTensor> {
        let (a, b) = (self.f32_of("add", a)?, self.f32_of("add", b)?);
        self.record_add(&a, &b)
    }

    fn activation(&self, x: &GpuTensor, act: Activation) -> Result<GpuTensor> {
        self.record_activation(&self.f32_of("activation", x)?, act)
    }

    fn sum_rows(&self, x: &GpuTensor) -> Result<GpuTensor> {
        self.record_sum_rows(&self.f32_of("sum_rows", x)?)
    }

    fn sum_squares(&self, x: &GpuTensor) -> Result<GpuTensor> {
        self.record_sum_squares(&self.f32_of("sum_squares", x)?)
    }

    fn sum_squares_all(&self, xs: &[&GpuTensor]) -> Result<GpuTensor> {
        expect_f32("sum_squares_all", xs)?;
        self.record_sum_squares_all(xs)
    }

    fn scatter_rows(&self, x: &GpuTensor, rows: &[u32], total: usize) -> Result<GpuTensor> {
        self.record_scatter_rows(&self.f32_of("scatter_rows", x)?, rows, total)
    }

    fn embeddings_sum(&self, batch: &Batch, tables: &EmbeddingTables<'_, GpuTensor>) -> Result<GpuTensor> {
        self.record_embeddings(batch, tables, false)
    }

    fn embeddings_backward(&self, d: &GpuTensor, batch: &Batch, vocab: usize, positions: usize, types: usize,
        pad: Option<u32>) -> Result<(GpuTensor, GpuTensor, GpuTensor)> {
        self.record_embeddings_backward(d, batch, vocab, positions, types, pad)
    }

    fn layernorm_backward(&self, dy: &GpuTensor, x: &GpuTensor, gamma: &GpuTensor, eps: f32)
        -> Result<(GpuTensor, GpuTensor, GpuTensor)> {
        self.record_layernorm_backward(dy, x, gamma, eps)
    }

    fn attention_backward_biased(&self, dctx: &GpuTensor, qkv: &GpuTensor, mask: &GpuTensor, bias: Option<&GpuTensor>,
        shape: AttentionShape, dropout: Option<Dropout>, want_dbias: bool) -> Result<(GpuTensor, Option<GpuTensor>)> {
        self.record_attention_backward(dctx, qkv, mask, bias, shape, dropout, want_dbias)
    }

    fn dropout(&self, x: &GpuTensor, d: Dropout) -> Result<GpuTensor> {
        self.record_dropout(&self.f32_of("dropout", x)?, d)
    }

    fn attention_dropout_biased(&self, qkv: &GpuTensor, mask: &GpuTensor, bias: Option<&GpuTensor>, shape: AttentionShape,
        d: Dropout) -> Result<GpuTensor> {
        self.record_attention(qkv, mask, bias.map_or(super::ScoreBias::None, super::ScoreBias::Relative), shape, Some(d))
    }

    fn attention_dropout_disentangled(&self, qkv: &GpuTensor, mask: &GpuTensor, pos: &GpuTensor, rows: &GpuTensor,
        shape: AttentionShape, d: Dropout) -> Result<GpuTensor> {
        self.record_attention(qkv, mask, super::ScoreBias::Disentangled { pos, rows }, shape, Some(d))
    }

    fn attention_backward_disentangled(&self, dctx: &GpuTensor, qkv: &GpuTensor, mask: &GpuTensor, pos: &GpuTensor,
        rows: &GpuTensor, shape: AttentionShape, dropout: Option<Dropout>) -> Result<(GpuTensor, GpuTensor)> {
        self.record_attention_backward_disentangled(dctx, qkv, mask, pos, rows, shape, dropout)
    }

    /// A quantized weight (Q8_0, Q4_0) is read as its dequantized values.
    async fn read(&self, t: &GpuTensor) -> Result<Vec<f32>> {
        let decoded = self.decoded_for_read(t)?;
        Ok(self.read_back(&[decoded.as_ref().unwrap_or(t)]).await?.remove(0))
    }

    async fn read_many(&self, ts: &[&GpuTensor]) -> Result<Vec<Vec<f32>>> {
        let decoded = ts.iter().map(|t| self.decoded_for_read(t)).collect::<Result<Vec<_>>>()?;
        let ts: Vec<&GpuTensor> = ts.iter().zip(&decoded).map(|(t, d)| d.as_ref().unwrap_or(t)).collect();
        self.read_back(&ts).await
    }
}

