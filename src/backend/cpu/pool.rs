//! Reductions over tokens: masked pooling (sentence-transformers' modes) and row gathering (the `[CLS]` or
//! `[MASK]` rows).

use super::{expect_dims, CpuTensor};
use crate::backend::TokenPool;
use crate::{Error, Result};

/// [`crate::backend::Backend::pool_tokens`]: x `(B*T, H)`, mask `(B, T)` → `(B, H)`, the twin of shaders/pool.wgsl
/// (the same sums in the same order).
pub fn pool_tokens(x: &CpuTensor, mask: &CpuTensor, batch: usize, seq: usize, mode: TokenPool) -> Result<CpuTensor> {
    let h = x.cols();
    expect_dims(x, batch * seq, h, "pool_tokens input (B*T, H)")?;
    expect_dims(mask, batch, seq, "pool_tokens mask (B, T)")?;
    let (xd, md) = (x.data(), mask.data());
    let init = if mode == TokenPool::Max { f32::NEG_INFINITY } else { 0.0 };
    let mut out = vec![init; batch * h]; // (B, H)
    for b in 0..batch {
        let acc = &mut out[b * h..(b + 1) * h];
        let mut count = 0f32;
        for t in 0..seq {
            let m = md[b * seq + t];
            if m == 0.0 {
                continue;
            }
            let row = &xd[(b * seq + t) * h..][..h];
            let w = if mode == TokenPool::WeightedMean { m * (t + 1) as f32 } else { m };
            count += w;
            if mode == TokenPool::Max {
                acc.iter_mut().zip(row).for_each(|(a, &v)| *a = a.max(v));
            } else {
                acc.iter_mut().zip(row).for_each(|(a, &v)| *a += w * v);
            }
        }
        let div = match mode {
            TokenPool::Max => 1.0,
            TokenPool::Mean | TokenPool::WeightedMean => count.max(1e-9),
            TokenPool::MeanSqrtLen => count.max(1e-9).sqrt(),
        };
        if mode != TokenPool::Max {
            acc.iter_mut().for_each(|a| *a /= div);
        }
    }
    CpuTensor::new(out, batch, h)
}

/// x `(M, N)` → `(rows.len(), N)`.
pub fn gather_rows(x: &CpuTensor, rows: &[u32]) -> Result<CpuTensor> {
    let n = x.cols();
    let mut out = Vec::with_capacity(rows.len() * n);
    for &r in rows {
        let r = r as usize;
        if r >= x.rows() {
            return Err(Error::Input(format!("row {r} requested from a tensor of {} rows", x.rows())));
        }
        out.extend_from_slice(&x.data()[r * n..(r + 1) * n]);
    }
    CpuTensor::new(out, rows.len(), n)
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_close, rand_vec};
    use super::super::CpuBackend;
    use crate::backend::Backend;
    use crate::tokenizer::Batch;

    /// Sums of ≤ 513 values of magnitude < 1 in f32 against f64: well under 1e-5.
    const POOL_ATOL: f32 = 1e-5;

    #[test]
    fn mean_pool_counts_real_tokens_only() {
        let cpu = CpuBackend::new();
        for &(b, t, h) in &[(1, 1, 1), (3, 7, 33), (2, 513, 7)] {
            let x = rand_vec(b * t * h, 4);
            let lens: Vec<usize> = (0..b).map(|i| if i == 1 { 0 } else { (t * (i + 1)).div_ceil(b) }).collect();
            let mut mask = vec![0f32; b * t];
            for (i, &l) in lens.iter().enumerate() {
                mask[i * t..i * t + l].fill(1.0);
            }
            let got = cpu.mean_pool(&cpu.input(&x, b * t, h).unwrap(), &cpu.input(&mask, b, t).unwrap(), b, t).unwrap();
            let mut want = vec![0f32; b * h];
            for i in 0..b {
                for j in 0..h {
                    let s: f64 = (0..lens[i]).map(|tt| x[(i * t + tt) * h + j] as f64).sum();
                    want[i * h + j] = if lens[i] == 0 { 0.0 } else { (s / lens[i] as f64) as f32 };
                }
            }
            assert_close(got.data(), &want, POOL_ATOL, 0.0, &format!("mean_pool {b}x{t}x{h}"));
        }
    }

    #[test]
    fn mask_and_gather() {
        let cpu = CpuBackend::new();
        let batch = Batch { input_ids: vec![5, 6, 0, 7, 8, 9], token_type_ids: vec![0; 6], attention_mask: vec![1, 1, 0, 1, 1, 1], b: 2, t: 3 };
        let m = cpu.mask(&batch).unwrap();
        assert_eq!(m.data(), &[1., 1., 0., 1., 1., 1.]);
        assert_eq!(cpu.dims(&m), (2, 3));
        let x = cpu.input(&[0., 1., 2., 3., 4., 5.], 3, 2).unwrap();
        let g = cpu.gather_rows(&x, &[2, 0, 2]).unwrap();
        assert_eq!(g.data(), &[4., 5., 0., 1., 4., 5.]);
        assert!(cpu.gather_rows(&x, &[3]).is_err());
        assert_eq!(cpu.dims(&cpu.gather_rows(&x, &[]).unwrap()), (0, 2));
    }
}
