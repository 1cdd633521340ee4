//! `bertgpu fine-tune` as users run it, on the tiny BERT checkpoints (and a RoBERTa and a DistilBERT): the written
//! folder loads back (our loader and the task's command), the training learned the data, the progress is on stderr,
//! and bad input exits 2 with a reason.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(args: &[&str], stdin: &str) -> Output {
    common::run_cli(args, stdin)
}

use common::cats_and_cars as data;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bertgpu-finetune-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn fine_tune_writes_a_folder_that_classifies_what_it_learned() {
    let dir = tmp("ok");
    let train = data(&dir);
    let out = dir.join("model");
    let model = root().join("tests/models/tiny-classifier");
    let o = run(
        &["fine-tune", "--task", "classify", "--model", model.to_str().unwrap(), "--data", train.to_str().unwrap(),
          "--out", out.to_str().unwrap(), "--epochs", "4", "--lr", "1e-3", "--batch-size", "8",
          "--validation-split", "0.25", "--device", "cpu"],
        "",
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "fine-tune failed: {stderr}");
    // Progress: one line per step (3 steps of 8 rows × 4 epochs: 18 rows train, 6 validate) and per epoch.
    let progress: Vec<Value> = stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let steps = progress.iter().filter(|v| v.get("step").is_some()).count();
    let epochs: Vec<&Value> = progress.iter().filter(|v| v.get("train_loss").is_some()).collect();
    assert_eq!((steps, epochs.len()), (12, 4), "stderr: {stderr}");
    let last = epochs[3];
    assert_eq!(last["val_accuracy"].as_f64(), Some(1.0), "the classes are separable: {last}");
    // The report names a new classifier's labels in order of first appearance.
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["labels"], serde_json::json!(["animal", "vehicle"]));
    for f in ["config.json", "model.safetensors", "tokenizer.json", "vocab.txt"] {
        assert!(out.join(f).exists(), "{f} missing from the folder");
    }
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["architectures"], serde_json::json!(["BertForSequenceClassification"]));
    assert_eq!(cfg["id2label"], serde_json::json!({"0": "animal", "1": "vehicle"}));
    // The folder loads back and classifies unseen texts of each class.
    let o = run(
        &["classify", "--model", out.to_str().unwrap(), "--device", "cpu"],
        "the cat 99 sat on the mat and slept\nmy car 99 drove down the road fast\n",
    );
    assert!(o.status.success(), "classify on the fine-tuned folder: {}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0][0]["label"], "animal");
    assert_eq!(lines[1][0]["label"], "vehicle");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--patience N`: training stops N epochs after the lowest validation loss, and the model written is that epoch's
/// (the loop's own test, src/training/fit/tests.rs, checks that the parameters are restored; this one the CLI's wiring).
#[test]
fn early_stopping_stops_after_patience_and_reports_the_best_epoch() {
    let dir = tmp("patience");
    let train = data(&dir);
    let out = dir.join("model");
    let model = root().join("tests/models/tiny-classifier");
    // A learning rate far too high for a tiny model: the validation loss stops improving within a few epochs.
    let o = run(
        &["fine-tune", "--task", "classify", "--model", model.to_str().unwrap(), "--data", train.to_str().unwrap(),
          "--out", out.to_str().unwrap(), "--epochs", "30", "--lr", "0.3", "--batch-size", "8",
          "--validation-split", "0.25", "--patience", "2", "--no-dropout", "--device", "cpu"],
        "",
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "fine-tune failed: {stderr}");
    let epochs: Vec<Value> = stderr.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("train_loss").is_some()).collect();
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let best = report["best_epoch"].as_u64().unwrap() as usize;
    let losses: Vec<f64> = epochs.iter().map(|e| e["val_loss"].as_f64().unwrap()).collect();
    let argmin = 1 + (0..losses.len()).fold(0, |b, i| if losses[i] < losses[b] { i } else { b });
    assert_eq!(best, argmin, "best epoch vs the lowest validation loss: {losses:?}");
    assert!(epochs.len() < 30, "these settings stop early: {losses:?}");
    assert_eq!(epochs.len(), best + 2, "stopped 2 epochs after the best: {losses:?}");
    assert!(out.join("model.safetensors").exists());
    // Patience without a validation split is refused, not ignored.
    let o = run(
        &["fine-tune", "--task", "classify", "--model", model.to_str().unwrap(), "--data", train.to_str().unwrap(),
          "--out", out.to_str().unwrap(), "--validation-split", "0", "--patience", "2", "--device", "cpu"],
        "",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("validation split"), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_exits_2_with_a_reason() {
    let dir = tmp("bad");
    let model = root().join("tests/models/tiny-classifier");
    let m = model.to_str().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let one_class = write("one.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\", \"label\": \"x\"}\n");
    let broken = write("broken.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\nnot json\n");
    let pair_missing = write("pair.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\", \"label\": \"y\"}\n");
    let ok = write("ok.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\", \"label\": \"y\"}\n{\"text\": \"c\", \"label\": \"y\"}\n");
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--task", "classify", "--data", &one_class], "at least 2 labels"),
        (vec!["--task", "classify", "--data", &broken], "line 2"),
        (vec!["--task", "pair", "--data", &pair_missing], "needs a \"text_pair\""),
        (vec!["--task", "classify", "--data", &ok, "--lr", "0"], "learning rate"),
        (vec!["--task", "classify", "--data", &ok, "--validation-split", "0.9"], "leave none to train on"),
        (vec!["--task", "classify", "--data", "/nonexistent.jsonl"], "cannot read training data"),
        (vec!["--task", "classify", "--data", &ok, "--layers", "9"], "top 9 layers of a 2-layer model"),
        (vec!["--task", "classify", "--data", &ok, "--layers", "most"], "neither `all` nor a number"),
        (vec!["--task", "classify", "--data", &ok, "--accumulate", "0"], "accumulation steps must be at least 1"),
    ];
    assert_eq!(cases.len(), 9);
    for (extra, want) in cases {
        let mut args = vec!["fine-tune", "--model", m, "--out", out, "--device", "cpu"];
        args.extend(extra.iter().copied());
        let o = run(&args, "");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(want), "{extra:?}: expected {want:?} in {stderr}");
        assert!(!stderr.contains("panicked"), "{extra:?}: {stderr}");
    }
    let gguf = root().join("tests/golden/llamacpp_tiny_bert.gguf");
    let o = run(&["fine-tune", "--model", gguf.to_str().unwrap(), "--task", "classify", "--data", &ok, "--out", out], "");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a folder"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// What does not train yet is refused before anything is written, with an error naming the checkpoint's model_type:
/// GTE's NTK-scaled rotation (transformers' GteModel has none, so the written folder would be another model) and
/// pre-training an ELECTRA discriminator (replaced-token detection needs a generator beside it, not built; a generator
/// pre-trains: tests/pretrain_cli.rs).
#[test]
fn untrained_families_are_refused_naming_them() {
    let dir = tmp("families");
    let data = dir.join("ok.jsonl");
    std::fs::write(&data, "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\", \"label\": \"y\"}\n").unwrap();
    let (data, out) = (data.to_str().unwrap(), dir.join("out"));
    let model = root().join("tests/models/tiny-gte-ntk");
    let o = run(&["fine-tune", "--model", model.to_str().unwrap(), "--task", "classify", "--data", data, "--out",
        out.to_str().unwrap(), "--epochs", "1", "--validation-split", "0", "--device", "cpu"], "");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("with the NTK-scaled rotation (rope_scaling `ntk`, factor 2"), "{stderr}");
    assert!(!out.exists(), "a refused run wrote {}", out.display());
    let corpus = root().join("tests/data/fortunes-large/train.jsonl");
    let disc = root().join("tests/models/tiny-electra-discriminator");
    let o = run(&["pretrain", "--model", disc.to_str().unwrap(), "--data", corpus.to_str().unwrap(), "--out",
        out.to_str().unwrap(), "--steps", "1", "--device", "cpu"], "");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("ELECTRA discriminator (ElectraForPreTraining) is not supported"), "{stderr}");
    assert!(stderr.contains("replaced-token detection"), "{stderr}");
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// DeBERTa (with and without LoRA, merged) and ModernBERT fine-tune for question answering as BERT does (their padded
/// positions, whose logits the loss reads, as transformers computes them: tests/finetune_families.rs), and the folder
/// is the family's own `*ForQuestionAnswering` (ModernBERT's span head `classifier` of 2 labels), which `qa` runs.
#[test]
fn deberta_and_modernbert_fine_tune_question_answering() {
    let dir = tmp("qa-families");
    let squad = dir.join("squad.jsonl");
    let line = |q: &str, c: &str, a: &str| serde_json::json!({"question": q, "context": c,
        "answers": {"text": [a], "answer_start": [c.find(a).unwrap()]}}).to_string();
    let lines = [line("who came?", "john and paul came.", "john"), line("where is sarah?", "she lives in london.", "london"),
        line("what is it?", "it is a cat.", "cat")];
    std::fs::write(&squad, lines.join("\n") + "\n").unwrap();
    for (name, extra, arch) in [("tiny-deberta-qa", &[][..], "DebertaV2ForQuestionAnswering"),
        ("tiny-deberta-qa", &["--lora", "2", "--merge"][..], "DebertaV2ForQuestionAnswering"),
        ("tiny-modernbert-qa", &[][..], "ModernBertForQuestionAnswering")] {
        let out = dir.join(format!("{name}-{}", extra.len()));
        // The tiny models' 64 positions leave room for windows of a 16-token stride only.
        let mut args = vec!["--epochs", "2", "--validation-split", "0", "--doc-stride", "16", "--batch-size", "3"];
        args.extend(extra);
        let epochs = fine_tune("qa", name, &squad, &out, &args);
        assert_eq!(epochs.len(), 2, "{name} {extra:?}");
        assert!(epochs.iter().all(|e| e["train_loss"].as_f64().is_some_and(f64::is_finite)), "{name} {extra:?}: {epochs:?}");
        let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
        assert_eq!(cfg["architectures"], serde_json::json!([arch]), "{name}");
        if name.contains("modernbert") {
            assert_eq!(cfg["id2label"].as_object().map(|m| m.len()), Some(2), "{name}: {cfg}");
        }
        let o = run(&["qa", "--model", out.to_str().unwrap(), "--device", "cpu"],
            "{\"question\": \"who came?\", \"context\": \"john and paul came.\"}\n");
        assert!(o.status.success(), "{name}: qa on the folder: {}", String::from_utf8_lossy(&o.stderr));
        let answer: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
        assert!(answer["score"].as_f64().is_some_and(f64::is_finite), "{name}: {answer}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// RoBERTa, DistilBERT, GTE and NomicBERT fine-tune as BERT does: the run learns, a run resumed from an earlier
/// checkpoint writes the uninterrupted run's model bit for bit, and the folder is the family's own class
/// (tests/finetune_families.rs checks the gradients; tests/golden/finetune_families_load.py that transformers loads
/// such a folder).
#[test]
fn roberta_and_distilbert_fine_tune_resume_and_write_their_own_class() {
    let dir = tmp("relatives");
    let train = data(&dir);
    for (name, arch) in [("tiny-roberta-classifier", "RobertaForSequenceClassification"),
        ("tiny-distilbert-classifier", "DistilBertForSequenceClassification"),
        ("tiny-gte-classifier", "GteForSequenceClassification"),
        ("tiny-nomic-classifier", "NomicBertForSequenceClassification")] {
        let (out, ckpt) = (dir.join(format!("{name}-out")), dir.join(format!("{name}-ckpt")));
        let model = root().join("tests/models").join(name);
        let args = ["fine-tune", "--task", "classify", "--model", model.to_str().unwrap(), "--data", train.to_str().unwrap(),
            "--out", out.to_str().unwrap(), "--device", "cpu", "--epochs", "4", "--lr", "2e-3", "--batch-size", "8",
            "--validation-split", "0.25", "--checkpoint-dir", ckpt.to_str().unwrap(), "--checkpoint-every", "2"];
        let o = run(&args, "");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{name}: {stderr}");
        let last = stderr.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v.get("train_loss").is_some()).last();
        assert_eq!(last.as_ref().and_then(|e| e["val_accuracy"].as_f64()), Some(1.0), "{name}: {stderr}");
        let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
        assert_eq!(cfg["architectures"], serde_json::json!([arch]), "{name}");
        let want = std::fs::read(out.join("model.safetensors")).unwrap();
        // Lose the last checkpoint and the folder: the resumed run redoes the last two steps.
        std::fs::remove_dir_all(ckpt.join("checkpoint-12")).unwrap(); // 3 steps × 4 epochs
        std::fs::remove_dir_all(&out).unwrap();
        let o = run(&[&args[..], &["--resume"]].concat(), "");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success() && stderr.contains(r#""checkpoint":"resumed","name":"checkpoint-10""#), "{name}: {stderr}");
        assert!(std::fs::read(out.join("model.safetensors")).unwrap() == want, "{name}: the resumed run's model differs");
        let o = run(&["classify", "--model", out.to_str().unwrap(), "--device", "cpu"],
            "the cat 99 sat on the mat and slept\nmy car 99 drove down the road fast\n");
        assert!(o.status.success(), "{name}: classify on the folder: {}", String::from_utf8_lossy(&o.stderr));
        let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!((lines[0][0]["label"].as_str(), lines[1][0]["label"].as_str()), (Some("animal"), Some("vehicle")), "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A NomicBERT and a GTE whose config.json is in its hub repository's form (nomic-ai's `n_embd`...; Alibaba-NLP's
/// `model_type: "new"`) fine-tune, and the folder's config.json is in transformers' keys, none of the hub's left,
/// describing the model bertgpu read: parsed again it is the same encoder (sizes, activation, epsilon, rotation,
/// dropouts), and the folder classifies. (tests/golden/hub_config_load.py checks by hand that transformers loads
/// such a folder as its class and gives our probabilities.)
#[test]
fn hub_form_configs_train_and_their_folders_have_transformers_keys() {
    use bertgpu::config::BertConfig;
    let dir = tmp("hub-form");
    let train = data(&dir);
    // gte-multilingual-base's form: `new` with the plain rotation (tiny-gte-ntk without its NTK scaling).
    let gte = dir.join("tiny-gte-new");
    std::fs::create_dir_all(&gte).unwrap();
    for f in std::fs::read_dir(root().join("tests/models/tiny-gte-ntk")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, gte.join(f.file_name().unwrap())).unwrap();
    }
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(gte.join("config.json")).unwrap()).unwrap();
    c.as_object_mut().unwrap().remove("rope_scaling");
    c["auto_map"] = serde_json::json!({ "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel" });
    std::fs::write(gte.join("config.json"), c.to_string()).unwrap();
    for (model, hub_keys, arch) in [(root().join("tests/models/tiny-nomic-hub"), &["n_embd", "rotary_emb_base", "layer_norm_epsilon"][..],
            "NomicBertForSequenceClassification"),
        (gte, &["auto_map", "rope_theta", "position_embedding_type"][..], "GteForSequenceClassification")] {
        let name = model.file_name().unwrap().to_string_lossy().to_string();
        let out = dir.join(format!("{name}-out"));
        let o = run(&["fine-tune", "--task", "classify", "--model", model.to_str().unwrap(), "--data", train.to_str().unwrap(),
            "--out", out.to_str().unwrap(), "--device", "cpu", "--epochs", "2", "--lr", "2e-3", "--batch-size", "8",
            "--validation-split", "0"], "");
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(out.join("config.json")).unwrap();
        let written: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(written["architectures"], serde_json::json!([arch]), "{name}");
        for k in hub_keys {
            assert!(written.get(*k).is_none(), "{name}: the hub's `{k}` is still in {text}");
        }
        let (a, b) = (BertConfig::from_json_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap(),
            BertConfig::from_json_str(&text).unwrap());
        assert_eq!((b.family, b.hidden_size, b.num_hidden_layers, b.num_attention_heads, b.intermediate_size),
            (a.family, a.hidden_size, a.num_hidden_layers, a.num_attention_heads, a.intermediate_size), "{name}");
        assert_eq!((b.hidden_act, b.layer_norm_eps, b.positions, b.rope_ntk_factor, b.max_position_embeddings),
            (a.hidden_act, a.layer_norm_eps, a.positions, a.rope_ntk_factor, a.max_position_embeddings), "{name}");
        assert_eq!((b.pad_token_id, b.has_token_type_table(), b.biases, b.hidden_dropout_prob, b.attention_probs_dropout_prob),
            (a.pad_token_id, a.has_token_type_table(), a.biases, a.hidden_dropout_prob, a.attention_probs_dropout_prob), "{name}");
        let o = run(&["classify", "--model", out.to_str().unwrap(), "--device", "cpu"], "the cat 99 sat on the mat\n");
        assert!(o.status.success(), "{name}: classify on the folder: {}", String::from_utf8_lossy(&o.stderr));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs fine-tune and returns the epoch lines of its progress.
fn fine_tune(task: &str, model: &str, data: &Path, out: &Path, extra: &[&str]) -> Vec<Value> {
    let model = root().join("tests/models").join(model);
    let mut args = vec!["fine-tune", "--task", task, "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(),
        "--out", out.to_str().unwrap(), "--device", "cpu", "--seed", "1"];
    args.extend_from_slice(extra);
    let o = run(&args, "");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "fine-tune --task {task} failed: {stderr}");
    stderr.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v.get("train_loss").is_some()).collect()
}

#[test]
fn ner_fine_tune_learns_the_tags_and_the_folder_runs_ner() {
    let dir = tmp("ner");
    // One tag per word; "paris" and "london" are places wherever they stand.
    let mut lines = Vec::new();
    for i in 0..16 {
        let (city, other) = if i % 2 == 0 { ("paris", "london") } else { ("london", "paris") };
        lines.push(format!(r#"{{"tokens": ["we", "went", "to", "{city}", "and", "{other}"], "tags": ["O", "O", "O", "B-LOC", "O", "B-LOC"]}}"#));
    }
    let data = dir.join("ner.jsonl");
    std::fs::write(&data, lines.join("\n")).unwrap();
    let out = dir.join("model");
    let epochs = fine_tune("ner", "tiny-ner", &data, &out, &["--epochs", "6", "--lr", "3e-3", "--batch-size", "4",
        "--validation-split", "0.25", "--warmup", "0"]);
    assert_eq!(epochs.len(), 6);
    assert!(epochs[5]["train_loss"].as_f64().unwrap() < epochs[0]["train_loss"].as_f64().unwrap() / 2.0, "{epochs:?}");
    assert_eq!(epochs[5]["val_accuracy"].as_f64(), Some(1.0), "{epochs:?}");
    // Every entity of the validation sentences found: seqeval's entity-level F1 is 1.
    assert_eq!(epochs[5]["val_f1"].as_f64(), Some(1.0), "{epochs:?}");
    assert!(epochs[5].get("val_exact_match").is_none(), "exact match is QA's: {epochs:?}");
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["architectures"], serde_json::json!(["BertForTokenClassification"]));
    let o = run(&["ner", "--model", out.to_str().unwrap(), "--device", "cpu"], "we went to paris and london\n");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ents: Value = serde_json::from_slice(&o.stdout).unwrap();
    let words: Vec<&str> = ents.as_array().unwrap().iter().map(|e| e["word"].as_str().unwrap()).collect();
    assert_eq!(words, ["paris", "london"], "{ents}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn qa_fine_tune_learns_the_answers_and_the_folder_answers() {
    let dir = tmp("qa");
    let mut lines = Vec::new();
    for i in 0..16 {
        let city = ["paris", "london", "berlin", "rome"][i % 4];
        let context = format!("the meeting {i} was held in {city} last year");
        let start = context.find(city).unwrap();
        lines.push(format!(
            r#"{{"question": "where was the meeting", "context": "{context}", "answers": {{"text": ["{city}"], "answer_start": [{start}]}}}}"#
        ));
    }
    let data = dir.join("qa.jsonl");
    std::fs::write(&data, lines.join("\n")).unwrap();
    let out = dir.join("model");
    let epochs = fine_tune("qa", "tiny-qa", &data, &out, &["--doc-stride", "16", "--epochs", "20", "--lr", "3e-3", "--batch-size", "4",
        "--validation-split", "0.25", "--warmup", "0"]);
    assert_eq!(epochs.len(), 20);
    // The 4 held-out examples' answers decoded from their windows and scored as SQuAD does.
    let (em, f1) = (epochs[19]["val_exact_match"].as_f64().unwrap(), epochs[19]["val_f1"].as_f64().unwrap());
    assert!((0.0..=1.0).contains(&em) && f1 >= em, "{epochs:?}");
    // Measured: 3 of the 4 (as the windows' start/end accuracy: one window per example here).
    assert!(em >= 0.75, "the city is the answer of every example: {epochs:?}");
    assert_eq!(Some(em), epochs[19]["val_accuracy"].as_f64(), "one window each: the answer is the window's span");
    assert!(epochs[19]["train_loss"].as_f64().unwrap() < epochs[0]["train_loss"].as_f64().unwrap() / 2.0, "{epochs:?}");
    let o = run(&["qa", "--model", out.to_str().unwrap(), "--device", "cpu"],
        "{\"question\": \"where was the meeting\", \"context\": \"the meeting 3 was held in rome last year\"}\n");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A training example whose answer is four pieces (r ##o ##m ##e): the whole span comes back, mapped to
    // characters through the written tokenizer files.
    let answer: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(answer["answer"], "rome", "{answer}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn embedding_fine_tune_pulls_pairs_together_and_the_folder_embeds() {
    let dir = tmp("embed");
    let topics = [("cat", "kitten"), ("car", "road"), ("bread", "bake"), ("rain", "cloud")];
    let mut lines = Vec::new();
    for i in 0..16 {
        let (a, b) = topics[i % 4];
        lines.push(format!(r#"{{"anchor": "a {a} {i}", "positive": "the {b} {i}"}}"#));
    }
    let data = dir.join("pairs.jsonl");
    std::fs::write(&data, lines.join("\n")).unwrap();
    let out = dir.join("model");
    let epochs = fine_tune("embed", "tiny-classifier", &data, &out, &["--epochs", "6", "--lr", "2e-3", "--batch-size", "4",
        "--validation-split", "0.25", "--warmup", "0"]);
    assert_eq!(epochs.len(), 6);
    assert!(epochs[5]["train_loss"].as_f64().unwrap() < epochs[0]["train_loss"].as_f64().unwrap(), "{epochs:?}");
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["architectures"], serde_json::json!(["BertModel"]));
    let o = run(&["embed", "--model", out.to_str().unwrap(), "--device", "cpu", "--normalize"], "a cat 1\nthe kitten 1\nthe road 1\n");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Vec<Vec<f64>> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
        .collect();
    assert_eq!(v.len(), 3);
    let cos = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    assert!(cos(&v[0], &v[1]) > cos(&v[0], &v[2]), "a trained anchor is closer to its positive than to another topic's");
    let o = run(&["fine-tune", "--task", "embed", "--model", root().join("tests/models/tiny-classifier").to_str().unwrap(),
        "--data", data.to_str().unwrap(), "--out", out.to_str().unwrap(), "--batch-size", "1", "--device", "cpu"], "");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--batch-size of at least 2"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--lora R`: peft's two adapter files (pointing at the base model's folder) instead of a model; with `--merge`, a
