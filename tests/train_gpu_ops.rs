//! The GPU training kernels (shaders/train.wgsl) against their CPU twins, over awkward shapes. Skipped (with a
//! message) where no adapter exists.

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::{GpuBackend, MatmulKernel, MatmulVariant, Tuning};
use bertgpu::backend::{Activation, AdamWStep, Backend};

mod common;
use common::{gpu, rand_vec, assert_close};

/// matmul: the GPU sums K products in order with fma, the CPU GEMM in blocks; with values in [-1, 1) the difference
/// grows like √K·ε·K^½ (≈ 513·6e-8 ≈ 3e-5 at worst for K = 513, typically far less): atol 2e-5 plus rtol.
const MATMUL_ATOL: f32 = 2e-5;
const MATMUL_RTOL: f32 = 1e-5;
/// matmul on the wide or tiled tuning: the forward's kernel sums each output in one running fma chain along K (no
/// runs of 32), so its error grows like the forward's: tests/gpu_kernels.rs's bound, 2e-6 plus 1.5e-7 per step of K.
const WIDE_MATMUL_ATOL: f32 = 2e-6;
const WIDE_MATMUL_ATOL_PER_K: f32 = 1.5e-7;
/// Softmax gradient: exp on the GPU (lavapipe, SwiftShader) may differ from Rust's by a few ulp.
const XENT_ATOL: f32 = 1e-6;
const XENT_RTOL: f32 = 1e-5;
/// GELU derivative: the shader's erf is Abramowitz–Stegun 7.1.26 (|error| ≤ 1.5e-7) vs libm's erff.
const ACT_ATOL: f32 = 1e-6;
const ACT_RTOL: f32 = 1e-5;
/// The gated feed-forward's backward: `dy·act(gate)` and `dy·up·act'(gate)`: the activation derivative's error
/// (`ACT_ATOL`: the shader's erf, exp and tanh against libm's) times `|up|`, which is up to 4 here. Measured worst on
/// lavapipe 1.9e-6 (tanh GELU's derivative; SiLU 1.2e-6, exact GELU 7.2e-7), printed as `glu_backward ... worst`.
const GLU_BACKWARD_ATOL: f32 = 4e-6;
const GLU_BACKWARD_RTOL: f32 = 1e-5;
/// AdamW: the same arithmetic in the same order; sqrt and division may round differently by an ulp.
const ADAMW_ATOL: f32 = 1e-7;
const ADAMW_RTOL: f32 = 1e-6;

fn up_cpu(d: &[f32], r: usize, c: usize) -> <CpuBackend as Backend>::Tensor {
    CpuBackend::new().input(d, r, c).unwrap()
}

fn read_g(g: &GpuBackend, t: &<GpuBackend as Backend>::Tensor) -> Vec<f32> {
    pollster::block_on(g.read(t)).unwrap()
}

fn read_c(t: &<CpuBackend as Backend>::Tensor) -> Vec<f32> {
    t.to_vec()
}

