//! DeBERTa's disentangled attention for training: its backward (`Backend::attention_backward_disentangled`: the
//! gradients of qkv and of the projected relative table `pos`, content-to-position and position-to-content terms
//! both) and its forward with dropout (`Backend::attention_dropout_disentangled`). The CPU twin against central
//! differences of the inference forward (`Backend::attention_disentangled`, itself checked against transformers in
//! tests/deberta.rs) and of the dropout forward; the WGSL kernels (shaders/attention_backward.wgsl with
//! `DISENTANGLED = 1`, its `attn_bwd_pos` and `attn_bwd_pos_rows` passes; lib/attention.wgsl with `DISENTANGLED` and
//! `DROPOUT`) against the CPU twin over shapes with padding, a sequence of padding only, T = 1, and row tables where
//! many offsets share a row (the clamped ends of the log buckets).

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::{AttentionShape, Backend, Dropout};

mod common;
use common::attention::{f32s, padded_mask, rand_f64, weighted_sum, worst_fd_errors};
use common::{assert_close, gpu, rand_vec, read};

/// dqkv: tests/attention_bias_backward.rs's ATT_ATOL / ATT_RTOL (the same passes, two more dot products per score
/// and per output). Measured worst 2.6e-6 (lavapipe), printed as "max |err|".
const ATT_ATOL: f32 = 1e-5;
const ATT_RTOL: f32 = 1e-4;
/// dpos: each entry sums G·q (or G·k) over up to B·T² (query, key) pairs of one row, the GPU sequences then offsets
/// then queries, the CPU per sequence as two GEMMs then over the sequences; the same bound as the relative bias's
/// gradient in tests/attention_bias_backward.rs (DBIAS_ATOL). Measured worst 1.8e-6 (lavapipe).
const DPOS_ATOL: f32 = 1e-5;
const DPOS_RTOL: f32 = 1e-4;
/// Forward with dropout: tests/dropout.rs's attention tolerance. Measured worst 8.5e-7 (lavapipe).
const FWD_ATOL: f32 = 1e-5;
const FWD_RTOL: f32 = 1e-4;
/// Central differences of an f32 forward with O(step²) truncation: tests/attention_bias_backward.rs's FD_ATOL.
/// Measured worst 1.2e-5 (dpos with dropout; dqkv 1.2e-5 without).
const FD_ATOL: f64 = 1e-4;

/// A row index `(1, 2T − 1)` as DeBERTa's: offset j − i = c − (T − 1) reads row clamp(span − (i − j)), so offsets
/// past the span share the end rows; `R = 2·span`.
fn row_index(t: usize, span: usize) -> Vec<f32> {
    (0..2 * t - 1).map(|c| (c as i64 - (t as i64 - 1) + span as i64).clamp(0, 2 * span as i64 - 1) as f32).collect()
}

#[test]
fn the_disentangled_gradients_match_finite_differences() {
    let cpu = CpuBackend::new();
    let (b, t, heads, d, span) = (2usize, 6usize, 2usize, 3usize, 2usize);
    let (h, r) = (heads * d, 2 * span);
    let s = AttentionShape { batch: b, seq: t, heads, head_dim: d };
    let (qkv, pos) = (rand_f64(b * t * 3 * h, 3), rand_f64(r * 3 * h, 8));
    let w = rand_vec(b * t * h, 4);
    let m = cpu.input(&padded_mask(b, t, &[6, 4]), b, t).unwrap();
    let rows = cpu.input(&row_index(t, span), 1, 2 * t - 1).unwrap();
    for drop in [None, Some(Dropout { p: 0.3, seed: 11, stream: 1 })] {
        let loss = |x: &[f64], p: &[f64]| -> f64 {
            let (x, pt) = (cpu.input(&f32s(x), b * t, 3 * h).unwrap(), cpu.input(&f32s(p), r, 3 * h).unwrap());
            let y = match drop {
                Some(dr) => cpu.attention_dropout_disentangled(&x, &m, &pt, &rows, s, dr),
                None => cpu.attention_disentangled(&x, &m, &pt, &rows, s),
            };
            weighted_sum(&y.unwrap().to_vec(), &w)
        };
        let (dqkv, dpos) = cpu.attention_backward_disentangled(&cpu.input(&w, b * t, h).unwrap(),
            &cpu.input(&f32s(&qkv), b * t, 3 * h).unwrap(), &m, &cpu.input(&f32s(&pos), r, 3 * h).unwrap(), &rows, s, drop)
            .unwrap();
        let (dqkv, dpos) = (dqkv.to_vec(), dpos.to_vec());
        let (worst_x, worst_p) = worst_fd_errors(&qkv, &pos, loss, &dqkv, &dpos);
        let size = |v: &[f32]| v.iter().map(|v| v.abs()).fold(0f32, f32::max);
        // posQ and posK both get a gradient, the v third none (the table is not projected to values).
        let third = |k: usize| dpos.chunks_exact(3 * h).flat_map(|row| row[k * h..(k + 1) * h].to_vec()).collect::<Vec<f32>>();
        eprintln!("dropout {drop:?}: max |fd − dpos| {worst_p:e} (largest |dposQ| {:e}, |dposK| {:e}), max |fd − dqkv| {worst_x:e}",
            size(&third(0)), size(&third(1)));
        assert!(worst_p < FD_ATOL && worst_x < FD_ATOL, "{drop:?}: dpos {worst_p:e}, dqkv {worst_x:e}");
        assert!(size(&third(0)) > 1e-2 && size(&third(1)) > 1e-2, "both terms have a gradient to check");
        assert!(third(2).iter().all(|&v| v == 0.0), "no gradient into the unused third");
    }
    // Bad shapes are refused by name.
    let (wi, qi) = (cpu.input(&w, b * t, h).unwrap(), cpu.input(&f32s(&qkv), b * t, 3 * h).unwrap());
    let short = cpu.input(&row_index(t, span)[1..], 1, 2 * t - 2).unwrap();
    let pt = cpu.input(&f32s(&pos), r, 3 * h).unwrap();
    let e = cpu.attention_backward_disentangled(&wi, &qi, &m, &pt, &short, s, None).err().map(|e| e.to_string());
    assert!(e.as_deref().is_some_and(|e| e.contains("rows")), "a row index of the wrong width is refused: {e:?}");
    let far = cpu.input(&vec![r as f32; 2 * t - 1], 1, 2 * t - 1).unwrap();
    let e = cpu.attention_backward_disentangled(&wi, &qi, &m, &pt, &far, s, None).err().map(|e| e.to_string());
    assert!(e.as_deref().is_some_and(|e| e.contains("rows")), "a row past pos is refused: {e:?}");
}

