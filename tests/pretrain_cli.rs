//! `bertgpu pretrain` as users run it: continued pre-training of the tiny BertForPreTraining checkpoint on real text
//! (Debian's quotations, tests/data/fortunes-large, each quotation a document of its sentences), the held-out loss
//! falling, the folder written as BertForPreTraining that `fill-mask` loads back, and bad input a clear error; RoBERTa,
//! DistilBERT and ALBERT with their own masked-LM heads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

mod common;

/// A step's loss is the f32 sum of its two heads' f32 losses, printed each to the shortest decimal that reads back
/// as the f32: one rounding apart (6e-8 relative), which 1e-6 bounds; a missing or wrong part is off by tenths.
const LOSS_SUM_RTOL: f64 = 1e-6;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The quotations with two or more sentences, as documents (one sentence a line, a blank line between).
fn corpus(dir: &std::path::Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("tests/data/fortunes-large/train.jsonl")).unwrap();
    let mut docs = Vec::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let sentences: Vec<String> = v["text"].as_str().unwrap().split(". ").map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()).collect();
        if sentences.len() >= 2 {
            docs.push(sentences.join("\n"));
        }
    }
    assert!(docs.len() >= 50, "only {} documents of two sentences", docs.len());
    let p = dir.join("corpus.txt");
    std::fs::write(&p, docs.join("\n\n") + "\n").unwrap();
    p
}

/// The first `n` documents of [`corpus`], in `dir/small.txt`.
fn first_documents(dir: &std::path::Path, n: usize) -> PathBuf {
    let all = std::fs::read_to_string(corpus(dir)).unwrap();
    let data = dir.join("small.txt");
    std::fs::write(&data, all.split("\n\n").take(n).collect::<Vec<_>>().join("\n\n") + "\n").unwrap();
    data
}

