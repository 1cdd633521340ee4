//! The queries an attention mask marks as masked whole (`backend::UNIFORM_FILLED`, `backend::UNIFORM_ADDED`): their
//! row of probabilities is `1/T` for every key, padding included (transformers' row of equal `finfo.min` scores).
//! The attention kernels (`attention.rs`, `disentangled.rs`) see such a position as padding and compute its row as any
//! other; the backend then replaces that row here ([`forward`]), and its backward runs on a `dctx` without the
//! marked rows ([`without`]) and gets their part added here ([`backward`]). Per marked query `i` of sequence `b` and
//! head `h`, with `F_ij` the dropout factor of element `((b·heads + h)·T + i)·T + j` (1 without dropout):
//!
//! ```text
//! ctx_i = Σ_j F_ij·v_j / T          dv_j += F_ij·dctx_i / T
//! added only:  dP_ij = F_ij·(dctx_i·v_j),  g_ij = (dP_ij − Σ_j dP_ij / T) / T,
//!              dq_i = Σ_j g_ij·k_j·scale,  dk_j += g_ij·q_i·scale,  dbias[h][j − i + T − 1] += g_ij
//! ```

use super::CpuTensor;
use crate::backend::{AttentionShape, Dropout, UNIFORM_ADDED, UNIFORM_FILLED};
use crate::{Error, Result};

/// The marked queries of a mask `(B, T)`: their flat index `b·T + i`, and whether the mark is `UNIFORM_ADDED`.
fn marked(mask: &[f32]) -> Vec<(usize, bool)> {
    mask.iter().enumerate()
        .filter(|&(_, &m)| m <= UNIFORM_FILLED)
        .map(|(r, &m)| (r, m <= UNIFORM_ADDED))
        .collect()
}

/// The dropout factor of query `i`, key `j` of task `b·heads + h`.
fn factor(drop: Option<Dropout>, task: usize, t: usize, i: usize, j: usize) -> f32 {
    match drop.filter(Dropout::is_active) {
        Some(d) if !Dropout::keeps(d.key(), d.threshold(), ((task * t + i) * t + j) as u32) => 0.0,
        Some(d) => d.scale(),
        None => 1.0,
    }
}

/// The context `(B*T, H)` a kernel computed, with each marked query's rows replaced by the mean of every value.
pub fn forward(ctx: CpuTensor, qkv: &CpuTensor, mask: &CpuTensor, s: AttentionShape, drop: Option<Dropout>)
    -> Result<CpuTensor> {
    let rows = marked(mask.data());
    if rows.is_empty() {
        return Ok(ctx);
    }
    let AttentionShape { seq: t, heads, head_dim: d, .. } = s;
    let h = heads * d;
    let (qkv, mut out) = (qkv.data(), ctx.to_vec());
    for &(r, _) in &rows {
        let (b, i) = (r / t, r % t);
        for hd in 0..heads {
            let o = &mut out[r * h + hd * d..r * h + (hd + 1) * d];
            o.fill(0.0);
            for j in 0..t {
                let w = factor(drop, b * heads + hd, t, i, j) / t as f32;
                let v = &qkv[(b * t + j) * 3 * h + 2 * h + hd * d..][..d];
                o.iter_mut().zip(v).for_each(|(a, &x)| *a += w * x);
            }
        }
    }
    CpuTensor::new(out, ctx.rows(), h)
}

/// `dctx` with the marked queries' rows zeroed, for the kernel's own backward (`None`: no query is marked).
pub fn without(dctx: &CpuTensor, mask: &CpuTensor, h: usize) -> Result<Option<CpuTensor>> {
    let rows = marked(mask.data());
    if rows.is_empty() {
        return Ok(None);
    }
    let mut d = dctx.to_vec();
    for (r, _) in rows {
        d[r * h..(r + 1) * h].fill(0.0);
    }
    Ok(Some(CpuTensor::new(d, dctx.rows(), h)?))
}

/// The marked queries' part of the backward added to the kernel's `dqkv (B*T, 3H)` and `dbias (heads, 2T − 1)`;
/// `scale` is the scores' (`1/√d`). `disentangled`: DeBERTa's kernel, whose scores hold position terms that an
/// added mark's gradient would have to reach; it takes filled marks only.
#[allow(clippy::too_many_arguments)]
pub fn backward(dqkv: CpuTensor, dbias: Option<CpuTensor>, dctx: &CpuTensor, qkv: &CpuTensor, mask: &CpuTensor,
    s: AttentionShape, drop: Option<Dropout>, scale: f32, disentangled: bool) -> Result<(CpuTensor, Option<CpuTensor>)> {
    let rows = marked(mask.data());
    if rows.is_empty() {
        return Ok((dqkv, dbias));
    }
    if disentangled && rows.iter().any(|&(_, added)| added) {
        return Err(Error::Input("attention_backward_disentangled: a query marked UNIFORM_ADDED (an additive mask's \
            fully masked row); DeBERTa's mask fills (UNIFORM_FILLED)".into()));
    }
    let AttentionShape { seq: t, heads, head_dim: d, .. } = s;
    let (h, ld, width) = (heads * d, 3 * heads * d, (2 * t).saturating_sub(1));
    let (qkv, dctx) = (qkv.data(), dctx.data());
    let mut out = dqkv.to_vec();
    let mut db = dbias.as_ref().map(|b| b.to_vec());
    let tf = t as f32;
    for (r, added) in rows {
        let (b, i) = (r / t, r % t);
        for hd in 0..heads {
            let (task, qc) = (b * heads + hd, hd * d);
            let dc = &dctx[r * h + qc..r * h + qc + d];
            let at = |j: usize, part: usize| (b * t + j) * ld + part * h + qc;
            let f: Vec<f32> = (0..t).map(|j| factor(drop, task, t, i, j)).collect();
            for j in 0..t {
                let w = f[j] / tf;
                out[at(j, 2)..at(j, 2) + d].iter_mut().zip(dc).for_each(|(a, &x)| *a += w * x);
            }
            if !added {
                continue;
            }
            let dp: Vec<f32> = (0..t)
                .map(|j| f[j] * dc.iter().zip(&qkv[at(j, 2)..at(j, 2) + d]).map(|(&a, &v)| a * v).sum::<f32>())
                .collect();
            let mean = dp.iter().sum::<f32>() / tf;
            let q: Vec<f32> = qkv[at(i, 0)..at(i, 0) + d].to_vec();
            for j in 0..t {
                let g = (dp[j] - mean) / tf;
                for c in 0..d {
                    out[at(i, 0) + c] += g * scale * qkv[at(j, 1) + c];
                    out[at(j, 1) + c] += g * scale * q[c];
                }
                if let Some(db) = db.as_mut() {
                    db[hd * width + j + t - 1 - i] += g;
                }
            }
        }
    }
    let db = match (db, dbias) {
        (Some(v), Some(b)) => Some(CpuTensor::new(v, b.rows(), b.cols())?),
        _ => None,
    };
    Ok((CpuTensor::new(out, dqkv.rows(), ld)?, db))
}
