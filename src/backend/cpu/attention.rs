//! Multi-head self-attention over a padded batch: `softmax(q·kᵀ/√d + maskbias)·v` per (sequence, head).
//!
//! Each (sequence, head) pair is an independent task (parallel natively): two strided GEMMs read q, k and v straight
//! out of the fused `(B*T, 3H)` projection (no per-head copies), with a masked softmax between them. Padded keys get
//! probability exactly 0 (the `-inf` bias of the op's contract); a query whose keys are all padding gets a zero
//! context row rather than NaN.

use super::{expect_dims, par_for, CpuTensor};
use crate::backend::AttentionShape;
use crate::{Error, Result};

/// A pointer the tasks share; each task writes a disjoint block of the output.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint (rows of sequence b) × (columns of head h) blocks, see `attention`.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// `qkv (B*T, 3H)`, `mask (B, T)` (non-zero = real token) → context `(B*T, H)`.
pub fn attention(qkv: &CpuTensor, mask: &CpuTensor, s: AttentionShape) -> Result<CpuTensor> {
    let AttentionShape { batch, seq, heads, head_dim } = s;
    let h = heads * head_dim;
    if heads == 0 || head_dim == 0 {
        return Err(Error::Input(format!("attention needs at least one head of positive size, got {s:?}")));
    }
    expect_dims(qkv, batch * seq, 3 * h, "attention qkv (B*T, 3H)")?;
    expect_dims(mask, batch, seq, "attention mask (B, T)")?;
    let mut out = vec![0f32; batch * seq * h]; // (B*T, H)
    if batch * seq == 0 {
        return CpuTensor::new(out, batch * seq, h);
    }
    let qkv = qkv.data();
    let mask = mask.data();
    let scale = 1.0 / (head_dim as f32).sqrt();
    let optr = OutPtr(out.as_mut_ptr());
    par_for(batch * heads, |task| {
        let optr = optr;
        let (b, hd) = (task / heads, task % heads);
        let m = &mask[b * seq..(b + 1) * seq]; // (T)
        let base = b * seq * 3 * h + hd * head_dim;
        let mut scores = vec![0f32; seq * seq]; // (T, T): query i, key j
        // SAFETY: q is rows b*T..(b+1)*T, columns hd*d..(hd+1)*d of qkv; k and v the same columns shifted by H and
        // 2H: all inside qkv (B*T, 3H). `scores` is (T, T) contiguous.
        unsafe {
            matrixmultiply::sgemm(
                seq, head_dim, seq, scale,
                qkv.as_ptr().add(base), (3 * h) as isize, 1,
                qkv.as_ptr().add(base + h), 1, (3 * h) as isize,
                0.0,
                scores.as_mut_ptr(), seq as isize, 1,
            );
        }
        for row in scores.chunks_exact_mut(seq) {
            masked_softmax(row, m);
        }
        // SAFETY: v as above; the output block rows b*T..(b+1)*T, columns hd*d..(hd+1)*d of out (B*T, H) belongs to
        // this task alone.
        unsafe {
            matrixmultiply::sgemm(
                seq, seq, head_dim, 1.0,
                scores.as_ptr(), seq as isize, 1,
                qkv.as_ptr().add(base + 2 * h), (3 * h) as isize, 1,
                0.0,
                optr.0.add(b * seq * h + hd * head_dim), h as isize, 1,
            );
        }
    });
    CpuTensor::new(out, batch * seq, h)
}

