//! The training ops (head training, see `training/head.rs` for the math): a GEMM with optional transposes, the
//! softmax cross-entropy gradient, activation derivatives and the AdamW update.

use super::{expect_dims, matmul::activate, par_chunks_mut, threads, CpuTensor};

/// Values per parallel band of the AdamW update.
const ADAMW_BAND: usize = 1 << 16;
use crate::backend::{Activation, AdamWStep, Dropout};
use crate::{Error, Result};

/// `op(a) · op(b)`; see [`crate::backend::Backend::matmul`].
pub fn matmul(a: &CpuTensor, trans_a: bool, b: &CpuTensor, trans_b: bool) -> Result<CpuTensor> {
    let (m, k) = if trans_a { (a.cols(), a.rows()) } else { (a.rows(), a.cols()) };
    let (kb, n) = if trans_b { (b.cols(), b.rows()) } else { (b.rows(), b.cols()) };
    if k != kb {
        return Err(Error::Input(format!(
            "matmul: op(a) is ({m}, {k}) but op(b) is ({kb}, {n}): inner sizes differ"
        )));
    }
    let mut out = vec![0f32; m * n];
    if m > 0 && n > 0 && k > 0 {
        // Element (i, l) of op(a) sits at a[i*rsa + l*csa]; likewise for b. matrixmultiply takes any strides, so
        // no transposed copy is made. The output's rows are split into one band per thread (each a GEMM of its own):
        // the backward's products are large ((B·T, H)·(H, I) and the like), and one sgemm call uses one core.
        let (rsa, csa) = if trans_a { (1, a.cols() as isize) } else { (a.cols() as isize, 1) };
        let (rsb, csb) = if trans_b { (1, b.cols() as isize) } else { (b.cols() as isize, 1) };
        let band = m.div_ceil(threads()).max(16);
        let (ap, bp) = (a.data().as_ptr() as usize, b.data().as_ptr() as usize);
        par_chunks_mut(&mut out, band * n, |ci, chunk| {
            let (i0, rows) = (ci * band, chunk.len() / n);
            // SAFETY: the shapes checked above bound every index the strides reach: op(a)'s rows i0..i0+rows of
            // (m, k) over a's m*k values, op(b) (k, n) over b's k*n values, and this band's rows × n of out.
            unsafe {
                matrixmultiply::sgemm(
                    rows, k, n, 1.0,
                    (ap as *const f32).offset(i0 as isize * rsa), rsa, csa,
                    bp as *const f32, rsb, csb,
                    0.0,
                    chunk.as_mut_ptr(), n as isize, 1,
                );
            }
        });
    }
    CpuTensor::new(out, m, n)
}

/// Rows of a stored weight decoded at a time by [`matmul_weight`]: a band's scratch of `W_ROWS · K` floats.
const W_ROWS: usize = 64;

/// `dy · w` with `w` `(N, K)` in its stored dtype; see [`crate::backend::Backend::matmul_weight`]. The weight is
/// decoded `W_ROWS` rows at a time into a band's scratch (never whole) and each piece's product added into the
/// output (`y += dy[:, n0..n1] · W[n0..n1, :]`), the output's rows split into one band per thread as in [`matmul`].
/// An f32 weight is [`matmul`] itself.
pub fn matmul_weight(dy: &CpuTensor, w: &CpuTensor) -> Result<CpuTensor> {
    let (m, n, k) = (dy.rows(), dy.cols(), w.cols());
    dy.expect_f32("matmul_weight dy")?;
    expect_dims(w, n, k, "matmul_weight w (N, K)")?;
    let Some(rows) = w.row_view() else { return matmul(dy, false, w, false) };
    let mut out = vec![0f32; m * k];
    if m > 0 && n > 0 && k > 0 {
        let band = m.div_ceil(threads()).max(16);
        let dp = dy.data().as_ptr() as usize;
        par_chunks_mut(&mut out, band * k, |ci, chunk| {
            let (i0, r) = (ci * band, chunk.len() / k);
            let mut wbuf = vec![0f32; W_ROWS.min(n) * k];
            for n0 in (0..n).step_by(W_ROWS) {
                let nr = W_ROWS.min(n - n0);
                let wb = &mut wbuf[..nr * k];
                rows.rows_into(n0, wb);
                // SAFETY: dy's rows i0..i0+r, columns n0..n0+nr lie inside its (m, n) values; wb holds (nr, k); the
                // band's chunk is (r, k).
                unsafe {
                    matrixmultiply::sgemm(
                        r, nr, k, 1.0,
                        (dp as *const f32).add(i0 * n + n0), n as isize, 1,
                        wb.as_ptr(), k as isize, 1,
                        1.0,
                        chunk.as_mut_ptr(), k as isize, 1,
                    );
                }
            }
        });
    }
    CpuTensor::new(out, m, k)
}

