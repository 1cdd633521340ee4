//! NomicBERT and GTE against PyTorch `transformers` (tests/golden/rotary.json, made by tests/golden/rotary.py from the
//! tiny seeded checkpoints tests/models/tiny-nomic-* and tiny-gte-*): rotary positions on the queries and keys (no
//! position table), the gated feed-forward (SwiGLU, GeGLU), the families' biases and names (nomic-ai's `Wqkv`,
//! `fc11`/`fc12`; GTE's packed `qkv_proj` and `up_gate_proj`), their config keys (transformers' and the hub
//! repositories'), in the embeddings of a padded batch and of each text alone, fill-mask, sequence classification
//! (pairs included) and token classification, on the CPU and the GPU backend. Their fine-tuning is refused by name.

mod common;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::{BertConfig, Family, FeedForward, LayerBiases, Positions};
use bertgpu::tasks::Model;
use bertgpu::training::finetune::{FineTuneTask, FineTuner};
use bertgpu::weights::Weights;
use common::family::{self, config_json, config_with, dir, embeddings_padded_and_alone, parse_config, refused};
use common::gpu;
use serde_json::{json, Value};

/// The CPU backend on f32 weights. Measured worst |ours − torch| here: 2.2e-5 (GTE's token-classification logits,
/// compared with rtol = atol; its `[CLS]` embeddings 1.4e-5, fill-mask logits 1.1e-5, NomicBERT's worst 1.2e-5),
/// printed by `cargo test --test rotary -- --nocapture`. 5e-5 (2.3×) is far below what a mistake moves: with an
/// infinite theta (one pair of dimensions per head turning) the mean embeddings move by 1.5–2.1 (the golden records
/// it; `missing_rotation_is_caught` checks it).
const CPU_ATOL: f32 = 5e-5;
/// The GPU. Measured worst on lavapipe here: 1.5e-5 (GTE's `[CLS]` embeddings; its token logits 1.25e-5); 5e-5
/// (3.4×), the CPU's bound, since both run the same f32 ops in other orders.
const GPU_ATOL: f32 = 5e-5;

fn golden() -> Value {
    family::golden("rotary.json")
}

fn load<B: Backend>(name: &str, family: Family, backend: B) -> Model<B> {
    let m = family::load(&dir(name), backend);
    assert_eq!(m.config.family, family, "{name}");
    assert!(matches!(m.config.positions, Positions::Rotary { .. }), "{name}");
    assert_eq!(m.config.feed_forward, FeedForward::Gated, "{name}");
    m
}

fn everything<B: Backend>(mk: impl Fn() -> B, atol: f32) {
    let g = golden();
    // Embeddings in a padded batch and each text alone: the rotation follows positions over the padded length, which
    // padding must not change for real tokens.
    for (fam, family, prefix) in [("nomic", Family::NomicBert, "tiny-nomic"), ("gte", Family::Gte, "tiny-gte")] {
        let g = &g[fam];
        let mlm = load(&format!("{prefix}-mlm"), family, mk());
        embeddings_padded_and_alone(&format!("{fam} (masked LM's encoder)"), g, "embeddings", &mlm, atol);
        family::fill_mask(fam, g, &mlm, atol, false);
        let bare = load(&format!("{prefix}-model"), family, mk());
        embeddings_padded_and_alone(&format!("{fam} (bare model)"), g, "model_embeddings", &bare, atol);
        family::classify(fam, g, &load(&format!("{prefix}-classifier"), family, mk()), atol, true);
        family::token_logits(fam, g, &load(&format!("{prefix}-ner"), family, mk()), atol);
    }
    // nomic-ai's hub config keys over the same weights as tiny-nomic-model.
    let hub = load("tiny-nomic-hub", Family::NomicBert, mk());
    embeddings_padded_and_alone("nomic (the hub's config keys)", &g["nomic"], "model_embeddings", &hub, atol);
}

#[test]
fn rotary_families_match_pytorch_on_cpu() {
    everything(CpuBackend::new, CPU_ATOL);
}

#[test]
fn rotary_families_match_pytorch_on_gpu() {
    if gpu().is_none() {
        return;
    }
    everything(|| gpu().expect("adapter"), GPU_ATOL);
}

