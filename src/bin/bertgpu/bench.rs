//! `bertgpu bench`: the speed of this build's backends on this machine, side by side in one run.

use bertgpu::backend::gpu::Tuning;
use bertgpu::engine::{Device, Engine};
use bertgpu::heads::Pooling;
use bertgpu::tasks::EmbedOptions;

use crate::{load_engine, load_model, Fail, InferArgs};

/// Times `embed` (forward + mean pool + read-back) of `batch` texts of exactly `seq` tokens on each backend the
/// `--device` allows (`auto`: the CPU and, when an adapter exists, the GPU), runs interleaved round-robin so the
/// backends see the same machine load, and prints a Markdown table of medians and ratios. Each of `tunings` is one
/// more GPU row: the GPU engine switched to those knobs before each of its runs.
pub(crate) fn cmd_bench(args: &InferArgs, batch: usize, seq: usize, reps: usize, profile: bool, tunings: &[Tuning],
    submit_every: Option<usize>) -> Result<(), Fail> {
    if batch == 0 || seq < 2 || reps == 0 {
        return Err(Fail::Model("bench needs --batch ≥ 1, --seq ≥ 2 ([CLS] and [SEP]) and --reps ≥ 1".into()));
    }
    let mut m = load_model(&args.model)?;
    let max = m.model.config.max_position_embeddings;
    if seq > max {
        return Err(Fail::Model(format!("--seq {seq} exceeds the model's max_position_embeddings ({max})")));
    }
    m.model.tokenizer.set_max_length(seq).map_err(|e| Fail::Model(e.to_string()))?;
    // Texts longer than `seq` tokens, cut to exactly `seq` by truncation; each starts differently.
    let words = "the quick brown fox jumps over the lazy dog while seven wizards quietly judge boxing matches";
    let texts: Vec<String> = (0..batch).map(|i| format!("{i} {}", words.repeat(seq / 8 + 2))).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();

    let devices: &[Device] = match args.device {
        Device::Cpu => &[Device::Cpu],
        Device::Gpu => &[Device::Gpu],
        Device::Auto => &[Device::Cpu, Device::Gpu],
    };
    let mut engines = Vec::new();
    for &d in devices {
        // f16 activations are a row of their own (below), beside f32 on the same engine.
        match load_engine(&m, d, false) {
            Ok(e) => engines.push((d, e)),
            Err(Fail::Model(why)) if args.device == Device::Auto && d == Device::Gpu => {
                eprintln!("bertgpu bench: no GPU row ({why})");
            }
            Err(e) => return Err(e),
        }
    }
    // Rows: (engine, tuning to switch its GPU backend to first, f16 activations). The GPU's first row keeps its own
    // tuning.
    let mut rows: Vec<(usize, Option<Tuning>, bool)> = (0..engines.len()).map(|i| (i, None, false)).collect();
    let gpu_engine = engines.iter().position(|(_, e)| matches!(e, Engine::Gpu(_)));
    if let (Some(n), Some((_, Engine::Gpu(g)))) = (submit_every, gpu_engine.map(|i| &engines[i])) {
        g.backend.set_submit_every(n);
    }
    if let Some(gi) = gpu_engine {
        rows.extend(tunings.iter().map(|&t| (gi, Some(t), false)));
        if args.activations == crate::load::Activations::F16 {
            let Engine::Gpu(g) = &engines[gi].1 else { unreachable!("gpu_engine is a GPU engine") };
            // Checked and tuned once, as a load with --activations f16 would (the mode has its own calibration);
            // the rows then switch the mode and the tuning themselves.
            let f32_tuning = g.backend.tuning();
            pollster::block_on(engines[gi].1.set_f16_activations(true)).map_err(|e| Fail::Model(e.to_string()))?;
            // (read again: the load may have cached a calibration meanwhile)
            if let Some((line, _)) = crate::tune::apply(&engines[gi].1, crate::tune::cached())? {
                eprintln!("bertgpu bench: GPU kernels for f16 activations: {line}");
            }
            rows.push((gi, Some(g.backend.tuning()), true));
            g.backend.set_f16_activations(false);
            g.backend.set_tuning(f32_tuning);
        }
    }
    let opts = EmbedOptions {
        pooling: Some(Pooling::Mean),
        normalize: Some(true),
        batch_size: batch,
        ..EmbedOptions::default()
    };
    let run = |e: &Engine| -> Result<f64, Fail> {
        let start = std::time::Instant::now();
        pollster::block_on(e.embed(&texts, &opts)).map_err(|e| Fail::Model(format!("bench failed: {e}")))?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    };
    let default_tuning = engines.iter().find_map(|(_, e)| match e { Engine::Gpu(g) => Some(g.backend.tuning()), _ => None });
    let row_engine = |&(i, t, f16): &(usize, Option<Tuning>, bool)| -> &Engine {
        let e = &engines[i].1;
        if let (Engine::Gpu(g), Some(d)) = (e, default_tuning) {
            g.backend.set_tuning(t.unwrap_or(d));
            g.backend.set_f16_activations(f16);
        }
        e
    };
    let mut times = vec![Vec::with_capacity(reps); rows.len()];
    for row in &rows {
        run(row_engine(row))?; // warm-up: pipelines, buffer pools, caches
    }
    for _ in 0..reps {
        for (k, row) in rows.iter().enumerate() {
            times[k].push(run(row_engine(row))?);
        }
    }
    // Matmul FLOPs of the encoder (2 per multiply-add): per layer, QKV + output projection (4·H²) and the
    // feed-forward (2·H·I) per token, plus QKᵀ and AV (2·T·H per token).
    let (h, i, l) = (m.model.config.hidden_size as f64, m.model.config.intermediate_size as f64, m.model.config.num_hidden_layers as f64);
    let tokens = (batch * seq) as f64;
    let gflop = l * 2.0 * tokens * (4.0 * h * h + 2.0 * h * i + 2.0 * seq as f64 * h) / 1e9;
    let medians: Vec<f64> = times
        .iter_mut()
        .map(|t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
        .collect();
    println!(
        "model `{}` ({} layers, hidden {}), batch {batch} × {seq} tokens, {gflop:.2} GFLOP, median of {reps} (min–max)",
        m.dir.display(),
        m.model.config.num_hidden_layers,
        m.model.config.hidden_size
    );
    println!("| backend | ms | min–max ms | GFLOP/s | time / first row's |");
    println!("|---|---|---|---|---|");
    for (k, (row, t)) in rows.iter().zip(&times).enumerate() {
        let name = match (&engines[row.0].1, row.1) {
            (Engine::Cpu(_), _) => "cpu".to_string(),
            (Engine::Gpu(_), Some(t)) if row.2 => format!("gpu {t}, f16 activations"),
            (Engine::Gpu(g), None) => format!("gpu ({}) {}", g.backend.gpu().info.name, default_tuning.unwrap_or_default()),
            (Engine::Gpu(_), Some(t)) => format!("gpu {t}"),
        };
        let med = medians[k];
        println!(
            "| {name} | {med:.2} | {:.2}–{:.2} | {:.2} | {:.3} |",
            t[0],
            t[t.len() - 1],
            gflop / (med / 1e3),
            med / medians[0]
        );
    }
    if profile {
        if let Some(gi) = gpu_engine {
            // A calibration for each mode the rows run in.
            for f16 in [false, true].into_iter().filter(|&f16| rows.iter().any(|r| r.2 == f16)) {
                let e = row_engine(&(gi, None, f16));
                print_calibration(e)?;
            }
        }
        for row in &rows {
            if let Engine::Gpu(g) = row_engine(row) {
                print_profile(g, || run(row_engine(row)).map(drop))?;
            }
        }
    }
    Ok(())
}

/// A fresh calibration of the GPU kernels on this model (what a first load on this adapter runs): every variant's
/// time and the choice. The backend's calibration leaves the engine's tuning as it is.
fn print_calibration(e: &Engine) -> Result<(), Fail> {
    let (Engine::Gpu(m), Some(work)) = (e, e.tuning_workload()) else { return Ok(()) };
    let c = pollster::block_on(m.backend.calibrate(&work, f64::INFINITY))
        .map_err(|e| Fail::Model(format!("calibration failed: {e}")))?;
    println!();
    println!("Calibration ({work:?}): {c}");
    println!("| variant | ms per layer's stage |");
    println!("|---|---|");
    for (t, ms) in &c.timed {
        println!("| {t}{} | {ms:.4} |", if *t == c.tuning { " (chosen)" } else { "" });
    }
    Ok(())
}

/// GPU time per kernel of one more run, from timestamp queries (where the adapter has them).
fn print_profile(g: &bertgpu::tasks::Model<bertgpu::backend::gpu::GpuBackend>, run: impl Fn() -> Result<(), Fail>)
    -> Result<(), Fail> {
    println!();
    if !g.backend.enable_profiling() {
        println!("no GPU profile: the adapter `{}` has no timestamp queries", g.backend.gpu().info.name);
        return Ok(());
    }
    run()?;
    let prof = g.backend.take_profile();
    let total: f64 = prof.iter().map(|e| e.1).sum();
    println!("GPU time per kernel (timestamp queries, {}), one run: {total:.1} ms in passes", g.backend.tuning());
    println!("| kernel | passes | ms | share |");
    println!("|---|---|---|---|");
    for (name, ms, n) in prof {
        println!("| {name} | {n} | {ms:.1} | {:.1}% |", 100.0 * ms / total);
    }
    Ok(())
}
