//! The GPU kernels of the encoder's backward ops (shaders/backward.wgsl, layernorm_backward.wgsl,
//! attention_backward.wgsl, embeddings.wgsl without its LayerNorm) and AdamW's gradient scale, clipping and
//! non-finite guard, against their CPU twins, over small BERT-like shapes that hit the edges: padding, a sequence of padding only, repeated rows in the
//! scatter-adds, lengths that are multiples of nothing. Skipped (with a message) where no adapter exists; every
//! comparison first checks the shape, so a kernel that writes nothing cannot pass.

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::GpuBackend;
use bertgpu::backend::{Activation, AdamWStep, AttentionShape, Backend, EmbeddingTables};
use bertgpu::tokenizer::Batch;
use bertgpu::weights::{HostData, HostTensor};

mod common;
use common::{assert_close, gpu, rand_vec};

/// add: one correctly rounded f32 addition per element on both sides: bit-identical.
const ADD_TOL: f32 = 0.0;
/// activation: the shader's erf is Abramowitz–Stegun 7.1.26 (|error| ≤ 1.5e-7) and its tanh goes through exp, vs
/// the CPU's own erf and std's tanh; inputs in [-4, 4).
const ACT_ATOL: f32 = 1e-6;
const ACT_RTOL: f32 = 1e-5;
/// sum_rows: an f32 running sum down ≤ 257 rows of |v| < 1 vs the CPU's f64 sum: each step rounds by ≤ ½ ulp of a
/// partial sum ≲ 16 (1e-6), over 257 steps ≲ 3e-5 even when the roundings do not cancel.
const SUM_ROWS_ATOL: f32 = 3e-5;
const SUM_ROWS_RTOL: f32 = 1e-5;
/// sum_squares: f32 partial sums (64 values per invocation, then trees) of non-negative terms vs f64: relative error
/// ≲ (64 + log2 of the rest)·ε ≈ 5e-6.
const SUMSQ_RTOL: f32 = 1e-5;
/// scatter_rows, embeddings_backward, embeddings_sum: the same f32 additions in the same order (the CPU's token
/// order; the sum w + p + t as the CPU groups it): bit-identical.
const SCATTER_TOL: f32 = 0.0;
/// layernorm_backward: the CPU keeps the row statistics and the two means in f64, the GPU in f32 workgroup trees
/// over ≤ 384 values: a few ulps of rstd·O(1) values (dx), and f32 column sums over ≤ 6 rows (dγ, dβ).
const LN_ATOL: f32 = 1e-5;
const LN_RTOL: f32 = 1e-4;
/// attention_backward: f32 exp on the GPU (lavapipe's may differ from Rust's by ulps), Σ P⊙dP in f32 (f64 on the
/// CPU), possible fma contraction of the dot products; gradients are O(1) from |qkv| < 2.
const ATT_ATOL: f32 = 1e-5;
const ATT_RTOL: f32 = 1e-4;
/// AdamW: the same arithmetic in the same order; sqrt and division may round differently by an ulp.
const ADAMW_ATOL: f32 = 1e-7;
const ADAMW_RTOL: f32 = 1e-6;

type CpuT = <CpuBackend as Backend>::Tensor;
type GpuT = <GpuBackend as Backend>::Tensor;

fn cpu_in(d: &[f32], r: usize, c: usize) -> CpuT {
    CpuBackend::new().input(d, r, c).unwrap()
}

/// A GPU result against its CPU twin: shapes first, then values; prints and returns the largest error.
fn check(g: &GpuBackend, what: &str, got: &GpuT, want: &CpuT, atol: f32, rtol: f32) -> f32 {
    assert_eq!(g.dims(got), (want.rows(), want.cols()), "{what}: shape");
    let got = pollster::block_on(g.read(got)).unwrap();
    assert_eq!(got.len(), want.rows() * want.cols(), "{what}: values read back");
    let err = assert_close(what, &got, &want.to_vec(), atol, rtol);
    eprintln!("max |err| {err:e}  {what}");
    err
}

