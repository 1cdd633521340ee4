//! The rotary families' two ops: rotary position embeddings on the queries and keys, and the gated feed-forward's
//! product. The GPU kernels (shaders/rotary.wgsl, shaders/glu.wgsl) compute the same; the math is in
//! `Backend::rotary` and `Backend::glu`.

use super::matmul::activate;
use super::train::activation_derivative;
use super::{expect_dims, par_chunks_mut, CpuTensor};
use crate::backend::{check_rotary, Activation, AttentionShape};
use crate::{Error, Result};

/// Rows of a task when the work is split among threads.
const ROWS_PER_TASK: usize = 16;

/// [`crate::backend::Backend::rotary`].
pub fn rotary(qkv: &CpuTensor, rope: &CpuTensor, s: AttentionShape) -> Result<CpuTensor> {
    let (rows, h) = (s.batch * s.seq, s.heads * s.head_dim);
    expect_dims(qkv, rows, 3 * h, "rotary qkv (B*T, 3H)")?;
    check_rotary(rope.rows(), rope.cols(), s)?;
    let (d, half) = (s.head_dim, s.head_dim / 2);
    let (src, table) = (qkv.data(), rope.data());
    let mut out = src.to_vec(); // the values (and everything not rotated) as they are
    if rows > 0 && h > 0 {
        par_chunks_mut(&mut out, ROWS_PER_TASK * 3 * h, |ci, chunk| {
            for (ri, row) in chunk.chunks_exact_mut(3 * h).enumerate() {
                let r = ci * ROWS_PER_TASK + ri;
                let t = r % s.seq;
                let (cos, sin) = table[t * d..(t + 1) * d].split_at(half);
                let x = &src[r * 3 * h..(r + 1) * 3 * h];
                // Queries then keys; each head's first half pairs with its second.
                for head in 0..2 * s.heads {
                    let o = head * d;
                    for i in 0..half {
                        let (a, b) = (x[o + i], x[o + half + i]);
                        row[o + i] = a * cos[i] - b * sin[i];
                        row[o + half + i] = b * cos[i] + a * sin[i];
                    }
                }
            }
        });
    }
    CpuTensor::new(out, rows, 3 * h)
}

/// [`crate::backend::Backend::glu`]: x `(R, 2I)` = `[up | gate]` → `up ⊙ act(gate)` `(R, I)`.
pub fn glu(x: &CpuTensor, act: Activation) -> Result<CpuTensor> {
    if x.cols() % 2 != 0 {
        return Err(Error::Input(format!("glu: x has {} columns; it must hold [up | gate], an even number", x.cols())));
    }
    let (rows, n) = (x.rows(), x.cols() / 2);
    let src = x.data();
    let mut out = vec![0f32; rows * n];
    if rows > 0 && n > 0 {
        par_chunks_mut(&mut out, ROWS_PER_TASK * n, |ci, chunk| {
            for (ri, row) in chunk.chunks_exact_mut(n).enumerate() {
                let r = ci * ROWS_PER_TASK + ri;
                let (up, gate) = src[r * 2 * n..(r + 1) * 2 * n].split_at(n);
                for ((o, &u), &g) in row.iter_mut().zip(up).zip(gate) {
                    *o = u * activate(g, act);
                }
            }
        });
    }
    CpuTensor::new(out, rows, n)
}

