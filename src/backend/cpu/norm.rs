//! Row normalisations: `layernorm` (with an optional fused residual add) and `embeddings` (three table lookups
//! summed, then LayerNorm).

use super::{expect_dims, par_chunks_mut, CpuTensor};
use crate::backend::{validate_embeddings_input, EmbeddingTables};
use crate::tokenizer::Batch;
use crate::Result;

/// Rows per parallel task: enough work to amortise scheduling.
const ROWS_PER_TASK: usize = 16;

/// LayerNorm of one row in place: `(v − mean)/√(var + eps)·gamma + beta`, biased variance (as `torch.nn.LayerNorm`).
/// Two passes (mean, then the centred sum of squares) avoid the cancellation of `E[x²] − E[x]²`.
pub fn layernorm_row(v: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let n = v.len() as f32;
    let mean = v.iter().sum::<f32>() / n;
    let var = v.iter().map(|&x| (x - mean) * (x - mean)).sum::<f32>() / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((x, &g), &b) in v.iter_mut().zip(gamma).zip(beta) {
        *x = (*x - mean) * inv * g + b;
    }
}

/// `out (M, N) = LayerNorm(x + residual)` row by row.
pub fn layernorm(x: &[f32], residual: Option<&[f32]>, gamma: &[f32], beta: &[f32], eps: f32, n: usize, out: &mut [f32]) {
    if n == 0 {
        return;
    }
    par_chunks_mut(out, ROWS_PER_TASK * n, |ci, chunk| {
        let r0 = ci * ROWS_PER_TASK;
        for (ri, row) in chunk.chunks_exact_mut(n).enumerate() {
            let off = (r0 + ri) * n;
            row.copy_from_slice(&x[off..off + n]);
            if let Some(r) = residual {
                for (v, &rv) in row.iter_mut().zip(&r[off..off + n]) {
                    *v += rv;
                }
            }
            layernorm_row(row, gamma, beta, eps);
        }
    });
}

/// `LayerNorm(word[id] + position[t] + token_type[type])` for every token → `(B*T, H)`.
pub fn embeddings(batch: &Batch, tables: &EmbeddingTables<'_, CpuTensor>) -> Result<CpuTensor> {
    embedding_rows(batch, tables, true)
}

/// `word[id] + position[t] + token_type[type]` for every token → `(B*T, H)`: the LayerNorm's input.
pub fn embeddings_sum(batch: &Batch, tables: &EmbeddingTables<'_, CpuTensor>) -> Result<CpuTensor> {
    embedding_rows(batch, tables, false)
}

fn embedding_rows(batch: &Batch, tables: &EmbeddingTables<'_, CpuTensor>, normalize: bool) -> Result<CpuTensor> {
    let h = tables.word.cols();
    let (vocab, types) = (tables.word.rows(), tables.token_type.rows());
    // Without a table the tokenizer's truncation bounds the length (config.json's max_position_embeddings).
    let max_pos = tables.position.map_or(usize::MAX, CpuTensor::rows);
    validate_embeddings_input(batch, vocab, max_pos, types)?;
    if let Some(position) = tables.position {
        expect_dims(position, max_pos, h, "position embeddings (P, H)")?;
    }
    expect_dims(tables.token_type, types, h, "token type embeddings (types, H)")?;
    if normalize {
        expect_dims(tables.ln_gamma, 1, h, "embeddings LayerNorm gamma (H)")?;
        expect_dims(tables.ln_beta, 1, h, "embeddings LayerNorm beta (H)")?;
        tables.ln_gamma.expect_f32("embeddings LayerNorm gamma")?;
        tables.ln_beta.expect_f32("embeddings LayerNorm beta")?;
    }
    let (gamma, beta) = (tables.ln_gamma.data(), tables.ln_beta.data());
    let rows = batch.b * batch.t;
    let mut out = vec![0f32; rows * h]; // (B*T, H)
    if h > 0 {
        par_chunks_mut(&mut out, ROWS_PER_TASK * h, |ci, chunk| {
            // The tables may be f16 / Q8_0 / Q4_0: each looked-up row is decoded into scratch rows (exact: the same
            // values `HostTensor::to_f32` gives), then summed in the order of the f32 path.
            let (mut pe, mut te) = (vec![0f32; h], vec![0f32; h]); // (H) each
            for (ri, row) in chunk.chunks_exact_mut(h).enumerate() {
                let r = ci * ROWS_PER_TASK + ri;
                let (id, ty, p) = (batch.input_ids[r] as usize, batch.token_type_ids[r] as usize, r % batch.t);
                tables.word.row_into(id, row);
                match tables.position {
                    Some(position) => position.row_into(p, &mut pe),
                    None => pe.fill(0.0),
                }
                tables.token_type.row_into(ty, &mut te);
                for j in 0..h {
                    row[j] = row[j] + pe[j] + te[j];
                }
                if normalize {
                    layernorm_row(row, gamma, beta, tables.eps);
                }
            }
        });
    }
    CpuTensor::new(out, rows, h)
}

