//! JinaBERT v2 (jina-embeddings-v2-small/base-en, jina-reranker-v1) against a float64 transcription of its authors'
//! code (tests/golden/jina.json, made by tests/golden/jina.py: transformers has no JinaBERT class and the hub's
//! remote code is not reachable): ALiBi's per-head score bias (4 heads, a power of two; 6 heads, the slopes' other
//! branch), the gated feed-forward `mlp.gated_layers` whose first half is activated (geglu; reglu in the
//! classifier), `mlp.wo`, `mlp.layernorm`, in the embeddings of a padded batch and of each text alone, fill-mask and
//! sequence classification (pairs included), on the CPU and the GPU backend and through the CLI; and the refusals by
//! name (the qk-post-norm variant, another feed_forward_type).

mod common;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::{BertConfig, Family, FeedForward, Positions};
use bertgpu::tasks::Model;
use bertgpu::tokenizer::Tokenizer;
use bertgpu::weights::{HostTensor, Weights};
use common::family::{self, block_on, config_json, config_with, dir, parse_config, refused};
use common::gpu;
use serde_json::{json, Value};

/// The CPU backend on f32 weights against the float64 reference. Measured worst |ours − reference| here: 4.9e-6
/// (the masked LM's `[CLS]` embeddings; its fill-mask logits 4.1e-6, compared with rtol = atol; the classifier's
/// logits 3.6e-6), printed by `cargo test --test jina -- --nocapture`. 1e-5 (2×) is far below what a mistake moves:
/// without ALiBi the mean embeddings move by 0.32 (4 heads) and 1.16 (6 heads), with the gated block's halves
/// swapped by 2.9–3.1 (the golden records both; `missing_alibi_is_caught` checks the first).
const CPU_ATOL: f32 = 1e-5;
/// The GPU. Measured worst on lavapipe here: 1.16e-5 (the fill-mask logits, rtol = atol; every embedding ≤ 3.8e-6);
/// 2.5e-5 (2.2×).
const GPU_ATOL: f32 = 2.5e-5;
/// LoRA's fine-tuner over an f16 base (B = 0: the checkpoint) against the f32 one, classifier logits: f16 rounding of
/// the weights only. Measured 9.4e-4; 1e-2 (10.6×) is far below what a wrong `gated_layers` moves (its halves
/// swapped move the embeddings by 2.9–3.1).
const F16_BASE_ATOL: f32 = 1e-2;

fn golden() -> Value {
    family::golden("jina.json")
}

fn load<B: Backend>(name: &str, backend: B) -> Model<B> {
    let m = family::load(&dir(name), backend);
    assert_eq!(m.config.family, Family::JinaBert, "{name}");
    assert_eq!((m.config.positions, m.config.feed_forward), (Positions::Alibi, FeedForward::Gated), "{name}");
    m
}

fn everything<B: Backend>(mk: impl Fn() -> B, atol: f32) {
    let g = golden();
    // In a padded batch and each text alone: ALiBi's table follows the padded length, which padding must not change
    // for real tokens.
    let embeddings = |what: &str, key: &str, m: &Model<B>| {
        family::embeddings_padded_and_alone(what, &g[key], "embeddings", m, atol);
    };
    embeddings("jina 4 heads (bare model)", "model", &load("tiny-jina-model", mk()));
    let mlm = load("tiny-jina-mlm", mk());
    embeddings("jina 6 heads (masked LM's encoder)", "mlm", &mlm);
    family::fill_mask("jina", &g["mlm"], &mlm, atol, false);
    let clf = load("tiny-jina-classifier", mk());
    embeddings("jina reglu (classifier's encoder)", "classifier", &clf);
    family::classify("jina", &g["classifier"], &clf, atol, true);
}

#[test]
fn jina_matches_its_authors_code_on_cpu() {
    everything(CpuBackend::new, CPU_ATOL);
}

#[test]
fn jina_matches_its_authors_code_on_gpu() {
    if gpu().is_none() {
        return;
    }
    everything(|| gpu().expect("adapter"), GPU_ATOL);
}

/// On the GPU as a folder loads there: every matrix but `mlp.gated_layers` written into device memory as the file
/// arrives (its halves swap on the host at load), the model the same as from host weights, bit for bit, and the
/// load-time check (its CPU reference a module at a time, read back from device memory) passes.
#[test]
fn placed_on_the_gpu_and_checked_at_load() {
    family::placed_on_the_gpu(&dir("tiny-jina-mlm"), "mlp.gated_layers", &golden()["mlm"]["embeddings"], GPU_ATOL);
}

