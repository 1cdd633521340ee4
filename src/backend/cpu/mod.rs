//! The CPU backend: the reference implementation of every op, and the fallback where there is no WebGPU.
//!
//! Activations are f32. Weight matrices stay in the dtype their file stores (f32, f16, Q8_0, Q4_0): `linear`
//! dequantizes one panel of weight rows at a time into a scratch buffer and runs the f32 GEMM on it
//! ([`matmul::linear_packed`]) — except Q8_0 in wasm, which runs an integer kernel on x quantized to 7 bits
//! ([`q8`]) and keeps linear weights in that kernel's layout only from their first use ([`CpuTensor::repacked`]) —
//! and the embedding lookup decodes only the rows it gathers, so a Q8_0 model holds about a quarter of the f32 bytes
//! in memory. 1-D weights (biases, LayerNorm γ/β) are widened to f32 at upload: they are 0.1% of the bytes and feed
//! additions directly. Tensors are immutable row-major matrices behind an
//! `Arc`, so ops never copy their inputs. Natively the heavy ops (GEMM row blocks, attention
//! per (sequence, head)) run on rayon's thread pool; in wasm32 on the calling thread, or, in the threaded build
//! (`threads` feature), on [`threads`]' pool of Web Workers.
//!
//! One file per op family: [`matmul`] (linear + activation epilogue; natively on x86-64 `dot_avx.rs` holds its
//! few-row tiles on AVX registers), [`norm`] (embeddings, LayerNorm),
//! [`attention`], [`pool`] (mask, mean pooling, row gather), [`train`] (the head-training ops).
//! Below them, shared by the kernels and importing none: `simd.rs` (the four-lane vector type), `scratch.rs`
//! (per-thread scratch that a kernel borrows and the pool frees), and [`fastmath`].

pub mod attention;
mod disentangled;
#[cfg(target_arch = "x86_64")]
mod dot_avx;
pub mod fastmath;
pub mod matmul;
pub mod norm;
pub mod pool;
pub mod q8;
pub mod rotary;
mod scratch;
mod simd;
#[cfg(all(target_arch = "wasm32", feature = "threads"))]
pub mod threads;
mod tensor;
pub mod train;
mod uniform;

pub use tensor::CpuTensor;

use std::sync::Arc;

use super::{Activation, AdamWStep, AttentionShape, Backend, Dropout, Dtype, EmbeddingTables};
use crate::tokenizer::Batch;
use crate::weights::{HostData, HostTensor};
use crate::{Error, Result};

/// Whether `linear` runs Q8_0 weights through the integer kernel ([`q8`]): in wasm, where it is the fastest path
/// (one core, 128-bit SIMD: MiniLM 8 × 128 in 336–419 ms with relaxed SIMD against 750 ms dequantizing,
/// BENCHMARKS.md). Natively the dequantizing panel GEMM is faster, AVX2/FMA f32 against the kernel's 128-bit integer
/// path (MiniLM 8 × 128, one thread, `RAYON_NUM_THREADS=1 cpu_bench` at f0544ea, when the native backend still ran
/// the kernel: the kernel 498 ms with `WEIGHTS=` a q8_0 GGUF, the f32 model 202 ms, which the dequantizing path
/// matches within ~10%), and it keeps x in f32.
const INT8_Q8_0: bool = cfg!(target_arch = "wasm32");

/// The CPU backend. Threads come from rayon's global pool (natively; in the threaded wasm build, a pool of Web
/// Workers over one shared memory).
#[derive(Clone, Debug)]
pub struct CpuBackend {
    /// Whether `linear` runs Q8_0 weights through the integer kernel, which keeps them in its own form
    /// ([`CpuTensor::repacked`]): `INT8_Q8_0` by default, never in [`CpuBackend::reference`].
    q8_kernel: bool,
}

