//! Weights written into GPU memory as the file arrives (`WeightStream::place_on_device`, what a GPU load does with a
//! folder natively and with a download in the browser): the host never holds the matrices, and the model they make
//! is the model loaded from host weights, output for output, bit for bit. The load-time check reads them back a
//! module at a time, checked against the hash taken as they arrived; a device that gives back other bytes is an
//! error, and `Device::Auto` falls back to the CPU from the weights read back.
//!
//! Skips (saying why) when there is no GPU adapter.

#![cfg(not(target_arch = "wasm32"))]

use std::path::{Path, PathBuf};

use bertgpu::backend::gpu::GpuBackend;
use bertgpu::backend::cpu::CpuBackend;
use bertgpu::dtype::Dtype;
use bertgpu::engine::{Device, Engine, Placement};
use bertgpu::loader::{self, LoadOptions, ModelSource};
use bertgpu::tasks::EmbedOptions;
use bertgpu::weights::stream::{read_file_to, DeviceSink, Format, Streamed, WeightStream};
use bertgpu::weights::safetensors::{write_f32, F32Tensor};
use bertgpu::weights::{gguf, HostData, Weights};

mod common;
use common::gpu;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn minilm() -> PathBuf {
    let dir = root().join("models/all-MiniLM-L6-v2");
    assert!(dir.join("model.safetensors").exists(), "{} missing: run scripts/fetch-models.sh", dir.display());
    dir
}

const TEXTS: [&str; 3] = ["The quick brown fox jumps over the lazy dog.", "A second, longer sentence to pad the first.", "x"];

fn embed(e: &Engine) -> Vec<Vec<f32>> {
    pollster::block_on(e.embed(&TEXTS, &EmbedOptions::default())).unwrap()
}

/// The safetensors file read in pieces onto `g`.
fn placed_safetensors(path: &Path, g: &GpuBackend) -> Weights {
    match read_file_to(path, Format::Safetensors, Some(g)).unwrap() {
        Streamed::Safetensors(w) => w,
        Streamed::Gguf(_) => panic!("a safetensors read gave a GGUF"),
    }
}

fn count_placed(w: &Weights) -> (usize, usize) {
    let names = w.names();
    let placed = names.iter().filter(|n| matches!(w.stored(n).unwrap().data, HostData::Placed(_))).count();
    (placed, names.len())
}

#[test]
fn a_folder_loaded_on_the_gpu_never_holds_its_matrices_on_the_host_and_is_the_same_model() {
    let Some(g) = gpu() else { return };
    let dir = minilm();
    let m = loader::load(ModelSource::Path(&dir), &LoadOptions::default()).unwrap();
    let host = m.weights().unwrap();
    let placed = placed_safetensors(&dir.join("model.safetensors"), &g);
    let (n_placed, n) = count_placed(&placed);
    // Every matrix but the position table: 6 layers × 6, the word and token-type tables, the pooler.
    assert_eq!(n_placed, 6 * 6 + 3, "{n_placed} of {n} tensors placed");
    // Each layer's q, k and v arrive into one buffer, stacked as the model joins them: it takes that buffer as it is.
    for layer in 0..6 {
        let part = |n: &str| match &placed.stored(&format!("encoder.layer.{layer}.attention.self.{n}.weight")).unwrap().data {
            HostData::Placed(p) => p.clone(),
            other => panic!("{n} not placed: {other:?}"),
        };
        let (q, k, v) = (part("query"), part("key"), part("value"));
        assert!(std::sync::Arc::ptr_eq(&q.handle, &k.handle) && std::sync::Arc::ptr_eq(&q.handle, &v.handle));
        assert_eq!((q.offset, k.offset, v.offset), (0, q.bytes, q.bytes + k.bytes));
    }
    let on = |w: &Weights, g: GpuBackend| {
        pollster::block_on(Engine::place(m.config.clone(), m.tokenizer.clone(), w, Placement::on(Device::Gpu, g), CpuBackend::new()))
            .unwrap()
    };
    let from_host = on(&host, gpu().unwrap());
    let from_file = on(&placed, g);
    assert_eq!(from_file.device(), "gpu");
    assert_eq!(embed(&from_file), embed(&from_host), "the placed weights' model differs from the host weights'");
    // And the engine's own GPU load of a folder places them.
    let e = pollster::block_on(Engine::load(ModelSource::Path(&dir), &LoadOptions::default(), Device::Gpu)).unwrap();
    assert_eq!(embed(&e), embed(&from_host));
}

