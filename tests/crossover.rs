//! The CPU or the GPU per call (src/engine/crossover.rs): with a CPU copy of a GPU model, calls up to the crossover
//! run on the copy and give the CPU model's results bit for bit, longer ones give the GPU's bit for bit; the measured
//! crossover follows its rule and keeps the copy only where the CPU wins; the CLI's `--crossover` says what it found.
//!
//! Skips (saying why) only when there is no GPU adapter; the CPU-only tests always run.

#![cfg(not(target_arch = "wasm32"))]

use std::path::{Path, PathBuf};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::engine::crossover::{most_tokens, of_length, Crossover, LENGTHS};
use bertgpu::engine::{Device, Engine, Placement};
use bertgpu::loader::{self, LoadOptions, LoadedModel, ModelSource};
use bertgpu::tasks::EmbedOptions;

mod common;
use common::gpu;

/// How long the measurement may take in these tests: tiny models on lavapipe take a few ms a call.
const BUDGET_MS: f64 = 5000.0;

fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(name)
}

fn load(name: &str) -> LoadedModel {
    loader::load(ModelSource::Path(&tiny(name)), &LoadOptions::default()).unwrap()
}

fn engine(m: &LoadedModel, placement: Placement) -> Engine {
    let w = m.weights().unwrap();
    pollster::block_on(Engine::place(m.config.clone(), m.tokenizer.clone(), &w, placement, CpuBackend::new())).unwrap()
}

const SHORT: &str = "the cat sat on the mat";

fn long() -> String {
    "a sentence long enough to pass the crossover set in the test, ".repeat(4)
}

#[test]
fn short_calls_run_on_the_cpu_copy_and_give_its_results() {
    let Some(g) = gpu() else { return };
    let m = load("tiny-pretraining");
    let cpu = engine(&m, Placement { device: Device::Cpu, gpu: None, reason: None, tunings: Default::default() });
    let e = engine(&m, Placement::on(Device::Gpu, g));
    let opts = EmbedOptions::default();
    let long = long();
    let embed = |e: &Engine, t: &str| pollster::block_on(e.embed(&[t], &opts)).unwrap();
    let gpu_long = embed(&e, &long);
    let gpu_short = embed(&e, SHORT);
    assert_eq!(e.last_call_device(), "gpu");

    let short_tokens = m.tokenizer.encode(SHORT, None).unwrap().len();
    assert!(m.tokenizer.encode(&long, None).unwrap().len() > 2 * short_tokens);
    e.set_cpu_twin(&m.weights().unwrap(), Crossover { max_tokens: short_tokens, points: vec![] }).unwrap();
    assert_eq!(e.crossover().map(|c| c.max_tokens), Some(short_tokens));
    assert_eq!(e.device(), "gpu", "the model stays on the GPU");

    let routed_short = embed(&e, SHORT);
    assert_eq!(e.last_call_device(), "cpu", "a call of {short_tokens} tokens goes to the CPU copy");
    assert_eq!(routed_short, embed(&cpu, SHORT), "the CPU copy gives the CPU model's vector");
    assert_ne!(routed_short, gpu_short, "the GPU's own vector differs in its last bits (else this test shows nothing)");
    assert_eq!(embed(&e, &long), gpu_long, "a longer call gives the GPU's vector");
    assert_eq!(e.last_call_device(), "gpu");
    // Two short texts together are over the crossover: the GPU takes the call.
    pollster::block_on(e.embed(&[SHORT, SHORT], &opts)).unwrap();
    assert_eq!(e.last_call_device(), "gpu");

    // The heads route too, by the bound on their tokens: a short fill-mask call on the CPU, with the CPU's scores.
    let masked = "the [MASK] sat";
    e.set_cpu_twin(&m.weights().unwrap(), Crossover { max_tokens: most_tokens([(masked, None)]), points: vec![] })
        .unwrap();
    let scores = |e: &Engine| {
        let p = pollster::block_on(e.fill_mask(&[masked], 5)).unwrap();
        p[0][0].iter().map(|p| (p.token, p.score)).collect::<Vec<_>>()
    };
    let routed = scores(&e);
    assert_eq!(e.last_call_device(), "cpu");
    assert_eq!(routed, scores(&cpu));

    // A crossover of 0 drops the copy.
    e.set_cpu_twin(&m.weights().unwrap(), Crossover { max_tokens: 0, points: vec![] }).unwrap();
    assert!(e.crossover().is_none());
    assert_eq!(embed(&e, SHORT), gpu_short);
    assert_eq!(e.last_call_device(), "gpu");
}

