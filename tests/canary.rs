//! The canary at load (src/engine/canary.rs): a healthy GPU passes it on every family and weight dtype; a GPU
//! whose linears return wrong values (`GpuBackend::inject_fault`, as a miscompiled kernel would) fails it, and then
//! `Device::Auto` runs the model on the CPU, saying which adapter disagreed and by how much, while `Device::Gpu`
//! refuses to load. The CPU reference it computes layer by layer equals the CPU model's forward bit for bit.
//!
//! Skips (saying why) only when there is no GPU adapter; the CPU-only tests always run.

#![cfg(not(target_arch = "wasm32"))]

use std::path::{Path, PathBuf};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::gpu::GpuBackend;
use bertgpu::backend::Backend;
use bertgpu::dtype::Dtype;
use bertgpu::engine::canary;
use bertgpu::engine::{Device, Engine, Placement};
use bertgpu::loader::{self, LoadOptions, LoadedModel, ModelSource};
use bertgpu::model::BertModel;
use bertgpu::tasks::{EmbedOptions, Model};
use bertgpu::weights::{gguf, Weights};

mod common;
use common::gpu;

/// The injected fault must fail the check by this factor at least: a check that a wrong kernel only just trips
/// would miss a milder one. (Measured on lavapipe: see the fault test's output.)
const FAULT_MARGIN: f32 = 10.0;
/// A healthy GPU must pass with this much to spare: the tolerance is set for deeper models and looser hardware
/// arithmetic than lavapipe's, so lavapipe on these models must be far inside it.
const HEALTHY_MARGIN: f32 = 10.0;
/// The same in the f16-activation mode, whose own rounding is the larger part of its tolerance (measured on
/// llvmpipe: up to 7.6e-3 against a tolerance of 1.6e-2, on the random tiny DistilBERT; 2.3e-3 on the real
/// checkpoints).
const F16_HEALTHY_MARGIN: f32 = 1.5;

fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(name)
}

fn real(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name);
    assert!(dir.join("model.safetensors").exists(), "{} missing: run scripts/fetch-models.sh", dir.display());
    dir
}

/// Every family's tiny checkpoint (ALBERT's shared layer, ELECTRA's and ALBERT's projection, RoBERTa's positions)
/// and the real MiniLM and splade-tiny.
fn folders() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = ["tiny-classifier", "tiny-albert-mlm", "tiny-electra-discriminator",
        "tiny-distilbert-classifier", "tiny-roberta-classifier", "tiny-xlmr-model"].iter().map(|n| tiny(n)).collect();
    v.push(real("all-MiniLM-L6-v2"));
    v.push(real("splade-tiny"));
    v
}

fn load_dir(dir: &Path) -> LoadedModel {
    loader::load(ModelSource::Path(dir), &LoadOptions::default()).unwrap()
}

/// MiniLM through `convert` in each stored dtype: both backends decode the same f16 / Q8_0 / Q4_0 values.
fn quantized() -> Vec<(Dtype, Vec<u8>)> {
    [Dtype::F16, Dtype::Q8_0, Dtype::Q4_0].into_iter().map(|dtype| {
        let out = std::env::temp_dir().join(format!("bertgpu-canary-{dtype:?}-{}.gguf", std::process::id()));
        gguf::convert(&real("all-MiniLM-L6-v2"), dtype, &out).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        std::fs::remove_file(&out).unwrap();
        (dtype, bytes)
    }).collect()
}

/// The check on `m` with a fresh backend `g`, faulty or not.
fn check(m: &LoadedModel, g: GpuBackend, fault: bool) -> canary::Canary {
    g.inject_fault(fault);
    let w = m.weights().unwrap();
    let model = Model::new(g, m.config.clone(), m.tokenizer.clone(), &w).unwrap();
    let start = std::time::Instant::now();
    let c = pollster::block_on(canary::check(&model, &w)).unwrap();
    eprintln!("{:?} (fault {fault}): {c} [{} values, {:.1} ms]", m.config.family, c.compared,
        start.elapsed().as_secs_f64() * 1e3);
    c
}

