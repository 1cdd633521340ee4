//! Multi-head self-attention over a padded batch: `softmax(q·kᵀ/√d + maskbias)·v` per (sequence, head).
//!
//! Each (sequence, head) pair is an independent task (parallel natively). BERT's heads are small (d = 32 in MiniLM,
//! 64 in BERT-base), so the two products are short GEMMs (T × d × T) that a general GEMM spends more time packing
//! than multiplying: one `matrixmultiply` call pair per (sequence, head) was 13% of a MiniLM forward at 8 × 128 in
//! wasm, and more at 32 × 32 (768 calls per layer). Instead, per task: kᵀ of the head is copied once into a
//! `(d, K)` scratch (K = keys up to the last real one, rounded up to 8), then for each tile of 4 queries the scores
//! (4 × 8 keys per register tile, the query values broadcast along kᵀ's rows), their masked softmax, and the
//! weighted sum of v (4 × 8 output columns per register tile, v read in place from the fused projection) run while
//! the tile's 4 × K scores sit in L1. Keys after the last real one are never touched; padded keys before it get
//! probability exactly 0 (the `-inf` bias of the op's contract); a query whose keys are all padding gets a zero
//! context row rather than NaN.
//!
//! With a relative bias (`Backend::attention_biased`, `(heads, 2T − 1)`), each score of the tile gets its (query,
//! key) offset's bias added as it is stored: the key bias row of the tile's queries is built once per tile in the
//! scratch (mask bias + relative bias), so the register tiles are the same code with or without it. DeBERTa's
//! disentangled terms (`Backend::attention_disentangled`) go into the same per-query rows: q_i·posK_r + k_j·posQ_r,
//! scaled as the score (1/√(3d)), gathered per (query, key) from two small GEMMs per head (`Q·posKᵀ`, `K·posQᵀ`
//! over the R rows a length reaches): at 8 × 128 tokens of a 384-wide model the per-score dot products instead made
//! the forward 2.1× BERT's, the GEMMs 1.4× (BENCHMARKS.md).

use super::simd::{add, load, max, mul, mul_add, splat, store, to_array, zero, V};
use super::{expect_dims, par_for, scratch, CpuTensor, SharedOut};
use crate::backend::{AttentionShape, Dropout, ScoreBias};
use crate::{Error, Result};

/// Queries per tile: 4 rows × 2 vectors of 4 = 8 accumulators in both products, which with their operands fit the
/// 16 vector registers of SSE and of wasm engines on x86.
const QT: usize = 4;
/// Keys per score tile and output columns per weighted-sum tile: two 4-lane vectors.
const CT: usize = 8;

