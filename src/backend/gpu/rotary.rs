//! The rotary families' two ops on the GPU: rotary position embeddings (shaders/rotary.wgsl) and the gated
//! feed-forward's product (shaders/glu.wgsl), each one invocation per output element. Their CPU twins:
//! src/backend/cpu/rotary.rs.

use super::params::{GluParams, RotaryParams};
use super::tensor::expect_f32;
use super::{shape_err, GpuBackend, GpuTensor};
use crate::backend::{check_rotary, Activation, AttentionShape};
use crate::Result;

impl GpuBackend {
    /// [`Backend::rotary`](super::Backend::rotary). An f16 qkv (the f16-activation mode) is widened first; the
    /// output is f32.
    pub(super) fn record_rotary(&self, qkv: &GpuTensor, rope: &GpuTensor, s: AttentionShape) -> Result<GpuTensor> {
        let (rows, h) = (s.batch * s.seq, s.heads * s.head_dim);
        if (qkv.rows, qkv.cols) != (rows, 3 * h) {
            return Err(shape_err("rotary", format!("qkv is ({}, {}), expected ({rows}, {})", qkv.rows, qkv.cols, 3 * h)));
        }
        check_rotary(rope.rows, rope.cols, s)?;
        expect_f32("rotary", &[rope])?;
        let qkv = self.f32_of("rotary", qkv)?;
        let out = self.alloc(rows, 3 * h)?;
        let n = rows * 3 * h;
        if n == 0 {
            return Ok(out);
        }
        let wg = self.tuning.get().elem_wg;
        let p = RotaryParams { rows: rows as u32, seq: s.seq as u32, heads: s.heads as u32, head_dim: s.head_dim as u32 };
        self.dispatch("rotary", "rotary", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, qkv.buffer(), false),
            (2, rope.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid(n.div_ceil(wg as usize)))?;
        Ok(out)
    }

    /// [`Backend::glu`](super::Backend::glu). An f16 input is widened first; the output is f32.
    pub(super) fn record_glu(&self, x: &GpuTensor, act: Activation) -> Result<GpuTensor> {
        if x.cols % 2 != 0 {
            return Err(shape_err("glu", format!("x has {} columns; it must hold [up | gate], an even number", x.cols)));
        }
        let x = self.f32_of("glu", x)?;
        let (rows, cols) = (x.rows, x.cols / 2);
        let out = self.alloc(rows, cols)?;
        let n = rows * cols;
        if n == 0 {
            return Ok(out);
        }
        let wg = self.tuning.get().elem_wg;
        let p = GluParams { rows: rows as u32, cols: cols as u32, code: act.shader_code(), _pad: 0 };
        self.dispatch("glu", "glu", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, x.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid(n.div_ceil(wg as usize)))?;
        Ok(out)
    }

    /// [`Backend::glu_backward`](super::Backend::glu_backward) (f32 inputs): dx `(R, 2I)`.
    pub(super) fn record_glu_backward(&self, dy: &GpuTensor, x: &GpuTensor, act: Activation) -> Result<GpuTensor> {
        if x.cols % 2 != 0 || (dy.rows, dy.cols) != (x.rows, x.cols / 2) {
            return Err(shape_err("glu_backward", format!(
                "x is ({}, {}) and dy ({}, {}); x must hold [up | gate] (R, 2I) and dy be (R, I)",
                x.rows, x.cols, dy.rows, dy.cols
            )));
        }
        let (rows, cols) = (x.rows, x.cols / 2);
        let out = self.alloc(rows, 2 * cols)?;
        let n = rows * cols;
        if n == 0 {
            return Ok(out);
        }
        let wg = self.tuning.get().elem_wg;
        let p = GluParams { rows: rows as u32, cols: cols as u32, code: act.shader_code(), _pad: 0 };
        self.dispatch("glu", "glu_backward", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, x.buffer(), false),
            (2, dy.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid(n.div_ceil(wg as usize)))?;
        Ok(out)
    }
}
