//! LoRA on ModernBERT and on ALBERT's shared layer against Hugging Face `peft` (tests/golden/lora_modernbert_albert.json,
//! from tests/golden/lora_modernbert_albert.py, float64), on the CPU and the GPU, starting from the golden's A and B:
//! which parameters train (exactly peft's), the loss, every trained gradient, five AdamW steps (losses, gradient
//! norms, parameters after), the frozen weights unchanged bit for bit, the merge against `merge_and_unload`, the
//! adapter files against what `save_pretrained` writes; then the exported adapter loaded back through
//! `weights::peft::apply_lora` (what `--adapter` and `Bert.load`'s `adapter` run) into an inference model gives the
//! trained model's logits.
//!
//! ModernBERT's adapters sit on its packed modules whole (`attn.Wqkv`; with "all" `attn.Wo`, `mlp.Wi`, `mlp.Wo`);
//! the one on `mlp.Wi` is in the module's `[input; gate]` order while the forward reads the halves swapped. ALBERT's
//! sit once on the shared layer's modules and run at every pass, their gradients summed over the passes. With
//! `all-projection` an adapter also sits on the embeddings' projection into the layers' width (ALBERT's
//! `embedding_hidden_mapping_in`, ELECTRA's `embeddings_project`), below every layer: the gradient reaches it through
//! them all. JinaBERT's (`jina_*`, tests/golden/lora_jina.json from tests/golden/lora_jina.py: peft on the float64
//! transcription of the authors' code) sit on BERT's attention modules and, with "all", on `mlp.gated_layers` whole
//! (in the module's `[gated; non_gated]` order while the forward reads the halves swapped) and `mlp.wo`.
//!
//! `BERTGPU_LORA_EXPORT=DIR` also writes each case's adapter after its steps on the CPU, the merged folder and our
//! logits into `DIR/<case>`, for tests/golden/lora_modernbert_albert_peft_load.py (peft loads them and gives our
//! logits and merge).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::BertConfig;
use bertgpu::tasks::Model;
use bertgpu::tokenizer::{Encoded, Tokenizer};
use bertgpu::training::finetune::{FineTuneTask, FineTuner, Targets};
use bertgpu::training::lora::{LoraOptions, LoraTargets};
use bertgpu::training::lora_peft;
use bertgpu::training::optim::StepOptions;
use bertgpu::weights::peft::apply_lora;
use bertgpu::weights::Weights;
use serde_json::Value;

mod common;

use common::golden_grads::{batch, floats, max_diff};
use common::lora::{check_gradients, check_params_after, check_steps, export_for_peft, options, set_init, strings, LoraCase};

/// Gradient error per tensor, `‖ours − golden‖ / ‖golden‖`: tests/lora_golden.rs's `CPU_GRAD_RTOL` (f32 against
/// float64 through 2–4 layers or passes). Measured worst on the CPU: 3.9e-6 (jina_qv; 3.4e-6 albert_qv); 2e-5 is 5.1×
/// that, and a wrong formula (B's rows of `mlp.Wi` not swapped: a loss off by 1e-2; of JinaBERT's `gated_layers`:
/// jina_all's loss 1.91 for peft's 2.65) is off by far more.
const CPU_GRAD_RTOL: f64 = 2e-5;
/// tests/lora_golden.rs's `GPU_GRAD_RTOL`: the GPU's other summation orders and its ulp-level exp/erf. Measured worst
/// on lavapipe: 4.1e-6 (jina_all; 3.7e-6 albert_qv); 2e-5 is 4.9× that.
const GPU_GRAD_RTOL: f64 = 2e-5;
/// Loss and gradient norm per step, relative: tests/lora_golden.rs's `LOSS_RTOL`. Measured worst 6.8e-7 (modern_all,
/// CPU), 7.1e-7 (modern_qv, lavapipe); JinaBERT's 1.8e-6 (jina_qv, CPU), 1.5e-6 (jina_all, lavapipe); 5e-6 is 2.7×
/// that.
const LOSS_RTOL: f64 = 5e-6;
/// Parameters after 5 AdamW steps at lr 1e-3: tests/lora_golden.rs's `PARAM_ATOL` (only the adapters and the head
/// move). Measured worst 7.4e-7 (albert_all, CPU), 1.1e-6 (modern_all, lavapipe); 3e-6 is 2.7× that.
const PARAM_ATOL: f64 = 3e-6;
/// Merged weights after the steps, against peft's `merge_and_unload`: tests/lora_golden.rs's `MERGED_ATOL`.
/// Measured worst 2.0e-7 (albert_all, CPU), 3.1e-7 (modern_all, lavapipe); 1e-6 is 3.2× that.
const MERGED_ATOL: f64 = 1e-6;
/// The adapter folded in at load (f32, `apply_lora`) against our merge (f64 sums of the same f32 values): measured
/// 1.2e-7; 1e-6 is 8× that (tests/finetune_families.rs's `MERGE_ATOL` for the other families).
const LOAD_MERGE_ATOL: f64 = 1e-6;
/// The inference model's logits (CPU) with the adapter folded in against the trained model's: f32 rounding of
/// `W + s·B·A` and of the two forwards' summation orders. Measured worst 3.6e-6 (albert_all trained on the CPU),
/// 4.2e-6 (trained on lavapipe); JinaBERT's 6.9e-6 (jina_all, CPU), 5.7e-6 (lavapipe): 1e-5 is 1.4× that, and an
/// adapter missing from the load moves logits by 1e-2 or more (the merged weights moved by more than 1e-3, checked
/// above).
const LOGITS_ATOL: f32 = 1e-5;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn golden() -> &'static Value {
    static G: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    G.get_or_init(|| common::family::golden("lora_modernbert_albert.json"))
}

