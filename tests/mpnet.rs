//! MPNet against PyTorch `transformers` (tests/golden/mpnet.json, made by tests/golden/mpnet.py from the tiny seeded
//! checkpoints tests/models/tiny-mpnet-*): its config (refusals by name), its names (`attention.attn.{q,k,v,o}`,
//! `mpnet.` or the root), RoBERTa's positions, no token types, and the relative position bias (T5's buckets, the
//! attention kernel's bias input) in the embeddings of a padded batch and of each text alone, fill-mask
//! (`lm_head`), sequence classification (`classifier.dense` + tanh + `out_proj`, pairs included), token
//! classification and QA, on the CPU and the GPU backend. Its training, question answering included, is checked by
//! tests/finetune_families.rs; `convert` to GGUF runs (tests/gguf_families.rs).

mod common;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::{BertConfig, Family};
use bertgpu::tasks::Model;
use bertgpu::weights::{HostTensor, Weights};
use common::family::{self, config_json, config_with, dir, embeddings_padded_and_alone, parse_config, refused};
use common::gpu;
use serde_json::{json, Value};

/// The CPU backend on f32 weights. Measured worst |ours − torch| here: 1.1e-5 (token-classification and QA logits;
/// fill-mask logits 6.7e-6, embeddings 2.6e-6, classifier logits 2.5e-6), printed by `cargo test --test mpnet --
/// --nocapture`. 5e-5 (4.7×) is far below what a mistake moves: without the relative bias the mean embeddings move by 0.86 (the golden records it;
/// `missing_bias_is_caught` checks it here).
const CPU_ATOL: f32 = 5e-5;
/// The GPU. Measured worst on lavapipe here: 9.2e-6 (QA logits; fill-mask logits 5.7e-6, embeddings 3.6e-6); 5e-5
/// (5.5×).
const GPU_ATOL: f32 = 5e-5;

/// Random tiny weights give near-ties in fill-mask (the script prints the smallest gap: 5.7e-4, above twice the
/// pipeline score tolerance, so the order must match exactly).
const NEAR_TIES: bool = false;

fn golden() -> Value {
    family::golden("mpnet.json")
}

fn load<B: Backend>(name: &str, backend: B) -> Model<B> {
    let m = family::load(&dir(name), backend);
    assert_eq!(m.config.family, Family::MPNet, "{name}");
    assert_eq!((m.config.max_position_embeddings, m.config.position_offset), (64, 2), "66 rows, from padding_idx + 1");
    assert_eq!(m.config.relative_attention_buckets, 32);
    m
}

fn everything<B: Backend>(mk: impl Fn() -> B, atol: f32) {
    let g = golden();
    let mlm = load("tiny-mpnet-mlm", mk());
    // Embeddings in a padded batch and each text alone: the bias follows offsets over the padded length, which
    // padding must not change for real tokens.
    embeddings_padded_and_alone("mpnet (MPNetForMaskedLM's encoder)", &g, "embeddings", &mlm, atol);
    family::fill_mask("mpnet", &g, &mlm, atol, NEAR_TIES);
    family::classify("mpnet", &g, &load("tiny-mpnet-classifier", mk()), atol, false);
    let bare = load("tiny-mpnet-model", mk());
    embeddings_padded_and_alone("mpnet (MPNetModel at the root)", &g, "model_embeddings", &bare, atol);
    family::token_logits("mpnet", &g, &load("tiny-mpnet-ner", mk()), atol);
    // QA windows `<s> question </s></s> context </s>`; random tiny weights may give near-tied spans.
    family::answer("mpnet", &g, &load("tiny-mpnet-qa", mk()), atol);
}

#[test]
fn mpnet_matches_pytorch_on_cpu() {
    everything(CpuBackend::new, CPU_ATOL);
}

#[test]
fn mpnet_matches_pytorch_on_gpu() {
    if gpu().is_none() {
        return;
    }
    everything(|| gpu().expect("adapter"), GPU_ATOL);
}

/// transformers' bucket of every offset −300..300.
#[test]
fn buckets_match_transformers() {
    let g = golden();
    let offsets = g["buckets"]["offsets"].as_array().unwrap();
    let buckets = g["buckets"]["buckets"].as_array().unwrap();
    assert_eq!(offsets.len(), 601);
    for (o, b) in offsets.iter().zip(buckets) {
        let (o, b) = (o.as_i64().unwrap(), b.as_u64().unwrap() as usize);
        assert_eq!(bertgpu::model::relative::bucket(o, 32), b, "offset {o}");
    }
}

/// The same checkpoint with its relative bias zeroed is far from the golden: the bias is applied, and the tolerance
/// would see it missing.
#[test]
fn missing_bias_is_caught() {
    let g = golden();
    let zeroed = |_: &mut BertConfig, w: &mut Weights| {
        w.insert("encoder.relative_attention_bias.weight", HostTensor::f32(vec![32, 4], vec![0.0; 128]).unwrap());
    };
    let m = family::load_edited(&dir("tiny-mpnet-model"), CpuBackend::new(), zeroed);
    family::moved_without("mpnet without the bias", &g["model_embeddings"], &m, 100.0 * CPU_ATOL,
        &g["without_bias_max_diff"]);
}

/// MPNet's configs: the family from `model_type` or the class; what its code fixes (padding_idx 1, 32 buckets) and
/// classes it lacks are refused by name, never run otherwise.
#[test]
fn config_and_refusals() {
    let v = config_json("tiny-mpnet-mlm");
    let c = parse_config(&v).unwrap();
    assert_eq!(c.family, Family::MPNet);
    assert!(!c.family.has_token_types() && !c.family.has_token_type_table());
    assert_eq!((c.type_vocab_size, c.pad_token_id), (1, 1));
    let no_type = config_with(&v, "model_type", Value::Null).unwrap();
    assert_eq!(no_type, c, "the class names the family");
    for (k, val, says) in [("pad_token_id", json!(0), "pad_token_id 0"),
        ("relative_attention_num_buckets", json!(64), "relative_attention_num_buckets 64"),
        ("architectures", json!(["MPNetForPreTraining"]), "`MPNetForPreTraining` is not a mpnet class"),
        ("architectures", json!(["BertModel"]), "`BertModel` is not a mpnet class")]
    {
        refused(config_with(&v, k, val), says);
    }
}

