//! Every GPU kernel against its CPU twin (`backend::cpu::CpuBackend`), over awkward shapes (1, 7, 33, 64, 127, 513), masked rows and batches of
//! mixed lengths. |gpu − ref| ≤ atol + rtol·|ref| elementwise; a failure names the worst index.
//!
//! The tests skip (saying why) only when there is no GPU adapter at all; with Mesa lavapipe installed they all run.

#![cfg(not(target_arch = "wasm32"))]

use bertgpu::backend::gpu::{AttentionKernel, GpuBackend, GpuTensor, Tuning};
use bertgpu::backend::{Activation, AttentionShape, Backend, EmbeddingTables};
use bertgpu::weights::{HostData, HostTensor};
use bertgpu::backend::cpu::CpuBackend;

mod common;
use common::{assert_close, batch, gpu, host, rand_vec, read};

/// matmul: a K-term f32 sum carries a rounding error that grows with K (worst case ≈ K·2⁻²⁴·Σ|terms|; the GPU
/// adds in 4-wide partial dot products, the CPU backend in another order). With |x|, |w| ≤ 1 the observed worst error
/// is 3.8e-5 at K = 513 (sums up to ~15), so atol = 2e-6 + 1.5e-7·K (7.9e-5 at K = 513) leaves margin without
/// hiding a wrong index or a missing term (errors of order 0.1–1).
const MATMUL_ATOL: f32 = 2e-6;
const MATMUL_ATOL_PER_K: f32 = 1.5e-7;
const MATMUL_RTOL: f32 = 1e-5;
/// Epilogues: inputs are scaled ×3, so sums (and their rounding error) are 3× the matmul test's; the GPU's erf is
/// Abramowitz–Stegun 7.1.26 (|error| ≤ 1.5e-7, so GELU moves by ≤ 0.5·|x|·1.5e-7 ≈ 1e-6 at |x| = 10); tanh goes
/// through exp (a few ulps). Three times the matmul budget.
const EPILOGUE_ATOL: f32 = 6e-6;
const EPILOGUE_ATOL_PER_K: f32 = 3e-7;
const EPILOGUE_RTOL: f32 = 2e-5;
/// layernorm: outputs are O(1) after normalisation; mean and variance are reduced in a tree on the GPU and
/// sequentially on the CPU, and 1/sqrt is `inverseSqrt` (a few ulps): 1e-5 absolute.
const LAYERNORM_ATOL: f32 = 1e-5;
const LAYERNORM_RTOL: f32 = 1e-5;
/// attention: a d-long dot product, exp (a few ulps on GPUs), a T-long sum and a T-long weighted sum of values in
/// [-1, 1]; the GPU's online softmax also rescales its partial sums whenever the running max grows (observed worst
/// 1.7e-6). 2e-5 absolute on O(1) outputs.
const ATTENTION_ATOL: f32 = 2e-5;
const ATTENTION_RTOL: f32 = 1e-5;
/// mean_pool and gather_rows: gather is exact; the mean is a T-long f32 sum in the same order on both sides
/// divided once, so the only difference is the division (1 ulp).
const POOL_ATOL: f32 = 1e-6;
const POOL_RTOL: f32 = 1e-6;

const SIZES: [usize; 6] = [1, 7, 33, 64, 127, 513];
/// Inner sizes the vec4 kernels take (K % 4 == 0; SIZES has only 64 of them): 4, 36 and 100 leave the wide
/// kernel a half slab of K at the end (an odd number of vec4), 136 leaves none.
const VEC4_KS: [usize; 4] = [4, 36, 100, 136];

/// Every matmul variant the calibration may choose on this adapter (tune.rs), on every awkward shape.
#[test]
fn linear_matches_cpu_over_awkward_shapes() {
    let Some(g) = gpu() else { return };
    for t in bertgpu::backend::gpu::matmul_candidates(g.gpu()) {
        let t = g.set_tuning(t);
        let worst = linear_cases(&g, &SIZES).max(linear_cases(&g, &VEC4_KS));
        eprintln!("linear {t}: worst |err| {worst:e}");
    }
}

