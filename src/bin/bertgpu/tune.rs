//! The GPU kernels' tuning for the CLI: the adapter's calibration, cached in a file so it runs once per adapter,
//! model shape and bertgpu version.

use std::collections::BTreeMap;
use std::path::PathBuf;

use bertgpu::backend::gpu::{Progress, Tuning};
use bertgpu::engine::crossover::Crossover;
use bertgpu::engine::Engine;
use bertgpu::weights::Weights;

use crate::Fail;

/// How long the calibration may take at a load of a model shape on an adapter (it runs until it has finished
/// once, each load resuming where the last stopped; later loads read the cache).
const CALIBRATION_BUDGET_MS: f64 = 1000.0;

/// Sets `engine`'s GPU kernels: `BERTGPU_TUNING=default` keeps the defaults, `BERTGPU_TUNING=SPEC` sets those knobs
/// (e.g. `matmul=tiled:16x16`); otherwise the choice cached for this adapter and model shape is used (the load
/// checked it and runs it already: [`cached`], which read `cache` for it), or, except on a CPU adapter (where the
/// defaults stay), made by calibrating and cached. Returns a line saying which and why, and whether a calibration
/// ran now (nothing on the CPU).
pub(crate) fn apply(engine: &Engine, mut cache: BTreeMap<String, String>) -> Result<Option<(String, bool)>, Fail> {
    let Some(key) = engine.tuning_key() else { return Ok(None) };
    match std::env::var("BERTGPU_TUNING").ok().as_deref() {
        Some("default") => return Ok(Some((format!("{} (the defaults: BERTGPU_TUNING=default)", Tuning::default()), false))),
        Some(spec) => {
            let t = Tuning::parse(spec).map_err(|e| Fail::Model(format!("BERTGPU_TUNING: {e}")))?;
            let t = pollster::block_on(engine.set_tuning(t)).map_err(|e| Fail::Model(format!("BERTGPU_TUNING: {e}")))?;
            return Ok(Some((format!("{} (BERTGPU_TUNING)", t.unwrap_or_default()), false)));
        }
        None => {}
    }
    let file = cache_file();
    // The cached choice, or how far an earlier calibration cut short by its budget got (it resumes there).
    let cached = cache.get(&key).and_then(|text| Progress::parse(text).ok());
    if !engine.worth_calibrating() {
        let t = engine.tuning().unwrap_or_default();
        // Nothing is calibrated or cached here unasked; a choice cached all the same ran from the load, checked.
        if cached.is_some_and(|p| engine.runs_tuning(p.tuning)) {
            return Ok(Some((format!("{t} (cached for this adapter; cache {})", shown(&file)), false)));
        }
        return Ok(Some((format!("{t} (the defaults: a CPU adapter, where they measure fastest)"), false)));
    }
    let mut resume = None;
    if let Some(p) = cached {
        // The load set and checked it already ([`cached`]), unless it failed the check there.
        let set = if engine.runs_tuning(p.tuning) {
            Ok(engine.tuning())
        } else {
            pollster::block_on(engine.set_tuning(p.tuning))
        };
        match set {
            Ok(t) if p.is_complete() => {
                let t = t.unwrap_or_default();
                return Ok(Some((format!("{t} (calibrated earlier on this adapter; cache {})", shown(&file)), false)));
            }
            Ok(_) => resume = Some(p),
            // A cached choice that fails the load-time check now (a new driver): calibrate again.
            Err(e) => eprintln!("bertgpu: {e}"),
        }
    }
    // A calibration that fails (its choice failing the load-time check included) leaves the kernels that passed
    // that check at load: the command goes on with them.
    let c = match pollster::block_on(engine.calibrate_from(CALIBRATION_BUDGET_MS, resume)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bertgpu: GPU calibration failed, the kernels in place run: {e}");
            return Ok(None);
        }
    };
    let Some(c) = c else { return Ok(None) };
    // Kept even when cut short by its budget: the next load resumes from it.
    cache.insert(key, c.progress.to_string());
    if let Some(f) = &file {
        if let Err(e) = write_cache(f, &cache) {
            eprintln!("bertgpu: could not save the GPU calibration to {}: {e}", f.display());
        }
    }
    Ok(Some((format!("{c}; cache {}", shown(&file)), true)))
}

/// The kernels' choices cached by earlier runs, for the load to check and run from the start
/// ([`bertgpu::engine::Placement::tunings`]); none where `BERTGPU_TUNING` decides the kernels ([`apply`]).
pub(crate) fn cached() -> BTreeMap<String, String> {
    if std::env::var_os("BERTGPU_TUNING").is_some() {
        return BTreeMap::new();
    }
    cache_file().as_ref().map(read_cache).unwrap_or_default()
}

/// How long the crossover's measurement may take at load ([`bertgpu::engine::crossover::measure`]).
const CROSSOVER_BUDGET_MS: f64 = 1000.0;

/// `--crossover` on a GPU: the CPU copy for short calls ([`Engine::add_cpu_twin`]), with the crossover cached for
/// this adapter, model shape and number of CPU threads beside the kernels' tuning, or measured and cached. Returns
/// the line saying it (nothing on the CPU).
pub(crate) fn crossover(engine: &Engine, weights: &Weights) -> Result<Option<String>, Fail> {
    let Some(key) = engine.tuning_key() else { return Ok(None) };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let key = format!("{key};crossover;cpu-threads={threads}");
    let fail = |e: bertgpu::Error| Fail::Model(format!("--crossover: {e}"));
    let file = cache_file();
    let mut cache = file.as_ref().map(read_cache).unwrap_or_default();
    if let Some(max_tokens) = cache.get(&key).and_then(|t| t.parse().ok()) {
        let c = Crossover { max_tokens, points: vec![] };
        engine.set_cpu_twin(weights, c.clone()).map_err(fail)?;
        return Ok(Some(format!("{c} (measured earlier on this adapter; cache {})", shown(&file))));
    }
    let Some(c) = pollster::block_on(engine.add_cpu_twin(weights, CROSSOVER_BUDGET_MS)).map_err(fail)? else {
        return Ok(None);
    };
    cache.insert(key, c.max_tokens.to_string());
    if let Some(f) = &file {
        if let Err(e) = write_cache(f, &cache) {
            eprintln!("bertgpu: could not save the crossover to {}: {e}", f.display());
        }
    }
    Ok(Some(format!("{c}; cache {}", shown(&file))))
}

fn shown(file: &Option<PathBuf>) -> String {
    file.as_ref().map_or("none (no home or cache directory)".into(), |f| f.display().to_string())
}

/// `$BERTGPU_CACHE_DIR/tuning.json`, else under `$XDG_CACHE_HOME/bertgpu` or `~/.cache/bertgpu`.
fn cache_file() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = env("BERTGPU_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("bertgpu")))
        .or_else(|| env("HOME").map(|d| d.join(".cache/bertgpu")))?;
    Some(dir.join("tuning.json"))
}

/// The cache: {key: tuning}. A missing, unreadable or damaged file is an empty cache (it is only a cache).
fn read_cache(file: &PathBuf) -> BTreeMap<String, String> {
    std::fs::read(file).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// Written to a temporary file and renamed, so a reader never sees half of it.
fn write_cache(file: &PathBuf, cache: &BTreeMap<String, String>) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension(format!("json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(cache).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, file)
}
