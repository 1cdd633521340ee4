//! ModernBERT against PyTorch `transformers` (tests/golden/modernbert.json, made by tests/golden/modernbert.py from the
//! tiny seeded checkpoints tests/models/tiny-modernbert-*): pre-LN layers with a final norm, LayerNorms without β
//! (and with, `norm_bias`), rotary positions with a global and a local theta, the local layers' sliding window
//! (texts longer than it), GeGLU from `Wi` with its first half activated, biases on and off, the heads through
//! `head` (masked LM with the tied decoder, sequence classification on the first token and on the mean, pairs
//! included, token classification, QA), both config key sets (transformers 5's `layer_types` / `rope_parameters`,
//! the hub's `global_attn_every_n_layers` / `global_rope_theta` / `local_rope_theta`), in the embeddings of a padded
//! batch and of each text alone, on the CPU and the GPU backend (its weights streamed into device memory as the file
//! arrives too, and with f16 activations) and through the CLI. Unsupported keys and fine-tuning are refused by name;
//! GGUF: tests/gguf_families.rs.

mod common;

use bertgpu::activation::Activation;
use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::{BertConfig, Family, FeedForward, LayerBiases, Norms, Positions, SlidingWindow};
use bertgpu::sentence::Pooling;
use bertgpu::tasks::Model;
use bertgpu::training::finetune::{FineTuneTask, FineTuner};
use bertgpu::weights::Weights;
use common::family::{self, block_on, config_json, config_with, dir, parse_config, refused};
use common::gpu;
use serde_json::{json, Value};

/// The CPU backend on f32 weights. Measured worst |ours − torch| here: 4.6e-6 (the token-classification logits,
/// compared with rtol = atol; the QA logits 4.1e-6, fill-mask logits 3.3e-6, the `[CLS]` embeddings 3.0e-6), printed
/// by `cargo test --test modernbert -- --nocapture`. 2e-5 (4.3×) is far below what a mistake moves: with the window
/// widened to every key the mean embeddings move by 0.60 (the golden records it; `the_window_is_applied` checks it).
const CPU_ATOL: f32 = 2e-5;
/// The GPU. Measured worst on lavapipe here: 4.6e-6 (the QA logits; the token logits 4.5e-6); 2e-5, the CPU's
/// bound, since both run the same f32 ops in other orders.
const GPU_ATOL: f32 = 2e-5;

fn golden() -> Value {
    family::golden("modernbert.json")
}

fn load<B: Backend>(name: &str, backend: B) -> Model<B> {
    let m = family::load(&dir(name), backend);
    assert_eq!(m.config.family, Family::ModernBert, "{name}");
    assert!(matches!(m.config.positions, Positions::Rotary { theta: 500.0 }), "{name}");
    assert_eq!((m.config.feed_forward, m.config.norms), (FeedForward::Gated, Norms::Pre), "{name}");
    assert!(m.config.sliding_window.is_some(), "{name}");
    m
}

fn everything<B: Backend>(mk: impl Fn() -> B, atol: f32) {
    let g = golden();
    // In a padded batch and each text alone: the window and the rotation follow positions over the padded length,
    // which padding must not change for real tokens.
    let bare = load("tiny-modernbert-model", mk());
    family::embeddings_padded_and_alone("bare model (no biases)", &g, "model_embeddings", &bare, atol);
    let mlm = load("tiny-modernbert-mlm", mk());
    family::embeddings_padded_and_alone("masked LM's encoder (every bias)", &g, "embeddings", &mlm, atol);
    family::fill_mask("modernbert", &g, &mlm, atol, false);
    family::classify("modernbert cls", &g, &load("tiny-modernbert-classifier", mk()), atol, false);
    let mean = json!({ "classifier": g["classifier_mean"] });
    family::classify("modernbert mean", &mean, &load("tiny-modernbert-mean", mk()), atol, false);
    family::token_logits("modernbert", &g, &load("tiny-modernbert-ner", mk()), atol);
    family::answer("modernbert", &g, &load("tiny-modernbert-qa", mk()), atol);
}

#[test]
fn modernbert_matches_pytorch_on_cpu() {
    everything(CpuBackend::new, CPU_ATOL);
}

#[test]
fn modernbert_matches_pytorch_on_gpu() {
    if gpu().is_none() {
        return;
    }
    everything(|| gpu().expect("adapter"), GPU_ATOL);
}

/// f16 activations on the GPU (`--activations f16`): every activation stored as f16, so the embeddings move by its
/// rounding. Measured worst against PyTorch on lavapipe: 6.3e-4 (`-- --nocapture`); the load-time check's own f16
/// tolerance (`CANARY_F16_ATOL`, 1.5e-2) bounds it here too.
const F16_ATOL: f32 = 1.5e-2;