/// Every (M, N) of SIZES with every K of `ks`.
fn linear_cases(g: &GpuBackend, ks: &[usize]) -> f32 {
    let r = CpuBackend::new();
    let mut worst = 0.0f32;
    for (i, &m) in SIZES.iter().enumerate() {
        for (j, &n) in SIZES.iter().enumerate() {
            for (l, &k) in ks.iter().enumerate() {
                let seed = (i * 36 + j * 6 + l) as u64;
                let x = rand_vec(m * k, seed);
                let w = rand_vec(n * k, seed + 1000);
                let b = rand_vec(n, seed + 2000);
                let with_bias = (i + j + l) % 2 == 0;
                let (gx, gw, gb) = (g.input(&x, m, k).unwrap(), g.upload(&host(&[n, k], w.clone())).unwrap(),
                    g.upload(&host(&[n], b.clone())).unwrap());
                let (rx, rw, rb) = (r.input(&x, m, k).unwrap(), r.upload(&host(&[n, k], w)).unwrap(),
                    r.upload(&host(&[n], b)).unwrap());
                let gy = g.linear(&gx, &gw, with_bias.then_some(&gb), Activation::None).unwrap();
                let ry = r.linear(&rx, &rw, with_bias.then_some(&rb), Activation::None).unwrap();
                assert_eq!(g.dims(&gy), (m, n));
                let got = read(g, &gy);
                let want = pollster::block_on(r.read(&ry)).unwrap();
                let e = assert_close(&format!("linear {} M={m} N={n} K={k} bias={with_bias}", g.tuning()), &got, &want,
                    MATMUL_ATOL + MATMUL_ATOL_PER_K * k as f32, MATMUL_RTOL);
                worst = worst.max(e);
            }
        }
    }
    worst
}

#[test]
fn linear_epilogues_match_cpu() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    for act in [Activation::None, Activation::Gelu, Activation::GeluTanh, Activation::Relu, Activation::Tanh] {
        for &(m, n, k) in &[(33, 127, 64), (7, 513, 33), (64, 64, 127), (1, 7, 1)] {
            // Scaled so pre-activations span roughly [-6, 6]: both GELU tails, tanh saturation and ReLU's kink.
            let x: Vec<f32> = rand_vec(m * k, 7).iter().map(|v| v * 3.0).collect();
            let w = rand_vec(n * k, 8);
            let b = rand_vec(n, 9);
            let gy = g.linear(&g.input(&x, m, k).unwrap(), &g.upload(&host(&[n, k], w.clone())).unwrap(),
                Some(&g.upload(&host(&[n], b.clone())).unwrap()), act).unwrap();
            let ry = r.linear(&r.input(&x, m, k).unwrap(), &r.upload(&host(&[n, k], w)).unwrap(),
                Some(&r.upload(&host(&[n], b)).unwrap()), act).unwrap();
            let got = read(&g, &gy);
            let want = pollster::block_on(r.read(&ry)).unwrap();
            let e = assert_close(&format!("linear {act:?} M={m} N={n} K={k}"), &got, &want,
                EPILOGUE_ATOL + EPILOGUE_ATOL_PER_K * k as f32, EPILOGUE_RTOL);
            eprintln!("{act:?} ({m},{n},{k}): worst |err| {e:e}");
        }
    }
}

/// Every row-kernel variant the calibration may choose on this adapter (widths; tree or subgroup sums).
#[test]
fn layernorm_matches_cpu() {
    let Some(g) = gpu() else { return };
    for t in bertgpu::backend::gpu::row_candidates(g.gpu()) {
        g.set_tuning(t);
        eprintln!("row kernels: {t}");
        layernorm_cases(&g);
    }
}

