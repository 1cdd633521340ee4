//! The kernels that read packed weights (f16, Q8_0, Q4_0) against their CPU twins: the GPU's `matmul_packed` /
//! `matmul_scalar` and `embeddings` (shaders/matmul_packed.wgsl, shaders/embeddings.wgsl) vs the CPU backend's
//! `linear_packed` and table lookups, which keep the same blocks in memory and dequantize a panel at a time.
//! Awkward shapes (M 1, 7, 33, 129; N 1, 7, 33, 384, 513; K 32, 64, 384, and K 33 for f16), bias and every
//! activation; the errors for rows that are not whole blocks; device memory of a Q8_0 model.
//!
//! Skips (saying why) only when there is no GPU adapter at all; with Mesa lavapipe installed everything runs.

#![cfg(not(target_arch = "wasm32"))]

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::{GpuBackend, GpuTensor, MatmulKernel, MatmulVariant, Tuning};
use bertgpu::backend::{Activation, Backend, Dtype, EmbeddingTables};
use bertgpu::weights::quant;
use bertgpu::weights::{HostData, HostTensor};

mod common;
use common::{assert_close, batch, gpu, host, rand_vec, read};

/// Packed matmul vs the CPU twin. Both decode to bit-identical f32 weights (an f16 scale times an integer of at
/// most 8 bits is exact in f32, as is an f16 widened), so they differ only in the order of the K-term f32 sum: the
/// budget of the f32 matmul test (tests/gpu_kernels.rs), ≈ K·2⁻²⁴·Σ|terms| with |x|, |w| ≤ 1, observed 3.8e-5 at
/// K = 513 there; a wrong block, scale or nibble gives errors of order 0.01–1.
const QMATMUL_ATOL: f32 = 2e-6;
const QMATMUL_ATOL_PER_K: f32 = 1.5e-7;
const QMATMUL_RTOL: f32 = 1e-5;
/// Epilogues on pre-activations scaled ×3 (sums and their rounding 3× larger), the GPU's erf (Abramowitz–Stegun,
/// |error| ≤ 1.5e-7) and exp-based tanh: three times the matmul budget, as in tests/gpu_kernels.rs.
const QEPILOGUE_ATOL: f32 = 6e-6;
const QEPILOGUE_ATOL_PER_K: f32 = 3e-7;
const QEPILOGUE_RTOL: f32 = 2e-5;
/// Embeddings with packed tables: decoded values are identical on both sides; the LayerNorm reductions differ in
/// order (tree on the GPU, sequential on the CPU) and 1/sqrt is `inverseSqrt`: 1e-5 on O(1) outputs, as the f32
/// embeddings test.
const QEMB_ATOL: f32 = 1e-5;
const QEMB_RTOL: f32 = 1e-5;

const MS: [usize; 4] = [1, 7, 33, 129];
const NS: [usize; 5] = [1, 7, 33, 384, 513];
const KS: [usize; 3] = [32, 64, 384];
const ACTS: [Activation; 5] = [Activation::None, Activation::Gelu, Activation::GeluTanh, Activation::Relu, Activation::Tanh];

/// `w` stored as `dtype` (f16 rounding or llama.cpp's quantizers).
fn pack(w: &HostTensor, dtype: Dtype) -> HostTensor {
    match dtype {
        Dtype::F32 => w.clone(),
        Dtype::F16 => quant::to_f16(w).unwrap(),
        Dtype::Q8_0 => quant::quantize(w, Dtype::Q8_0).unwrap(),
        Dtype::Q4_0 => quant::quantize(w, Dtype::Q4_0).unwrap(),
    }
}

