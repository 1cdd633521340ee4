//! GGUF for the families beyond BERT's layout: MPNet (relative attention bias), NomicBERT and GTE (rotary positions,
//! gated feed-forward, packed projections), DeBERTa-v2/v3 (relative table and its LayerNorm, log buckets, the
//! ContextPooler), ModernBERT (pre-LN layers and a final norm, two thetas, the local layers' window, `Wi` with its
//! halves swapped at load, its `head`; the masked LM with every bias, `norm_bias` included), JinaBERT v2 (ALiBi,
//! `mlp.gated_layers` whole as `ffn_up_gate`, its halves swapped at load; goldens from its authors' code). Each tiny
//! checkpoint of tests/models goes through `convert` and back:
//! - F32 gives the folder's outputs bit for bit, and the transformers goldens within each family's own bound;
//! - F16 stays within tests/gguf.rs's cosine floor of the folder's outputs (embeddings, fill-mask logits,
//!   classification and token logits) on the CPU and on the GPU, and of the goldens' embeddings; Q8_0 gives the f32
//!   model on its decoded weights, and stays within the tiny checkpoints' own floor of the folder;
//! - the config read back equals config.json's, field by field; every metadata key a family needs is refused by
//!   name when it is missing and when it contradicts the config; a NomicBERT file without config.json inside (as
//!   llama.cpp writes them) is rebuilt from llama.cpp's keys;
//! - `bertgpu convert` then `bertgpu embed --model FILE.gguf` on a NomicBERT; each family's file through the CLI's
//!   GPU load, which streams the tensors to the device; ModernBERT's F32, F16, Q8_0 and Q4_0 files that way against
//!   the PyTorch goldens.

mod common;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::BertConfig;
use bertgpu::dtype::Dtype;
use bertgpu::tasks::{EmbedOptions, Model, Pooling};
use bertgpu::weights::gguf::{self, families, Gguf, GgufWriter, Value};
use bertgpu::weights::{HostData, HostTensor};
use common::family::{self, block_on, dir, gguf_bytes};
use common::{cosine, MIN_COSINE_F16};
use serde_json::json;

/// What one tiny checkpoint is checked on.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Mean-pooled embeddings of the golden's texts under this key.
    Embed(&'static str),
    /// The masked-LM head: its encoder's embeddings (`embeddings`) and the logits at every mask.
    Mlm,
    Classifier,
    Ner,
}

/// A family's checkpoints, its golden (file, section) and the bound its own test file holds f32 weights to against
/// transformers on the CPU (tests/mpnet.rs, tests/rotary.rs, tests/deberta.rs `CPU_ATOL`: measured worst 1.1e-5,
/// 2.2e-5 and 5.7e-6 there, 5e-5, 5e-5 and 2e-5 with the reasons given there). An F32 GGUF gives the folder's
/// outputs bit for bit (checked first), so those bounds hold unchanged.
struct Fam {
    golden: (&'static str, Option<&'static str>),
    atol: f32,
    /// Whether the golden classifier cases record token types (the family has a token-type table).
    types: bool,
    models: &'static [(&'static str, Kind)],
}