/// Checks labels against the class count.
pub fn check_labels(labels: &[u32], rows: usize, classes: usize) -> Result<()> {
    if labels.len() != rows {
        return Err(Error::Input(format!("{} labels for a batch of {rows} logit rows", labels.len())));
    }
    if let Some(&l) = labels.iter().find(|&&l| l as usize >= classes) {
        return Err(Error::Input(format!("label index {l} is out of range for {classes} classes")));
    }
    Ok(())
}

/// `(softmax(z) − onehot(y)) / B` per row; softmax with the row max subtracted first.
pub fn softmax_xent_grad(logits: &CpuTensor, labels: &[u32]) -> Result<CpuTensor> {
    let (b, c) = (logits.rows(), logits.cols());
    check_labels(labels, b, c)?;
    let mut out = logits.to_vec();
    let inv_b = 1.0 / b as f32;
    for (row, &y) in out.chunks_exact_mut(c).zip(labels) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        for (j, v) in row.iter_mut().enumerate() {
            let onehot = if j == y as usize { 1.0 } else { 0.0 };
            *v = (*v / sum - onehot) * inv_b;
        }
    }
    CpuTensor::new(out, b, c)
}

/// The derivative of each activation at `x`, as autograd computes it.
pub fn activation_derivative(x: f32, act: Activation) -> f32 {
    match act {
        Activation::None => 1.0,
        // d/dx x·Φ(x) = Φ(x) + x·φ(x), φ(x) = e^{−x²/2}/√(2π).
        Activation::Gelu => {
            const INV_SQRT_2PI: f32 = 0.398_942_3;
            let cdf = 0.5 * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2));
            cdf + x * INV_SQRT_2PI * (-0.5 * x * x).exp()
        }
        // u = √(2/π)·(x + 0.044715x³): d/dx 0.5x(1 + tanh u) = 0.5(1 + tanh u) + 0.5x(1 − tanh²u)·√(2/π)(1 + 3·0.044715x²).
        Activation::GeluTanh => {
            const SQRT_2_OVER_PI: f32 = 0.797_884_6;
            let t = (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh();
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
        }
        // torch's relu backward passes the gradient where the output is > 0 (zero at x = 0).
        Activation::Relu => {
            if x > 0.0 { 1.0 } else { 0.0 }
        }
        Activation::Tanh => {
            let t = activate(x, Activation::Tanh);
            1.0 - t * t
        }
        // d/dx x·σ(x) = σ(x)·(1 + x·(1 − σ(x))).
        Activation::Silu => {
            let s = 1.0 / (1.0 + (-x).exp());
            s * (1.0 + x * (1.0 - s))
        }
    }
}

pub fn activation_grad(dy: &CpuTensor, pre: &CpuTensor, act: Activation) -> Result<CpuTensor> {
    expect_dims(pre, dy.rows(), dy.cols(), "activation_grad pre-activation (same shape as dy)")?;
    let out = dy.data().iter().zip(pre.data()).map(|(&g, &x)| g * activation_derivative(x, act)).collect();
    CpuTensor::new(out, dy.rows(), dy.cols())
}