/// `qkv (B*T, 3H)`, `mask (B, T)` (above 0.5 = real token), optionally a relative `bias (heads, 2T − 1)` (added to
/// the scaled score of query i and key j at column j − i + T − 1 of the head's row) or the disentangled `pos (R, 3H)`
/// and `rows (1, 2T − 1)` (`Backend::attention_disentangled`) → context `(B*T, H)`.
pub fn attention(qkv: &CpuTensor, mask: &CpuTensor, score_bias: ScoreBias<'_, CpuTensor>, s: AttentionShape)
    -> Result<CpuTensor> {
    let (bias, disentangled) = match score_bias {
        ScoreBias::None => (None, None),
        ScoreBias::Relative(b) => (Some(b), None),
        ScoreBias::Disentangled { pos, rows } => (None, Some((pos, rows))),
    };
    let AttentionShape { batch, seq, heads, head_dim } = s;
    let h = heads * head_dim;
    if heads == 0 || head_dim == 0 {
        return Err(Error::Input(format!("attention needs at least one head of positive size, got {s:?}")));
    }
    expect_dims(qkv, batch * seq, 3 * h, "attention qkv (B*T, 3H)")?;
    expect_dims(mask, batch, seq, "attention mask (B, T)")?;
    if let Some(b) = bias {
        expect_dims(b, heads, (2 * seq).saturating_sub(1), "attention bias (heads, 2T - 1)")?;
    }
    if let Some((pos, rows)) = disentangled {
        expect_dims(rows, 1, (2 * seq).saturating_sub(1), "attention rows (1, 2T - 1)")?;
        expect_dims(pos, pos.rows(), 3 * h, "attention pos (R, 3H)")?;
        if let Some(r) = rows.data().iter().find(|&&r| !(r >= 0.0 && (r as usize) < pos.rows() && r.fract() == 0.0)) {
            return Err(Error::Input(format!("attention rows: {r} is not a row of pos's {}", pos.rows())));
        }
    }
    let mut out = vec![0f32; batch * seq * h]; // (B*T, H)
    if batch * seq == 0 {
        return CpuTensor::new(out, batch * seq, h);
    }
    let qkv = qkv.data();
    let mask = mask.data();
    let bias = bias.map(|b| b.data());
    let disentangled = disentangled.map(|(pos, rows)| (pos.data(), rows.data()));
    // DeBERTa's 1/√(d·scale_factor), with both c2p and p2c.
    let scale = 1.0 / ((if disentangled.is_some() { 3 } else { 1 } * head_dim) as f32).sqrt();
    // Shared by the tasks (here and in the two functions below): each writes a disjoint (rows of sequence b) ×
    // (columns of head h) block.
    let optr = SharedOut(out.as_mut_ptr());
    par_for(batch * heads, |task| {
        let optr = optr;
        let (b, hd) = (task / heads, task % heads);
        let m = &mask[b * seq..(b + 1) * seq]; // (T)
        // Keys past the last real one have probability 0: leave them out. No real key: the rows stay 0.
        let Some(keys) = m.iter().rposition(|&v| v > 0.5).map(|p| p + 1) else { return };
        // SAFETY: this task's output block, rows b*T..(b+1)*T × columns hd*d..(hd+1)*d of out (B*T, H), is written
        // by this task alone, and lies inside `out`.
        let out = unsafe { std::slice::from_raw_parts_mut(optr.0.add(b * seq * h), seq * h) };
        let rows = &qkv[b * seq * 3 * h..(b + 1) * seq * 3 * h]; // (T, 3H) of sequence b
        // The thread's scratch: kᵀ `(d, K)`, the tile's scores `(QT, K)`, and per key its mask as a bias.
        // The head's relative bias row (2T − 1), if any.
        let rel = match (bias, disentangled) {
            (Some(b), _) => HeadBias::Relative(&b[hd * (2 * seq - 1)..(hd + 1) * (2 * seq - 1)]),
            (None, Some((pos, index))) => HeadBias::Disentangled { pos, index },
            (None, None) => HeadBias::None,
        };
        scratch::with(|scratch| {
            head(rows, 3 * h, hd * head_dim, h, head_dim, seq, keys, &m[..keys], rel, scale, out, scratch);
        });
    });
    CpuTensor::new(out, batch * seq, h)
}

/// `alpha · A · B` → `(m, n)`, A `(m, k)` and B `(k, n)` read through (row, column) strides.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm(m: usize, k: usize, n: usize, a: &[f32], sa: (usize, usize), b: &[f32], sb: (usize, usize), alpha: f32) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    // The last element each operand's strides reach (none when a dimension is 0).
    let reach = |r: usize, cl: usize, s: (usize, usize)| if r == 0 || cl == 0 { 0 } else { (r - 1) * s.0 + (cl - 1) * s.1 + 1 };
    assert!(a.len() >= reach(m, k, sa) && b.len() >= reach(k, n, sb), "gemm operands smaller than their shapes");
    // SAFETY: the assert bounds every index the strides reach: A's (m, k) and B's (k, n) elements lie within the
    // slices given, and C is (m, n) with row stride n.
    unsafe {
        matrixmultiply::sgemm(m, k, n, alpha, a.as_ptr(), sa.0 as isize, sa.1 as isize, b.as_ptr(), sb.0 as isize,
            sb.1 as isize, 0.0, c.as_mut_ptr(), n as isize, 1);
    }
    c
}

/// The dropout mask of one (sequence, head)'s probabilities over its real keys, as factors `(T, K)`: `scale` where
/// kept, 0 where dropped; element `((b·heads + h)·T + i)·T + j` of the mask for query `i` and real key `keys[k]`.
pub(super) fn dropout_factors(d: Dropout, task: usize, t: usize, keys: &[usize]) -> Vec<f32> {
    let (key, threshold, scale) = (d.key(), d.threshold(), d.scale());
    let mut out = Vec::with_capacity(t * keys.len());
    for i in 0..t {
        let row = ((task * t + i) * t) as u32;
        out.extend(keys.iter().map(|&j| if Dropout::keeps(key, threshold, row.wrapping_add(j as u32)) { scale } else { 0.0 }));
    }
    out
}

/// The head's rows `rows` of `src` (row stride `stride`), `d` columns from `col`, contiguous.
pub(super) fn take(src: &[f32], rows: impl Iterator<Item = usize>, base: usize, stride: usize, col: usize, d: usize) -> Vec<f32> {
    rows.flat_map(|r| src[(base + r) * stride + col..(base + r) * stride + col + d].iter().copied()).collect()
}

