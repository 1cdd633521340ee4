//! The f16-activation mode (`GpuBackend::set_f16_activations`), kernel by kernel: every f16 variant against the
//! CPU backend on the same inputs, rounded to f16 first (so the only difference left is the kernel's own: its f32
//! arithmetic, then its output rounded to f16), for every tuning the calibration may choose on this adapter. The
//! whole model against PyTorch in this mode is in tests/model_gpu.rs.
//!
//! Skips (saying why) only when there is no GPU adapter.

#![cfg(not(target_arch = "wasm32"))]

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::{matmul_candidates, row_candidates, AttentionKernel, GpuBackend, GpuTensor, Tuning};
use bertgpu::backend::{Activation, AttentionShape, Backend, Dtype, EmbeddingTables};
use bertgpu::weights::{HostData, HostTensor};

mod common;
use common::{assert_close, batch, gpu, host, rand_vec, read};

/// An f16 output is its f32 value rounded to f16: WGSL lets `pack2x16float` round either way, so up to one f16 ulp,
/// 2⁻¹⁰ relative (9.8e-4); 1e-3.
const F16_RTOL: f32 = 1e-3;
/// Absolute part, on top of the f32 kernels' own budgets (tests/gpu_kernels.rs): f16's smallest normal is 6.1e-5,
/// below which its steps are 6e-8 apart; the f32 sums themselves move by ≲ 1e-4 on these O(1)–O(10) values.
const F16_ATOL: f32 = 2e-4;

/// Values rounded to the nearest f16, as `input_f16` stores them.
fn rounded(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
}

/// The result's dtype is f16 exactly where rows are whole words.
fn expect_dtype(g: &GpuBackend, t: &GpuTensor, cols: usize, what: &str) {
    let want = if cols % 2 == 0 { Dtype::F16 } else { Dtype::F32 };
    assert_eq!(g.dtype(t), want, "{what}: output dtype");
}

/// Every matmul tiling, many rows and few (M up to 100), f16 in and out, with a GELU epilogue; and with the default
/// tiling, the other modules: N odd (f16 in, f32 out), f16 weights (the packed kernels), and K not a multiple of 4
/// (x widened first: f32 out). Each tiling × module is a pipeline to compile, seconds each on lavapipe: the cases
/// cover each once.
#[test]
fn linear_reads_and_writes_f16() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    for (ti, t) in matmul_candidates(g.gpu()).into_iter().enumerate() {
        let t = g.set_tuning(t);
        let mut cases = vec![(7, 64, 36, false), (100, 130, 64, false)];
        if ti == 0 {
            cases.extend([(65, 127, 64, false), (33, 6, 100, true), (100, 34, 64, true), (9, 10, 34, false)]);
        }
        for (i, &(m, n, k, f16_weight)) in cases.iter().enumerate() {
            let x = rounded(&rand_vec(m * k, i as u64));
            let w = rand_vec(n * k, 100 + i as u64);
            let b = rand_vec(n, 200 + i as u64);
            let wt = if f16_weight {
                let w16: Vec<u16> = w.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
                HostTensor { shape: vec![n, k], data: HostData::F16(w16) }
            } else {
                host(&[n, k], w)
            };
            let gy = g.linear(&g.input_f16(&x, m, k).unwrap(), &g.upload(&wt).unwrap(),
                Some(&g.upload(&host(&[n], b.clone())).unwrap()), Activation::Gelu).unwrap();
            let ry = r.linear(&r.input(&x, m, k).unwrap(), &r.upload(&wt).unwrap(),
                Some(&r.upload(&host(&[n], b)).unwrap()), Activation::Gelu).unwrap();
            let what = format!("linear {t} M={m} N={n} K={k} f16 weight={f16_weight}");
            // f16 out where rows are whole words and x was read as pairs (K % 4 == 0; else widened: f32 out).
            expect_dtype(&g, &gy, if k % 4 == 0 { n } else { 1 }, &what);
            assert_close(&what, &read(&g, &gy), &pollster::block_on(r.read(&ry)).unwrap(), F16_ATOL, F16_RTOL);
        }
    }
}

