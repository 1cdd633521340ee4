//! The rotary families' ops: rotary position embeddings on the queries and keys, and the gated feed-forward's
//! product, alone or in the epilogue of its up-projection's GEMM ([`linear_glu`]). The GPU kernels
//! (shaders/rotary.wgsl, shaders/glu.wgsl) compute the same; the math is in `Backend::rotary`, `Backend::glu` and
//! `Backend::linear_glu`.

use super::matmul::{activate, gemm_nt_raw, DotX, CHUNKS_PER_THREAD, PARALLEL_MIN_MACS, SMALL_M, WIDE_ALIGN, XB};
use super::train::activation_derivative;
use super::{expect_dims, par_chunks_mut, par_for, scratch, threads, CpuTensor, SharedOut};
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
                glu_row(row, up, gate, act);
            }
        });
    }
    CpuTensor::new(out, rows, n)
}

/// `out = up ⊙ act(gate)`, one loop per activation so that each is a straight-line body the compiler can vectorise
/// (GELU's `fastmath` erf; a `match` per element kept the loop scalar).
fn glu_row(out: &mut [f32], up: &[f32], gate: &[f32], act: Activation) {
    let each = out.iter_mut().zip(up).zip(gate);
    match act {
        Activation::None => each.for_each(|((o, &u), &g)| *o = u * g),
        Activation::Gelu => each.for_each(|((o, &u), &g)| *o = u * super::fastmath::gelu(g)),
        Activation::Silu => each.for_each(|((o, &u), &g)| *o = u * activate(g, Activation::Silu)),
        _ => each.for_each(|((o, &u), &g)| *o = u * activate(g, act)),
    }
}

/// Rows of x per GEMM in [`linear_glu`]: a block's `[up | gate]` (rows × 2·columns) lives in the thread's scratch
/// until its product is taken (1.5 MiB at 256 rows of 2 × 768 columns).
const GLU_ROWS: usize = 256;