/// `P = softmax(q·kᵀ·scale)` over the real keys, row by row in place `(T, K)`, in f32 as the forward.
pub(super) fn softmax_rows(p: &mut [f32], kn: usize) {
    for row in p.chunks_exact_mut(kn) {
        let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for x in row.iter_mut() {
            *x = (*x - mx).exp();
            sum += *x;
        }
        row.iter_mut().for_each(|x| *x /= sum);
    }
}

/// [`attention`] with dropout on the probabilities (`Backend::attention_dropout`): per (sequence, head) task, `P`
/// over the real keys, `P ⊙ M · scale`, then its product with v. Training only, so plain GEMMs (as the backward)
/// rather than [`attention`]'s fused tiles; a query whose keys are all padding gets zeros.
/// With `bias` (`Backend::attention_dropout_biased`, `(heads, 2T − 1)`), it is added to the scaled scores first.
pub fn attention_dropout(qkv: &CpuTensor, mask: &CpuTensor, bias: Option<&CpuTensor>, s: AttentionShape, drop: Dropout)
    -> Result<CpuTensor> {
    let AttentionShape { batch, seq, heads, head_dim: d } = s;
    let h = heads * d;
    drop.check()?;
    if heads == 0 || d == 0 {
        return Err(Error::Input(format!("attention needs at least one head of positive size, got {s:?}")));
    }
    expect_dims(qkv, batch * seq, 3 * h, "attention qkv (B*T, 3H)")?;
    expect_dims(mask, batch, seq, "attention mask (B, T)")?;
    if let Some(b) = bias {
        expect_dims(b, heads, (2 * seq).saturating_sub(1), "attention bias (heads, 2T - 1)")?;
    }
    let mut out = vec![0f32; batch * seq * h];
    let (qkv, mask, bias) = (qkv.data(), mask.data(), bias.map(|b| b.data()));
    let scale = 1.0 / (d as f32).sqrt();
    let optr = SharedOut(out.as_mut_ptr());
    par_for(batch * heads, |task| {
        let (b, hd) = (task / heads, task % heads);
        let keys: Vec<usize> = (0..seq).filter(|&j| mask[b * seq + j] > 0.5).collect();
        let (t, kn, ld, qc) = (seq, keys.len(), 3 * h, hd * d);
        if kn == 0 {
            return;
        }
        let q = take(qkv, 0..t, b * seq, ld, qc, d);
        let k = take(qkv, keys.iter().copied(), b * seq, ld, h + qc, d);
        let v = take(qkv, keys.iter().copied(), b * seq, ld, 2 * h + qc, d);
        let mut p = gemm(t, d, kn, &q, (d, 1), &k, (1, d), scale);
        add_bias(&mut p, bias, hd, t, &keys);
        softmax_rows(&mut p, kn);
        p.iter_mut().zip(dropout_factors(drop, task, t, &keys)).for_each(|(x, m)| *x *= m);
        let ctx = gemm(t, kn, d, &p, (kn, 1), &v, (d, 1), 1.0); // (T, d)
        // SAFETY: this task's block, rows b*T..(b+1)*T × the head's columns, is written by this task alone.
        let o = unsafe { std::slice::from_raw_parts_mut(optr.ptr().add(b * seq * h), seq * h) };
        for i in 0..t {
            o[i * h + qc..i * h + qc + d].copy_from_slice(&ctx[i * d..(i + 1) * d]);
        }
    });
    CpuTensor::new(out, batch * seq, h)
}