/// Every row-kernel variant (widths; tree or subgroup sums): LayerNorm of f16 rows with an f16 residual, without
/// one, and with an f32 one (both widened: f32 out).
#[test]
fn layernorm_reads_and_writes_f16() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    for t in row_candidates(g.gpu()) {
        g.set_tuning(t);
        for &(rows, cols) in &[(1usize, 2usize), (7, 64), (33, 384), (3, 514)] {
            let seed = (rows * 1000 + cols) as u64;
            let x: Vec<f32> = rounded(&rand_vec(rows * cols, seed).iter().map(|v| v * 4.0 + 3.0).collect::<Vec<_>>());
            let res = rounded(&rand_vec(rows * cols, seed + 1));
            let gamma = rand_vec(cols, seed + 2);
            let beta = rand_vec(cols, seed + 3);
            let (gg, gb) = (g.upload(&host(&[cols], gamma.clone())).unwrap(), g.upload(&host(&[cols], beta.clone())).unwrap());
            let (rg, rb) = (r.upload(&host(&[cols], gamma)).unwrap(), r.upload(&host(&[cols], beta)).unwrap());
            let gx = g.input_f16(&x, rows, cols).unwrap();
            for residual in ["none", "f16", "f32"] {
                let gres = match residual {
                    "f16" => Some(g.input_f16(&res, rows, cols).unwrap()),
                    "f32" => Some(g.input(&res, rows, cols).unwrap()),
                    _ => None,
                };
                let rres = (residual != "none").then(|| r.input(&res, rows, cols).unwrap());
                let gy = g.layernorm(&gx, gres.as_ref(), &gg, &gb, 1e-12).unwrap();
                let ry = r.layernorm(&r.input(&x, rows, cols).unwrap(), rres.as_ref(), &rg, &rb, 1e-12).unwrap();
                let what = format!("layernorm {rows}×{cols} residual={residual} ({})", g.tuning());
                let want_dtype = if residual == "f32" { Dtype::F32 } else { Dtype::F16 };
                assert_eq!(g.dtype(&gy), want_dtype, "{what}");
                assert_close(&what, &read(&g, &gy), &pollster::block_on(r.read(&ry)).unwrap(), F16_ATOL, F16_RTOL);
            }
        }
    }
}

/// Every attention kernel on f16 q, k, v: the vec4 ones read and write pairs; the scalar one (and any head_dim
/// that is not a multiple of 4) reads them widened and writes f32.
#[test]
fn attention_reads_and_writes_f16() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    let kernels = [(AttentionKernel::Vec4, 64), (AttentionKernel::Fixed, 64), (AttentionKernel::Scalar, 64),
        (AttentionKernel::Split, 32), (AttentionKernel::Split, 256), (AttentionKernel::SplitSubgroup, 32),
        (AttentionKernel::SplitSubgroup, 256)];
    let cases: &[(&[usize], usize, usize, usize)] =
        &[(&[7, 3, 0], 7, 3, 32), (&[33, 20], 33, 2, 64), (&[5], 5, 2, 16), (&[9, 4], 9, 2, 6)];
    for (kernel, wg) in kernels {
        g.set_tuning(Tuning { attention: kernel, attention_wg: wg, ..Default::default() });
        for (ci, &(lens, t, heads, d)) in cases.iter().enumerate() {
            let (b, h) = (lens.len(), heads * d);
            let qkv = rounded(&rand_vec(b * t * 3 * h, ci as u64).iter().map(|v| v * 2.0).collect::<Vec<_>>());
            let bt = batch(lens, t, 100, ci as u64);
            let shape = AttentionShape { batch: b, seq: t, heads, head_dim: d };
            let gy = g.attention(&g.input_f16(&qkv, b * t, 3 * h).unwrap(), &g.mask(&bt).unwrap(), shape).unwrap();
            let ry = r.attention(&r.input(&qkv, b * t, 3 * h).unwrap(), &r.mask(&bt).unwrap(), shape).unwrap();
            let what = format!("attention {kernel:?} {wg} lens={lens:?} heads={heads} d={d}");
            let vec4 = kernel != AttentionKernel::Scalar && d % 4 == 0;
            assert_eq!(g.dtype(&gy), if vec4 { Dtype::F16 } else { Dtype::F32 }, "{what}");
            assert_close(&what, &read(&g, &gy), &pollster::block_on(r.read(&ry)).unwrap(), F16_ATOL, F16_RTOL);
        }
    }
}

