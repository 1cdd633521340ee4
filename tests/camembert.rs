//! CamemBERT and sharded checkpoints against PyTorch `transformers` (tests/golden/camembert.json, made by
//! tests/golden/camembert.py from the tiny seeded checkpoints tests/models/tiny-camembert-*): CamemBERT's tokenizer
//! (SentencePiece Unigram, `<s>` and `</s>` at ids 5 and 6 as camembert-base's), embeddings, fill-mask, sequence
//! classification (pairs), token classification and QA on the CPU and the GPU backend, through a GGUF that `convert`
//! wrote and through the CLI; the same masked LM saved in shards (`model.safetensors.index.json`) loaded from its
//! folder, converted, and refused by name where the shards and the index disagree; a folder with only a
//! `pytorch_model.bin` that is not a checkpoint refused, naming it (tests/torch_bin.rs reads real ones).

mod common;

use std::path::{Path, PathBuf};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::Family;
use bertgpu::dtype::Dtype;
use bertgpu::loader::{self, LoadOptions, ModelSource};
use bertgpu::tasks::Model;
use bertgpu::weights::gguf;
use common::family::{self, dir};
use common::gpu;
use serde_json::Value;

/// The CPU backend on f32 weights. Measured worst |ours − torch| here: 4.7e-6 (token logits; fill-mask 2.6e-6,
/// the sharded folder's and the GGUF's the same as the single file's), printed by `cargo test --test camembert --
/// --nocapture`; 2.5e-5 is ~5× that, and far below what a mistake moves (positions from 0 instead of
/// pad_token_id + 1: over 1e-2, tests/roberta.rs's `wrong_positions_are_caught`).
const CPU_ATOL: f32 = 2.5e-5;
/// The GPU. Measured worst on lavapipe here: 3.3e-6 (classifier logits); 2.5e-5 is ~7.5× that (real GPUs' erf,
/// exp and tanh differ from lavapipe's by a few ulps per layer).
const GPU_ATOL: f32 = 2.5e-5;
/// The fill-mask goldens' smallest score gap is 6.8e-4 (the script prints them), far above twice SCORE_TOL: the
/// order of every prediction must match. (QA's near-tied spans are handled by `family::answer`.)
const NEAR_TIES: bool = false;

fn golden() -> Value {
    family::golden("camembert.json")
}

fn load<B: Backend>(d: &Path, backend: B) -> Model<B> {
    let m = family::load(d, backend);
    assert_eq!(m.config.family, Family::Camembert, "{}", d.display());
    assert_eq!((m.config.max_position_embeddings, m.config.position_offset), (64, 2), "positions from pad + 1");
    m
}

/// A folder through the loader (the CLI's and the engine's path): a sharded folder's weights are read here.
fn load_folder<B: Backend>(d: &Path, backend: B) -> Model<B> {
    let m = loader::load(ModelSource::Path(d), &LoadOptions::default()).unwrap();
    let w = m.weights().unwrap();
    Model::new(backend, m.config, m.tokenizer, &w).unwrap()
}

fn everything<B: Backend>(mk: impl Fn() -> B, atol: f32) {
    let g = golden();
    let c = &g["camembert"];
    let mlm = load(&dir("tiny-camembert-mlm"), mk());
    family::tokens("camembert", c, &mlm.tokenizer, false);
    family::embeddings("camembert", c, &mlm, atol, true);
    family::fill_mask("camembert", c, &mlm, atol, NEAR_TIES);
    family::classify("camembert", c, &load(&dir("tiny-camembert-classifier"), mk()), atol, false);
    family::token_logits("camembert", c, &load(&dir("tiny-camembert-ner"), mk()), atol);
    family::answer("camembert", c, &load(&dir("tiny-camembert-qa"), mk()), atol);
    // The same masked LM from its shards.
    let sharded = load_folder(&dir("tiny-camembert-sharded"), mk());
    assert_eq!(sharded.config.family, Family::Camembert);
    family::embeddings("camembert sharded", c, &sharded, atol, true);
    family::fill_mask("camembert sharded", c, &sharded, atol, NEAR_TIES);
}

#[test]
fn camembert_matches_pytorch_on_cpu() {
    everything(CpuBackend::new, CPU_ATOL);
}