/// Back through [`attention`] (the math is in `Backend::attention_backward`'s doc): per (sequence, head) task, the
/// probabilities of each real query row are recomputed, then `dv`, `dS`, `dq` and `dk` follow. Each task writes its
/// head's columns of `dq`, `dk` and `dv` for its sequence's rows only.
/// With `dropout` (active), back through [`attention_dropout`] instead: the same mask scales `dP` and the `P` that
/// gives `dv`. With `bias` `(heads, 2T − 1)`, the recomputed scores get it as the forward's did; with `want_dbias`,
/// each task also sums its `dS` (before the score scale) by offset into its own `(2T − 1)` row, and the rows of one
/// head are summed over the sequences in order afterwards (no task writes another's row).
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(dctx: &CpuTensor, qkv: &CpuTensor, mask: &CpuTensor, bias: Option<&CpuTensor>,
    s: AttentionShape, dropout: Option<Dropout>, want_dbias: bool) -> Result<(CpuTensor, Option<CpuTensor>)> {
    let dropout = dropout.filter(Dropout::is_active);
    if let Some(d) = dropout {
        d.check()?;
    }
    let AttentionShape { batch, seq, heads, head_dim: d } = s;
    let h = heads * d;
    if heads == 0 || d == 0 {
        return Err(Error::Input(format!("attention_backward needs at least one head of positive size, got {s:?}")));
    }
    expect_dims(qkv, batch * seq, 3 * h, "attention_backward qkv (B*T, 3H)")?;
    expect_dims(dctx, batch * seq, h, "attention_backward dctx (B*T, H)")?;
    expect_dims(mask, batch, seq, "attention_backward mask (B, T)")?;
    if let Some(b) = bias {
        expect_dims(b, heads, (2 * seq).saturating_sub(1), "attention_backward bias (heads, 2T - 1)")?;
    }
    let want_dbias = want_dbias && bias.is_some();
    let width = (2 * seq).saturating_sub(1);
    let mut out = vec![0f32; batch * seq * 3 * h]; // (B*T, 3H)
    // Per task (b, h), its dS summed by offset (2T − 1).
    let mut partial = vec![0f32; if want_dbias { batch * heads * width } else { 0 }];
    let (qkv, dctx, mask, bias) = (qkv.data(), dctx.data(), mask.data(), bias.map(|b| b.data()));
    let scale = 1.0 / (d as f32).sqrt();
    let optr = SharedOut(out.as_mut_ptr());
    let pptr = SharedOut(partial.as_mut_ptr());
    par_for(batch * heads, |task| {
        let (optr, pptr) = (optr, pptr);
        let (b, hd) = (task / heads, task % heads);
        let m = &mask[b * seq..(b + 1) * seq];
        let keys: Vec<usize> = (0..seq).filter(|&j| m[j] > 0.5).collect();
        let (t, kn, ld, qc) = (seq, keys.len(), 3 * h, hd * d);
        if kn == 0 {
            return;
        }
        // The head's q, dctx (T, d) and its real keys' k, v (K, d), contiguous; then five small GEMMs.
        let q = take(qkv, 0..t, b * seq, ld, qc, d);
        let dc = take(dctx, 0..t, b * seq, h, qc, d);
        let k = take(qkv, keys.iter().copied(), b * seq, ld, h + qc, d);
        let v = take(qkv, keys.iter().copied(), b * seq, ld, 2 * h + qc, d);
        // P = softmax(q·kᵀ·scale) over the real keys (T, K); dP = dctx·vᵀ (T, K).
        let mut p = gemm(t, d, kn, &q, (d, 1), &k, (1, d), scale);
        let mut dp = gemm(t, d, kn, &dc, (d, 1), &v, (1, d), 1.0);
        add_bias(&mut p, bias, hd, t, &keys);
        softmax_rows(&mut p, kn);
        // Dropout: dP through the mask (M · scale), and the dropped probabilities D for dv.
        let dropped = dropout.map(|dr| {
            let m = dropout_factors(dr, task, t, &keys);
            dp.iter_mut().zip(&m).for_each(|(x, &f)| *x *= f);
            p.iter().zip(&m).map(|(&x, &f)| x * f).collect::<Vec<f32>>()
        });
        // dS = P ⊙ (dP − rowsum(dP ⊙ P)), with the score scale folded in (T, K).
        let mut ds = vec![0f32; t * kn];
        // SAFETY: row `task` of `partial` (B*heads, 2T − 1) is written by this task alone (empty without dbias).
        let dbias = want_dbias.then(|| unsafe { std::slice::from_raw_parts_mut(pptr.0.add(task * width), width) });
        let mut dbias = dbias;
        for (i, ((dsr, pr), dpr)) in ds.chunks_exact_mut(kn).zip(p.chunks_exact(kn)).zip(dp.chunks_exact(kn)).enumerate() {
            let dot: f64 = pr.iter().zip(dpr).map(|(&a, &b)| a as f64 * b as f64).sum();
            for (((o, &pv), &dv), &j) in dsr.iter_mut().zip(pr).zip(dpr).zip(&keys) {
                let g = pv * (dv - dot as f32);
                if let Some(db) = dbias.as_deref_mut() {
                    db[j + t - 1 - i] += g;
                }
                *o = g * scale;
            }
        }
        let dq = gemm(t, kn, d, &ds, (kn, 1), &k, (d, 1), 1.0); // (T, d)
        let dk = gemm(kn, t, d, &ds, (1, kn), &q, (d, 1), 1.0); // (K, d)
        let dv = gemm(kn, t, d, dropped.as_ref().unwrap_or(&p), (1, kn), &dc, (d, 1), 1.0); // (K, d)
        // SAFETY: this task's block, rows b*T..(b+1)*T × the head's columns of dq, dk and dv, is written by this task
        // alone (the tasks of one sequence differ in head), and lies inside `out`.
        let o = unsafe { std::slice::from_raw_parts_mut(optr.0.add(b * seq * ld), seq * ld) };
        for i in 0..t {
            o[i * ld + qc..i * ld + qc + d].copy_from_slice(&dq[i * d..(i + 1) * d]);
        }
        for (kj, &j) in keys.iter().enumerate() {
            o[j * ld + h + qc..j * ld + h + qc + d].copy_from_slice(&dk[kj * d..(kj + 1) * d]);
            o[j * ld + 2 * h + qc..j * ld + 2 * h + qc + d].copy_from_slice(&dv[kj * d..(kj + 1) * d]);
        }
    });
    let dbias = match want_dbias {
        true => {
            let mut db = vec![0f32; heads * width];
            for (task, row) in partial.chunks_exact(width.max(1)).enumerate().take(batch * heads) {
                let hd = task % heads;
                db[hd * width..(hd + 1) * width].iter_mut().zip(row).for_each(|(a, &b)| *a += b);
            }
            Some(CpuTensor::new(db, heads, width)?)
        }
        false => None,
    };
    Ok((CpuTensor::new(out, batch * seq, 3 * h)?, dbias))
}