#[test]
fn train_kernels_match_cpu_twins() {
    let Some(g) = gpu() else { return };
    let sizes = [1usize, 7, 33, 513];
    // matmul with every transpose combination.
    for &m in &sizes {
        for &k in &[1usize, 7, 33, 513] {
            for &n in &[1usize, 3, 33] {
                if m * k * n > 600_000 {
                    continue;
                }
                for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                    let (ar, ac) = if ta { (k, m) } else { (m, k) };
                    let (br, bc) = if tb { (n, k) } else { (k, n) };
                    let a = rand_vec(ar * ac, (m * 31 + k) as u64);
                    let b = rand_vec(br * bc, (n * 17 + k) as u64);
                    let want = CpuBackend::new().matmul(&up_cpu(&a, ar, ac), ta, &up_cpu(&b, br, bc), tb).unwrap();
                    let got = g.matmul(&g.input(&a, ar, ac).unwrap(), ta, &g.input(&b, br, bc).unwrap(), tb).unwrap();
                    assert_eq!(g.dims(&got), (m, n));
                    assert_close(&format!("matmul {m}x{k}x{n} ta={ta} tb={tb}"), &read_g(&g, &got), &read_c(&want),
                        MATMUL_ATOL, MATMUL_RTOL);
                }
            }
        }
    }
    // The backward's shapes (dW = dYᵀ·X, dX = dY·W at BERT-base widths over 1000 rows) and small odd ones, none a
    // multiple of the matmul's 4×8 tile or its workgroup's 32×64 block, in every transpose combination.
    for &(m, k, n) in &[(384usize, 1000usize, 1536usize), (1000, 1536, 384), (7, 5, 3), (1, 1, 1), (33, 65, 17)] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (ar, ac) = if ta { (k, m) } else { (m, k) };
            let (br, bc) = if tb { (n, k) } else { (k, n) };
            let a = rand_vec(ar * ac, (m * 13 + k) as u64);
            let b = rand_vec(br * bc, (n * 7 + k) as u64);
            let want = CpuBackend::new().matmul(&up_cpu(&a, ar, ac), ta, &up_cpu(&b, br, bc), tb).unwrap();
            let got = g.matmul(&g.input(&a, ar, ac).unwrap(), ta, &g.input(&b, br, bc).unwrap(), tb).unwrap();
            assert_eq!(g.dims(&got), (m, n));
            assert_close(&format!("matmul {m}x{k}x{n} ta={ta} tb={tb}"), &read_g(&g, &got), &read_c(&want),
                MATMUL_ATOL, MATMUL_RTOL);
        }
    }
    // softmax cross-entropy gradient, including large logits.
    for &(b, c) in &[(1usize, 2usize), (7, 3), (33, 7), (513, 5)] {
        let mut z = rand_vec(b * c, (b + c) as u64);
        z.iter_mut().enumerate().for_each(|(i, v)| if i % 11 == 0 { *v *= 80.0 });
        let labels: Vec<u32> = (0..b).map(|i| (i * 7 % c) as u32).collect();
        let want = CpuBackend::new().softmax_xent_grad(&up_cpu(&z, b, c), &labels).unwrap();
        let got = g.softmax_xent_grad(&g.input(&z, b, c).unwrap(), &labels).unwrap();
        assert_close(&format!("xent grad {b}x{c}"), &read_g(&g, &got), &read_c(&want), XENT_ATOL, XENT_RTOL);
    }
    // activation derivatives.
    for act in [Activation::None, Activation::Gelu, Activation::GeluTanh, Activation::Relu, Activation::Tanh] {
        for &n in &sizes {
            let dy = rand_vec(n * 7, 5);
            let pre: Vec<f32> = rand_vec(n * 7, 6).iter().map(|v| v * 4.0).collect();
            let want = CpuBackend::new().activation_grad(&up_cpu(&dy, n, 7), &up_cpu(&pre, n, 7), act).unwrap();
            let got = g.activation_grad(&g.input(&dy, n, 7).unwrap(), &g.input(&pre, n, 7).unwrap(), act).unwrap();
            assert_close(&format!("{act:?}' over {n}x7"), &read_g(&g, &got), &read_c(&want), ACT_ATOL, ACT_RTOL);
        }
    }
    // the gated feed-forward's backward, for every activation a GLU runs (SwiGLU's SiLU, GeGLU's exact and tanh GELU).
    for act in [Activation::Silu, Activation::Gelu, Activation::GeluTanh] {
        for &n in &sizes {
            let (r, i) = (n, 9);
            let dy = rand_vec(r * i, 8);
            let x: Vec<f32> = rand_vec(r * 2 * i, 9).iter().map(|v| v * 4.0).collect();
            let want = CpuBackend::new().glu_backward(&up_cpu(&dy, r, i), &up_cpu(&x, r, 2 * i), act).unwrap();
            let got = g.glu_backward(&g.input(&dy, r, i).unwrap(), &g.input(&x, r, 2 * i).unwrap(), act).unwrap();
            let e = assert_close(&format!("glu_backward {act:?} over {r}x{i}"), &read_g(&g, &got), &read_c(&want),
                GLU_BACKWARD_ATOL, GLU_BACKWARD_RTOL);
            eprintln!("glu_backward {act:?} {r}x{i}: worst |Δ| {e:.2e}");
        }
    }
    // AdamW at steps 1 and 7 (different bias corrections).
    for &(r, c) in &[(1usize, 1usize), (7, 33), (3, 513)] {
        let p = rand_vec(r * c, 1);
        let gr: Vec<f32> = rand_vec(r * c, 2).iter().map(|v| v * 0.01).collect();
        let m: Vec<f32> = rand_vec(r * c, 3).iter().map(|v| v * 0.001).collect();
        let v: Vec<f32> = rand_vec(r * c, 4).iter().map(|v| v * v * 1e-5).collect();
        for t in [1, 7] {
            let s = AdamWStep::new(1e-2, 0.01, 0.9, 0.999, 1e-8, t);
            let (wp, wm, wv) = CpuBackend::new()
                .adamw(&up_cpu(&p, r, c), &up_cpu(&gr, r, c), &up_cpu(&m, r, c), &up_cpu(&v, r, c), &s, None)
                .unwrap();
            let up = |d: &[f32]| g.input(d, r, c).unwrap();
            let (gp, gm, gv) = g.adamw(&up(&p), &up(&gr), &up(&m), &up(&v), &s, None).unwrap();
            let what = format!("adamw {r}x{c} t={t}");
            assert_close(&format!("{what} param"), &read_g(&g, &gp), &read_c(&wp), ADAMW_ATOL, ADAMW_RTOL);
            assert_close(&format!("{what} m"), &read_g(&g, &gm), &read_c(&wm), ADAMW_ATOL, ADAMW_RTOL);
            assert_close(&format!("{what} v"), &read_g(&g, &gv), &read_c(&wv), ADAMW_ATOL, ADAMW_RTOL);
        }
    }
}

