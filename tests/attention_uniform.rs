//! Queries an attention mask marks as masked whole (`backend::UNIFORM_FILLED`: DeBERTa's `masked_fill`;
//! `backend::UNIFORM_ADDED`: the additive `finfo.min` of ModernBERT's window): their probabilities are 1/T over every
//! key, padding included. On the CPU twin (`backend/cpu/uniform.rs`): the context is the mean of every value (times
//! the dropout factors), the real queries' rows are those of the unmarked mask bit for bit, the filled rows'
//! backward matches central differences, and the added rows' score gradient is the softmax's Jacobian at the uniform
//! P, written here from its definition. On the GPU (lib/attention.wgsl, attention_split.wgsl,
//! attention_backward.wgsl): the same as the CPU twin, with and without the relative bias, dropout, and DeBERTa's
//! disentangled terms.

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::{AttentionKernel, GpuBackend, Tuning};
use bertgpu::backend::{AttentionShape, Backend, Dropout, UNIFORM_ADDED, UNIFORM_FILLED};

mod common;
use common::attention::{f32s, rand_f64, weighted_sum, worst_fd_errors};
use common::{assert_close, gpu, rand_vec, read};

/// The forward's marked rows against their mean computed here: f32 sums of T terms in another order.
const MEAN_ATOL: f32 = 1e-6;
/// tests/attention_bias_backward.rs's central-difference bound (the same step, O(1) gradients). Measured: printed.
const FD_ATOL: f64 = 1e-4;
/// The added rows' gradients against the Jacobian written here in f64 (the backend sums in f32).
const JACOBIAN_ATOL: f32 = 1e-5;
/// GPU against the CPU twin: tests/attention_bias_backward.rs's tolerances (the same kernels, one more branch).
const ATT_ATOL: f32 = 1e-5;
const ATT_RTOL: f32 = 1e-4;

/// Sequence 0 whole (6 tokens), sequence 1 with 2 real tokens, then two filled and two added marks.
const B: usize = 2;
const T: usize = 6;
fn marked_mask() -> Vec<f32> {
    let mut m = vec![1.0; B * T];
    m[T + 2..T + 4].fill(UNIFORM_FILLED);
    m[T + 4..].fill(UNIFORM_ADDED);
    m
}

/// The dropout factor of query `i`, key `j` of sequence `b`, head `hd` (`Backend::attention_dropout`'s element).
fn factor(d: Option<Dropout>, heads: usize, b: usize, hd: usize, i: usize, j: usize) -> f32 {
    match d {
        Some(d) if Dropout::keeps(d.key(), d.threshold(), (((b * heads + hd) * T + i) * T + j) as u32) => d.scale(),
        Some(_) => 0.0,
        None => 1.0,
    }
}

#[test]
fn marked_queries_average_every_value_on_the_cpu() {
    let cpu = CpuBackend::new();
    let (heads, d) = (2usize, 3usize);
    let h = heads * d;
    let s = AttentionShape { batch: B, seq: T, heads, head_dim: d };
    let qkv = rand_vec(B * T * 3 * h, 21);
    let bias = rand_vec(heads * (2 * T - 1), 22);
    let (x, bt) = (cpu.input(&qkv, B * T, 3 * h).unwrap(), cpu.input(&bias, heads, 2 * T - 1).unwrap());
    let marked = cpu.input(&marked_mask(), B, T).unwrap();
    let plain: Vec<f32> = marked_mask().iter().map(|&m| if m > 0.5 { 1.0 } else { 0.0 }).collect();
    let plain = cpu.input(&plain, B, T).unwrap();
    let drop = Dropout { p: 0.3, seed: 5, stream: 2 };
    for (what, dr) in [("plain", None), ("dropout", Some(drop))] {
        for with_bias in [false, true] {
            let b = with_bias.then_some(&bt);
            let run = |m| match dr {
                Some(dr) => cpu.attention_dropout_biased(&x, m, b, s, dr).unwrap().to_vec(),
                None => cpu.attention_biased(&x, m, b, s).unwrap().to_vec(),
            };
            let (got, unmarked) = (run(&marked), run(&plain));
            for r in 0..B * T {
                let row = &got[r * h..(r + 1) * h];
                if r < T + 2 {
                    assert_eq!(row, &unmarked[r * h..(r + 1) * h], "{what} bias {with_bias}: real query {r} changed");
                    continue;
                }
                let (bi, i) = (r / T, r % T);
                let want: Vec<f32> = (0..h)
                    .map(|c| {
                        let hd = c / d;
                        (0..T).map(|j| factor(dr, heads, bi, hd, i, j) * qkv[(bi * T + j) * 3 * h + 2 * h + c]).sum::<f32>() / T as f32
                    })
                    .collect();
                assert_close(&format!("{what} bias {with_bias}: marked query {r}"), row, &want, MEAN_ATOL, 0.0);
            }
        }
    }
}