fn layernorm_cases(g: &GpuBackend) {
    let r = CpuBackend::new();
    for &rows in &[1usize, 7, 33, 513] {
        for &cols in &[1usize, 7, 33, 64, 127, 384, 513] {
            for residual in [false, true] {
                let seed = (rows * 1000 + cols) as u64;
                // An offset and a scale per row, so the mean really has to be removed.
                let x: Vec<f32> = rand_vec(rows * cols, seed).iter().enumerate()
                    .map(|(i, v)| v * (1.0 + (i / cols % 5) as f32) + 3.0).collect();
                let res = rand_vec(rows * cols, seed + 1);
                let gamma = rand_vec(cols, seed + 2);
                let beta = rand_vec(cols, seed + 3);
                let gy = g.layernorm(&g.input(&x, rows, cols).unwrap(),
                    residual.then(|| g.input(&res, rows, cols).unwrap()).as_ref(),
                    &g.upload(&host(&[cols], gamma.clone())).unwrap(), &g.upload(&host(&[cols], beta.clone())).unwrap(),
                    1e-12).unwrap();
                let ry = r.layernorm(&r.input(&x, rows, cols).unwrap(),
                    residual.then(|| r.input(&res, rows, cols).unwrap()).as_ref(),
                    &r.upload(&host(&[cols], gamma)).unwrap(), &r.upload(&host(&[cols], beta)).unwrap(), 1e-12).unwrap();
                assert_close(&format!("layernorm {rows}×{cols} residual={residual} ({})", g.tuning()), &read(g, &gy),
                    &pollster::block_on(r.read(&ry)).unwrap(), LAYERNORM_ATOL, LAYERNORM_RTOL);
            }
        }
    }
}


/// Every attention kernel: vec4 (the default), the ones with head_dim fixed at 32 and 64 (the cases with those
/// heads), the scalar one, and the split one (heads up to 64) at each width the calibration times (32 with
/// head_dim 64: two queries a workgroup, so T = 7 and 33 end partway through one), with its scores through
/// workgroup memory and, where the adapter has subgroups, through subgroup shuffles (the heads whose lanes fit one
/// subgroup: on lavapipe, subgroups of 8, head_dim 16 and 32), on every case.
#[test]
fn attention_matches_cpu() {
    let Some(g) = gpu() else { return };
    let kernels = [(AttentionKernel::Vec4, 64), (AttentionKernel::Fixed, 64), (AttentionKernel::Scalar, 64),
        (AttentionKernel::Split, 32), (AttentionKernel::Split, 64), (AttentionKernel::Split, 256),
        (AttentionKernel::SplitSubgroup, 32), (AttentionKernel::SplitSubgroup, 64),
        (AttentionKernel::SplitSubgroup, 256)];
    for (kernel, wg) in kernels {
        g.set_tuning(Tuning { attention: kernel, attention_wg: wg, ..Default::default() });
        attention_cases(&format!("{kernel:?} {wg} ({})", g.tuning()), &g);
    }
    let subgroups = g.gpu().features.contains(wgpu::Features::SUBGROUP);
    let fits = bertgpu::backend::gpu::split_subgroup_fits(&g.gpu().info, 16);
    eprintln!("subgroups {subgroups}, smallest subgroup {}", g.gpu().info.subgroup_min_size);
    assert_eq!(g.compiled_modules().contains(&"attention_split_sg"), subgroups && fits,
        "the subgroup kernel ran where the adapter has subgroups that fit a head: {:?}", g.compiled_modules());
}