/// JinaBERT's cases (tests/golden/lora_jina.json, from tests/golden/lora_jina.py: peft on the float64 transcription
/// of the authors' code).
fn jina_golden() -> &'static Value {
    static G: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    G.get_or_init(|| common::family::golden("lora_jina.json"))
}

/// Case `name` of its golden (`jina_*`: lora_jina.json's), and its adapters' targets (`_qv`: the query and value; `_proj`: every linear and the
/// embeddings' projection; else every linear).
fn case(name: &str) -> (LoraCase, LoraOptions) {
    let g = if name.starts_with("jina") { jina_golden() } else { golden() };
    let c = LoraCase::load(&g["cases"][name]);
    let targets = match name.rsplit('_').next() {
        Some("qv") => LoraTargets::Qv,
        Some("proj") => LoraTargets::AllProjection,
        _ => LoraTargets::All,
    };
    let opts = options(&c.g, targets);
    (c, opts)
}

/// The model with LoRA set up, A and B overwritten with the golden's starting values.
fn tuner<B: Backend>(be: &B, c: &LoraCase, opts: LoraOptions, name: &str) -> FineTuner<B> {
    let mut tr = FineTuner::new(be, &c.cfg, &c.weights, c.task, None, 0).unwrap();
    tr.set_lora(be, opts, 0).unwrap();
    let set = set_init(be, &mut tr, &c.g, name);
    assert_eq!(tr.encoder.lora.as_ref().unwrap().adapters.len() * 2, set, "{name}: and no other");
    tr
}

fn named<B: Backend>(be: &B, tr: &FineTuner<B>) -> BTreeMap<String, Vec<f32>> {
    pollster::block_on(tr.named(be, None)).unwrap().into_iter().collect()
}

