//! The attention's backward with an additive score bias (`Backend::attention_backward_biased`: MPNet's relative
//! position bias `(heads, 2T − 1)`), and the training forward with that bias and dropout
//! (`Backend::attention_dropout_biased`): the CPU twin against central differences (the bias's gradient and the
//! inputs' gradient, with and without the dropout mask), and the WGSL kernels (shaders/attention_backward.wgsl with
//! `BIAS = 1`, its `attn_bwd_bias` pass; lib/attention.wgsl with `BIAS` and `DROPOUT`) against the CPU twin over
//! shapes that hit the edges: padding, a sequence of padding only, T = 1, BERT-sized heads.

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::{AttentionShape, Backend, Dropout};

mod common;
use common::attention::{f32s, padded_mask, rand_f64, weighted_sum, worst_fd_errors};
use common::{assert_close, gpu, rand_vec, read};

/// dqkv: tests/backward_gpu.rs's `ATT_ATOL` / `ATT_RTOL` (f32 exp on the GPU vs Rust's, Σ P⊙dP in f32 vs f64, fma
/// contraction); the bias changes the scores, not the arithmetic. Measured worst: printed as "max |err|".
const ATT_ATOL: f32 = 1e-5;
const ATT_RTOL: f32 = 1e-4;
/// dbias: each entry sums dS over up to B·T (query, key) pairs of one offset, the GPU in f32 in order of sequence
/// then query, the CPU per sequence then over the sequences, each dS carrying ATT_ATOL-level differences; then
/// divided by the score scale on the GPU (dS is kept scaled there). Measured worst 4.3e-6 (lavapipe, |dbias| up to
/// about 10).
const DBIAS_ATOL: f32 = 1e-5;
const DBIAS_RTOL: f32 = 1e-4;
/// Forward with bias and dropout: tests/dropout.rs's attention tolerance (the same kernel with one more input).
const FWD_ATOL: f32 = 1e-5;
const FWD_RTOL: f32 = 1e-4;
/// Central differences of an f32 forward (≈ 1e-7 per output over 2·step) with O(step²) truncation, step
/// tests/common/attention.rs's `FD_STEP` (1e-2): tests/dropout.rs's bound on O(1) gradients. Measured worst 1.0e-5.
const FD_ATOL: f64 = 1e-4;

/// `x ↦ Σ w ⊙ attention(qkv, bias)` (with dropout `drop`, if any) against the backward's gradients, for the bias
/// and for qkv, on the CPU twin.
#[test]
fn the_bias_gradient_matches_finite_differences() {
    let cpu = CpuBackend::new();
    let (b, t, heads, d) = (2usize, 5usize, 2usize, 3usize);
    let (h, width) = (heads * d, 2 * t - 1);
    let (qkv, bias) = (rand_f64(b * t * 3 * h, 3), rand_f64(heads * width, 5));
    let w = rand_vec(b * t * h, 4);
    let m = cpu.input(&padded_mask(b, t, &[5, 3]), b, t).unwrap();
    let s = AttentionShape { batch: b, seq: t, heads, head_dim: d };
    for drop in [None, Some(Dropout { p: 0.3, seed: 11, stream: 1 })] {
        let loss = |x: &[f64], bi: &[f64]| -> f64 {
            let (x, bt) = (cpu.input(&f32s(x), b * t, 3 * h).unwrap(), cpu.input(&f32s(bi), heads, width).unwrap());
            let y = match drop {
                Some(dr) => cpu.attention_dropout_biased(&x, &m, Some(&bt), s, dr),
                None => cpu.attention_biased(&x, &m, Some(&bt), s),
            };
            weighted_sum(&y.unwrap().to_vec(), &w)
        };
        let (dqkv, dbias) = cpu.attention_backward_biased(&cpu.input(&w, b * t, h).unwrap(),
            &cpu.input(&f32s(&qkv), b * t, 3 * h).unwrap(), &m, Some(&cpu.input(&f32s(&bias), heads, width).unwrap()), s,
            drop, true).unwrap();
        let (dqkv, dbias) = (dqkv.to_vec(), dbias.expect("dbias asked for").to_vec());
        let (worst_x, worst_b) = worst_fd_errors(&qkv, &bias, loss, &dqkv, &dbias);
        let size = dbias.iter().map(|v| v.abs()).fold(0f32, f32::max);
        eprintln!("dropout {drop:?}: max |fd − dbias| {worst_b:e} (largest |dbias| {size:e}), max |fd − dqkv| {worst_x:e}");
        assert!(worst_b < FD_ATOL && worst_x < FD_ATOL, "{drop:?}: dbias {worst_b:e}, dqkv {worst_x:e}");
        assert!(size > 1e-2, "the bias has a gradient to check");
    }
    // Without `want_dbias` nothing is computed; without a bias the biased call is the plain one.
    let (wi, qi) = (cpu.input(&w, b * t, h).unwrap(), cpu.input(&f32s(&qkv), b * t, 3 * h).unwrap());
    let bt = cpu.input(&f32s(&bias), heads, width).unwrap();
    assert!(cpu.attention_backward_biased(&wi, &qi, &m, Some(&bt), s, None, false).unwrap().1.is_none());
    let (plain, none) = cpu.attention_backward_biased(&wi, &qi, &m, None, s, None, true).unwrap();
    assert!(none.is_none(), "no bias, no gradient for one");
    assert_eq!(plain.to_vec(), cpu.attention_backward(&wi, &qi, &m, s, None).unwrap().to_vec());
    let wrong = cpu.input(&vec![0.0; heads * (width - 1)], heads, width - 1).unwrap();
    let e = cpu.attention_backward_biased(&wi, &qi, &m, Some(&wrong), s, None, true).err().map(|e| e.to_string());
    assert!(e.as_deref().is_some_and(|e| e.contains("bias")), "a bias of the wrong width is refused: {e:?}");
}