/// plain folder with the adapters folded in, which classifies what it learned.
#[test]
fn lora_fine_tune_writes_the_adapter_or_the_merged_folder() {
    let dir = tmp("lora");
    let train = data(&dir);
    let (adapter, merged) = (dir.join("adapter"), dir.join("merged"));
    let args = ["--epochs", "8", "--lr", "1e-2", "--batch-size", "8", "--validation-split", "0.25", "--lora", "4"];
    let learned = |epochs: &[Value]| {
        let loss = |e: &Value| e["train_loss"].as_f64().unwrap();
        assert!(loss(epochs.last().unwrap()) < loss(&epochs[0]) / 4.0, "the adapters learned: {epochs:?}");
        assert!(epochs.last().unwrap()["val_accuracy"].as_f64().unwrap() >= 0.8, "{epochs:?}");
    };
    learned(&fine_tune("classify", "tiny-classifier", &train, &adapter, &[&args[..], &["--lora-targets", "all"]].concat()));
    assert!(!adapter.join("model.safetensors").exists(), "an adapter, not a model");
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(adapter.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!((cfg["peft_type"].as_str(), cfg["r"].as_u64(), cfg["lora_alpha"].as_u64()), (Some("LORA"), Some(4), Some(8)));
    assert_eq!((cfg["task_type"].as_str(), &cfg["target_modules"]), (Some("SEQ_CLS"),
        &serde_json::json!(["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"])));
    let base = std::fs::canonicalize(root().join("tests/models/tiny-classifier")).unwrap();
    assert_eq!(cfg["base_model_name_or_path"].as_str(), base.to_str());
    let w = bertgpu::weights::Weights::from_safetensors_file(adapter.join("adapter_model.safetensors")).unwrap();
    assert_eq!(w.names().len(), 2 * 6 * 2 + 2, "A and B of the six linears of 2 layers, and the classifier");
    // The adapter beside its base model (--adapter) is the model the same training merges (--merge): the same
    // labels and scores, to f32 rounding of W + s·B·A summed in another order (measured 2e-7; 1e-5 bounds it, a
    // wrong merge moves scores by tenths).
    let merged_all = dir.join("merged-all");
    fine_tune("classify", "tiny-classifier", &train, &merged_all, &[&args[..], &["--lora-targets", "all", "--merge"]].concat());
    let texts = "the cat 99 sat on the mat and slept\nmy car 99 drove down the road fast\n";
    let classify = |extra: &[&str]| -> Vec<Value> {
        let o = run(&[&["classify", "--device", "cpu"][..], extra].concat(), texts);
        assert!(o.status.success(), "classify {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let beside = classify(&["--model", base.to_str().unwrap(), "--adapter", adapter.to_str().unwrap()]);
    let want = classify(&["--model", merged_all.to_str().unwrap()]);
    assert!(!want.is_empty(), "classify gave no lines");
    assert_eq!(beside.len(), want.len(), "one line per text: {beside:?} vs {want:?}");
    for (b, w) in beside.iter().zip(&want) {
        assert_eq!(b.as_array().unwrap().len(), w.as_array().unwrap().len(), "{beside:?} vs {want:?}");
        for (x, y) in b.as_array().unwrap().iter().zip(w.as_array().unwrap()) {
            assert_eq!(x["label"], y["label"], "{beside:?} vs {want:?}");
            assert!((x["score"].as_f64().unwrap() - y["score"].as_f64().unwrap()).abs() < 1e-5, "{beside:?} vs {want:?}");
        }
    }
    assert_eq!(beside.len(), 2);
    let o = run(&["classify", "--model", base.to_str().unwrap(), "--adapter", dir.to_str().unwrap()], "a\n");
    assert!(String::from_utf8_lossy(&o.stderr).contains("adapter_config.json"), "a folder without an adapter is named");

    learned(&fine_tune("classify", "tiny-classifier", &train, &merged, &[&args[..], &["--merge"]].concat()));
    assert!(merged.join("model.safetensors").exists() && !merged.join("adapter_config.json").exists());
    let o = run(&["classify", "--model", merged.to_str().unwrap(), "--device", "cpu"],
        "the cat 99 sat on the mat and slept\nmy car 99 drove down the road fast\n");
    assert!(o.status.success(), "classify on the merged folder: {}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!((lines[0][0]["label"].as_str(), lines[1][0]["label"].as_str()), (Some("animal"), Some("vehicle")));
    let o = run(&["fine-tune", "--task", "classify", "--model", root().join("tests/models/tiny-classifier").to_str().unwrap(),
        "--data", train.to_str().unwrap(), "--out", merged.to_str().unwrap(), "--merge"], "");
    assert!(!o.status.success(), "--merge without --lora is refused");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--lora` on ModernBERT's packed modules and on ALBERT's shared layer: the adapter names peft's modules
/// (`Wqkv`, `Wo`, `Wi`; ALBERT's shared layer's, once), and beside its base (`--adapter`) classifies as the folder the
/// same training merges (`--merge`): the same labels, scores within f32 rounding of `W + s·B·A` summed in another
/// order (1e-5, as for BERT above).
#[test]
fn lora_on_modernbert_and_albert_writes_adapters_that_load_back() {
    let dir = tmp("lora-families");
    let train = data(&dir);
    let args = ["--epochs", "2", "--lr", "1e-2", "--batch-size", "8", "--validation-split", "0", "--lora", "2",
        "--lora-targets", "all"];
    let texts = "the cat 99 sat on the mat and slept\nmy car 99 drove down the road fast\n";
    let classify = |extra: &[&str]| -> Vec<Value> {
        let o = run(&[&["classify", "--device", "cpu"][..], extra].concat(), texts);
        assert!(o.status.success(), "classify {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let modern = serde_json::json!(["Wqkv", "Wo", "Wi"]);
    let albert = serde_json::json!(["query", "key", "value", "attention.dense", "ffn", "ffn_output"]);
    // A and B of each targeted module (4 layers × 4 packed modules; ALBERT's one layer × 6), and the classifier.
    for (name, targets, tensors) in [("tiny-modernbert-classifier", modern, 4 * 4 * 2 + 2),
        ("tiny-albert-classifier", albert, 6 * 2 + 2)] {
        let (adapter, merged) = (dir.join(format!("{name}-adapter")), dir.join(format!("{name}-merged")));
        fine_tune("classify", name, &train, &adapter, &args);
        let cfg: Value = serde_json::from_str(&std::fs::read_to_string(adapter.join("adapter_config.json")).unwrap()).unwrap();
        assert_eq!(cfg["target_modules"], targets, "{name}");
        let w = bertgpu::weights::Weights::from_safetensors_file(adapter.join("adapter_model.safetensors")).unwrap();
        assert_eq!(w.names().len(), tensors, "{name}: {:?}", w.names());
        fine_tune("classify", name, &train, &merged, &[&args[..], &["--merge"]].concat());
        let base = root().join("tests/models").join(name);
        let beside = classify(&["--model", base.to_str().unwrap(), "--adapter", adapter.to_str().unwrap()]);
        let want = classify(&["--model", merged.to_str().unwrap()]);
        assert_eq!((beside.len(), want.len()), (2, 2), "{name}: one line per text");
        for (b, w) in beside.iter().zip(&want) {
            let (b, w) = (b.as_array().unwrap(), w.as_array().unwrap());
            assert_eq!(b.len(), w.len(), "{name}: {b:?} vs {w:?}");
            assert_eq!(b.len(), 2, "{name}: the two labels of the data, not the checkpoint's: {b:?}");
            for (x, y) in b.iter().zip(w) {
                assert_eq!(x["label"], y["label"], "{name}: {b:?} vs {w:?}");
                assert!((x["score"].as_f64().unwrap() - y["score"].as_f64().unwrap()).abs() < 1e-5, "{name}: {b:?} vs {w:?}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
