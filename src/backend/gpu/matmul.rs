//! Host side of `shaders/matmul.wgsl` and `shaders/matmul_packed.wgsl`: `linear`, `act(x · wᵀ + bias)` with the
//! weight in its stored dtype. (`matmul` of the training ops, with transposes, is in `train.rs`.) And of
//! `shaders/weight_grad.wgsl`: `matmul_weight` (`dy · W` through a frozen weight in its stored dtype) and the
//! dequantized read of a weight.

use super::params::{self, MatmulParams};
use super::tensor::{expect_activation, expect_f32};
use super::tuning::SMALL_ROWS;
use super::{shape_err, Activation, Dtype, GpuBackend, GpuTensor};
use crate::weights::quant::QK;
use crate::Result;

impl GpuBackend {
    /// [`Backend::linear`](super::Backend::linear): the matmul kernel of the weight's dtype.
    pub(super) fn record_linear(&self, x: &GpuTensor, w: &GpuTensor, bias: Option<&GpuTensor>, act: Activation) -> Result<GpuTensor> {
        let (m, k) = (x.rows, x.cols);
        let n = w.rows;
        // f16 activations (the f16 mode) are read as pairs by the vec4 kernels (K % 4 == 0); the scalar one widens
        // them first.
        let widened;
        let x = if x.dtype == Dtype::F16 && k % 4 != 0 {
            widened = self.f32_of("linear", x)?;
            &widened
        } else {
            expect_activation("linear (input, bias)", &[x])?;
            x
        };
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
        let out_f16 = Self::writes_f16(x, n);
        let out = self.alloc_as(m, n, out_f16)?;
        let act_id = act.shader_code() as f64;
        let t = self.tuning.get();
        let variant = if m <= SMALL_ROWS { t.small_matmul } else { t.matmul };
        let (wx, wy) = variant.wg;
        let p = MatmulParams { m: m as u32, n: n as u32, k: k as u32, _pad: 0 };
        let bias_buf = bias.map(|b| b.buffer()).unwrap_or(&self.dummy);
        // One entry point per weight layout and tiling (the small-product one for at most SMALL_ROWS rows); outputs
        // per block: 4 rows × 8 columns (vec4, packed), 4 × 4 per invocation (scalar, direct only). vec4 loads of x
        // need K % 4 == 0 (every BERT); otherwise the scalar entry point views x as f32 and the weight as words
        // (f32 or f16). Quantized rows are whole blocks of 32, so K % 32 == 0 there.
        let (shader, entry, xb, wb) = match w.dtype {
            Dtype::Q8_0 | Dtype::Q4_0 if k % QK != 0 => {
                return Err(shape_err("linear", format!(
                    "a {} weight needs K to be a multiple of {QK}, got {k}", w.dtype.name()
                )));
            }
            Dtype::F32 if k % 4 == 0 => (variant.kernel.module(false), variant.kernel.entry(false), 1, 2),
            Dtype::F16 | Dtype::Q8_0 | Dtype::Q4_0 if k % 4 == 0 => {
                (variant.kernel.module(true), variant.kernel.entry(true), 1, 6)
            }
            _ => ("matmul_packed", "matmul_scalar", 5, 6),
        };
        let shader = if x.dtype == Dtype::F16 {
            params::half_module(shader, out_f16).expect("every matmul module has f16 variants")
        } else {
            shader
        };
        let mut consts = vec![
            ("WG_X", wx as f64),
            ("WG_Y", wy as f64),
            ("ACT", act_id),
            ("HAS_BIAS", if bias.is_some() { 1.0 } else { 0.0 }),
        ];
        if self.faulty(variant.kernel) {
            consts.push(("FAULT", 1.0));
        }
        if shader.starts_with("matmul_packed") {
            // matmul.wgsl reads only f32 weights: it declares no WDT (and a pipeline may not set what is not there).
            consts.push(("WDT", w.dtype.shader_code() as f64));
        }
        let groups = if entry == "matmul_scalar" {
            (n.div_ceil(4 * wx as usize) as u32, m.div_ceil(4 * wy as usize) as u32, 1)
        } else {
            variant.groups(m, n)
        };
        self.dispatch(shader, entry, &consts, bytemuck::bytes_of(&p), &[
            (xb, x.buffer(), false),
            (wb, w.buffer(), false),
            (3, bias_buf, false),
            (4, out.buffer(), true),
        ], groups)?;
        Ok(out)
    }

    /// [`Backend::matmul_weight`](super::Backend::matmul_weight): `dy · W` with W `(N, K)` read in its stored
    /// dtype by `weight_grad.wgsl`'s `matmul_w` (an f32 W: the training matmul).
    pub(super) fn record_matmul_weight(&self, dy: &GpuTensor, w: &GpuTensor) -> Result<GpuTensor> {
        let dy = self.f32_of("matmul_weight", dy)?;
        let (m, n, k) = (dy.rows, w.rows, w.cols);
        if dy.cols != n {
            return Err(shape_err("matmul_weight", format!("dy is ({m}, {}) but the weight is ({n}, {k})", dy.cols)));
        }
        if w.dtype == Dtype::F32 {
            return self.train_matmul(&dy, false, w, false);
        }
        self.weight_kernel("matmul_weight", "matmul_w", Some(&dy), w, m)
    }

    /// A weight in f32 `(N, K)` (its stored values decoded as the kernels decode them): `weight_grad.wgsl`'s
    /// `dequant`, for reading a quantized weight back.
    pub(super) fn dequantized(&self, w: &GpuTensor) -> Result<GpuTensor> {
        self.weight_kernel("read", "dequant", None, w, w.rows)
    }

    /// What `read` copies back instead of `t`: its dequantized values where `t` is a Q8_0 or Q4_0 weight (`None`:
    /// `t` itself; an f16 tensor is read as it is).
    pub(super) fn decoded_for_read(&self, t: &GpuTensor) -> Result<Option<GpuTensor>> {
        match t.dtype {
            Dtype::Q8_0 | Dtype::Q4_0 => self.dequantized(t).map(Some),
            _ => Ok(None),
        }
    }

    fn weight_kernel(&self, op: &str, entry: &'static str, dy: Option<&GpuTensor>, w: &GpuTensor, m: usize) -> Result<GpuTensor> {
        let (n, k) = (w.rows, w.cols);
        let align = if matches!(w.dtype, Dtype::Q8_0 | Dtype::Q4_0) { QK } else { 4 };
        if k % align != 0 {
            return Err(shape_err(op, format!("a {} weight of {k} columns: they must be a multiple of {align}", w.dtype.name())));
        }
        if m == 0 || n == 0 || k == 0 {
            return Err(shape_err(op, format!("empty matrix: {m} rows, weight ({n}, {k})")));
        }
        let out = self.alloc(m, k)?;
        let p = MatmulParams { m: m as u32, n: n as u32, k: k as u32, _pad: 0 };
        let (wx, wy) = (8u32, 8u32);
        let rows_per = if dy.is_some() { 4 } else { 1 };
        let groups = (k.div_ceil(4 * wx as usize) as u32, m.div_ceil(rows_per * wy as usize) as u32, 1);
        let consts = [("WDT", w.dtype.shader_code() as f64), ("WG_X", wx as f64), ("WG_Y", wy as f64)];
        self.dispatch("weight_grad", entry, &consts, bytemuck::bytes_of(&p), &[
            (1, dy.map_or(&self.dummy, |d| d.buffer()), false),
            (2, w.buffer(), false),
            (3, out.buffer(), true),
        ], groups)?;
        Ok(out)
    }
}