/// Back through [`embeddings_sum`]: a scatter-add of `d`'s rows into the three tables' gradients (none into the
/// word row `pad`).
pub fn embeddings_backward(d: &CpuTensor, batch: &Batch, vocab: usize, positions: usize, types: usize,
    pad: Option<u32>) -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
    validate_embeddings_input(batch, vocab, positions, types)?;
    let h = d.cols();
    expect_dims(d, batch.b * batch.t, h, "embeddings_backward d (B*T, H)")?;
    let (mut dw, mut dp, mut dt) = (vec![0f32; vocab * h], vec![0f32; positions * h], vec![0f32; types * h]);
    // In token order, so that the sums are added in one fixed order (the GPU kernel adds in the same order).
    for (r, row) in d.data().chunks_exact(h.max(1)).enumerate().take(batch.b * batch.t) {
        let (id, ty, p) = (batch.input_ids[r] as usize, batch.token_type_ids[r] as usize, r % batch.t);
        let word = (Some(id as u32) != pad).then_some((&mut dw, id));
        for (table, i) in word.into_iter().chain([(&mut dp, p), (&mut dt, ty)]) {
            for (o, &g) in table[i * h..(i + 1) * h].iter_mut().zip(row) {
                *o += g;
            }
        }
    }
    Ok((CpuTensor::new(dw, vocab, h)?, CpuTensor::new(dp, positions, h)?, CpuTensor::new(dt, types, h)?))
}