/// A filled row's scores get no gradient, so its whole backward is `dv_j += F_ij·dctx_i / T`: central differences
/// of the forward see exactly that.
#[test]
fn filled_rows_match_finite_differences() {
    let cpu = CpuBackend::new();
    let (heads, d) = (2usize, 3usize);
    let h = heads * d;
    let s = AttentionShape { batch: B, seq: T, heads, head_dim: d };
    let filled: Vec<f32> = marked_mask().iter().map(|&m| if m > 0.5 { 1.0 } else { UNIFORM_FILLED }).collect();
    let m = cpu.input(&filled, B, T).unwrap();
    let qkv = rand_f64(B * T * 3 * h, 23);
    let w = rand_vec(B * T * h, 24);
    for drop in [None, Some(Dropout { p: 0.3, seed: 7, stream: 1 })] {
        let loss = |x: &[f64], _: &[f64]| -> f64 {
            let x = cpu.input(&f32s(x), B * T, 3 * h).unwrap();
            let y = match drop {
                Some(dr) => cpu.attention_dropout_biased(&x, &m, None, s, dr),
                None => cpu.attention_biased(&x, &m, None, s),
            };
            weighted_sum(&y.unwrap().to_vec(), &w)
        };
        let (dqkv, _) = cpu.attention_backward_biased(&cpu.input(&w, B * T, h).unwrap(),
            &cpu.input(&f32s(&qkv), B * T, 3 * h).unwrap(), &m, None, s, drop, false).unwrap();
        let (worst, _) = worst_fd_errors(&qkv, &[], loss, &dqkv.to_vec(), &[]);
        eprintln!("dropout {drop:?}: max |fd − dqkv| {worst:e}");
        assert!(worst < FD_ATOL, "{drop:?}: {worst:e}");
        // The padded keys get value gradients from the filled rows, nothing else.
        let dq = dqkv.to_vec();
        let padded_dv = (T + 2..2 * T).flat_map(|j| dq[j * 3 * h + 2 * h..(j + 1) * 3 * h].to_vec());
        assert!(padded_dv.clone().any(|v| v != 0.0), "padded keys' values are read by the filled rows");
        let padded_dk = (T + 2..2 * T).flat_map(|j| dq[j * 3 * h..j * 3 * h + 2 * h].to_vec());
        assert!(padded_dk.into_iter().all(|v| v == 0.0), "filled rows give no query or key gradient");
    }
}