#[test]
fn quantized_ggufs_streamed_onto_the_gpu_are_the_same_model() {
    let Some(_) = gpu() else { return };
    for dtype in [Dtype::F16, Dtype::Q8_0, Dtype::Q4_0] {
        let out = std::env::temp_dir().join(format!("bertgpu-placed-{dtype:?}-{}.gguf", std::process::id()));
        gguf::convert(&minilm(), dtype, &out).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        // A `.gguf` path: the header read at load, the tensors once the device is known, placed as they are read.
        let by_path = loader::load(ModelSource::Path(&out), &LoadOptions::default()).unwrap();
        let on_gpu = by_path.weights_to(&gpu().unwrap()).unwrap();
        let (path_placed, _) = count_placed(&on_gpu);
        let e = pollster::block_on(Engine::load(ModelSource::Path(&out), &LoadOptions::default(), Device::Gpu)).unwrap();
        let path_embeddings = embed(&e);
        std::fs::remove_file(&out).unwrap();
        let g = gpu().unwrap();
        let mut s = WeightStream::new(Format::Gguf, Some(bytes.len()), bytes.len(), false);
        s.place_on_device();
        for piece in bytes.chunks(65521) {
            s.push_to(piece, Some(&g)).unwrap();
        }
        let Streamed::Gguf(read) = s.finish_to(Some(&g)).unwrap().0 else { panic!("a GGUF stream gave safetensors") };
        let m = loader::load(ModelSource::ReadGguf(read), &LoadOptions::default()).unwrap();
        let w = m.weights().unwrap();
        let (n_placed, n) = count_placed(&w);
        // Q4_0 keeps some attention weights at Q8_0: the q, k, v weights then stay on the host, to be joined there.
        let want = if dtype == Dtype::Q4_0 { 6 * 3 + 2 } else { 6 * 6 + 2 };
        assert!(n_placed >= want, "{dtype:?}: {n_placed} of {n} placed");
        assert_eq!(path_placed, n_placed, "{dtype:?}: a .gguf path places as its download does");
        let placed = pollster::block_on(Engine::place(m.config.clone(), m.tokenizer.clone(), &w,
            Placement::on(Device::Gpu, g), CpuBackend::new())).unwrap();
        let host = pollster::block_on(Engine::load(ModelSource::Gguf(&bytes.as_slice()), &LoadOptions::default(),
            Device::Gpu)).unwrap();
        assert_eq!(embed(&placed), embed(&host), "{dtype:?}");
        assert_eq!(path_embeddings, embed(&host), "{dtype:?}: the .gguf path's engine");
    }
}

#[test]
fn a_gguf_path_changed_between_its_header_and_its_tensors_is_refused() {
    let out = std::env::temp_dir().join(format!("bertgpu-placed-changed-{}.gguf", std::process::id()));
    gguf::convert(&minilm(), Dtype::Q8_0, &out).unwrap();
    let m = loader::load(ModelSource::Path(&out), &LoadOptions::default()).unwrap();
    // The same model in another dtype: the same config, other tensor entries.
    gguf::convert(&minilm(), Dtype::F16, &out).unwrap();
    let err = m.weights().err().expect("a changed file was read").to_string();
    std::fs::remove_file(&out).unwrap();
    assert!(err.contains("changed while the model was loading"), "{err}");
}