impl Default for CpuBackend {
    fn default() -> CpuBackend {
        CpuBackend { q8_kernel: INT8_Q8_0 }
    }
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }

    /// The wasm build's CPU path on any target: Q8_0 weights through the integer kernel (natively slower than the
    /// default's dequantizing GEMM; for tests of what the browser runs).
    pub fn with_q8_kernel() -> CpuBackend {
        CpuBackend { q8_kernel: true }
    }

    /// The twin of the GPU kernels op for op, for comparing the two: as [`CpuBackend::new`], except that Q8_0
    /// weights always go through the f32-activation GEMM (what the GPU's `matmul_packed` computes), never the
    /// integer kernel with 7-bit activations that the wasm build otherwise runs (`INT8_Q8_0`; q8.rs gives its extra
    /// error, far above the two f32 paths' difference).
    pub fn reference() -> CpuBackend {
        CpuBackend { q8_kernel: false }
    }
}

/// Fails with a message naming `what` unless `t` is `(rows, cols)`.
pub(crate) fn expect_dims(t: &CpuTensor, rows: usize, cols: usize, what: &str) -> Result<()> {
    if (t.rows, t.cols) != (rows, cols) {
        return Err(Error::Shape { name: what.to_string(), got: vec![t.rows, t.cols], expected: vec![rows, cols] });
    }
    Ok(())
}

/// A pointer into an output that the tasks of a parallel loop share, each writing only its own disjoint part (the
/// user's contract): a raw pointer is neither `Send` nor `Sync`.
#[derive(Clone, Copy)]
pub(crate) struct SharedOut(pub(crate) *mut f32);
// SAFETY: every user writes disjoint parts from its tasks (par_chunks_mut, par_column_blocks, attention).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The pointer (a method, so that a closure captures the whole `SharedOut`, which is `Sync`, not its field).
    pub(crate) fn ptr(&self) -> *mut f32 {
        self.0
    }
}

/// Runs `f(chunk_index, chunk)` over `data.chunks_mut(chunk)`, in parallel natively.
pub(crate) fn par_chunks_mut<F>(data: &mut [f32], chunk: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync + Send,
{
    let chunk = chunk.max(1);
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        data.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    }
    #[cfg(all(target_arch = "wasm32", not(feature = "threads")))]
    data.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    #[cfg(all(target_arch = "wasm32", feature = "threads"))]
    {
        // The slice's start, shared by the items, each of which cuts out its own disjoint chunk.
        let (len, base) = (data.len(), SharedOut(data.as_mut_ptr()));
        threads::par_for(len.div_ceil(chunk), &|i| {
            let start = i * chunk;
            // SAFETY: chunks [start, start + chunk) ∩ [0, len) are disjoint and within `data`, which outlives the loop.
            let c = unsafe { std::slice::from_raw_parts_mut(base.ptr().wrapping_add(start), chunk.min(len - start)) };
            f(i, c)
        });
    }
}

/// Columns `c0..c1` of every row of a row-major `(rows, n)` output: one task's share in [`par_column_blocks`], whose
/// other tasks own the other columns of the same rows.
pub(crate) struct Columns {
    base: *mut f32,
    rows: usize,
    n: usize,
    c0: usize,
    c1: usize,
}

impl Columns {
    /// The block's columns, `c0..c1`.
    pub fn range(&self) -> (usize, usize) {
        (self.c0, self.c1)
    }

    /// Row `i`'s columns `c0..c1`.
    pub fn row(&mut self, i: usize) -> &mut [f32] {
        assert!(i < self.rows);
        // SAFETY: inside the output (i < rows, c1 ≤ n), and no other task's block overlaps these columns.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(i * self.n + self.c0), self.c1 - self.c0) }
    }

    /// Element `(0, c0)`; row `i` of the block starts `i · n` floats later. Writes through it must stay inside the
    /// block's columns.
    pub fn ptr(&mut self) -> *mut f32 {
        // SAFETY: c0 ≤ n, inside the output (or one past its end when it is empty).
        unsafe { self.base.add(self.c0) }
    }
}

