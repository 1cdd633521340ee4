//! The CPU backend: the reference implementation of every op, and the fallback where there is no WebGPU.
//!
//! Everything is f32 (weights of other dtypes are widened once, at upload). Tensors are immutable row-major
//! matrices behind an `Arc`, so ops never copy their inputs. Natively the heavy ops (GEMM row blocks, attention
//! per (sequence, head)) run on rayon's thread pool; in wasm32 they run on the calling thread.
//!
//! One file per op family: [`matmul`] (linear + activation epilogue), [`norm`] (embeddings, LayerNorm),
//! [`attention`], [`pool`] (mask, mean pooling, row gather).

pub mod attention;
pub mod matmul;
pub mod norm;
pub mod pool;

use std::sync::Arc;

use super::{Activation, AttentionShape, Backend, EmbeddingTables};
use crate::tokenizer::Batch;
use crate::weights::HostTensor;
use crate::{Error, Result};

/// A row-major f32 matrix `(rows, cols)`.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTensor {
    rows: usize,
    cols: usize,
    data: Arc<Vec<f32>>,
}

impl CpuTensor {
    /// Wraps `data` as a `(rows, cols)` matrix.
    pub fn new(data: Vec<f32>, rows: usize, cols: usize) -> Result<CpuTensor> {
        if data.len() != rows * cols {
            return Err(Error::Input(format!("a ({rows}, {cols}) tensor needs {} values, got {}", rows * cols, data.len())));
        }
        Ok(CpuTensor { rows, cols, data: Arc::new(data) })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The values, row-major.
    pub fn data(&self) -> &[f32] {
        &self.data
    }

    /// A copy of the values, row-major (the synchronous twin of [`Backend::read`]).
    pub fn to_vec(&self) -> Vec<f32> {
        self.data.as_ref().clone()
    }
}

/// The CPU backend. Stateless: threads come from rayon's global pool (native only).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl CpuBackend {
    pub fn new() -> CpuBackend {
        CpuBackend
    }
}

/// Fails with a message naming `what` unless `t` is `(rows, cols)`.
pub(crate) fn expect_dims(t: &CpuTensor, rows: usize, cols: usize, what: &str) -> Result<()> {
    if (t.rows, t.cols) != (rows, cols) {
        return Err(Error::Shape { name: what.to_string(), got: vec![t.rows, t.cols], expected: vec![rows, cols] });
    }
    Ok(())
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
    #[cfg(target_arch = "wasm32")]
    data.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
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
    #[cfg(target_arch = "wasm32")]
    (0..n).for_each(f);
}

/// Worker threads available to the parallel loops.
pub(crate) fn threads() -> usize {
    #[cfg(not(target_arch = "wasm32"))]
    return rayon::current_num_threads().max(1);
    #[cfg(target_arch = "wasm32")]
    return 1;
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn upload(&self, t: &HostTensor) -> Result<CpuTensor> {
        let (rows, cols) = t.rows_cols();
        CpuTensor::new(t.to_f32()?, rows, cols)
    }

    fn input(&self, data: &[f32], rows: usize, cols: usize) -> Result<CpuTensor> {
        CpuTensor::new(data.to_vec(), rows, cols)
    }

    fn dims(&self, t: &CpuTensor) -> (usize, usize) {
        (t.rows, t.cols)
    }

    fn embeddings(&self, batch: &Batch, tables: &EmbeddingTables<'_, CpuTensor>) -> Result<CpuTensor> {
        norm::embeddings(batch, tables)
    }

    fn linear(&self, x: &CpuTensor, w: &CpuTensor, bias: Option<&CpuTensor>, act: Activation) -> Result<CpuTensor> {
        let (m, k) = (x.rows, x.cols);
        let n = w.rows;
        expect_dims(w, n, k, "linear weight (N, K)")?;
        if let Some(b) = bias {
            expect_dims(b, 1, n, "linear bias (N)")?;
        }
        let mut out = vec![0f32; m * n];
        matmul::linear(x.data(), m, k, w.data(), n, bias.map(|b| b.data()), act, &mut out);
        CpuTensor::new(out, m, n)
    }

    fn layernorm(&self, x: &CpuTensor, residual: Option<&CpuTensor>, gamma: &CpuTensor, beta: &CpuTensor, eps: f32)
        -> Result<CpuTensor> {
        let (m, n) = (x.rows, x.cols);
        if let Some(r) = residual {
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

    fn attention(&self, qkv: &CpuTensor, mask: &CpuTensor, shape: AttentionShape) -> Result<CpuTensor> {
        attention::attention(qkv, mask, shape)
    }

    fn mean_pool(&self, x: &CpuTensor, mask: &CpuTensor, batch: usize, seq: usize) -> Result<CpuTensor> {
        pool::mean_pool(x, mask, batch, seq)
    }

    fn gather_rows(&self, x: &CpuTensor, rows: &[u32]) -> Result<CpuTensor> {
        pool::gather_rows(x, rows)
    }

    async fn read(&self, t: &CpuTensor) -> Result<Vec<f32>> {
        Ok(t.to_vec())
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Deterministic pseudo-random data and comparisons for the op tests.

    /// xorshift-based values in [-1, 1): reproducible, no dependency.
    pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Asserts `|got − want| ≤ atol + rtol·|want|` everywhere, reporting the worst index.
    pub fn assert_close(got: &[f32], want: &[f32], atol: f32, rtol: f32, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: lengths differ");
        let mut worst = (0usize, f32::NEG_INFINITY);
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let excess = (g - w).abs() - (atol + rtol * w.abs());
            let excess = if excess.is_nan() { f32::INFINITY } else { excess };
            if excess > worst.1 {
                worst = (i, excess);
            }
        }
        let i = worst.0;
        assert!(worst.1 <= 0.0, "{what}: worst index {i}: got {} want {} (atol {atol}, rtol {rtol})", got[i], want[i]);
    }
}