#[test]
fn a_device_that_gives_back_other_bytes_is_caught() {
    let Some(g) = gpu() else { return };
    let w = placed_safetensors(&minilm().join("model.safetensors"), &g);
    let name = "encoder.layer.2.intermediate.dense.weight";
    let t = w.stored(name).unwrap().clone();
    let HostData::Placed(p) = &t.data else { panic!("{name} was not placed") };
    // Read back whole, and by rows: the file's values.
    let file = Weights::from_safetensors_file(minilm().join("model.safetensors")).unwrap();
    assert!(pollster::block_on(g.host_copy(&t)).unwrap() == *file.stored(name).unwrap());
    let rows = pollster::block_on(g.host_rows(&t, &[5, 0, 5])).unwrap();
    assert!(rows == file.stored(name).unwrap().gather_rows(&[5, 0, 5]).unwrap());
    // A weight that shares its buffer from an offset: the value weight, after the query's and the key's rows.
    let value = "encoder.layer.1.attention.self.value.weight";
    let vt = w.stored(value).unwrap();
    assert!(matches!(&vt.data, HostData::Placed(p) if p.offset > 0));
    assert!(pollster::block_on(g.host_copy(vt)).unwrap() == *file.stored(value).unwrap());
    let rows = pollster::block_on(g.host_rows(vt, &[383, 1])).unwrap();
    assert!(rows == file.stored(value).unwrap().gather_rows(&[383, 1]).unwrap());
    // One word changed behind the stream's back.
    g.write(&*p.handle, 1024, &[1, 2, 3, 4]).unwrap();
    for e in [pollster::block_on(g.host_copy(&t)).unwrap_err(), pollster::block_on(g.host_rows(&t, &[0])).unwrap_err()] {
        assert!(e.to_string().contains("other bytes than were written"), "{e}");
    }
}

#[test]
fn auto_on_a_faulty_gpu_runs_the_placed_weights_on_the_cpu() {
    let Some(g) = gpu() else { return };
    let dir = minilm();
    let m = loader::load(ModelSource::Path(&dir), &LoadOptions::default()).unwrap();
    let w = placed_safetensors(&dir.join("model.safetensors"), &g);
    g.inject_fault(true);
    let e = pollster::block_on(Engine::place(m.config.clone(), m.tokenizer.clone(), &w, Placement::on(Device::Auto, g),
        CpuBackend::new())).unwrap();
    assert_eq!(e.device(), "cpu");
    assert!(e.device_reason().is_some_and(|r| r.contains("running on the CPU instead")), "{:?}", e.device_reason());
    let cpu = pollster::block_on(Engine::load(ModelSource::Path(&dir), &LoadOptions::default(), Device::Cpu)).unwrap();
    assert_eq!(embed(&e), embed(&cpu), "the weights read back are not the file's");
}

#[test]
fn a_nan_in_a_placed_weight_is_refused_at_load_as_on_the_host() {
    let Some(g) = gpu() else { return };
    let dir = root().join("tests/models/tiny-classifier");
    let m = loader::load(ModelSource::Path(&dir), &LoadOptions::default()).unwrap();
    let w = m.weights().unwrap();
    let names = w.names();
    let target = names.iter().find(|n| n.ends_with("layer.0.intermediate.dense.weight")).unwrap().to_string();
    let values: Vec<(String, Vec<usize>, Vec<f32>)> = names
        .iter()
        .map(|n| {
            let t = w.stored(n).unwrap();
            let mut v = t.to_f32().unwrap();
            if *n == target {
                v[7] = f32::NAN;
            }
            (n.to_string(), t.shape.clone(), v)
        })
        .collect();
    let tensors: Vec<F32Tensor<'_>> =
        values.iter().map(|(name, shape, v)| F32Tensor { name: name.clone(), shape: shape.clone(), values: v }).collect();
    let file = std::env::temp_dir().join(format!("bertgpu-placed-nan-{}.safetensors", std::process::id()));
    std::fs::write(&file, write_f32(&tensors, &Default::default()).unwrap()).unwrap();
    let placed = placed_safetensors(&file, &g);
    std::fs::remove_file(&file).unwrap();
    assert!(matches!(placed.stored(&target).unwrap().data, HostData::Placed(_)));
    let err = pollster::block_on(Engine::place(m.config.clone(), m.tokenizer.clone(), &placed,
        Placement::on(Device::Gpu, g), CpuBackend::new())).err().expect("a NaN weight loaded").to_string();
    assert!(err.contains(&target) && err.contains("NaN") && err.contains("value 7"), "{err}");
}
