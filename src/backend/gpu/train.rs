//! Host side of `shaders/train.wgsl`: the head-training ops (see `training/head.rs` for the math); and of the
//! elementwise ops, reductions and scatter-adds of `shaders/backward.wgsl` (fine-tuning the encoder).

use super::buffers::PoolBuf;
use super::params::{BackwardParams, DropoutParams, TrainParams};
use super::{shape_err, GpuBackend, GpuTensor, MatmulKernel};
use crate::backend::{Activation, AdamWStep, Dropout};
use crate::Result;

/// `adamw`'s flags (`shaders/train.wgsl`): the squared global norm is bound (skip the update where it is not
/// finite), and clipping by it.
const ADAMW_NORM: u32 = 2;
const ADAMW_CLIP: u32 = 1;

/// Rows that one invocation of `col_sum` (and `ln_param_grads`) adds up, in order, before the parts' sums are added:
/// a batch's thousand tokens summed by one invocation per column would leave most of a GPU idle.
pub(super) const COL_PART_ROWS: usize = 64;

/// Values each workgroup of `sum_reduce` adds up (per invocation: this over the workgroup size).
const SUM_CHUNK: usize = 16384;

/// The scatter-add `out[dst[i]] += src row i` as lists to gather: `[offsets (rows + 1) | sources]`, output row `r`
/// summing the source rows `sources[offsets[r]..offsets[r + 1]]`, in increasing source order (the CPU's order).
/// Every `dst[i]` is `< rows` (checked by the caller); a source whose `dst[i]` is `None` is added nowhere.
pub(super) fn csr(rows: usize, dst: impl Iterator<Item = Option<usize>> + Clone) -> Vec<u32> {
    let mut out = vec![0u32; rows + 1];
    let mut count = 0usize;
    for r in dst.clone().flatten() {
        out[r + 1] += 1;
        count += 1;
    }
    for r in 0..rows {
        out[r + 1] += out[r];
    }
    let mut next: Vec<u32> = out[..rows].to_vec();
    out.resize(rows + 1 + count, 0);
    for (i, r) in dst.enumerate().filter_map(|(i, r)| r.map(|r| (i, r))) {
        out[rows + 1 + next[r] as usize] = i as u32;
        next[r] += 1;
    }
    out
}

impl GpuBackend {
    fn train_wg(&self) -> u32 {
        self.tuning.get().elem_wg
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
        // Where a real GPU's calibration chose a tiling staged through workgroup memory (wide or tiled), the forward's
        // matmul kernel runs the product: on an H100 it ran a bert-base step's GEMMs in a fraction of matmul_t's time.
        // It takes both operands K-contiguous, K a multiple of 4, so a transposed or strided operand is first
        // copied that way (a transpose costs a read and a write of it, the product K times that).
        if matches!(self.tuning.get().matmul.kernel, MatmulKernel::Wide | MatmulKernel::Tiled) {
            let kp = k.div_ceil(4) * 4;
            let a2 = if !trans_a && k == kp { a.clone() } else { self.transpose_pad(a, trans_a, kp)? };
            let b2 = if trans_b && k == kp { b.clone() } else { self.transpose_pad(b, !trans_b, kp)? };
            return self.record_linear(&a2, &b2, None, crate::backend::Activation::None);
        }
        let out = self.alloc(m, n)?;
        let p = TrainParams {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            flags: trans_a as u32 | (trans_b as u32) << 1,
            ..Default::default()
        };
        let (wx, wy) = self.tuning.get().matmul.wg;
        let groups = (n.div_ceil(8 * wx as usize) as u32, m.div_ceil(4 * wy as usize) as u32, 1);
        self.dispatch("train", "matmul_t", &[("WG_X", wx as f64), ("WG_Y", wy as f64)], bytemuck::bytes_of(&p), &[
            (1, a.buffer(), false),
            (2, b.buffer(), false),
            (3, out.buffer(), true),
        ], groups)?;
        Ok(out)
    }

