//! LoRA over a quantized base: the frozen linears stay f16 / Q8_0 on the device and the backward goes through them
//! with `Backend::matmul_weight` (`dX = dY·W` read in the weight's stored dtype, shaders/weight_grad.wgsl).
//! - The op: the CPU twin against an f64 product of the dequantized weight, the GPU kernel against the CPU twin, and
//!   the GPU's read of a quantized weight against its dequantized values.
//! - LoRA's gradients through a Q8_0 / f16 / Q4_0 base against the same fine-tuner on the dequantized base in f32,
//!   CPU and GPU; full fine-tuning of a quantized base refused by name.
//! - `bertgpu fine-tune --lora` on a Q8_0 `.gguf`: it learns, writes the adapter, and the adapter classifies.
//!
//! Skips (saying why) only when there is no GPU adapter at all; with Mesa lavapipe installed everything runs.

#![cfg(not(target_arch = "wasm32"))]

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::{Backend, Dtype};
use bertgpu::weights::quant;
use bertgpu::weights::HostTensor;

mod common;
use common::{assert_close, gpu, host, rand_vec, read};

/// Both sides decode the same f32 weights (an f16 scale times a small integer, or an f16 widened, is exact in f32):
/// they differ only in the order of the N-term f32 sum, so the budget is the f32 matmul's per term of the sum
/// (tests/quant_kernels.rs's `QMATMUL_ATOL_PER_K`: ≈ 2⁻²⁴·Σ|terms| with |dy|, |w| ≤ 1, rounded up), against an f64
/// sum (the CPU twin) or the CPU twin (the GPU kernel).
const WGRAD_ATOL: f32 = 2e-6;
const WGRAD_ATOL_PER_N: f32 = 1.5e-7;
const WGRAD_RTOL: f32 = 1e-5;

/// `w` stored as `dtype`.
fn pack(w: &HostTensor, dtype: Dtype) -> HostTensor {
    match dtype {
        Dtype::F16 => quant::to_f16(w).unwrap(),
        d => quant::quantize(w, d).unwrap(),
    }
}

/// `dy · W` in f64 from W's dequantized values.
fn reference(dy: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0f32; m * k];
    for i in 0..m {
        for j in 0..k {
            out[i * k + j] = (0..n).map(|c| dy[i * n + c] as f64 * w[c * k + j] as f64).sum::<f64>() as f32;
        }
    }
    out
}

/// The CPU twin against the f64 product, over awkward shapes (M 1, 7, 33, 129; N 1, 7, 65, 384; K 32, 96, 384)
/// and every stored dtype the op takes; the checks must see the weight's own values: a zero or a wrong block gives
/// errors of order 0.01–1.
#[test]
fn matmul_weight_cpu_twin_is_the_dequantized_product() {
    let cpu = CpuBackend::new();
    let mut n_checked = 0;
    for dtype in [Dtype::F16, Dtype::Q8_0, Dtype::Q4_0] {
        for (s, (m, n, k)) in [(1, 1, 32), (7, 7, 96), (33, 65, 384), (129, 384, 32), (16, 384, 384)].into_iter().enumerate() {
            let w = pack(&host(&[n, k], rand_vec(n * k, 10 + s as u64)), dtype);
            let wv = w.to_f32().unwrap();
            let dy = rand_vec(m * n, 20 + s as u64);
            let cw = cpu.upload(&w).unwrap();
            assert_eq!(cpu.dtype(&cw), dtype, "the weight stays {}", dtype.name());
            let got = pollster::block_on(cpu.read(&cpu.matmul_weight(&cpu.input(&dy, m, n).unwrap(), &cw).unwrap())).unwrap();
            assert_eq!(got.len(), m * k);
            let want = reference(&dy, &wv, m, n, k);
            assert!(want.iter().any(|v| v.abs() > 0.1), "a product that is not all near zero");
            assert_close(&format!("cpu {} M={m} N={n} K={k}", dtype.name()), &got, &want,
                WGRAD_ATOL + WGRAD_ATOL_PER_N * n as f32, WGRAD_RTOL);
            n_checked += 1;
        }
    }
    assert_eq!(n_checked, 15);
}