#[test]
fn the_measured_crossover_keeps_the_copy_only_where_the_cpu_wins() {
    let Some(g) = gpu() else { return };
    let m = load("tiny-classifier");
    let e = engine(&m, Placement::on(Device::Gpu, g));
    let c = pollster::block_on(e.add_cpu_twin(&m.weights().unwrap(), BUDGET_MS)).unwrap().expect("a GPU engine");
    println!("crossover on this adapter: {c}");
    assert!(!c.points.is_empty(), "at least one length is timed");
    for (i, (len, cpu, gpu)) in c.points.iter().enumerate() {
        assert_eq!(*len, LENGTHS[i], "lengths in order from the shortest");
        assert!(*cpu > 0.0 && *gpu > 0.0 && cpu.is_finite() && gpu.is_finite(), "{c}");
    }
    assert_eq!(c, Crossover::from_points(c.points.clone()), "max_tokens follows the rule");
    assert_eq!(e.crossover().is_some(), c.max_tokens > 0, "the copy is kept only where the CPU wins: {c}");
    if c.max_tokens > 0 {
        // A call of exactly max_tokens tokens goes to the CPU; one more token, to the GPU.
        let text = "word ".repeat(c.max_tokens);
        let enc = m.tokenizer.encode(&text, None).unwrap();
        let cut = |n: usize| of_length(&enc, n);
        let opts = EmbedOptions::default();
        pollster::block_on(e.embed_encoded(&[cut(c.max_tokens)], &opts)).unwrap();
        assert_eq!(e.last_call_device(), "cpu");
        if enc.len() > c.max_tokens {
            pollster::block_on(e.embed_encoded(&[cut(c.max_tokens + 1)], &opts)).unwrap();
            assert_eq!(e.last_call_device(), "gpu");
        }
    }
}

#[test]
fn a_cpu_engine_has_nothing_to_choose() {
    let m = load("tiny-classifier");
    let e = engine(&m, Placement { device: Device::Cpu, gpu: None, reason: None, tunings: Default::default() });
    assert_eq!(pollster::block_on(e.add_cpu_twin(&m.weights().unwrap(), BUDGET_MS)).unwrap(), None);
    assert!(e.crossover().is_none());
    assert_eq!(e.last_call_device(), "cpu");
}

#[test]
fn the_crossover_is_the_leading_run_the_cpu_wins() {
    let c = |p: &[(usize, f64, f64)]| Crossover::from_points(p.to_vec()).max_tokens;
    assert_eq!(c(&[]), 0);
    assert_eq!(c(&[(4, 2.0, 1.0), (8, 2.0, 1.5)]), 0, "the GPU ahead from the start");
    assert_eq!(c(&[(4, 1.0, 2.0), (8, 1.5, 2.0), (16, 3.0, 2.0)]), 8);
    assert_eq!(c(&[(4, 1.0, 2.0), (8, 3.0, 2.0), (16, 1.0, 2.0)]), 4, "a later CPU win after a loss is not trusted");
    assert_eq!(c(&[(4, 1.0, 1.0)]), 0, "a tie goes to the GPU");
}

/// The bound the heads route by is never under the tokens the tokenizer makes, for accents, scripts without spaces,
/// characters outside the vocabulary and pairs.
#[test]
fn the_token_bound_is_never_under_the_tokens() {
    let m = load("tiny-pretraining");
    let texts =
        ["Hello world.", "Naïve café owners in Zürich serve crème brûlée.", "東京は日本の首都です", "🙂🙃 ok", "", " "];
    for a in texts {
        let n = m.tokenizer.encode(a, None).unwrap().len();
        assert!(most_tokens([(a, None)]) >= n, "{a:?}: bound {} < {n} tokens", most_tokens([(a, None)]));
        for b in texts {
            let n = m.tokenizer.encode(a, Some(b)).unwrap().len();
            assert!(most_tokens([(a, Some(b))]) >= n, "{a:?} + {b:?}");
        }
    }
}

/// `bertgpu embed --crossover`: measured and cached at the first load, read from the cache at the next.
#[test]
fn the_cli_measures_the_crossover_where_asked_and_caches_it() {
    if gpu().is_none() {
        return;
    }
    let cache = std::env::temp_dir().join(format!("bertgpu-crossover-{}", std::process::id()));
    let model = tiny("tiny-classifier");
    let run = || {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_bertgpu"))
            .args(["embed", "-m", model.to_str().unwrap(), "--device", "gpu", "--crossover"])
            .env("BERTGPU_CACHE_DIR", &cache)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"a cat\nthe dog ran\n").unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
        stderr
    };
    let first = run();
    assert!(first.contains("bertgpu: crossover: ") && first.contains("4: CPU "), "measured: {first}");
    let second = run();
    assert!(second.contains("bertgpu: crossover: ") && second.contains("measured earlier on this adapter"), "{second}");
    let _ = std::fs::remove_dir_all(&cache);
}