/// Where the calibration chose the wide or the tiled tiling (a real GPU), the training matmul runs the forward's
/// kernel on operands transposed and padded to K-contiguous rows of a multiple of 4 (backward.wgsl
/// `transpose_pad`): against the CPU at each of its workgroup shapes, in every transpose, on shapes that are not
/// multiples of its blocks, with K odd, below 4 and across many blocks; products of at most SMALL_ROWS rows run the
/// small-product variant, the same kernel or the K-split one a GPU's calibration picks for them.
#[test]
fn the_staged_tunings_matmul_matches_cpu() {
    let Some(g) = gpu() else { return };
    let plain = g.tuning();
    let shapes = [(70usize, 100usize, 150usize), (129, 37, 65), (7, 5, 3), (1, 1, 1), (33, 64, 17), (16, 96, 200), (65, 1000, 40)];
    let variants = [(MatmulKernel::Wide, (8, 8)), (MatmulKernel::Wide, (16, 8)), (MatmulKernel::Wide, (8, 16)),
        (MatmulKernel::Wide, (16, 16)), (MatmulKernel::Tiled, (8, 16)), (MatmulKernel::Tiled, (16, 16))];
    let split = MatmulVariant { kernel: MatmulKernel::Reduce, wg: (8, 4) };
    let tunings = variants.iter().map(|&(kernel, wg)| {
        let v = MatmulVariant { kernel, wg };
        Tuning { matmul: v, small_matmul: v, ..plain }
    });
    let wide = MatmulVariant { kernel: MatmulKernel::Wide, wg: (8, 16) };
    let with_split = Tuning { matmul: wide, small_matmul: split, ..plain };
    for t in tunings.chain([with_split]) {
        assert_eq!(g.set_tuning(t), t, "the adapter runs {t}");
        for &(m, k, n) in &shapes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let (ar, ac) = if ta { (k, m) } else { (m, k) };
                let (br, bc) = if tb { (n, k) } else { (k, n) };
                let (a, b) = (rand_vec(ar * ac, (m * 5 + k) as u64), rand_vec(br * bc, (n * 3 + k) as u64));
                let want = CpuBackend::new().matmul(&up_cpu(&a, ar, ac), ta, &up_cpu(&b, br, bc), tb).unwrap();
                let got = g.matmul(&g.input(&a, ar, ac).unwrap(), ta, &g.input(&b, br, bc).unwrap(), tb).unwrap();
                assert_eq!(g.dims(&got), (m, n));
                assert_close(&format!("{t} matmul {m}x{k}x{n} ta={ta} tb={tb}"), &read_g(&g, &got),
                    &read_c(&want), WIDE_MATMUL_ATOL + WIDE_MATMUL_ATOL_PER_K * k as f32, MATMUL_RTOL);
            }
        }
    }
    g.set_tuning(plain);
}

#[test]
fn bad_shapes_are_errors() {
    let Some(g) = gpu() else { return };
    let a = g.input(&[0.0; 6], 2, 3).unwrap();
    assert!(g.matmul(&a, false, &a, false).is_err());
    assert!(g.softmax_xent_grad(&a, &[0, 3]).is_err());
    assert!(g.softmax_xent_grad(&a, &[0]).is_err());
    let b = g.input(&[0.0; 4], 2, 2).unwrap();
    assert!(g.activation_grad(&a, &b, Activation::Relu).is_err());
    let s = AdamWStep::new(1e-3, 0.0, 0.9, 0.999, 1e-8, 1);
    assert!(g.adamw(&a, &b, &a, &a, &s, None).is_err());
}