const FAMILIES: [Fam; 10] = [
    Fam {
        golden: ("mpnet.json", None),
        atol: 5e-5,
        types: false,
        models: &[
            ("tiny-mpnet-model", Kind::Embed("model_embeddings")),
            ("tiny-mpnet-mlm", Kind::Mlm),
            ("tiny-mpnet-classifier", Kind::Classifier),
            ("tiny-mpnet-ner", Kind::Ner),
        ],
    },
    Fam {
        golden: ("rotary.json", Some("nomic")),
        atol: 5e-5,
        types: true,
        models: &[
            ("tiny-nomic-model", Kind::Embed("model_embeddings")),
            ("tiny-nomic-hub", Kind::Embed("model_embeddings")),
            ("tiny-nomic-mlm", Kind::Mlm),
            ("tiny-nomic-classifier", Kind::Classifier),
            ("tiny-nomic-ner", Kind::Ner),
        ],
    },
    Fam {
        golden: ("rotary.json", Some("gte")),
        atol: 5e-5,
        types: true,
        models: &[
            ("tiny-gte-model", Kind::Embed("model_embeddings")),
            ("tiny-gte-mlm", Kind::Mlm),
            ("tiny-gte-classifier", Kind::Classifier),
            ("tiny-gte-ner", Kind::Ner),
        ],
    },
    // gte-*-en-v1.5's fixed NTK scaling, under the hub's config keys (tests/golden/gte_ntk.py).
    Fam { golden: ("gte_ntk.json", None), atol: 5e-5, types: false, models: &[("tiny-gte-ntk", Kind::Embed("embeddings"))] },
    Fam {
        golden: ("deberta.json", None),
        atol: 2e-5,
        types: true,
        models: &[
            ("tiny-deberta-model", Kind::Embed("model_embeddings")),
            ("tiny-deberta-abs", Kind::Embed("abs_embeddings")),
            ("tiny-deberta-mlm", Kind::Mlm),
            ("tiny-deberta-classifier", Kind::Classifier),
            ("tiny-deberta-ner", Kind::Ner),
        ],
    },
    // tests/modernbert.rs `CPU_ATOL` (measured worst 4.6e-6 there).
    Fam {
        golden: ("modernbert.json", None),
        atol: 2e-5,
        types: false,
        models: &[
            ("tiny-modernbert-model", Kind::Embed("model_embeddings")),
            ("tiny-modernbert-mlm", Kind::Mlm),
            ("tiny-modernbert-classifier", Kind::Classifier),
            ("tiny-modernbert-ner", Kind::Ner),
        ],
    },
    // The classifier that pools the mean over the mask: the same inputs, its own golden (`classifier_mean`).
    Fam {
        golden: ("modernbert.json", Some(CLASSIFIER_MEAN)),
        atol: 2e-5,
        types: false,
        models: &[("tiny-modernbert-mean", Kind::Classifier)],
    },
    // JinaBERT v2 against the float64 transcription of its authors' code (tests/golden/jina.py): tests/jina.rs
    // `CPU_ATOL` (measured worst 4.9e-6 there). Its golden has a section per checkpoint.
    Fam { golden: ("jina.json", Some("model")), atol: 1e-5, types: true, models: &[("tiny-jina-model", Kind::Embed("embeddings"))] },
    Fam { golden: ("jina.json", Some("mlm")), atol: 1e-5, types: true, models: &[("tiny-jina-mlm", Kind::Mlm)] },
    Fam { golden: ("jina.json", Some("classifier")), atol: 1e-5, types: true, models: &[("tiny-jina-classifier", Kind::Classifier)] },
];

/// The section name under which [`golden`] gives ModernBERT's golden with `classifier_mean` as its `classifier`.
const CLASSIFIER_MEAN: &str = "classifier_mean";

fn golden(f: &Fam) -> serde_json::Value {
    let mut g = family::golden(f.golden.0);
    match f.golden.1 {
        Some(CLASSIFIER_MEAN) => {
            g["classifier"] = g[CLASSIFIER_MEAN].clone();
            g
        }
        Some(section) => g[section].clone(),
        None => g,
    }
}

/// A `.gguf`'s bytes as a model on `backend`.
fn from_gguf<B: Backend>(bytes: &[u8], backend: B) -> Model<B> {
    let m = gguf::load_gguf(bytes).unwrap();
    Model::new(backend, m.config, m.tokenizer, &m.weights).unwrap()
}

/// Q8_0 against f32 on these tiny random checkpoints (hidden 32, `initializer_range` 0.3, untrained): the cosine of
/// all of one checkpoint's outputs taken as one vector. Measured worst 0.99719 (tiny-gte-ner; tiny-nomic-classifier
/// 0.99760, tiny-nomic-mlm 0.99795, every other ≥ 0.9993), the same on the CPU and on lavapipe, printed by `cargo test
/// --test gguf_families -- --nocapture`. tests/gguf.rs's MIN_COSINE_Q8_0 (0.9995 per vector) is MiniLM's, a trained
/// model: BERT's own tiny checkpoints through the same converter fall below it too (tiny-distilbert-mlm 0.99934 per
/// vector, 0.99967 flattened; tiny-electra-ner 0.99949), and the gated feed-forward here multiplies two rounded
/// projections. Per vector the worst is a two-label classifier's logits (tiny-nomic-classifier 0.963: small logits,
/// so a small absolute change turns the vector far), printed but not bounded. The loss is the weights' rounding
/// alone: a Q8_0 file gives the outputs of the f32 model on its decoded weights (DEQUANTIZED_ATOL), and its names
/// and keys are the F32 file's, which gives the folder's outputs bit for bit. 0.995 allows 1 − cos up to 5e-3,
/// 1.8× the worst measured.
const MIN_FLAT_COSINE_Q8_0_TINY: f64 = 0.995;

/// |Q8_0 file − the f32 model on the file's decoded weights|: measured 0 (bit-identical) on the CPU and on lavapipe,
/// whose kernels decode each block and sum in f32 as the f32 ones do. 1e-5 (outputs ≤ ~10, ulps of ~1e-6) leaves a
/// packed kernel room to sum in another order; a wrong scale or block moves outputs by ≥ 1e-2 (the |Δ| to f32).
const DEQUANTIZED_ATOL: f32 = 1e-5;

/// A `.gguf` with every tensor decoded to f32 (what its stored values are), as a model on `backend`.
fn dequantized<B: Backend>(bytes: &[u8], backend: B) -> Model<B> {
    let mut read = gguf::read_bert(bytes).unwrap();
    for (_, t) in &mut read.tensors {
        *t = HostTensor { shape: t.shape.clone(), data: HostData::F32(t.to_f32().unwrap()) };
    }
    let m = gguf::gguf_model(read).unwrap();
    Model::new(backend, m.config, m.tokenizer, &m.weights).unwrap()
}