/// The relative score bias (`attention_biased`, MPNet's position buckets) on every attention kernel, against the CPU
/// twin: each score of query i and key j gets bias[h][j − i + T − 1] (values up to ±3, so the softmax moves). The
/// tolerance is attention's: the bias is one more f32 add before the same softmax.
#[test]
fn biased_attention_matches_cpu() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    let kernels = [(AttentionKernel::Vec4, 64), (AttentionKernel::Fixed, 64), (AttentionKernel::Scalar, 64),
        (AttentionKernel::Split, 32), (AttentionKernel::Split, 256), (AttentionKernel::SplitSubgroup, 64)];
    let cases: &[(&[usize], usize, usize, usize)] =
        &[(&[1], 1, 1, 1), (&[7, 3, 0], 7, 3, 32), (&[33, 20], 33, 12, 32), (&[64, 1, 50], 64, 2, 64), (&[130, 9], 130, 2, 16)];
    for (kernel, wg) in kernels {
        g.set_tuning(Tuning { attention: kernel, attention_wg: wg, ..Default::default() });
        for (ci, &(lens, t, heads, d)) in cases.iter().enumerate() {
            let (b, h) = (lens.len(), heads * d);
            let qkv: Vec<f32> = rand_vec(b * t * 3 * h, ci as u64 + 40).iter().map(|v| v * 2.0).collect();
            let bias: Vec<f32> = rand_vec(heads * (2 * t - 1), ci as u64 + 90).iter().map(|v| v * 3.0).collect();
            let bt = batch(lens, t, 100, ci as u64);
            let shape = AttentionShape { batch: b, seq: t, heads, head_dim: d };
            let gb = g.input(&bias, heads, 2 * t - 1).unwrap();
            let gy = g.attention_biased(&g.input(&qkv, b * t, 3 * h).unwrap(), &g.mask(&bt).unwrap(), Some(&gb), shape).unwrap();
            let (rq, rm) = (r.input(&qkv, b * t, 3 * h).unwrap(), r.mask(&bt).unwrap());
            let ry = r.attention_biased(&rq, &rm, Some(&r.input(&bias, heads, 2 * t - 1).unwrap()), shape).unwrap();
            let (got, want) = (read(&g, &gy), pollster::block_on(r.read(&ry)).unwrap());
            let what = format!("biased attention ({kernel:?} {wg}) lens={lens:?} T={t} heads={heads} d={d}");
            let e = assert_close(&what, &got, &want, ATTENTION_ATOL, ATTENTION_RTOL);
            eprintln!("{what}: worst |err| {e:e}");
            if t > 1 {
                let plain = pollster::block_on(r.read(&r.attention(&rq, &rm, shape).unwrap())).unwrap();
                assert!(got.iter().zip(&plain).any(|(a, c)| (a - c).abs() > 1e-3), "{what}: the bias changed nothing");
            }
        }
        // A bias of another shape is refused by name.
        let e = g.attention_biased(&g.input(&[0.0; 6], 1, 6).unwrap(), &g.input(&[1.0], 1, 1).unwrap(),
            Some(&g.input(&[0.0; 2], 1, 2).unwrap()), AttentionShape { batch: 1, seq: 1, heads: 1, head_dim: 2 });
        assert!(e.err().is_some_and(|e| e.to_string().contains("bias is (1, 2)")));
    }
}

fn attention_cases(kernel: &str, g: &GpuBackend) {
    let r = CpuBackend::new();
    // (sequence lengths, padded T, heads, head_dim): single tokens, odd sizes, an all-padding sequence, T = 513 and
    // T = 600 (several workgroups of queries per head, the last one partly past the end), head_dim 1..128.
    let cases: &[(&[usize], usize, usize, usize)] = &[
        (&[1], 1, 1, 1),
        (&[7], 7, 2, 7),
        (&[7, 3, 0], 7, 3, 32),
        (&[33, 20], 33, 12, 32),
        (&[64, 1, 50], 64, 2, 64),
        (&[127, 100], 127, 1, 128),
        (&[513, 300], 513, 2, 32),
        (&[600, 513, 7], 600, 1, 16),
    ];
    for (ci, &(lens, t, heads, d)) in cases.iter().enumerate() {
        let b = lens.len();
        let h = heads * d;
        let qkv: Vec<f32> = rand_vec(b * t * 3 * h, ci as u64).iter().map(|v| v * 2.0).collect();
        let bt = batch(lens, t, 100, ci as u64);
        let shape = AttentionShape { batch: b, seq: t, heads, head_dim: d };
        let gy = g.attention(&g.input(&qkv, b * t, 3 * h).unwrap(), &g.mask(&bt).unwrap(), shape).unwrap();
        let ry = r.attention(&r.input(&qkv, b * t, 3 * h).unwrap(), &r.mask(&bt).unwrap(), shape).unwrap();
        let got = read(g, &gy);
        let want = pollster::block_on(r.read(&ry)).unwrap();
        let e = assert_close(&format!("attention ({kernel}) lens={lens:?} T={t} heads={heads} d={d}"), &got, &want,
            ATTENTION_ATOL, ATTENTION_RTOL);
        eprintln!("attention ({kernel}) {lens:?} T={t} heads={heads} d={d}: worst |err| {e:e}");
        if lens.contains(&0) {
            let i = lens.iter().position(|&l| l == 0).unwrap();
            assert!(got[i * t * h..(i + 1) * t * h].iter().all(|&v| v == 0.0), "an all-padding sequence yields zeros");
        }
    }
}

#[test]
fn embeddings_match_cpu() {
    let Some(g) = gpu() else { return };
    for t in bertgpu::backend::gpu::row_candidates(g.gpu()) {
        g.set_tuning(t);
        embeddings_cases(&g);
    }
}

