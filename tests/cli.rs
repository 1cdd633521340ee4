//! The `bertgpu` binary as users run it: JSON lines in, JSON lines out, exit codes, no panic traces.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::{json, Value};

mod common;

fn model_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name);
    assert!(dir.join("config.json").exists(), "{} is missing: run scripts/fetch-models.sh", dir.display());
    dir
}

/// Starts `bertgpu args...` with its stdin, stdout and stderr piped.
fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_bertgpu"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bertgpu")
}

/// Runs `bertgpu args...` with `stdin` as input.
fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = spawn(args);
    // A command that exits early (bad model) may close stdin first: ignore the broken pipe.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("output line `{l}` is not JSON: {e}")))
        .collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tokenize(model: &Path, stdin: &str) -> Vec<Value> {
    let out = run(&["tokenize", "--model", model.to_str().unwrap()], stdin.as_bytes());
    assert!(out.status.success(), "tokenize failed: {}", stderr(&out));
    lines(&out)
}

#[test]
fn tokenize_matches_golden_table() {
    let g: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/tokens.json")).unwrap(),
    )
    .unwrap();
    let cases = g["cases"].as_array().unwrap();
    for model in ["all-MiniLM-L6-v2", "splade-tiny"] {
        let results = g["models"][model]["results"].as_array().unwrap();
        // Cases at the model's own limit go through the default; the ones with their own limit need --max-length.
        let default: Vec<usize> = (0..cases.len()).filter(|&i| cases[i].get("max_length").is_none()).collect();
        let input: String = default
            .iter()
            .map(|&i| {
                let c = &cases[i];
                let mut o = json!({ "text": c["text"] });
                if let Some(p) = c.get("text_pair") {
                    o["text_pair"] = p.clone();
                }
                format!("{o}\n")
            })
            .collect();
        let got = tokenize(&model_dir(model), &input);
        assert_eq!(got.len(), default.len(), "one output line per input line");
        for (&i, out) in default.iter().zip(&got) {
            let name = cases[i]["name"].as_str().unwrap();
            for key in ["input_ids", "token_type_ids", "tokens"] {
                assert_eq!(out[key], results[i][key], "{model} case `{name}`: {key}");
            }
            assert_eq!(out.as_object().unwrap().len(), 3, "exactly the contract's keys: {out}");
        }
        // --max-length
        let limited: Vec<usize> = (0..cases.len()).filter(|&i| cases[i]["max_length"] == 16).collect();
        assert!(!limited.is_empty());
        let input: String = limited
            .iter()
            .map(|&i| format!("{}\n", json!({ "text": cases[i]["text"], "text_pair": cases[i].get("text_pair") })))
            .collect();
        let out = run(&["tokenize", "--model", model_dir(model).to_str().unwrap(), "--max-length", "16"], input.as_bytes());
        assert!(out.status.success(), "tokenize --max-length 16: {}", stderr(&out));
        let out = lines(&out);
        assert_eq!(out.len(), limited.len(), "--max-length 16: one output line per input line");
        for (&i, out) in limited.iter().zip(out) {
            assert_eq!(out["input_ids"], results[i]["input_ids"], "{model} case {}", cases[i]["name"]);
        }
    }
}

