//! Host side of `shaders/train.wgsl`: the head-training ops (see `training/head.rs` for the math).

use super::params::TrainParams;
use super::{shape_err, GpuBackend, GpuTensor};
use crate::backend::{Activation, AdamWStep};
use crate::Result;

impl GpuBackend {
    fn train_wg(&self) -> u32 {
        self.tuning.elem_wg
    }

    pub(super) fn train_matmul(&self, a: &GpuTensor, trans_a: bool, b: &GpuTensor, trans_b: bool) -> Result<GpuTensor> {
        let (m, k) = if trans_a { (a.cols, a.rows) } else { (a.rows, a.cols) };
        let (kb, n) = if trans_b { (b.cols, b.rows) } else { (b.rows, b.cols) };
        if k != kb {
            return Err(shape_err("matmul", format!("op(a) is ({m}, {k}) but op(b) is ({kb}, {n}): inner sizes differ")));
        }
        if m == 0 || n == 0 || k == 0 {
            return Err(shape_err("matmul", format!("empty matrix: op(a) ({m}, {k}), op(b) ({k}, {n})")));
        }
        let out = self.alloc(m, n)?;
        let p = TrainParams {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            flags: trans_a as u32 | (trans_b as u32) << 1,
            ..Default::default()
        };
        let wg = self.train_wg();
        self.dispatch("train", "matmul_t", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, a.buffer(), false),
            (2, b.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid((m * n).div_ceil(wg as usize)))?;
        Ok(out)
    }

    pub(super) fn train_xent_grad(&self, logits: &GpuTensor, labels: &[u32]) -> Result<GpuTensor> {
        let (b, c) = (logits.rows, logits.cols);
        crate::backend::cpu::train::check_labels(labels, b, c)?;
        if b == 0 || c == 0 {
            return Err(shape_err("softmax_xent_grad", format!("empty logits ({b}, {c})")));
        }
        let lab = self.host_buffer(bytemuck::cast_slice(labels))?;
        let out = self.alloc(b, c)?;
        let p = TrainParams { m: b as u32, n: c as u32, ..Default::default() };
        let wg = self.train_wg();
        self.dispatch("train", "xent_grad", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, logits.buffer(), false),
            (4, lab.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid(b.div_ceil(wg as usize)))?;
        Ok(out)
    }

    pub(super) fn train_act_grad(&self, dy: &GpuTensor, pre: &GpuTensor, act: Activation) -> Result<GpuTensor> {
        if (dy.rows, dy.cols) != (pre.rows, pre.cols) {
            return Err(shape_err("activation_grad", format!(
                "dy is ({}, {}) but the pre-activation is ({}, {})", dy.rows, dy.cols, pre.rows, pre.cols
            )));
        }
        let n = dy.len();
        if n == 0 {
            return Err(shape_err("activation_grad", "empty tensor".into()));
        }
        let act_id = act.shader_code();
        let out = self.alloc(dy.rows, dy.cols)?;
        let p = TrainParams { m: n as u32, flags: act_id, ..Default::default() };
        let wg = self.train_wg();
        self.dispatch("train", "act_grad", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, dy.buffer(), false),
            (2, pre.buffer(), false),
            (3, out.buffer(), true),
        ], self.grid(n.div_ceil(wg as usize)))?;
        Ok(out)
    }

    pub(super) fn train_adamw(&self, param: &GpuTensor, grad: &GpuTensor, m: &GpuTensor, v: &GpuTensor, s: &AdamWStep)
        -> Result<(GpuTensor, GpuTensor, GpuTensor)> {
        let (r, c) = (param.rows, param.cols);
        for (what, t) in [("gradient", grad), ("first moment", m), ("second moment", v)] {
            if (t.rows, t.cols) != (r, c) {
                return Err(shape_err("adamw", format!("the {what} is ({}, {}), the parameter ({r}, {c})", t.rows, t.cols)));
            }
        }
        let n = r * c;
        if n == 0 {
            return Err(shape_err("adamw", "empty parameter".into()));
        }
        let (po, mo, vo) = (self.alloc(r, c)?, self.alloc(r, c)?, self.alloc(r, c)?);
        let p = TrainParams {
            m: n as u32,
            lr: s.lr,
            wd: s.weight_decay,
            beta1: s.beta1,
            beta2: s.beta2,
            eps: s.eps,
            bc1: s.bias_correction1,
            bc2_sqrt: s.bias_correction2_sqrt,
            grad_scale: s.grad_scale,
            ..Default::default()
        };
        let wg = self.train_wg();
        self.dispatch("train", "adamw", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, param.buffer(), false),
            (2, grad.buffer(), false),
            (6, m.buffer(), false),
            (7, v.buffer(), false),
            (3, po.buffer(), true),
            (9, mo.buffer(), true),
            (10, vo.buffer(), true),
        ], self.grid(n.div_ceil(wg as usize)))?;
        Ok((po, mo, vo))
    }
}