/// The embeddings in the mode write f16 where the hidden size is even, f32 where it is odd; mean_pool and
/// gather_rows read f16 (gather keeps it); an op with no f16 kernel (add) reads it widened.
#[test]
fn embeddings_pool_gather_and_the_rest_in_f16() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    g.set_f16_activations(true);
    for t in row_candidates(g.gpu()) {
        g.set_tuning(t);
        for &(lens, t, h) in &[(&[7usize, 3, 0][..], 7usize, 33usize), (&[16, 9][..], 16, 384), (&[1][..], 1, 2)] {
            let (vocab, maxpos, types) = (50, 16, 2);
            let tables: Vec<(Vec<f32>, Vec<usize>)> = vec![
                (rand_vec(vocab * h, 1), vec![vocab, h]),
                (rand_vec(maxpos * h, 2), vec![maxpos, h]),
                (rand_vec(types * h, 3), vec![types, h]),
                (rand_vec(h, 4), vec![h]),
                (rand_vec(h, 5), vec![h]),
            ];
            let gt: Vec<GpuTensor> = tables.iter().map(|(v, s)| g.upload(&host(s, v.clone())).unwrap()).collect();
            let rt: Vec<_> = tables.iter().map(|(v, s)| r.upload(&host(s, v.clone())).unwrap()).collect();
            let bt = batch(lens, t, vocab as u32, 6);
            let gy = g.embeddings(&bt, &EmbeddingTables { word: &gt[0], position: Some(&gt[1]), token_type: &gt[2],
                ln_gamma: &gt[3], ln_beta: &gt[4], eps: 1e-12 }).unwrap();
            let ry = r.embeddings(&bt, &EmbeddingTables { word: &rt[0], position: Some(&rt[1]), token_type: &rt[2],
                ln_gamma: &rt[3], ln_beta: &rt[4], eps: 1e-12 }).unwrap();
            let what = format!("embeddings {lens:?} T={t} H={h} ({})", g.tuning());
            expect_dtype(&g, &gy, h, &what);
            let want = pollster::block_on(r.read(&ry)).unwrap();
            assert_close(&what, &read(&g, &gy), &want, F16_ATOL, F16_RTOL);
            // What the GPU holds, exactly: the CPU's rows below are those values.
            let held = read(&g, &gy);
            let rows_in = r.input(&held, lens.len() * t, h).unwrap();
            let b = lens.len();
            let gp = g.mean_pool(&gy, &g.mask(&bt).unwrap(), b, t).unwrap();
            let rp = r.mean_pool(&rows_in, &r.mask(&bt).unwrap(), b, t).unwrap();
            assert_eq!(g.dtype(&gp), Dtype::F32, "the pooled mean is f32");
            assert_close(&format!("mean_pool of {what}"), &read(&g, &gp), &pollster::block_on(r.read(&rp)).unwrap(),
                1e-6, 1e-6);
            let rows: Vec<u32> = (0..b).map(|i| (i * t) as u32).chain([(b * t - 1) as u32]).collect();
            let gg = g.gather_rows(&gy, &rows).unwrap();
            assert_eq!(g.dtype(&gg), g.dtype(&gy), "gather keeps the dtype");
            let rg = r.gather_rows(&rows_in, &rows).unwrap();
            assert_close(&format!("gather of {what}"), &read(&g, &gg), &pollster::block_on(r.read(&rg)).unwrap(), 0.0, 0.0);
            let ga = g.add(&gy, &gy).unwrap();
            assert_eq!(g.dtype(&ga), Dtype::F32, "add widens");
            let ra = r.add(&rows_in, &rows_in).unwrap();
            assert_close(&format!("add of {what}"), &read(&g, &ga), &pollster::block_on(r.read(&ra)).unwrap(), 0.0, 0.0);
        }
    }
}

/// The mode halves what a forward's activations take: the pool's peak for the same layer, f32 against f16.
#[test]
fn the_mode_halves_the_activations_memory() {
    let peak = |f16: bool| {
        let g = gpu()?;
        g.set_f16_activations(f16);
        let (m, k, n) = (256, 384, 1536);
        let w = g.upload(&host(&[n, k], rand_vec(n * k, 1))).unwrap();
        let w2 = g.upload(&host(&[k, n], rand_vec(n * k, 2))).unwrap();
        let x = if f16 { g.input_f16(&rand_vec(m * k, 3), m, k) } else { g.input(&rand_vec(m * k, 3), m, k) }.unwrap();
        let y = g.linear(&g.linear(&x, &w, None, Activation::Gelu).unwrap(), &w2, None, Activation::None).unwrap();
        read(&g, &y);
        Some(g.pool_memory().1)
    };
    let (Some(f32_peak), Some(f16_peak)) = (peak(false), peak(true)) else { return };
    eprintln!("activations' peak: f32 {f32_peak} bytes, f16 {f16_peak} bytes");
    // Everything the pool holds here is an activation but the uniforms' 16 KiB arena.
    assert!(f16_peak as f64 <= 0.51 * f32_peak as f64, "f16 {f16_peak} vs f32 {f32_peak} bytes");
}

/// The calibration in the f16-activation mode times the kernels that mode runs: its workload's activations are f16
/// pairs, so every matmul, attention and LayerNorm it times is an `_h` module, never the f32 one; the choice is no
/// slower than the default on what was timed, and it is cached under a key of its own (the f32 mode keeps its
/// key and choice).
#[test]
fn calibration_times_the_f16_kernels() {
    use bertgpu::backend::gpu::{calibration as tune, Workload};
    let Some(g) = gpu() else { return };
    let f32_work = Workload { hidden: 32, intermediate: 64, heads: 4, batch: 2, seq: 8, dtype: Dtype::F32, f16_activations: false };
    let work = Workload { f16_activations: true, ..f32_work };
    let c = pollster::block_on(g.calibrate(&work, f64::INFINITY)).unwrap();
    assert!(c.complete && c.chosen_ms <= c.default_ms, "{c}");
    let compiled = g.compiled_modules();
    eprintln!("f16 calibration: {c}; modules {compiled:?}");
    for m in ["matmul_h", "layernorm_h", "attention_vec4_h"] {
        assert!(compiled.contains(&m), "{m} was timed: {compiled:?}");
    }
    let f32_kernels = ["matmul", "matmul_packed", "layernorm", "attention_vec4", "attention_d32", "attention_split"];
    assert!(compiled.iter().all(|m| !f32_kernels.contains(m)), "no f32 activation kernel was timed: {compiled:?}");
    assert_ne!(tune::cache_key(g.gpu(), &work), tune::cache_key(g.gpu(), &f32_work), "each mode has its own choice");
    assert!(tune::cache_key(g.gpu(), &work).ends_with(", f16 activations"));
}