#[test]
fn bad_lines_give_errors_and_the_rest_go_on() {
    let model = model_dir("all-MiniLM-L6-v2");
    let input = concat!(
        "{\"text\": \"hello\"}\n",
        "{\"text\": broken json\n",
        "{\"txt\": \"wrong key\"}\n",
        "{\"text\": 42}\n",
        "plain text line\n",
        "{\"text\": \"hello\", \"text_pair\": \"world\"}\n",
    );
    let mut bytes = input.as_bytes().to_vec();
    bytes.extend_from_slice(b"bad utf8 \xff\xfe here\n");
    bytes.extend_from_slice(b"{\"text\": \"after\"}\r\n");
    bytes.extend_from_slice(b"no final newline");
    let out = run(&["tokenize", "--model", model.to_str().unwrap()], &bytes);
    assert!(out.status.success(), "bad lines are not fatal: {}", stderr(&out));
    let got = lines(&out);
    assert_eq!(got.len(), 9, "one output per input line: {got:?}");
    let ids = |v: &Value| v["input_ids"].as_array().map(|a| a.len());
    assert_eq!(got[0]["input_ids"], json!([101, 7592, 102]));
    assert!(got[1]["error"].as_str().unwrap().contains("invalid JSON"), "{}", got[1]);
    assert!(got[2]["error"].as_str().unwrap().contains("missing \"text\""), "{}", got[2]);
    assert!(got[3]["error"].as_str().unwrap().contains("must be a string"), "{}", got[3]);
    assert_eq!(got[4]["tokens"], json!(["[CLS]", "plain", "text", "line", "[SEP]"]));
    assert_eq!(got[5]["token_type_ids"], json!([0, 0, 0, 1, 1]));
    assert!(got[6]["error"].as_str().unwrap().contains("UTF-8"), "{}", got[6]);
    assert_eq!(got[7]["tokens"], json!(["[CLS]", "after", "[SEP]"]), "CRLF line endings are removed");
    assert_eq!(ids(&got[8]), Some(6), "{}", got[8]);
    for (i, v) in got.iter().enumerate() {
        assert!(v.get("error").is_some() != v.get("input_ids").is_some(), "line {i}: {v}");
    }
}

#[test]
fn empty_and_whitespace_lines() {
    // Documented behaviour (src/bin/bertgpu/main.rs, README): an empty or whitespace-only plain line is an error
    // (almost always a stray newline); {"text": ""} processes an empty text on purpose: [CLS] [SEP].
    let model = model_dir("splade-tiny");
    let got = tokenize(&model, "\n   \t \n{\"text\": \"\"}\n{\"text\": \"  \"}\n{\"text\": \"x\", \"text_pair\": \"\"}\n");
    assert_eq!(got.len(), 5);
    assert!(got[0]["error"].as_str().unwrap().contains("empty line"));
    assert!(got[1]["error"].as_str().unwrap().contains("empty line"));
    assert_eq!(got[2]["input_ids"], json!([101, 102]));
    assert_eq!(got[3]["input_ids"], json!([101, 102]));
    // An empty second text is no second text, as in transformers.
    assert_eq!(got[4]["tokens"], json!(["[CLS]", "x", "[SEP]"]));
    // No input at all: no output, success.
    let out = run(&["tokenize", "--model", model.to_str().unwrap()], b"");
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
}

#[test]
fn long_input_is_truncated_to_the_model_limit() {
    let model = model_dir("all-MiniLM-L6-v2");
    let long = "word ".repeat(2000);
    let got = tokenize(&model, &format!("{long}\n"));
    let ids = got[0]["input_ids"].as_array().unwrap();
    assert_eq!(ids.len(), 512, "max_position_embeddings of the model");
    assert_eq!(ids[511], json!(102));
    let out = run(&["tokenize", "--model", model.to_str().unwrap(), "--max-length", "100000"], b"x\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("max_position_embeddings"), "{}", stderr(&out));
}

#[test]
fn unloadable_model_exits_2_with_a_clear_message() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let missing = tmp.join("no-such-model");
    let real_config = std::fs::read_to_string(model_dir("splade-tiny").join("config.json")).unwrap();
    let dir_with = |name: &str, config: &str| {
        let d = tmp.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.json"), config).unwrap();
        d
    };
    let no_tokenizer = dir_with("config-only-model", &real_config);
    let bad_config = dir_with("bad-config-model", "{ not json");
    let no_hidden = dir_with("no-hidden-size-model", &real_config.replace("\"hidden_size\"", "\"hidden_sizes\""));
    let cases: [(&Path, &str); 4] = [
        (&missing, "no such folder"),
        (&no_tokenizer, "neither tokenizer.json nor vocab.txt"),
        (&bad_config, "not a valid BERT config"),
        (&no_hidden, "hidden_size"),
    ];
    for (dir, needle) in cases {
        for cmd in ["tokenize", "embed"] {
            let out = run(&[cmd, "--model", dir.to_str().unwrap()], b"hello\n");
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{cmd} {}: {err}", dir.display());
            assert!(err.contains("cannot load model") && err.contains(needle), "{cmd}: {err}");
            assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
            assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
            assert!(out.stdout.is_empty());
        }
    }
}