/// In-place softmax over the keys whose mask is non-zero; masked keys get 0, and a row with no real key is all 0.
///
/// Max and sum run in 8 lanes (then combined in a fixed order) so that they vectorise: an f32 reduction in strict
/// order is a chain of dependent adds the compiler may not reorder.
fn masked_softmax(row: &mut [f32], mask: &[f32]) {
    const L: usize = 8;
    let split = row.len() / L * L;
    let mut lanes = [f32::NEG_INFINITY; L];
    for (c, m) in row[..split].chunks_exact(L).zip(mask[..split].chunks_exact(L)) {
        for l in 0..L {
            let v = if m[l] != 0.0 { c[l] } else { f32::NEG_INFINITY };
            lanes[l] = if v > lanes[l] { v } else { lanes[l] };
        }
    }
    let mut max = lanes.iter().fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    for (&v, &m) in row[split..].iter().zip(&mask[split..]) {
        if m != 0.0 && v > max {
            max = v;
        }
    }
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    // Exponentials in one branch-free loop (vectorises with `fastmath::exp`).
    for (v, &m) in row.iter_mut().zip(mask) {
        let e = super::fastmath::exp(*v - max);
        *v = if m != 0.0 { e } else { 0.0 };
    }
    let mut sums = [0f32; L];
    for c in row[..split].chunks_exact(L) {
        for l in 0..L {
            sums[l] += c[l];
        }
    }
    let sum = ((sums[0] + sums[4]) + (sums[1] + sums[5])) + ((sums[2] + sums[6]) + (sums[3] + sums[7]))
        + row[split..].iter().sum::<f32>();
    let inv = 1.0 / sum;
    row.iter_mut().for_each(|v| *v *= inv);
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, rand_vec};
    use super::super::CpuBackend;
    use super::*;
    use crate::backend::Backend;

    /// f32 GEMMs + f32 exp against an f64 reference, |q|,|k|,|v| < 1 and d ≤ 64: errors are a few ulps of the
    /// O(1) outputs.
    const ATT_ATOL: f32 = 2e-5;
    const ATT_RTOL: f32 = 1e-5;

    fn reference(qkv: &[f32], mask: &[f32], b: usize, t: usize, heads: usize, d: usize) -> Vec<f32> {
        let h = heads * d;
        let mut out = vec![0f32; b * t * h];
        for bi in 0..b {
            for hd in 0..heads {
                for i in 0..t {
                    let q = |l: usize| qkv[(bi * t + i) * 3 * h + hd * d + l] as f64;
                    let mut w = vec![0f64; t];
                    let mut any = false;
                    for j in 0..t {
                        if mask[bi * t + j] == 0.0 {
                            w[j] = f64::NEG_INFINITY;
                            continue;
                        }
                        any = true;
                        w[j] = (0..d).map(|l| q(l) * qkv[(bi * t + j) * 3 * h + h + hd * d + l] as f64).sum::<f64>()
                            / (d as f64).sqrt();
                    }
                    if !any {
                        continue;
                    }
                    let mx = w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = w.iter().map(|&x| (x - mx).exp()).collect();
                    let s: f64 = e.iter().sum();
                    for l in 0..d {
                        let v: f64 = (0..t).map(|j| e[j] / s * qkv[(bi * t + j) * 3 * h + 2 * h + hd * d + l] as f64).sum();
                        out[(bi * t + i) * h + hd * d + l] = v as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn attention_matches_reference_with_padding() {
        let cpu = CpuBackend;
        // (batch, seq, heads, head_dim, real lengths per sequence)
        let cases: &[(usize, usize, usize, usize, &[usize])] = &[
            (1, 1, 1, 1, &[1]),
            (2, 7, 3, 5, &[7, 3]),
            (3, 33, 2, 16, &[33, 1, 0]), // a fully padded sequence → zeros
            (1, 513, 1, 7, &[500]),
            (2, 9, 12, 4, &[9, 9]),
        ];
        for &(b, t, heads, d, lens) in cases {
            let h = heads * d;
            let qkv = rand_vec(b * t * 3 * h, (b * t * h) as u64).iter().map(|v| v * 2.0).collect::<Vec<_>>();
            let mut mask = vec![0f32; b * t];
            for (bi, &l) in lens.iter().enumerate() {
                mask[bi * t..bi * t + l].fill(1.0);
            }
            let tq = cpu.input(&qkv, b * t, 3 * h).unwrap();
            let tm = cpu.input(&mask, b, t).unwrap();
            let got = cpu.attention(&tq, &tm, AttentionShape { batch: b, seq: t, heads, head_dim: d }).unwrap();
            let want = reference(&qkv, &mask, b, t, heads, d);
            assert_close(got.data(), &want, ATT_ATOL, ATT_RTOL, &format!("attention b{b} t{t} heads{heads} d{d}"));
            if lens.contains(&0) {
                let bi = lens.iter().position(|&l| l == 0).unwrap();
                assert!(got.data()[bi * t * h..(bi + 1) * t * h].iter().all(|&v| v == 0.0));
            }
        }
    }

    #[test]
    fn padding_keys_do_not_leak() {
        // Same real tokens, different garbage in the padding: identical context rows for the real queries.
        let cpu = CpuBackend;
        let (t, heads, d) = (6, 2, 3);
        let h = heads * d;
        let mut a = rand_vec(t * 3 * h, 9);
        let tm = cpu.input(&[1., 1., 1., 1., 0., 0.], 1, t).unwrap();
        let shape = AttentionShape { batch: 1, seq: t, heads, head_dim: d };
        let x = cpu.attention(&cpu.input(&a, t, 3 * h).unwrap(), &tm, shape).unwrap();
        for v in &mut a[4 * 3 * h..] {
            *v = 1e3;
        }
        let y = cpu.attention(&cpu.input(&a, t, 3 * h).unwrap(), &tm, shape).unwrap();
        assert_eq!(x.data()[..4 * h], y.data()[..4 * h]);
    }

    #[test]
    fn shape_errors() {
        let cpu = CpuBackend;
        let q = cpu.input(&[0.0; 12], 2, 6).unwrap();
        let m = cpu.input(&[1.0; 2], 1, 2).unwrap();
        assert!(cpu.attention(&q, &m, AttentionShape { batch: 1, seq: 2, heads: 2, head_dim: 1 }).is_ok());
        assert!(cpu.attention(&q, &m, AttentionShape { batch: 1, seq: 2, heads: 1, head_dim: 1 }).is_err());
        assert!(cpu.attention(&q, &m, AttentionShape { batch: 2, seq: 1, heads: 2, head_dim: 1 }).is_err());
    }
}