#[test]
fn camembert_matches_pytorch_on_gpu() {
    if gpu().is_none() {
        return;
    }
    everything(|| gpu().expect("adapter"), GPU_ATOL);
}

/// The shards streamed straight into GPU memory (the engine's path on a GPU: each shard's matrices written to the
/// device as they are read, a layer's query, key and value from different files) give the goldens.
#[test]
fn sharded_weights_placed_on_the_gpu() {
    let Some(g) = gpu() else { return };
    let m = loader::load(ModelSource::Path(&dir("tiny-camembert-sharded")), &LoadOptions::default()).unwrap();
    let w = m.weights_to(&g).unwrap();
    assert!(w.any_placed(), "the matrices went to the device");
    let model = Model::new(g, m.config, m.tokenizer, &w).unwrap();
    let golden = golden();
    family::fill_mask("camembert placed", &golden["camembert"], &model, GPU_ATOL, NEAR_TIES);
}

/// Each checkpoint offers the tasks of its head and no other.
#[test]
fn camembert_tasks_follow_the_checkpoint() {
    for (name, tasks) in [
        ("tiny-camembert-mlm", vec!["fillMask"]),
        ("tiny-camembert-classifier", vec!["classify"]),
        ("tiny-camembert-ner", vec!["tokenClassify"]),
        ("tiny-camembert-qa", vec!["answer"]),
    ] {
        assert_eq!(load(&dir(name), CpuBackend::new()).available_tasks(), tasks, "{name}");
    }
}

/// `convert` stores CamemBERT under BERT's names with its own config JSON, from one file or from shards; both GGUFs
/// give the goldens (f32: the same tolerance) and the sharded one is the same file.
#[test]
fn camembert_through_gguf_matches_pytorch() {
    let g = golden();
    let c = &g["camembert"];
    let one = family::gguf_bytes("tiny-camembert-mlm", Dtype::F32);
    let sharded = family::gguf_bytes("tiny-camembert-sharded", Dtype::F32);
    let (a, b) = (gguf::read_bert(&one).unwrap(), gguf::read_bert(&sharded).unwrap());
    assert_eq!(a.tensors.len(), b.tensors.len());
    assert!(a.tensors.iter().all(|(n, _)| !n.starts_with("roberta.") && !n.starts_with("lm_head.")));
    for bytes in [one, sharded] {
        let m = gguf::load_gguf(&bytes).unwrap();
        assert_eq!(m.config.family, Family::Camembert);
        let model = Model::new(CpuBackend::new(), m.config, m.tokenizer, &m.weights).unwrap();
        family::fill_mask("camembert gguf", c, &model, CPU_ATOL, NEAR_TIES);
        family::embeddings("camembert gguf", c, &model, CPU_ATOL, true);
    }
    let out = std::env::temp_dir().join(format!("camembert-classifier-{}.gguf", std::process::id()));
    gguf::convert(&dir("tiny-camembert-classifier"), Dtype::F32, &out).unwrap();
    let m = gguf::load_gguf(&std::fs::read(&out).unwrap()).unwrap();
    std::fs::remove_file(&out).unwrap();
    family::classify("camembert gguf", c, &Model::new(CpuBackend::new(), m.config, m.tokenizer, &m.weights).unwrap(),
        CPU_ATOL, false);
}

/// The CLI on the sharded folder: the golden mean-pooled vectors and fill-mask predictions; `classify` takes a pair.
#[test]
fn camembert_through_the_cli() {
    let g = golden();
    family::cli_embeddings("camembert", &g["camembert"], &dir("tiny-camembert-sharded"), CPU_ATOL);
    family::cli_fill_mask(&g["camembert"], &dir("tiny-camembert-sharded"));
    family::cli_classify(&g["camembert"], &dir("tiny-camembert-classifier"));
}

/// A copy of the sharded folder under the temp dir, changed by `edit`.
fn broken_copy(tag: &str, edit: impl FnOnce(&Path)) -> PathBuf {
    let src = dir("tiny-camembert-sharded");
    let d = std::env::temp_dir().join(format!("bertgpu-shards-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
    }
    edit(&d);
    d
}

fn index(d: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(d.join("model.safetensors.index.json")).unwrap()).unwrap()
}

fn write_index(d: &Path, v: &Value) {
    std::fs::write(d.join("model.safetensors.index.json"), v.to_string()).unwrap();
}