/// One AdamW step; see [`AdamWStep`] for the update, in torch's order, and [`crate::backend::Backend::adamw`] for
/// `norm_sq` (the squared global norm: clipping, and no update where it is not finite).
pub fn adamw(p: &CpuTensor, g: &CpuTensor, m: &CpuTensor, v: &CpuTensor, s: &AdamWStep, norm_sq: Option<f32>)
    -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
    let (r, c) = (p.rows(), p.cols());
    expect_dims(g, r, c, "adamw gradient (shape of the parameter)")?;
    expect_dims(m, r, c, "adamw first moment (shape of the parameter)")?;
    expect_dims(v, r, c, "adamw second moment (shape of the parameter)")?;
    if s.max_grad_norm.is_some() && norm_sq.is_none() {
        return Err(Error::Input("adamw: clipping by global norm needs the gradients' squared norm".into()));
    }
    let Some(scale) = s.effective_scale(norm_sq) else {
        return Ok((p.clone(), m.clone(), v.clone())); // a non-finite norm: nothing changes
    };
    let n = r * c;
    let (mut po, mut mo, mut vo) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
    let step_size = s.lr / s.bias_correction1;
    let (mp, vp) = (mo.as_mut_ptr() as usize, vo.as_mut_ptr() as usize);
    // In bands across the threads: a BERT's word table alone is millions of values, updated every step.
    par_chunks_mut(&mut po, ADAMW_BAND, |ci, band| {
        let i0 = ci * ADAMW_BAND;
        // SAFETY: band ci covers indices i0..i0 + band.len() of m and v too, written by this band alone.
        let (mb, vb) = unsafe {
            (std::slice::from_raw_parts_mut((mp as *mut f32).add(i0), band.len()),
             std::slice::from_raw_parts_mut((vp as *mut f32).add(i0), band.len()))
        };
        for (j, out) in band.iter_mut().enumerate() {
            let i = i0 + j;
            let (pi, gi) = (p.data()[i], g.data()[i] * scale);
            let pi = pi * (1.0 - s.lr * s.weight_decay);
            let mi = s.beta1 * m.data()[i] + (1.0 - s.beta1) * gi;
            let vi = s.beta2 * v.data()[i] + (1.0 - s.beta2) * gi * gi;
            let denom = vi.sqrt() / s.bias_correction2_sqrt + s.eps;
            *out = pi - step_size * mi / denom;
            mb[j] = mi;
            vb[j] = vi;
        }
    });
    Ok((CpuTensor::new(po, r, c)?, CpuTensor::new(mo, r, c)?, CpuTensor::new(vo, r, c)?))
}

/// `a + b`, elementwise.
pub fn add(a: &CpuTensor, b: &CpuTensor) -> Result<CpuTensor> {
    expect_dims(b, a.rows(), a.cols(), "add: b (shape of a)")?;
    CpuTensor::new(a.data().iter().zip(b.data()).map(|(x, y)| x + y).collect(), a.rows(), a.cols())
}

/// `act(x)`, elementwise.
pub fn activation(x: &CpuTensor, act: Activation) -> Result<CpuTensor> {
    CpuTensor::new(x.data().iter().map(|&v| activate(v, act)).collect(), x.rows(), x.cols())
}

/// `x ⊙ M · scale` (see [`crate::backend::Dropout`]), elementwise in row-major order.
pub fn dropout(x: &CpuTensor, d: Dropout) -> Result<CpuTensor> {
    d.check()?;
    let (key, threshold, scale) = (d.key(), d.threshold(), d.scale());
    let out = x
        .data()
        .iter()
        .enumerate()
        .map(|(i, &v)| if Dropout::keeps(key, threshold, i as u32) { v * scale } else { 0.0 })
        .collect();
    CpuTensor::new(out, x.rows(), x.cols())
}

/// Column sums `(1, N)`, accumulated in f64 row by row.
pub fn sum_rows(x: &CpuTensor) -> Result<CpuTensor> {
    let n = x.cols();
    let mut acc = vec![0f64; n];
    for row in x.data().chunks_exact(n.max(1)) {
        acc.iter_mut().zip(row).for_each(|(a, &v)| *a += v as f64);
    }
    CpuTensor::new(acc.into_iter().map(|v| v as f32).collect(), 1, n)
}

/// `Σ x²` `(1, 1)`, accumulated in f64.
pub fn sum_squares(x: &CpuTensor) -> Result<CpuTensor> {
    CpuTensor::new(vec![x.data().iter().map(|&v| v as f64 * v as f64).sum::<f64>() as f32], 1, 1)
}