#[test]
fn add_and_activation_match_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    for &(r, c) in &[(1usize, 1usize), (7, 33), (33, 384)] {
        let a: Vec<f32> = rand_vec(r * c, 11).iter().map(|v| v * 4.0).collect();
        let b = rand_vec(r * c, 12);
        let want = cpu.add(&cpu_in(&a, r, c), &cpu_in(&b, r, c)).unwrap();
        let got = g.add(&g.input(&a, r, c).unwrap(), &g.input(&b, r, c).unwrap()).unwrap();
        check(&g, &format!("add {r}x{c}"), &got, &want, ADD_TOL, ADD_TOL);
        for act in [Activation::None, Activation::Gelu, Activation::GeluTanh, Activation::Relu, Activation::Tanh] {
            let want = cpu.activation(&cpu_in(&a, r, c), act).unwrap();
            let got = g.activation(&g.input(&a, r, c).unwrap(), act).unwrap();
            check(&g, &format!("{act:?} {r}x{c}"), &got, &want, ACT_ATOL, ACT_RTOL);
        }
    }
}

/// The sums of squares with every row-kernel variant (their workgroup sum is the row kernels').
#[test]
fn column_sums_and_squared_norm_match_cpu() {
    let Some(g) = gpu() else { return };
    for t in bertgpu::backend::gpu::row_candidates(g.gpu()) {
        g.set_tuning(t);
        column_sums_and_squared_norm(&g);
    }
}

fn column_sums_and_squared_norm(g: &GpuBackend) {
    let cpu = CpuBackend::new();
    for &(r, c) in &[(1usize, 1usize), (7, 33), (257, 384), (3, 1000)] {
        let x = rand_vec(r * c, (r * 7 + c) as u64);
        let want = cpu.sum_rows(&cpu_in(&x, r, c)).unwrap();
        let got = g.sum_rows(&g.input(&x, r, c).unwrap()).unwrap();
        check(g, &format!("sum_rows {r}x{c}"), &got, &want, SUM_ROWS_ATOL, SUM_ROWS_RTOL);
    }
    // One workgroup's chunk (16384 values), one value past it, several chunks, and a gradient-sized tensor.
    for &(r, c) in &[(1usize, 1usize), (7, 33), (128, 128), (16385, 1), (3, 16389), (513, 384)] {
        let x = rand_vec(r * c, (r + c) as u64);
        let want = cpu.sum_squares(&cpu_in(&x, r, c)).unwrap();
        assert!(want.to_vec()[0] > 0.0);
        let got = g.sum_squares(&g.input(&x, r, c).unwrap()).unwrap();
        check(g, &format!("sum_squares {r}x{c} ({})", g.tuning()), &got, &want, 0.0, SUMSQ_RTOL);
    }
    // Many tensors at once (a step's gradients): against the CPU's sum of each, added in order.
    let shapes = [(1usize, 1usize), (7, 33), (16385, 1), (3, 16389), (513, 384), (1, 1)];
    let xs: Vec<Vec<f32>> = shapes.iter().map(|&(r, c)| rand_vec(r * c, (r * 3 + c) as u64)).collect();
    let cpu_xs: Vec<_> = xs.iter().zip(&shapes).map(|(x, &(r, c))| cpu_in(x, r, c)).collect();
    let gpu_xs: Vec<_> = xs.iter().zip(&shapes).map(|(x, &(r, c))| g.input(x, r, c).unwrap()).collect();
    let want = cpu.sum_squares_all(&cpu_xs.iter().collect::<Vec<_>>()).unwrap();
    let got = g.sum_squares_all(&gpu_xs.iter().collect::<Vec<_>>()).unwrap();
    check(g, "sum_squares_all of 6 tensors", &got, &want, 0.0, SUMSQ_RTOL);
    assert!(g.sum_squares_all(&[]).is_err() && cpu.sum_squares_all(&[]).is_err());
}

#[test]
fn scatter_rows_adds_repeated_rows_like_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let rows = [3u32, 0, 3, 5, 3, 0, 7];
    for &c in &[1usize, 33, 384] {
        let x = rand_vec(rows.len() * c, c as u64);
        let want = cpu.scatter_rows(&cpu_in(&x, rows.len(), c), &rows, 9).unwrap();
        let got = g.scatter_rows(&g.input(&x, rows.len(), c).unwrap(), &rows, 9).unwrap();
        check(&g, &format!("scatter_rows 7 -> 9x{c}"), &got, &want, SCATTER_TOL, SCATTER_TOL);
        // Row 3 got three rows: a kernel that kept only the last would differ.
        let got = pollster::block_on(g.read(&got)).unwrap();
        assert_ne!(got[3 * c], x[4 * c], "row 3 holds a sum, not its last row");
    }
}