#[test]
fn pretraining_lowers_the_held_out_loss_and_writes_a_loadable_folder() {
    let dir = std::env::temp_dir().join(format!("bertgpu-pretrain-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = corpus(&dir);
    let out = dir.join("model");
    let model = root().join("tests/models/tiny-pretraining");
    let args = ["pretrain", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--out",
        out.to_str().unwrap(), "--steps", "60", "--batch-size", "16", "--max-length", "32", "--lr", "2e-3",
        "--validation-split", "0.1", "--no-dropout", "--device", "cpu"];
    let o = common::run_cli(&args, "");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pretrain failed: {stderr}");
    let lines: Vec<Value> = stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let steps: Vec<&Value> = lines.iter().filter(|v| v.get("step").is_some()).collect();
    assert_eq!(steps.len(), 60, "--steps 60: {stderr}");
    // Before the first step, what training holds besides the model (tests/training_memory.rs checks the numbers).
    assert!(stderr.lines().next().is_some_and(|l| l.starts_with("bertgpu: pre-training"))
        && stderr.lines().nth(1).is_some_and(|l| l.starts_with("bertgpu: training holds ")), "{stderr}");
    // Each step line has the two heads' losses and accuracies; their losses add up to the step's (f32 rounding).
    for s in &steps {
        let f = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("no {k} in {s}"));
        assert!((0.0..=1.0).contains(&f("mlm_accuracy")) && (0.0..=1.0).contains(&f("nsp_accuracy")), "{s}");
        assert!((f("loss") - f("mlm_loss") - f("nsp_loss")).abs() <= LOSS_SUM_RTOL * f("loss"), "{s}");
    }
    let mean_mlm = |s: &[&Value]| s.iter().map(|v| v["mlm_accuracy"].as_f64().unwrap()).sum::<f64>() / s.len() as f64;
    let (early, late) = (mean_mlm(&steps[..10]), mean_mlm(&steps[50..]));
    assert!(late > early, "MLM accuracy over the first 10 steps {early}, over the last 10 {late}");
    let epochs: Vec<&Value> = lines.iter().filter(|v| v.get("val_loss").is_some()).collect();
    assert!(epochs.len() >= 2, "{stderr}");
    let (first, last) = (epochs[0]["val_loss"].as_f64().unwrap(), epochs.last().unwrap()["val_loss"].as_f64().unwrap());
    eprintln!("held-out loss (MLM + NSP) after the first pass {first}, after the last {last} ({} passes)", epochs.len());
    assert!(last < first - 0.5, "held-out loss (MLM + NSP) {first} → {last}");
    assert!(epochs.iter().all(|e| e["val_nsp_accuracy"].is_number()), "NSP accuracy is reported");
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["architectures"], serde_json::json!(["BertForPreTraining"]));
    let o = common::run_cli(&["fill-mask", "--model", out.to_str().unwrap(), "--device", "cpu"], "the [MASK] is here.\n");
    assert!(o.status.success(), "fill-mask on the pre-trained folder: {}", String::from_utf8_lossy(&o.stderr));
    assert!(!o.stdout.is_empty());
    // The folder holds the trained model, both heads included: reloaded, its held-out loss (MLM + NSP, on the same
    // held-out rows and masks: the same corpus, seed, split and length) is the run's last `val_loss`, to the bit. The
    // one step of that evaluation run is warm-up's first, at learning rate 0, so it moves no weight.
    let again = dir.join("again");
    let args = ["pretrain", "--model", out.to_str().unwrap(), "--data", data.to_str().unwrap(), "--out",
        again.to_str().unwrap(), "--steps", "1", "--batch-size", "16", "--max-length", "32", "--lr", "2e-3",
        "--validation-split", "0.1", "--no-dropout", "--device", "cpu"];
    let o = common::run_cli(&args, "");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "pretrain from the pre-trained folder: {stderr}");
    let lines: Vec<Value> = stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let step: Vec<&Value> = lines.iter().filter(|v| v.get("step").is_some()).collect();
    assert_eq!(step.len(), 1, "{stderr}");
    assert_eq!(step[0]["learning_rate"].as_f64(), Some(0.0), "{stderr}");
    let reloaded: Vec<&Value> = lines.iter().filter(|v| v.get("val_loss").is_some()).collect();
    assert_eq!(reloaded.len(), 1, "{stderr}");
    for k in ["val_loss", "val_accuracy", "val_nsp_accuracy"] {
        assert_eq!(reloaded[0][k], epochs.last().unwrap()[k], "{k} of the reloaded folder: {stderr}");
    }

    // The masked LM alone (--no-nsp) runs too; a corpus of one document cannot make NSP pairs: a clear error.
    let mlm_only = ["pretrain", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--out",
        out.to_str().unwrap(), "--steps", "4", "--batch-size", "8", "--max-length", "32", "--no-nsp", "--device", "cpu"];
    let o = common::run_cli(&mlm_only, "");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "--no-nsp: {stderr}");
    let steps: Vec<Value> = stderr.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v.get("step").is_some()).collect();
    assert_eq!(steps.len(), 4, "{stderr}");
    for s in &steps {
        assert!(s.get("nsp_accuracy").is_none() && s.get("nsp_loss").is_none(), "no NSP: {s}");
        assert_eq!(s["loss"], s["mlm_loss"], "the masked LM's loss is the loss: {s}");
    }
    let one = dir.join("one.txt");
    std::fs::write(&one, "just one document.\nwith two lines.\n").unwrap();
    let o = common::run_cli(&["pretrain", "--model", model.to_str().unwrap(), "--data", one.to_str().unwrap(), "--out",
        out.to_str().unwrap(), "--device", "cpu"], "");
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("document"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--save-batches` writes each step's batch as transformers takes it (replayed through PyTorch by
/// bench/pretrain_continued.py, whose step losses then match bertgpu's): one line per step, the rows masked, the same
/// file again from the same seed.
#[test]
fn saved_batches_are_the_masked_rows_of_each_step() {
    let dir = std::env::temp_dir().join(format!("bertgpu-pretrain-batches-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = corpus(&dir);
    let model = root().join("tests/models/tiny-pretraining");
    let vocab: Vec<String> = std::fs::read_to_string(model.join("vocab.txt")).unwrap().lines().map(String::from).collect();
    let id = |t: &str| vocab.iter().position(|v| v == t).unwrap() as i64;
    let (cls, sep) = (id("[CLS]"), id("[SEP]"));
    let run = |seed: &str, name: &str| {
        let (file, out) = (dir.join(name), dir.join("out"));
        let args = ["pretrain", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--out",
            out.to_str().unwrap(), "--steps", "3", "--batch-size", "4", "--max-length", "32", "--seed", seed,
            "--device", "cpu", "--save-batches", file.to_str().unwrap()];
        let o = common::run_cli(&args, "");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(file).unwrap()
    };
    let text = run("7", "a.jsonl");
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{text}");
    let (mut labelled, mut tokens, mut seen) = (0usize, 0usize, BTreeSet::new());
    for (k, b) in lines.iter().enumerate() {
        assert_eq!(b["step"], k + 1);
        let rows = |f: &str| -> Vec<Vec<i64>> {
            b[f].as_array().unwrap().iter().map(|r| r.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect())
                .collect()
        };
        let (ids, types, labels) = (rows("input_ids"), rows("token_type_ids"), rows("labels"));
        let nsp: Vec<i64> = b["next_sentence_label"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        assert_eq!((ids.len(), types.len(), labels.len(), nsp.len()), (4, 4, 4, 4), "{b}");
        for r in 0..4 {
            let (i, t, l) = (&ids[r], &types[r], &labels[r]);
            assert!(i.len() <= 32 && i.len() == t.len() && i.len() == l.len(), "{b}");
            assert_eq!((i[0], i[i.len() - 1], i.iter().filter(|&&x| x == sep).count()), (cls, sep, 2), "[CLS] A [SEP] B [SEP]");
            assert!(t.windows(2).all(|w| w[0] <= w[1]) && t[0] == 0 && t[t.len() - 1] == 1, "segments: {t:?}");
            assert!((0..=1).contains(&nsp[r]));
            for (p, &lab) in l.iter().enumerate() {
                assert!(lab == -100 || (i[p] != cls && i[p] != sep && lab != cls && lab != sep), "specials unselected");
                labelled += (lab != -100) as usize;
            }
            tokens += i.len() - 3;
            assert!(seen.insert(i.clone()), "a row trained on twice in 3 steps");
        }
    }
    // 15% of the tokens selected (the per-row rounding and 12 short rows leave a wide margin).
    assert!(labelled > 0 && (labelled as f64) < 0.3 * tokens as f64, "{labelled} of {tokens}");
    assert_eq!(run("7", "b.jsonl"), text, "the same seed, the same batches");
    assert_ne!(run("8", "c.jsonl"), text, "another seed, other batches");
    let _ = std::fs::remove_dir_all(&dir);
}

/// BERT's relatives continue pre-training with their own masked-LM head (tests/pretrain_families.rs holds the
/// gradients to PyTorch): the masked LM alone without asking (none has a next-sentence head), the held-out loss
/// falling, the folder written as the family's `...ForMaskedLM` that `fill-mask` loads back with its own mask token;
/// RoBERTa's rows never hold its padding token as a token (its positions would skip it).
#[test]
fn relatives_pretrain_their_own_masked_lm_head() {
    let dir = std::env::temp_dir().join(format!("bertgpu-pretrain-relatives-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The first 40 documents: a few passes in 40 steps, so that the held-out loss is measured more than once.
    let data = first_documents(&dir, 40);
    for (name, arch, mask) in [("tiny-roberta-mlm", "RobertaForMaskedLM", "<mask>"),
        ("tiny-distilbert-mlm", "DistilBertForMaskedLM", "[MASK]"), ("tiny-albert-mlm", "AlbertForMaskedLM", "[MASK]"),
        ("tiny-electra-generator", "ElectraForMaskedLM", "[MASK]")] {
        let model = root().join("tests/models").join(name);
        let (out, batches) = (dir.join(format!("{name}-out")), dir.join(format!("{name}.jsonl")));
        let args = ["pretrain", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--out",
            out.to_str().unwrap(), "--steps", "40", "--batch-size", "16", "--max-length", "32", "--lr", "2e-3",
            "--validation-split", "0.1", "--no-dropout", "--device", "cpu", "--save-batches", batches.to_str().unwrap()];
        let o = common::run_cli(&args, "");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{name}: pretrain failed: {stderr}");
        let lines: Vec<Value> = stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let steps: Vec<&Value> = lines.iter().filter(|v| v.get("step").is_some()).collect();
        assert_eq!(steps.len(), 40, "{name}: {stderr}");
        for s in &steps {
            assert!(s.get("nsp_loss").is_none() && s["loss"] == s["mlm_loss"], "{name}: the masked LM alone: {s}");
        }
        let epochs: Vec<&Value> = lines.iter().filter(|v| v.get("val_loss").is_some()).collect();
        assert!(epochs.len() >= 2, "{name}: {stderr}");
        let (first, last) = (epochs[0]["val_loss"].as_f64().unwrap(), epochs.last().unwrap()["val_loss"].as_f64().unwrap());
        eprintln!("{name}: held-out MLM loss after the first pass {first}, after the last {last} ({} passes)", epochs.len());
        assert!(last < first, "{name}: held-out loss {first} → {last}");
        let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
        assert_eq!(cfg["architectures"], serde_json::json!([arch]), "{name}");
        let o = common::run_cli(&["fill-mask", "--model", out.to_str().unwrap(), "--device", "cpu"],
            &format!("the {mask} is here.\n"));
        assert!(o.status.success() && !o.stdout.is_empty(), "{name}: fill-mask: {}", String::from_utf8_lossy(&o.stderr));
        if !name.contains("roberta") {
            continue; // BERT's, ALBERT's and ELECTRA's random replacements may draw [PAD], as transformers' collator does
        }
        let pad = cfg["pad_token_id"].as_i64().unwrap();
        let text = std::fs::read_to_string(&batches).unwrap();
        for b in text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
            assert!(b["next_sentence_label"].is_null(), "{name}: {b}");
            for row in b["input_ids"].as_array().unwrap() {
                assert!(row.as_array().unwrap().iter().all(|x| x.as_i64() != Some(pad)), "{name}: the padding token in {row}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// ALBERT's `AlbertForPreTraining` pre-trains with sentence-order prediction beside the masked LM, without asking:
/// each step reports the sentence-order loss (`nsp_loss`, summed into `loss`), the saved batches hold pairs
/// (`[CLS] x [SEP] y [SEP]`, token types 1 on `y [SEP]`) and their `sentence_order_label`s (both orders drawn), and
/// the folder is `AlbertForPreTraining`; `--no-nsp` trains the masked LM alone.
#[test]
fn albert_pretraining_trains_sentence_order() {
    let dir = std::env::temp_dir().join(format!("bertgpu-pretrain-sop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = first_documents(&dir, 40);
    let model = root().join("tests/models/tiny-albert-pretraining");
    for no_nsp in [false, true] {
        let (out, batches) = (dir.join(format!("out-{no_nsp}")), dir.join(format!("batches-{no_nsp}.jsonl")));
        let mut args = vec!["pretrain", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--out",
            out.to_str().unwrap(), "--steps", "6", "--batch-size", "8", "--max-length", "32", "--device", "cpu",
            "--save-batches", batches.to_str().unwrap()];
        if no_nsp {
            args.push("--no-nsp");
        }
        let o = common::run_cli(&args, "");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "pretrain failed: {stderr}");
        let steps: Vec<Value> = stderr.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("step").is_some()).collect();
        assert_eq!(steps.len(), 6, "{stderr}");
        for s in &steps {
            let (loss, mlm) = (s["loss"].as_f64().unwrap(), s["mlm_loss"].as_f64().unwrap());
            match s.get("nsp_loss").and_then(Value::as_f64) {
                Some(sop) => assert!(!no_nsp && (loss - (mlm + sop)).abs() <= 1e-5 * loss, "{s}"),
                None => assert!(no_nsp && loss == mlm, "{s}"),
            }
        }
        let mut labels = std::collections::BTreeSet::new();
        for b in std::fs::read_to_string(&batches).unwrap().lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
            assert!(b.get("next_sentence_label").is_none(), "{b}");
            let sop = &b["sentence_order_label"];
            assert_eq!(sop.is_null(), no_nsp, "{b}");
            let rows = b["input_ids"].as_array().unwrap().iter().zip(b["labels"].as_array().unwrap());
            for ((row, labels), types) in rows.zip(b["token_type_ids"].as_array().unwrap()) {
                // The tokens before masking (a random replacement may draw [SEP], id 3).
                let ids = row.as_array().unwrap().iter().zip(labels.as_array().unwrap())
                    .map(|(x, l)| if l.as_i64() == Some(-100) { x.as_i64() } else { l.as_i64() });
                let seps = ids.filter(|&x| x == Some(3)).count(); // [SEP]
                let ones = types.as_array().unwrap().iter().any(|x| x.as_i64() == Some(1));
                assert_eq!((seps, ones), if no_nsp { (1, false) } else { (2, true) }, "{row} {types}");
            }
            labels.extend(sop.as_array().into_iter().flatten().map(|x| x.as_i64().unwrap()));
        }
        if !no_nsp {
            assert_eq!(labels, [0, 1].into(), "both orders in 6 batches of 8");
        }
        let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
        assert_eq!(cfg["architectures"], serde_json::json!(["AlbertForPreTraining"]));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--dynamic-masking` masks every row again each epoch (RoBERTa's recipe), and `--save-batches` writes the masks
/// each step trained on: over 3 passes through a small corpus, a row (its tokens as the labels give them back) comes
/// back with other masks, where the default's static masking gives it the same masks every pass. The same seed
/// gives the same file.
#[test]
fn dynamic_masking_masks_each_pass_anew() {
    let dir = std::env::temp_dir().join(format!("bertgpu-pretrain-dynamic-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = first_documents(&dir, 6);
    let model = root().join("tests/models/tiny-pretraining");
    let run = |dynamic: bool, name: &str| -> String {
        let (file, out) = (dir.join(name), dir.join("out"));
        let mut args = vec!["pretrain", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--out",
            out.to_str().unwrap(), "--steps", "12", "--batch-size", "2", "--max-length", "32", "--validation-split", "0",
            "--device", "cpu", "--save-batches", file.to_str().unwrap()];
        if dynamic {
            args.push("--dynamic-masking");
        }
        let o = common::run_cli(&args, "");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(file).unwrap()
    };
    // Each trained row by its tokens (a label where it was selected, else its input): every masking of it.
    let maskings = |text: &str| {
        let mut by_row: BTreeMap<Vec<i64>, Vec<Vec<i64>>> = BTreeMap::new();
        for b in text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
            for (ids, labels) in b["input_ids"].as_array().unwrap().iter().zip(b["labels"].as_array().unwrap()) {
                let ints = |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect::<Vec<_>>();
                let (ids, labels) = (ints(ids), ints(labels));
                let tokens = ids.iter().zip(&labels).map(|(&i, &l)| if l == -100 { i } else { l }).collect();
                by_row.entry(tokens).or_default().push(labels);
            }
        }
        by_row
    };
    let (fixed, dynamic) = (maskings(&run(false, "static.jsonl")), maskings(&run(true, "dynamic.jsonl")));
    assert!(fixed.values().all(|m| m.len() >= 2 && m.iter().all(|l| l == &m[0])), "static masking: {fixed:?}");
    let again: Vec<&Vec<Vec<i64>>> = dynamic.values().filter(|m| m.len() >= 2).collect();
    assert!(again.len() >= 4, "rows trained on more than once: {dynamic:?}");
    let changed = again.iter().filter(|m| m.iter().any(|l| l != &m[0])).count();
    assert!(changed * 4 >= again.len() * 3, "{changed} of {} rows masked otherwise on a later pass", again.len());
    assert_eq!(run(true, "dynamic2.jsonl"), run(true, "dynamic3.jsonl"), "the same seed, the same masks");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run with dynamic masking resumed from a checkpoint part way through a later pass writes the uninterrupted run's
/// model bit for bit: each epoch's masks are made again from the seed, the epoch and the row, not carried.
#[test]
fn dynamic_masking_resumes_bit_for_bit() {
    let dir = std::env::temp_dir().join(format!("bertgpu-pretrain-dynamic-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = first_documents(&dir, 6);
    let model = root().join("tests/models/tiny-pretraining");
    let (out, ckpt) = (dir.join("out"), dir.join("ckpt"));
    let args = ["pretrain", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap(), "--out",
        out.to_str().unwrap(), "--steps", "12", "--batch-size", "2", "--max-length", "32", "--validation-split", "0",
        "--lr", "1e-3", "--dynamic-masking", "--device", "cpu", "--checkpoint-dir", ckpt.to_str().unwrap(),
        "--checkpoint-every", "2", "--keep", "6"];
    let o = common::run_cli(&args, "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = std::fs::read(out.join("model.safetensors")).unwrap();
    let mut kept: Vec<usize> = std::fs::read_dir(&ckpt).unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().unwrap().strip_prefix("checkpoint-")?.parse().ok())
        .collect();
    kept.sort_unstable();
    // Back to the checkpoint of step 6 or earlier (the rows fill an epoch in a few steps: a later pass resumes).
    let back = kept.iter().copied().filter(|&s| s <= 6).max().unwrap();
    for &s in kept.iter().filter(|&&s| s > back) {
        std::fs::remove_dir_all(ckpt.join(format!("checkpoint-{s}"))).unwrap();
    }
    std::fs::remove_dir_all(&out).unwrap();
    let o = common::run_cli(&[&args[..], &["--resume"]].concat(), "");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && stderr.contains(&format!(r#""name":"checkpoint-{back}""#)), "{stderr}");
    assert!(std::fs::read(out.join("model.safetensors")).unwrap() == want, "the resumed run's model differs");
    // Without --dynamic-masking the checkpoints are another run's: refused.
    let other: Vec<&str> = args.iter().copied().filter(|&a| a != "--dynamic-masking").chain(["--resume"]).collect();
    let o = common::run_cli(&other, "");
    assert!(!o.status.success(), "a static run resumed a dynamic run's checkpoint");
    let _ = std::fs::remove_dir_all(&dir);
}
