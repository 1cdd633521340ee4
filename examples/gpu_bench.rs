//! GPU benchmarks (BENCHMARKS.md), on whatever adapter wgpu finds (lavapipe here):
//! - `cargo run --example gpu_bench -- matmul`: GFLOP/s of the matmul (several workgroup shapes, `WGS=8x8,16x16`;
//!   `t16x16`: the tiled kernel, staged through workgroup memory; `w16x16`: the wide one, 8 × 8 per invocation)
//!   against the CPU backend, at BERT shapes. The slower kernels it was compared with are deleted; their numbers
//!   are in BENCHMARKS.md and the revision that measured them is named there.
//! - The whole forward on both backends, with each kernel's share of the GPU's time, is `bertgpu bench --profile`
//!   (one forward benchmark, in the CLI); PyTorch's time on the same batch: `examples/torch_forward.py`.
//! - `gpu_bench quant [MODEL ...]`: the linear at BERT shapes (`QSHAPES=1024x384x1536,...`) with the weight in f32,
//!   f16, Q8_0 and Q4_0, then the forward of each MODEL (a folder or a `.gguf`, e.g. all-MiniLM-L6-v2 and its
//!   `bertgpu convert` outputs), batch 8 × 128, on both backends; times relative to the f32 weight / first model.
//! - `gpu_bench passes`: the host's cost of a pass: chains of 2,000 elementwise adds of 4 values (work the GPU
//!   finishes at once), recorded and waited for, in µs per pass (medians of 7, min–max), the recording alone and in
//!   all; what a training step's thousand passes pay on top of their kernels.
//! - `gpu_bench pipelines [MODEL]`: building the pipelines of a model's first call (the load-time check's forward
//!   and the poolings, `canary::pipelines`) one at a time, as dispatches used to build them, against all at once
//!   (`GpuBackend::build_pipelines`: on every core natively); each on a fresh device, so nothing is in the
//!   backend's cache (set the driver's own cache off for a first load's time: `MESA_SHADER_CACHE_DISABLE=true`).
//! Wall-clock medians after a warm-up run; the variants run round-robin so a busy machine slows all alike.

use std::time::Instant;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::{AttentionKernel, Gpu, GpuBackend, GpuTensor, MatmulKernel, MatmulVariant, Tuning};
use bertgpu::backend::{Activation, Backend};
use bertgpu::weights::{HostData, HostTensor};

const SHAPES: [(usize, usize, usize); 3] = [(1024, 384, 1536), (1024, 1536, 384), (128, 768, 3072)];

fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n).map(|_| { s ^= s << 13; s ^= s >> 7; s ^= s << 17; ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0 }).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Wall-clock ms of one `linear` (M, K) × (N, K)ᵀ + bias, recorded, submitted and waited for.
fn time_linear(g: &GpuBackend, x: &GpuTensor, w: &GpuTensor, b: &GpuTensor) -> f64 {
    let t0 = Instant::now();
    let y = g.linear(x, w, Some(b), Activation::None).unwrap();
    pollster::block_on(g.flush()).unwrap();
    drop(y);
    t0.elapsed().as_secs_f64() * 1e3
}

