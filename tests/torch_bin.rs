//! `pytorch_model.bin` read without running its pickle (src/weights/torch_bin.rs), against files PyTorch's own
//! `torch.save` wrote (tests/golden/torch_bin.py): the same tensors, bit for bit, as the safetensors file of the same
//! model, in both of torch.save's formats (and through every way in: bytes, a file, a folder, shards, convert, a
//! sentence-transformers Dense module); the model's outputs those of PyTorch (tests/golden/torch_bin.json); and each
//! hostile file (a pickle that calls `os.system` or `builtins.eval`, a truncated archive, a storage shorter than
//! its tensor, a dimension of 2^40, ...) a clear error naming the problem, with the process going on to load a good
//! model after it.

mod common;

use std::path::{Path, PathBuf};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::dtype::Dtype;
use bertgpu::engine::{Device, Engine};
use bertgpu::loader::{self, LoadOptions, ModelFiles, ModelSource, WeightsFile};
use bertgpu::tasks::vectors::TokenOptions;
use bertgpu::tasks::{EmbedOptions, Model};
use bertgpu::weights::{gguf, HostData, Weights};
use serde_json::Value;

/// Max |ours − PyTorch| on logits and hidden states: both f32 (the f16 model's weights widened), summed in other
/// orders; tests/camembert.rs measures ~5e-6 on models of this size.
const ATOL: f32 = 2.5e-5;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn data(name: &str) -> PathBuf {
    root().join("tests/data/torch_bin").join(name)
}

fn model_dir(name: &str) -> PathBuf {
    root().join("tests/models").join(name)
}

fn golden() -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join("tests/golden/torch_bin.json")).unwrap()).unwrap()
}

/// A tensor's shape, dtype and bits.
fn bits(w: &Weights, name: &str) -> (Vec<usize>, Dtype, Vec<u8>) {
    let t = w.stored(name).unwrap_or_else(|| panic!("`{name}` missing"));
    let raw = match &t.data {
        HostData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        other => panic!("`{name}`: {other:?}"),
    };
    (t.shape.clone(), t.data.dtype(), raw)
}

/// `got` holds exactly `want`'s tensors, bit for bit, and beside them only `extra` (integer buffers, by dtype).
fn same_tensors(what: &str, got: &Weights, want: &Weights, extra: &[(&str, &str)]) {
    assert_eq!(got.names(), want.names(), "{what}: the tensors");
    for name in want.names() {
        assert_eq!(bits(got, name), bits(want, name), "{what}: `{name}`");
    }
    for (name, dtype) in extra {
        let e = got.get(name, &[]).unwrap_err().to_string();
        assert!(e.contains(dtype), "{what}: `{name}` should be recorded as {dtype}: {e}");
    }
}

fn safetensors(path: &Path) -> Weights {
    Weights::from_safetensors_file(path).unwrap()
}

