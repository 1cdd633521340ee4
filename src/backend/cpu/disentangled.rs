//! DeBERTa's disentangled attention for training (`Backend::attention_dropout_disentangled` and
//! `Backend::attention_backward_disentangled`; the model's side is `model::disentangled`): per (sequence, head) task,
//! plain GEMMs as [`super::attention`]'s training ops, the scores
//!
//! ```text
//! S_ij = (q_i·k_j + c2p[i, r] + p2c[j, r]) · s     c2p = Q·posKᵀ (T, R), p2c = K·posQᵀ (K, R), r = rows[j − i + T − 1]
//! ```
//!
//! with `s = 1/√(3d)`, and back: with `G = dS · s` (dS the softmax input's gradient, as the plain backward),
//! `dc2p[i, r] = Σ_{j: r(i,j) = r} G_ij`, `dp2c[j, r] = Σ_{i: r(i,j) = r} G_ij`, then
//! `dq = G·k + dc2p·posK`, `dk = Gᵀ·q + dp2c·posQ`, `dposK = dc2pᵀ·q`, `dposQ = dp2cᵀ·k`, the last two summed over
//! the sequences (each task writes its own partial; a head's are summed in sequence order afterwards).

use super::attention::{dropout_factors, gemm, softmax_rows, take};
use super::{expect_dims, par_for, CpuTensor, SharedOut};
use crate::backend::{AttentionShape, Dropout};
use crate::{Error, Result};

/// Checks the shapes and the row indices; returns R.
fn check(qkv: &CpuTensor, mask: &CpuTensor, pos: &CpuTensor, rows: &CpuTensor, s: AttentionShape, what: &str)
    -> Result<usize> {
    let AttentionShape { batch, seq, heads, head_dim } = s;
    let h = heads * head_dim;
    if heads == 0 || head_dim == 0 {
        return Err(Error::Input(format!("{what} needs at least one head of positive size, got {s:?}")));
    }
    expect_dims(qkv, batch * seq, 3 * h, &format!("{what} qkv (B*T, 3H)"))?;
    expect_dims(mask, batch, seq, &format!("{what} mask (B, T)"))?;
    expect_dims(rows, 1, (2 * seq).saturating_sub(1), &format!("{what} rows (1, 2T - 1)"))?;
    expect_dims(pos, pos.rows(), 3 * h, &format!("{what} pos (R, 3H)"))?;
    if let Some(r) = rows.data().iter().find(|&&r| !(r >= 0.0 && (r as usize) < pos.rows() && r.fract() == 0.0)) {
        return Err(Error::Input(format!("{what} rows: {r} is not a row of pos's {}", pos.rows())));
    }
    Ok(pos.rows())
}

/// One task's operands: q `(T, d)`, its real keys' k and v `(K, d)`, the head's posQ and posK `(R, d)`, the keys,
/// and the probabilities `P` `(T, K)` (softmax of the scores over the real keys) with the row index per (i, key).
struct Task {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    pos_q: Vec<f32>,
    pos_k: Vec<f32>,
    keys: Vec<usize>,
    p: Vec<f32>,
    r: Vec<usize>,
}

#[allow(clippy::too_many_arguments)]
fn task(qkv: &[f32], mask: &[f32], pos: &[f32], index: &[f32], s: AttentionShape, nr: usize, b: usize, hd: usize)
    -> Option<Task> {
    let AttentionShape { seq: t, heads, head_dim: d, .. } = s;
    let (h, ld, qc) = (heads * d, 3 * heads * d, hd * d);
    let keys: Vec<usize> = (0..t).filter(|&j| mask[b * t + j] > 0.5).collect();
    let kn = keys.len();
    if kn == 0 {
        return None;
    }
    let q = take(qkv, 0..t, b * t, ld, qc, d);
    let k = take(qkv, keys.iter().copied(), b * t, ld, h + qc, d);
    let v = take(qkv, keys.iter().copied(), b * t, ld, 2 * h + qc, d);
    let pos_q = take(pos, 0..nr, 0, ld, qc, d);
    let pos_k = take(pos, 0..nr, 0, ld, h + qc, d);
    let scale = 1.0 / (3.0 * d as f32).sqrt();
    let mut p = gemm(t, d, kn, &q, (d, 1), &k, (1, d), 1.0);
    let c2p = gemm(t, d, nr, &q, (d, 1), &pos_k, (1, d), 1.0);
    let p2c = gemm(kn, d, nr, &k, (d, 1), &pos_q, (1, d), 1.0);
    let mut r = vec![0usize; t * kn];
    for i in 0..t {
        for (kj, &j) in keys.iter().enumerate() {
            let row = index[j + t - 1 - i] as usize;
            r[i * kn + kj] = row;
            let x = &mut p[i * kn + kj];
            *x = (*x + c2p[i * nr + row] + p2c[kj * nr + row]) * scale;
        }
    }
    softmax_rows(&mut p, kn);
    Some(Task { q, k, v, pos_q, pos_k, keys, p, r })
}

