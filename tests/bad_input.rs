//! A table of bad inputs through the CLI, each with the clear error (a substring) or the documented result it must
//! give: bad texts (per-line results, exit 0), bad model files (exit 2, message on stderr), bad options (exit 2).
//! Never a panic, a hang or an allocation failure. Models: the tiny checkpoints of tests/models, and broken copies
//! of them made in a temporary folder.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use bertgpu::training::head::{export_safetensors, HeadSpec};
use bertgpu::tasks::Pooling;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(name)
}

fn run(args: &[String], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bertgpu"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bertgpu");
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    // A writer thread: a large input must not deadlock against a full stdout pipe.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin); // a command that exits early (bad model) closes stdin first
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// A copy of a tiny model in a fresh temporary folder, then `edit` applied to it.
fn broken(model: &str, case: &str, edit: impl FnOnce(&Path)) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bertgpu-bad-input-{}-{case}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in std::fs::read_dir(tiny(model)).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir.join(f.file_name())).unwrap();
    }
    edit(&dir);
    dir
}

/// Rewrites `model.safetensors`, letting `f` change each tensor's dtype, shape and bytes.
fn edit_weights(dir: &Path, mut f: impl FnMut(&str, &mut Dtype, &mut Vec<usize>, &mut Vec<u8>)) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    for (n, d, s, b) in &mut tensors {
        f(n, d, s, b);
    }
    let views: Vec<(String, TensorView)> =
        tensors.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn set_f32(bytes: &mut [u8], index: usize, v: f32) {
    bytes[4 * index..4 * index + 4].copy_from_slice(&v.to_le_bytes());
}