/// Adds head `hd`'s relative bias (`bias` `(heads, 2T − 1)`, key j of query i at j − i + T − 1) to the scores `p`
/// `(T, K)` over the real keys `keys`; nothing without a bias.
fn add_bias(p: &mut [f32], bias: Option<&[f32]>, hd: usize, t: usize, keys: &[usize]) {
    let Some(bias) = bias else { return };
    let row = &bias[hd * (2 * t - 1)..(hd + 1) * (2 * t - 1)];
    for (i, pr) in p.chunks_exact_mut(keys.len()).enumerate() {
        pr.iter_mut().zip(keys).for_each(|(x, &j)| *x += row[j + t - 1 - i]);
    }
}

/// One (sequence, head): `rows (T, ld)` holds q at column `qc`, k at `qc + h`, v at `qc + 2h` (d columns each);
/// writes columns `qc..qc + d` of `out (T, h)`. Only the first `keys` keys are read (`mask` is theirs; the last is
/// real). `rel`: the head's relative bias `(2T − 1)`, key j of query i at j − i + T − 1, or the disentangled terms.
#[allow(clippy::too_many_arguments)]
fn head(rows: &[f32], ld: usize, qc: usize, h: usize, d: usize, seq: usize, keys: usize, mask: &[f32],
    rel: HeadBias<'_>, scale: f32, out: &mut [f32], scratch: &mut Vec<f32>) {
    let kp = keys.div_ceil(CT) * CT; // kᵀ's row length: whole score tiles; the extra columns are zero keys
    let rows_bias = if matches!(rel, HeadBias::None) { 0 } else { QT * kp };
    scratch.clear();
    scratch.resize(d * kp + QT * kp + kp + rows_bias, 0.0);
    let (kt, rest) = scratch.split_at_mut(d * kp); // kt (d, Kp)
    let (s, rest) = rest.split_at_mut(QT * kp); // scores, then exponentials, of the tile (QT, Kp)
    let (bias, qbias) = rest.split_at_mut(kp); // per key: 0 if real, -inf if padding or past `keys`
    // With `rel`: per query of the tile, its keys' mask bias plus relative bias (QT, Kp).
    for j in 0..keys {
        let k = &rows[j * ld + qc + h..j * ld + qc + h + d];
        for (l, &v) in k.iter().enumerate() {
            kt[l * kp + j] = v;
        }
    }
    for (j, b) in bias.iter_mut().enumerate() {
        *b = if j < keys && mask[j] > 0.5 { 0.0 } else { f32::NEG_INFINITY };
    }
    let dv = d / CT * CT; // output columns covered by whole tiles
    let scale1 = scale;
    // DeBERTa's terms as two small GEMMs per head, then gathered per score: c2p = Q·posKᵀ (T, R) and
    // p2c = K·posQᵀ (keys, R), row r of pos (R, 3H) being [posQ | posK | ·] (head at column qc of each third).
    let disentangled = match rel {
        HeadBias::Disentangled { pos, .. } => {
            let nr = pos.len() / ld;
            let c2p = gemm(seq, d, nr, &rows[qc..], (ld, 1), &pos[h + qc..], (1, ld), 1.0);
            let p2c = gemm(keys, d, nr, &rows[h + qc..], (ld, 1), &pos[qc..], (1, ld), 1.0);
            Some((c2p, p2c, nr))
        }
        _ => None,
    };
    let scale = splat(scale);
    for i0 in (0..seq).step_by(QT) {
        let n = QT.min(seq - i0);
        // The tile's query rows; a short last tile repeats its last row (computed, never written).
        let q: [&[f32]; QT] = std::array::from_fn(|r| {
            let i = i0 + r.min(n - 1);
            &rows[i * ld + qc..i * ld + qc + d]
        });
        // The tile's bias rows: the keys' mask bias, plus with `rel` each query's relative bias.
        let brow: [&[f32]; QT] = match rel {
            HeadBias::None => [&*bias; QT],
            HeadBias::Disentangled { index, .. } => {
                let (c2p, p2c, nr) = disentangled.as_ref().map(|(c, p, nr)| (&c[..], &p[..], *nr)).unwrap_or_default();
                for r in 0..QT {
                    let i = i0 + r.min(n - 1);
                    let qb = &mut qbias[r * kp..(r + 1) * kp];
                    let idx = &index[seq - 1 - i..seq - 1 - i + keys]; // keys j = 0..keys at j − i + T − 1
                    for j in 0..kp {
                        qb[j] = if j < keys {
                            let pr = idx[j] as usize;
                            bias[j] + (c2p[i * nr + pr] + p2c[j * nr + pr]) * scale1
                        } else {
                            bias[j]
                        };
                    }
                }
                std::array::from_fn(|r| &qbias[r * kp..(r + 1) * kp])
            }
            HeadBias::Relative(rel) => {
                for r in 0..QT {
                    let i = i0 + r.min(n - 1);
                    let row = &rel[seq - 1 - i..seq - 1 - i + keys]; // keys j = 0..keys at j − i + T − 1
                    let qb = &mut qbias[r * kp..(r + 1) * kp];
                    for j in 0..kp {
                        qb[j] = if j < keys { bias[j] + row[j] } else { bias[j] };
                    }
                }
                std::array::from_fn(|r| &qbias[r * kp..(r + 1) * kp])
            }
        };
        // Scores s[r][j] = scale · q_r · k_j + bias_r,j, 4 queries × 8 keys per register tile, and each row's max.
        let mut top = [splat(f32::NEG_INFINITY); QT];
        for j0 in (0..kp).step_by(CT) {
            let mut acc = [[zero(); 2]; QT];
            for l in 0..d {
                // SAFETY: j0 + 8 ≤ kp, so both loads are inside row l of kt (d, kp).
                let (k0, k1) = unsafe { (load(kt.as_ptr().add(l * kp + j0)), load(kt.as_ptr().add(l * kp + j0 + 4))) };
                for r in 0..QT {
                    let qv = splat(q[r][l]);
                    acc[r][0] = mul_add(acc[r][0], qv, k0);
                    acc[r][1] = mul_add(acc[r][1], qv, k1);
                }
            }
            // SAFETY: j0 + 8 ≤ kp bounds the bias loads (rows of kp) and, with r < QT, the stores into s (QT, kp).
            unsafe {
                for (r, a) in acc.iter().enumerate() {
                    let (b0, b1) = (load(brow[r].as_ptr().add(j0)), load(brow[r].as_ptr().add(j0 + 4)));
                    let (s0, s1) = (add(mul(a[0], scale), b0), add(mul(a[1], scale), b1));
                    top[r] = max(top[r], max(s0, s1));
                    store(s.as_mut_ptr().add(r * kp + j0), s0);
                    store(s.as_mut_ptr().add(r * kp + j0 + 4), s1);
                }
            }
        }
        // Unnormalised probabilities e_j = exp(s_j − max) (exactly 0 for padded keys), and 1 / Σ_j e_j,
        // which scales the weighted sums below instead of a pass over the probabilities.
        let mut inv = [0f32; QT];
        for r in 0..n {
            let t = to_array(top[r]);
            let mx = max_of(t);
            inv[r] = 1.0 / exp_and_sum(&mut s[r * kp..r * kp + keys], mask, mx);
        }
        // Context o[r][c] = (Σ_j e[r][j] · v_j[c]) / Σ_j e[r][j], 4 queries × 8 columns per register tile.
        let p: [&[f32]; QT] = std::array::from_fn(|r| &s[r.min(n - 1) * kp..r.min(n - 1) * kp + keys]);
        for c0 in (0..dv).step_by(CT) {
            let mut acc: [[V; 2]; QT] = [[zero(); 2]; QT];
            for j in 0..keys {
                // SAFETY: c0 + 8 ≤ d, so both loads are inside v_j = rows[j·ld + qc + 2h ..][..d].
                let (v0, v1) = unsafe {
                    let pv = rows.as_ptr().add(j * ld + qc + 2 * h + c0);
                    (load(pv), load(pv.add(4)))
                };
                for r in 0..QT {
                    let pr = splat(p[r][j]);
                    acc[r][0] = mul_add(acc[r][0], pr, v0);
                    acc[r][1] = mul_add(acc[r][1], pr, v1);
                }
            }
            for (r, a) in acc.iter().enumerate().take(n) {
                let o = &mut out[(i0 + r) * h + qc + c0..(i0 + r) * h + qc + c0 + CT];
                let w = splat(inv[r]);
                // SAFETY: `o` holds the 8 floats written.
                unsafe {
                    store(o.as_mut_ptr(), mul(a[0], w));
                    store(o.as_mut_ptr().add(4), mul(a[1], w));
                }
            }
        }
        // Columns after the last whole tile (heads whose size is not a multiple of 8).
        for r in 0..n {
            for c in dv..d {
                let v: f32 = (0..keys).map(|j| p[r][j] * rows[j * ld + qc + 2 * h + c]).sum();
                out[(i0 + r) * h + qc + c] = v * inv[r];
            }
        }
    }
}