/// The variants are timed round-robin (one run of each, repeated), so a busy machine slows all of them alike and
/// the ratios stay meaningful; each cell is the median.
fn matmul() {
    let reps: usize = std::env::var("REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let wgs = bench_wgs();
    let backends: Vec<GpuBackend> = wgs.iter()
        .map(|&(wg, kernel)| GpuBackend::with_tuning(Gpu::new_blocking().unwrap(),
            Tuning { matmul: MatmulVariant { kernel, wg },
                ..Default::default() }).unwrap())
        .collect();
    let cpu = CpuBackend::new();
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
    for &(m, k, n) in &SHAPES {
        let (xv, wv, bv) = (rand_vec(m * k, 1), rand_vec(n * k, 2), rand_vec(n, 3));
        let host = |shape: Vec<usize>, d: &Vec<f32>| HostTensor { shape, data: HostData::F32(d.clone()) };
        let ins: Vec<_> = backends.iter().map(|g| (g.input(&xv, m, k).unwrap(), g.upload(&host(vec![n, k], &wv)).unwrap(),
            g.upload(&host(vec![n], &bv)).unwrap())).collect();
        let (cx, cw, cb) = (cpu.input(&xv, m, k).unwrap(), cpu.upload(&host(vec![n, k], &wv)).unwrap(),
            cpu.upload(&host(vec![n], &bv)).unwrap());
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); backends.len() + 1];
        for rep in 0..=reps {
            let mut col = Vec::new();
            for (g, (x, w, b)) in backends.iter().zip(&ins) {
                col.push(time_linear(g, x, w, b));
            }
            let t0 = Instant::now();
            let y = cpu.linear(&cx, &cw, Some(&cb), Activation::None).unwrap();
            col.push(t0.elapsed().as_secs_f64() * 1e3);
            drop(y);
            if rep > 0 { // rep 0 warms up (pipeline compilation)
                for (t, v) in times.iter_mut().zip(col) { t.push(v); }
            }
        }
        let names: Vec<String> = wgs.iter()
            .map(|(wg, kernel)| match kernel {
                MatmulKernel::Wide => format!("8×8/thread vec4 wide, workgroup {}×{}", wg.0, wg.1),
                MatmulKernel::Tiled => format!("4×8/thread vec4 tiled, workgroup {}×{}", wg.0, wg.1),
                _ => format!("4×8/thread vec4, workgroup {}×{}", wg.0, wg.1),
            })
            .chain(["CPU backend (rayon, 2 threads)".to_string()]).collect();
        for (i, (name, t)) in names.into_iter().zip(times).enumerate() {
            let ms = median(t);
            if rows.len() <= i { rows.push((name, Vec::new())); }
            rows[i].1.push(ms);
        }
    }
    println!("| kernel | {} |", SHAPES.map(|(m, k, n)| format!("{m}×{k}×{n}")).join(" | "));
    println!("|---|---|---|---|");
    for (name, ms) in rows {
        let cells: Vec<String> = ms.iter().zip(SHAPES).map(|(ms, (m, k, n))|
            format!("{:.2} GFLOP/s ({ms:.0} ms)", 2.0 * (m * k * n) as f64 / ms / 1e6)).collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
}

/// Workgroup shapes to compare: `WGS="16x4,t16x16,w8x8"` (`t`: the tiled kernel, `w`: the wide one) or the default
/// list.
fn bench_wgs() -> Vec<((u32, u32), MatmulKernel)> {
    let spec = std::env::var("WGS").unwrap_or_else(|_| "8x8,16x16,16x4,32x4,64x4,32x8,t8x8,t16x8,t16x16,w8x8,w16x16".into());
    spec.split(',').filter_map(|s| {
        let s = s.trim();
        let (kernel, s) = match s.split_at(1) {
            ("t", rest) => (MatmulKernel::Tiled, rest),
            ("w", rest) => (MatmulKernel::Wide, rest),
            _ => (MatmulKernel::Direct, s),
        };
        let (a, b) = s.split_once('x')?;
        Some(((a.trim().parse().ok()?, b.trim().parse().ok()?), kernel))
    }).collect()
}

/// A batch of `b` sequences of `t` real tokens ([CLS] … [SEP], ids drawn from MiniLM's vocabulary).
fn bench_batch(b: usize, t: usize) -> bertgpu::tokenizer::Batch {
    let ids = rand_vec(b * t, 5);
    let mut batch = bertgpu::tokenizer::Batch { b, t, ..Default::default() };
    for (i, v) in ids.iter().enumerate() {
        let id = match i % t { 0 => 101, j if j == t - 1 => 102, _ => 1000 + ((v + 1.0) * 14000.0) as u32 };
        batch.input_ids.push(id);
        batch.token_type_ids.push(0);
        batch.attention_mask.push(1);
    }
    batch
}