fn batch() -> Batch {
    // Two sequences of 7: the second with padding at the end (its ids 0, type 0); repeated ids (4, 0, 9) and both
    // token types.
    Batch {
        input_ids: vec![1, 4, 9, 4, 2, 4, 9, 5, 9, 0, 3, 0, 0, 0],
        token_type_ids: vec![0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0],
        attention_mask: vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
        b: 2,
        t: 7,
    }
}

#[test]
fn embeddings_sum_and_backward_match_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let b = batch();
    let (vocab, positions, types) = (11usize, 9usize, 2usize);
    for &h in &[33usize, 384] {
        // The forward's sum, f32 tables and an f16 word table (decoded in the shader, exactly as on the host).
        let word = rand_vec(vocab * h, 1);
        let (pos, tt) = (rand_vec(positions * h, 2), rand_vec(types * h, 3));
        let f16 = HostTensor {
            shape: vec![vocab, h],
            data: HostData::F16(word.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect()),
        };
        let f32w = HostTensor { shape: vec![vocab, h], data: HostData::F32(word.clone()) };
        let ln = (vec![1.0f32; h], vec![0.0f32; h]);
        for (name, w) in [("f32", &f32w), ("f16", &f16)] {
            let (cw, gw) = (cpu.upload(w).unwrap(), g.upload(w).unwrap());
            let (cp, ct, cg, cb) = (cpu_in(&pos, positions, h), cpu_in(&tt, types, h), cpu_in(&ln.0, 1, h), cpu_in(&ln.1, 1, h));
            let gi = |d: &[f32], r| g.input(d, r, h).unwrap();
            let (gp, gt, gg, gb) = (gi(&pos, positions), gi(&tt, types), gi(&ln.0, 1), gi(&ln.1, 1));
            let ct_ = EmbeddingTables { word: &cw, position: Some(&cp), token_type: &ct, ln_gamma: &cg, ln_beta: &cb, eps: 1e-12 };
            let gt_ = EmbeddingTables { word: &gw, position: Some(&gp), token_type: &gt, ln_gamma: &gg, ln_beta: &gb, eps: 1e-12 };
            let want = cpu.embeddings_sum(&b, &ct_).unwrap();
            let got = g.embeddings_sum(&b, &gt_).unwrap();
            check(&g, &format!("embeddings_sum {name} H={h}"), &got, &want, SCATTER_TOL, SCATTER_TOL);
            // The forward (with its LayerNorm) still runs beside it: a different pipeline of the same shader.
            let normed = pollster::block_on(g.read(&g.embeddings(&b, &gt_).unwrap())).unwrap();
            let summed = pollster::block_on(g.read(&got)).unwrap();
            assert_ne!(normed, summed, "embeddings_sum must not normalise");
        }
        // The backward: a scatter-add into the three tables, without and with a padding row that gets nothing.
        let d = rand_vec(b.b * b.t * h, h as u64);
        for pad in [None, Some(0u32)] {
            let (ww, wp, wt) = cpu.embeddings_backward(&cpu_in(&d, 14, h), &b, vocab, positions, types, pad).unwrap();
            let (gw, gp, gt) = g.embeddings_backward(&g.input(&d, 14, h).unwrap(), &b, vocab, positions, types, pad).unwrap();
            check(&g, &format!("embeddings_backward word H={h} pad {pad:?}"), &gw, &ww, SCATTER_TOL, SCATTER_TOL);
            check(&g, &format!("embeddings_backward position H={h} pad {pad:?}"), &gp, &wp, SCATTER_TOL, SCATTER_TOL);
            check(&g, &format!("embeddings_backward type H={h} pad {pad:?}"), &gt, &wt, SCATTER_TOL, SCATTER_TOL);
            // Word row 0 (padding and a real token) got four rows, none as the padding row; rows 6, 7, 8, 10 none;
            // positions 7 and 8 none.
            let gw = pollster::block_on(g.read(&gw)).unwrap();
            assert_eq!(gw[..h].iter().any(|&v| v != 0.0), pad.is_none(), "word row 0 with pad {pad:?}");
            assert!(gw[6 * h..9 * h].iter().all(|&v| v == 0.0));
            let gp = pollster::block_on(g.read(&gp)).unwrap();
            assert!(gp[7 * h..].iter().all(|&v| v == 0.0) && gp[..h].iter().any(|&v| v != 0.0));
        }
    }
}