#[test]
fn the_biased_backward_and_forward_kernels_match_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let cases: &[(usize, usize, usize, usize, &[usize])] = &[
        (2, 7, 4, 8, &[7, 4]),
        (2, 5, 2, 4, &[0, 3]),
        (1, 1, 1, 1, &[1]),
        (3, 33, 2, 64, &[33, 20, 1]),
    ];
    let (mut worst_dq, mut worst_db, mut worst_fwd) = (0f32, 0f32, 0f32);
    for &(b, t, heads, d, lens) in cases {
        let (h, width) = (heads * d, 2 * t - 1);
        let qkv: Vec<f32> = rand_vec(b * t * 3 * h, (b * t * h) as u64).iter().map(|v| v * 2.0).collect();
        let dctx = rand_vec(b * t * h, 31);
        let bias: Vec<f32> = rand_vec(heads * width, 7).iter().map(|v| v * 3.0).collect();
        let mask = padded_mask(b, t, lens);
        let s = AttentionShape { batch: b, seq: t, heads, head_dim: d };
        let ci = |v: &[f32], r, c| cpu.input(v, r, c).unwrap();
        let gi = |v: &[f32], r, c| g.input(v, r, c).unwrap();
        for drop in [None, Some(Dropout { p: 0.25, seed: 9, stream: 4 })] {
            let what = format!("b{b} t{t} heads{heads} d{d} lens {lens:?} dropout {drop:?}");
            for want_dbias in [true, false] {
                let (wq, wb) = cpu.attention_backward_biased(&ci(&dctx, b * t, h), &ci(&qkv, b * t, 3 * h), &ci(&mask, b, t),
                    Some(&ci(&bias, heads, width)), s, drop, want_dbias).unwrap();
                let (gq, gb) = g.attention_backward_biased(&gi(&dctx, b * t, h), &gi(&qkv, b * t, 3 * h), &gi(&mask, b, t),
                    Some(&gi(&bias, heads, width)), s, drop, want_dbias).unwrap();
                assert_eq!(g.dims(&gq), (b * t, 3 * h), "{what}: dqkv shape");
                worst_dq = worst_dq.max(assert_close(&format!("dqkv {what}"), &read(&g, &gq), &wq.to_vec(), ATT_ATOL, ATT_RTOL));
                assert_eq!(gb.is_some(), want_dbias, "{what}: dbias exactly when asked for");
                if let (Some(gb), Some(wb)) = (gb, wb) {
                    assert_eq!(g.dims(&gb), (heads, width), "{what}: dbias shape");
                    worst_db = worst_db.max(assert_close(&format!("dbias {what}"), &read(&g, &gb), &wb.to_vec(), DBIAS_ATOL, DBIAS_RTOL));
                }
            }
            if let Some(dr) = drop {
                let want = cpu.attention_dropout_biased(&ci(&qkv, b * t, 3 * h), &ci(&mask, b, t), Some(&ci(&bias, heads, width)), s, dr)
                    .unwrap();
                let got = g.attention_dropout_biased(&gi(&qkv, b * t, 3 * h), &gi(&mask, b, t), Some(&gi(&bias, heads, width)), s, dr)
                    .unwrap();
                worst_fwd = worst_fwd.max(assert_close(&format!("forward {what}"), &read(&g, &got), &want.to_vec(), FWD_ATOL, FWD_RTOL));
                // The bias is read: the same call without it differs.
                let plain = cpu.attention_dropout(&ci(&qkv, b * t, 3 * h), &ci(&mask, b, t), s, dr).unwrap().to_vec();
                let apart = plain.iter().zip(&want.to_vec()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(lens.iter().all(|&l| l < 2) || apart > 1e-3, "{what}: the bias changes the output ({apart:e})");
            }
        }
    }
    eprintln!("max |err|: dqkv {worst_dq:e}, dbias {worst_db:e}, biased dropout forward {worst_fwd:e}");
}