/// gte-*-en-v1.5's fixed NTK scaling (`rope_scaling` `{"type": "ntk", "factor": 2.0}` under the hub's keys) as its
/// repositories' code computes it (tests/golden/gte_ntk.py): the inverse frequencies to the last bit, and the
/// embeddings on both backends, batched and each text alone; the config with the scaling left out is far off (by
/// what torch's own model moved, recorded in the golden), so the scaling is applied.
#[test]
fn gte_ntk_scaling_matches_its_authors_code() {
    let g = family::golden("gte_ntk.json");
    let d = dir("tiny-gte-ntk");
    let cfg = BertConfig::from_file(d.join("config.json")).unwrap();
    assert_eq!((cfg.family, cfg.positions, cfg.rope_ntk_factor), (Family::Gte, Positions::Rotary { theta: 500.0 }, Some(2.0)));
    let table = bertgpu::model::rotary::Rope::new(&cfg).unwrap().table(2).unwrap();
    let half = table.shape[1] / 2;
    let want: Vec<f32> = g["inv_freq"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    // Position 1's angles are the inverse frequencies themselves: the same f32 gives the same cosine and sine.
    let row: Vec<f32> = table.to_f32().unwrap()[2 * half..].to_vec();
    for (i, f) in want.iter().enumerate() {
        assert_eq!((row[i], row[half + i]), (f.cos(), f.sin()), "frequency {i}: torch's {f}");
    }
    let on_cpu = load("tiny-gte-ntk", Family::Gte, CpuBackend::new());
    embeddings_padded_and_alone("gte ntk", &g, "embeddings", &on_cpu, CPU_ATOL);
    if let Some(gpu) = gpu() {
        let on_gpu = load("tiny-gte-ntk", Family::Gte, gpu);
        embeddings_padded_and_alone("gte ntk (gpu)", &g, "embeddings", &on_gpu, GPU_ATOL);
    }
    let plain = family::load_edited(&d, CpuBackend::new(), |cfg, _| cfg.rope_ntk_factor = None);
    family::moved_without("gte without the NTK scaling", &g["embeddings"], &plain, 1000.0 * CPU_ATOL,
        &g["without_scaling_max_diff"]);
}

/// The CLI on the CPU: `embed` on both bare models (NomicBERT under the hub's config keys too), `classify` with pairs,
/// `fill-mask`.
#[test]
fn cli_runs_the_rotary_families() {
    let g = golden();
    for (fam, prefix) in [("nomic", "tiny-nomic"), ("gte", "tiny-gte")] {
        let g = &g[fam];
        family::cli_embeddings(fam, &json!({ "embeddings": g["model_embeddings"] }), &dir(&format!("{prefix}-model")), CPU_ATOL);
        family::cli_classify(g, &dir(&format!("{prefix}-classifier")));
        family::cli_fill_mask(g, &dir(&format!("{prefix}-mlm")));
    }
    family::cli_embeddings("nomic hub", &json!({ "embeddings": g["nomic"]["model_embeddings"] }), &dir("tiny-nomic-hub"), CPU_ATOL);
}

/// The same checkpoint with an infinite theta (every frequency 0 but the first, `theta^0 = 1`: one pair of
/// dimensions per head turns) is far from the golden, by what torch's own model with that theta moved: the rotation
/// is applied, every pair of it, and the tolerance would see one missing.
#[test]
fn missing_rotation_is_caught() {
    let g = golden();
    for (fam, name) in [("nomic", "tiny-nomic-model"), ("gte", "tiny-gte-model")] {
        let infinite = |cfg: &mut BertConfig, _: &mut Weights| cfg.positions = Positions::Rotary { theta: f32::INFINITY };
        let m = family::load_edited(&dir(name), CpuBackend::new(), infinite);
        let g = &g[fam];
        family::moved_without(&format!("{fam} with theta = ∞"), &g["model_embeddings"], &m, 1000.0 * CPU_ATOL,
            &g["without_rotation_max_diff"]);
    }
}

/// The configs: the family from `model_type` (GTE's hub `"new"` too) or the class, the rotary keys of both key sets,
/// the biases; every key that would change the computation unseen is refused by name.
#[test]
fn configs_and_refusals() {
    // NomicBERT, transformers' keys and the hub's: the same model.
    let nomic = config_json("tiny-nomic-model");
    let c = parse_config(&nomic).unwrap();
    assert_eq!((c.family, c.positions, c.biases), (Family::NomicBert, Positions::Rotary { theta: 100.0 }, LayerBiases::NONE));
    assert!(c.token_type_table && c.family.has_token_types());
    assert_eq!(c.hidden_act, bertgpu::activation::Activation::Silu);
    let hub = parse_config(&config_json("tiny-nomic-hub")).unwrap();
    assert_eq!((hub.hidden_size, hub.num_hidden_layers, hub.num_attention_heads, hub.intermediate_size),
        (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size));
    assert_eq!((hub.positions, hub.hidden_act, hub.layer_norm_eps, hub.max_position_embeddings),
        (c.positions, c.hidden_act, c.layer_norm_eps, c.max_position_embeddings));
    // GTE: the hub's model_type and classes; no token-type table at type_vocab_size 0.
    let gte = config_json("tiny-gte-model");
    let g = parse_config(&gte).unwrap();
    assert_eq!((g.family, g.positions), (Family::Gte, Positions::Rotary { theta: 500.0 }));
    assert_eq!(g.biases, LayerBiases { up: false, ..LayerBiases::ALL });
    assert!(!g.token_type_table);
    let mut new = gte.clone();
    new["model_type"] = json!("new");
    new["architectures"] = json!(["NewModel"]);
    new["position_embedding_type"] = json!("rope");
    new["rope_theta"] = json!(500.0);
    new.as_object_mut().unwrap().remove("rope_parameters");
    let from_hub = parse_config(&new).unwrap();
    assert_eq!(BertConfig { architectures: g.architectures.clone(), ..from_hub }, g, "the hub's keys name the same model");
    assert!(parse_config(&config_json("tiny-gte-classifier")).unwrap().token_type_table);

    let hubv = config_json("tiny-nomic-hub");
    for (k, val, says) in [
        ("qkv_proj_bias", json!(true), "qkv_proj_bias true"),
        ("prenorm", json!(true), "prenorm true"),
        ("rotary_emb_fraction", json!(0.5), "rotary_emb_fraction 0.5"),
        ("rotary_emb_interleaved", json!(true), "rotary_emb_interleaved true"),
        ("rotary_scaling_factor", json!(2.0), "rotary_scaling_factor 2"),
        ("activation_function", json!("gelu"), "activation_function `gelu`"),
        ("use_rms_norm", json!(true), "use_rms_norm true"),
    ] {
        refused(config_with(&hubv, k, val), says);
    }
    // GTE's fixed NTK scaling runs (gte_ntk_scaling_matches_its_authors_code); its mixed form, another family's
    // NTK, other scalings and a factor that would leave the rotation plain are refused.
    let ntk = json!({"type": "ntk", "factor": 2.0});
    assert_eq!(config_with(&new, "rope_scaling", ntk).unwrap().rope_ntk_factor, Some(2.0));
    let mixed = json!({"type": "ntk", "factor": 2.0, "mixed_b": 0.5});
    refused(config_with(&new, "rope_scaling", mixed), "rope_scaling mixed_b 0.5");
    refused(config_with(&new, "rope_scaling", json!({"type": "ntk", "factor": 1.0})), "rope_scaling factor 1");
    refused(config_with(&new, "rope_scaling", json!({"type": "dynamic", "factor": 2.0})), "rope type `dynamic`");
    refused(config_with(&nomic, "rope_scaling", json!({"type": "ntk", "factor": 2.0})), "rope type `ntk`");
    refused(config_with(&gte, "rope_parameters", json!({"rope_type": "yarn", "rope_theta": 10.0})), "rope type `yarn`");
    refused(config_with(&new, "logn_attention_scale", json!(true)), "logn_attention_scale true");
    refused(config_with(&new, "layer_norm_type", json!("rms_norm")), "layer_norm_type `rms_norm`");
    refused(config_with(&nomic, "head_dim", json!(16)), "head_dim 16");
    let qa = json!(["GteForQuestionAnswering"]);
    refused(config_with(&gte, "architectures", qa), "`GteForQuestionAnswering` is not a gte class");
    refused(config_with(&nomic, "hidden_act", json!("mish")), "hidden_act `mish`");
}

/// Question answering is refused by name: transformers has no `...ForQuestionAnswering` for either family to write
/// or check against. (Every other task trains: tests/finetune_families.rs, tests/pretrain_families.rs; `convert` to
/// GGUF runs: tests/gguf_families.rs.)
#[test]
fn question_answering_is_refused_by_name() {
    for (name, class) in [("tiny-nomic-classifier", "NomicBertForQuestionAnswering"), ("tiny-gte-classifier", "GteForQuestionAnswering")] {
        let d = dir(name);
        let cfg = BertConfig::from_file(d.join("config.json")).unwrap();
        let w = Weights::from_safetensors_file(d.join("model.safetensors")).unwrap();
        let e = FineTuner::new(&CpuBackend::new(), &cfg, &w, FineTuneTask::Qa, None, 0).err().expect(name).to_string();
        assert!(e.contains(class), "{e}");
        assert!(FineTuner::new(&CpuBackend::new(), &cfg, &w, FineTuneTask::Sequence, None, 0).is_ok(), "{name} trains");
    }
}