/// The outputs a kind of checkpoint is compared on, as vectors (one per text, per mask, per classified input).
fn outputs<B: Backend>(kind: Kind, g: &serde_json::Value, m: &Model<B>) -> Vec<Vec<f32>> {
    let texts = |key: &str| -> Vec<String> {
        g[key].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap().to_string()).collect()
    };
    let embed = |key: &str| {
        let t = texts(key);
        let t: Vec<&str> = t.iter().map(String::as_str).collect();
        let opts = EmbedOptions { pooling: Some(Pooling::Mean), normalize: Some(false), batch_size: 4, ..EmbedOptions::default() };
        block_on(m.embed(&t, &opts)).unwrap()
    };
    match kind {
        Kind::Embed(key) => embed(key),
        Kind::Mlm => {
            let mut out = embed("embeddings");
            let cases = g["fill_mask"].as_array().unwrap();
            let encoded: Vec<_> = cases.iter().map(|c| m.tokenizer.encode(c["text"].as_str().unwrap(), None).unwrap()).collect();
            let positions: Vec<Vec<usize>> = cases
                .iter()
                .map(|c| c["mask_rows"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap() as usize).collect())
                .collect();
            let logits = block_on(m.fill_mask_logits(&encoded, &positions)).unwrap();
            let vocab = m.config.vocab_size;
            assert_eq!(logits.len() % vocab, 0);
            out.extend(logits.chunks(vocab).map(<[f32]>::to_vec));
            out
        }
        Kind::Classifier => {
            let cases = g["classifier"].as_array().unwrap();
            let encoded: Vec<_> = cases
                .iter()
                .map(|c| m.tokenizer.encode(c["text"].as_str().unwrap(), c.get("text_pair").and_then(|p| p.as_str())).unwrap())
                .collect();
            block_on(m.classify_logits(&encoded)).unwrap()
        }
        Kind::Ner => {
            let cases = g["ner"].as_array().unwrap();
            let encoded: Vec<_> = cases.iter().map(|c| m.tokenizer.encode(c["text"].as_str().unwrap(), None).unwrap()).collect();
            block_on(m.token_logits(&encoded)).unwrap()
        }
    }
}

/// The smallest cosine between matching vectors, and the largest |a − b|.
fn compare(got: &[Vec<f32>], want: &[Vec<f32>]) -> (f64, f32) {
    assert_eq!(got.len(), want.len(), "one vector per input");
    let mut min_cos = 1.0f64;
    let mut max_abs = 0.0f32;
    for (a, b) in got.iter().zip(want) {
        assert_eq!(a.len(), b.len());
        min_cos = min_cos.min(cosine(a, b));
        max_abs = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(max_abs, f32::max);
    }
    (min_cos, max_abs)
}