/// One packed linear on both backends; returns the worst |err|.
#[allow(clippy::too_many_arguments)]
fn check_linear(g: &GpuBackend, r: &CpuBackend, dtype: Dtype, m: usize, n: usize, k: usize, bias: bool, act: Activation,
    seed: u64) -> f32 {
    let scale = if act == Activation::None { 1.0 } else { 3.0 };
    let x: Vec<f32> = rand_vec(m * k, seed).iter().map(|v| v * scale).collect();
    let w = pack(&host(&[n, k], rand_vec(n * k, seed + 1)), dtype);
    let b = host(&[n], rand_vec(n, seed + 2));
    let (gw, rw) = (g.upload(&w).unwrap(), r.upload(&w).unwrap());
    assert_eq!((g.dtype(&gw), r.dtype(&rw)), (dtype, dtype), "the weight keeps its dtype on both backends");
    let (gb, rb) = (g.upload(&b).unwrap(), r.upload(&b).unwrap());
    let gy = g.linear(&g.input(&x, m, k).unwrap(), &gw, bias.then_some(&gb), act).unwrap();
    let ry = r.linear(&r.input(&x, m, k).unwrap(), &rw, bias.then_some(&rb), act).unwrap();
    assert_eq!(g.dims(&gy), (m, n));
    let (atol, per_k, rtol) = if act == Activation::None {
        (QMATMUL_ATOL, QMATMUL_ATOL_PER_K, QMATMUL_RTOL)
    } else {
        (QEPILOGUE_ATOL, QEPILOGUE_ATOL_PER_K, QEPILOGUE_RTOL)
    };
    assert_close(&format!("{} linear M={m} N={n} K={k} bias={bias} {act:?}", dtype.name()), &read(g, &gy),
        &pollster::block_on(r.read(&ry)).unwrap(), atol + per_k * k as f32, rtol)
}

/// Every packed matmul variant over every (M, N, K) of the awkward sets, with and without bias; the activation
/// cycles with the shape so each one meets every dtype on several shapes. Both tilings the calibration may choose
/// (direct, staged through workgroup memory, K split in a workgroup with its sum in a tree or, where the adapter has
/// subgroups, with subgroup operations, 8 × 8 double-buffered: tune.rs), each for every product.
#[test]
fn packed_linear_matches_cpu_twin() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    for kernel in [MatmulKernel::Direct, MatmulKernel::Tiled, MatmulKernel::Reduce, MatmulKernel::Wide,
        MatmulKernel::ReduceSubgroup] {
        let v = MatmulVariant { kernel, wg: (8, 8) };
        let t = g.set_tuning(Tuning { matmul: v, small_matmul: v, ..Default::default() });
        eprintln!("{t}");
        packed_cases(&g, &r);
    }
}

fn packed_cases(g: &GpuBackend, r: &CpuBackend) {
    for dtype in [Dtype::F16, Dtype::Q8_0, Dtype::Q4_0] {
        let mut worst = 0.0f32;
        let mut i = 0;
        for &m in &MS {
            for &n in &NS {
                for &k in &KS {
                    let act = ACTS[i % ACTS.len()];
                    worst = worst.max(check_linear(g, r, dtype, m, n, k, i % 3 != 2, act, i as u64));
                    i += 1;
                }
            }
        }
        eprintln!("{}: worst |err| {worst:e} over {i} shapes", dtype.name());
    }
}

/// Each activation with and without bias, on a shape with ragged edges in both M and N, per dtype.
#[test]
fn packed_linear_epilogues_match_cpu_twin() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    for dtype in [Dtype::F16, Dtype::Q8_0, Dtype::Q4_0] {
        for (ai, act) in ACTS.into_iter().enumerate() {
            for bias in [true, false] {
                check_linear(&g, &r, dtype, 33, 513, 64, bias, act, 100 + ai as u64);
            }
        }
    }
}

/// f16 rows need not be a multiple of 4 (or 32): K not a multiple of 4 takes the scalar entry point, which reads
/// the halves of words that straddle rows.
#[test]
fn f16_linear_with_odd_k() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    for &(m, n, k) in &[(7, 33, 33), (1, 1, 1), (33, 7, 63)] {
        check_linear(&g, &r, Dtype::F16, m, n, k, true, Activation::Gelu, 7);
    }
}