/// The slopes to the last bit of the reference's Python floats, for both branches of their formula.
#[test]
fn slopes_are_the_references() {
    let g = golden();
    for key in ["model", "mlm"] {
        let heads = g[key]["heads"].as_u64().unwrap() as usize;
        let want: Vec<f64> = g[key]["slopes"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(want.len(), heads);
        assert_eq!(bertgpu::model::alibi::slopes(heads), want, "{heads} heads");
    }
}

/// The CLI on the CPU: `embed` on the bare model, `classify` with pairs, `fill-mask`.
#[test]
fn cli_runs_jina() {
    let g = golden();
    family::cli_embeddings("jina", &g["model"], &dir("tiny-jina-model"), CPU_ATOL);
    family::cli_classify(&g["classifier"], &dir("tiny-jina-classifier"));
    family::cli_fill_mask(&g["mlm"], &dir("tiny-jina-mlm"));
}

/// Without ALiBi (no position terms at all) the embeddings are far from the golden, by what the reference moved
/// with its bias left out: the bias is applied, and the tolerance would see it missing.
#[test]
fn missing_alibi_is_caught() {
    let g = golden();
    for (key, name) in [("model", "tiny-jina-model"), ("mlm", "tiny-jina-mlm")] {
        // No table, no rotation, and (without DeBERTa's keys) no relative terms.
        let m = family::load_edited(&dir(name), CpuBackend::new(), |cfg, _| cfg.positions = Positions::Relative);
        let g = &g[key];
        family::moved_without(&format!("jina {key} without ALiBi"), &g["embeddings"], &m, 1000.0 * CPU_ATOL,
            &g["without_alibi_max_diff"]);
    }
}

/// What bertgpu does not run is refused by name: the qk-post-norm variant (jina-embeddings-v2-base-code) by its
/// tensors and by its `auto_map`, a `feed_forward_type` other than geglu/reglu, ALiBi on another model_type.
#[test]
fn refusals_by_name() {
    let d = dir("tiny-jina-model");
    let v = config_json("tiny-jina-model");
    refused(config_with(&v, "feed_forward_type", json!("original")), "feed_forward_type `original`");
    refused(config_with(&v, "feed_forward_type", json!("swiglu")), "feed_forward_type `swiglu`");
    let qk_post_norm = json!({"AutoModel": "jinaai/jina-bert-v2-qk-post-norm--modeling_bert.JinaBertModel"});
    refused(config_with(&v, "auto_map", qk_post_norm), "qk-post-norm");
    refused(config_with(&v, "model_type", json!("distilbert")), "architecture `JinaBertModel`");
    let mut roberta = v.clone();
    roberta["model_type"] = json!("roberta");
    roberta["architectures"] = json!(["RobertaModel"]);
    refused(parse_config(&roberta), "`alibi` with model_type `roberta`");

    // The qk-post-norm variant's tensors, beside an otherwise loadable checkpoint.
    let cfg = BertConfig::from_file(d.join("config.json")).unwrap();
    let w = Weights::from_safetensors_file(d.join("model.safetensors")).unwrap();
    let tok = Tokenizer::from_dir(&d, cfg.max_position_embeddings).unwrap();
    assert!(Model::new(CpuBackend::new(), cfg.clone(), tok.clone(), &w).is_ok());
    for name in ["encoder.layer.0.attention.self.layer_norm_q.weight", "encoder.layer.1.mlp.up_gated_layer.weight"] {
        let mut qk = w.clone();
        qk.insert(name, HostTensor::f32(vec![cfg.hidden_size], vec![1.0; cfg.hidden_size]).unwrap());
        let e = Model::new(CpuBackend::new(), cfg.clone(), tok.clone(), &qk).err().expect(name).to_string();
        assert!(e.contains(name) && e.contains("qk-post-norm"), "{e}");
    }
}

/// Sequence classification and embeddings train (tests/finetune_families.rs checks the former against the authors'
/// code, `jina_*`), LoRA on them (tests/lora_modernbert_albert.rs's `jina_*` against peft) and pre-training
/// (tests/pretrain_families.rs's `jina`), LoRA over an f16 base too (`gated_layers` kept in f32 for its row gather);
/// what has no JinaBERT class (token classification, question answering) is refused by name before any work.
#[test]
fn what_has_no_jinabert_class_is_refused_by_name() {
    use bertgpu::training::finetune::{FineTuneTask, FineTuner};
    use bertgpu::training::lora::LoraOptions;
    let d = dir("tiny-jina-classifier");
    let cfg = BertConfig::from_file(d.join("config.json")).unwrap();
    let w = Weights::from_safetensors_file(d.join("model.safetensors")).unwrap();
    let be = CpuBackend::new();
    for (task, says) in [(FineTuneTask::Token, "JinaBertForTokenClassification"),
        (FineTuneTask::Qa, "JinaBertForQuestionAnswering")] {
        let e = FineTuner::new(&be, &cfg, &w, task, Some(3), 0).err().expect(says).to_string();
        assert!(e.contains(says), "{task:?}: {e}");
    }
    // Pre-training needs the masked-LM head, which the classifier has not.
    let e = FineTuner::new(&be, &cfg, &w, FineTuneTask::Pretrain, None, 0).err().expect("no cls.predictions").to_string();
    assert!(e.contains("JinaBertForMaskedLM"), "{e}");
    let (md, mlm) = (dir("tiny-jina-mlm"), FineTuneTask::Pretrain);
    let mcfg = BertConfig::from_file(md.join("config.json")).unwrap();
    let mw = Weights::from_safetensors_file(md.join("model.safetensors")).unwrap();
    assert!(FineTuner::new(&be, &mcfg, &mw, mlm, None, 0).is_ok());
    let mut tr = FineTuner::new(&be, &cfg, &w, FineTuneTask::Sequence, None, 0).unwrap();
    assert!(FineTuner::new(&be, &cfg, &w, FineTuneTask::Embedding, None, 0).is_ok());
    let opts = LoraOptions { r: 4, alpha: 8.0, targets: bertgpu::training::lora::LoraTargets::All, merge: false };
    tr.set_lora(&be, opts, 0).unwrap();
    assert_eq!(tr.encoder.lora.as_ref().unwrap().adapters.len(), 6 * cfg.num_hidden_layers);
    // LoRA over an f16 base (as a GGUF conversion stores it): `gated_layers`, read through a row gather, is kept in
    // f32, and the model starts as the f32 checkpoint up to f16 rounding.
    let mut half = w.clone();
    for name in w.names() {
        if name.contains(".weight") && (name.contains("encoder.layer.") || name.contains("word_embeddings")) {
            let t = w.stored(name).unwrap();
            half.insert(name, bertgpu::weights::quant::to_f16(t).unwrap());
        }
    }
    let mut frozen = FineTuner::new_with(&be, &cfg, &half, FineTuneTask::Sequence, None, 0, true).unwrap();
    frozen.set_lora(&be, opts, 0).unwrap();
    let tok = Tokenizer::from_dir(&d, cfg.max_position_embeddings).unwrap();
    let batch = tok.batch(&[tok.encode("a tiny test", None).unwrap()]);
    let read = |t: &FineTuner<CpuBackend>| block_on(be.read(&t.logits(&be, &batch).unwrap())).unwrap();
    let d16 = read(&frozen).iter().zip(read(&tr)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    eprintln!("LoRA over the f16 base: logits within {d16:.1e} of the f32 checkpoint's");
    assert!(d16 <= F16_BASE_ATOL, "LoRA over the f16 base: logits {d16} from the f32 checkpoint's");
}

/// `bertgpu convert` (F16 and Q8_0) then `bertgpu embed --model FILE.gguf` on the CPU: the golden's mean embeddings
/// of the 4-head model (hidden 32: its matrices are whole Q8_0 blocks), per vector within tests/gguf.rs's F16 floor
/// (`MIN_COSINE_F16`) and tests/gguf_families.rs's tiny-checkpoint Q8_0 floor (0.995; measured 0.9983 here per vector).
#[test]
fn cli_converts_and_embeds_jina() {
    let g = golden();
    let cases = g["model"]["embeddings"].as_array().unwrap();
    let input: String = cases.iter().map(|c| format!("{}\n", json!({"text": c["text"]}))).collect();
    for (dtype, floor) in [("f16", common::MIN_COSINE_F16), ("q8_0", 0.995)] {
        let out = std::env::temp_dir().join(format!("bertgpu-jina-{dtype}-{}.gguf", std::process::id()));
        let d = dir("tiny-jina-model");
        family::run(&["convert", "--model", d.to_str().unwrap(), "--dtype", dtype, "--out", out.to_str().unwrap()], "");
        let lines = family::run(&["embed", "--model", out.to_str().unwrap(), "--device", "cpu"], &input);
        std::fs::remove_file(&out).unwrap();
        assert_eq!(lines.len(), cases.len(), "one line per text");
        let mut worst = 1f64;
        for (l, c) in lines.iter().zip(cases) {
            let cos = common::cosine(&common::floats(&l["embedding"]), &common::floats(&c["mean"]));
            worst = worst.min(cos);
        }
        eprintln!("measured cli jina {dtype} GGUF against the reference: min cosine {worst:.6}");
        assert!(worst >= floor, "{dtype}: cosine {worst} < {floor}");
    }
}
