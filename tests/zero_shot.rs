//! Zero-shot classification against transformers' `pipeline("zero-shot-classification")` (tests/golden/zero_shot.py):
//! every family's NLI-labelled classifier, single- and multi-label, the default and a custom template, a long text
//! that the pipeline truncates `only_first`; on the CPU, on the GPU, and through the CLI; and the refusals.

mod common;

use std::path::PathBuf;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::tasks::zero_shot::{ZeroShotOptions, DEFAULT_TEMPLATE};
use bertgpu::tasks::Model;
use common::family::{self, block_on, close, dir, ids, SCORE_TOL};
use common::{floats, gpu};
use serde_json::Value;

/// The pairs' classifier logits on the CPU: the families' CPU_ATOL (tests/roberta.rs, electra_albert.rs), the same
/// encoders and heads. Measured here ("measured … zero-shot logits", `cargo test --test zero_shot -- --nocapture`):
/// worst 5.4e-6 (ELECTRA); the scores (SCORE_TOL 5e-6) worst 1.0e-6. 1e-4 is ~18× the logits' error, kept equal to
/// the families' bound; the scores, which the task returns, are held to SCORE_TOL, 5× their error.
const CPU_ATOL: f32 = 1e-4;
/// The GPU (lavapipe): the families' GPU_ATOL (its erf, exp and tanh differ from the CPU's by a few ulps a layer).
/// Measured here: logits worst 8.8e-6 (ELECTRA), scores worst 1.7e-6 (DistilBERT).
const GPU_ATOL: f32 = 2e-4;

fn golden() -> Value {
    family::golden("zero_shot.json")
}

/// A fresh folder of this process holding a copy of checkpoint `name` whose config.json names the labels
/// `id2label` (as zero_shot.py's `relabel` does for the families it does not commit).
fn relabelled(name: &str, id2label: &Value) -> PathBuf {
    let src = dir(name);
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("bertgpu-zeroshot-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, out.join(p.file_name().unwrap())).unwrap();
    }
    let path = out.join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let label2id: serde_json::Map<String, Value> = id2label
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (v.as_str().unwrap().to_string(), Value::from(k.parse::<u64>().unwrap())))
        .collect();
    cfg["id2label"] = id2label.clone();
    cfg["label2id"] = Value::Object(label2id);
    std::fs::write(&path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    out
}

/// The folder of a family's golden: the committed NLI checkpoint, or its classifier relabelled.
fn model_dir(f: &Value) -> PathBuf {
    let name = f["model"].as_str().unwrap();
    if f["relabel"].as_bool() == Some(true) {
        relabelled(name, &f["id2label"])
    } else {
        let d = dir(name);
        let cfg: Value = serde_json::from_str(&std::fs::read_to_string(d.join("config.json")).unwrap()).unwrap();
        assert_eq!(cfg["id2label"], f["id2label"], "{name}: the checkpoint the golden was made from");
        d
    }
}

