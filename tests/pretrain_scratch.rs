//! Pre-training from scratch as users run it: a WordPiece vocabulary trained on real text (`train-tokenizer`, on
//! Debian's quotations in tests/data/fortunes-large), a BERT config.json of our own, `pretrain --config --tokenizer`
//! (weights initialised as transformers does, `training::init`): the held-out masked-LM loss falls from its value at
//! initialisation, the folder is written as the config's architecture with the tokenizer's files, `fill-mask` loads
//! it back, and bad input is a clear error.

use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A tiny BERT for `vocab` tokens; `architectures` as given (none: BertForPreTraining).
fn config(dir: &Path, name: &str, vocab: usize, architectures: Option<&str>) -> PathBuf {
    let mut c = serde_json::json!({
        "vocab_size": vocab, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2, "pad_token_id": 0,
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
    });
    if let Some(a) = architectures {
        c["architectures"] = serde_json::json!([a]);
    }
    let p = dir.join(name);
    std::fs::write(&p, c.to_string()).unwrap();
    p
}

fn json_lines(stderr: &str) -> Vec<Value> {
    stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[test]
fn a_bert_from_scratch_learns_and_loads_back() {
    let dir = std::env::temp_dir().join(format!("bertgpu-pretrain-scratch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = root().join("tests/data/fortunes-large/train.jsonl");
    let (data, tok, out) = (data.to_str().unwrap(), dir.join("tokenizer"), dir.join("model"));
    let o = common::run_cli(&["train-tokenizer", "--data", data, "--vocab-size", "600", "--out", tok.to_str().unwrap()], "");
    assert!(o.status.success(), "train-tokenizer: {}", String::from_utf8_lossy(&o.stderr));
    let vocab = std::fs::read_to_string(tok.join("vocab.txt")).unwrap().lines().count();

    // The masked LM alone (BertForMaskedLM), on the quotations as documents.
    let cfg = config(&dir, "mlm.json", vocab, Some("BertForMaskedLM"));
    let args = ["pretrain", "--config", cfg.to_str().unwrap(), "--tokenizer", tok.to_str().unwrap(), "--data", data,
        "--out", out.to_str().unwrap(), "--no-nsp", "--steps", "300", "--batch-size", "16", "--max-length", "32",
        "--lr", "2e-3", "--validation-split", "0.1", "--device", "cpu"];
    let o = common::run_cli(&args, "");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pretrain from scratch: {stderr}");
    let epochs: Vec<Value> = json_lines(&stderr).into_iter().filter(|v| v.get("val_loss").is_some()).collect();
    let first_step = json_lines(&stderr).into_iter().find(|v| v.get("step").is_some()).unwrap()["loss"].as_f64().unwrap();
    let last = epochs.last().unwrap()["val_loss"].as_f64().unwrap();
    // At initialisation every token is about equally likely: the loss is near ln(vocab).
    let uniform = (vocab as f64).ln();
    eprintln!("{vocab} tokens: first step's loss {first_step:.3} (ln V = {uniform:.3}), held-out after 300 steps {last:.3}");
    assert!((first_step - uniform).abs() < 0.5, "the first step's loss {first_step} against ln V {uniform}");
    // 300 steps of this tiny model on 20k tokens take it to about the tokens' frequencies: 5.82 to 5.87 measured
    // (the trained vocabulary's ids differ from run to run, `tokenizer::train`), 0.53 to 0.58 below ln V.
    assert!(last < uniform - 0.4, "held-out masked-LM loss {last} after 300 steps, ln V {uniform}");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(written["architectures"], serde_json::json!(["BertForMaskedLM"]));
    assert_eq!(std::fs::read(out.join("vocab.txt")).unwrap(), std::fs::read(tok.join("vocab.txt")).unwrap());
    let o = common::run_cli(&["fill-mask", "--model", out.to_str().unwrap(), "--device", "cpu"], "the [MASK] of it.\n");
    assert!(o.status.success(), "fill-mask on the folder: {}", String::from_utf8_lossy(&o.stderr));
    // Reloaded, the folder is the trained model: its held-out masked-LM loss (the same rows and masks: the same data,
    // seed, split and length) is the run's last `val_loss`, to the bit. That run's one step is warm-up's first, at
    // learning rate 0: it moves no weight.
    let again = dir.join("again");
    let o = common::run_cli(&["pretrain", "--model", out.to_str().unwrap(), "--data", data, "--out",
        again.to_str().unwrap(), "--no-nsp", "--steps", "1", "--batch-size", "16", "--max-length", "32", "--lr", "2e-3",
        "--validation-split", "0.1", "--device", "cpu"], "");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pretrain from the folder: {stderr}");
    let lines = json_lines(&stderr);
    let step: Vec<&Value> = lines.iter().filter(|v| v.get("step").is_some()).collect();
    assert_eq!(step.len(), 1, "{stderr}");
    assert_eq!(step[0]["learning_rate"].as_f64(), Some(0.0), "{stderr}");
    let reloaded: Vec<&Value> = lines.iter().filter(|v| v.get("val_loss").is_some()).collect();
    assert_eq!(reloaded.len(), 1, "{stderr}");
    for k in ["val_loss", "val_accuracy"] {
        assert_eq!(reloaded[0][k], epochs.last().unwrap()[k], "{k} of the reloaded folder: {stderr}");
    }

    // The paper's model (no architectures: BertForPreTraining), masked LM and NSP, on documents of sentences.
    let text: String = (0..40).map(|d| format!("document {d} starts here.\nit goes on for a while.\nand then it ends.\n\n")).collect();
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, text).unwrap();
    let cfg = config(&dir, "paper.json", vocab, None);
    let o = common::run_cli(&["pretrain", "--config", cfg.to_str().unwrap(), "--tokenizer", tok.to_str().unwrap(),
        "--data", corpus.to_str().unwrap(), "--out", out.to_str().unwrap(), "--steps", "3", "--batch-size", "8",
        "--max-length", "32", "--device", "cpu"], "");
    assert!(o.status.success(), "BertForPreTraining from scratch: {}", String::from_utf8_lossy(&o.stderr));
    let written: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(written["architectures"], serde_json::json!(["BertForPreTraining"]));

    // Bad input: each a clear error, exit 2.
    let bad = |args: &[&str], want: &str| {
        let o = common::run_cli(args, "");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr} (wanted {want:?})");
    };
    let (c, t, o_) = (cfg.to_str().unwrap(), tok.to_str().unwrap(), out.to_str().unwrap());
    let small = config(&dir, "small.json", 100, None);
    bad(&["pretrain", "--config", small.to_str().unwrap(), "--tokenizer", t, "--data", data, "--out", o_],
        &format!("the tokenizer has {vocab} tokens but the config says vocab_size 100"));
    let roberta = dir.join("roberta.json");
    std::fs::write(&roberta, std::fs::read_to_string(&cfg).unwrap().replacen('{', "{\"model_type\": \"roberta\", ", 1)).unwrap();
    bad(&["pretrain", "--config", roberta.to_str().unwrap(), "--tokenizer", t, "--data", data, "--out", o_], "is a `roberta`");
    bad(&["pretrain", "--config", c, "--tokenizer", dir.join("nowhere").to_str().unwrap(), "--data", data, "--out", o_],
        "is not a folder");
    bad(&["pretrain", "--config", c, "--tokenizer", dir.to_str().unwrap(), "--data", data, "--out", o_],
        "give tokenizer.json or vocab.txt");
    bad(&["pretrain", "--config", c, "--data", data, "--out", o_], "--tokenizer");
    bad(&["pretrain", "--model", "m", "--config", c, "--tokenizer", t, "--data", data, "--out", o_], "cannot be used with");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tensors from scratch are those transformers' BertForPreTraining saves, name for name and shape for shape:
/// tests/models/tiny-pretraining was saved by transformers (tests/golden/heads.py) from the same config.
#[test]
fn from_scratch_has_the_tensors_transformers_saves() {
    let dir = root().join("tests/models/tiny-pretraining");
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let (_, bytes) = bertgpu::training::init::initial_model(&config, 0).unwrap();
    let ours = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let theirs_bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let theirs = safetensors::SafeTensors::deserialize(&theirs_bytes).unwrap();
    let shapes = |st: &safetensors::SafeTensors<'_>| -> Vec<(String, Vec<usize>)> {
        let mut v: Vec<_> = st.tensors().into_iter().map(|(n, t)| (n, t.shape().to_vec())).collect();
        v.sort();
        v
    };
    assert_eq!(shapes(&ours), shapes(&theirs));
}