/// An added row: autograd goes through `s_ij + finfo.min`, so `dS = (diag(P) − P·Pᵀ)·dP` at P = 1/T over every key,
/// `dP_ij = dctx_i·v_j`; `dq_i = Σ_j dS_ij·k_j/√d`, `dk_j += dS_ij·q_i/√d`, `dv_j += dctx_i/T`.
#[test]
fn added_rows_follow_the_softmax_jacobian() {
    let cpu = CpuBackend::new();
    let (heads, d) = (1usize, 4usize);
    let h = heads * d;
    let s = AttentionShape { batch: B, seq: T, heads, head_dim: d };
    let mut mask = vec![1.0; B * T];
    mask[T + 2..T + 5].fill(0.0);
    mask[2 * T - 1] = UNIFORM_ADDED; // the one marked query: sequence 1, position T − 1
    let qkv = rand_vec(B * T * 3 * h, 25);
    let dctx = rand_vec(B * T * h, 26);
    let run = |m: &[f32], dc: &[f32]| {
        let (dq, _) = cpu.attention_backward_biased(&cpu.input(dc, B * T, h).unwrap(), &cpu.input(&qkv, B * T, 3 * h).unwrap(),
            &cpu.input(m, B, T).unwrap(), None, s, None, false).unwrap();
        dq.to_vec()
    };
    // The marked row alone: dctx zero elsewhere, so everything comes from row r.
    let r = 2 * T - 1;
    let mut only = vec![0f32; B * T * h];
    only[r * h..(r + 1) * h].copy_from_slice(&dctx[r * h..(r + 1) * h]);
    let got = run(&mask, &only);
    let at = |j: usize, part: usize, c: usize| qkv[(T + j) * 3 * h + part * h + c] as f64;
    let dc = |c: usize| dctx[r * h + c] as f64;
    let tf = T as f64;
    let dp: Vec<f64> = (0..T).map(|j| (0..d).map(|c| dc(c) * at(j, 2, c)).sum()).collect();
    // (diag(P) − P·Pᵀ)·dP with P_j = 1/T.
    let ds: Vec<f64> = (0..T).map(|j| dp[j] / tf - dp.iter().sum::<f64>() / (tf * tf)).collect();
    let scale = 1.0 / (d as f64).sqrt();
    let mut want = vec![0f32; B * T * 3 * h];
    for j in 0..T {
        for c in 0..d {
            want[r * 3 * h + c] += (ds[j] * at(j, 1, c) * scale) as f32;
            want[(T + j) * 3 * h + h + c] += (ds[j] * at(T - 1, 0, c) * scale) as f32;
            want[(T + j) * 3 * h + 2 * h + c] += (dc(c) / tf) as f32;
        }
    }
    let worst = assert_close("added row's gradients", &got, &want, JACOBIAN_ATOL, 0.0);
    eprintln!("added row: max |err| {worst:e}");
    assert!(got[r * 3 * h..r * 3 * h + h].iter().any(|&v| v.abs() > 1e-3), "the query gets a gradient to check");
}

/// Every forward kernel (the per-query ones and the split ones, each query over head_dim/4 invocations), the
/// backward's passes.
#[test]
fn marked_queries_match_cpu_on_the_gpu() {
    let Some(g) = gpu() else { return };
    for kernel in [AttentionKernel::Vec4, AttentionKernel::Fixed, AttentionKernel::Scalar, AttentionKernel::Split,
        AttentionKernel::SplitSubgroup] {
        g.set_tuning(Tuning { attention: kernel, ..Tuning::default() });
        eprintln!("{kernel:?}");
        marked_queries_match_cpu(&g);
    }
}