/// Runs `f` on the column blocks `[i·step, (i+1)·step) ∩ [0, n)` of `out (rows, n)`, in parallel natively: for a
/// product with few rows, where splitting the rows leaves some threads idle and makes each read all of W, while
/// split by columns each thread reads only its share of W.
pub(crate) fn par_column_blocks<F>(out: &mut [f32], n: usize, step: usize, f: F)
where
    F: Fn(Columns) + Sync + Send,
{
    assert!(n > 0 && step > 0 && out.len() % n == 0);
    // The output's start, shared by the tasks; each writes only its own columns (see `Columns`).
    let (rows, base) = (out.len() / n, SharedOut(out.as_mut_ptr()));
    par_for(n.div_ceil(step), |i| {
        let c0 = i * step;
        f(Columns { base: base.ptr(), rows, n, c0, c1: (c0 + step).min(n) })
    });
}

/// Runs `f(i)` for `i in 0..n`, in parallel natively.
pub(crate) fn par_for<F>(n: usize, f: F)
where
    F: Fn(usize) + Sync + Send,
{
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        (0..n).into_par_iter().for_each(f);
    }
    #[cfg(all(target_arch = "wasm32", not(feature = "threads")))]
    (0..n).for_each(f);
    #[cfg(all(target_arch = "wasm32", feature = "threads"))]
    threads::par_for(n, &f);
}

/// Worker threads available to the parallel loops.
pub(crate) fn threads() -> usize {
    #[cfg(not(target_arch = "wasm32"))]
    return rayon::current_num_threads().max(1);
    #[cfg(all(target_arch = "wasm32", not(feature = "threads")))]
    return 1;
    #[cfg(all(target_arch = "wasm32", feature = "threads"))]
    return threads::threads();
}

impl Backend for CpuBackend {
    /// In the browser, wasm32's 4 GiB address space holds every tensor.
    fn memory_limit(&self) -> Option<u64> {
        cfg!(target_arch = "wasm32").then_some(1 << 32)
    }

    type Tensor = CpuTensor;

