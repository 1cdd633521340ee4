//! Soak: many sequential `embed` calls on one loaded model must not grow memory. Measured after a warm-up (which
//! fills the allocator's free lists and the GPU buffer pool with every size the calls need) and again at the end:
//! the process's resident set (`/proc/self/statm`) and, on the GPU, the bytes of buffers the pool has ever created.
//!
//! The inputs cycle through texts of 1 to ~60 tokens in batches of 1 to 4, so the calls need many different
//! buffer sizes, as real traffic does. CI runs a reduced count; the long run is
//! `BERTGPU_SOAK_CALLS=100000 BERTGPU_SOAK_GPU_CALLS=10000 cargo test --test soak -- --nocapture --test-threads 1`.

mod common;

use std::path::Path;

use bertgpu::engine::{Device, Engine};

use bertgpu::tasks::{EmbedOptions, Pooling};

/// Calls after the warm-up, unless the environment says otherwise.
const CPU_CALLS: usize = 2_000;
const GPU_CALLS: usize = 500;
/// Warm-up calls: enough to see every (text, batch) combination of the cycle below several times.
const WARMUP: usize = 200;
/// Allowed growth of the resident set over the measured calls. A leak of even 256 bytes per call would exceed it
/// after 2,000 calls; what remains is the allocator's noise (freed pages it keeps or returns, measured at a few
/// hundred KB here).
const RSS_SLACK_BYTES: u64 = 512 << 10;

/// RSS is the whole process's: the two tests take turns, or one's allocations would show in the other's numbers.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The call count from `var`, or `default` when it is unset. Zero or anything but a whole number is refused: either
/// would turn the soak into a test of nothing that still reports "ok".
fn calls(var: &str, default: usize) -> usize {
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => default,
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => panic!("{var} must be a whole number of calls ≥ 1 (unset: {default}); got {v:?}"),
        },
        Err(e) => panic!("{var}: {e}"),
    }
}

/// Resident set size in bytes: field 2 of `/proc/self/statm` is in pages (4 KiB on x86-64 Linux).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm (Linux)");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("statm's resident field");
    pages * 4096
}

/// The texts of the cycle: 1 to ~60 tokens of the tiny model (its limit is 64).
fn texts() -> Vec<String> {
    let words = ["the", "cat", "sat", "on", "a", "mat", "and", "looked", "at", "the", "dog", "outside", "again"];
    (0..16).map(|i| (0..1 + i * 4).map(|j| words[(i + j) % words.len()]).collect::<Vec<_>>().join(" ")).collect()
}

/// Runs `n` calls after the warm-up; returns (calls, RSS before, RSS after, seconds).
fn soak(engine: &Engine, n: usize, mut each: impl FnMut(usize)) -> (u64, u64, f64) {
    let texts = texts();
    let opts = EmbedOptions { pooling: Some(Pooling::Mean), normalize: Some(true), batch_size: 4, ..EmbedOptions::default() };
    let call = |i: usize| {
        let k = i % texts.len();
        let batch: Vec<&str> = texts.iter().cycle().skip(k).take(1 + i % 4).map(String::as_str).collect();
        let v = pollster::block_on(engine.embed(&batch, &opts)).expect("embed");
        assert_eq!(v.len(), batch.len());
        assert!(v.iter().all(|e| e.len() == 32 && e.iter().all(|x| x.is_finite())));
    };
    for i in 0..WARMUP {
        call(i);
    }
    each(0);
    let before = rss_bytes();
    let start = std::time::Instant::now();
    for i in 0..n {
        call(WARMUP + i);
    }
    let secs = start.elapsed().as_secs_f64();
    each(n);
    (before, rss_bytes(), secs)
}

fn model() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/tiny-classifier")
}

#[test]
fn cpu_embed_calls_keep_memory_flat() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let engine = pollster::block_on(Engine::from_dir(model(), Device::Cpu)).unwrap();
    let n = calls("BERTGPU_SOAK_CALLS", CPU_CALLS);
    let (before, after, secs) = soak(&engine, n, |_| {});
    let grew = after as i64 - before as i64;
    eprintln!("soak cpu: {n} calls in {secs:.1} s; RSS {before} → {after} bytes ({grew:+})");
    assert!(after <= before + RSS_SLACK_BYTES, "RSS grew by {grew} bytes over {n} calls");
}

#[test]
fn gpu_embed_calls_keep_memory_flat() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let n = calls("BERTGPU_SOAK_GPU_CALLS", GPU_CALLS);
    let Some(_) = common::gpu() else { return };
    let engine = pollster::block_on(Engine::from_dir(model(), Device::Gpu)).unwrap();
    let Engine::Gpu(m) = &engine else { unreachable!("Device::Gpu gives a GPU engine") };
    let mut pool = Vec::new();
    let (before, after, secs) = soak(&engine, n, |_| pool.push(m.backend.pool_stats()));
    let grew = after as i64 - before as i64;
    eprintln!(
        "soak gpu: {n} calls in {secs:.1} s; RSS {before} → {after} bytes ({grew:+}); pool buffers/bytes {:?} → {:?}",
        pool[0], pool[1]
    );
    assert_eq!(pool[0], pool[1], "the buffer pool grew after the warm-up: (buffers, bytes) before and after");
    assert!(after <= before + RSS_SLACK_BYTES, "RSS grew by {grew} bytes over {n} calls");
}