/// With every row-kernel variant (tree or subgroup sums).
#[test]
fn layernorm_backward_matches_cpu() {
    let Some(g) = gpu() else { return };
    for t in bertgpu::backend::gpu::row_candidates(g.gpu()) {
        g.set_tuning(t);
        layernorm_backward(&g);
    }
}

fn layernorm_backward(g: &GpuBackend) {
    let cpu = CpuBackend::new();
    for &(m, n, eps) in &[(5usize, 32usize, 1e-12f32), (3, 384, 1e-5), (6, 7, 1e-12), (2, 1, 1e-5)] {
        let x: Vec<f32> = rand_vec(m * n, (m * n) as u64).iter().map(|v| v * 3.0 + 0.5).collect();
        let dy = rand_vec(m * n, 21);
        let gamma: Vec<f32> = rand_vec(n, 22).iter().map(|v| v + 1.0).collect();
        let (wx, wg, wb) = cpu.layernorm_backward(&cpu_in(&dy, m, n), &cpu_in(&x, m, n), &cpu_in(&gamma, 1, n), eps).unwrap();
        let gi = |d: &[f32], r, c| g.input(d, r, c).unwrap();
        let (gx, gg, gb) = g.layernorm_backward(&gi(&dy, m, n), &gi(&x, m, n), &gi(&gamma, 1, n), eps).unwrap();
        let what = format!("layernorm_backward {m}x{n} ({})", g.tuning());
        check(g, &format!("{what} dx"), &gx, &wx, LN_ATOL, LN_RTOL);
        check(g, &format!("{what} dgamma"), &gg, &wg, LN_ATOL, LN_RTOL);
        check(g, &format!("{what} dbeta"), &gb, &wb, LN_ATOL, LN_RTOL);
    }
}

#[test]
fn attention_backward_matches_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    // (batch, seq, heads, head_dim, real lengths): padding at the end of one sequence, a sequence of padding only
    // (zero gradients), BERT-sized heads.
    let cases: &[(usize, usize, usize, usize, &[usize])] = &[
        (2, 7, 4, 8, &[7, 4]),
        (2, 5, 2, 4, &[0, 3]),
        (1, 1, 1, 1, &[1]),
        (2, 33, 2, 64, &[33, 20]),
    ];
    for &(b, t, heads, d, lens) in cases {
        let h = heads * d;
        let qkv: Vec<f32> = rand_vec(b * t * 3 * h, (b * t * h) as u64).iter().map(|v| v * 2.0).collect();
        let dctx = rand_vec(b * t * h, 31);
        let mut mask = vec![0f32; b * t];
        for (bi, &l) in lens.iter().enumerate() {
            mask[bi * t..bi * t + l].fill(1.0);
        }
        let s = AttentionShape { batch: b, seq: t, heads, head_dim: d };
        let want = cpu.attention_backward(&cpu_in(&dctx, b * t, h), &cpu_in(&qkv, b * t, 3 * h), &cpu_in(&mask, b, t), s, None).unwrap();
        let gi = |v: &[f32], r, c| g.input(v, r, c).unwrap();
        let got = g.attention_backward(&gi(&dctx, b * t, h), &gi(&qkv, b * t, 3 * h), &gi(&mask, b, t), s, None).unwrap();
        check(&g, &format!("attention_backward b{b} t{t} heads{heads} d{d} lens {lens:?}"), &got, &want, ATT_ATOL, ATT_RTOL);
        let got = pollster::block_on(g.read(&got)).unwrap();
        for (bi, &l) in lens.iter().enumerate() {
            let rows = &got[bi * t * 3 * h..(bi + 1) * t * 3 * h];
            if l == 0 {
                assert!(rows.iter().all(|&v| v == 0.0), "a sequence of padding only gets zero gradients");
            } else {
                assert!(rows.iter().any(|&v| v != 0.0));
                // Padding keys: dk and dv zero.
                for j in l..t {
                    assert!(rows[j * 3 * h + h..(j + 1) * 3 * h].iter().all(|&v| v == 0.0), "padding key {j}");
                }
            }
        }
    }
}

