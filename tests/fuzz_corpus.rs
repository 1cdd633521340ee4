//! Every file of the committed fuzz corpus (`fuzz/corpus/<target>/`) through the same entry points the fuzz targets
//! call (`bertgpu::fuzzing`), so each input that once found new code paths — and each past finding — is re-checked
//! on every `cargo test`, without libFuzzer. See fuzz/README.md for running the fuzzers themselves.
//!
//! `write_seeds` (ignored; run by hand) writes the small hand-made seed inputs the corpora started from.

mod common;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use bertgpu::backend::Activation;
use bertgpu::fuzzing;
use bertgpu::training::head::{export_safetensors, HeadSpec};
use bertgpu::tasks::Pooling;
use bertgpu::dtype::Dtype;
use bertgpu::weights::gguf::{self, BertGgufMeta};
use bertgpu::weights::HostTensor;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The corpus files of one target, sorted; the directory must exist and hold some.
fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = root().join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    files
}

/// Runs `f` on every corpus file of `target`, naming the file that fails.
fn replay(target: &str, f: impl Fn(&[u8])) -> usize {
    let files = corpus(target);
    for p in &files {
        let data = std::fs::read(p).unwrap();
        if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&data))) {
            let msg = e.downcast_ref::<String>().cloned().or(e.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("{target}: {} fails: {}", p.display(), msg.unwrap_or_default());
        }
    }
    files.len()
}

#[test]
fn config_json_corpus() {
    replay("config_json", fuzzing::config_json);
}

#[test]
fn safetensors_corpus() {
    replay("safetensors", fuzzing::safetensors);
}

#[test]
fn torch_bin_corpus() {
    replay("torch_bin", fuzzing::torch_bin);
}

#[test]
fn gguf_corpus() {
    replay("gguf", fuzzing::gguf);
}

#[test]
fn tokenizer_json_corpus() {
    replay("tokenizer_json", fuzzing::tokenizer_json);
}

#[test]
fn vocab_txt_corpus() {
    replay("vocab_txt", fuzzing::vocab_txt);
}

#[test]
fn inference_corpus() {
    let models = fuzzing::InferenceModels::load(&root().join("tests/models")).unwrap();
    replay("inference", |d| fuzzing::inference(&models, d));
}

// ---------------------------------------------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------------------------------------------

/// A WordPiece vocabulary small enough for seed files.
const VOCAB: [&str; 24] = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "dog", "sat", "on", "mat", "hello", "world",
    "##s", "##ing", ",", ".", "!", "?", "un", "##able", "日", "🙂",
];

/// Deterministic weights in [-0.5, 0.5): the shared generator's [-1, 1) halved (exact in f32, so the seed files
/// keep their bytes).
fn values(n: usize, seed: u64) -> Vec<f32> {
    common::rand_vec(n, seed).into_iter().map(|v| v * 0.5).collect()
}

/// A 1-layer BERT (H = 32 so that Q8_0/Q4_0 blocks fit its rows) with a pooler and a 2-label classifier.
fn tiny_bert() -> (String, Vec<(String, HostTensor)>) {
    let (v, h, i, p) = (VOCAB.len(), 32, 64, 16);
    let config = format!(
        r#"{{"architectures": ["BertForSequenceClassification"], "vocab_size": {v}, "hidden_size": {h},
        "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": {i}, "hidden_act": "gelu",
        "max_position_embeddings": {p}, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
        "id2label": {{"0": "NEG", "1": "POS"}}, "label2id": {{"NEG": 0, "POS": 1}}}}"#
    );
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("embeddings.word_embeddings.weight".into(), vec![v, h]),
        ("embeddings.position_embeddings.weight".into(), vec![p, h]),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, h]),
        ("embeddings.LayerNorm.weight".into(), vec![h]),
        ("embeddings.LayerNorm.bias".into(), vec![h]),
        ("pooler.dense.weight".into(), vec![h, h]),
        ("pooler.dense.bias".into(), vec![h]),
        ("classifier.weight".into(), vec![2, h]),
        ("classifier.bias".into(), vec![2]),
    ];
    let l = "encoder.layer.0";
    for (name, shape) in [
        ("attention.self.query", vec![h, h]),
        ("attention.self.key", vec![h, h]),
        ("attention.self.value", vec![h, h]),
        ("attention.output.dense", vec![h, h]),
        ("intermediate.dense", vec![i, h]),
        ("output.dense", vec![h, i]),
    ] {
        shapes.push((format!("{l}.{name}.bias"), vec![shape[0]]));
        shapes.push((format!("{l}.{name}.weight"), shape));
    }
    for ln in ["attention.output.LayerNorm", "output.LayerNorm"] {
        shapes.push((format!("{l}.{ln}.weight"), vec![h]));
        shapes.push((format!("{l}.{ln}.bias"), vec![h]));
    }
    let tensors = shapes
        .into_iter()
        .enumerate()
        .map(|(k, (name, shape))| {
            let n = shape.iter().product();
            (name, HostTensor::f32(shape, values(n, k as u64 + 1)).unwrap())
        })
        .collect();
    (config, tensors)
}

fn safetensors_bytes(tensors: &[(String, HostTensor)]) -> Vec<u8> {
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, t)| (n.clone(), t.shape.clone(), t.to_f32().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, TensorView)> =
        bytes.iter().map(|(n, s, b)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), b).unwrap())).collect();
    safetensors::serialize(views, None).unwrap()
}

