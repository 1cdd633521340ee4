//! sentence-transformers' modules as their authors meant them: each stack of tests/models/st-stacks laid over the
//! real all-MiniLM-L6-v2 (Pooling in every mode, Dense with and without a bias, Normalize, a max_seq_length below the
//! tokenizer's, prompts with the prompt pooled and left out), embedded with no options (the model's own files decide)
//! and against `SentenceTransformer.encode` (tests/golden/sentence.json, made by tests/golden/sentence.py), on the CPU
//! and the GPU, through the library and the CLI; the refusals of what is not run, each naming it.

#![cfg(not(target_arch = "wasm32"))]

use std::path::{Path, PathBuf};

use bertgpu::engine::{Device, Engine};
use bertgpu::loader::{LoadOptions, ModelSource};
use bertgpu::tasks::EmbedOptions;
use serde_json::Value;

mod common;

/// Max |ours − sentence-transformers| per value on the CPU (f32 both: the encoder's sums in another order, a Dense
/// layer of ≤ 384 terms). Measured worst 3.2e-6 (meansqrt-noprompt, whose √n divisor leaves vectors unnormalised
/// and larger; printed per stack); 1e-5 is 3.1× that.
const CPU_ATOL: f32 = 1e-5;
/// The GPU (lavapipe): its sums in other orders and its erf. Measured worst 2.6e-6 (meansqrt-noprompt); 2e-5 is
/// 7.6× that.
const GPU_ATOL: f32 = 2e-5;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn golden() -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join("tests/golden/sentence.json")).unwrap()).unwrap()
}

/// The stack `name` laid over all-MiniLM-L6-v2 in a folder of its own (as tests/golden/sentence.py lays it).
fn laid_over(name: &str) -> PathBuf {
    common::sentence_stack(&root().join("tests/models/st-stacks").join(name), name)
}

fn load(dir: &Path, device: Device) -> Engine {
    pollster::block_on(Engine::load(ModelSource::Path(dir), &LoadOptions::default(), device)).expect("loads")
}

fn vectors(v: &Value) -> Vec<Vec<f32>> {
    v.as_array().unwrap().iter().map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()).collect()
}

/// Every value of `got` within `atol` of `want` (counts first); returns the worst difference.
fn check(got: &[Vec<f32>], want: &[Vec<f32>], atol: f32, what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: one vector per text");
    let mut worst = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: text {i}: dimensions");
        for (j, (a, b)) in g.iter().zip(w).enumerate() {
            assert!((a - b).abs() <= atol, "{what}: text {i}[{j}]: ours {a}, sentence-transformers {b}");
            worst = worst.max((a - b).abs());
        }
    }
    worst
}

fn embed(e: &Engine, texts: &[&str], opts: &EmbedOptions) -> Vec<Vec<f32>> {
    pollster::block_on(e.embed(texts, opts)).expect("embeds")
}