fn embeddings_cases(g: &GpuBackend) {
    let r = CpuBackend::new();
    for &(lens, t, h) in &[(&[7usize, 3, 0][..], 7usize, 33usize), (&[1][..], 1, 1), (&[16, 9][..], 16, 384)] {
        let (vocab, maxpos, types) = (50, 16, 2);
        let word = rand_vec(vocab * h, 1);
        let pos = rand_vec(maxpos * h, 2);
        let tt = rand_vec(types * h, 3);
        let gamma = rand_vec(h, 4);
        let beta = rand_vec(h, 5);
        let bt = batch(lens, t, vocab as u32, 6);
        let gt: Vec<GpuTensor> = [(&word, vocab), (&pos, maxpos), (&tt, types), (&gamma, 0), (&beta, 0)].iter()
            .map(|(v, rows)| g.upload(&host(&if *rows == 0 { vec![h] } else { vec![*rows, h] }, (*v).clone())).unwrap())
            .collect();
        let rt: Vec<_> = [(&word, vocab), (&pos, maxpos), (&tt, types), (&gamma, 0), (&beta, 0)].iter()
            .map(|(v, rows)| r.upload(&host(&if *rows == 0 { vec![h] } else { vec![*rows, h] }, (*v).clone())).unwrap())
            .collect();
        let gy = g.embeddings(&bt, &EmbeddingTables { word: &gt[0], position: Some(&gt[1]), token_type: &gt[2],
            ln_gamma: &gt[3], ln_beta: &gt[4], eps: 1e-12 }).unwrap();
        let ry = r.embeddings(&bt, &EmbeddingTables { word: &rt[0], position: Some(&rt[1]), token_type: &rt[2],
            ln_gamma: &rt[3], ln_beta: &rt[4], eps: 1e-12 }).unwrap();
        assert_close(&format!("embeddings {lens:?} T={t} H={h} ({})", g.tuning()), &read(g, &gy),
            &pollster::block_on(r.read(&ry)).unwrap(), LAYERNORM_ATOL, LAYERNORM_RTOL);
        // A token id outside the vocabulary is an error, not a read out of bounds.
        let mut bad = bt.clone();
        bad.input_ids[0] = vocab as u32;
        let tables = EmbeddingTables { word: &gt[0], position: Some(&gt[1]), token_type: &gt[2], ln_gamma: &gt[3],
            ln_beta: &gt[4], eps: 1e-12 };
        assert!(g.embeddings(&bad, &tables).is_err());
    }
}

#[test]
fn mean_pool_and_gather_match_cpu() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    for &(lens, t, h) in &[(&[7usize, 3, 0][..], 7usize, 33usize), (&[1][..], 1, 1), (&[513, 64][..], 513, 64)] {
        let b = lens.len();
        let x = rand_vec(b * t * h, 11);
        let bt = batch(lens, t, 10, 12);
        let gy = g.mean_pool(&g.input(&x, b * t, h).unwrap(), &g.mask(&bt).unwrap(), b, t).unwrap();
        let ry = r.mean_pool(&r.input(&x, b * t, h).unwrap(), &r.mask(&bt).unwrap(), b, t).unwrap();
        assert_close(&format!("mean_pool {lens:?} T={t} H={h}"), &read(&g, &gy),
            &pollster::block_on(r.read(&ry)).unwrap(), POOL_ATOL, POOL_RTOL);
        let rows: Vec<u32> = (0..b).map(|i| (i * t) as u32).chain([(b * t - 1) as u32, 0]).collect();
        let gy = g.gather_rows(&g.input(&x, b * t, h).unwrap(), &rows).unwrap();
        let ry = r.gather_rows(&r.input(&x, b * t, h).unwrap(), &rows).unwrap();
        assert_close(&format!("gather_rows {rows:?}"), &read(&g, &gy), &pollster::block_on(r.read(&ry)).unwrap(),
            0.0, 0.0);
        assert!(g.gather_rows(&g.input(&x, b * t, h).unwrap(), &[(b * t) as u32]).is_err());
    }
}