fn both_ways(what: &str, m: &LoadedModel) {
    let Some(g) = gpu() else { return };
    let healthy = check(m, g, false);
    assert!(healthy.passed(), "{what}: a healthy GPU failed the canary: {healthy}");
    assert!(healthy.err * HEALTHY_MARGIN <= healthy.tol, "{what}: too close to the tolerance: {healthy}");
    assert!(healthy.compared > 0);
    let Some(g) = gpu() else { return };
    let faulty = check(m, g, true);
    assert!(!faulty.passed(), "{what}: a faulty GPU passed the canary: {faulty}");
    assert!(faulty.err >= FAULT_MARGIN * faulty.tol, "{what}: the fault is caught by too small a margin: {faulty}");
}

#[test]
fn the_canary_passes_a_healthy_gpu_and_catches_a_wrong_kernel_on_every_family() {
    for dir in folders() {
        both_ways(&dir.display().to_string(), &load_dir(&dir));
    }
}

/// Stored f16 / Q8_0 / Q4_0 weights must not trip the check: both sides decode the same stored values.
#[test]
fn the_canary_compares_like_with_like_on_quantized_weights() {
    if gpu().is_none() {
        return;
    }
    for (dtype, bytes) in quantized() {
        let m = loader::load(ModelSource::Gguf(&bytes), &LoadOptions::default()).unwrap();
        both_ways(&format!("MiniLM {dtype:?}"), &m);
    }
}

fn embed(e: &Engine) -> Vec<Vec<f32>> {
    let texts = ["a faulty GPU", "falls back to the CPU", "with the same answers"];
    pollster::block_on(e.embed(&texts, &EmbedOptions { normalize: Some(true), ..EmbedOptions::default() })).unwrap()
}

fn place(dir: &Path, placement: Placement) -> bertgpu::Result<Engine> {
    let m = load_dir(dir);
    let w = m.weights().unwrap();
    pollster::block_on(Engine::place(m.config, m.tokenizer, &w, placement, CpuBackend::new()))
}

#[test]
fn auto_falls_back_to_the_cpu_when_the_gpu_disagrees_and_says_why() {
    let Some(g) = gpu() else { return };
    let dir = real("all-MiniLM-L6-v2");
    let adapter = g.gpu().info.name.clone();
    g.inject_fault(true);
    let e = place(&dir, Placement::on(Device::Auto, g)).unwrap();
    assert_eq!(e.device(), "cpu", "a GPU that failed the canary must not be used");
    let reason = e.device_reason().expect("the fallback says why");
    eprintln!("{reason}");
    for part in [adapter.as_str(), "disagrees with the CPU backend", "tolerance", "running on the CPU"] {
        assert!(reason.contains(part), "the reason must name {part:?}: {reason}");
    }
    // The fallback is the CPU backend on the same weights: the same vectors bit for bit.
    let cpu = pollster::block_on(Engine::from_dir(&dir, Device::Cpu)).unwrap();
    assert_eq!(cpu.device_reason(), None, "the CPU was asked for: nothing to explain");
    assert_eq!(embed(&e), embed(&cpu));
}

#[test]
fn auto_keeps_a_healthy_gpu() {
    let Some(g) = gpu() else { return };
    let e = place(&tiny("tiny-classifier"), Placement::on(Device::Auto, g)).unwrap();
    assert_eq!(e.device(), "gpu");
    assert_eq!(e.device_reason(), None);
}

/// New kernels (a calibration's choice, a cached one) are checked before they are used: every variant passes on a
/// healthy GPU, and a wrong one is refused with the kernels left as they were.
#[test]
fn changed_kernels_pass_the_check_again_or_are_refused() {
    use bertgpu::backend::gpu::{matmul_candidates, AttentionKernel, Tuning};
    let Some(g) = gpu() else { return };
    let variants = matmul_candidates(g.gpu());
    let e = place(&tiny("tiny-classifier"), Placement::on(Device::Gpu, g)).unwrap();
    let Engine::Gpu(m) = &e else { panic!("on the GPU") };
    let attention = [AttentionKernel::Fixed, AttentionKernel::Split, AttentionKernel::SplitSubgroup]
        .map(|attention| Tuning { attention, ..Tuning::default() });
    for t in variants.into_iter().chain(attention) {
        assert_eq!(pollster::block_on(e.set_tuning(t)).unwrap(), Some(t), "{t} passes on a healthy GPU");
    }
    let before = e.tuning().unwrap();
    m.backend.inject_fault(true);
    let err = pollster::block_on(e.set_tuning(Tuning::default())).unwrap_err().to_string();
    m.backend.inject_fault(false);
    assert!(err.contains("fail the load-time check") && err.contains("disagrees"), "{err}");
    assert_eq!(e.tuning(), Some(before), "the kernels stay as they were");
}