#[test]
fn adamw_scales_clips_and_skips_like_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let (r, c) = (7usize, 33usize);
    let p = rand_vec(r * c, 1);
    let gr: Vec<f32> = rand_vec(r * c, 2).iter().map(|v| v * 0.01).collect();
    let m: Vec<f32> = rand_vec(r * c, 3).iter().map(|v| v * 0.001).collect();
    let v: Vec<f32> = rand_vec(r * c, 4).iter().map(|v| v * v * 1e-5).collect();
    let base = AdamWStep::new(1e-2, 0.01, 0.9, 0.999, 1e-8, 3);
    let up = |d: &[f32]| g.input(d, r, c).unwrap();
    let run_cpu = |s: &AdamWStep, q: Option<f32>| {
        let q = q.map(|q| cpu_in(&[q], 1, 1));
        cpu.adamw(&cpu_in(&p, r, c), &cpu_in(&gr, r, c), &cpu_in(&m, r, c), &cpu_in(&v, r, c), s, q.as_ref()).unwrap()
    };
    let run_gpu = |s: &AdamWStep, q: Option<f32>| {
        let q = q.map(|q| g.input(&[q], 1, 1).unwrap());
        g.adamw(&up(&p), &up(&gr), &up(&m), &up(&v), s, q.as_ref()).unwrap()
    };
    let read = |t: &GpuT| pollster::block_on(g.read(t)).unwrap();
    // (grad_scale, max_grad_norm, squared norm of the raw gradient): ‖g‖ = 0.5·√400 = 10 in the clipped cases.
    let cases = [
        ("grad_scale 0.37", 0.37, None, None),
        ("clipped to 1 of 10", 0.5, Some(1.0), Some(400.0)),
        ("10 under a max of 100", 0.5, Some(100.0), Some(400.0)),
        ("a norm, no clipping", 1.0, None, Some(4.0)),
    ];
    for (what, scale, max, q) in cases {
        let s = AdamWStep { grad_scale: scale, max_grad_norm: max, ..base };
        let (wp, wm, wv) = run_cpu(&s, q);
        let (gp, gm, gv) = run_gpu(&s, q);
        check(&g, &format!("adamw {what} param"), &gp, &wp, ADAMW_ATOL, ADAMW_RTOL);
        check(&g, &format!("adamw {what} m"), &gm, &wm, ADAMW_ATOL, ADAMW_RTOL);
        check(&g, &format!("adamw {what} v"), &gv, &wv, ADAMW_ATOL, ADAMW_RTOL);
    }
    // Clipping is torch's clip_grad_norm_ (max / (‖g‖ + 1e-6), in f64 here): the same step as the gradient scaled by
    // hand, and not the unclipped one.
    let by_hand = AdamWStep { grad_scale: (0.5 * (1.0 / (10.0 + 1e-6f64)).min(1.0)) as f32, ..base };
    let clipped = AdamWStep { grad_scale: 0.5, max_grad_norm: Some(1.0), ..base };
    let (want, got) = (run_cpu(&by_hand, None).1, run_cpu(&clipped, Some(400.0)).1);
    assert_close("clipped m against torch's scale", &got.to_vec(), &want.to_vec(), ADAMW_ATOL, ADAMW_RTOL);
    let unclipped = run_cpu(&AdamWStep { grad_scale: 0.5, ..base }, None).1;
    assert!(got.to_vec().iter().zip(unclipped.to_vec()).any(|(x, y)| *x != y), "clipping changed the first moment");
    // A NaN or infinite norm (a diverged loss): nothing changes, bit for bit, on either side; with or without clipping.
    for q in [f32::NAN, f32::INFINITY] {
        for max in [Some(1.0), None] {
            let s = AdamWStep { grad_scale: 0.5, max_grad_norm: max, ..base };
            let (cp, cm, cv) = run_cpu(&s, Some(q));
            let (gp, gm, gv) = run_gpu(&s, Some(q));
            for (name, want, c, gt) in [("param", &p, &cp, &gp), ("m", &m, &cm, &gm), ("v", &v, &cv, &gv)] {
                assert_eq!(&c.to_vec(), want, "cpu {name} after a norm² of {q}, clipping {max:?}");
                assert_eq!(&read(gt), want, "gpu {name} after a norm² of {q}, clipping {max:?}");
            }
        }
    }
    // Clipping needs the norm.
    let s = AdamWStep { max_grad_norm: Some(1.0), ..base };
    assert!(g.adamw(&up(&p), &up(&gr), &up(&m), &up(&v), &s, None).is_err());
    assert!(cpu.adamw(&cpu_in(&p, r, c), &cpu_in(&gr, r, c), &cpu_in(&m, r, c), &cpu_in(&v, r, c), &s, None).is_err());
}