fn marked_queries_match_cpu(g: &GpuBackend) {
    let cpu = CpuBackend::new();
    let mask = marked_mask();
    let filled: Vec<f32> = mask.iter().map(|&m| if m > 0.5 { 1.0 } else { UNIFORM_FILLED }).collect();
    let mut worst = 0f32;
    // head_dim 3 runs the scalar kernel whatever the tuning; 8 and 64 the vec4, fixed and split ones.
    for (heads, d) in [(2usize, 3usize), (2, 8), (1, 64)] {
        let h = heads * d;
        let width = 2 * T - 1;
        let s = AttentionShape { batch: B, seq: T, heads, head_dim: d };
        let qkv: Vec<f32> = rand_vec(B * T * 3 * h, 27).iter().map(|v| v * 2.0).collect();
        let dctx = rand_vec(B * T * h, 28);
        let bias = rand_vec(heads * width, 29);
        let ci = |v: &[f32], r, c| cpu.input(v, r, c).unwrap();
        let gi = |v: &[f32], r, c| g.input(v, r, c).unwrap();
        for drop in [None, Some(Dropout { p: 0.25, seed: 3, stream: 6 })] {
            for with_bias in [false, true] {
                let what = format!("heads {heads} d {d} dropout {drop:?} bias {with_bias}");
                let (cb, gb) = (with_bias.then(|| ci(&bias, heads, width)), with_bias.then(|| gi(&bias, heads, width)));
                let (cm, gm) = (ci(&mask, B, T), gi(&mask, B, T));
                let (cx, gx) = (ci(&qkv, B * T, 3 * h), gi(&qkv, B * T, 3 * h));
                let (want, got) = match drop {
                    Some(dr) => (cpu.attention_dropout_biased(&cx, &cm, cb.as_ref(), s, dr).unwrap(),
                        g.attention_dropout_biased(&gx, &gm, gb.as_ref(), s, dr).unwrap()),
                    None => (cpu.attention_biased(&cx, &cm, cb.as_ref(), s).unwrap(),
                        g.attention_biased(&gx, &gm, gb.as_ref(), s).unwrap()),
                };
                worst = worst.max(assert_close(&format!("forward {what}"), &read(g, &got), &want.to_vec(), ATT_ATOL, ATT_RTOL));
                let (wq, wb) = cpu.attention_backward_biased(&ci(&dctx, B * T, h), &cx, &cm, cb.as_ref(), s, drop, with_bias)
                    .unwrap();
                let (gq, gbias) = g.attention_backward_biased(&gi(&dctx, B * T, h), &gx, &gm, gb.as_ref(), s, drop, with_bias)
                    .unwrap();
                worst = worst.max(assert_close(&format!("dqkv {what}"), &read(g, &gq), &wq.to_vec(), ATT_ATOL, ATT_RTOL));
                if let (Some(w), Some(gv)) = (wb, gbias) {
                    worst = worst.max(assert_close(&format!("dbias {what}"), &read(g, &gv), &w.to_vec(), ATT_ATOL, ATT_RTOL));
                }
            }
            // DeBERTa's kernels, filled marks: 3 projected rows, offset o reading row o mod 3.
            let what = format!("disentangled heads {heads} d {d} dropout {drop:?}");
            let nr = 3;
            let pos = rand_vec(nr * 3 * h, 30);
            let rows: Vec<f32> = (0..width).map(|o| (o % nr) as f32).collect();
            let (cx, gx) = (ci(&qkv, B * T, 3 * h), gi(&qkv, B * T, 3 * h));
            let (cm, gm) = (ci(&filled, B, T), gi(&filled, B, T));
            let (cp, gp, cr, gr) = (ci(&pos, nr, 3 * h), gi(&pos, nr, 3 * h), ci(&rows, 1, width), gi(&rows, 1, width));
            let (want, got) = match drop {
                Some(dr) => (cpu.attention_dropout_disentangled(&cx, &cm, &cp, &cr, s, dr).unwrap(),
                    g.attention_dropout_disentangled(&gx, &gm, &gp, &gr, s, dr).unwrap()),
                None => (cpu.attention_disentangled(&cx, &cm, &cp, &cr, s).unwrap(),
                    g.attention_disentangled(&gx, &gm, &gp, &gr, s).unwrap()),
            };
            worst = worst.max(assert_close(&format!("forward {what}"), &read(g, &got), &want.to_vec(), ATT_ATOL, ATT_RTOL));
            let (wq, wp) = cpu.attention_backward_disentangled(&ci(&dctx, B * T, h), &cx, &cm, &cp, &cr, s, drop).unwrap();
            let (gq, gpos) = g.attention_backward_disentangled(&gi(&dctx, B * T, h), &gx, &gm, &gp, &gr, s, drop).unwrap();
            worst = worst.max(assert_close(&format!("dqkv {what}"), &read(g, &gq), &wq.to_vec(), ATT_ATOL, ATT_RTOL));
            worst = worst.max(assert_close(&format!("dpos {what}"), &read(g, &gpos), &wp.to_vec(), ATT_ATOL, ATT_RTOL));
        }
    }
    eprintln!("max |err| GPU vs CPU: {worst:e}");
}