/// F16 and Q8_0 files against the folder on one backend (`mk`): F16 every output within tests/gguf.rs's floor; Q8_0
/// the f32 model on its decoded weights, and within the tiny checkpoints' floor of the folder. The worst cosine and
/// |Δ| of each printed.
fn quantized_against_folder<B: Backend>(mk: impl Fn() -> B, on: &str) {
    let mut failed = Vec::new();
    for f in &FAMILIES {
        let g = golden(f);
        for &(name, kind) in f.models {
            let folder = outputs(kind, &g, &family::load(&dir(name), mk()));
            for dtype in [Dtype::F16, Dtype::Q8_0, Dtype::Q4_0] {
                let bytes = gguf_bytes(name, dtype);
                let got = outputs(kind, &g, &from_gguf(&bytes, mk()));
                let (cos, abs) = compare(&got, &folder);
                let flat = cosine(&got.concat(), &folder.concat());
                eprintln!("measured {name} {dtype:?} on {on}: cosine to the folder min {cos:.6} (all outputs as one \
                    vector {flat:.6}), max |Δ| {abs:.2e}");
                if dtype == Dtype::F16 && cos < MIN_COSINE_F16 {
                    failed.push(format!("{name} F16 on {on}: cosine {cos:.6} < {MIN_COSINE_F16}"));
                }
                if dtype != Dtype::F16 {
                    let decoded = outputs(kind, &g, &dequantized(&bytes, mk()));
                    let (_, dabs) = compare(&got, &decoded);
                    eprintln!("measured {name} {dtype:?} on {on}: max |Δ| to f32 on the decoded weights {dabs:.2e}");
                    if dabs > DEQUANTIZED_ATOL {
                        failed.push(format!("{name} {dtype:?} on {on}: {dabs:e} from f32 on its decoded weights"));
                    }
                }
                // Q4_0's loss on untrained tiny weights is printed, not bounded: MiniLM's floor is a trained model's.
                if dtype == Dtype::Q8_0 {
                    if flat < MIN_FLAT_COSINE_Q8_0_TINY {
                        failed.push(format!("{name} Q8_0 on {on}: cosine {flat:.6} < {MIN_FLAT_COSINE_Q8_0_TINY}"));
                    }
                }
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// F32: the folder's outputs bit for bit on the CPU, so the transformers goldens within each family's own bound;
/// F16: the goldens' mean embeddings within the F16 floor (as tests/gguf.rs holds MiniLM's).
#[test]
fn converted_files_match_the_goldens() {
    for f in &FAMILIES {
        let g = golden(f);
        for &(name, kind) in f.models {
            let folder = family::load(&dir(name), CpuBackend::new());
            let m = from_gguf(&gguf_bytes(name, Dtype::F32), CpuBackend::new());
            assert_eq!(outputs(kind, &g, &m), outputs(kind, &g, &folder), "{name}: the F32 GGUF differs from the folder");
            let what = format!("{name} F32 GGUF");
            match kind {
                Kind::Embed(key) => family::embeddings(&what, &json!({ "embeddings": g[key] }), &m, f.atol, true),
                Kind::Mlm => {
                    family::embeddings(&what, &json!({ "embeddings": g["embeddings"] }), &m, f.atol, true);
                    family::fill_mask(&what, &g, &m, f.atol, false);
                }
                Kind::Classifier => family::classify(&what, &g, &m, f.atol, f.types),
                Kind::Ner => family::token_logits(&what, &g, &m, f.atol),
            }
            let key = match kind {
                Kind::Embed(key) => key,
                Kind::Mlm => "embeddings",
                _ => continue,
            };
            let m16 = from_gguf(&gguf_bytes(name, Dtype::F16), CpuBackend::new());
            let want: Vec<Vec<f32>> = g[key].as_array().unwrap().iter().map(|c| common::floats(&c["mean"])).collect();
            let (cos, abs) = compare(&outputs(Kind::Embed(key), &g, &m16), &want);
            eprintln!("measured {name} F16 against transformers: min cosine {cos:.6}, max |Δ| {abs:.2e}");
            assert!(cos >= MIN_COSINE_F16, "{name} F16: cosine {cos:.6} to the golden < {MIN_COSINE_F16}");
        }
    }
}

#[test]
fn quantized_files_match_the_folder_on_cpu() {
    quantized_against_folder(CpuBackend::new, "the CPU");
}

/// The same on the GPU (lavapipe natively), which keeps the weights as stored. Skips only without an adapter.
#[test]
fn quantized_files_match_the_folder_on_gpu() {
    if common::gpu().is_none() {
        return;
    }
    quantized_against_folder(|| common::gpu().expect("adapter"), "the GPU");
}

/// The config read back from each file equals config.json's, field by field, and its metadata states the family's
/// choices under the names docs/GGUF.md gives.
#[test]
fn config_round_trips() {
    for f in &FAMILIES {
        for &(name, _) in f.models {
            let want = BertConfig::from_file(dir(name).join("config.json")).unwrap();
            for dtype in [Dtype::F32, Dtype::Q8_0, Dtype::Q4_0] {
                let bytes = gguf_bytes(name, dtype);
                let got = gguf::load_gguf(&bytes).unwrap().config;
                macro_rules! same {
                    ($($field:ident),*) => {$(
                        assert_eq!(got.$field, want.$field, "{name} {dtype:?}: {}", stringify!($field));
                    )*};
                }
                same!(family, vocab_size, embedding_size, hidden_size, num_hidden_layers, num_attention_heads,
                    intermediate_size, hidden_act, layer_norm_eps, max_position_embeddings, position_offset,
                    type_vocab_size, pad_token_id, positions, token_type_table, feed_forward, biases,
                    relative_attention_buckets, deberta, norms, norm_bias, sliding_window, modernbert, id2label,
                    label2id, architectures, tie_word_embeddings);
                assert_eq!(got, want, "{name} {dtype:?}: the whole config");
                let g = Gguf::parse(&bytes).unwrap();
                let arch = families::architecture(want.family).unwrap();
                assert_eq!(g.get("general.architecture").and_then(Value::as_str), Some(arch), "{name}");
                for (key, value, _) in families::arch_keys(&want, arch).unwrap() {
                    assert_eq!(g.get(&key), Some(&value), "{name}: `{key}`");
                }
            }
        }
    }
    // Spot checks of the names, so that a rename shows here and in docs/GGUF.md together.
    let g = Gguf::parse(&gguf_bytes("tiny-nomic-model", Dtype::F16)).unwrap();
    assert_eq!(g.get("nomic-bert.rope.freq_base"), Some(&Value::F32(100.0)));
    for t in ["token_embd.weight", "token_types.weight", "token_embd_norm.weight", "blk.0.attn_qkv.weight",
        "blk.0.attn_output.weight", "blk.0.attn_output_norm.bias", "blk.1.ffn_up.weight", "blk.1.ffn_gate.weight",
        "blk.1.ffn_down.weight", "blk.1.layer_output_norm.weight"]
    {
        assert!(g.tensor_info(t).is_some(), "nomic-bert: no `{t}`");
    }
    assert!(g.tensor_info("position_embd.weight").is_none(), "a rotary model has no position table");
    // Q4_0 keeps a packed `[q; k; v]` (it holds `attn_v`) at Q8_0, and a gate with its up projection.
    let g = Gguf::parse(&gguf_bytes("tiny-nomic-model", Dtype::Q4_0)).unwrap();
    let ty = |t: &str| g.tensor_info(t).unwrap().dtype;
    assert_eq!((ty("blk.0.attn_qkv.weight"), ty("blk.0.attn_output.weight")), (Dtype::Q8_0, Dtype::Q4_0));
    assert_eq!((ty("blk.1.ffn_up.weight"), ty("blk.1.ffn_gate.weight"), ty("blk.0.ffn_gate.weight")),
        (Dtype::Q8_0, Dtype::Q8_0, Dtype::Q4_0));
    let g = Gguf::parse(&gguf_bytes("tiny-gte-model", Dtype::F16)).unwrap();
    assert!(g.tensor_info("blk.0.ffn_up_gate.weight").is_some() && g.tensor_info("blk.0.attn_qkv.bias").is_some());
    let g = Gguf::parse(&gguf_bytes("tiny-gte-ntk", Dtype::F16)).unwrap();
    assert_eq!(g.get("bertgpu-gte.rope.scaling.type").and_then(Value::as_str), Some("ntk"));
    assert_eq!(g.get("bertgpu-gte.rope.scaling.factor"), Some(&Value::F32(2.0)));
    let g = Gguf::parse(&gguf_bytes("tiny-mpnet-model", Dtype::F16)).unwrap();
    assert_eq!(g.get("bertgpu-mpnet.attention.relative_buckets_count").and_then(Value::as_u64), Some(32));
    assert!(g.tensor_info("encoder.relative_attention_bias.weight").is_some());
    let g = Gguf::parse(&gguf_bytes("tiny-deberta-mlm", Dtype::F16)).unwrap();
    assert!(g.tensor_info("encoder.rel_embeddings.weight").is_some() && g.tensor_info("encoder.LayerNorm.weight").is_some());
    // ModernBERT under llama.cpp's `modern-bert` names and keys (its tiny config: thetas 500 and 100, a window of 8,
    // every third layer global, hidden 32, intermediate 32).
    let g = Gguf::parse(&gguf_bytes("tiny-modernbert-model", Dtype::F16)).unwrap();
    assert_eq!(g.get("modern-bert.rope.freq_base"), Some(&Value::F32(500.0)));
    assert_eq!(g.get("modern-bert.rope.freq_base_swa"), Some(&Value::F32(100.0)));
    assert_eq!(g.get("modern-bert.attention.sliding_window").and_then(Value::as_u64), Some(8));
    assert_eq!(g.get("modern-bert.attention.sliding_window_pattern").and_then(Value::as_u64), Some(3));
    for t in ["token_embd.weight", "token_embd_norm.weight", "blk.0.attn_qkv.weight", "blk.0.attn_output.weight",
        "blk.1.attn_norm.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "output_norm.weight"]
    {
        assert!(g.tensor_info(t).is_some(), "modern-bert: no `{t}`");
    }
    assert_eq!(g.tensor_info("blk.0.ffn_up.weight").unwrap().shape.iter().product::<usize>(), 2 * 32 * 32, "Wi whole");
    for t in ["blk.0.attn_norm.weight", "position_embd.weight", "token_types.weight", "token_embd_norm.bias",
        "blk.0.ffn_up_gate.weight"]
    {
        assert!(g.tensor_info(t).is_none(), "modern-bert: `{t}`");
    }
    let g = Gguf::parse(&gguf_bytes("tiny-modernbert-mlm", Dtype::F16)).unwrap();
    for t in ["token_embd_norm.bias", "output_norm.bias", "blk.0.ffn_up.bias", "blk.1.attn_norm.bias", "blk.0.attn_qkv.bias"] {
        assert!(g.tensor_info(t).is_some(), "modern-bert with every bias: no `{t}`");
    }
}

/// `bytes` with its metadata changed by `edit` (tensors as stored).
fn rewritten(bytes: &[u8], edit: impl Fn(&mut Vec<(String, Value)>)) -> Vec<u8> {
    let g = Gguf::parse(bytes).unwrap();
    let mut meta: Vec<(String, Value)> = g.metadata.iter().filter(|(k, _)| k != "general.alignment").cloned().collect();
    edit(&mut meta);
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.set(&k, v);
    }
    for (name, t) in g.load_all(bytes).unwrap() {
        w.add_tensor(&name, t).unwrap();
    }
    w.to_bytes().unwrap()
}

/// Every key a family needs, removed, is refused by its name (the whole-file reader and the streaming one alike);
/// changed, it is refused as contradicting config.json; a bertgpu-only family without config.json inside is refused
/// naming `bertgpu.config_json`.
#[test]
fn missing_or_contradicting_keys_are_refused_by_name() {
    for (name, fam) in [("tiny-mpnet-mlm", "mpnet"), ("tiny-nomic-classifier", "nomic"), ("tiny-gte-ner", "gte"),
        ("tiny-deberta-classifier", "deberta"), ("tiny-deberta-abs", "deberta"), ("tiny-modernbert-mlm", "modernbert")]
    {
        let bytes = gguf_bytes(name, Dtype::Q8_0);
        let cfg = gguf::load_gguf(&bytes).unwrap().config;
        let arch = families::architecture(cfg.family).unwrap();
        let keys = families::arch_keys(&cfg, arch).unwrap();
        assert!(keys.len() > 7, "{name}: the family's own keys");
        for (key, value, _) in &keys {
            let without = rewritten(&bytes, |m| m.retain(|(k, _)| k != key));
            let e = gguf::load_gguf(&without).err().unwrap_or_else(|| panic!("{name} without `{key}` loaded")).to_string();
            assert!(e.contains(&format!("`{key}`")) && e.contains("missing"), "{name} without `{key}`: {e}");
            let other = match value {
                Value::U32(v) => Value::U32(v + 1),
                Value::F32(v) => Value::F32(v * 2.0 + 1.0),
                Value::Bool(b) => Value::Bool(!b),
                Value::String(s) => Value::String(format!("{s}x")),
                Value::Array(_) => Value::Array(gguf::Array::String(vec!["c2p".into()])),
                v => panic!("{key}: {v:?}"),
            };
            let changed = rewritten(&bytes, |m| m.iter_mut().filter(|(k, _)| k == key).for_each(|kv| kv.1 = other.clone()));
            let e = gguf::load_gguf(&changed).err().unwrap_or_else(|| panic!("{name} with another `{key}` loaded")).to_string();
            assert!(e.contains(&format!("`{key}`")) && e.contains("config.json"), "{name} with another `{key}`: {e}");
        }
        eprintln!("{fam} ({name}): {} keys, each refused by name when missing or contradicting", keys.len());
        if fam != "nomic" {
            let without = rewritten(&bytes, |m| m.retain(|(k, _)| k != gguf::KEY_CONFIG_JSON));
            let e = gguf::load_gguf(&without).err().expect("refused").to_string();
            assert!(e.contains("`bertgpu.config_json`"), "{e}");
        }
    }
    // A file that says it is a BERT but holds an MPNet's config.
    let bytes = gguf_bytes("tiny-mpnet-model", Dtype::F16);
    let e = gguf::load_gguf(&rewritten(&bytes, |m| {
        m.iter_mut().filter(|(k, _)| k == "general.architecture").for_each(|kv| kv.1 = Value::String("nomic-bert".into()))
    }))
    .err()
    .expect("refused")
    .to_string();
    assert!(e.contains("nomic-bert") && e.contains("MPNet"), "{e}");
}

/// A NomicBERT file as llama.cpp writes one (no config.json inside; llama.cpp's `nomic-bert.*` keys only): the config
/// is rebuilt from those keys and the tensor shapes, and the model gives the full file's embeddings bit for bit.
#[test]
fn nomic_file_without_config_json_loads_from_llama_cpp_keys() {
    let g = golden(&FAMILIES[1]);
    for name in ["tiny-nomic-model", "tiny-nomic-hub"] {
        let bytes = gguf_bytes(name, Dtype::F16);
        let bare = rewritten(&bytes, |m| m.retain(|(k, _)| k != gguf::KEY_CONFIG_JSON && !k.starts_with("bertgpu.")));
        let full = gguf::load_gguf(&bytes).unwrap().config;
        let rebuilt = gguf::load_gguf(&bare).unwrap().config;
        assert_eq!(
            (rebuilt.family, rebuilt.hidden_size, rebuilt.num_hidden_layers, rebuilt.num_attention_heads, rebuilt.intermediate_size),
            (full.family, full.hidden_size, full.num_hidden_layers, full.num_attention_heads, full.intermediate_size),
            "{name}"
        );
        assert_eq!((rebuilt.positions, rebuilt.feed_forward, rebuilt.biases), (full.positions, full.feed_forward, full.biases));
        assert_eq!((rebuilt.token_type_table, rebuilt.type_vocab_size), (full.token_type_table, full.type_vocab_size));
        assert_eq!((rebuilt.hidden_act, rebuilt.layer_norm_eps, rebuilt.max_position_embeddings),
            (full.hidden_act, full.layer_norm_eps, full.max_position_embeddings));
        let kind = Kind::Embed("model_embeddings");
        assert_eq!(outputs(kind, &g, &from_gguf(&bare, CpuBackend::new())), outputs(kind, &g, &from_gguf(&bytes, CpuBackend::new())));
        let theta_less = rewritten(&bare, |m| m.retain(|(k, _)| k != "nomic-bert.rope.freq_base"));
        let e = gguf::load_gguf(&theta_less).err().expect("refused").to_string();
        assert!(e.contains("`nomic-bert.rope.freq_base`"), "{e}");
    }
}

/// |GPU − CPU| of the same Q8_0 file through the CLI, whose GPU load streams the file's tensors straight to the device
/// (MPNet's bias and DeBERTa's relative table to the host): the families' own GPU bound against transformers
/// (tests/rotary.rs, tests/mpnet.rs `GPU_ATOL` 5e-5: both run the same f32 ops on the same decoded weights in other
/// orders). Measured worst 2.5e-6 (tiny-nomic-model; `-- --nocapture`), 20× under it.
const CLI_GPU_ATOL: f32 = 5e-5;

/// A converted Q8_0 file of each family through `bertgpu embed --device gpu`, against the same file on the CPU.
#[test]
fn cli_streams_each_family_to_the_gpu() {
    if common::gpu().is_none() {
        return;
    }
    let input = "{\"text\": \"hello world, how are you today\"}\n{\"text\": \"a\"}\n";
    for name in ["tiny-mpnet-model", "tiny-nomic-model", "tiny-gte-model", "tiny-deberta-model", "tiny-deberta-abs",
        "tiny-modernbert-model", "tiny-modernbert-mlm", "tiny-jina-model", "tiny-jina-mlm"]
    {
        let out = std::env::temp_dir().join(format!("{name}-cli-gpu-{}.gguf", std::process::id()));
        std::fs::write(&out, gguf_bytes(name, Dtype::Q8_0)).unwrap();
        let embed = |device: &str| {
            let lines = family::run(&["embed", "--device", device, "--model", out.to_str().unwrap()], input);
            lines.iter().flat_map(|l| common::floats(&l["embedding"])).collect::<Vec<f32>>()
        };
        let (cpu, gpu) = (embed("cpu"), embed("gpu"));
        std::fs::remove_file(&out).unwrap();
        family::close(&format!("cli {name} Q8_0 GPU against CPU"), &gpu, &cpu, CLI_GPU_ATOL, 0.0);
    }
}

/// `bertgpu convert` then `bertgpu embed --model FILE.gguf` on the NomicBERT: the F32 file gives the folder's output
/// line for line, which is the goldens' within NomicBERT's bound; the Q8_0 file runs too.
#[test]
fn cli_convert_and_embed_a_nomic_bert() {
    let g = golden(&FAMILIES[1]);
    let src = dir("tiny-nomic-model");
    let input: String = g["model_embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{}\n", json!({"text": c["text"]})))
        .collect();
    let folder = family::run(&["embed", "--device", "cpu", "--model", src.to_str().unwrap()], &input);
    for dtype in ["f32", "q8_0"] {
        let out = std::env::temp_dir().join(format!("nomic-cli-{dtype}-{}.gguf", std::process::id()));
        let st = common::cli(&["convert", "--model", src.to_str().unwrap(), "--dtype", dtype, "--out", out.to_str().unwrap()], "");
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
        let got = family::run(&["embed", "--device", "cpu", "--model", out.to_str().unwrap()], &input);
        assert_eq!(got.len(), folder.len());
        if dtype == "f32" {
            assert_eq!(got, folder, "the F32 file gives the folder's lines");
            family::cli_embeddings("nomic (F32 GGUF)", &json!({ "embeddings": g["model_embeddings"] }), &out, FAMILIES[1].atol);
        } else {
            let v = |o: &[serde_json::Value]| o.iter().flat_map(|l| common::floats(&l["embedding"])).collect::<Vec<_>>();
            let cos = cosine(&v(&got), &v(&folder));
            eprintln!("measured cli nomic Q8_0: cosine to the folder {cos:.6}");
            assert!(cos >= MIN_FLAT_COSINE_Q8_0_TINY, "{cos}");
        }
        std::fs::remove_file(&out).unwrap();
    }
}


/// |ours − PyTorch| per value of the llama.cpp nomic-bert file's mean-pooled embeddings (values up to ~2). Both run
/// f32 on the same decoded weights (gguf-py's dequantization is exact in f32, and so is ours), so only the order of
/// summation differs, and the rotation's sines and cosines: measured max 1.4e-6 on the CPU, 1.5e-6 on lavapipe
/// (`-- --nocapture`). The bound is NomicBERT's f32 bound against transformers (tests/rotary.rs `CPU_ATOL`); a wrong
/// name, theta, gate or ε moves values by far more (an infinite theta moves them by 1.5–2.1 there).
const LLAMACPP_NOMIC_ATOL: f32 = 5e-5;

/// A NomicBERT file written by llama.cpp's own writer under llama.cpp's own tensor-name table
/// (tests/golden/make_llamacpp_nomic_gguf.py: no tokenizer.json, no config.json) tokenizes and embeds as PyTorch's
/// BertTokenizer and NomicBertModel do on the same vocabulary and decoded weights, on the CPU and the GPU.
#[test]
fn llama_cpp_nomic_file_matches_pytorch() {
    use bertgpu::engine::{Device, Engine};
    let root = family::root().join("tests/golden");
    let bytes = std::fs::read(root.join("llamacpp_tiny_nomic.gguf")).unwrap();
    let g = family::golden("llamacpp_tiny_nomic.json");
    let cases = g["embeddings"]["texts"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let m = gguf::load_gguf(&bytes).unwrap();
    assert_eq!(m.config.family, bertgpu::config::Family::NomicBert);
    assert_eq!(m.config.positions, bertgpu::config::Positions::Rotary { theta: g["theta"].as_f64().unwrap() as f32 });
    assert_eq!(m.pooling, Some("mean"), "nomic-bert.pooling_type");
    for (t, c) in texts.iter().zip(cases) {
        let ids = m.tokenizer.encode(t, None).unwrap().ids;
        assert_eq!(ids, family::ids(&c["input_ids"]), "token ids of {t:?}");
    }
    let want: Vec<f32> = cases.iter().flat_map(|c| common::floats(&c["mean_pooled"])).collect();
    for device in [Device::Cpu, Device::Gpu] {
        let e = block_on(Engine::from_gguf(&bytes, device));
        let Some(e) = (if device == Device::Gpu { common::on_gpu("llama_cpp_nomic_file_matches_pytorch", e) } else { Some(e.unwrap()) })
        else {
            continue;
        };
        // One padded batch: the texts differ in length.
        let got = block_on(e.embed(&texts, &EmbedOptions::default())).unwrap();
        family::close(&format!("llama.cpp nomic-bert file on {device:?}"), &got.concat(), &want, LLAMACPP_NOMIC_ATOL, 0.0);
    }
}

/// |CLI GPU load of ModernBERT's F32 GGUF − PyTorch|: tests/modernbert.rs `GPU_ATOL` (measured worst 4.6e-6 there);
/// the F32 file holds the folder's values, and the GPU streams them to the device as from the folder.
const MODERNBERT_CLI_GPU_ATOL: f32 = 2e-5;

/// ModernBERT's files through `bertgpu embed --device gpu` (the tensors streamed to the device, `Wi` kept on the host
/// for its swap) against the PyTorch goldens' mean embeddings: F32 within MODERNBERT_CLI_GPU_ATOL; F16 every vector
/// within tests/gguf.rs's cosine floor; Q8_0 all vectors as one within the tiny checkpoints' floor; Q4_0 printed.
#[test]
fn cli_gpu_modernbert_files_match_pytorch() {
    if common::gpu().is_none() {
        return;
    }
    let f = FAMILIES.iter().find(|f| f.golden == ("modernbert.json", None)).unwrap();
    let g = golden(f);
    for (name, key) in [("tiny-modernbert-model", "model_embeddings"), ("tiny-modernbert-mlm", "embeddings")] {
        let cases = g[key].as_array().unwrap();
        let input: String = cases.iter().map(|c| format!("{}\n", json!({"text": c["text"]}))).collect();
        let want: Vec<Vec<f32>> = cases.iter().map(|c| common::floats(&c["mean"])).collect();
        for dtype in [Dtype::F32, Dtype::F16, Dtype::Q8_0, Dtype::Q4_0] {
            let out = std::env::temp_dir().join(format!("{name}-{dtype:?}-cli-gpu-{}.gguf", std::process::id()));
            std::fs::write(&out, gguf_bytes(name, dtype)).unwrap();
            let lines = family::run(&["embed", "--device", "gpu", "--model", out.to_str().unwrap()], &input);
            std::fs::remove_file(&out).unwrap();
            let got: Vec<Vec<f32>> = lines.iter().map(|l| common::floats(&l["embedding"])).collect();
            let (cos, abs) = compare(&got, &want);
            let flat = cosine(&got.concat(), &want.concat());
            eprintln!("measured cli gpu {name} {dtype:?} against transformers: min cosine {cos:.6} (as one vector \
                {flat:.6}), max |Δ| {abs:.2e}");
            match dtype {
                Dtype::F32 => assert!(abs <= MODERNBERT_CLI_GPU_ATOL, "{name} F32: {abs:e}"),
                Dtype::F16 => assert!(cos >= MIN_COSINE_F16, "{name} F16: cosine {cos:.6} < {MIN_COSINE_F16}"),
                Dtype::Q8_0 => assert!(flat >= MIN_FLAT_COSINE_Q8_0_TINY, "{name} Q8_0: cosine {flat:.6}"),
                _ => {}
            }
        }
    }
}