/// A dropout that keeps everything (p far below one draw in 2³²) is the inference forward.
#[test]
fn the_dropout_forward_without_drops_is_the_inference_forward() {
    let cpu = CpuBackend::new();
    let (b, t, heads, d, span) = (2usize, 9usize, 3usize, 4usize, 3usize);
    let (h, r) = (heads * d, 2 * span);
    let s = AttentionShape { batch: b, seq: t, heads, head_dim: d };
    let qkv = cpu.input(&rand_vec(b * t * 3 * h, 21), b * t, 3 * h).unwrap();
    let pos = cpu.input(&rand_vec(r * 3 * h, 22), r, 3 * h).unwrap();
    let m = cpu.input(&padded_mask(b, t, &[9, 5]), b, t).unwrap();
    let rows = cpu.input(&row_index(t, span), 1, 2 * t - 1).unwrap();
    let want = cpu.attention_disentangled(&qkv, &m, &pos, &rows, s).unwrap().to_vec();
    let got = cpu.attention_dropout_disentangled(&qkv, &m, &pos, &rows, s, Dropout { p: 1e-12, seed: 1, stream: 0 })
        .unwrap().to_vec();
    assert_close("dropout forward kept everything", &got, &want, FWD_ATOL, FWD_RTOL);
}

#[test]
fn the_disentangled_backward_and_forward_kernels_match_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    // (b, t, heads, d, span, lens)
    let cases: &[(usize, usize, usize, usize, usize, &[usize])] = &[
        (2, 7, 4, 8, 2, &[7, 4]),
        (2, 5, 2, 4, 4, &[0, 3]),
        (1, 1, 1, 1, 1, &[1]),
        (3, 33, 2, 64, 8, &[33, 20, 1]),
    ];
    let (mut worst_dq, mut worst_dp, mut worst_fwd) = (0f32, 0f32, 0f32);
    for &(b, t, heads, d, span, lens) in cases {
        let (h, r) = (heads * d, 2 * span);
        let qkv: Vec<f32> = rand_vec(b * t * 3 * h, (b * t * h) as u64).iter().map(|v| v * 2.0).collect();
        let pos: Vec<f32> = rand_vec(r * 3 * h, 17).iter().map(|v| v * 2.0).collect();
        let dctx = rand_vec(b * t * h, 31);
        let (mask, rows) = (padded_mask(b, t, lens), row_index(t, span));
        let s = AttentionShape { batch: b, seq: t, heads, head_dim: d };
        let ci = |v: &[f32], r, c| cpu.input(v, r, c).unwrap();
        let gi = |v: &[f32], r, c| g.input(v, r, c).unwrap();
        for drop in [None, Some(Dropout { p: 0.25, seed: 9, stream: 4 })] {
            let what = format!("b{b} t{t} heads{heads} d{d} span{span} lens {lens:?} dropout {drop:?}");
            let (wq, wp) = cpu.attention_backward_disentangled(&ci(&dctx, b * t, h), &ci(&qkv, b * t, 3 * h), &ci(&mask, b, t),
                &ci(&pos, r, 3 * h), &ci(&rows, 1, 2 * t - 1), s, drop).unwrap();
            let (gq, gp) = g.attention_backward_disentangled(&gi(&dctx, b * t, h), &gi(&qkv, b * t, 3 * h), &gi(&mask, b, t),
                &gi(&pos, r, 3 * h), &gi(&rows, 1, 2 * t - 1), s, drop).unwrap();
            assert_eq!((g.dims(&gq), g.dims(&gp)), ((b * t, 3 * h), (r, 3 * h)), "{what}: shapes");
            worst_dq = worst_dq.max(assert_close(&format!("dqkv {what}"), &read(&g, &gq), &wq.to_vec(), ATT_ATOL, ATT_RTOL));
            worst_dp = worst_dp.max(assert_close(&format!("dpos {what}"), &read(&g, &gp), &wp.to_vec(), DPOS_ATOL, DPOS_RTOL));
            if let Some(dr) = drop {
                let want = cpu.attention_dropout_disentangled(&ci(&qkv, b * t, 3 * h), &ci(&mask, b, t), &ci(&pos, r, 3 * h),
                    &ci(&rows, 1, 2 * t - 1), s, dr).unwrap();
                let got = g.attention_dropout_disentangled(&gi(&qkv, b * t, 3 * h), &gi(&mask, b, t), &gi(&pos, r, 3 * h),
                    &gi(&rows, 1, 2 * t - 1), s, dr).unwrap();
                worst_fwd = worst_fwd.max(assert_close(&format!("forward {what}"), &read(&g, &got), &want.to_vec(), FWD_ATOL, FWD_RTOL));
            }
        }
    }
    eprintln!("max |err|: dqkv {worst_dq:e}, dpos {worst_dp:e}, disentangled dropout forward {worst_fwd:e}");
}