/// A load given the kernels' choice an earlier one cached for this adapter and model shape (the CLI's tuning.json,
/// the browser's IndexedDB) checks it and runs it from the start, building none of the defaults' pipelines; a
/// cached choice that fails the check (a kernel the driver miscompiles) is dropped for the defaults, checked in
/// turn, and the model stays on the GPU; an entry that does not parse, or is cached under another key, is ignored.
#[test]
fn a_load_checks_and_runs_the_cached_kernels_or_drops_them_when_they_fail() {
    use bertgpu::backend::gpu::{MatmulKernel, MatmulVariant, Tuning};
    use std::collections::BTreeMap;
    let dir = real("all-MiniLM-L6-v2");
    let Some(g) = gpu() else { return };
    let key = place(&dir, Placement::on(Device::Gpu, g)).unwrap().tuning_key().expect("a GPU model has a key");
    // Two matmuls that differ from the defaults and from each other, so the load checks both.
    let cached = Tuning {
        matmul: MatmulVariant { kernel: MatmulKernel::Tiled, wg: (8, 8) },
        small_matmul: MatmulVariant { kernel: MatmulKernel::Wide, wg: (8, 8) },
        ..Tuning::default()
    };
    let with = |text: &str| BTreeMap::from([(key.clone(), text.to_string())]);
    let cpu = pollster::block_on(Engine::from_dir(&dir, Device::Cpu)).unwrap();
    let want = embed(&cpu);

    let Some(g) = gpu() else { return };
    let defaults = g.tuning();
    let e = place(&dir, Placement::on(Device::Gpu, g).with_tunings(with(&format!("{cached};stages=2")))).unwrap();
    assert!(e.runs_tuning(cached), "the cached choice runs: {:?}", e.tuning());
    let Engine::Gpu(m) = &e else { panic!("on the GPU") };
    let built = canary::pipelines(m).unwrap();
    assert!(built.is_empty(), "the cached kernels' first-call pipelines were built at load: {built:?} were not");
    m.backend.set_tuning(defaults);
    assert!(!canary::pipelines(m).unwrap().is_empty(), "the defaults' pipelines were built too");
    m.backend.set_tuning(cached);
    let got = embed(&e);
    assert_eq!(got.len(), want.len(), "one vector per text");
    for (a, b) in got.iter().zip(&want) {
        assert!(common::cosine(a, b) > 0.99999, "the cached kernels' embeddings against the CPU's");
    }

    // The small-product kernel miscompiled: the cached choice fails its first check, the defaults pass theirs.
    let Some(g) = gpu() else { return };
    g.inject_fault_in(MatmulKernel::Wide);
    let e = place(&dir, Placement::on(Device::Gpu, g).with_tunings(with(&cached.to_string()))).unwrap();
    assert_eq!((e.device(), e.tuning()), ("gpu", Some(defaults)), "a failing cached choice gives the defaults");
    assert!(!e.runs_tuning(cached));
    // The large-product one: the cached choice fails its second check.
    let Some(g) = gpu() else { return };
    g.inject_fault_in(MatmulKernel::Tiled);
    let e = place(&dir, Placement::on(Device::Gpu, g).with_tunings(with(&cached.to_string()))).unwrap();
    assert_eq!((e.device(), e.tuning()), ("gpu", Some(defaults)));

    for tunings in [with("matmul=bogus:1x1"), BTreeMap::from([(format!("{key} (another shape)"), cached.to_string())])] {
        let Some(g) = gpu() else { return };
        let e = place(&dir, Placement::on(Device::Gpu, g).with_tunings(tunings)).unwrap();
        assert_eq!(e.tuning(), Some(defaults), "ignored: the defaults run");
    }
}

#[test]
fn an_explicit_gpu_that_disagrees_refuses_to_load() {
    let Some(g) = gpu() else { return };
    let adapter = g.gpu().info.name.clone();
    g.inject_fault(true);
    let err = match place(&tiny("tiny-classifier"), Placement::on(Device::Gpu, g)) {
        Ok(e) => panic!("a faulty GPU was accepted on {}", e.device()),
        Err(e) => e.to_string(),
    };
    for part in [adapter.as_str(), "disagrees with the CPU backend", "device auto", "cpu"] {
        assert!(err.contains(part), "the error must name {part:?}: {err}");
    }
}