/// Shape errors are `Err`s with a message, never panics or GPU validation errors.
#[test]
fn bad_shapes_are_errors() {
    let Some(g) = gpu() else { return };
    let x = g.input(&[0.0; 6], 2, 3).unwrap();
    let w = g.upload(&host(&[4, 5], vec![0.0; 20])).unwrap();
    let err = g.linear(&x, &w, None, Activation::None).err().expect("inner sizes differ");
    assert!(err.to_string().contains("inner sizes differ"), "{err}");
    assert!(g.input(&[0.0; 5], 2, 3).is_err());
    let bad = HostTensor { shape: vec![2, 3], data: HostData::F32(vec![0.0; 5]) };
    assert!(g.upload(&bad).is_err());
}

/// The second identical forward takes every buffer from the pool: nothing new is allocated.
#[test]
fn repeated_calls_allocate_nothing_new() {
    let Some(g) = gpu() else { return };
    let w = g.upload(&host(&[64, 33], rand_vec(64 * 33, 1))).unwrap();
    let gamma = g.upload(&host(&[64], vec![1.0; 64])).unwrap();
    let beta = g.upload(&host(&[64], vec![0.0; 64])).unwrap();
    let run = || {
        let x = g.input(&rand_vec(7 * 33, 2), 7, 33).unwrap();
        let y = g.linear(&x, &w, None, Activation::Gelu).unwrap();
        let z = g.layernorm(&y, Some(&y), &gamma, &beta, 1e-12).unwrap();
        read(&g, &z)
    };
    let first = run();
    let stats = g.pool_stats();
    for _ in 0..3 {
        assert_eq!(run(), first);
        assert_eq!(g.pool_stats(), stats, "a repeated call allocated new buffers");
    }
}

/// The pipelines a recording needs are noted without running it (`pipelines_of`: nothing built, nothing computed),
/// then built at once (`build_pipelines`, on several threads natively), after which the recording builds none and
/// computes what it computed before. Work recorded before the noting is submitted, not lost: what a GPU load does
/// before its check (`canary::prebuild`).
#[test]
fn pipelines_are_noted_then_built_at_once() {
    let Some(g) = gpu() else { return };
    let w = g.upload(&host(&[64, 33], rand_vec(64 * 33, 1))).unwrap();
    let w4 = g.upload(&host(&[16, 64], rand_vec(16 * 64, 2))).unwrap();
    let gamma = g.upload(&host(&[16], vec![1.0; 16])).unwrap();
    let beta = g.upload(&host(&[16], vec![0.0; 16])).unwrap();
    let x = g.input(&rand_vec(7 * 33, 3), 7, 33).unwrap();
    let record = || {
        let y = g.linear(&x, &w, None, Activation::Gelu)?; // K = 33: the scalar kernel
        let z = g.linear(&y, &w4, None, Activation::None)?; // K = 64: a vec4 kernel
        g.layernorm(&z, Some(&z), &gamma, &beta, 1e-12)
    };
    let first = g.linear(&x, &w, None, Activation::None).unwrap(); // recorded before the noting
    let built = g.pipeline_count();
    let specs = g.pipelines_of(|| record().map(drop)).unwrap();
    assert_eq!(g.pipeline_count(), built, "noting built pipelines");
    assert_eq!(specs.len(), 3, "two matmul kernels and a layernorm: {specs:?}");
    let first = read(&g, &first);
    g.build_pipelines(&specs).unwrap();
    assert_eq!(g.pipeline_count(), built + 3);
    assert!(g.pipelines_of(|| record().map(drop)).unwrap().is_empty(), "built pipelines are noted again");
    let out = read(&g, &record().unwrap());
    assert_eq!(g.pipeline_count(), built + 3, "the recording built a pipeline of its own");
    let fresh = gpu().unwrap();
    let (fw, fw4) = (fresh.upload(&host(&[64, 33], rand_vec(64 * 33, 1))).unwrap(),
        fresh.upload(&host(&[16, 64], rand_vec(16 * 64, 2))).unwrap());
    let (fg, fb) = (fresh.upload(&host(&[16], vec![1.0; 16])).unwrap(), fresh.upload(&host(&[16], vec![0.0; 16])).unwrap());
    let fx = fresh.input(&rand_vec(7 * 33, 3), 7, 33).unwrap();
    let fy = fresh.linear(&fx, &fw, None, Activation::Gelu).unwrap();
    let fz = fresh.linear(&fy, &fw4, None, Activation::None).unwrap();
    assert_eq!(out, read(&fresh, &fresh.layernorm(&fz, Some(&fz), &fg, &fb, 1e-12).unwrap()),
        "prebuilt pipelines compute what pipelines built on first use do");
    assert_eq!(first, read(&fresh, &fresh.linear(&fx, &fw, None, Activation::None).unwrap()),
        "work recorded before the noting was lost");
}