fn check<B: Backend>(be: &B, name: &str, grad_rtol: f64) {
    let (c, opts) = case(name);
    let mut tr = tuner(be, &c, opts, name);
    let targets = c.targets();

    // Which parameters train, the loss and their gradients; five AdamW steps.
    let (want_trained, worst) = check_gradients(be, &mut tr, &c.batch, &targets, &c.g, name, grad_rtol, LOSS_RTOL);
    let before = named(be, &tr);
    assert_eq!(floats(&c.g["losses"]).len(), 5, "{name}: the golden's five steps");
    let worst_step = check_steps(be, &mut tr, &c.batch, &targets, &c.g, name, LOSS_RTOL);
    let after = named(be, &tr);
    assert_eq!(c.g["params_after"].as_object().unwrap().len(), want_trained.len(), "{name}");
    let worst_param = check_params_after(&after, &c.g, name, PARAM_ATOL);
    for (n, v) in &before {
        if !want_trained.contains(n) {
            assert_eq!(v, &after[n], "{name}: frozen {n} changed");
        }
    }

    // The merge against peft's merge_and_unload; the targeted weights moved.
    let merged: BTreeMap<String, Vec<f32>> = pollster::block_on(lora_peft::merged(be, &tr)).unwrap().into_iter().collect();
    assert!(merged.keys().all(|k| !k.contains("lora_")), "{name}: adapters left in the merged model");
    let want_merged = c.g["merged"].as_object().unwrap();
    assert!(!want_merged.is_empty());
    let mut worst_merged = 0f64;
    for (n, w) in want_merged {
        let d = max_diff(&merged[n], &floats(w));
        assert!(d <= MERGED_ATOL, "{name}: merged {n} differs from peft's merge_and_unload by {d}");
        let moved = max_diff(&merged[n], &after[n].iter().map(|&x| x as f64).collect::<Vec<_>>());
        assert!(moved > 1e-3, "{name}: {n}: the merge moved it by only {moved:e}");
        worst_merged = worst_merged.max(d);
    }

    // The adapter files: the tensors peft's save_pretrained writes, and its settings.
    let (config, st) = pollster::block_on(lora_peft::export_adapter(be, &tr, Some("base"), None)).unwrap();
    let keys: BTreeSet<String> = Weights::from_safetensors(&st).unwrap().names().into_iter().map(String::from).collect();
    assert_eq!(keys, strings(&c.g["saved_keys"]), "{name}: adapter_model.safetensors's names");
    let cj: Value = serde_json::from_str(&config).unwrap();
    let want_cfg = &c.g["saved_config"];
    assert_eq!(strings(&cj["target_modules"]), strings(&want_cfg["target_modules"]), "{name}: target_modules");
    for k in ["r", "lora_alpha", "task_type", "modules_to_save", "peft_type", "bias"] {
        assert_eq!(cj[k], want_cfg[k], "{name}: adapter_config.json's {k}");
    }
    eprintln!("{name} LoRA on {}: worst gradient relative error {:.2e} ({}), loss/grad-norm {worst_step:.2e}, parameters \
        after 5 steps {worst_param:.2e}, merged weights {worst_merged:.2e}", be.name(), worst.1, worst.0);

    load_back(be, &c, name, &tr, &config, &st, &merged);
}

/// The exported adapter folded into the checkpoint at load (`apply_lora`) equals our merge, and an inference model
/// built from it gives the trained model's logits; with `BERTGPU_LORA_EXPORT`, the files for the peft check.
fn load_back<B: Backend>(be: &B, c: &LoraCase, name: &str, tr: &FineTuner<B>, config: &str, st: &[u8],
    merged: &BTreeMap<String, Vec<f32>>) {
    let mut cfg = c.cfg.clone();
    let loaded = apply_lora(&c.weights, &mut cfg, config.as_bytes(), st).unwrap();
    let mut worst = 0f64;
    for (n, v) in merged {
        let t = loaded.stored(n).unwrap_or_else(|| panic!("{name}: the loaded adapter has no {n}")).to_f32().unwrap();
        worst = worst.max(max_diff(v, &t.iter().map(|&x| x as f64).collect::<Vec<_>>()));
    }
    assert!(worst <= LOAD_MERGE_ATOL, "{name}: the adapter folded in at load differs from our merge by {worst:e}");
    let ours = pollster::block_on(be.read(&tr.logits(be, &c.batch).unwrap())).unwrap();
    let tok = Tokenizer::from_dir(&c.dir, cfg.max_position_embeddings).unwrap();
    let model = Model::new(CpuBackend::new(), cfg, tok, &loaded).unwrap();
    let (b, t) = (c.batch.b, c.batch.t);
    let encoded: Vec<Encoded> = (0..b).map(|i| {
        let n = c.batch.attention_mask[i * t..(i + 1) * t].iter().filter(|&&m| m == 1).count();
        let ids = c.batch.input_ids[i * t..i * t + n].to_vec();
        Encoded { type_ids: c.batch.token_type_ids[i * t..i * t + n].to_vec(), ids, ..Encoded::default() }
    }).collect();
    let (got, want): (Vec<f32>, Vec<f32>) = match c.task {
        FineTuneTask::Sequence => (pollster::block_on(model.classify_logits(&encoded)).unwrap().concat(), ours.clone()),
        _ => {
            let l = ours.len() / (b * t);
            let rows = pollster::block_on(model.token_logits(&encoded)).unwrap();
            let want = encoded.iter().enumerate().flat_map(|(i, e)| ours[i * t * l..(i * t + e.len()) * l].to_vec()).collect();
            (rows.concat(), want)
        }
    };
    assert_eq!(got.len(), want.len(), "{name}: logits of every real token");
    let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(d <= LOGITS_ATOL, "{name}: the inference model with the adapter differs from the trained one by {d:e}");
    eprintln!("{name} on {}: the adapter folded in at load within {worst:.1e} of our merge; inference logits (CPU) \
        within {d:.1e}", be.name());

    export_for_peft(be, tr, name, c.g["model"].as_str().unwrap(), &c.cfg, c.task, &c.batch, &c.g, (config, st));
}