/// Back through a row-wise LayerNorm of `x` (its input): with `x̂ = (x − μ)·r`, `r = 1/√(σ² + eps)` and
/// `g = dy ⊙ γ`, `dx = r·(g − mean(g) − x̂·mean(g ⊙ x̂))`; `dγ = Σ_rows dy ⊙ x̂`, `dβ = Σ_rows dy`. Row statistics
/// and the two means are accumulated in f64.
pub fn layernorm_backward(dy: &CpuTensor, x: &CpuTensor, gamma: &CpuTensor, eps: f32)
    -> Result<(CpuTensor, CpuTensor, CpuTensor)> {
    let (m, n) = (x.rows(), x.cols());
    expect_dims(dy, m, n, "layernorm_backward dy (shape of x)")?;
    expect_dims(gamma, 1, n, "layernorm_backward gamma (N)")?;
    let g = gamma.data();
    let mut dx = vec![0f32; m * n];
    let (mut dgamma, mut dbeta) = (vec![0f64; n], vec![0f64; n]);
    let mut xhat = vec![0f32; n];
    for ((xr, dyr), dxr) in x.data().chunks_exact(n.max(1)).zip(dy.data().chunks_exact(n.max(1))).zip(dx.chunks_exact_mut(n.max(1))) {
        let mean = xr.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = xr.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        let rstd = 1.0 / (var + eps as f64).sqrt();
        let (mut mg, mut mgx) = (0f64, 0f64);
        for j in 0..n {
            xhat[j] = ((xr[j] as f64 - mean) * rstd) as f32;
            let gj = dyr[j] as f64 * g[j] as f64;
            mg += gj;
            mgx += gj * xhat[j] as f64;
            dgamma[j] += dyr[j] as f64 * xhat[j] as f64;
            dbeta[j] += dyr[j] as f64;
        }
        let (mg, mgx) = (mg / n as f64, mgx / n as f64);
        for j in 0..n {
            let gj = dyr[j] as f64 * g[j] as f64;
            dxr[j] = (rstd * (gj - mg - xhat[j] as f64 * mgx)) as f32;
        }
    }
    let to32 = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
    Ok((CpuTensor::new(dx, m, n)?, CpuTensor::new(to32(dgamma), 1, n)?, CpuTensor::new(to32(dbeta), 1, n)?))
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_close, rand_vec};
    use super::super::CpuBackend;
    use super::*;
    use crate::backend::Backend;
    use crate::Error;

    /// The reference accumulates in f64; ours in f32 over at most 513 values of magnitude ≈ 1: a few ulps of the
    /// normalised output.
    const LN_ATOL: f32 = 2e-5;
    const LN_RTOL: f32 = 1e-5;

    fn reference_ln(x: &[f32], g: &[f32], b: &[f32], eps: f32) -> Vec<f32> {
        let n = x.len() as f64;
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        x.iter().zip(g).zip(b).map(|((&v, &g), &b)| (((v as f64 - mean) / (var + eps as f64).sqrt()) * g as f64 + b as f64) as f32).collect()
    }

    #[test]
    fn layernorm_matches_reference() {
        let cpu = CpuBackend::new();
        for &(m, n) in &[(1, 1), (7, 33), (33, 7), (2, 513), (513, 3)] {
            let x = rand_vec(m * n, 5).iter().map(|v| v * 3.0 + 0.5).collect::<Vec<_>>();
            let r = rand_vec(m * n, 6);
            let g = rand_vec(n, 7);
            let b = rand_vec(n, 8);
            let (tx, tr) = (cpu.input(&x, m, n).unwrap(), cpu.input(&r, m, n).unwrap());
            let (tg, tb) = (cpu.input(&g, 1, n).unwrap(), cpu.input(&b, 1, n).unwrap());
            let got = cpu.layernorm(&tx, Some(&tr), &tg, &tb, 1e-12).unwrap();
            let mut want = Vec::new();
            for i in 0..m {
                let row: Vec<f32> = (0..n).map(|j| x[i * n + j] + r[i * n + j]).collect();
                want.extend(reference_ln(&row, &g, &b, 1e-12));
            }
            assert_close(got.data(), &want, LN_ATOL, LN_RTOL, &format!("layernorm {m}x{n}"));
            let got = cpu.layernorm(&tx, None, &tg, &tb, 1e-5).unwrap();
            let want: Vec<f32> = x.chunks(n).flat_map(|row| reference_ln(row, &g, &b, 1e-5)).collect();
            assert_close(got.data(), &want, LN_ATOL, LN_RTOL, &format!("layernorm no residual {m}x{n}"));
        }
        let bad = cpu.input(&[1.0; 4], 1, 4).unwrap();
        let g3 = cpu.input(&[1.0; 3], 1, 3).unwrap();
        assert!(matches!(cpu.layernorm(&bad, None, &g3, &g3, 1e-5), Err(Error::Shape { .. })));
    }

    #[test]
    fn embeddings_match_reference() {
        let cpu = CpuBackend::new();
        let (vocab, h, p, types) = (11, 7, 5, 2);
        let word = rand_vec(vocab * h, 1);
        let pos = rand_vec(p * h, 2);
        let tt = rand_vec(types * h, 3);
        let g = rand_vec(h, 4);
        let be = rand_vec(h, 5);
        let up = |v: &[f32], r, c| cpu.input(v, r, c).unwrap();
        let (tw, tp, tt_, tg, tb) = (up(&word, vocab, h), up(&pos, p, h), up(&tt, types, h), up(&g, 1, h), up(&be, 1, h));
        let tables = EmbeddingTables { word: &tw, position: Some(&tp), token_type: &tt_, ln_gamma: &tg, ln_beta: &tb, eps: 1e-12 };
        let batch = Batch {
            input_ids: vec![2, 10, 4, 0, 0, 1, 3, 5, 7, 9],
            token_type_ids: vec![0, 0, 1, 0, 0, 0, 1, 1, 1, 1],
            attention_mask: vec![1, 1, 1, 0, 0, 1, 1, 1, 1, 1],
            b: 2,
            t: 5,
        };
        let got = cpu.embeddings(&batch, &tables).unwrap();
        assert_eq!(cpu.dims(&got), (10, h));
        let mut want = Vec::new();
        for r in 0..10 {
            let (id, ty, t) = (batch.input_ids[r] as usize, batch.token_type_ids[r] as usize, r % 5);
            let row: Vec<f32> = (0..h).map(|j| word[id * h + j] + pos[t * h + j] + tt[ty * h + j]).collect();
            want.extend(reference_ln(&row, &g, &be, 1e-12));
        }
        assert_close(got.data(), &want, LN_ATOL, LN_RTOL, "embeddings");

        let mut bad = batch.clone();
        bad.input_ids[3] = 11;
        assert!(cpu.embeddings(&bad, &tables).unwrap_err().to_string().contains("vocabulary"));
        let mut bad = batch.clone();
        bad.token_type_ids[3] = 2;
        assert!(cpu.embeddings(&bad, &tables).is_err());
        let long = Batch { input_ids: vec![1; 6], token_type_ids: vec![0; 6], attention_mask: vec![1; 6], b: 1, t: 6 };
        assert!(cpu.embeddings(&long, &tables).unwrap_err().to_string().contains("positions"));
        let ragged = Batch { input_ids: vec![1; 5], token_type_ids: vec![0; 6], attention_mask: vec![1; 6], b: 1, t: 6 };
        assert!(cpu.embeddings(&ragged, &tables).is_err());
    }
}