/// What one head's scores get besides q·k: nothing, its relative bias row `(2T − 1)`, or DeBERTa's terms from
/// `pos (R, 3H)` at the rows `index (2T − 1)` says.
#[derive(Clone, Copy)]
enum HeadBias<'a> {
    None,
    Relative(&'a [f32]),
    Disentangled { pos: &'a [f32], index: &'a [f32] },
}

/// The largest of 4 values, in a fixed order.
fn max_of(t: [f32; 4]) -> f32 {
    let a = if t[1] > t[0] { t[1] } else { t[0] };
    let b = if t[3] > t[2] { t[3] } else { t[2] };
    if b > a { b } else { a }
}

/// `row[j] = exp(row[j] − max)` where `mask[j]` is above 0.5 (real), else 0, returning their sum. Written as straight-line
/// lanes so it vectorises (SIMD128 with `fastmath::exp`, the mask a select): 8 partial sums, combined in a fixed
/// order. `max` is finite (some key is real); padded keys (score −inf) are set to exactly 0.
fn exp_and_sum(row: &mut [f32], mask: &[f32], max: f32) -> f32 {
    const L: usize = 8;
    let split = row.len() / L * L;
    let mut sums = [0f32; L];
    for (v, &m) in row.iter_mut().zip(mask) {
        let e = super::fastmath::exp(*v - max);
        *v = if m > 0.5 { e } else { 0.0 };
    }
    for c in row[..split].chunks_exact(L) {
        for l in 0..L {
            sums[l] += c[l];
        }
    }
    let tail: f32 = row[split..].iter().sum();
    ((sums[0] + sums[4]) + (sums[1] + sums[5])) + ((sums[2] + sums[6]) + (sums[3] + sums[7])) + tail
}

