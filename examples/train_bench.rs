//! Fine-tuning step time (a benchmark, not a test; BENCHMARKS.md, "Fine-tuning"): one AdamW step of
//! `BertForSequenceClassification` over every parameter (forward, backward, clipping, update) on a batch of `batch`
//! texts of exactly `seq` tokens, on the CPU backend and, with `GPU=1`, on the GPU (its default kernels, then the
//! calibration's choice for the model's shapes). PyTorch's time for the same step: `examples/torch_train_step.py`.
//!
//! `cargo run --release --example train_bench -- models/all-MiniLM-L6-v2 [batch] [seq] [steps]` → one JSON line per
//! backend with the median ms per step (the first step, which warms caches and pipelines, is not counted).
//! `CPU=0`: no CPU row. `TUNING=SPEC`: that tuning (`bertgpu bench --tuning`'s form) instead of calibrating;
//! `TUNING=default`: the default kernels' row alone.
//! `SUBMIT_EVERY=N`: the GPU submits every N passes (`GpuBackend::set_submit_every`). `PROFILE=1`: then one more
//! step with the calibrated (or `TUNING`) kernels, timed per kernel with timestamp queries (where the adapter has
//! them).

use std::time::Instant;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::{GpuBackend, Tuning, Workload};
use bertgpu::backend::{Backend, Dtype};
use bertgpu::config::BertConfig;
use bertgpu::tokenizer::{Batch, Tokenizer};
use bertgpu::training::finetune::{FineTuneTask, FineTuner, Targets};
use bertgpu::training::optim::StepOptions;
use bertgpu::weights::Weights;

const TEXT: &str = "The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly, and a \
    sentence embedding model turns every one of these words into vectors that capture meaning. ";

fn time<B: Backend>(be: &B, cfg: &BertConfig, w: &Weights, batch: &Batch, labels: &[u32], steps: usize)
    -> Result<f64, Box<dyn std::error::Error>> {
    let mut tuner = FineTuner::new(be, cfg, w, FineTuneTask::Sequence, Some(4), 0)?;
    let opt = StepOptions { learning_rate: 2e-5, weight_decay: 0.01, ..StepOptions::default() };
    let mut times = Vec::new();
    for s in 0..=steps {
        let t0 = Instant::now();
        pollster::block_on(tuner.step(be, batch, &Targets::Sequence(labels), &opt))?;
        if s > 0 {
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// GPU time per kernel of one step (after a warm-up step), against the step's wall-clock time.
fn profile(g: &GpuBackend, cfg: &BertConfig, w: &Weights, batch: &Batch, labels: &[u32]) -> Result<(), Box<dyn std::error::Error>> {
    let mut tuner = FineTuner::new(g, cfg, w, FineTuneTask::Sequence, Some(4), 0)?;
    let opt = StepOptions { learning_rate: 2e-5, weight_decay: 0.01, ..StepOptions::default() };
    pollster::block_on(tuner.step(g, batch, &Targets::Sequence(labels), &opt))?;
    if !g.enable_profiling() {
        println!("no GPU profile: the adapter has no timestamp queries");
        return Ok(());
    }
    let reads = g.read_backs();
    let t0 = Instant::now();
    pollster::block_on(tuner.step(g, batch, &Targets::Sequence(labels), &opt))?;
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    let mut prof = g.take_profile();
    prof.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = prof.iter().map(|e| e.1).sum();
    let passes: usize = prof.iter().map(|e| e.2).sum();
    println!("profiled step: {wall:.1} ms wall (with timestamps), {total:.1} ms GPU in {passes} passes, {} read-backs",
        g.read_backs() - reads);
    println!("| kernel | passes | ms | share |");
    println!("|---|---|---|---|");
    for (name, ms, n) in prof {
        println!("| {name} | {n} | {ms:.2} | {:.1}% |", 100.0 * ms / total);
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).map(String::as_str).unwrap_or("models/all-MiniLM-L6-v2"));
    let b: usize = args.get(2).map_or(Ok(16), |s| s.parse())?;
    let seq: usize = args.get(3).map_or(Ok(64), |s| s.parse())?;
    let steps: usize = args.get(4).map_or(Ok(5), |s| s.parse())?;
    let tokenizer = Tokenizer::from_dir(&dir, seq)?;
    let cfg = BertConfig::from_file(dir.join("config.json"))?;
    let w = Weights::from_safetensors_file(dir.join("model.safetensors"))?;
    let texts: Vec<String> = (0..b).map(|i| format!("{i} {}", TEXT.repeat(1 + seq / 16))).collect();
    let encoded = texts.iter().map(|t| tokenizer.encode(t, None)).collect::<Result<Vec<_>, _>>()?;
    let batch = tokenizer.batch(&encoded);
    assert_eq!(batch.t, seq, "every text is cut to exactly {seq} tokens");
    let labels: Vec<u32> = (0..b as u32).map(|i| i % 4).collect();
    if std::env::var("CPU").map_or(true, |v| v != "0") {
        let ms = time(&CpuBackend::new(), &cfg, &w, &batch, &labels, steps)?;
        println!(r#"{{"backend": "cpu", "batch": {b}, "seq": {seq}, "steps": {steps}, "ms_per_step": {ms:.1}}}"#);
    }
    if std::env::var("GPU").is_ok_and(|v| v == "1") {
        // The default kernels, then the ones the calibration picks on this adapter for the model's shapes (what
        // `bertgpu finetune` runs: the CLI calibrates at load).
        let g = GpuBackend::new_blocking()?;
        if let Some(n) = std::env::var("SUBMIT_EVERY").ok().and_then(|v| v.parse().ok()) {
            g.set_submit_every(n);
        }
        let ms = time(&g, &cfg, &w, &batch, &labels, steps)?;
        println!(r#"{{"backend": "gpu ({}), default kernels", "batch": {b}, "seq": {seq}, "steps": {steps}, "ms_per_step": {ms:.1}}}"#, g.gpu().info.name);
        if std::env::var("TUNING").is_ok_and(|v| v == "default") {
            return Ok(());
        }
        let tuning = match std::env::var("TUNING") {
            Ok(spec) => Tuning::parse(&spec)?,
            Err(_) => pollster::block_on(g.calibrate(&Workload::of_config(&cfg, Dtype::F32), 10_000.0))?.tuning,
        };
        g.set_tuning(tuning);
        let ms = time(&g, &cfg, &w, &batch, &labels, steps)?;
        println!(r#"{{"backend": "gpu ({}), calibrated {}", "batch": {b}, "seq": {seq}, "steps": {steps}, "ms_per_step": {ms:.1}}}"#, g.gpu().info.name, g.tuning());
        if std::env::var("PROFILE").is_ok_and(|v| v == "1") {
            profile(&g, &cfg, &w, &batch, &labels)?;
        }
    }
    Ok(())
}