/// The training forward with dropout `drop` on the probabilities (its mask as [`super::attention`]'s): `qkv (B*T,
/// 3H)`, `mask (B, T)`, `pos (R, 3H)`, `rows (1, 2T − 1)` → context `(B*T, H)`.
pub fn attention_dropout(qkv: &CpuTensor, mask: &CpuTensor, pos: &CpuTensor, rows: &CpuTensor, s: AttentionShape,
    drop: Dropout) -> Result<CpuTensor> {
    drop.check()?;
    let nr = check(qkv, mask, pos, rows, s, "attention_dropout_disentangled")?;
    let AttentionShape { batch, seq, heads, head_dim: d } = s;
    let h = heads * d;
    let mut out = vec![0f32; batch * seq * h];
    let (qkvd, maskd, posd, index) = (qkv.data(), mask.data(), pos.data(), rows.data());
    let optr = SharedOut(out.as_mut_ptr());
    par_for(batch * heads, |tk| {
        let (b, hd) = (tk / heads, tk % heads);
        let Some(mut w) = task(qkvd, maskd, posd, index, s, nr, b, hd) else { return };
        let kn = w.keys.len();
        w.p.iter_mut().zip(dropout_factors(drop, tk, seq, &w.keys)).for_each(|(x, m)| *x *= m);
        let ctx = gemm(seq, kn, d, &w.p, (kn, 1), &w.v, (d, 1), 1.0); // (T, d)
        // SAFETY: this task's block, rows b*T..(b+1)*T × the head's columns, is written by this task alone.
        let o = unsafe { std::slice::from_raw_parts_mut(optr.ptr().add(b * seq * h), seq * h) };
        for i in 0..seq {
            o[i * h + hd * d..i * h + (hd + 1) * d].copy_from_slice(&ctx[i * d..(i + 1) * d]);
        }
    });
    CpuTensor::new(out, batch * seq, h)
}