/// [`crate::backend::Backend::linear_glu`] for an f32 w `(2n, k)` = `[up; gate]`, bias `(2n)`: `out (m, n) =
/// (x·upᵀ + b_up) ⊙ act(x·gateᵀ + b_gate)`. The output's columns are split between the threads as in
/// [`super::matmul::linear`] (each packs only its rows of W), or for many rows the rows; a block of rows × columns
/// c0..c1 multiplies its rows of x by up's and gate's rows c0..c1 into the thread's scratch, then writes the product, so the `(m, 2n)` `[up | gate]` of
/// `linear` then `glu` is never stored and read back. Each value is the same dot product, bias add and activation as
/// through the two ops: bit for bit their result.
#[allow(clippy::too_many_arguments)]
pub fn linear_glu(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, bias: Option<&[f32]>, act: Activation,
    out: &mut [f32]) {
    assert!(x.len() == m * k && w.len() == 2 * n * k && out.len() == m * n && bias.is_none_or(|b| b.len() == 2 * n));
    if m == 0 || n == 0 {
        return;
    }
    let threads = if m * 2 * n * k >= PARALLEL_MIN_MACS { threads() } else { 1 };
    // Blocks of columns: for a few rows, blocks of 4 (the dot kernel's tile), several per thread as in `linear`; for
    // more rows, one block of whole micro-kernel panels per thread while M ≤ 2n; beyond, all columns, the rows split.
    let step = match threads {
        1 => n,
        t if m <= XB => n.div_ceil(CHUNKS_PER_THREAD * t).next_multiple_of(4),
        t if m <= 2 * n => n.div_ceil(t).next_multiple_of(WIDE_ALIGN),
        _ => n,
    };
    let col_blocks = n.div_ceil(step);
    // Blocks of rows of about GLU_ROWS (at least one per thread when the columns are not split), evened out; none
    // under SMALL_M + 1 rows but a whole few-row x, which takes the few-row kernel as in `linear`.
    let target = if col_blocks == 1 { GLU_ROWS.min(m.div_ceil(threads)) } else { GLU_ROWS };
    let row_blocks = m.div_ceil(target.max(SMALL_M + 1));
    let rows_per_block = m.div_ceil(row_blocks);
    let xd = (m <= SMALL_M).then(|| DotX::new(x, m, k));
    // The output's start, shared by the tasks; each writes only its own rows × columns.
    let base = SharedOut(out.as_mut_ptr());
    par_for(col_blocks * row_blocks, |t| {
        let (c0, r0) = ((t % col_blocks) * step, (t / col_blocks) * rows_per_block);
        let (c1, rows) = ((c0 + step).min(n), rows_per_block.min(m - r0));
        let bw = c1 - c0;
        let (up_w, gate_w) = (&w[c0 * k..c1 * k], &w[(n + c0) * k..(n + c1) * k]);
        scratch::with(|s| {
            if s.len() < rows * 2 * bw {
                s.resize(rows * 2 * bw, 0.0);
            }
            let both = &mut s[..rows * 2 * bw]; // (rows, 2·bw): [up | gate] of columns c0..c1
            let p = both.as_mut_ptr();
            // SAFETY: x's rows r0..r0 + rows and W's rows are in bounds (asserted above); `both` holds `rows` rows of
            // 2·bw, the up block at column 0 and the gate block at column bw.
            unsafe {
                match &xd {
                    Some(xd) => {
                        xd.gemm(up_w, bw, p, 2 * bw);
                        xd.gemm(gate_w, bw, p.add(bw), 2 * bw);
                    }
                    None => {
                        let xr = &x[r0 * k..(r0 + rows) * k];
                        gemm_nt_raw(xr, rows, k, up_w, bw, p, 2 * bw);
                        gemm_nt_raw(xr, rows, k, gate_w, bw, p.add(bw), 2 * bw);
                    }
                }
            }
            for (i, row) in both.chunks_exact_mut(2 * bw).enumerate() {
                let (up, gate) = row.split_at_mut(bw);
                if let Some(b) = bias {
                    up.iter_mut().zip(&b[c0..c1]).for_each(|(v, bb)| *v += bb);
                    gate.iter_mut().zip(&b[n + c0..n + c1]).for_each(|(v, bb)| *v += bb);
                }
                // SAFETY: row r0 + i < m, columns c0..c1 ≤ n of `out`; no other task's rows × columns overlap these.
                let o = unsafe { std::slice::from_raw_parts_mut(base.ptr().add((r0 + i) * n + c0), bw) };
                glu_row(o, up, gate, act);
            }
        });
    });
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

    /// The fused `linear_glu` against the f64 reference `(x·upᵀ + b_up)·act(x·gateᵀ + b_gate)`, and bit for bit
    /// against `linear` then `glu` (the same dot products, bias adds and activation), on 1 and 3 threads: M of a few
    /// rows (the dot kernel), past `XB` and past one row block (`GLU_ROWS`, a ragged last one), N off a multiple of 4
    /// and of a column block, K off a multiple of 4; with and without a bias.
    #[test]
    fn linear_glu_matches_reference_and_the_two_ops() {
        use super::super::matmul::linear;
        use crate::testutil::{assert_close, rand_vec};
        for &(m, k, n) in &[(1, 7, 1), (5, 64, 130), (SMALL_M, 33, 9), (70, 48, 37), (600, 20, 70), (17, 384, 192)] {
            let (x, w, b) = (rand_vec(m * k, 51), rand_vec(2 * n * k, 52), rand_vec(2 * n, 53));
            for act in [Activation::Silu, Activation::Gelu, Activation::GeluTanh] {
                for bias in [Some(&b[..]), None] {
                    let dot = |i: usize, j: usize| -> f64 {
                        let s: f64 = (0..k).map(|l| x[i * k + l] as f64 * w[j * k + l] as f64).sum();
                        s + bias.map_or(0.0, |b| b[j] as f64)
                    };
                    let want: Vec<f32> = (0..m * n)
                        .map(|e| (dot(e / n, e % n) * activate(dot(e / n, n + e % n) as f32, act) as f64) as f32)
                        .collect();
                    for threads in [1, 3] {
                        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                        let (got, two) = pool.install(|| {
                            let (mut got, mut both) = (vec![f32::NAN; m * n], vec![f32::NAN; m * 2 * n]);
                            linear_glu(&x, m, k, &w, n, bias, act, &mut got);
                            linear(&x, m, k, &w, 2 * n, bias, Activation::None, &mut both);
                            (got, glu(&CpuTensor::new(both, m, 2 * n).unwrap(), act).unwrap().to_vec())
                        });
                        let what = format!("linear_glu {m}x{k}x{n} {act:?} bias {} on {threads} threads", bias.is_some());
                        // The GEMM's f32 rounding (matmul's GEMM_ATOL, scaled with K) through a product of two.
                        assert_close(&got, &want, 1e-5 * (k as f32 / 16.0).max(1.0), 1e-4, &what);
                        assert!(got.iter().zip(&two).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: ≠ linear + glu");
                    }
                }
            }
        }
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