/// [`crate::backend::Backend::glu_backward`]: dy `(R, I)`, x `(R, 2I)` = `[up | gate]` → dx `(R, 2I)` =
/// `[dy ⊙ act(gate) | dy ⊙ up ⊙ act'(gate)]`.
pub fn glu_backward(dy: &CpuTensor, x: &CpuTensor, act: Activation) -> Result<CpuTensor> {
    if x.cols() % 2 != 0 {
        return Err(Error::Input(format!("glu_backward: x has {} columns; it must hold [up | gate], an even number", x.cols())));
    }
    let (rows, n) = (x.rows(), x.cols() / 2);
    expect_dims(dy, rows, n, "glu_backward dy (R, I)")?;
    let (src, g) = (x.data(), dy.data());
    let mut out = vec![0f32; rows * 2 * n];
    if rows > 0 && n > 0 {
        par_chunks_mut(&mut out, ROWS_PER_TASK * 2 * n, |ci, chunk| {
            for (ri, row) in chunk.chunks_exact_mut(2 * n).enumerate() {
                let r = ci * ROWS_PER_TASK + ri;
                let (up, gate) = src[r * 2 * n..(r + 1) * 2 * n].split_at(n);
                let dy = &g[r * n..(r + 1) * n];
                let (dup, dgate) = row.split_at_mut(n);
                for c in 0..n {
                    dup[c] = dy[c] * activate(gate[c], act);
                    dgate[c] = dy[c] * up[c] * activation_derivative(gate[c], act);
                }
            }
        });
    }
    CpuTensor::new(out, rows, 2 * n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the definition in f64: q·cos + rotate_half(q)·sin, with rotate_half(q) = [−q₂, q₁].
    #[test]
    fn rotary_matches_rotate_half() {
        let s = AttentionShape { batch: 2, seq: 3, heads: 2, head_dim: 4 };
        let (rows, h, d) = (6, 8, 4);
        let x: Vec<f32> = (0..rows * 3 * h).map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0).collect();
        let theta = 10.0f64;
        let mut table = vec![0f32; s.seq * d];
        for t in 0..s.seq {
            for i in 0..d / 2 {
                let a = t as f64 / theta.powf(2.0 * i as f64 / d as f64);
                table[t * d + i] = a.cos() as f32;
                table[t * d + d / 2 + i] = a.sin() as f32;
            }
        }
        let qkv = CpuTensor::new(x.clone(), rows, 3 * h).unwrap();
        let got = rotary(&qkv, &CpuTensor::new(table.clone(), s.seq, d).unwrap(), s).unwrap().to_vec();
        for r in 0..rows {
            let t = r % s.seq;
            for c in 0..3 * h {
                let (head_start, j) = (c - c % d, c % d);
                let want = if c >= 2 * h {
                    x[r * 3 * h + c] as f64
                } else {
                    let i = j % (d / 2);
                    let (cos, sin) = (table[t * d + i] as f64, table[t * d + d / 2 + i] as f64);
                    let q = |k: usize| x[r * 3 * h + head_start + k] as f64;
                    let rot = if j < d / 2 { -q(j + d / 2) } else { q(j - d / 2) };
                    q(j) * cos + rot * sin
                };
                assert!((got[r * 3 * h + c] as f64 - want).abs() < 1e-6, "row {r} col {c}: {} vs {want}", got[r * 3 * h + c]);
            }
        }
        // Position 0 turns nothing.
        assert_eq!(&got[..3 * h], &x[..3 * h]);
        assert!(rotary(&qkv, &CpuTensor::new(vec![0.0; 2 * d], 2, d).unwrap(), s).is_err(), "a table shorter than T");
    }

    #[test]
    fn glu_is_up_times_act_gate() {
        let x = CpuTensor::new(vec![1.0, 2.0, -3.0, 0.5, 4.0, -1.0, 2.0, 0.0], 2, 4).unwrap();
        let got = glu(&x, Activation::Silu).unwrap().to_vec();
        let silu = |v: f64| v / (1.0 + (-v).exp());
        let want = [1.0 * silu(-3.0), 2.0 * silu(0.5), 4.0 * silu(2.0), -1.0 * silu(0.0)];
        for (g, w) in got.iter().zip(want) {
            assert!((*g as f64 - w).abs() < 1e-6, "{g} vs {w}");
        }
        assert!(glu(&CpuTensor::new(vec![0.0; 3], 1, 3).unwrap(), Activation::Gelu).is_err());
    }

    /// `glu_backward` against central differences of Σ dy ⊙ glu(x) in f64 (SwiGLU's SiLU, GeGLU's two GELUs), and a
    /// dy of the wrong shape refused.
    #[test]
    fn glu_backward_matches_finite_differences() {
        let (rows, n) = (3, 4);
        let x: Vec<f32> = (0..rows * 2 * n).map(|i| ((i * 29 % 31) as f32 - 15.0) / 5.0).collect();
        let dy: Vec<f32> = (0..rows * n).map(|i| ((i * 17 % 13) as f32 - 6.0) / 4.0).collect();
        let dyt = CpuTensor::new(dy.clone(), rows, n).unwrap();
        for act in [Activation::Silu, Activation::Gelu, Activation::GeluTanh] {
            let got = glu_backward(&dyt, &CpuTensor::new(x.clone(), rows, 2 * n).unwrap(), act).unwrap().to_vec();
            let f = |v: &[f32]| -> f64 {
                let y = glu(&CpuTensor::new(v.to_vec(), rows, 2 * n).unwrap(), act).unwrap().to_vec();
                y.iter().zip(&dy).map(|(a, b)| *a as f64 * *b as f64).sum()
            };
            let eps = 1e-2f32;
            for j in 0..x.len() {
                let (mut up, mut down) = (x.clone(), x.clone());
                up[j] += eps;
                down[j] -= eps;
                let fd = (f(&up) - f(&down)) / (2.0 * eps as f64);
                // Central differences of a smooth function: O(eps²) truncation, f32 rounding of the sums / eps.
                assert!((fd - got[j] as f64).abs() < 2e-3 * (1.0 + fd.abs()), "{act:?} x[{j}]: {} vs {fd}", got[j]);
            }
        }
        assert!(glu_backward(&CpuTensor::new(vec![0.0; 3], 1, 3).unwrap(), &CpuTensor::new(x, rows, 2 * n).unwrap(),
            Activation::Silu).is_err());
    }
}