/// Weights whose bytes are not whole 32-bit words (an odd number of 34-byte Q8_0 or 18-byte Q4_0 blocks; f16's
/// odd counts are f16_linear_with_odd_k's): the upload writes the last partial word on its own.
#[test]
fn packed_weights_of_odd_block_counts() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    for dtype in [Dtype::Q8_0, Dtype::Q4_0] {
        for &(m, n, k) in &[(3, 7, 32), (1, 1, 32), (5, 3, 96)] {
            check_linear(&g, &r, dtype, m, n, k, true, Activation::None, 11);
        }
    }
}

/// A Q8_0/Q4_0 matrix whose rows are not whole blocks of 32 (K = 48: three blocks in two rows) is refused at
/// upload with a message that says how to fix it, on both backends; a linear whose x does not match the weight's K
/// is a shape error; ops that read f32 only refuse a packed tensor (a read back of the whole tensor gives its
/// dequantized values).
#[test]
fn k_not_a_multiple_of_32_is_a_clear_error() {
    let r = CpuBackend::new();
    for kind in [Dtype::Q8_0, Dtype::Q4_0] {
        let blocks = quant::quantize(&host(&[96], rand_vec(96, 1)), kind).unwrap();
        let t = HostTensor { shape: vec![2, 48], data: blocks.data.clone() };
        let e = r.upload(&t).unwrap_err().to_string();
        assert!(e.contains("multiple of the block size 32"), "{e}");
        if let Some(g) = gpu() {
            let e = g.upload(&t).unwrap_err().to_string();
            assert!(e.contains("not whole blocks of 32") && e.contains("f16"), "{e}");
        }
        // A well-formed (2, 64) weight against x with K = 48.
        let w = quant::quantize(&host(&[2, 64], rand_vec(128, 2)), kind).unwrap();
        let x = vec![0.5f32; 48];
        let e = r.linear(&r.input(&x, 1, 48).unwrap(), &r.upload(&w).unwrap(), None, Activation::None).unwrap_err();
        assert!(e.to_string().contains("linear weight"), "{e}");
        let rw = r.upload(&w).unwrap();
        let e = r.gather_rows(&rw, &[0]).unwrap_err().to_string();
        assert!(e.contains("f32 tensors only"), "{e}");
        if let Some(g) = gpu() {
            let gw = g.upload(&w).unwrap();
            let e = g.linear(&g.input(&x, 1, 48).unwrap(), &gw, None, Activation::None).unwrap_err().to_string();
            assert!(e.contains("inner sizes differ"), "{e}");
            let e = g.gather_rows(&gw, &[0]).unwrap_err().to_string();
            assert!(e.contains("f32 tensors only"), "{e}");
            // Reading a packed weight back gives its dequantized values (what LoRA's merged export reads).
            let back = pollster::block_on(g.read(&gw)).unwrap();
            assert_eq!(back, w.to_f32().unwrap(), "{kind:?}: read of a packed weight");
        }
    }
}

/// The embedding lookup with each table in each dtype the files use (word Q8_0/Q4_0/f16, position and type f16 or
/// f32, as `convert` writes them, and the other combinations), H = 64 and 384 (whole blocks), odd ids and lengths.
#[test]
fn packed_embeddings_match_cpu_twin() {
    let Some(g) = gpu() else { return };
    let r = CpuBackend::new();
    let combos = [
        (Dtype::Q8_0, Dtype::F16, Dtype::F16),
        (Dtype::Q4_0, Dtype::F16, Dtype::F32),
        (Dtype::F16, Dtype::Q8_0, Dtype::Q4_0),
        (Dtype::Q4_0, Dtype::Q4_0, Dtype::Q8_0),
    ];
    for &(h, lens, t) in &[(64usize, &[7usize, 3, 1][..], 7usize), (384, &[33, 20][..], 33)] {
        let (vocab, maxpos, types) = (101, 40, 2);
        let word = host(&[vocab, h], rand_vec(vocab * h, 1));
        let pos = host(&[maxpos, h], rand_vec(maxpos * h, 2));
        let tt = host(&[types, h], rand_vec(types * h, 3));
        let (gamma, beta) = (host(&[h], rand_vec(h, 4)), host(&[h], rand_vec(h, 5)));
        let bt = batch(lens, t, vocab as u32, 6);
        for &(wd, pd, td) in &combos {
            let tables = [pack(&word, wd), pack(&pos, pd), pack(&tt, td), gamma.clone(), beta.clone()];
            let gt: Vec<GpuTensor> = tables.iter().map(|x| g.upload(x).unwrap()).collect();
            let rt: Vec<_> = tables.iter().map(|x| r.upload(x).unwrap()).collect();
            assert_eq!(g.dtype(&gt[0]), wd);
            let gy = g.embeddings(&bt, &EmbeddingTables { word: &gt[0], position: Some(&gt[1]), token_type: &gt[2],
                ln_gamma: &gt[3], ln_beta: &gt[4], eps: 1e-12 }).unwrap();
            let ry = r.embeddings(&bt, &EmbeddingTables { word: &rt[0], position: Some(&rt[1]), token_type: &rt[2],
                ln_gamma: &rt[3], ln_beta: &rt[4], eps: 1e-12 }).unwrap();
            assert_close(&format!("embeddings H={h} word {wd:?} pos {pd:?} type {td:?}"), &read(&g, &gy),
                &pollster::block_on(r.read(&ry)).unwrap(), QEMB_ATOL, QEMB_RTOL);
        }
    }
}