    fn name(&self) -> &'static str {
        "cpu"
    }

    /// A Q8_0 matrix where the integer kernel runs is a linear weight, kept in that kernel's form only from its
    /// first `linear` on ([`CpuTensor::repacked`]). (Tables come through `upload_table`.)
    fn upload(&self, t: &HostTensor) -> Result<CpuTensor> {
        let (rows, cols) = t.rows_cols();
        if t.shape.len() < 2 {
            // Biases and LayerNorm γ/β: widened (0.1% of the bytes; they feed additions, not GEMMs).
            return CpuTensor::new(t.to_f32()?, rows, cols);
        }
        if self.q8_kernel && matches!(t.data, HostData::Q8_0(_)) {
            let t = HostTensor { shape: vec![rows, cols], data: t.data.clone() };
            return CpuTensor::repacked(&Arc::new(t), rows, cols);
        }
        CpuTensor::packed(t, rows, cols)
    }

    fn upload_shared(&self, t: &Arc<HostTensor>) -> Result<CpuTensor> {
        let (rows, cols) = t.rows_cols();
        if t.shape.len() < 2 {
            return self.upload(t);
        }
        if self.q8_kernel {
            return CpuTensor::repacked(t, rows, cols);
        }
        CpuTensor::shared(t, rows, cols)
    }

    /// Kept as loaded (shared): a lookup decodes a few rows of the blocks.
    fn upload_table(&self, t: &Arc<HostTensor>) -> Result<CpuTensor> {
        let (rows, cols) = t.rows_cols();
        if t.shape.len() < 2 {
            return self.upload(t);
        }
        CpuTensor::shared(t, rows, cols)
    }

    fn input(&self, data: &[f32], rows: usize, cols: usize) -> Result<CpuTensor> {
        CpuTensor::new(data.to_vec(), rows, cols)
    }

    fn dims(&self, t: &CpuTensor) -> (usize, usize) {
        (t.rows, t.cols)
    }

    fn dtype(&self, t: &CpuTensor) -> Dtype {
        t.dtype()
    }

    fn embeddings(&self, batch: &Batch, tables: &EmbeddingTables<'_, CpuTensor>) -> Result<CpuTensor> {
        norm::embeddings(batch, tables)
    }

    fn linear(&self, x: &CpuTensor, w: &CpuTensor, bias: Option<&CpuTensor>, act: Activation) -> Result<CpuTensor> {
        let (m, k) = (x.rows, x.cols);
        let n = w.rows;
        x.expect_f32("linear input x")?;
        expect_dims(w, n, k, "linear weight (N, K)")?;
        if let Some(b) = bias {
            b.expect_f32("linear bias")?;
            expect_dims(b, 1, n, "linear bias (N)")?;
        }
        let mut out = vec![0f32; m * n];
        if self.q8_kernel {
            if let Some(q) = w.q8()? {
                // Q8_0: the integer kernel, x quantized per block of 32 (q8.rs says why and how far from the twin).
                q8::linear_q8(x.data(), m, k, q, bias.map(|b| b.data()), act, &mut out);
                return CpuTensor::new(out, m, n);
            }
        }
        let bias = bias.map(|b| b.data());
        match w.row_view() {
            None => matmul::linear(x.data(), m, k, w.data(), n, bias, act, &mut out),
            Some(rows) => matmul::linear_rows(x.data(), m, k, n, &|r, c| rows.rows_into(r, c), bias, act, &mut out),
        }
        CpuTensor::new(out, m, n)
    }

    fn layernorm(&self, x: &CpuTensor, residual: Option<&CpuTensor>, gamma: &CpuTensor, beta: &CpuTensor, eps: f32)
        -> Result<CpuTensor> {
        let (m, n) = (x.rows, x.cols);
        x.expect_f32("layernorm input")?;
        gamma.expect_f32("layernorm gamma")?;
        beta.expect_f32("layernorm beta")?;
        if let Some(r) = residual {
            r.expect_f32("layernorm residual")?;
            expect_dims(r, m, n, "layernorm residual")?;
        }
        expect_dims(gamma, 1, n, "layernorm gamma (N)")?;
        expect_dims(beta, 1, n, "layernorm beta (N)")?;
        let mut out = vec![0f32; m * n];
        norm::layernorm(x.data(), residual.map(|r| r.data()), gamma.data(), beta.data(), eps, n, &mut out);
        CpuTensor::new(out, m, n)
    }

    fn mask(&self, batch: &Batch) -> Result<CpuTensor> {
        super::validate_batch(batch)?;
        CpuTensor::new(batch.attention_mask.iter().map(|&m| if m != 0 { 1.0 } else { 0.0 }).collect(), batch.b, batch.t)
    }

    fn attention_biased(&self, qkv: &CpuTensor, mask: &CpuTensor, bias: Option<&CpuTensor>, shape: AttentionShape)
        -> Result<CpuTensor> {
        qkv.expect_f32("attention qkv")?;
        mask.expect_f32("attention mask")?;
        if let Some(b) = bias {
            b.expect_f32("attention bias")?;
        }
        let ctx = attention::attention(qkv, mask, bias.map_or(super::ScoreBias::None, super::ScoreBias::Relative), shape)?;
        uniform::forward(ctx, qkv, mask, shape, None)
    }

    fn attention_disentangled(&self, qkv: &CpuTensor, mask: &CpuTensor, pos: &CpuTensor, rows: &CpuTensor,
        shape: AttentionShape) -> Result<CpuTensor> {
        for (t, what) in [(qkv, "attention qkv"), (mask, "attention mask"), (pos, "attention pos"), (rows, "attention rows")] {
            t.expect_f32(what)?;
        }
        let ctx = attention::attention(qkv, mask, super::ScoreBias::Disentangled { pos, rows }, shape)?;
        uniform::forward(ctx, qkv, mask, shape, None)
    }

    fn rotary(&self, qkv: &CpuTensor, rope: &CpuTensor, shape: AttentionShape) -> Result<CpuTensor> {
        qkv.expect_f32("rotary qkv")?;
        rope.expect_f32("rotary table")?;
        rotary::rotary(qkv, rope, shape)
    }

    fn glu(&self, x: &CpuTensor, act: Activation) -> Result<CpuTensor> {
        x.expect_f32("glu input")?;
        rotary::glu(x, act)
    }

    /// An f32 weight: the product in the GEMM's epilogue ([`rotary::linear_glu`]); a packed one, the two ops.
    fn linear_glu(&self, x: &CpuTensor, w: &CpuTensor, bias: Option<&CpuTensor>, act: Activation) -> Result<CpuTensor> {
        let (m, k, n2) = (x.rows, x.cols, w.rows);
        if w.dtype() != Dtype::F32 || n2 % 2 != 0 {
            let both = self.linear(x, w, bias, Activation::None)?; // (M, 2I)
            return self.glu(&both, act);
        }
        x.expect_f32("linear_glu input x")?;
        expect_dims(w, n2, k, "linear_glu weight (2I, K)")?;
        if let Some(b) = bias {
            b.expect_f32("linear_glu bias")?;
            expect_dims(b, 1, n2, "linear_glu bias (2I)")?;
        }
        let mut out = vec![0f32; m * n2 / 2];
        rotary::linear_glu(x.data(), m, k, w.data(), n2 / 2, bias.map(|b| b.data()), act, &mut out);
        CpuTensor::new(out, m, n2 / 2)
    }

    fn glu_backward(&self, dy: &CpuTensor, x: &CpuTensor, act: Activation) -> Result<CpuTensor> {
        dy.expect_f32("glu_backward dy")?;
        x.expect_f32("glu_backward input")?;
        rotary::glu_backward(dy, x, act)
    }

    fn pool_tokens(&self, x: &CpuTensor, mask: &CpuTensor, batch: usize, seq: usize, mode: super::TokenPool)
        -> Result<CpuTensor> {
        x.expect_f32("pool_tokens input")?;
        mask.expect_f32("pool_tokens mask")?;
        pool::pool_tokens(x, mask, batch, seq, mode)
    }

    fn gather_rows(&self, x: &CpuTensor, rows: &[u32]) -> Result<CpuTensor> {
        x.expect_f32("gather_rows input")?;
        pool::gather_rows(x, rows)
    }

    fn matmul(&self, a: &CpuTensor, trans_a: bool, b: &CpuTensor, trans_b: bool) -> Result<CpuTensor> {
        a.expect_f32("matmul a")?;
        b.expect_f32("matmul b")?;
        train::matmul(a, trans_a, b, trans_b)
    }

    fn matmul_weight(&self, dy: &CpuTensor, w: &CpuTensor) -> Result<CpuTensor> {
        train::matmul_weight(dy, w)
    }

    fn softmax_xent_grad(&self, logits: &CpuTensor, labels: &[u32]) -> Result<CpuTensor> {
        logits.expect_f32("softmax_xent_grad logits")?;
        train::softmax_xent_grad(logits, labels)
    }

    fn activation_grad(&self, dy: &CpuTensor, pre: &CpuTensor, act: Activation) -> Result<CpuTensor> {
        dy.expect_f32("activation_grad dy")?;
        pre.expect_f32("activation_grad pre")?;
        train::activation_grad(dy, pre, act)
    }

    fn adamw(&self, param: &CpuTensor, grad: &CpuTensor, m: &CpuTensor, v: &CpuTensor, step: &AdamWStep,
        norm_sq: Option<&CpuTensor>) -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
        for (t, what) in [(param, "adamw param"), (grad, "adamw grad"), (m, "adamw m"), (v, "adamw v")] {
            t.expect_f32(what)?;
        }
        let norm_sq = match norm_sq {
            Some(q) => {
                q.expect_f32("adamw norm_sq")?;
                Some(*q.data().first().ok_or_else(|| Error::Input("adamw: the squared norm is empty".into()))?)
            }
            None => None,
        };
        train::adamw(param, grad, m, v, step, norm_sq)
    }

    fn add(&self, a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
        a.expect_f32("add a")?;
        b.expect_f32("add b")?;
        train::add(a, b)
    }

    fn activation(&self, x: &CpuTensor, act: Activation) -> Result<CpuTensor> {
        x.expect_f32("activation input")?;
        train::activation(x, act)
    }

    fn reshape(&self, x: &CpuTensor, rows: usize, cols: usize) -> Result<CpuTensor> {
        x.expect_f32("reshape input")?;
        if rows * cols != x.rows * x.cols {
            return Err(Error::Input(format!("reshape: ({}, {}) has {} values, not ({rows}, {cols})", x.rows, x.cols, x.rows * x.cols)));
        }
        CpuTensor::new(x.to_vec(), rows, cols)
    }

    fn sum_rows(&self, x: &CpuTensor) -> Result<CpuTensor> {
        x.expect_f32("sum_rows input")?;
        train::sum_rows(x)
    }

    fn sum_squares(&self, x: &CpuTensor) -> Result<CpuTensor> {
        x.expect_f32("sum_squares input")?;
        train::sum_squares(x)
    }

    fn scatter_rows(&self, x: &CpuTensor, rows: &[u32], total: usize) -> Result<CpuTensor> {
        x.expect_f32("scatter_rows input")?;
        train::scatter_rows(x, rows, total)
    }

    fn embeddings_sum(&self, batch: &Batch, tables: &EmbeddingTables<'_, CpuTensor>) -> Result<CpuTensor> {
        norm::embeddings_sum(batch, tables)
    }

    fn embeddings_backward(&self, d: &CpuTensor, batch: &Batch, vocab: usize, positions: usize, types: usize,
        pad: Option<u32>) -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
        d.expect_f32("embeddings_backward d")?;
        norm::embeddings_backward(d, batch, vocab, positions, types, pad)
    }

    fn layernorm_backward(&self, dy: &CpuTensor, x: &CpuTensor, gamma: &CpuTensor, eps: f32)
        -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
        for (t, what) in [(dy, "layernorm_backward dy"), (x, "layernorm_backward x"), (gamma, "layernorm_backward gamma")] {
            t.expect_f32(what)?;
        }
        norm::layernorm_backward(dy, x, gamma, eps)
    }

    fn attention_backward_biased(&self, dctx: &CpuTensor, qkv: &CpuTensor, mask: &CpuTensor, bias: Option<&CpuTensor>,
        shape: AttentionShape, dropout: Option<Dropout>, want_dbias: bool) -> Result<(CpuTensor, Option<CpuTensor>)> {
        for (t, what) in [(dctx, "attention_backward dctx"), (qkv, "attention_backward qkv"), (mask, "attention_backward mask")] {
            t.expect_f32(what)?;
        }
        if let Some(b) = bias {
            b.expect_f32("attention_backward bias")?;
        }
        // The marked queries' rows (`uniform`) are left out of the kernel's backward and added after it.
        let kept = uniform::without(dctx, mask, shape.heads * shape.head_dim)?;
        let (dqkv, dbias) = attention::attention_backward(kept.as_ref().unwrap_or(dctx), qkv, mask, bias, shape, dropout,
            want_dbias)?;
        let scale = 1.0 / (shape.head_dim as f32).sqrt();
        uniform::backward(dqkv, dbias, dctx, qkv, mask, shape, dropout, scale, false)
    }

    fn dropout(&self, x: &CpuTensor, d: Dropout) -> Result<CpuTensor> {
        x.expect_f32("dropout input")?;
        train::dropout(x, d)
    }

    fn attention_dropout_biased(&self, qkv: &CpuTensor, mask: &CpuTensor, bias: Option<&CpuTensor>,
        shape: AttentionShape, d: Dropout) -> Result<CpuTensor> {
        qkv.expect_f32("attention qkv")?;
        mask.expect_f32("attention mask")?;
        if let Some(b) = bias {
            b.expect_f32("attention bias")?;
        }
        uniform::forward(attention::attention_dropout(qkv, mask, bias, shape, d)?, qkv, mask, shape, Some(d))
    }

    fn attention_dropout_disentangled(&self, qkv: &CpuTensor, mask: &CpuTensor, pos: &CpuTensor, rows: &CpuTensor,
        shape: AttentionShape, d: Dropout) -> Result<CpuTensor> {
        for (t, what) in [(qkv, "attention qkv"), (mask, "attention mask"), (pos, "attention pos"), (rows, "attention rows")] {
            t.expect_f32(what)?;
        }
        uniform::forward(disentangled::attention_dropout(qkv, mask, pos, rows, shape, d)?, qkv, mask, shape, Some(d))
    }

    fn attention_backward_disentangled(&self, dctx: &CpuTensor, qkv: &CpuTensor, mask: &CpuTensor, pos: &CpuTensor,
        rows: &CpuTensor, shape: AttentionShape, dropout: Option<Dropout>) -> Result<(CpuTensor, CpuTensor)> {
        for (t, what) in [(dctx, "attention_backward dctx"), (qkv, "attention_backward qkv"), (mask, "attention_backward mask"),
            (pos, "attention_backward pos"), (rows, "attention_backward rows")] {
            t.expect_f32(what)?;
        }
        let kept = uniform::without(dctx, mask, shape.heads * shape.head_dim)?;
        let (dqkv, dpos) = disentangled::attention_backward(kept.as_ref().unwrap_or(dctx), qkv, mask, pos, rows, shape,
            dropout)?;
        Ok((uniform::backward(dqkv, None, dctx, qkv, mask, shape, dropout, 0.0, true)?.0, dpos))
    }

    async fn read(&self, t: &CpuTensor) -> Result<Vec<f32>> {
        Ok(t.to_vec())
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::{quant, Weights};

    /// `upload_shared` keeps the loaded weights' storage (no copy) and computes what `upload`'s copy does.
    #[test]
    fn shared_weights_are_not_copied() {
        let values: Vec<f32> = (0..4 * 64).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect();
        let f32w = HostTensor::f32(vec![4, 64], values).unwrap();
        let q8w = quant::quantize(&f32w, Dtype::Q8_0).unwrap();
        let mut w = Weights::new();
        w.insert("f", f32w);
        w.insert("q", q8w);
        let cpu = CpuBackend::new();
        let x = cpu.input(&(0..3 * 64).map(|i| (i % 7) as f32 - 3.0).collect::<Vec<_>>(), 3, 64).unwrap();
        for name in ["f", "q"] {
            let stored = w.get_shared(name, &[4, 64]).unwrap();
            let shared = cpu.upload_shared(&stored).unwrap();
            assert_eq!(Arc::strong_count(&stored), 3, "{name}: the map, `stored` and the tensor hold one copy");
            if let HostData::F32(v) = &stored.data {
                assert_eq!(shared.data().as_ptr(), v.as_ptr());
            }
            let copied = cpu.upload(&stored).unwrap();
            assert_eq!(shared, copied);
            let y = |t: &CpuTensor| cpu.linear(&x, t, None, Activation::None).unwrap().to_vec();
            assert_eq!(y(&shared), y(&copied), "{name}");
        }
    }
}