/// The GPU kernel (weight_grad.wgsl `matmul_w`) against the CPU twin, and the GPU's read of a quantized weight
/// (`dequant`) against the weight's dequantized values, exactly.
#[test]
fn matmul_weight_gpu_matches_cpu_twin() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::reference();
    let mut worst = 0f32;
    for dtype in [Dtype::F16, Dtype::Q8_0, Dtype::Q4_0] {
        for (s, (m, n, k)) in [(1, 1, 32), (7, 7, 96), (33, 65, 384), (129, 384, 32), (16, 384, 384)].into_iter().enumerate() {
            let w = pack(&host(&[n, k], rand_vec(n * k, 30 + s as u64)), dtype);
            let dy = rand_vec(m * n, 40 + s as u64);
            let (gw, cw) = (g.upload(&w).unwrap(), cpu.upload(&w).unwrap());
            assert_eq!(g.dtype(&gw), dtype, "the weight stays {} on the device", dtype.name());
            let gy = read(&g, &g.matmul_weight(&g.input(&dy, m, n).unwrap(), &gw).unwrap());
            let cy = pollster::block_on(cpu.read(&cpu.matmul_weight(&cpu.input(&dy, m, n).unwrap(), &cw).unwrap())).unwrap();
            assert_eq!(gy.len(), m * k);
            worst = worst.max(assert_close(&format!("gpu {} M={m} N={n} K={k}", dtype.name()), &gy, &cy,
                WGRAD_ATOL + WGRAD_ATOL_PER_N * n as f32, WGRAD_RTOL));
            if dtype != Dtype::F16 {
                assert_eq!(read(&g, &gw), w.to_f32().unwrap(), "{}: the read weight is its dequantized values", dtype.name());
            }
        }
    }
    eprintln!("matmul_weight: worst |gpu − cpu| {worst:.2e}");
}

/// Gradient of the LoRA parameters through a quantized base against the same computation on the dequantized base in
/// f32, relative per tensor `‖quantized − f32‖ / ‖f32‖`. Both sides multiply by the very same f32 weight values
/// (the stored ones decoded), so they differ only in summation order (the quantized side's GEMMs decode a panel of
/// rows at a time, `matmul_weight` N in pieces of 64 rows on the CPU and in order on the GPU). Measured worst
/// 4.7e-7 on the CPU (f16) and 7.2e-7 on lavapipe (f16); 2e-6 is 2.8× that, and a wrong weight, block or transpose
/// gives errors of order 1e-2–1.
const LORA_QUANT_GRAD_RTOL: f64 = 2e-6;
/// The logits of the two, absolute (|logits| ≲ 1): measured 0.0 on the CPU and on lavapipe (the forwards decode
/// the same values into the same GEMM order); 1e-6, an f32 rounding of such logits several times over, leaves room
/// for a kernel whose order differs, and is far below a wrong weight's 1e-2.
const LORA_QUANT_LOGITS_ATOL: f32 = 1e-6;

use bertgpu::config::BertConfig;
use bertgpu::tokenizer::Batch;
use bertgpu::training::finetune::{FineTuneTask, FineTuner, Targets};
use bertgpu::training::lora::{LoraOptions, LoraTargets};
use bertgpu::weights::Weights;

fn tiny() -> (BertConfig, Weights) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/tiny-classifier");
    (BertConfig::from_file(dir.join("config.json")).unwrap(), Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap())
}

/// The checkpoint with its layers' linear weights stored as `dtype`, and the same with those weights dequantized
/// to f32 (everything else as it was).
fn bases(w: &Weights, dtype: Dtype) -> (Weights, Weights, usize) {
    let (mut q, mut f) = (Weights::new(), Weights::new());
    let mut packed = 0;
    for name in w.names() {
        let t = w.stored(name).unwrap();
        let linear = name.contains("encoder.layer.") && name.ends_with(".weight") && t.shape.len() == 2;
        if linear {
            let p = pack(t, dtype);
            f.insert(name, HostTensor::f32(p.shape.clone(), p.to_f32().unwrap()).unwrap());
            q.insert(name, p);
            packed += 1;
        } else {
            q.insert(name, t.clone());
            f.insert(name, t.clone());
        }
    }
    (q, f, packed)
}

/// A LoRA fine-tuner (every linear, r 4) with A and B set to the same seeded values (B nonzero, so that A has a
/// gradient too).
fn lora_tuner<B: Backend>(be: &B, cfg: &BertConfig, w: &Weights, frozen: bool) -> FineTuner<B> {
    let mut tr = FineTuner::new_with(be, cfg, w, FineTuneTask::Sequence, None, 0, frozen).unwrap();
    tr.set_lora(be, LoraOptions { r: 4, alpha: 8.0, targets: LoraTargets::All, merge: false }, 0).unwrap();
    let mut set = 0;
    for (i, p) in tr.encoder.params.iter_mut().enumerate() {
        if p.names[0].contains(".lora_") {
            let v: Vec<f32> = rand_vec(p.rows * p.cols, 100 + i as u64).iter().map(|x| x * 0.5).collect();
            p.tensor = be.input(&v, p.rows, p.cols).unwrap();
            set += 1;
        }
    }
    assert_eq!(set, 2 * 6 * cfg.num_hidden_layers, "A and B of six adapters per layer");
    tr
}

