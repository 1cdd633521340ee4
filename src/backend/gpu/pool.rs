//! Host side of `shaders/pool.wgsl` (a reduction over each sequence's kept tokens, by sentence-transformers' modes)
//! and `shaders/gather.wgsl` (selected rows, e.g. `[CLS]`).

use super::params::{GatherParams, PoolParams};
use super::tensor::{expect_activation, expect_f32};
use super::{shape_err, Dtype, GpuBackend, GpuTensor};
use crate::Result;

impl GpuBackend {
    /// [`Backend::pool_tokens`](super::Backend::pool_tokens).
    pub(super) fn record_pool(&self, x: &GpuTensor, mask: &GpuTensor, batch: usize, seq: usize,
        mode: crate::backend::TokenPool) -> Result<GpuTensor> {
        expect_f32("pool_tokens", &[mask])?;
        expect_activation("pool_tokens", &[x])?;
        if x.rows != batch * seq || (mask.rows, mask.cols) != (batch, seq) {
            return Err(shape_err("pool_tokens", format!(
                "x ({}, {}) and mask ({}, {}) do not fit batch {batch} × seq {seq}", x.rows, x.cols, mask.rows, mask.cols
            )));
        }
        let hdim = x.cols;
        let out = self.alloc(batch, hdim)?;
        let p = PoolParams { batch: batch as u32, seq: seq as u32, hidden: hdim as u32, mode: mode as u32 };
        let wg = self.tuning.get().elem_wg;
        // An f16 input (the f16 mode) is read as pairs; the pooled mean is f32.
        let shader = if x.dtype == Dtype::F16 {
            super::params::half_module("pool", false).expect("pool has an f16-input variant")
        } else {
            "pool"
        };
        self.dispatch(shader, "pool_tokens", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, x.buffer(), false),
            (2, mask.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid((batch * hdim).div_ceil(wg as usize)))?;
        Ok(out)
    }

    /// [`Backend::gather_rows`](super::Backend::gather_rows).
    pub(super) fn record_gather_rows(&self, x: &GpuTensor, rows: &[u32]) -> Result<GpuTensor> {
        // Rows are copied word by word: f32 values, or f16 pairs where rows are whole words.
        let widened;
        let x = if x.dtype == Dtype::F16 && x.cols % 2 != 0 {
            widened = self.f32_of("gather_rows", x)?;
            &widened
        } else {
            expect_activation("gather_rows", &[x])?;
            x
        };
        if rows.is_empty() {
            return Err(shape_err("gather_rows", "no rows asked for".into()));
        }
        if let Some(&r) = rows.iter().find(|&&r| r as usize >= x.rows) {
            return Err(shape_err("gather_rows", format!("row {r} of a matrix with {} rows", x.rows)));
        }
        let idx = self.host_buffer(bytemuck::cast_slice(rows))?;
        let half = x.dtype == Dtype::F16;
        let out = self.alloc_as(rows.len(), x.cols, half)?;
        let words = if half { x.cols / 2 } else { x.cols };
        let p = GatherParams { out_rows: rows.len() as u32, cols: words as u32, _pad0: 0, _pad1: 0 };
        let wg = self.tuning.get().elem_wg;
        self.dispatch("gather", "gather_rows", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, idx.buffer(), false),
            (2, x.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid((rows.len() * words).div_ceil(wg as usize)))?;
        Ok(out)
    }
}