/// `Device::Auto` through the public entry: on a software adapter (lavapipe here) or none, the CPU, saying why; on a
/// hardware adapter, the GPU with no reason (nothing is skipped on either).
#[test]
fn auto_on_a_software_adapter_or_none_says_why() {
    let e = pollster::block_on(Engine::from_dir(tiny("tiny-classifier"), Device::Auto)).unwrap();
    let software = match GpuBackend::new_blocking() {
        Ok(g) => g.gpu().info.device_type == wgpu::DeviceType::Cpu,
        Err(_) => true,
    };
    if !software {
        assert_eq!(e.device(), "gpu", "auto on a hardware adapter: {:?}", e.device_reason());
        assert_eq!(e.device_reason(), None);
        return;
    }
    assert_eq!(e.device(), "cpu");
    let reason = e.device_reason().expect("auto says why it took the CPU");
    assert!(reason.contains("software renderer") || reason.contains("no GPU adapter"), "{reason}");
}

/// The CPU reference loaded a layer at a time computes what the CPU model computes, on every family.
#[test]
fn the_streamed_reference_equals_the_loaded_model() {
    let cpu = CpuBackend::reference();
    for dir in folders() {
        let m = load_dir(&dir);
        let w = m.weights().unwrap();
        let e = m.tokenizer.encode("streamed layer by layer", Some("the same")).unwrap();
        let batch = m.tokenizer.batch(&[e]);
        let whole = BertModel::load(&w, &m.config, &cpu).unwrap().forward(&cpu, &batch).unwrap();
        let as_is = async |w: &Weights, _: &str| Ok(w.clone());
        let streamed = pollster::block_on(BertModel::forward_streamed(&w, &m.config, &cpu, &batch, as_is)).unwrap();
        let (a, b) = (pollster::block_on(cpu.read(&whole)).unwrap(), pollster::block_on(cpu.read(&streamed)).unwrap());
        assert_eq!(a, b, "{}", dir.display());
    }
}

/// The f16-activation mode is checked when it is turned on, to its own tolerance: it passes on every family with
/// room to spare, the fault is still caught, and a failing check leaves f32 on. Training
/// refuses the mode, naming it.
#[test]
fn f16_activations_pass_the_check_or_are_refused_and_training_refuses_them() {
    for dir in folders() {
        let Some(g) = gpu() else { return };
        g.set_f16_activations(true);
        let m = load_dir(&dir);
        let healthy = check(&m, g, false);
        assert!(healthy.passed() && healthy.err * F16_HEALTHY_MARGIN <= healthy.tol, "{}: f16 {healthy}", dir.display());
        let Some(g) = gpu() else { return };
        g.set_f16_activations(true);
        let faulty = check(&m, g, true);
        assert!(!faulty.passed(), "{}: a faulty GPU passed the f16 canary: {faulty}", dir.display());
    }
    let Some(g) = gpu() else { return };
    let e = place(&real("all-MiniLM-L6-v2"), Placement::on(Device::Gpu, g)).unwrap();
    let f32_vectors = embed(&e);
    assert!(pollster::block_on(e.set_f16_activations(true)).unwrap());
    assert!(e.f16_activations());
    let f16_vectors = embed(&e);
    assert_eq!(f16_vectors.len(), f32_vectors.len(), "one vector per text");
    for (a, b) in f16_vectors.iter().zip(&f32_vectors) {
        assert!(common::cosine(a, b) > 0.99999, "f16 against f32 embeddings");
    }
    let err = pollster::block_on(e.train_head(&[], &Default::default(), |_| {})).unwrap_err().to_string();
    assert!(err.contains("f16 activations") && err.contains("inference only"), "{err}");
    let Engine::Gpu(m) = &e else { panic!("on the GPU") };
    m.backend.inject_fault(true);
    assert!(pollster::block_on(e.set_f16_activations(false)).is_err(), "a faulty kernel fails the check either way");
    m.backend.inject_fault(false);
    assert!(e.f16_activations(), "a failed check leaves the mode as it was");
    let cpu = pollster::block_on(Engine::from_dir(real("all-MiniLM-L6-v2"), Device::Cpu)).unwrap();
    assert!(!pollster::block_on(cpu.set_f16_activations(true)).unwrap(), "the CPU computes in f32");
}