fn every_stack(device: Device, atol: f32) {
    let g = golden();
    let texts: Vec<&str> = g["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let stacks = g["stacks"].as_object().unwrap();
    assert_eq!(stacks.len(), 7, "the golden's stacks");
    for (name, want) in stacks {
        let e = load(&laid_over(name), device);
        let mut worst = check(&embed(&e, &texts, &EmbedOptions::default()), &vectors(&want["default"]), atol, name);
        if let Some(prompts) = want.get("prompts").and_then(Value::as_object) {
            for (p, v) in prompts {
                let opts = EmbedOptions { prompt: Some(p.clone()), ..EmbedOptions::default() };
                worst = worst.max(check(&embed(&e, &texts, &opts), &vectors(v), atol, &format!("{name} prompt {p}")));
            }
        }
        for (dims, v) in want["truncated"].as_object().unwrap() {
            let opts = EmbedOptions { dimensions: Some(dims.parse().unwrap()), ..EmbedOptions::default() };
            worst = worst.max(check(&embed(&e, &texts, &opts), &vectors(v), atol, &format!("{name} dimensions {dims}")));
        }
        eprintln!("{name} on {}: max |ours − sentence-transformers| {worst:e}", e.device());
    }
}

#[test]
fn every_stack_embeds_as_sentence_transformers_on_the_cpu() {
    every_stack(Device::Cpu, CPU_ATOL);
}

#[test]
fn every_stack_embeds_as_sentence_transformers_on_the_gpu() {
    if common::gpu().is_none() {
        return;
    }
    every_stack(Device::Gpu, GPU_ATOL);
}

/// An option given overrides what the files say: pooling, normalisation; the model's own width otherwise.
#[test]
fn options_override_the_files() {
    let g = golden();
    let texts: Vec<&str> = g["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let cls = load(&laid_over("cls-normalize"), Device::Cpu);
    let max = load(&laid_over("max"), Device::Cpu);
    // The max stack, asked to pool by [CLS] and normalise, is the cls-normalize stack's default.
    let opts = EmbedOptions { pooling: Some(bertgpu::heads::Pooling::Cls), normalize: Some(true), ..Default::default() };
    check(&embed(&max, &texts, &opts), &vectors(&g["stacks"]["cls-normalize"]["default"]), CPU_ATOL, "max as cls");
    // cls-normalize, asked not to normalise, is not a unit vector.
    let raw = embed(&cls, &texts, &EmbedOptions { normalize: Some(false), ..Default::default() });
    let norm = raw[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() > 0.1, "normalize: false kept the Normalize module (norm {norm})");
}

fn load_err(dir: &Path) -> String {
    match pollster::block_on(Engine::load(ModelSource::Path(dir), &LoadOptions::default(), Device::Cpu)) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn what_is_not_run_is_refused_by_name_and_bad_options_are_clear() {
    let dir = laid_over("mean-dense-normalize");
    let write = |file: &str, text: &str| std::fs::write(dir.join(file), text).unwrap();
    let modules = std::fs::read_to_string(dir.join("modules.json")).unwrap();
    write("modules.json", &modules.replace("models.Normalize", "models.LayerNorm"));
    let e = load_err(&dir);
    assert!(e.contains("the module `LayerNorm`") && e.contains("not supported"), "{e}");
    write("modules.json", &modules);
    let dense = std::fs::read_to_string(dir.join("2_Dense/config.json")).unwrap();
    write("2_Dense/config.json", &dense.replace("\"in_features\": 384", "\"in_features\": 383"));
    let e = load_err(&dir);
    assert!(e.contains("in_features 383, but the vector it receives has 384 values"), "{e}");
    write("2_Dense/config.json", &dense);

    let g = golden();
    let e = load(&laid_over("meansqrt-noprompt"), Device::Cpu);
    let err = pollster::block_on(e.embed(&["x"], &EmbedOptions { prompt: Some("qery".into()), ..Default::default() }))
        .unwrap_err()
        .to_string();
    assert!(err.contains("prompt `qery` is not one of this model's prompts: passage, query"), "{err}");
    for d in [0, 385] {
        let err = pollster::block_on(e.embed(&["x"], &EmbedOptions { dimensions: Some(d), ..Default::default() }))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("dimensions {d}")) && err.contains("1 to 384"), "{err}");
    }
    // The model stays usable after each bad option.
    let texts: Vec<&str> = g["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    check(&embed(&e, &texts, &EmbedOptions::default()), &vectors(&g["stacks"]["meansqrt-noprompt"]["default"]),
        CPU_ATOL, "after the errors");
}

/// The CLI: `embed` with no options follows the files; `--prompt` and `--dimensions`; a bad prompt name is an error
/// line naming the prompts, and the next line answers.
#[test]
fn the_cli_embeds_as_the_files_say() {
    let g = golden();
    let dir = laid_over("cls-normalize");
    let texts: Vec<&str> = g["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let stdin: String = texts.iter().map(|t| serde_json::json!({ "text": t }).to_string() + "\n").collect();
    let run = |extra: &[&str], stdin: &str| -> Vec<Value> {
        let out = common::run_cli(&[&["embed", "--model", dir.to_str().unwrap(), "--device", "cpu"][..], extra].concat(), stdin);
        assert!(out.status.success(), "embed {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let lines = |out: &[Value]| -> Vec<Vec<f32>> {
        out.iter().map(|l| l["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()).collect()
    };
    let stack = &g["stacks"]["cls-normalize"];
    check(&lines(&run(&[], &stdin)), &vectors(&stack["default"]), CPU_ATOL, "cli default");
    check(&lines(&run(&["--prompt", "query"], &stdin)), &vectors(&stack["prompts"]["query"]), CPU_ATOL, "cli --prompt");
    check(&lines(&run(&["--dimensions", "64"], &stdin)), &vectors(&stack["truncated"]["64"]), CPU_ATOL, "cli --dimensions");
    let out = common::run_cli(&["embed", "--model", dir.to_str().unwrap(), "--device", "cpu", "--prompt", "nope"], "x\n");
    assert_eq!(out.status.code(), Some(2), "an unknown prompt name: {}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("prompt `nope` is not one of this model's prompts: document, query"), "{err}");
}

/// `convert` carries the modules, the prompts and max_seq_length into the GGUF (a Dense module's tensors too), and
/// the GGUF embeds as the folder does, natively read in place and from its bytes.
#[test]
fn a_gguf_carries_the_modules() {
    let g = golden();
    let texts: Vec<&str> = g["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    for name in ["mean-dense-normalize", "meansqrt-noprompt", "mean-short"] {
        let dir = laid_over(name);
        let file = dir.join("model.gguf");
        bertgpu::weights::gguf::convert(&dir, bertgpu::dtype::Dtype::F32, &file).expect("convert");
        let want = &g["stacks"][name];
        let e = load(&file, Device::Cpu);
        check(&embed(&e, &texts, &EmbedOptions::default()), &vectors(&want["default"]), CPU_ATOL, &format!("{name} gguf"));
        if let Some(prompts) = want.get("prompts").and_then(Value::as_object) {
            assert_eq!(e.prompts().keys().collect::<Vec<_>>(), prompts.keys().collect::<Vec<_>>(), "{name}: prompts");
        }
        let bytes = std::fs::read(&file).unwrap();
        let e = pollster::block_on(Engine::load(ModelSource::Gguf(&bytes), &LoadOptions::default(), Device::Cpu)).unwrap();
        check(&embed(&e, &texts, &EmbedOptions::default()), &vectors(&want["default"]), CPU_ATOL, &format!("{name} gguf bytes"));
    }
}

/// A trained head's features are the pooled encoder output, in training and in classification alike: the model's
/// Dense layer, prompts and max_seq_length belong to `embed` only (a head trained on the Dense's 64 values could not
/// classify the 384 its classification pools).
#[test]
fn a_trained_head_ignores_the_embedding_modules() {
    let e = load(&laid_over("mean-dense-normalize"), Device::Cpu);
    let examples: Vec<bertgpu::tasks::TrainExample> =
        [("a cat on a mat", "pets"), ("a dog in the park", "pets"), ("stocks fell today", "money"), ("the bank rate", "money")]
            .iter()
            .map(|(t, l)| bertgpu::tasks::TrainExample { text: t.to_string(), label: l.to_string() })
            .collect();
    let opts = bertgpu::tasks::TrainOptions { epochs: 3, validation_split: 0.0, ..Default::default() };
    pollster::block_on(e.train_head(&examples, &opts, |_| {})).expect("trains");
    let encoded: Vec<_> = examples.iter().map(|x| e.tokenizer().encode(&x.text, None).unwrap()).collect();
    let out = pollster::block_on(e.classify_with_head(&encoded, None)).expect("classifies with the trained head");
    assert_eq!(out.len(), examples.len());
    assert!(out.iter().all(|r| r.len() == 2), "two labels each: {out:?}");
}