    /// `x` (rows, cols), transposed or not, as rows of `width` (≥ the rows' own length) padded with zeros.
    fn transpose_pad(&self, x: &GpuTensor, transpose: bool, width: usize) -> Result<GpuTensor> {
        let rows = if transpose { x.cols } else { x.rows };
        let out = self.alloc(rows, width)?;
        let p = BackwardParams { rows: x.rows as u32, cols: x.cols as u32, len: width as u32, code: transpose as u32 };
        let groups = (width.div_ceil(16) as u32, rows.div_ceil(16) as u32, 1);
        self.dispatch("backward", "transpose_pad", &[], bytemuck::bytes_of(&p),
            &[(1, x.buffer(), false), (3, out.buffer(), true)], groups)?;
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

    pub(super) fn train_adamw(&self, param: &GpuTensor, grad: &GpuTensor, m: &GpuTensor, v: &GpuTensor, s: &AdamWStep,
        norm_sq: Option<&GpuTensor>) -> Result<(GpuTensor, GpuTensor, GpuTensor)> {
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
        if s.max_grad_norm.is_some() && norm_sq.is_none() {
            return Err(shape_err("adamw", "clipping by global norm needs the gradients' squared norm".into()));
        }
        if norm_sq.is_some_and(|q| q.len() != 1) {
            return Err(shape_err("adamw", "the squared norm must be one value".into()));
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
            max_norm: s.max_grad_norm.unwrap_or(0.0),
            flags: if norm_sq.is_some() { ADAMW_NORM } else { 0 } | if s.max_grad_norm.is_some() { ADAMW_CLIP } else { 0 },
            ..Default::default()
        };
        let wg = self.train_wg();
        self.dispatch("train", "adamw", &[("WG", wg as f64)], bytemuck::bytes_of(&p), &[
            (1, param.buffer(), false),
            (2, grad.buffer(), false),
            (5, norm_sq.map_or(&self.dummy, |q| q.buffer()), false), // not read without ADAMW_NORM
            (6, m.buffer(), false),
            (7, v.buffer(), false),
            (3, po.buffer(), true),
            (9, mo.buffer(), true),
            (10, vo.buffer(), true),
        ], self.grid(n.div_ceil(wg as usize)))?;
        Ok((po, mo, vo))
    }

    fn backward_dispatch(&self, entry: &'static str, wg: u32, p: BackwardParams, bindings: &[super::runtime::Binding<'_>],
        groups: usize) -> Result<()> {
        self.dispatch("backward", entry, &[("WG", wg as f64)], bytemuck::bytes_of(&p), bindings, self.grid(groups))
    }

    /// [`Backend::add`](super::Backend::add).
    pub(super) fn record_add(&self, a: &GpuTensor, b: &GpuTensor) -> Result<GpuTensor> {
        if (a.rows, a.cols) != (b.rows, b.cols) {
            return Err(shape_err("add", format!("a is ({}, {}) but b is ({}, {})", a.rows, a.cols, b.rows, b.cols)));
        }
        let (n, wg) = (a.len(), self.train_wg());
        let out = self.alloc(a.rows, a.cols)?;
        let p = BackwardParams { len: n as u32, ..Default::default() };
        self.backward_dispatch("add", wg, p, &[(1, a.buffer(), false), (2, b.buffer(), false), (3, out.buffer(), true)],
            n.div_ceil(wg as usize))?;
        Ok(out)
    }

    /// [`Backend::activation`](super::Backend::activation).
    pub(super) fn record_activation(&self, x: &GpuTensor, act: Activation) -> Result<GpuTensor> {
        let (n, wg) = (x.len(), self.train_wg());
        let out = self.alloc(x.rows, x.cols)?;
        let p = BackwardParams { len: n as u32, code: act.shader_code(), ..Default::default() };
        self.backward_dispatch("activation", wg, p, &[(1, x.buffer(), false), (3, out.buffer(), true)],
            n.div_ceil(wg as usize))?;
        Ok(out)
    }

    /// [`Backend::dropout`](super::Backend::dropout): `shaders/dropout.wgsl`, one invocation per element.
    pub(super) fn record_dropout(&self, x: &GpuTensor, d: Dropout) -> Result<GpuTensor> {
        d.check()?;
        let (n, wg) = (x.len(), self.train_wg());
        let out = self.alloc(x.rows, x.cols)?;
        if n == 0 {
            return Ok(out);
        }
        let p = DropoutParams { len: n as u32, threshold: d.threshold(), key: d.key(), scale: d.scale() };
        self.dispatch("dropout", "dropout", &[("WG", wg as f64)], bytemuck::bytes_of(&p),
            &[(1, x.buffer(), false), (3, out.buffer(), true)], self.grid(n.div_ceil(wg as usize)))?;
        Ok(out)
    }