/// Checks one backend; returns the worst relative gradient error and the logits' worst error.
fn check_gradients<B: Backend>(be: &B, dtype: Dtype) -> (f64, f32) {
    let (cfg, w) = tiny();
    let (q, f, packed) = bases(&w, dtype);
    assert_eq!(packed, 6 * cfg.num_hidden_layers, "q, k, v, attention.output, intermediate, output per layer");
    let tq = lora_tuner(be, &cfg, &q, true);
    let tf = lora_tuner(be, &cfg, &f, false);
    let stored: Vec<Dtype> = tq.encoder.params.iter().filter(|p| p.stored != Dtype::F32).map(|p| be.dtype(&p.tensor)).collect();
    assert_eq!(stored, vec![dtype; 4 * cfg.num_hidden_layers], "the fused qkv and the other three linears stay {}", dtype.name());
    assert!(tq.memory(4, 12).parameters < tf.memory(4, 12).parameters, "the statement counts the stored bytes");
    let batch: Batch = common::batch(&[12, 7, 9, 3], 12, cfg.vocab_size as u32, 5);
    let labels = [0u32, 1, 1, 0];
    let targets = Targets::Sequence(&labels);
    let (gq, lq) = tq.trainable_gradients(be, &batch, &targets).unwrap();
    let (gf, lf) = tf.trainable_gradients(be, &batch, &targets).unwrap();
    assert_eq!(gq.len(), gf.len());
    let mut worst = 0f64;
    let mut compared = 0;
    for (i, (a, b)) in gq.iter().zip(&gf).enumerate() {
        assert_eq!(a.is_some(), b.is_some(), "{}: trains on one side only", tq.encoder.params[i].names[0]);
        let (Some(a), Some(b)) = (a, b) else { continue };
        let (a, b) = (pollster::block_on(be.read(a)).unwrap(), pollster::block_on(be.read(b)).unwrap());
        assert_eq!(a.len(), b.len());
        let diff: f64 = a.iter().zip(&b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum::<f64>().sqrt();
        assert!(norm > 1e-6, "{}: a gradient that is not zero", tq.encoder.params[i].names[0]);
        let rel = diff / norm;
        assert!(rel <= LORA_QUANT_GRAD_RTOL, "{} {}: relative gradient error {rel:.2e}", dtype.name(), tq.encoder.params[i].names[0]);
        worst = worst.max(rel);
        compared += 1;
    }
    // Every adapter's A and B, the classifier's weight and bias.
    assert_eq!(compared, 2 * 6 * cfg.num_hidden_layers + 2);
    let (lq, lf) = (pollster::block_on(be.read(&lq)).unwrap(), pollster::block_on(be.read(&lf)).unwrap());
    let lerr = assert_close(&format!("{} logits", dtype.name()), &lq, &lf, LORA_QUANT_LOGITS_ATOL, 0.0);
    (worst, lerr)
}

#[test]
fn lora_gradients_through_a_quantized_base_are_the_dequantized_bases_cpu() {
    for dtype in [Dtype::Q8_0, Dtype::F16, Dtype::Q4_0] {
        let (g, l) = check_gradients(&CpuBackend::new(), dtype);
        eprintln!("cpu {}: worst relative gradient error {g:.2e}, logits {l:.2e}", dtype.name());
    }
}

#[test]
fn lora_gradients_through_a_quantized_base_are_the_dequantized_bases_gpu() {
    let Some(g) = gpu() else { return };
    for dtype in [Dtype::Q8_0, Dtype::F16, Dtype::Q4_0] {
        let (e, l) = check_gradients(&g, dtype);
        eprintln!("gpu {}: worst relative gradient error {e:.2e}, logits {l:.2e}", dtype.name());
    }
}

/// Full fine-tuning of a quantized base is refused, naming why and what to do; with LoRA it loads.
#[test]
fn full_fine_tuning_of_a_quantized_base_is_refused() {
    let (cfg, w) = tiny();
    let (q, _, _) = bases(&w, Dtype::Q8_0);
    let be = CpuBackend::new();
    let e = FineTuner::new(&be, &cfg, &q, FineTuneTask::Sequence, None, 0).err().expect("refused").to_string();
    assert!(e.contains("a Q8_0 base trains only its LoRA adapters") && e.contains("--lora"), "{e}");
    let (f16, _, _) = bases(&w, Dtype::F16);
    FineTuner::new(&be, &cfg, &f16, FineTuneTask::Sequence, None, 0).expect("an f16 base trains whole, widened to f32");
}

/// `bertgpu fine-tune --lora 4` on a `.gguf` (tiny-classifier converted to Q8_0): it trains (the loss falls, the
/// classes separate), writes peft's adapter files and the file's tokenizer, and the adapter applied to the .gguf
/// classifies unseen texts; without --lora the .gguf is refused, naming why.
#[test]
fn fine_tune_lora_on_a_q8_0_gguf() {
    let dir = std::env::temp_dir().join(format!("bertgpu-lora-quant-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let gguf = dir.join("tiny-q8.gguf");
    let (model, g) = (root.join("tests/models/tiny-classifier"), gguf.to_str().unwrap());
    let o = common::run_cli(&["convert", "--model", model.to_str().unwrap(), "--dtype", "q8_0", "--out", g], "");
    assert!(o.status.success(), "convert: {}", String::from_utf8_lossy(&o.stderr));
    let train = common::cats_and_cars(&dir);
    let out = dir.join("adapter");
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut a: Vec<String> = ["fine-tune", "--task", "classify", "--model", g, "--data", train.to_str().unwrap(), "--out",
            out.to_str().unwrap(), "--epochs", "6", "--lr", "1e-2", "--batch-size", "8", "--validation-split", "0.25",
            "--device", "cpu"].iter().map(|s| s.to_string()).collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let refused = common::run_cli(&args(&[]).iter().map(String::as_str).collect::<Vec<_>>(), "");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("a .gguf trains LoRA adapters only (--lora R)"), "{stderr}");
    let o = common::run_cli(&args(&["--lora", "4", "--lora-targets", "all"]).iter().map(String::as_str).collect::<Vec<_>>(), "");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "fine-tune --lora on the .gguf: {stderr}");
    let epochs: Vec<serde_json::Value> =
        stderr.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).filter(|v| v.get("train_loss").is_some()).collect();
    assert_eq!(epochs.len(), 6, "{stderr}");
    let (first, last) = (epochs[0]["train_loss"].as_f64().unwrap(), epochs[5]["train_loss"].as_f64().unwrap());
    eprintln!("LoRA over Q8_0: train loss {first:.4} → {last:.4}, last epoch {}", epochs[5]);
    assert!(last < 0.5 * first, "the loss falls: {first} → {last}");
    assert!(stderr.contains("training holds"), "the memory statement is printed: {stderr}");
    for f in ["adapter_config.json", "adapter_model.safetensors", "tokenizer.json"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let o = common::run_cli(&["classify", "--model", g, "--adapter", out.to_str().unwrap(), "--device", "cpu"],
        "the cat 99 sat on the mat and slept\nmy car 99 drove down the road fast\n");
    assert!(o.status.success(), "classify with the adapter: {}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!((lines[0][0]["label"].as_str(), lines[1][0]["label"].as_str()), (Some("animal"), Some("vehicle")));
    // fineTune's path in the browser (src/wasm/train.rs fineTuneGguf): the engine loaded from the .gguf fine-tunes a
    // copy of it with LoRA (the adapters and the merged folder come back, with the file's tokenizer), and refuses
    // without LoRA.
    use bertgpu::engine::{Device, Engine};
    use bertgpu::loader::{LoadOptions, ModelSource};
    use bertgpu::training::fit::checkpoint::{Checkpoints, NoStore};
    use bertgpu::training::fit::{FitOptions, Progress};
    use bertgpu::training::job::{Examples, JobOptions, JobTask};
    let engine = pollster::block_on(Engine::load(ModelSource::Path(&gguf), &LoadOptions::default(), Device::Cpu)).unwrap();
    let examples = Examples::parse(JobTask::Classify, &std::fs::read_to_string(&train).unwrap()).unwrap();
    let fit = FitOptions { epochs: 2, learning_rate: 1e-2, batch_size: 8, ..FitOptions::default() };
    let mut opts = JobOptions { task: JobTask::Classify, layers: None, doc_stride: 128, fit, lora: None };
    let read = || bertgpu::weights::gguf::read_bert(&std::fs::read(&gguf).unwrap()[..]).unwrap();
    let e = pollster::block_on(engine.fine_tune_gguf(read(), &opts, &examples, &mut |_: Progress<'_>| {},
        None::<&mut Checkpoints<NoStore>>)).err().expect("refused without LoRA").to_string();
    assert!(e.contains("trains LoRA adapters only"), "{e}");
    opts.lora = Some(LoraOptions::new(4));
    let (done, tokenizer, _) = pollster::block_on(engine.fine_tune_gguf(read(), &opts, &examples, &mut |_: Progress<'_>| {},
        None::<&mut Checkpoints<NoStore>>)).unwrap();
    assert!(done.adapter.is_some() && !done.safetensors.is_empty() && tokenizer.contains("\"vocab\""));
    assert_eq!(done.report.epochs.len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