/// Cuts a file to `keep` of its length.
fn truncate(path: &Path, keep: f64) {
    let b = std::fs::read(path).unwrap();
    std::fs::write(path, &b[..(b.len() as f64 * keep) as usize]).unwrap();
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut Value)) {
    let p = dir.join("config.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, v.to_string()).unwrap();
}

/// What one output line must be.
#[derive(Clone, Debug)]
enum Line {
    /// `{"error": "..."}` containing this.
    Error(&'static str),
    /// `{"embedding": [H finite numbers]}`.
    Embedding,
    /// Labels with scores, best first.
    Labels,
    /// Exactly the output of line `i` of the same run.
    SameAs(usize),
}

#[derive(Clone, Debug)]
enum Want {
    /// Exit 0 and these output lines, one per input line.
    Lines(Vec<Line>),
    /// Exit 0 and `n` output lines, each like this one.
    Repeat(usize, Line),
    /// Nothing processed: this exit status and a stderr substring.
    Exit(i32, &'static str),
}

struct Case<'a> {
    name: &'a str,
    args: Vec<String>,
    stdin: Vec<u8>,
    want: Want,
}

fn args(command: &str, model: &Path, rest: &[&str]) -> Vec<String> {
    let mut v = vec![command.to_string(), "--model".into(), model.display().to_string()];
    v.extend(rest.iter().map(|s| s.to_string()));
    v
}

fn check(case: &Case, h: usize) {
    let out = run(&case.args, &case.stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let name = case.name;
    // The table as run (visible with --nocapture): the case, its exit status, the first output and stderr lines.
    let first = |b: &[u8]| String::from_utf8_lossy(b).lines().next().unwrap_or("").chars().take(160).collect::<String>();
    eprintln!("{name} | exit {:?} | {} | {}", out.status.code(), first(&out.stdout), first(&out.stderr));
    assert!(!stderr.contains("panicked") && !stderr.contains("internal error"), "{name}: a panic: {stderr}");
    let lines = || -> Vec<Value> {
        assert_eq!(out.status.code(), Some(0), "{name}: exit status; stderr: {stderr}");
        String::from_utf8(out.stdout.clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: output `{l}` is not JSON: {e}")))
            .collect()
    };
    let check_line = |i: usize, got: &Value, want: &Line, all: &[Value]| match want {
        Line::Error(s) => {
            let e = got["error"].as_str().unwrap_or_else(|| panic!("{name} line {i}: not an error: {got}"));
            assert!(e.contains(s), "{name} line {i}: error `{e}` lacks `{s}`");
        }
        Line::Embedding => {
            let v = got["embedding"].as_array().unwrap_or_else(|| panic!("{name} line {i}: no embedding: {got}"));
            assert_eq!(v.len(), h, "{name} line {i}");
            assert!(v.iter().all(|x| x.as_f64().is_some_and(f64::is_finite)), "{name} line {i}: {got}");
        }
        Line::Labels => {
            let v = got.as_array().unwrap_or_else(|| panic!("{name} line {i}: not a label list: {got}"));
            assert!(!v.is_empty() && v.iter().all(|x| x["label"].is_string() && x["score"].is_f64()), "{name}: {got}");
        }
        Line::SameAs(j) => assert_eq!(got, &all[*j], "{name}: line {i} differs from line {j}"),
    };
    match &case.want {
        Want::Lines(want) => {
            let got = lines();
            assert_eq!(got.len(), want.len(), "{name}: one output line per input line: {got:?}");
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                check_line(i, g, w, &got);
            }
        }
        Want::Repeat(n, want) => {
            let got = lines();
            assert_eq!(got.len(), *n, "{name}: one output line per input line");
            for (i, g) in got.iter().enumerate() {
                check_line(i, g, want, &got);
            }
        }
        Want::Exit(code, s) => {
            assert_eq!(out.status.code(), Some(*code), "{name}: exit status; stderr: {stderr}");
            assert!(stderr.contains(s), "{name}: stderr lacks `{s}`: {stderr}");
            assert!(out.stdout.is_empty(), "{name}: output despite the failure");
        }
    }
}

fn jsonl(values: &[Value]) -> Vec<u8> {
    values.iter().flat_map(|v| format!("{v}\n").into_bytes()).collect()
}

#[test]
fn bad_texts() {
    let m = tiny("tiny-classifier");
    let h = 32;
    let long = "hello ".repeat(100_000); // 600 kB, ~100k tokens: truncated to max_position_embeddings (64)
    let long_enough = "hello ".repeat(200); // already over the limit: the same 64 tokens
    let cases = vec![
        Case {
            name: "empty and whitespace texts",
            args: args("embed", &m, &["--device", "cpu"]),
            stdin: [jsonl(&[serde_json::json!({"text": ""})]), b"   \n".to_vec(),
                jsonl(&[serde_json::json!({"text": " \t "}), serde_json::json!({"text": "", "text_pair": ""})])]
            .concat(),
            // An empty text embeds as `[CLS] [SEP]`; whitespace is no text; an empty pair is no pair. A blank plain
            // line is a stray newline, an error.
            want: Want::Lines(vec![Line::Embedding, Line::Error("empty line"), Line::SameAs(0), Line::SameAs(0)]),
        },
        Case {
            name: "a text far over the position limit is truncated",
            args: args("embed", &m, &["--device", "cpu"]),
            stdin: jsonl(&[serde_json::json!({"text": long_enough}), serde_json::json!({"text": long}),
                serde_json::json!({"text": "hello", "text_pair": long})]),
            want: Want::Lines(vec![Line::Embedding, Line::SameAs(0), Line::Embedding]),
        },
        Case {
            name: "control characters are dropped as BERT's normalizer does",
            args: args("tokenize", &m, &[]),
            stdin: jsonl(&[serde_json::json!({"text": "hello world"}),
                serde_json::json!({"text": "\u{0}\u{7}hello\u{1b}\u{85} world\u{200b}\u{feff}"})]),
            want: Want::Lines(vec![Line::SameAs(0), Line::SameAs(0)]),
        },
        Case {
            name: "a text of control characters only embeds as an empty text",
            args: args("embed", &m, &["--device", "cpu"]),
            stdin: jsonl(&[serde_json::json!({"text": ""}), serde_json::json!({"text": "\u{0}\u{1}\u{7f}\u{200b}"})]),
            want: Want::Lines(vec![Line::Embedding, Line::SameAs(0)]),
        },
        Case {
            name: "lone surrogates and invalid UTF-8",
            args: args("embed", &m, &["--device", "cpu"]),
            stdin: [b"{\"text\": \"a \\ud800 b\"}\n".to_vec(), b"{\"text\": \"\\udc00\"}\n".to_vec(),
                b"caf\xe9\n".to_vec(), b"{\"text\": \"\\ud83d\\ude00\"}\n".to_vec()]
            .concat(),
            want: Want::Lines(vec![Line::Error("surrogate"), Line::Error("surrogate"), Line::Error("UTF-8"),
                Line::Embedding]),
        },
        Case {
            name: "fields of the wrong type",
            args: args("classify", &m, &["--device", "cpu"]),
            stdin: jsonl(&[serde_json::json!({"text": 5}), serde_json::json!({"text": ["a"]}),
                serde_json::json!({"text": null}), serde_json::json!({"text": "a", "text_pair": {"b": 1}}),
                serde_json::json!({"text": "fine"})]),
            want: Want::Lines(vec![Line::Error("\"text\" must be a string, found a number"),
                Line::Error("found an array"), Line::Error("missing \"text\""),
                Line::Error("\"text_pair\" must be a string"), Line::Labels]),
        },
        Case {
            name: "qa fields of the wrong type",
            args: args("qa", &tiny("tiny-qa"), &["--device", "cpu"]),
            stdin: jsonl(&[serde_json::json!({"question": 1, "context": "x"}), serde_json::json!({"text": "x"}),
                serde_json::json!({"question": "who?", "context": ""})]),
            want: Want::Lines(vec![Line::Error("\"question\" must be a string"), Line::Error("missing \"question\""),
                Line::Error("the context is empty")]),
        },
        Case {
            name: "10,000 texts in batches of 4096",
            args: args("embed", &m, &["--device", "cpu", "--batch-size", "4096"]),
            stdin: (0..10_000).flat_map(|i| format!("text number {i} hello world\n").into_bytes()).collect(),
            want: Want::Repeat(10_000, Line::Embedding),
        },
    ];
    for c in &cases {
        check(c, h);
    }
}

#[test]
fn bad_options() {
    let m = tiny("tiny-classifier");
    let cases = [
        ("embed", vec!["--batch-size", "abc"], "invalid value 'abc'"),
        ("embed", vec!["--batch-size", "0"], "0 is not in 1..=4096"),
        ("embed", vec!["--batch-size", "-3"], "unexpected argument '-3'"),
        ("embed", vec!["--pooling", "median"], "invalid value 'median'"),
        ("embed", vec!["--dimensions", "0"], "0 is not in 1..=4294967295"),
        ("embed", vec!["--dimensions", "33"], "dimensions 33: this model's vectors have 32 values; ask for 1 to 32"),
        ("embed", vec!["--prompt", "query"], "prompt `query`: this model has no prompts"),
        ("embed", vec!["--normalize", "--no-normalize"], "cannot be used with"),
        ("embed", vec!["--device", "tpu"], "invalid value 'tpu'"),
        ("embed", vec!["--max-length", "3"], "at least 5"),
        ("embed", vec!["--max-length", "100000"], "exceeds the model's max_position_embeddings (64)"),
        ("fill-mask", vec!["--top-k", "0"], "0 is not in 1..=1000000"),
        ("fill-mask", vec!["--top-k", "1.5"], "invalid value '1.5'"),
        ("classify", vec!["--top-k", "0"], "0 is not in 1..=1000000"),
        ("classify", vec!["--top-k", "many"], "invalid value 'many'"),
        ("ner", vec!["--aggregation", "max"], "invalid value 'max'"),
        ("embed", vec!["--normalize=yes"], "unexpected value 'yes'"),
    ];
    for (cmd, rest, err) in cases {
        let name = format!("{cmd} {}", rest.join(" "));
        let case = Case { name: &name, args: args(cmd, &m, &rest), stdin: b"hello\n".to_vec(), want: Want::Exit(2, err) };
        check(&case, 32);
    }
}

#[test]
fn bad_model_files() {
    let h = 32;
    let text = b"hello world\n".to_vec();
    let embed = |dir: &Path| args("embed", dir, &["--device", "cpu"]);
    let classify = |dir: &Path| args("classify", dir, &["--device", "cpu"]);
    // A trained-head file for another hidden size.
    let head16 = {
        let spec = HeadSpec { input_size: 16, hidden: None, labels: vec!["a".into(), "b".into()], pooling: Pooling::Mean };
        let host: Vec<Vec<f32>> = spec.param_shapes().iter().map(|&(r, c)| vec![0.1; r * c]).collect();
        let p = std::env::temp_dir().join(format!("bertgpu-bad-input-{}-head16.safetensors", std::process::id()));
        std::fs::write(&p, export_safetensors(&spec, &host).unwrap()).unwrap();
        p
    };
    let gguf = {
        let p = std::env::temp_dir().join(format!("bertgpu-bad-input-{}-tiny.gguf", std::process::id()));
        let out = run(&args("convert", &tiny("tiny-classifier"), &["--dtype", "q8_0", "--out", p.to_str().unwrap()]), b"");
        assert!(out.status.success(), "convert: {}", String::from_utf8_lossy(&out.stderr));
        p
    };
    let cut_gguf = {
        let p = gguf.with_file_name(format!("bertgpu-bad-input-{}-cut.gguf", std::process::id()));
        std::fs::copy(&gguf, &p).unwrap();
        truncate(&p, 0.6);
        p
    };

    let nan = broken("tiny-classifier", "nan", |d| {
        edit_weights(d, |n, _, _, b| {
            if n == "bert.embeddings.word_embeddings.weight" {
                set_f32(b, 7, f32::NAN)
            }
        })
    });
    let inf_head = broken("tiny-classifier", "inf-head", |d| {
        edit_weights(d, |n, _, _, b| {
            if n == "classifier.weight" {
                set_f32(b, 0, f32::INFINITY)
            }
        })
    });
    let f64_weights = broken("tiny-classifier", "f64", |d| {
        edit_weights(d, |n, dtype, _, b| {
            if n.ends_with("attention.self.query.weight") {
                *dtype = Dtype::F64;
                *b = b.chunks_exact(4).flat_map(|c| (f32::from_le_bytes(c.try_into().unwrap()) as f64).to_le_bytes()).collect();
            }
        })
    });
    let i64_embeddings = broken("tiny-classifier", "i64", |d| {
        edit_weights(d, |n, dtype, _, b| {
            if n == "bert.embeddings.word_embeddings.weight" {
                *dtype = Dtype::I32; // same width, another dtype
                let _ = b;
            }
        })
    });
    let labels4 = broken("tiny-classifier", "labels4", |d| {
        edit_config(d, |c| {
            c["id2label"]["3"] = "extra".into();
            c["label2id"]["extra"] = 3.into();
        })
    });
    let hidden64 = broken("tiny-classifier", "hidden64", |d| edit_config(d, |c| c["hidden_size"] = 64.into()));
    let cut_weights = broken("tiny-classifier", "cut-weights", |d| truncate(&d.join("model.safetensors"), 0.5));
    let cut_config = broken("tiny-classifier", "cut-config", |d| truncate(&d.join("config.json"), 0.5));
    let cut_tokenizer = broken("tiny-classifier", "cut-tokenizer", |d| truncate(&d.join("tokenizer.json"), 0.5));
    let no_weights = broken("tiny-classifier", "no-weights", |d| std::fs::remove_file(d.join("model.safetensors")).unwrap());
    let empty_vocab = broken("tiny-classifier", "empty-vocab", |d| {
        std::fs::remove_file(d.join("tokenizer.json")).unwrap();
        std::fs::write(d.join("vocab.txt"), "").unwrap();
    });

    let cases = vec![
        Case { name: "NaN in the word embeddings", args: embed(&nan), stdin: text.clone(),
            want: Want::Exit(2, "tensor `bert.embeddings.word_embeddings.weight` holds NaN (value 7)") },
        // The encoder is sound, so embeddings work; the damaged head is refused when asked for.
        Case { name: "infinity in a head: embed", args: embed(&inf_head), stdin: text.clone(),
            want: Want::Lines(vec![Line::Embedding]) },
        Case { name: "infinity in a head: classify", args: classify(&inf_head), stdin: text.clone(),
            want: Want::Exit(2, "tensor `classifier.weight` holds an infinity") },
        Case { name: "f64 weights", args: embed(&f64_weights), stdin: text.clone(),
            want: Want::Exit(2, "is stored as F64; only f32, f16 and bf16") },
        Case { name: "integer weights", args: embed(&i64_embeddings), stdin: text.clone(),
            want: Want::Exit(2, "is stored as I32") },
        Case { name: "config has more labels than the classifier", args: classify(&labels4), stdin: text.clone(),
            want: Want::Exit(2, "id2label names 4 labels but `classifier.weight` has shape [3, 32]") },
        Case { name: "config hidden size does not match the weights", args: embed(&hidden64), stdin: text.clone(),
            want: Want::Exit(2, "expected [480, 64]: the weights do not match config.json") },
        Case { name: "trained head of another hidden size",
            args: args("classify", &tiny("tiny-classifier"), &["--device", "cpu", "--head", head16.to_str().unwrap()]),
            stdin: text.clone(), want: Want::Exit(2, "this head was trained on features of size 16") },
        Case { name: "truncated model.safetensors", args: embed(&cut_weights), stdin: text.clone(),
            want: Want::Exit(2, "the file may be truncated: download it again") },
        Case { name: "truncated config.json", args: embed(&cut_config), stdin: text.clone(),
            want: Want::Exit(2, "config.json is not a valid BERT config") },
        Case { name: "truncated tokenizer.json", args: embed(&cut_tokenizer), stdin: text.clone(),
            want: Want::Exit(2, "tokenizer.json is not valid JSON") },
        Case { name: "missing model.safetensors", args: embed(&no_weights), stdin: text.clone(),
            want: Want::Exit(2, "model.safetensors") },
        Case { name: "empty vocab.txt", args: embed(&empty_vocab), stdin: text.clone(),
            want: Want::Exit(2, "vocab.txt is empty") },
        Case { name: "a sound gguf", args: embed(&gguf), stdin: text.clone(), want: Want::Lines(vec![Line::Embedding]) },
        Case { name: "truncated gguf", args: embed(&cut_gguf), stdin: text.clone(), want: Want::Exit(2, "gguf") },
        Case { name: "not a model at all", args: embed(&tiny("tiny-classifier").join("vocab.txt")), stdin: text.clone(),
            want: Want::Exit(2, "not a folder") },
    ];
    for c in &cases {
        check(c, h);
    }
    for d in [nan, inf_head, f64_weights, i64_embeddings, labels4, hidden64, cut_weights, cut_config, cut_tokenizer,
        no_weights, empty_vocab] {
        let _ = std::fs::remove_dir_all(d);
    }
    for f in [head16, gguf, cut_gguf] {
        let _ = std::fs::remove_file(f);
    }
}

/// Max |GPU − CPU| on a pooled embedding of the tiny model: both are f32 over 2 layers of width 32; the GPU sums in
/// another order (tree reductions). Measured worst on lavapipe 4.8e-7 (printed, "measured |GPU − CPU|"); 2e-6 is 4×
/// that.
const EMBED_ATOL: f32 = 2e-6;

/// 10,000 texts of 64 tokens asked for in one batch: padded, its widest activation `(B*T, 3H)` would need
/// 10,000 × 64 × 96 × 4 = 246 MB, over lavapipe's 128 MiB storage binding. The batch is split into passes that fit,
/// and every text gets the vector it gets alone on the CPU.
#[test]
fn ten_thousand_texts_in_one_batch_are_split_to_fit_the_gpu() {
    use bertgpu::backend::Backend;
    use bertgpu::engine::{Device, Engine};
    use bertgpu::tasks::EmbedOptions;
    let Some(gpu) = common::gpu() else { return };
    let limit = gpu.max_tensor_bytes();
    drop(gpu);
    let dir = tiny("tiny-classifier");
    let engine = pollster::block_on(Engine::from_dir(&dir, Device::Gpu)).unwrap();
    let cpu = pollster::block_on(Engine::from_dir(&dir, Device::Cpu)).unwrap();
    let texts: Vec<String> = (0..10_000).map(|i| format!("{i} {}", "hello world ".repeat(40))).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let widest = 3 * 32 * 4; // bytes per token of the fused q|k|v
    assert!(texts.len() * 64 * widest > limit, "the batch must not fit in one pass for this test to mean anything");
    let opts = EmbedOptions { batch_size: texts.len(), ..Default::default() };
    let got = pollster::block_on(engine.embed(&texts, &opts)).unwrap();
    assert_eq!(got.len(), texts.len());
    for i in [0, 1, 4_999, 9_998, 9_999] {
        let want = pollster::block_on(cpu.embed(&texts[i..i + 1], &opts)).unwrap();
        let err = common::assert_close(&format!("text {i}"), &got[i], &want[0], EMBED_ATOL, 0.0);
        eprintln!("measured |GPU − CPU| of text {i}: {err:.2e}");
    }
}

/// A weight larger than the adapter's largest storage binding (a model too big for this GPU): a clear error at
/// load that says the limit, not a device error or an abort. (BERT-large's word embeddings, 125 MB, still fit
/// lavapipe's 128 MiB.)
#[test]
fn a_weight_over_the_adapters_binding_limit_is_a_clear_error() {
    use bertgpu::backend::Backend;
    use bertgpu::weights::HostTensor;
    let Some(gpu) = common::gpu() else { return };
    let limit = gpu.max_tensor_bytes();
    let cols = 1024;
    let rows = limit / (4 * cols) + 1;
    let t = HostTensor::f32(vec![rows, cols], vec![0.5; rows * cols]).unwrap();
    let e = gpu.upload(&t).err().expect("a weight over the limit must be refused").to_string();
    assert!(e.contains(&format!("weight of shape [{rows}, {cols}]")) && e.contains(&format!("({limit} bytes")), "{e}");
    assert!(e.contains("a quantized file") && e.contains("--device cpu"), "{e}");
}

/// The splitting arithmetic on the CPU backend's budget ([`bertgpu::backend::CPU_MAX_TENSOR_BYTES`], 256 MiB): the
/// tiny model's widest activation is the fused q|k|v, 3 × 32 floats = 384 bytes per token, so a pass holds at most
/// 699,050 tokens: 10,922 sequences of 64.
#[test]
fn batches_split_at_the_backend_budget() {
    use bertgpu::backend::CPU_MAX_TENSOR_BYTES;
    use bertgpu::engine::{Device, Engine};
    let engine = pollster::block_on(Engine::from_dir(tiny("tiny-classifier"), Device::Cpu)).unwrap();
    let Engine::Cpu(m) = &engine else { unreachable!() };
    let per_pass = CPU_MAX_TENSOR_BYTES / (64 * 384);
    assert_eq!(per_pass, 10_922);
    let lens = vec![64; 20_000];
    assert_eq!(m.fitting_groups(&lens, &[], usize::MAX).unwrap(), vec![0..per_pass, per_pass..20_000]);
    // The batch size caps a pass too; shorter sequences that follow a long one are padded to it.
    assert_eq!(m.fitting_groups(&[64, 3, 3, 3, 3], &[], 2).unwrap(), vec![0..2, 2..4, 4..5]);
    // A head's output counts on its own: two of 200 MiB and 100 MiB do not fit one pass, one of each does.
    let extra = [200 << 20, 100 << 20, 10];
    assert_eq!(m.fitting_groups(&[5, 5, 5], &extra, usize::MAX).unwrap(), vec![0..1, 1..3]);
    // One sequence whose output alone is over the budget: an error that says the limit.
    let e = m.fitting_groups(&[5], &[CPU_MAX_TENSOR_BYTES + 1], 8).unwrap_err().to_string();
    assert!(e.contains(&format!("limit of {CPU_MAX_TENSOR_BYTES} bytes")), "{e}");
    assert!(m.fitting_groups(&[], &[], 8).unwrap().is_empty());
}