    /// [`Backend::sum_rows`](super::Backend::sum_rows): one invocation per column of each part of
    /// [`COL_PART_ROWS`] rows, then the parts' sums the same way (one pass where the rows are one part).
    pub(super) fn record_sum_rows(&self, x: &GpuTensor) -> Result<GpuTensor> {
        let (rows, cols) = (x.rows, x.cols);
        let parts = rows.div_ceil(COL_PART_ROWS).max(1);
        let out = self.alloc(parts, cols)?;
        if cols == 0 {
            return Ok(GpuTensor { rows: 1, ..out });
        }
        let wg = self.train_wg();
        let p = BackwardParams { rows: rows as u32, cols: cols as u32, len: COL_PART_ROWS.min(rows.max(1)) as u32, ..Default::default() };
        self.backward_dispatch("col_sum", wg, p, &[(1, x.buffer(), false), (3, out.buffer(), true)],
            (parts * cols).div_ceil(wg as usize))?;
        if parts == 1 { Ok(out) } else { self.record_sum_rows(&out) }
    }

    /// [`Backend::sum_squares`](super::Backend::sum_squares): [`Self::record_sum_squares_all`] of one tensor.
    pub(super) fn record_sum_squares(&self, x: &GpuTensor) -> Result<GpuTensor> {
        self.record_sum_squares_all(&[x])
    }

    /// [`Backend::sum_squares_all`](super::Backend::sum_squares_all): each tensor's squares summed per chunk of
    /// [`SUM_CHUNK`] values into its own part of one buffer of partial sums, then that buffer in one workgroup (one
    /// pass in all for a single tensor of one chunk).
    pub(super) fn record_sum_squares_all(&self, xs: &[&GpuTensor]) -> Result<GpuTensor> {
        if xs.is_empty() {
            return Err(shape_err("sum_squares_all", "no tensors".into()));
        }
        // sum_reduce is a row kernel: its width and its workgroup sum are the tuning's for rows.
        let wg = self.tuning.get().row_wg;
        let sum_reduce = |p: BackwardParams, bindings: &[super::runtime::Binding<'_>], groups: usize| {
            let shader = self.row_shader("backward");
            self.dispatch(shader, "sum_reduce", &[("WG", wg as f64)], bytemuck::bytes_of(&p), bindings, self.grid(groups))
        };
        let parts: Vec<usize> = xs.iter().map(|x| x.len().div_ceil(SUM_CHUNK).max(1)).collect();
        let total: usize = parts.iter().sum();
        let out = self.alloc(1, 1)?;
        let partials = if total == 1 { out.clone() } else { self.alloc(1, total)? };
        let mut offset = 0;
        for (x, &n) in xs.iter().zip(&parts) {
            // rows: where this tensor's partial sums start in the buffer.
            let p = BackwardParams { rows: offset as u32, len: x.len() as u32, cols: SUM_CHUNK as u32, code: 1 };
            sum_reduce(p, &[(1, x.buffer(), false), (3, partials.buffer(), true)], n)?;
            offset += n;
        }
        if total > 1 {
            let p = BackwardParams { len: total as u32, cols: total as u32, code: 0, ..Default::default() };
            sum_reduce(p, &[(1, partials.buffer(), false), (3, out.buffer(), true)], 1)?;
        }
        Ok(out)
    }

    /// [`Backend::scatter_rows`](super::Backend::scatter_rows).
    pub(super) fn record_scatter_rows(&self, x: &GpuTensor, rows: &[u32], total: usize) -> Result<GpuTensor> {
        if x.rows != rows.len() {
            return Err(shape_err("scatter_rows", format!("x has {} rows for {} row indices", x.rows, rows.len())));
        }
        if let Some(&r) = rows.iter().find(|&&r| r as usize >= total) {
            return Err(shape_err("scatter_rows", format!("row {r} is outside the {total} rows of the output")));
        }
        let lists = self.host_buffer(bytemuck::cast_slice(&csr(total, rows.iter().map(|&r| Some(r as usize)))))?;
        self.gather_sum(x, &lists, total)
    }

    /// `(rows, x.cols)`: output row `r` the sum of x's rows listed for it in `lists` (see [`csr`]).
    pub(super) fn gather_sum(&self, x: &GpuTensor, lists: &PoolBuf, rows: usize) -> Result<GpuTensor> {
        let wg = self.train_wg();
        let out = self.alloc(rows, x.cols)?;
        let p = BackwardParams { rows: rows as u32, cols: x.cols as u32, ..Default::default() };
        self.backward_dispatch("gather_sum", wg, p,
            &[(1, x.buffer(), false), (4, lists.buffer(), false), (3, out.buffer(), true)],
            (rows * x.cols).div_ceil(wg as usize))?;
        Ok(out)
    }
}