/// On the GPU as a folder loads there: every matrix but `Wi` written into device memory as the file arrives (`Wi`'s
/// halves swap on the host at load), and the model the same as from host weights, bit for bit; the load-time check
/// (its CPU reference a module at a time, read back from device memory) passes, in f32 and with f16 activations,
/// whose embeddings stay within F16_ATOL of PyTorch's.
#[test]
fn placed_on_the_gpu_and_checked_at_load() {
    let cases = &golden()["embeddings"];
    let Some(e) = family::placed_on_the_gpu(&dir("tiny-modernbert-mlm"), "mlp.Wi", cases, GPU_ATOL) else { return };
    assert!(block_on(e.set_f16_activations(true)).unwrap(), "the f16 mode passes the load-time check");
    family::engine_embeddings("f16 activations", &e, cases, F16_ATOL);
}

/// The CLI on the CPU: `embed` on the bare model, `classify` with pairs (the hub's config keys), `fill-mask`.
#[test]
fn cli_runs_modernbert() {
    let g = golden();
    family::cli_embeddings("modernbert", &json!({ "embeddings": g["model_embeddings"] }), &dir("tiny-modernbert-model"),
        CPU_ATOL);
    family::cli_classify(&g, &dir("tiny-modernbert-classifier"));
    family::cli_classify(&json!({ "classifier": g["classifier_mean"] }), &dir("tiny-modernbert-mean"));
    family::cli_fill_mask(&g, &dir("tiny-modernbert-mlm"));
}

/// The bare model with the local layers' window widened to every key (their theta kept) is far from the golden, by
/// what torch's own model moved with that window: the window is applied, on the layers it belongs to, and the
/// tolerance would see it missing.
#[test]
fn the_window_is_applied() {
    let g = golden();
    let wide = |cfg: &mut BertConfig, _: &mut Weights| cfg.sliding_window.as_mut().unwrap().half = 1000;
    let m = family::load_edited(&dir("tiny-modernbert-model"), CpuBackend::new(), wide);
    family::moved_without("modernbert with the window wide", &g["model_embeddings"], &m, 1000.0 * CPU_ATOL,
        &g["wide_window_max_diff"]);
}

/// The configs: transformers 5's keys and the hub's give the same model; biases, norms, heads' choices as written;
/// every key that would change the computation unseen is refused by name.
#[test]
fn configs_and_refusals() {
    let model = config_json("tiny-modernbert-model");
    let c = parse_config(&model).unwrap();
    let window = SlidingWindow { half: 4, theta: 100.0, layers: vec![false, true, true, false] };
    assert_eq!((c.positions, c.sliding_window.as_ref()), (Positions::Rotary { theta: 500.0 }, Some(&window)));
    assert_eq!((c.biases, c.norm_bias, c.layer_norm_eps), (LayerBiases::NONE, false, 1e-5));
    assert_eq!((c.hidden_act, c.pad_token_id), (Activation::Gelu, 3));
    assert!(!c.token_type_table && !c.has_token_types());
    let mlm = parse_config(&config_json("tiny-modernbert-mlm")).unwrap();
    assert_eq!((mlm.biases, mlm.norm_bias, mlm.hidden_act), (LayerBiases::ALL, true, Activation::GeluTanh));
    let heads = mlm.modernbert.as_ref().unwrap();
    assert!(heads.classifier_bias && heads.decoder_bias);
    let mean = parse_config(&config_json("tiny-modernbert-mean")).unwrap();
    let heads = mean.modernbert.as_ref().unwrap();
    assert_eq!((heads.classifier_pooling, heads.classifier_activation), (Pooling::Mean, Activation::Silu));
    assert_eq!(mean.sliding_window.as_ref().unwrap().half, 2);
    // The classifier's config.json is in the hub's older keys; in transformers 5's it reads the same.
    let hub = config_json("tiny-modernbert-classifier");
    assert!(hub.get("layer_types").is_none() && hub.get("global_rope_theta").is_some());
    let mut v5 = hub.clone();
    for k in ["global_attn_every_n_layers", "global_rope_theta", "local_rope_theta"] {
        v5.as_object_mut().unwrap().remove(k);
    }
    v5["layer_types"] = model["layer_types"].clone();
    v5["rope_parameters"] = model["rope_parameters"].clone();
    assert_eq!(parse_config(&v5).unwrap(), parse_config(&hub).unwrap(), "the two key sets name the same model");
    // A theta under rope_parameters wins over the older key, as convert_rope_params_to_dict merges them.
    let mut both = v5.clone();
    both["local_rope_theta"] = json!(7.0);
    assert_eq!(parse_config(&both).unwrap().sliding_window.unwrap().theta, 100.0);
    // Without either, transformers' defaults: every third layer global, thetas 160000 and 10000, a window of 128.
    let mut bare = hub.clone();
    for k in ["global_attn_every_n_layers", "global_rope_theta", "local_rope_theta", "local_attention"] {
        bare.as_object_mut().unwrap().remove(k);
    }
    let d = parse_config(&bare).unwrap();
    let w = d.sliding_window.unwrap();
    assert_eq!((d.positions, w.half, w.theta, w.layers), (Positions::Rotary { theta: 160_000.0 }, 64, 10_000.0,
        vec![false, true, true, false]));
    let two = config_with(&hub, "global_attn_every_n_layers", json!(2)).unwrap().sliding_window.unwrap().layers;
    assert_eq!(two, [false, true, false, true]);

    refused(config_with(&hub, "classifier_pooling", json!("max")), "`classifier_pooling` `max`");
    refused(config_with(&hub, "rope_scaling", json!({"rope_type": "linear", "factor": 2.0})), "rope type `linear`");
    let yarn = json!({"full_attention": {"rope_type": "yarn", "rope_theta": 10.0}});
    refused(config_with(&model, "rope_parameters", yarn), "rope type `yarn`");
    refused(config_with(&model, "rope_parameters", json!({"rope_theta": 10.0})), "`rope_parameters` key `rope_theta`");
    let chunked = json!(["full_attention", "chunked_attention", "full_attention", "full_attention"]);
    refused(config_with(&model, "layer_types", chunked), "`layer_types` entry \"chunked_attention\"");
    refused(config_with(&model, "layer_types", json!(["full_attention"])), "`layer_types` of 1 entries for 4 layers");
    refused(config_with(&hub, "global_attn_every_n_layers", json!(0)), "`global_attn_every_n_layers` 0");
    refused(config_with(&hub, "sliding_window", json!(3)), "`sliding_window` 3");
    refused(config_with(&hub, "hidden_activation", json!("mish")), "`hidden_activation` `mish`");
    refused(config_with(&hub, "classifier_activation", json!("mish")), "`classifier_activation` `mish`");
    refused(config_with(&hub, "head_dim", json!(16)), "`head_dim` 16");
    refused(config_with(&hub, "architectures", json!(["ModernBertForMultipleChoice"])),
        "`ModernBertForMultipleChoice` is not a modernbert class");
    // Keys that change nothing at inference are read as transformers reads them.
    for (k, v) in [("sparse_prediction", json!(true)), ("reference_compile", json!(false)),
        ("deterministic_flash_attn", json!(true)), ("sliding_window", json!(4))] {
        assert!(config_with(&model, k, v.clone()).is_ok(), "{k}: {v}");
    }
}