#[test]
fn usage_errors_are_not_panics() {
    let out = run(&["tokenize"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--model"));
    let out = run(&["embed", "--model", "x", "--device", "tpu"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("possible values"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"));
}

#[test]
fn batched_lines_keep_order_and_per_line_errors() {
    // The JSON-lines loop hands `--batch-size` good lines at a time to the task; bad lines keep their place.
    let model = model_dir("splade-tiny");
    let input = concat!(
        "first sentence\n",
        "{\"text\": oops\n",
        "a second, somewhat longer sentence with more tokens\n",
        "\n",
        "{\"text\": \"third\"}\n",
        "{\"text\": \"fourth\", \"text_pair\": \"with a pair\"}\n",
        "fifth\n",
    );
    let embed = |batch: &str| {
        let out = run(
            &["embed", "--model", model.to_str().unwrap(), "--device", "cpu", "--batch-size", batch],
            input.as_bytes(),
        );
        assert!(out.status.success(), "embed --batch-size {batch}: {}", stderr(&out));
        lines(&out)
    };
    let one = embed("1");
    let three = embed("3");
    assert_eq!(one.len(), 7);
    assert_eq!(three.len(), 7);
    for (i, (a, b)) in one.iter().zip(&three).enumerate() {
        if [1, 3].contains(&i) {
            assert!(a["error"].is_string() && b["error"].is_string(), "line {i}: {a} / {b}");
            continue;
        }
        let (a, b) = (a["embedding"].as_array().unwrap(), b["embedding"].as_array().unwrap());
        assert_eq!(a.len(), 128, "splade-tiny hidden size");
        // Batching pads rows; padding must not change a result (beyond float summation order).
        let worst = a.iter().zip(b).map(|(x, y)| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-4, "line {i}: batch 1 vs batch 3 differ by {worst}");
    }
    // Different lines give different vectors: the outputs are not shuffled or duplicated.
    assert_ne!(one[0]["embedding"], one[2]["embedding"]);
    assert_ne!(three[4]["embedding"], three[5]["embedding"]);
}

/// How long a one-line answer of the tiny model may take on a slow, shared machine (it takes milliseconds): the
/// bound only tells an answer from none, which the old loop gave until `--batch-size` lines or the end of input.
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

#[test]
fn a_line_is_answered_before_the_next_one_arrives() {
    // A program that writes one query and waits for its vector (a search box's backend) must get it while stdin
    // stays open: the loop answers what has arrived when no more input is waiting, whatever `--batch-size` is.
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;
    let model = model_dir("splade-tiny");
    let mut child = spawn(&["embed", "--model", model.to_str().unwrap(), "--device", "cpu", "--batch-size", "32"]);
    let mut stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in stdout.lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    for text in ["first sentence", "a second one, written after the first answer"] {
        writeln!(stdin, "{text}").unwrap();
        stdin.flush().unwrap();
        let answer = rx.recv_timeout(ANSWER_WAIT).unwrap_or_else(|e| {
            let _ = child.kill();
            panic!("no answer to `{text}` within {ANSWER_WAIT:?} while stdin stayed open ({e})")
        });
        let v: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(v["embedding"].as_array().map(Vec::len), Some(128), "`{text}`: {answer}");
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    assert!(rx.try_recv().is_err(), "one answer per line, no more");
}

/// One row of `bench`'s table, `| name | ms | min–max ms | GFLOP/s | time / first row's |`, parsed.
struct BenchRow {
    name: String,
    ms: f64,
    min: f64,
    max: f64,
    gflops: f64,
    ratio: f64,
}

fn bench_rows(text: &str) -> Vec<BenchRow> {
    let num = |s: &str| s.parse::<f64>().unwrap_or_else(|e| panic!("`{s}` in\n{text}\nis not a number: {e}"));
    text.lines()
        .filter(|l| l.starts_with("| cpu |") || l.starts_with("| gpu"))
        .map(|l| {
            let c: Vec<&str> = l.split('|').map(str::trim).collect();
            assert_eq!(c.len(), 7, "five cells in `{l}`");
            let (min, max) = c[3].split_once('–').unwrap_or_else(|| panic!("min–max in `{l}`"));
            BenchRow { name: c[1].into(), ms: num(c[2]), min: num(min), max: num(max), gflops: num(c[4]), ratio: num(c[5]) }
        })
        .collect()
}

/// The interval a value printed with `decimals` decimals came from.
fn printed(v: f64, decimals: i32) -> (f64, f64) {
    let half = 0.5 * 10f64.powi(-decimals);
    (v - half, v + half)
}

/// `bench`'s numbers hang together: the header's FLOP count is the encoder's (computed here from config.json),
/// every row's GFLOP/s is that count over its median time, the median lies within min–max, and each row's ratio is
/// its time over the first row's. Checked against the intervals the printed (rounded) numbers allow.
fn check_bench_table(text: &str, cfg: &Value, batch: usize, seq: usize) -> Vec<BenchRow> {
    let n = |k: &str| cfg[k].as_u64().unwrap() as f64;
    let (h, i, l) = (n("hidden_size"), n("intermediate_size"), n("num_hidden_layers"));
    // Matmul FLOPs, 2 per multiply-add, per layer and token: Q, K, V and the output projection (4·H²), the
    // feed-forward (2·H·I), QKᵀ and AV (2·T·H).
    let gflop = l * 2.0 * (batch * seq) as f64 * (4.0 * h * h + 2.0 * h * i + 2.0 * seq as f64 * h) / 1e9;
    let header = text.lines().next().unwrap_or_default();
    let printed_gflop: f64 = header
        .split(", ")
        .find_map(|p| p.strip_suffix(" GFLOP"))
        .unwrap_or_else(|| panic!("no GFLOP count in `{header}`"))
        .parse()
        .unwrap();
    let (lo, hi) = printed(printed_gflop, 2);
    assert!((lo..=hi).contains(&gflop), "header says {printed_gflop} GFLOP, the encoder does {gflop:.4}");
    let rows = bench_rows(text);
    assert!(!rows.is_empty(), "no rows in\n{text}");
    for r in &rows {
        let (ms_lo, ms_hi) = printed(r.ms, 2);
        assert!(ms_lo > 0.0, "{}: median {} ms", r.name, r.ms);
        assert!(r.min <= r.ms && r.ms <= r.max, "{}: median {} outside {}–{}", r.name, r.ms, r.min, r.max);
        let (g_lo, g_hi) = printed(r.gflops, 2);
        assert!(
            g_lo <= gflop / (ms_lo / 1e3) && gflop / (ms_hi / 1e3) <= g_hi,
            "{}: {} GFLOP/s is not {gflop:.4} GFLOP in {} ms",
            r.name,
            r.gflops,
            r.ms
        );
        let (first_lo, first_hi) = printed(rows[0].ms, 2);
        let (q_lo, q_hi) = printed(r.ratio, 3);
        assert!(
            q_lo <= ms_hi / first_lo && ms_lo / first_hi <= q_hi,
            "{}: ratio {} is not {} ms / {} ms",
            r.name,
            r.ratio,
            r.ms,
            rows[0].ms
        );
    }
    rows
}

#[test]
fn bench_prints_a_table_and_rejects_bad_sizes() {
    let model = model_dir("splade-tiny");
    let m = model.to_str().unwrap();
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap();
    // Big enough that the medians (printed to 0.01 ms) carry two significant digits or more.
    let (batch, seq) = (4, 32);
    let size = ["--batch", "4", "--seq", "32", "--reps", "3"];
    let out = run(&[&["bench", "--model", m, "--device", "cpu"][..], &size[..]].concat(), b"");
    assert!(out.status.success(), "bench failed: {}", stderr(&out));
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(text.contains("batch 4 × 32 tokens"), "{text}");
    let rows = check_bench_table(&text, &cfg, batch, seq);
    assert_eq!(rows.len(), 1, "--device cpu must time only the CPU:\n{text}");
    assert_eq!(rows[0].name, "cpu");

    // `auto` times the CPU and the GPU side by side: the second row's ratio is a real quotient.
    let out = run(&[&["bench", "--model", m, "--device", "auto"][..], &size[..]].concat(), b"");
    assert!(out.status.success(), "bench --device auto failed: {}", stderr(&out));
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let rows = check_bench_table(&text, &cfg, batch, seq);
    if rows.len() == 1 && stderr(&out).contains("no GPU adapter") {
        common::no_gpu_adapter("bench_prints_a_table_and_rejects_bad_sizes (--device auto)", &stderr(&out));
    } else {
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert!(names.len() == 2 && names[0] == "cpu" && names[1].starts_with("gpu ("), "{text}{}", stderr(&out));
    }

    for bad in [["--seq", "1"], ["--seq", "513"], ["--batch", "0"]] {
        let mut args = vec!["bench", "--model", m, "--device", "cpu"];
        args.extend(bad);
        let out = run(&args, b"");
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("bench") || stderr(&out).contains("--seq"), "{bad:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
}

/// The GPU kernels' knobs from the command line: `bench --tuning` adds a row with them, `BERTGPU_TUNING` sets the
/// model's own (on lavapipe, a CPU adapter, nothing is calibrated without being asked), and a malformed spec is a
/// clear error, not a panic.
#[test]
fn gpu_kernel_tunings_are_set_by_flag_or_environment_and_bad_ones_refused() {
    let Some(g) = common::gpu() else { return };
    // The row kernels with subgroup sums where the adapter has them (lavapipe does): through the load-time check too.
    let row = if g.gpu().features.contains(wgpu::Features::SUBGROUP) { "sg:32" } else { "32" };
    drop(g);
    let model = model_dir("splade-tiny");
    let m = model.to_str().unwrap();
    let size = ["--batch", "2", "--seq", "16", "--reps", "1"];
    let tiled = &format!("matmul=tiled:8x8,small=reduce:8x4,attention=fixed:64,row={row},elem=64");
    let bench = |env: &[(&str, &str)], extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bertgpu"));
        cmd.args([&["bench", "--model", m, "--device", "gpu"][..], &size[..], extra].concat());
        cmd.env("BERTGPU_CACHE_DIR", std::env::temp_dir().join(format!("bertgpu-cli-tuning-{}", std::process::id())));
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let out = bench(&[], &["--tuning", tiled]);
    assert!(out.status.success(), "{}", stderr(&out));
    let names: Vec<String> = bench_rows(&String::from_utf8_lossy(&out.stdout)).into_iter().map(|r| r.name).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].ends_with("matmul=direct:8x8,small=direct:8x8,attention=vec4:64,row=128,elem=64"), "{names:?}");
    assert_eq!(names[1], format!("gpu {tiled}"));

    let out = bench(&[("BERTGPU_TUNING", tiled)], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let names: Vec<String> = bench_rows(&String::from_utf8_lossy(&out.stdout)).into_iter().map(|r| r.name).collect();
    assert!(names[0].ends_with(tiled), "{names:?}");

    for (bad, says) in [("matmul=fast:8x8", "`fast` is not one of direct, tiled, reduce"), ("speed=3", "unknown knob `speed`")] {
        let out = bench(&[("BERTGPU_TUNING", bad)], &[]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert!(stderr(&out).contains(says) && !stderr(&out).contains("panicked"), "{bad}: {}", stderr(&out));
        let out = bench(&[], &["--tuning", bad]);
        assert_eq!(out.status.code(), Some(2), "--tuning {bad}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "--tuning {bad}: {}", stderr(&out));
    }
}