#[test]
fn bad_shapes_are_errors() {
    let Some(g) = gpu() else { return };
    let a = g.input(&[0.0; 6], 2, 3).unwrap();
    let b = g.input(&[0.0; 4], 2, 2).unwrap();
    // Elementwise and scatter.
    assert!(g.add(&a, &b).is_err());
    assert!(g.scatter_rows(&a, &[0], 4).is_err(), "one index for two rows");
    assert!(g.scatter_rows(&a, &[0, 4], 4).is_err(), "row 4 of 4");
    // LayerNorm: dy of another shape, gamma of another width.
    let g3 = g.input(&[1.0; 3], 1, 3).unwrap();
    assert!(g.layernorm_backward(&b, &a, &g3, 1e-5).is_err());
    assert!(g.layernorm_backward(&a, &a, &b, 1e-5).is_err());
    assert!(g.layernorm_backward(&a, &a, &g3, 1e-5).is_ok());
    // Embeddings: d with the wrong row count, an id outside the vocabulary, a table of another width.
    let bt = batch();
    let d = g.input(&vec![0.0; 13 * 4], 13, 4).unwrap();
    assert!(g.embeddings_backward(&d, &bt, 11, 9, 2, None).is_err());
    let d = g.input(&vec![0.0; 14 * 4], 14, 4).unwrap();
    assert!(g.embeddings_backward(&d, &bt, 11, 9, 2, None).is_ok());
    assert!(g.embeddings_backward(&d, &bt, 9, 9, 2, None).is_err());
    let (w, p4, p3) = (g.input(&[0.0; 44], 11, 4).unwrap(), g.input(&[0.0; 36], 9, 4).unwrap(), g.input(&[0.0; 27], 9, 3).unwrap());
    let t4 = g.input(&[0.0; 8], 2, 4).unwrap();
    let tables = |pos| EmbeddingTables { word: &w, position: Some(pos), token_type: &t4, ln_gamma: &g3, ln_beta: &g3, eps: 1e-12 };
    assert!(g.embeddings_sum(&bt, &tables(&p4)).is_ok(), "the LayerNorm fields are not read");
    assert!(g.embeddings_sum(&bt, &tables(&p3)).is_err());
    // Attention: dctx, qkv and mask against the shape.
    let s = AttentionShape { batch: 1, seq: 2, heads: 2, head_dim: 1 };
    let (qkv, dctx, mask) = (g.input(&[0.0; 12], 2, 6).unwrap(), g.input(&[0.0; 4], 2, 2).unwrap(), g.input(&[1.0; 2], 1, 2).unwrap());
    assert!(g.attention_backward(&dctx, &qkv, &mask, s, None).is_ok());
    assert!(g.attention_backward(&a, &qkv, &mask, s, None).is_err());
    assert!(g.attention_backward(&dctx, &qkv, &dctx, s, None).is_err());
    assert!(g.attention_backward(&dctx, &qkv, &mask, AttentionShape { heads: 1, ..s }, None).is_err());
    // AdamW: a gradient of another shape.
    let st = AdamWStep::new(1e-3, 0.0, 0.9, 0.999, 1e-8, 1);
    assert!(g.adamw(&a, &b, &a, &a, &st, None).is_err());
    assert!(g.adamw(&a, &a, &a, &a, &st, Some(&a)).is_err(), "a squared norm of 6 values");
}