#[cfg(test)]
mod tests {
    use crate::testutil::{assert_close, rand_vec};
    use super::super::CpuBackend;
    use super::*;
    use crate::backend::Backend;

    /// f32 GEMMs + f32 exp against an f64 reference, |q|,|k|,|v| < 1 and d ≤ 64: errors are a few ulps of the
    /// O(1) outputs.
    const ATT_ATOL: f32 = 2e-5;
    const ATT_RTOL: f32 = 1e-5;

    fn reference(qkv: &[f32], mask: &[f32], b: usize, t: usize, heads: usize, d: usize) -> Vec<f32> {
        reference_biased(qkv, mask, None, b, t, heads, d)
    }

    /// `bias`: `(heads, 2T − 1)`, key j of query i at column j − i + T − 1.
    fn reference_biased(qkv: &[f32], mask: &[f32], bias: Option<&[f32]>, b: usize, t: usize, heads: usize, d: usize)
        -> Vec<f32> {
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
                            / (d as f64).sqrt()
                            + bias.map_or(0.0, |r| r[hd * (2 * t - 1) + j + t - 1 - i] as f64);
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
        let cpu = CpuBackend::new();
        // (batch, seq, heads, head_dim, real lengths per sequence)
        let cases: &[(usize, usize, usize, usize, &[usize])] = &[
            (1, 1, 1, 1, &[1]),
            (2, 7, 3, 5, &[7, 3]),
            (3, 33, 2, 16, &[33, 1, 0]), // a fully padded sequence → zeros
            (1, 513, 1, 7, &[500]),
            (2, 9, 12, 4, &[9, 9]),
            // BERT's head sizes (whole 8-column tiles), query counts off the 4-row tile, keys off the 8-key tile
            (2, 37, 2, 32, &[37, 20]),
            (1, 130, 1, 64, &[129]),
            (1, 6, 3, 12, &[5]), // a head of one tile plus 4 columns
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

    /// Padding between real keys (a mask that is not a prefix): those keys get probability 0 like trailing ones.
    #[test]
    fn holes_in_the_mask() {
        let cpu = CpuBackend::new();
        let (b, t, heads, d) = (2, 19, 2, 32);
        let h = heads * d;
        let qkv = rand_vec(b * t * 3 * h, 77);
        let mask: Vec<f32> = (0..b * t).map(|i| if i % 3 == 1 || i % t == t - 1 { 0.0 } else { 1.0 }).collect();
        let got = cpu
            .attention(&cpu.input(&qkv, b * t, 3 * h).unwrap(), &cpu.input(&mask, b, t).unwrap(),
                AttentionShape { batch: b, seq: t, heads, head_dim: d })
            .unwrap();
        assert_close(got.data(), &reference(&qkv, &mask, b, t, heads, d), ATT_ATOL, ATT_RTOL, "attention with holes");
    }

    #[test]
    fn padding_keys_do_not_leak() {
        // Same real tokens, different garbage in the padding: identical context rows for the real queries.
        let cpu = CpuBackend::new();
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

    /// A relative bias (MPNet's) on the scores: the tiles' per-query bias rows against the f64 reference, with
    /// padding, query counts off the 4-row tile and keys off the 8-key tile; a bias of the wrong shape is refused.
    #[test]
    fn relative_bias_matches_reference() {
        let cpu = CpuBackend::new();
        let cases: &[(usize, usize, usize, usize, &[usize])] =
            &[(1, 1, 1, 1, &[1]), (2, 7, 3, 5, &[7, 3]), (3, 33, 2, 16, &[33, 1, 0]), (2, 37, 2, 32, &[37, 20])];
        for &(b, t, heads, d, lens) in cases {
            let h = heads * d;
            let qkv = rand_vec(b * t * 3 * h, (b * t * h + 5) as u64).iter().map(|v| v * 2.0).collect::<Vec<_>>();
            let bias = rand_vec(heads * (2 * t - 1), 31).iter().map(|v| v * 3.0).collect::<Vec<_>>();
            let mut mask = vec![0f32; b * t];
            for (bi, &l) in lens.iter().enumerate() {
                mask[bi * t..bi * t + l].fill(1.0);
            }
            let shape = AttentionShape { batch: b, seq: t, heads, head_dim: d };
            let (tq, tm) = (cpu.input(&qkv, b * t, 3 * h).unwrap(), cpu.input(&mask, b, t).unwrap());
            let tb = cpu.input(&bias, heads, 2 * t - 1).unwrap();
            let got = cpu.attention_biased(&tq, &tm, Some(&tb), shape).unwrap();
            let want = reference_biased(&qkv, &mask, Some(&bias), b, t, heads, d);
            assert_close(got.data(), &want, ATT_ATOL, ATT_RTOL, &format!("biased attention b{b} t{t} heads{heads} d{d}"));
            // The bias changes the result (the test can fail), and no bias is the plain kernel.
            if t > 1 {
                assert!(got.data().iter().zip(&reference(&qkv, &mask, b, t, heads, d)).any(|(a, c)| (a - c).abs() > 1e-3));
            }
            assert_eq!(cpu.attention_biased(&tq, &tm, None, shape).unwrap().data(), cpu.attention(&tq, &tm, shape).unwrap().data());
            let wrong = cpu.input(&bias[..heads * (2 * t - 1) - 1], 1, heads * (2 * t - 1) - 1).unwrap_or(tb);
            let e = cpu.attention_biased(&tq, &tm, Some(&wrong), shape).err().map(|e| e.to_string());
            assert!(heads * (2 * t - 1) == 1 || e.as_deref().is_some_and(|e| e.contains("attention bias")), "{e:?}");
        }
    }

    #[test]
    fn shape_errors() {
        let cpu = CpuBackend::new();
        let q = cpu.input(&[0.0; 12], 2, 6).unwrap();
        let m = cpu.input(&[1.0; 2], 1, 2).unwrap();
        assert!(cpu.attention(&q, &m, AttentionShape { batch: 1, seq: 2, heads: 2, head_dim: 1 }).is_ok());
        assert!(cpu.attention(&q, &m, AttentionShape { batch: 1, seq: 2, heads: 1, head_dim: 1 }).is_err());
        assert!(cpu.attention(&q, &m, AttentionShape { batch: 2, seq: 1, heads: 2, head_dim: 1 }).is_err());
    }
}