/// A weight's buffer is destroyed when its tensor is dropped (in the browser a dropped buffer's memory waits for the
/// garbage collector), but not before the commands recorded with it are submitted: the submit would fail. The
/// result of those commands is still right.
#[test]
fn dropped_weights_are_destroyed_after_their_last_submit() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    let (xv, wv) = (rand_vec(5 * 32, 1), rand_vec(16 * 32, 2));
    let ry = r.linear(&r.input(&xv, 5, 32).unwrap(), &r.upload(&host(&[16, 32], wv.clone())).unwrap(), None,
        Activation::None).unwrap();
    let want = pollster::block_on(r.read(&ry)).unwrap();
    let x = g.input(&xv, 5, 32).unwrap();
    let w = g.upload(&host(&[16, 32], wv)).unwrap();
    let y = g.linear(&x, &w, None, Activation::None).unwrap(); // recorded, not submitted
    let before = g.buffers_destroyed();
    drop(w);
    assert_eq!(g.buffers_destroyed(), before, "the recorded linear still reads the weight");
    assert_close("linear whose weight was dropped before the submit", &read(&g, &y), &want, 1e-5, 1e-5);
    assert_eq!(g.buffers_destroyed(), before + 1, "destroyed once submitted");
    drop(g.upload(&host(&[16, 32], rand_vec(16 * 32, 3))).unwrap());
    assert_eq!(g.buffers_destroyed(), before + 2, "nothing recorded: destroyed at once");
}

/// Each shader's `Params` declaration (parsed with naga) has the fields, order, offsets, types and size of its
/// Rust twin, and the shader validates with no capability beyond `unpack2x16float` (`SHADER_FLOAT16_IN_FLOAT32`:
/// core WGSL, which `GpuBackend::new` checks the adapter for) and the optional features its variant names
/// (`params::features`: subgroups for the `_sg` modules); the modules the default tuning runs need none. Needs no
/// adapter.
#[test]
fn params_layouts_agree_with_wgsl() {
    use wgpu::naga;
    for (name, _, size, fields) in bertgpu::backend::gpu::params::modules() {
        // The text the GPU compiles (includes resolved); errors name the file under shaders/ and its line.
        let composed = bertgpu::backend::gpu::params::source(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let src = composed.text.as_str();
        let module = naga::front::wgsl::parse_str(src)
            .unwrap_or_else(|e| panic!("{name}: {}", composed.annotate(&e.emit_to_string(src), &[])));
        let mut caps = naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;
        let needs = bertgpu::backend::gpu::params::features(name);
        if needs.contains(wgpu::Features::SUBGROUP) {
            caps |= naga::valid::Capabilities::SUBGROUP;
            assert!(name.contains("_sg"), "{name}: only the _sg variants use subgroups");
        } else {
            assert!(needs.is_empty(), "{name} needs {needs:?}");
        }
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name} does not validate: {}", composed.annotate(&e.emit_to_string(src), &[])));
        let uniforms: Vec<_> =
            module.global_variables.iter().filter(|(_, v)| v.space == naga::AddressSpace::Uniform).collect();
        assert_eq!(uniforms.len(), 1, "{name}.wgsl: one uniform Params");
        let ty = &module.types[uniforms[0].1.ty];
        let naga::TypeInner::Struct { members, span } = &ty.inner else { panic!("{name}.wgsl: Params is not a struct") };
        assert_eq!(*span as usize, size, "{name}.wgsl: Params size");
        assert_eq!(members.len(), fields.len(), "{name}.wgsl: Params field count");
        for (m, &(fname, offset, fty)) in members.iter().zip(fields) {
            assert_eq!(m.name.as_deref(), Some(fname), "{name}.wgsl: field order");
            assert_eq!(m.offset as usize, offset, "{name}.wgsl: offset of {fname}");
            let wgsl_ty = match module.types[m.ty].inner {
                naga::TypeInner::Scalar(naga::Scalar { kind: naga::ScalarKind::Uint, width: 4 }) => "u32",
                naga::TypeInner::Scalar(naga::Scalar { kind: naga::ScalarKind::Float, width: 4 }) => "f32",
                ref other => panic!("{name}.wgsl: {fname} has unsupported type {other:?}"),
            };
            assert_eq!(wgsl_ty, fty, "{name}.wgsl: type of {fname}");
        }
    }
}