const CASES: [&str; 8] =
    ["modern_qv", "modern_all", "albert_qv", "albert_all", "albert_proj", "electra_proj", "jina_qv", "jina_all"];

#[test]
fn modernbert_and_albert_adapters_match_peft_on_the_cpu() {
    for name in CASES {
        check(&CpuBackend::new(), name, CPU_GRAD_RTOL);
    }
}

#[test]
fn modernbert_and_albert_adapters_match_peft_on_the_gpu() {
    let Some(g) = common::gpu() else { return };
    for name in CASES {
        check(&g, name, GPU_GRAD_RTOL);
    }
}

/// Our own initialiser on both families: B = 0, so the adapted model is the checkpoint; ALBERT gets one adapter per
/// module of its shared layer (not one per pass), ModernBERT one per packed module of every layer.
#[test]
fn new_adapters_start_as_the_checkpoint() {
    let be = CpuBackend::new();
    for (name, per_layer, layers) in [("modern_all", 4, 4), ("albert_all", 6, 1), ("albert_qv", 2, 1), ("jina_all", 6, 2)] {
        let (c, opts) = case(name);
        let base = FineTuner::new(&be, &c.cfg, &c.weights, c.task, None, 0).unwrap();
        let mut tr = FineTuner::new(&be, &c.cfg, &c.weights, c.task, None, 0).unwrap();
        tr.set_lora(&be, LoraOptions { targets: opts.targets, ..LoraOptions::new(3) }, 5).unwrap();
        assert!(c.cfg.num_hidden_layers > 1, "{name}: several passes");
        assert_eq!(tr.encoder.lora.as_ref().unwrap().adapters.len(), per_layer * layers, "{name}");
        let logits = |t: &FineTuner<CpuBackend>| pollster::block_on(be.read(&t.logits(&be, &c.batch).unwrap())).unwrap();
        assert_eq!(logits(&base), logits(&tr), "{name}: B = 0, the adapted model is the checkpoint");
        let mut top = FineTuner::new(&be, &c.cfg, &c.weights, c.task, None, 0).unwrap();
        top.set_top_layers(Some(0)).unwrap();
        assert!(top.set_lora(&be, LoraOptions::new(2), 0).unwrap_err().to_string().contains("--layers"), "{name}");
    }
}