fn torch_file(path: &Path) -> Weights {
    Weights::from_torch_bin_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_bin_holds_the_safetensors_tensors_bit_for_bit() {
    let classifier = safetensors(&model_dir("tiny-classifier/model.safetensors"));
    let bin = model_dir("tiny-classifier-bin/pytorch_model.bin");
    same_tensors("zip format", &torch_file(&bin), &classifier, &[("bert.embeddings.position_ids", "I64")]);
    // The same bytes in memory (the browser's path) and told apart from safetensors by their first bytes.
    let bytes = std::fs::read(&bin).unwrap();
    same_tensors("bytes", &Weights::from_file_source(&bytes).unwrap(), &classifier, &[]);
    same_tensors("format before 1.6", &torch_file(&data("legacy.bin")), &classifier, &[]);
    let f16 = safetensors(&data("tiny-bert-f16.safetensors"));
    assert_eq!(f16.stored("embeddings.word_embeddings.weight").unwrap().data.dtype(), Dtype::F16);
    same_tensors("f16", &torch_file(&model_dir("tiny-bert-f16-bin/pytorch_model.bin")), &f16, &[]);
}

/// Views that are not a storage of their own (transposed, at an offset, strided, broadcast), bf16 (widened to f32,
/// as the safetensors reader widens it), f16, an nn.Parameter, a 0-d and an empty tensor, i64 and bool buffers.
#[test]
fn views_and_dtypes_come_out_as_contiguous_tensors() {
    let want = safetensors(&data("features.safetensors"));
    for file in ["features.bin", "features-legacy.bin"] {
        let got = torch_file(&data(file));
        same_tensors(file, &got, &want, &[("ids", "I64"), ("mask", "BOOL")]);
        assert_eq!(got.stored("transposed").unwrap().shape, [6, 4]);
        assert_eq!(got.stored("scalar").unwrap().data, HostData::F32(vec![2.5]));
        assert_eq!(got.stored("bf16").unwrap().data.dtype(), Dtype::F32);
        assert_eq!(got.stored("empty").unwrap().shape, [0, 4]);
    }
}

/// The classifier's logits from a folder with only pytorch_model.bin, as PyTorch gives them.
fn check_classifier(m: &Model<CpuBackend>, what: &str) {
    let g = &golden()["classifier"];
    let texts: Vec<&str> = g["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let encoded: Vec<_> = texts.iter().map(|t| m.tokenizer.encode(t, None).unwrap()).collect();
    let got = pollster::block_on(m.classify_logits(&encoded)).unwrap().concat();
    let want: Vec<f32> = g["logits"].as_array().unwrap().iter().flat_map(common::floats).collect();
    common::assert_close(what, &got, &want, ATOL, 0.0);
}

fn load_folder(d: &Path) -> Model<CpuBackend> {
    let m = loader::load(ModelSource::Path(d), &LoadOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    let w = m.weights().unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    Model::new(CpuBackend::new(), m.config, m.tokenizer, &w).unwrap()
}

#[test]
fn a_bin_only_folder_gives_pytorchs_outputs() {
    check_classifier(&load_folder(&model_dir("tiny-classifier-bin")), "pytorch_model.bin");
    check_classifier(&load_folder(&model_dir("tiny-classifier-bin-sharded")), "pytorch_model.bin.index.json");
    // The engine (the CLI's path) too.
    let e = pollster::block_on(Engine::load(ModelSource::Path(&model_dir("tiny-classifier-bin")), &LoadOptions::default(),
        Device::Cpu)).unwrap();
    let out = pollster::block_on(e.classify(&[("the cat sat on the mat.", None)], None)).unwrap();
    assert_eq!(out[0][0].label, "neutral");

    // The f16 BertModel: every token's last hidden state.
    let m = load_folder(&model_dir("tiny-bert-f16-bin"));
    let g = &golden()["bert_f16"];
    let texts: Vec<&str> = g["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let got = pollster::block_on(m.embed_tokens(&texts, &TokenOptions::default())).unwrap();
    for (i, (v, row)) in got.iter().zip(g["rows"].as_array().unwrap()).enumerate() {
        assert_eq!(v.ids, common::family::ids(&row["input_ids"]), "text {i}: ids");
        common::assert_close(&format!("f16 text {i}"), &v.vectors, &common::family::rows(&row["hidden"]), ATOL, 0.0);
    }
}

/// The bytes of a folder's files (the browser's path): the loader tells pytorch_model.bin from safetensors.
#[test]
fn a_bin_given_as_bytes_loads() {
    let d = model_dir("tiny-classifier-bin");
    let read = |f: &str| std::fs::read(d.join(f)).unwrap();
    let files = ModelFiles {
        config: read("config.json"),
        tokenizer: Some(read("tokenizer.json")),
        vocab: None,
        tokenizer_config: Some(read("tokenizer_config.json")),
        weights: WeightsFile::Bytes(Box::new(read("pytorch_model.bin"))),
        adapter: None,
        sentence: Vec::new(),
    };
    let m = loader::load(ModelSource::Files(files), &LoadOptions::default()).unwrap();
    let w = m.weights().unwrap();
    check_classifier(&Model::new(CpuBackend::new(), m.config, m.tokenizer, &w).unwrap(), "bytes");
}

/// A fresh folder of this process named `name`, with copies of `from`'s files but those `skip` names.
fn copy_of(from: &Path, name: &str, skip: &[&str]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bertgpu-torch-bin-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let file = p.file_name().unwrap().to_str().unwrap();
        if p.is_file() && !skip.contains(&file) {
            std::fs::copy(&p, d.join(file)).unwrap();
        }
    }
    d
}

#[test]
fn convert_reads_a_bin_only_folder() {
    for (name, model) in [("single", "tiny-classifier-bin"), ("sharded", "tiny-classifier-bin-sharded")] {
        let out = std::env::temp_dir().join(format!("bertgpu-torch-bin-{}-{name}.gguf", std::process::id()));
        let report = gguf::convert(&model_dir(model), Dtype::F32, &out).unwrap();
        assert_eq!(report.tensors, 41, "{name}: every weight, the i64 buffer left out");
        let bytes = std::fs::read(&out).unwrap();
        let m = loader::load(ModelSource::Gguf(&bytes), &LoadOptions::default()).unwrap();
        let w = m.weights().unwrap();
        check_classifier(&Model::new(CpuBackend::new(), m.config, m.tokenizer, &w).unwrap(), &format!("{name} gguf"));
        std::fs::remove_file(out).unwrap();
    }
}

/// model.safetensors is read where both files are there: a hostile pytorch_model.bin beside it is never opened.
#[test]
fn safetensors_comes_first() {
    let d = copy_of(&model_dir("tiny-classifier"), "both", &[]);
    std::fs::copy(data("hostile/os_system.bin"), d.join("pytorch_model.bin")).unwrap();
    check_classifier(&load_folder(&d), "model.safetensors beside a hostile pytorch_model.bin");
    let out = d.join("model.gguf");
    gguf::convert(&d, Dtype::F32, &out).unwrap();
    std::fs::remove_dir_all(d).unwrap();
}

/// A sentence-transformers Dense module saved as pytorch_model.bin (sentence-transformers 2.x) embeds as the same
/// module saved as model.safetensors.
#[test]
fn a_dense_module_in_pytorch_model_bin() {
    let stacks = root().join("tests/models/st-stacks/mean-dense-normalize");
    let with_st = common::sentence_stack(&stacks, "dense-st");
    let with_bin = common::sentence_stack(&stacks, "dense-bin");
    std::fs::remove_file(with_bin.join("2_Dense/model.safetensors")).unwrap();
    std::fs::copy(data("dense.bin"), with_bin.join("2_Dense/pytorch_model.bin")).unwrap();
    let embed = |d: &Path| {
        let e = pollster::block_on(Engine::load(ModelSource::Path(d), &LoadOptions::default(), Device::Cpu)).unwrap();
        pollster::block_on(e.embed(&["a dense module", "in pytorch_model.bin"], &EmbedOptions::default())).unwrap()
    };
    let (a, b) = (embed(&with_st), embed(&with_bin));
    assert_eq!(a, b, "the same Dense weights give the same embeddings");
    // convert carries it into the GGUF.
    let out = with_bin.join("model.gguf");
    gguf::convert(&with_bin, Dtype::F32, &out).unwrap();
    // A hostile one is refused, naming its file.
    std::fs::copy(data("hostile/builtins_eval.bin"), with_bin.join("2_Dense/pytorch_model.bin")).unwrap();
    let e = loader::load(ModelSource::Path(&with_bin), &LoadOptions::default()).err().unwrap().to_string();
    assert!(e.contains("2_Dense/pytorch_model.bin: its pickle names `builtins.eval`"), "{e}");
}

/// Each hostile file, and what its error must say.
const HOSTILE: [(&str, &str); 11] = [
    ("os_system.bin", "its pickle names `os.system`, which is not part of a PyTorch state dict: refused"),
    ("broadcast.bin", "have 4611686018427387904 elements, more than a file of its size can give"),
    ("builtins_eval.bin", "its pickle names `builtins.eval`"),
    ("newobj.bin", "the opcode NEWOBJ (an object of a class"),
    ("legacy_os_system.bin", "its pickle names `posix.system`"),
    ("short_storage.bin", "reaches past the 10 F32 values of its storage `0`: the storage is shorter than the tensor claims"),
    ("short_entry.bin", "storage `0` holds 40 bytes, but its pickle says 100 F32 values (400 bytes)"),
    ("huge_dim.bin", "has shape [1099511627776, 1099511627776]: more elements than any memory holds"),
    ("missing_storage.bin", "its pickle names storage `7`, which its archive lacks"),
    ("deep.bin", "more than 100000 values and marks on its stack"),
    ("truncated.bin", "its zip archive cannot be read"),
];

#[test]
fn hostile_files_are_clear_errors() {
    let dir = data("hostile");
    let mut files: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    let mut listed: Vec<String> = HOSTILE.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed, "every hostile file has its expected error here");
    for (file, want) in HOSTILE {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        let e = Weights::from_torch_bin(&bytes).unwrap_err().to_string();
        assert!(e.starts_with("invalid weights: pytorch_model.bin: ") && e.contains(want), "{file}: {e}");
        assert_eq!(Weights::from_file_source(&bytes).unwrap_err().to_string(), e, "{file}: told apart by its bytes");
        // In a folder: the loader (which reads the weights when asked) and convert refuse it too.
        let d = copy_of(&model_dir("tiny-classifier-bin"), file, &["pytorch_model.bin"]);
        std::fs::write(d.join("pytorch_model.bin"), &bytes).unwrap();
        let e = loader::load(ModelSource::Path(&d), &LoadOptions::default()).and_then(|m| m.weights()).unwrap_err().to_string();
        assert!(e.contains("pytorch_model.bin: ") && e.contains(want), "{file} in a folder: {e}");
        let e = gguf::convert(&d, Dtype::F32, &d.join("out.gguf")).unwrap_err().to_string();
        assert!(e.contains(want), "{file} through convert: {e}");
        std::fs::remove_dir_all(d).unwrap();
    }
    assert!(!Path::new("/tmp/pwned").exists(), "nothing ran");
    // The process goes on: a good model loads after them.
    check_classifier(&load_folder(&model_dir("tiny-classifier-bin")), "after the hostile files");
}

/// Shards whose index and files disagree are refused by name, as safetensors shards are.
#[test]
fn bin_shards_are_checked_against_their_index() {
    let d = copy_of(&model_dir("tiny-classifier-bin-sharded"), "bad-shards", &[]);
    let index = d.join("pytorch_model.bin.index.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    v["weight_map"]["classifier.bias"] = Value::from("pytorch_model-00001-of-00004.bin");
    std::fs::write(&index, serde_json::to_vec(&v).unwrap()).unwrap();
    let e = loader::load(ModelSource::Path(&d), &LoadOptions::default()).and_then(|m| m.weights()).unwrap_err().to_string();
    assert!(e.contains("pytorch_model.bin.index.json puts it in pytorch_model-00001-of-00004.bin"), "{e}");
    v["weight_map"]["classifier.bias"] = Value::from("../elsewhere.bin");
    std::fs::write(&index, serde_json::to_vec(&v).unwrap()).unwrap();
    let e = loader::load(ModelSource::Path(&d), &LoadOptions::default()).err().unwrap().to_string();
    assert!(e.contains("pytorch_model.bin.index.json names the shard `../elsewhere.bin`"), "{e}");
    std::fs::remove_dir_all(d).unwrap();
}