/// Back through `gather_rows`: `x (rows.len(), N)` added into the rows `rows` of a zero `(total, N)`.
pub fn scatter_rows(x: &CpuTensor, rows: &[u32], total: usize) -> Result<CpuTensor> {
    let n = x.cols();
    expect_dims(x, rows.len(), n, "scatter_rows x (one row per index)")?;
    if let Some(&r) = rows.iter().find(|&&r| r as usize >= total) {
        return Err(Error::Input(format!("scatter_rows: row {r} is outside the {total} rows of the output")));
    }
    let mut out = vec![0f32; total * n];
    for (&r, src) in rows.iter().zip(x.data().chunks_exact(n.max(1))) {
        out[r as usize * n..(r as usize + 1) * n].iter_mut().zip(src).for_each(|(o, &v)| *o += v);
    }
    CpuTensor::new(out, total, n)
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_close, rand_vec};
    use super::*;

    /// Against a plain f64 triple loop; the GEMM reorders sums (see matmul.rs for the bound).
    const ATOL: f32 = 1e-5;
    const RTOL: f32 = 1e-5;

    #[test]
    fn matmul_with_transposes_matches_loops() {
        for &(m, k, n) in &[(1, 1, 1), (7, 33, 5), (33, 7, 1), (8, 384, 3), (1, 513, 7)] {
            let a = rand_vec(m * k, 1);
            let b = rand_vec(k * n, 2);
            let mut want = vec![0f32; m * n];
            for i in 0..m {
                for j in 0..n {
                    want[i * n + j] = (0..k).map(|l| a[i * k + l] as f64 * b[l * n + j] as f64).sum::<f64>() as f32;
                }
            }
            let t = |d: &[f32], r: usize, c: usize| {
                let mut o = vec![0f32; r * c];
                for i in 0..r {
                    for j in 0..c {
                        o[j * r + i] = d[i * c + j];
                    }
                }
                o
            };
            let at = CpuTensor::new(t(&a, m, k), k, m).unwrap();
            let bt = CpuTensor::new(t(&b, k, n), n, k).unwrap();
            let a = CpuTensor::new(a, m, k).unwrap();
            let b = CpuTensor::new(b, k, n).unwrap();
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let got = matmul(if ta { &at } else { &a }, ta, if tb { &bt } else { &b }, tb).unwrap();
                assert_eq!((got.rows(), got.cols()), (m, n));
                assert_close(got.data(), &want, ATOL, RTOL, &format!("matmul {m}x{k}x{n} ta={ta} tb={tb}"));
            }
        }
        let a = CpuTensor::new(vec![0.0; 6], 2, 3).unwrap();
        assert!(matmul(&a, false, &a, false).is_err());
    }

    #[test]
    fn activation_derivatives_match_finite_differences() {
        for act in [Activation::Gelu, Activation::GeluTanh, Activation::Relu, Activation::Tanh, Activation::Silu, Activation::None] {
            for &x in &[-3.0f32, -1.1, -0.3, 0.2, 0.9, 2.5] {
                let h = 1e-3f64;
                let f = |x: f64| activate(x as f32, act) as f64;
                let fd = (f(x as f64 + h) - f(x as f64 - h)) / (2.0 * h);
                let d = activation_derivative(x, act) as f64;
                assert!((fd - d).abs() < 2e-3, "{act:?}'({x}) = {d}, finite difference {fd}");
            }
        }
    }

    /// f32 softmax of small logits against f64: a few ulps of values ≤ 1.
    const XENT_ATOL: f32 = 1e-7;

    #[test]
    fn xent_grad_matches_f64_and_checks_labels() {
        let logits = [1.0f32, 2.0, 3.0, -0.5, 0.25, 0.0, 1000.0, 0.0, -1000.0];
        let labels = [2u32, 0, 0];
        let z = CpuTensor::new(logits.to_vec(), 3, 3).unwrap();
        let g = softmax_xent_grad(&z, &labels).unwrap();
        assert_eq!((g.rows(), g.cols()), (3, 3));
        // (softmax(z) − onehot(y)) / B in f64, straight from the definition (row 2's exp(1000) would overflow: its
        // softmax is (1, 0, 0) to f64 precision, and the label is 0, so its gradient is 0).
        let mut want = Vec::new();
        for (row, &y) in logits.chunks(3).zip(&labels) {
            let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
            let e: Vec<f64> = row.iter().map(|&v| (v as f64 - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for (j, ej) in e.iter().enumerate() {
                want.push(((ej / sum - f64::from(u8::from(j == y as usize))) / 3.0) as f32);
            }
        }
        assert_close(g.data(), &want, XENT_ATOL, 0.0, "softmax_xent_grad");
        // The rows that are not already right carry a gradient: a kernel returning zeros cannot pass.
        assert!(g.data()[..6].iter().all(|v| v.abs() > 1e-3), "{:?}", g.data());
        assert!(softmax_xent_grad(&z, &[3, 0, 0]).is_err());
        assert!(softmax_xent_grad(&z, &[0]).is_err());
    }
}