fn options(c: &Value) -> ZeroShotOptions {
    ZeroShotOptions {
        template: c["template"].as_str().unwrap_or(DEFAULT_TEMPLATE).to_string(),
        multi_label: c["multi_label"].as_bool().unwrap(),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

/// One case's pipeline output against ours: the labels in the golden's order wherever neighbours are further apart
/// than twice SCORE_TOL (the NLI checkpoints' goldens hold no closer ones: zero_shot.py chose their seeds), and every
/// label's score. Returns the worst score error.
fn check_ranked(what: &str, got: &[(String, f32)], want: &Value) -> f32 {
    let (labels, scores) = (strings(&want["labels"]), floats(&want["scores"]));
    assert_eq!(got.len(), labels.len(), "{what}: one score per label");
    let mut worst = 0.0f32;
    for (i, (label, score)) in labels.iter().zip(&scores).enumerate() {
        let (_, ours) = got.iter().find(|(l, _)| l == label).unwrap_or_else(|| panic!("{what}: no `{label}`"));
        let err = (ours - score).abs();
        worst = worst.max(err);
        assert!(err <= SCORE_TOL, "{what}: `{label}` scored {ours}, the pipeline {score}");
        let decided = |j: usize| scores.get(j).is_none_or(|s| (score - s).abs() > 2.0 * SCORE_TOL);
        if decided(i + 1) && (i == 0 || decided(i - 1)) {
            assert_eq!(&got[i].0, label, "{what}: position {i}");
        }
    }
    worst
}

/// Every case of family `fam` on model `m`: each pair's token ids (the long text's truncated pairs among them) and
/// logits, then the task's output.
fn family_cases<B: Backend>(fam: &str, f: &Value, m: &Model<B>, atol: f32) {
    let cases = f["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    let (mut worst, mut truncated) = (0.0f32, 0);
    for (n, c) in cases.iter().enumerate() {
        let opts = options(c);
        let labels = strings(&c["candidate_labels"]);
        let results = c["results"].as_array().unwrap();
        let texts: Vec<&str> = results.iter().map(|r| r["text"].as_str().unwrap()).collect();
        let (mut encoded, mut want) = (Vec::new(), Vec::new());
        for r in results {
            let pairs = r["pairs"].as_array().unwrap();
            assert_eq!(pairs.len(), labels.len());
            for p in pairs {
                let e = m.encode_only_first(r["text"].as_str().unwrap(), p["hypothesis"].as_str().unwrap()).unwrap();
                assert_eq!(e.ids, ids(&p["input_ids"]), "{fam}: token ids of {p}");
                assert_eq!(e.truncated, p["truncated"].as_bool().unwrap(), "{fam}: truncated, {}", r["text"]);
                truncated += e.truncated as usize;
                encoded.push(e);
                want.extend(floats(&p["logits"]));
            }
        }
        let logits = block_on(m.classify_logits(&encoded)).unwrap();
        assert_eq!(logits.len(), encoded.len());
        close(&format!("{fam} case {n} zero-shot logits"), &logits.concat(), &want, atol, atol);
        let out = block_on(m.zero_shot(&texts, &labels, &opts)).unwrap();
        assert_eq!(out.len(), results.len(), "{fam}: one result per text");
        for (got, r) in out.iter().zip(results) {
            let got: Vec<(String, f32)> = got.iter().map(|l| (l.label.clone(), l.score)).collect();
            worst = worst.max(check_ranked(&format!("{fam} case {n}: {}", r["text"]), &got, r));
        }
    }
    assert!(truncated > 0, "{fam}: the long text's pairs are truncated");
    eprintln!("measured {fam} zero-shot scores: {worst:.2e}");
}

fn everything<B: Backend>(mk: impl Fn() -> B, atol: f32) {
    let g = golden();
    let families = g["families"].as_object().unwrap();
    let names: Vec<&str> = families.keys().map(String::as_str).collect();
    for fam in ["bert", "roberta", "distilbert", "xlmr", "camembert", "electra", "albert", "mpnet"] {
        assert!(names.contains(&fam), "the golden covers {fam}");
    }
    for (fam, f) in families {
        let m = family::load(&model_dir(f), mk());
        assert!(m.available_tasks().contains(&"zeroShot"), "{fam}: {:?}", m.available_tasks());
        family_cases(fam, f, &m, atol);
    }
}

#[test]
fn zero_shot_matches_the_pipeline_on_cpu() {
    everything(CpuBackend::new, CPU_ATOL);
}

#[test]
fn zero_shot_matches_the_pipeline_on_gpu() {
    if gpu().is_none() {
        return;
    }
    everything(|| gpu().expect("adapter"), GPU_ATOL);
}

/// More pairs than one pass takes (PAIRS_PER_PASS), texts of different lengths: the same answers as each text alone.
#[test]
fn zero_shot_in_several_passes_answers_as_one_text_at_a_time() {
    let m = family::load(&dir("tiny-nli-bert"), CpuBackend::new());
    let g = golden();
    let c = &g["families"]["bert"]["cases"][0];
    let labels = strings(&c["candidate_labels"]);
    let base: Vec<&str> = c["results"].as_array().unwrap().iter().map(|r| r["text"].as_str().unwrap()).collect();
    let texts: Vec<&str> = base.iter().copied().cycle().take(bertgpu::tasks::zero_shot::PAIRS_PER_PASS / 2).collect();
    assert!(texts.len() * labels.len() > bertgpu::tasks::zero_shot::PAIRS_PER_PASS);
    let opts = ZeroShotOptions::default();
    let all = block_on(m.zero_shot(&texts, &labels, &opts)).unwrap();
    assert_eq!(all.len(), texts.len());
    for (text, got) in texts.iter().zip(&all) {
        let alone = block_on(m.zero_shot(&[text], &labels, &opts)).unwrap().remove(0);
        assert_eq!(got.len(), alone.len());
        for (x, y) in got.iter().zip(&alone) {
            // Padding moves nothing beyond f32 rounding: the same order, scores within SCORE_TOL.
            assert_eq!(x.label, y.label, "{text}: order");
            assert!((x.score - y.score).abs() <= SCORE_TOL, "{text}: {} {} vs {}", x.label, x.score, y.score);
        }
    }
}

/// The refusals, each naming what is wrong; the task never panics.
#[test]
fn zero_shot_refuses_by_name() {
    let nli = family::load(&dir("tiny-nli-bert"), CpuBackend::new());
    let run = |m: &Model<CpuBackend>, labels: &[&str], template: &str| {
        let opts = ZeroShotOptions { template: template.into(), multi_label: false };
        block_on(m.zero_shot(&["a text"], labels, &opts)).unwrap_err().to_string()
    };
    // No entailment label: the labels it has are named.
    let plain = family::load(&dir("tiny-classifier"), CpuBackend::new());
    let e = run(&plain, &["a", "b"], DEFAULT_TEMPLATE);
    assert!(e.contains("entail") && e.contains("negative, neutral, positive"), "{e}");
    assert!(!plain.available_tasks().contains(&"zeroShot"));
    // A checkpoint without a sequence classifier.
    let e = run(&family::load(&dir("tiny-ner"), CpuBackend::new()), &["a"], DEFAULT_TEMPLATE);
    assert!(e.contains("token-classification") || e.contains("sequence classifier"), "{e}");
    assert!(run(&nli, &[], DEFAULT_TEMPLATE).contains("at least one candidate label"));
    assert!(run(&nli, &["a", ""], DEFAULT_TEMPLATE).contains("label 1 is empty"));
    for bad in ["no placeholder", "{label} here", "{} and {}"] {
        let e = run(&nli, &["a"], bad);
        assert!(e.contains("template") && e.contains("{}"), "{bad}: {e}");
    }
    // A hypothesis that leaves the text no room in the 64 tokens: only_first never cuts the hypothesis.
    let long = "word ".repeat(80);
    let e = run(&nli, &[long.trim()], DEFAULT_TEMPLATE);
    assert!(e.contains("hypothesis") && e.contains("64-token"), "{e}");
    // No texts: nothing to do.
    let opts = ZeroShotOptions::default();
    assert!(block_on(nli.zero_shot(&[], &["a"], &opts)).unwrap().is_empty());
}

fn cli(args: &[&str], input: &str) -> std::process::Output {
    common::cli(args, input)
}

fn lines(out: &std::process::Output) -> Vec<Value> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn ranked(v: &Value) -> Vec<(String, f32)> {
    v.as_array()
        .unwrap_or_else(|| panic!("a ranking, not {v}"))
        .iter()
        .map(|l| (l["label"].as_str().unwrap().to_string(), l["score"].as_f64().unwrap() as f32))
        .collect()
}

/// `bertgpu zero-shot` end to end: JSON lines with their labels, plain lines with --labels, --template and
/// --multi-label; a bad line answers `{"error"}` and the lines after it go on.
#[test]
fn zero_shot_through_the_cli() {
    let g = golden();
    for fam in ["bert", "roberta"] {
        let f = &g["families"][fam];
        let model = dir(f["model"].as_str().unwrap());
        let model = model.to_str().unwrap();
        for c in f["cases"].as_array().unwrap() {
            let results = c["results"].as_array().unwrap();
            let labels = strings(&c["candidate_labels"]);
            let mut args = vec!["zero-shot", "--model", model, "--device", "cpu"];
            let template = c["template"].as_str();
            if let Some(t) = template {
                args.extend(["--template", t]);
            }
            if c["multi_label"].as_bool().unwrap() {
                args.push("--multi-label");
            }
            // Plain lines with --labels, then the same texts as JSON lines carrying their labels, a bad line between.
            let joined = labels.join(",");
            let mut with_labels = args.clone();
            with_labels.extend(["--labels", joined.as_str()]);
            let mut input: String = results.iter().map(|r| format!("{}\n", r["text"].as_str().unwrap())).collect();
            input.push_str("{\"text\": \"x\", \"labels\": [\"a\", 5]}\n");
            for r in results {
                input.push_str(&format!("{}\n", serde_json::json!({"text": r["text"], "labels": labels})));
            }
            let out = lines(&cli(&with_labels, &input));
            assert_eq!(out.len(), 2 * results.len() + 1, "one line per input line");
            let bad = &out[results.len()];
            assert!(bad["error"].as_str().unwrap().contains("\"labels\"[1]"), "{bad}");
            let mut worst = 0.0f32;
            for (i, r) in results.iter().enumerate() {
                for o in [&out[i], &out[results.len() + 1 + i]] {
                    worst = worst.max(check_ranked(&format!("cli {fam}: {}", r["text"]), &ranked(o), r));
                }
            }
            eprintln!("measured cli {fam} zero-shot scores: {worst:.2e}");
        }
    }
    let nli = dir("tiny-nli-bert");
    let nli = nli.to_str().unwrap();
    // A plain line without --labels, an empty label: errors on their lines, the next line still answered.
    let out = lines(&cli(&["zero-shot", "--model", nli, "--device", "cpu"],
        "no labels here\n{\"text\": \"t\", \"labels\": [\"a\", \" \"]}\n{\"text\": \"t\", \"labels\": [\"a\", \"b\"]}\n"));
    assert_eq!(out.len(), 3);
    assert!(out[0]["error"].as_str().unwrap().contains("--labels"), "{}", out[0]);
    assert!(out[1]["error"].as_str().unwrap().contains("label 1 is empty"), "{}", out[1]);
    assert_eq!(ranked(&out[2]).len(), 2, "{}", out[2]);
    // The command's refusals exit 2 with the reason: no entailment label, a template without {}, an empty label.
    let plain = dir("tiny-classifier");
    let refused = [
        (vec!["--model", plain.to_str().unwrap(), "--labels", "a,b"], "negative, neutral, positive"),
        (vec!["--model", nli, "--labels", "a,b", "--template", "no slot"], "template"),
        (vec!["--model", nli, "--labels", "a,,b"], "label 1 is empty"),
    ];
    for (args, want) in refused {
        let out = cli(&[&["zero-shot", "--device", "cpu"][..], &args[..]].concat(), "a text\n");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