/// The load's error, through the loader (weights included) and through `convert`: both must fail, naming `want`.
fn refused(d: &Path, want: &str) {
    let by_load = loader::load(ModelSource::Path(d), &LoadOptions::default()).and_then(|m| m.weights().map(drop));
    let e = by_load.err().unwrap_or_else(|| panic!("{} loaded", d.display())).to_string();
    assert!(e.contains(want), "load: {e}");
    let out = d.join("out.gguf");
    let e = gguf::convert(d, Dtype::F32, &out).err().unwrap_or_else(|| panic!("{} converted", d.display())).to_string();
    assert!(e.contains(want), "convert: {e}");
    // The CLI says the same and exits 2, no panic.
    let o = common::cli(&["embed", "--model", d.to_str().unwrap(), "--device", "cpu"], "hello\n");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(want) && !stderr.contains("panicked"), "{stderr}");
    std::fs::remove_dir_all(d).unwrap();
}

/// A shard the index names but the folder lacks, a tensor in two shards, an index that puts a tensor in the wrong
/// shard or names a path: each refused by name, by the loader, `convert` and the CLI.
#[test]
fn inconsistent_shards_are_refused_by_name() {
    let first = "model-00001-of-00006.safetensors";
    let d = broken_copy("missing", |d| std::fs::remove_file(d.join("model-00003-of-00006.safetensors")).unwrap());
    refused(&d, "names the shard model-00003-of-00006.safetensors, which is not in");
    // Shard 2 holds what shard 1 holds: shard 1 copied over it.
    let d = broken_copy("twice", |d| {
        std::fs::copy(d.join(first), d.join("model-00002-of-00006.safetensors")).unwrap();
    });
    refused(&d, "is in two shards, model-00001-of-00006.safetensors and model-00002-of-00006.safetensors");
    // (Shard 1 holds the word embeddings alone; shard 2 holds several tensors.)
    let second = "model-00002-of-00006.safetensors";
    let d = broken_copy("moved", |d| {
        let mut v = index(d);
        let map = v["weight_map"].as_object_mut().unwrap();
        let name = map.iter().find(|(_, s)| s.as_str() == Some(second)).map(|(n, _)| n.clone()).unwrap();
        map.insert(name, Value::from("model-00003-of-00006.safetensors"));
        write_index(d, &v);
    });
    refused(&d, "but model.safetensors.index.json puts it in model-00003-of-00006.safetensors");
    let d = broken_copy("unlisted", |d| {
        let mut v = index(d);
        let map = v["weight_map"].as_object_mut().unwrap();
        let name = map.iter().find(|(_, s)| s.as_str() == Some(second)).map(|(n, _)| n.clone()).unwrap();
        map.remove(&name);
        write_index(d, &v);
    });
    refused(&d, "but model.safetensors.index.json does not list it");
    let d = broken_copy("lost", |d| {
        let mut v = index(d);
        v["weight_map"]["roberta.embeddings.word_embeddings.weight"] = Value::from(second);
        write_index(d, &v);
    });
    refused(&d, "puts tensor `roberta.embeddings.word_embeddings.weight` in model-00002-of-00006.safetensors, which \
        does not hold it");
    let d = broken_copy("path", |d| {
        let mut v = index(d);
        v["weight_map"]["extra.weight"] = Value::from("../elsewhere.safetensors");
        write_index(d, &v);
    });
    refused(&d, "names the shard `../elsewhere.safetensors`");
}

/// A folder whose weights are only a `pytorch_model.bin` that is no checkpoint is refused, naming the file: its
/// pickle is read (tests/torch_bin.rs), not a damaged one.
#[test]
fn a_pytorch_bin_that_is_no_checkpoint_is_refused() {
    let only_bin = |tag: &str, bytes: &'static [u8]| {
        broken_copy(tag, move |d| {
            for e in std::fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                if p.to_string_lossy().contains("safetensors") {
                    std::fs::remove_file(p).unwrap();
                }
            }
            std::fs::write(d.join("pytorch_model.bin"), bytes).unwrap();
        })
    };
    refused(&only_bin("bin", b"PK\x03\x04 not read"), "pytorch_model.bin: its zip archive cannot be read");
    refused(&only_bin("bin2", b""), "pytorch_model.bin: is not a PyTorch checkpoint");
}