/// Back through the disentangled attention (with `dropout`, through [`attention_dropout`]): `dctx (B*T, H)` →
/// `dqkv (B*T, 3H)` and `dpos (R, 3H)` = `[dposQ | dposK | 0]`.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(dctx: &CpuTensor, qkv: &CpuTensor, mask: &CpuTensor, pos: &CpuTensor, rows: &CpuTensor,
    s: AttentionShape, dropout: Option<Dropout>) -> Result<(CpuTensor, CpuTensor)> {
    let dropout = dropout.filter(Dropout::is_active);
    if let Some(d) = dropout {
        d.check()?;
    }
    let nr = check(qkv, mask, pos, rows, s, "attention_backward_disentangled")?;
    let AttentionShape { batch, seq, heads, head_dim: d } = s;
    expect_dims(dctx, batch * seq, heads * d, "attention_backward_disentangled dctx (B*T, H)")?;
    let (h, ld) = (heads * d, 3 * heads * d);
    let mut out = vec![0f32; batch * seq * ld];
    // Per task (b, h): [dposQ | dposK] (R, 2d).
    let mut partial = vec![0f32; batch * heads * nr * 2 * d];
    let (qkvd, maskd, posd, index, dctxd) = (qkv.data(), mask.data(), pos.data(), rows.data(), dctx.data());
    let scale = 1.0 / (3.0 * d as f32).sqrt();
    let (optr, pptr) = (SharedOut(out.as_mut_ptr()), SharedOut(partial.as_mut_ptr()));
    par_for(batch * heads, |tk| {
        let (optr, pptr) = (optr, pptr);
        let (b, hd) = (tk / heads, tk % heads);
        let Some(w) = task(qkvd, maskd, posd, index, s, nr, b, hd) else { return };
        let (t, kn, qc) = (seq, w.keys.len(), hd * d);
        let dc = take(dctxd, 0..t, b * seq, h, qc, d);
        let mut dp = gemm(t, d, kn, &dc, (d, 1), &w.v, (1, d), 1.0); // (T, K)
        let dropped = dropout.map(|dr| {
            let m = dropout_factors(dr, tk, t, &w.keys);
            dp.iter_mut().zip(&m).for_each(|(x, &f)| *x *= f);
            w.p.iter().zip(&m).map(|(&x, &f)| x * f).collect::<Vec<f32>>()
        });
        // G = P ⊙ (dP − rowsum(dP ⊙ P)) · s, and its sums by relative row.
        let mut g = vec![0f32; t * kn];
        let (mut dc2p, mut dp2c) = (vec![0f32; t * nr], vec![0f32; kn * nr]);
        for i in 0..t {
            let (pr, dpr) = (&w.p[i * kn..(i + 1) * kn], &dp[i * kn..(i + 1) * kn]);
            let dot: f64 = pr.iter().zip(dpr).map(|(&a, &c)| a as f64 * c as f64).sum();
            for kj in 0..kn {
                let x = pr[kj] * (dpr[kj] - dot as f32) * scale;
                g[i * kn + kj] = x;
                let r = w.r[i * kn + kj];
                dc2p[i * nr + r] += x;
                dp2c[kj * nr + r] += x;
            }
        }
        let mut dq = gemm(t, kn, d, &g, (kn, 1), &w.k, (d, 1), 1.0); // (T, d)
        let dq2 = gemm(t, nr, d, &dc2p, (nr, 1), &w.pos_k, (d, 1), 1.0);
        dq.iter_mut().zip(&dq2).for_each(|(a, &c)| *a += c);
        let mut dk = gemm(kn, t, d, &g, (1, kn), &w.q, (d, 1), 1.0); // (K, d)
        let dk2 = gemm(kn, nr, d, &dp2c, (nr, 1), &w.pos_q, (d, 1), 1.0);
        dk.iter_mut().zip(&dk2).for_each(|(a, &c)| *a += c);
        let dv = gemm(kn, t, d, dropped.as_ref().unwrap_or(&w.p), (1, kn), &dc, (d, 1), 1.0); // (K, d)
        let dpos_k = gemm(nr, t, d, &dc2p, (1, nr), &w.q, (d, 1), 1.0); // (R, d)
        let dpos_q = gemm(nr, kn, d, &dp2c, (1, nr), &w.k, (d, 1), 1.0); // (R, d)
        // SAFETY: this task's blocks of `out` (its sequence's rows × its head's columns) and its own row of
        // `partial` are written by this task alone.
        let o = unsafe { std::slice::from_raw_parts_mut(optr.ptr().add(b * seq * ld), seq * ld) };
        for i in 0..t {
            o[i * ld + qc..i * ld + qc + d].copy_from_slice(&dq[i * d..(i + 1) * d]);
        }
        for (kj, &j) in w.keys.iter().enumerate() {
            o[j * ld + h + qc..j * ld + h + qc + d].copy_from_slice(&dk[kj * d..(kj + 1) * d]);
            o[j * ld + 2 * h + qc..j * ld + 2 * h + qc + d].copy_from_slice(&dv[kj * d..(kj + 1) * d]);
        }
        let part = unsafe { std::slice::from_raw_parts_mut(pptr.ptr().add(tk * nr * 2 * d), nr * 2 * d) };
        for r in 0..nr {
            part[r * 2 * d..r * 2 * d + d].copy_from_slice(&dpos_q[r * d..(r + 1) * d]);
            part[r * 2 * d + d..(r + 1) * 2 * d].copy_from_slice(&dpos_k[r * d..(r + 1) * d]);
        }
    });
    let mut dpos = vec![0f32; nr * ld];
    for (tk, part) in partial.chunks_exact((nr * 2 * d).max(1)).enumerate().take(batch * heads) {
        let qc = (tk % heads) * d;
        for r in 0..nr {
            for c in 0..d {
                dpos[r * ld + qc + c] += part[r * 2 * d + c];
                dpos[r * ld + h + qc + c] += part[r * 2 * d + d + c];
            }
        }
    }
    Ok((CpuTensor::new(out, batch * seq, ld)?, CpuTensor::new(dpos, nr, ld)?))
}