/// CPU time consumed so far by every thread of this process (lavapipe's and rayon's workers included), in ms, from
/// `/proc/self/task/*/schedstat` (ns on the CPU). Unlike wall time it does not grow when other processes compete for
/// the cores, so ratios measured on a busy machine stay meaningful. 0 where /proc is absent.
fn cpu_ms() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum::<u64>() as f64 / 1e6
}

/// (wall ms, process CPU ms) of `f`.
fn timed<T>(f: impl FnOnce() -> T) -> ((f64, f64), T) {
    let (c0, t0) = (cpu_ms(), Instant::now());
    let out = f();
    ((t0.elapsed().as_secs_f64() * 1e3, cpu_ms() - c0), out)
}

/// Medians of (wall, cpu) pairs.
fn median2(v: &[(f64, f64)]) -> (f64, f64) {
    (median(v.iter().map(|p| p.0).collect()), median(v.iter().map(|p| p.1).collect()))
}

/// Packed weights against f32: the linear at BERT shapes per weight dtype, then whole forwards per model file.
/// Each cell gives wall-clock ms and, in brackets, the process's CPU ms (all threads), each relative to f32.
fn quant(models: &[String]) {
    use bertgpu::backend::Dtype;
    use bertgpu::config::BertConfig;
    use bertgpu::model::BertModel;
    use bertgpu::weights::quant::{quantize, to_f16};
    use bertgpu::weights::Weights;
    let reps: usize = std::env::var("REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let g = GpuBackend::new(Gpu::new_blocking().unwrap()).unwrap();
    let cpu = CpuBackend::new();
    let dtypes = [Dtype::F32, Dtype::F16, Dtype::Q8_0, Dtype::Q4_0];
    // `QSHAPES=MxKxN,...` (default: the FFN's two GEMMs at batch 8 × 128); `QSHAPES=none` skips the table.
    let shapes: Vec<(usize, usize, usize)> = std::env::var("QSHAPES").unwrap_or_else(|_| "1024x384x1536,1024x1536x384".into())
        .split(',').filter_map(|s| {
            let v: Vec<usize> = s.split('x').filter_map(|d| d.trim().parse().ok()).collect();
            (v.len() == 3).then(|| (v[0], v[1], v[2]))
        }).collect();
    println!("linear y = x·wᵀ + b, median of {reps}: wall-clock ms [CPU ms of all threads], ratios to the f32 weight on the same backend:");
    println!("| weight | {} |", shapes.iter().map(|(m, k, n)| format!("GPU {m}×{k}×{n} | CPU {m}×{k}×{n}")).collect::<Vec<_>>().join(" | "));
    println!("|---|{}", "---|---|".repeat(shapes.len()));
    let mut cells: Vec<Vec<String>> = vec![Vec::new(); dtypes.len()];
    for &(m, k, n) in &shapes {
        let (xv, wv, bv) = (rand_vec(m * k, 1), rand_vec(n * k, 2), rand_vec(n, 3));
        let w32 = HostTensor { shape: vec![n, k], data: HostData::F32(wv) };
        let bias = HostTensor { shape: vec![n], data: HostData::F32(bv) };
        let ws: Vec<HostTensor> = dtypes.iter().map(|d| match d {
            Dtype::F32 => w32.clone(),
            Dtype::F16 => to_f16(&w32).unwrap(),
            Dtype::Q8_0 => quantize(&w32, Dtype::Q8_0).unwrap(),
            Dtype::Q4_0 => quantize(&w32, Dtype::Q4_0).unwrap(),
        }).collect();
        let (gx, gb) = (g.input(&xv, m, k).unwrap(), g.upload(&bias).unwrap());
        let (cx, cb) = (cpu.input(&xv, m, k).unwrap(), cpu.upload(&bias).unwrap());
        let gws: Vec<GpuTensor> = ws.iter().map(|w| g.upload(w).unwrap()).collect();
        let cws: Vec<_> = ws.iter().map(|w| cpu.upload(w).unwrap()).collect();
        let (mut tg, mut tc) = (vec![Vec::new(); dtypes.len()], vec![Vec::new(); dtypes.len()]);
        for rep in 0..=reps {
            for i in 0..dtypes.len() {
                let (a, ()) = timed(|| {
                    let y = g.linear(&gx, &gws[i], Some(&gb), Activation::None).unwrap();
                    pollster::block_on(g.flush()).unwrap();
                    drop(y);
                });
                let (c, ()) = timed(|| drop(cpu.linear(&cx, &cws[i], Some(&cb), Activation::None).unwrap()));
                if rep > 0 { tg[i].push(a); tc[i].push(c); }
            }
        }
        let (tg, tc): (Vec<_>, Vec<_>) = (tg.iter().map(|v| median2(v)).collect(), tc.iter().map(|v| median2(v)).collect());
        for i in 0..dtypes.len() {
            for t in [&tg, &tc] {
                cells[i].push(format!("{:.0} ({:.2}×) [{:.0} ({:.2}×)]", t[i].0, t[i].0 / t[0].0, t[i].1, t[i].1 / t[0].1));
            }
        }
    }
    for (d, c) in dtypes.iter().zip(cells) {
        if !shapes.is_empty() {
            println!("| {} | {} |", d.name(), c.join(" | "));
        }
    }
    if models.is_empty() {
        return;
    }

    // Whole forwards (embeddings, 6 layers, mean pool, read-back) of each model, both backends, round-robin.
    let (b, t) = (8usize, 128usize);
    let batch = bench_batch(b, t);
    let load = |path: &str| -> (BertConfig, Weights) {
        if path.ends_with(".gguf") {
            let m = bertgpu::weights::gguf::load_gguf(&std::fs::read(path).unwrap()).unwrap();
            (m.config, m.weights)
        } else {
            let dir = std::path::Path::new(path);
            (BertConfig::from_file(dir.join("config.json")).unwrap(),
                Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap())
        }
    };
    fn run<B: Backend>(be: &B, m: &BertModel<B>, batch: &bertgpu::tokenizer::Batch) -> ((f64, f64), Vec<f32>) {
        timed(|| {
            let mask = be.mask(batch).unwrap();
            let hidden = m.forward_with_mask(be, batch, &mask).unwrap();
            let pooled = be.mean_pool(&hidden, &mask, batch.b, batch.t).unwrap();
            pollster::block_on(be.read(&pooled)).unwrap()
        })
    }
    let loaded: Vec<_> = models.iter().map(|p| {
        let (cfg, w) = load(p);
        (BertModel::load(&w, &cfg, &g).unwrap(), BertModel::load(&w, &cfg, &cpu).unwrap())
    }).collect();
    let (mut tg, mut tc) = (vec![Vec::new(); models.len()], vec![Vec::new(); models.len()]);
    for rep in 0..=reps {
        for (i, (gm, cm)) in loaded.iter().enumerate() {
            let (a, va) = run(&g, gm, &batch);
            let (c, vc) = run(&cpu, cm, &batch);
            let err = va.iter().zip(&vc).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            assert!(err < 1e-3, "{}: GPU and CPU forwards disagree by {err}", models[i]);
            if rep > 0 { tg[i].push(a); tc[i].push(c); }
        }
    }
    println!();
    println!("forward + mean pool + read-back, batch {b} × {t}, median of {reps}: wall ms [CPU ms of all threads], ratios to the first model:");
    println!("| model | GPU ({}) | CPU backend |", g.gpu().info.name);
    println!("|---|---|---|");
    let (tg, tc): (Vec<_>, Vec<_>) = (tg.iter().map(|v| median2(v)).collect(), tc.iter().map(|v| median2(v)).collect());
    for (i, p) in models.iter().enumerate() {
        let cell = |t: &Vec<(f64, f64)>| format!("{:.0} ({:.2}×) [{:.0} ({:.2}×)]", t[i].0, t[i].0 / t[0].0, t[i].1, t[i].1 / t[0].1);
        println!("| {p} | {} | {} |", cell(&tg), cell(&tc));
    }
    // GPU time per kernel (timestamp queries), one more forward of each model.
    if g.enable_profiling() {
        println!();
        println!("GPU time per kernel in one forward (timestamp queries), ms:");
        for (i, (gm, _)) in loaded.iter().enumerate() {
            run(&g, gm, &batch);
            let prof = g.take_profile();
            let cells: Vec<String> = prof.iter().map(|(name, ms, n)| format!("{name} ×{n}: {ms:.0}")).collect();
            println!("- {}: {}", models[i], cells.join(", "));
        }
    }
}

/// The attention kernels alone at all-MiniLM-L6-v2's shape (8 × 128 tokens, 12 heads of 32), vec4 against scalar,
/// round-robin; each timing is one dispatch plus its read-back.
fn attention() {
    use bertgpu::backend::AttentionShape;
    use bertgpu::tokenizer::Batch;
    let reps: usize = std::env::var("REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let (b, t, heads, d) = (8usize, 128usize, 12usize, 32usize);
    let h = heads * d;
    let qkv = rand_vec(b * t * 3 * h, 9);
    let batch = Batch { b, t, input_ids: vec![1; b * t], token_type_ids: vec![0; b * t], attention_mask: vec![1; b * t],
        ..Default::default() };
    let shape = AttentionShape { batch: b, seq: t, heads, head_dim: d };
    let kernels = [("vec4", false), ("scalar", true)];
    let backends: Vec<GpuBackend> = kernels.iter()
        .map(|&(_, scalar)| GpuBackend::with_tuning(Gpu::new_blocking().unwrap(), Tuning { attention: if scalar { AttentionKernel::Scalar } else { AttentionKernel::Vec4 }, ..Default::default() }).unwrap())
        .collect();
    let mut times = vec![Vec::new(); kernels.len()];
    for rep in 0..=reps {
        for (i, g) in backends.iter().enumerate() {
            let x = g.input(&qkv, b * t, 3 * h).unwrap();
            let m = g.mask(&batch).unwrap();
            pollster::block_on(g.read(&m)).unwrap(); // uploads done before the clock starts
            let t0 = Instant::now();
            let y = g.attention(&x, &m, shape).unwrap();
            pollster::block_on(g.read(&y)).unwrap();
            if rep > 0 {
                times[i].push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    let flops = 4.0 * (b * heads * t * t * d) as f64;
    println!("attention, batch {b} × {t}, {heads} heads × {d} ({:.2} GFLOP), median of {reps}:", flops / 1e9);
    println!("| kernel | ms | GFLOP/s |");
    println!("|---|---|---|");
    for (i, (name, _)) in kernels.iter().enumerate() {
        let ms = median(times[i].clone());
        println!("| {name} | {ms:.1} | {:.2} |", flops / ms / 1e6);
    }
}

/// µs of wall clock per pass of a chain of tiny adds (each reading the one before), recorded and waited for.
fn passes() {
    const N: usize = 2000;
    let g = GpuBackend::new_blocking().unwrap();
    let b = g.input(&[1.0; 4], 1, 4).unwrap();
    // (µs per pass recording, including the submissions every DEFAULT_SUBMIT_EVERY passes; µs per pass in all)
    let chain = || {
        let t0 = Instant::now();
        let mut a = g.add(&b, &b).unwrap();
        for _ in 1..N {
            a = g.add(&a, &b).unwrap();
        }
        let recorded = t0.elapsed().as_secs_f64() * 1e6 / N as f64;
        let v = pollster::block_on(g.read(&a)).unwrap();
        assert_eq!(v[0], (N + 1) as f32, "the chain adds every term");
        (recorded, t0.elapsed().as_secs_f64() * 1e6 / N as f64)
    };
    chain(); // compiles the pipeline, fills the pool
    let times: Vec<(f64, f64)> = (0..7).map(|_| chain()).collect();
    let range = |v: Vec<f64>| {
        let (lo, hi) = v.iter().fold((f64::INFINITY, 0f64), |(l, h), &t| (l.min(t), h.max(t)));
        format!("{:.1} ({lo:.1}–{hi:.1})", median(v))
    };
    println!("| passes | µs per pass recorded | µs per pass in all (recorded, run, read) |");
    println!("|---|---|---|");
    println!("| {N} adds of 4 values | {} | {} |", range(times.iter().map(|t| t.0).collect()),
        range(times.iter().map(|t| t.1).collect()));
}

/// ms to build a model's first-call pipelines one at a time and all at once, each on a fresh device (medians of 5);
/// then the same for the pipelines of that forward under every matmul and row-kernel variant the calibration may
/// time (`matmul_candidates`, `row_candidates`): about what a first calibration builds.
fn pipelines(model: &str) {
    use bertgpu::backend::gpu::{matmul_candidates, row_candidates};
    use bertgpu::engine::canary;
    use bertgpu::loader::{self, LoadOptions, ModelSource};
    use bertgpu::tasks::Model;
    let m = loader::load(ModelSource::Path(std::path::Path::new(model)), &LoadOptions::default()).unwrap();
    let w = m.weights().unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("| {model} | pipelines | one at a time (ms) | all at once, {threads} threads (ms) | ratio |");
    println!("|---|---|---|---|---|");
    for variants in [false, true] {
        let mut times = [Vec::new(), Vec::new()];
        let mut count = 0;
        for _ in 0..5 {
            for (at_once, t) in times.iter_mut().enumerate() {
                let g = GpuBackend::new_blocking().unwrap();
                let tunings = if variants {
                    let mut v = matmul_candidates(g.gpu());
                    v.extend(row_candidates(g.gpu()));
                    v
                } else {
                    vec![g.tuning()]
                };
                let model = Model::new(g, m.config.clone(), m.tokenizer.clone(), &w).unwrap();
                let mut specs = Vec::new();
                for tuning in tunings {
                    model.backend.set_tuning(tuning);
                    specs.extend(canary::pipelines(&model).unwrap());
                }
                let t0 = Instant::now();
                if at_once == 1 {
                    model.backend.build_pipelines(&specs).unwrap();
                } else {
                    for s in &specs {
                        model.backend.build_pipelines(std::slice::from_ref(s)).unwrap();
                    }
                }
                t.push(t0.elapsed().as_secs_f64() * 1e3);
                count = model.backend.pipeline_count();
            }
        }
        let [one, all] = times.map(median);
        let what = if variants { "every matmul and row variant" } else { "a first call" };
        println!("| {what} | {count} | {one:.1} | {all:.1} | {:.2}× |", one / all);
    }
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "matmul".into());
    let g = Gpu::new_blocking().unwrap();
    eprintln!("adapter: {} ({:?})", g.info.name, g.info.device_type);
    drop(g);
    match what.as_str() {
        "matmul" => matmul(),
        "attention" => attention(),
        "passes" => passes(),
        "quant" => {
            let models: Vec<String> = std::env::args().skip(2).collect();
            quant(&models)
        }
        "pipelines" => pipelines(&std::env::args().nth(2).unwrap_or_else(|| "models/all-MiniLM-L6-v2".into())),
        other => eprintln!("unknown benchmark {other}: matmul | attention | passes | quant [MODEL ...] | pipelines [MODEL]"),
    }
}