/// Embedding training with LoRA on a bare ModernBertModel (tiny-modernbert-model, whose tensors have no `model.`):
/// the adapter names the bare model's modules (`base_model.model.layers.0.attn.Wqkv`, as peft names them on a
/// `ModernBertModel`), and `apply_lora` folds it into that checkpoint to our merge.
#[test]
fn embedding_adapters_of_a_bare_modernbert_load_back() {
    let be = CpuBackend::new();
    let g = &common::family::golden("finetune_modernbert.json")["embeddings"]["modern"];
    let dir = root().join("tests/models").join(g["model"].as_str().unwrap());
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    let weights = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    let (anchors, positives) = (batch(&g["anchors"]), batch(&g["positives"]));
    let mut tr = FineTuner::new(&be, &cfg, &weights, FineTuneTask::Embedding, None, 0).unwrap();
    tr.set_lora(&be, LoraOptions { targets: LoraTargets::All, ..LoraOptions::new(2) }, 0).unwrap();
    let opt = StepOptions { learning_rate: 1e-2, ..StepOptions::default() };
    let targets = Targets::Embedding { positives: &positives };
    let first = pollster::block_on(tr.step(&be, &anchors, &targets, &opt)).unwrap().loss;
    let mut last = first;
    for _ in 0..3 {
        last = pollster::block_on(tr.step(&be, &anchors, &targets, &opt)).unwrap().loss;
    }
    assert!(last < first, "embedding loss {first} → {last}");
    let (config, st) = pollster::block_on(lora_peft::export_adapter(&be, &tr, None, None)).unwrap();
    let cj: Value = serde_json::from_str(&config).unwrap();
    assert_eq!(cj["task_type"], "FEATURE_EXTRACTION");
    let names = Weights::from_safetensors(&st).unwrap().names().into_iter().map(String::from).collect::<BTreeSet<_>>();
    assert_eq!(names.len(), 4 * 4 * 2, "{names:?}");
    assert!(names.contains("base_model.model.layers.0.attn.Wqkv.lora_A.weight"), "{names:?}");
    assert!(names.contains("base_model.model.layers.3.mlp.Wi.lora_B.weight"), "{names:?}");
    let mut lcfg = cfg.clone();
    let loaded = apply_lora(&weights, &mut lcfg, config.as_bytes(), &st).unwrap();
    let merged = pollster::block_on(lora_peft::merged(&be, &tr)).unwrap();
    let (mut worst, mut moved) = (0f64, 0f64);
    for (n, v) in &merged {
        // Our names are the task models' (`model.layers…`); the bare checkpoint's have no `model.`.
        let n = n.strip_prefix("model.").unwrap_or(n);
        let base = weights.stored(n).unwrap_or_else(|| panic!("no {n} in the checkpoint")).to_f32().unwrap();
        let t = loaded.stored(n).unwrap().to_f32().unwrap();
        worst = worst.max(max_diff(v, &t.iter().map(|&x| x as f64).collect::<Vec<_>>()));
        moved = moved.max(max_diff(v, &base.iter().map(|&x| x as f64).collect::<Vec<_>>()));
    }
    assert!(worst <= LOAD_MERGE_ATOL, "the adapter folded in at load differs from our merge by {worst:e}");
    assert!(moved > 1e-3, "the adapters did not train (largest change {moved:e})");
}

/// `all-projection` puts one more adapter on the embeddings' projection (ALBERT's shared layer's six and
/// `embedding_hidden_mapping_in`; ELECTRA's six per layer and `embeddings_project`), starting as the checkpoint; a
/// checkpoint without a projection (ModernBERT; an ELECTRA whose embedding_size is its hidden_size) is refused by name.
#[test]
fn projection_adapters_exist_only_where_there_is_a_projection() {
    let be = CpuBackend::new();
    for (name, adapters, module) in [("albert_proj", 7, "albert.encoder.embedding_hidden_mapping_in"),
        ("electra_proj", 6 * 2 + 1, "electra.embeddings_project")] {
        let (c, _) = case(name);
        let base = FineTuner::new(&be, &c.cfg, &c.weights, c.task, None, 0).unwrap();
        let mut tr = FineTuner::new(&be, &c.cfg, &c.weights, c.task, None, 0).unwrap();
        tr.set_lora(&be, LoraOptions { targets: LoraTargets::AllProjection, ..LoraOptions::new(3) }, 5).unwrap();
        let lora = tr.encoder.lora.as_ref().unwrap();
        assert_eq!(lora.adapters.len(), adapters, "{name}");
        assert!(lora.adapters.iter().any(|a| a.module == module), "{name}: no adapter on {module}");
        let logits = |t: &FineTuner<CpuBackend>| pollster::block_on(be.read(&t.logits(&be, &c.batch).unwrap())).unwrap();
        assert_eq!(logits(&base), logits(&tr), "{name}: B = 0, the adapted model is the checkpoint");
    }
    for (dir, task) in [("tiny-modernbert-classifier", FineTuneTask::Sequence), ("tiny-electra-qa", FineTuneTask::Qa)] {
        let dir = root().join("tests/models").join(dir);
        let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
        let weights = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
        let mut tr = FineTuner::new(&be, &cfg, &weights, task, None, 0).unwrap();
        let err = tr.set_lora(&be, LoraOptions { targets: LoraTargets::AllProjection, ..LoraOptions::new(2) }, 0)
            .unwrap_err().to_string();
        assert!(err.contains("embedding_hidden_mapping_in") && err.contains("has none"), "{dir:?}: {err}");
    }
}