/// Writes the seed inputs to `fuzz/seeds/<target>/` (not committed: `cargo fuzz cmin` keeps what of them matters in
/// `fuzz/corpus/`). `cargo test --test fuzz_corpus -- --ignored write_seeds`.
#[test]
#[ignore]
fn write_seeds() {
    let out = root().join("fuzz/seeds");
    let put = |target: &str, name: &str, data: &[u8]| {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), data).unwrap();
    };
    let models = root().join("tests/models");
    let read = |p: PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));

    // config.json: the real ones, and the tiny one.
    for m in ["tiny-classifier", "tiny-ner", "tiny-pretraining", "tiny-qa", "tiny-multilabel"] {
        put("config_json", m, &read(models.join(m).join("config.json")));
    }
    let (config, tensors) = tiny_bert();
    put("config_json", "tiny-bert", config.as_bytes());

    // Tokenizers: generated from VOCAB, and a real one from transformers (tiny models), each with its config.
    let vocab: Vec<String> = VOCAB.iter().map(|s| s.to_string()).collect();
    let special: HashSet<usize> = (0..5).collect();
    let tok_json = bertgpu::tokenizer::gguf_vocab::wordpiece_tokenizer_json(&vocab, &special).unwrap();
    let tok_cfg = br#"{"do_lower_case": true, "mask_token": "[MASK]", "unk_token": "[UNK]"}"#;
    put("tokenizer_json", "generated", tok_json.as_bytes());
    put("tokenizer_json", "generated-with-config", &[tok_json.as_bytes(), b"\0", tok_cfg].concat());
    let real_cfg = read(models.join("tiny-classifier/tokenizer_config.json"));
    put(
        "tokenizer_json",
        "tiny-classifier-with-config",
        &[read(models.join("tiny-classifier/tokenizer.json")), b"\0".to_vec(), real_cfg.clone()].concat(),
    );
    let vocab_txt = VOCAB.join("\n") + "\n";
    put("vocab_txt", "generated", vocab_txt.as_bytes());
    put("vocab_txt", "generated-with-config", &[vocab_txt.as_bytes(), b"\0", tok_cfg].concat());
    put("vocab_txt", "tiny-classifier-with-config",
        &[read(models.join("tiny-classifier/vocab.txt")), b"\0".to_vec(), real_cfg].concat());

    // safetensors: the tiny BERT, one tensor per dtype, a trained head.
    put("safetensors", "tiny-bert", &safetensors_bytes(&tensors));
    for (name, dtype, bytes) in [
        ("f16", safetensors::Dtype::F16, vec![0u8, 0x3c, 0, 0xc0]),
        ("bf16", safetensors::Dtype::BF16, vec![0xc0, 0x3f, 0, 0xc0]),
        ("i64", safetensors::Dtype::I64, vec![3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0]),
    ] {
        let v = safetensors::tensor::TensorView::new(dtype, vec![2], &bytes).unwrap();
        put("safetensors", name, &safetensors::serialize([("x", v)], None).unwrap());
    }
    let spec = HeadSpec {
        input_size: 32,
        hidden: Some((8, Activation::Relu)),
        labels: vec!["a".into(), "b".into(), "c".into()],
        pooling: Pooling::Mean,
    };
    let host: Vec<Vec<f32>> = spec.param_shapes().iter().enumerate().map(|(k, &(r, c))| values(r * c, k as u64)).collect();
    put("safetensors", "head", &export_safetensors(&spec, &host).unwrap());

    // pytorch_model.bin: torch.save's own files (tests/golden/torch_bin.py), both formats, and the hostile ones.
    let torch = root().join("tests/data/torch_bin");
    for f in ["features.bin", "features-legacy.bin", "hostile/os_system.bin", "hostile/builtins_eval.bin",
        "hostile/legacy_os_system.bin", "hostile/short_storage.bin", "hostile/short_entry.bin", "hostile/huge_dim.bin"] {
        put("torch_bin", &f.replace('/', "-"), &read(torch.join(f)));
    }

    // GGUF: the tiny BERT in every dtype.
    let meta = BertGgufMeta {
        name: "tiny-bert",
        config_json: &config,
        tokenizer_json: &tok_json,
        tokenizer_config_json: Some(std::str::from_utf8(tok_cfg).unwrap()),
        pooling: Some("mean"),
    };
    for (name, dtype) in
        [("f16", Dtype::F16), ("q8_0", Dtype::Q8_0), ("q4_0", Dtype::Q4_0)]
    {
        put("gguf", name, &gguf::write_bert(&meta, &tensors, dtype).unwrap());
    }

    // Inference: flags byte, text, 0xFF, pair.
    for (name, data) in [
        ("text", b"\x00Hello, world!".to_vec()),
        ("mask", b"\x03the cat [MASK] on the mat.".to_vec()),
        ("pair", b"\x05who sat on the mat?\xffthe cat sat on the mat, the dog did not.".to_vec()),
        ("unicode", "\x10Ünïcödé 日本語 🙂 naïve café\u{0}\u{7}".as_bytes().to_vec()),
        ("empty-pair", b"\x21\xff".to_vec()),
        ("long", [b"\x12".to_vec(), b"unbelievable things happen ".repeat(40)].concat()),
    ] {
        put("inference", name, &data);
    }
}