/// The calibration on a small layer: every variant timed once the budget allows, the default first; the choice is
/// one of them and no slower than the default; the backend's own tuning is left as it was. A call cut short by its
/// budget says how far it got, and the next resumes there.
#[test]
fn calibration_chooses_among_what_it_timed() {
    use bertgpu::backend::gpu::{matmul_candidates, Progress, Workload};
    use bertgpu::backend::Dtype;
    let Some(g) = gpu() else { return };
    let work = Workload { hidden: 32, intermediate: 64, heads: 4, batch: 2, seq: 8, dtype: Dtype::F32, f16_activations: false };
    let before = g.tuning();
    let c = pollster::block_on(g.calibrate(&work, f64::INFINITY)).unwrap();
    assert!(c.complete);
    assert_eq!(g.tuning(), before, "calibrate leaves the backend's tuning to its caller");
    assert_eq!(c.timed[0].0, Tuning::default(), "the default is timed first");
    let matmuls = matmul_candidates(g.gpu());
    assert!(matmuls.len() >= 3 && matmuls.iter().all(|t| c.timed.iter().any(|(v, _)| v.small_matmul == t.small_matmul)),
        "every matmul variant is timed on the small products");
    let rows = bertgpu::backend::gpu::row_candidates(g.gpu());
    assert!(rows.iter().all(|t| c.timed.iter().any(|(v, _)| (v.row_wg, v.row_subgroups) == (t.row_wg, t.row_subgroups))),
        "every row-kernel variant is timed");
    assert_eq!(rows.iter().any(|t| t.row_subgroups), g.gpu().features.contains(wgpu::Features::SUBGROUP),
        "subgroup sums are timed where the adapter has subgroups");
    assert!(c.timed.iter().any(|(t, _)| *t == c.tuning), "the choice {} is one of the variants timed", c.tuning);
    assert!(c.chosen_ms <= c.default_ms, "{c}");
    eprintln!("calibration: {c}");

    // Without a budget the first stage (the large matmuls) still finishes, then it stops; a second call resumes
    // from there, timing only the stages left, and finishes. Progress reads back from its text.
    let first = pollster::block_on(g.calibrate(&work, 0.0)).unwrap();
    assert!(!first.complete);
    assert_eq!(first.progress.stages_done, 1, "{first}");
    let large = matmul_candidates(g.gpu()).into_iter().filter(|t| !t.matmul.kernel.splits_k()).count();
    assert!(first.timed.len() > large, "every large-matmul variant, then the next stage's default");
    assert!(first.timed.iter().all(|(t, _)| t.small_matmul == Tuning::default().small_matmul), "no other small matmul");
    assert_eq!(Progress::parse(&first.progress.to_string()), Ok(first.progress));
    assert!(first.progress.to_string().ends_with(";stages=1"), "{}", first.progress);
    let rest = pollster::block_on(g.calibrate_from(&work, f64::INFINITY, Some(first.progress))).unwrap();
    assert!(rest.complete && rest.progress.is_complete(), "{rest}");
    assert!(rest.timed.iter().all(|(t, _)| t.matmul == first.tuning.matmul), "the large matmuls are not timed again");
    assert_eq!(rest.tuning.matmul, first.tuning.matmul);
    assert_eq!(Progress::parse(&rest.progress.to_string()), Ok(rest.progress));
    assert_eq!(rest.progress.to_string(), rest.tuning.to_string(), "a finished calibration's text is its tuning");
    assert!(Progress::parse("row=64;stages=9").is_err());
    let bad = Workload { heads: 5, ..work };
    assert!(pollster::block_on(g.calibrate(&bad, 1.0)).is_err(), "hidden 32 is not a multiple of 5 heads");
}