/// The GPU keeps a Q8_0 model's weights as the file stores them: the device bytes held by all-MiniLM-L6-v2's
/// weights are the file's tensor bytes (the fused q/k/v are the same bytes), about 0.27× what the f32 weights
/// take — not 1× as when weights were widened at upload.
#[test]
fn q8_0_model_device_memory_is_the_file_size() {
    use bertgpu::engine::{Device, Engine};
    use bertgpu::weights::gguf::{read_bert, tensors_from_safetensors, write_bert, BertGgufMeta};
    if gpu().is_none() {
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let config = std::fs::read_to_string(dir.join("config.json")).expect("run scripts/fetch-models.sh");
    let tok = std::fs::read_to_string(dir.join("tokenizer.json")).unwrap();
    let tensors = tensors_from_safetensors(&std::fs::read(dir.join("model.safetensors")).unwrap()).unwrap();
    let meta = BertGgufMeta { name: "m", config_json: &config, tokenizer_json: &tok, tokenizer_config_json: None, pooling: Some("mean") };
    let stored = |t: &HostTensor| match &t.data {
        HostData::F32(v) => v.len() * 4,
        HostData::F16(v) => v.len() * 2,
        HostData::Q8_0(b) | HostData::Q4_0(b) => b.len(),
        HostData::Placed(p) => p.bytes,
    } as f64;
    let mut held = Vec::new();
    for dtype in [Dtype::F32, Dtype::Q8_0] {
        let bytes = write_bert(&meta, &tensors, dtype).unwrap();
        let file_tensor_bytes: f64 = read_bert(&bytes).unwrap().tensors.iter().map(|(_, t)| stored(t)).sum();
        let e = pollster::block_on(Engine::from_gguf(&bytes, Device::Gpu)).unwrap();
        let Engine::Gpu(m) = &e else { panic!("asked for the GPU") };
        let device = m.backend.weight_bytes() as f64;
        println!("{dtype:?}: file {} bytes ({file_tensor_bytes} of tensors), GPU weights {device} bytes", bytes.len());
        // Padding is ≤ 20 bytes per tensor (~100 tensors), so nothing may exceed the file's bytes by more than
        // 0.1%; a widened tensor would. Tensors no loaded task reads (MiniLM's pooler: 1.2% of the Q8_0 file,
        // stored f16) are not uploaded, hence the lower bound of 95%.
        assert!(device <= 1.001 * file_tensor_bytes && device >= 0.95 * file_tensor_bytes,
            "{dtype:?}: the GPU holds {device} bytes of weights for {file_tensor_bytes} bytes of tensors in the file");
        held.push(device);
    }
    let ratio = held[1] / held[0];
    println!("Q8_0 / F32 device weight bytes: {ratio:.3}");
    assert!(ratio < 0.30, "a Q8_0 model takes {ratio:.3}× the f32 device memory");
}