/// What trains (the fine-tuning itself: tests/finetune_families.rs; LoRA: tests/lora_modernbert_albert.rs): question
/// answering, and dropout with `embedding_dropout` and `mlp_dropout` apart (tests/dropout.rs). `convert` to GGUF runs:
/// tests/gguf_families.rs.
#[test]
fn question_answering_and_dropout_train() {
    let load = |name: &str| {
        let d = dir(name);
        (BertConfig::from_file(d.join("config.json")).unwrap(), Weights::from_safetensors_file(d.join("model.safetensors")).unwrap())
    };
    let be = CpuBackend::new();
    let (cfg, w) = load("tiny-modernbert-qa");
    assert!(FineTuner::new(&be, &cfg, &w, FineTuneTask::Qa, None, 0).is_ok());
    let (cfg, w) = load("tiny-modernbert-classifier");
    // From a classifier, question answering gets a new span head in `classifier`'s place (its 3 labels' is not one).
    assert!(FineTuner::new(&be, &cfg, &w, FineTuneTask::Qa, None, 0).is_ok());
    let mut tr = FineTuner::new(&be, &cfg, &w, FineTuneTask::Sequence, None, 0).unwrap();
    // Dropout trains (tests/dropout.rs), `embedding_dropout` and `mlp_dropout` each at its own probability.
    let drop = bertgpu::training::encoder::DropoutOptions { hidden: 0.1, attention: 0.1, classifier: 0.1, pooler: 0.0,
        embedding: 0.1, seed: 0 };
    tr.set_dropout(Some(drop)).unwrap();
    let mut unequal = cfg.clone();
    unequal.modernbert.as_mut().unwrap().mlp_dropout = 0.2;
    let mut tr = FineTuner::new(&be, &unequal, &w, FineTuneTask::Sequence, None, 0).unwrap();
    let o = tr.checkpoint_dropout(0);
    assert_eq!((o.embedding, o.hidden), (0.0, 0.2), "embedding_dropout 0, mlp_dropout 0.2");
    tr.set_dropout(Some(o)).unwrap();
}

/// Pre-training masks 30% of ModernBERT's tokens unless told otherwise (its paper's rate; `bertgpu pretrain` and the
/// JS `pretrain` take it when `--mlm-probability` / `mlmProbability` is not given), the other families 15%.
#[test]
fn pretraining_masks_thirty_percent_by_default() {
    use bertgpu::config::Family;
    use bertgpu::training::pretrain_data::PretrainOptions;
    assert_eq!(PretrainOptions::family_mlm_probability(Family::ModernBert), 0.3);
    for f in [Family::Bert, Family::Roberta, Family::Gte] {
        assert_eq!(PretrainOptions::family_mlm_probability(f), 0.15);
    }
}
