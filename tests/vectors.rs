//! The vectors beside one dense vector per text, against sentence-transformers itself (tests/golden/vectors.json,
//! made by tests/golden/vectors.py): SPLADE sparse vectors (`SparseEncoder.encode`) of the real splade-tiny, bare and
//! under a sparse stack (SpladePooling with log1p_relu, a max_seq_length, a prompt, max_active_dims), with a pass's
//! logits small enough that texts go one at a time and a text a piece at a time; per-token vectors
//! (`encode(output_value="token_embeddings")`) of the real all-MiniLM-L6-v2 under the stacks of tests/golden/sentence.py;
//! `quantize_embeddings`' int8, uint8, binary and ubinary codes. On the CPU and the GPU, through the library and
//! the CLI, with the refusals of what does not apply.

#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bertgpu::engine::{Device, Engine};
use bertgpu::heads::quantize::{quantize, Precision, Quantized, Ranges};
use bertgpu::loader::{LoadOptions, ModelSource};
use bertgpu::tasks::vectors::{SparseOptions, SparseVector, TokenOptions};
use bertgpu::tasks::EmbedOptions;
use serde_json::Value;

mod common;

/// Max |ours − sentence-transformers| per sparse weight, an entry one side keeps and the other not counting as its
/// weight. The weights are log1p of masked-LM logits up to ~12 (the vocabulary projection's 128-term sums in another
/// order): measured worst CPU 4.9e-6, GPU (lavapipe) 4.6e-6 (printed); 2e-5 is ≥ 4.1× both.
const SPARSE_ATOL: f32 = 2e-5;
/// Max |ours − sentence-transformers| per token vector value (the encoder's hidden state, values up to ~10, not
/// normalised): measured worst CPU 3.2e-6, GPU (lavapipe) 2.8e-6 (printed per case); 2e-5 is ≥ 6.2× both.
const TOKEN_ATOL: f32 = 2e-5;
/// tests/sentence.rs's CPU bound on normalised embedding values: a binary code's bit may differ from
/// sentence-transformers' only where its float is this close to 0, an int8/uint8 code by one step only where the
/// float is this close to a step's edge.
const EMBED_ATOL: f32 = 1e-5;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn golden() -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join("tests/golden/vectors.json")).unwrap()).unwrap()
}

fn texts(g: &Value) -> Vec<String> {
    g["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
}

fn load(dir: &Path, device: Device) -> Engine {
    pollster::block_on(Engine::load(ModelSource::Path(dir), &LoadOptions::default(), device)).expect("loads")
}

fn sparse_stack() -> PathBuf {
    let name = "splade-log1p-short";
    common::sentence_stack_over(&root().join("tests/models/st-stacks").join(name), name, "models/splade-tiny")
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// Each text's sparse vector within `atol` of the golden's (counts first); the worst difference.
fn check_sparse(got: &[SparseVector], want: &Value, atol: f32, what: &str) -> f32 {
    let want = want.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: one vector per text");
    let mut worst = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.indices.len(), g.values.len(), "{what}: text {i}");
        assert!(g.indices.windows(2).all(|p| p[0] < p[1]), "{what}: text {i}: indices ascending");
        assert!(g.values.iter().all(|&x| x > 0.0), "{what}: text {i}: only weights above 0 kept");
        let wi: Vec<u32> = w["indices"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        let wv = f32s(&w["values"]);
        assert_eq!(wi.len(), wv.len());
        assert!(!wi.is_empty(), "{what}: text {i}: the golden keeps no entry");
        let mut all: BTreeMap<u32, (f32, f32)> = BTreeMap::new();
        g.indices.iter().zip(&g.values).for_each(|(&k, &x)| all.entry(k).or_default().0 = x);
        wi.iter().zip(&wv).for_each(|(&k, &x)| all.entry(k).or_default().1 = x);
        for (k, (a, b)) in all {
            assert!((a - b).abs() <= atol, "{what}: text {i} entry {k}: ours {a}, sentence-transformers {b}");
            worst = worst.max((a - b).abs());
        }
    }
    worst
}

fn sparse(e: &Engine, texts: &[String], opts: &SparseOptions) -> Vec<SparseVector> {
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    pollster::block_on(e.embed_sparse(&texts, opts)).expect("sparse vectors")
}

fn sparse_cases(device: Device) {
    let g = golden();
    let texts = texts(&g);
    let want = &g["sparse"];
    assert_eq!(want.as_object().unwrap().len(), 4, "the golden's sparse cases");
    let bare = load(&root().join("models/splade-tiny"), device);
    let stack = load(&sparse_stack(), device);
    let mut worst = 0f32;
    let mut case = |e: &Engine, opts: SparseOptions, key: &str, what: &str| {
        worst = worst.max(check_sparse(&sparse(e, &texts, &opts), &want[key], SPARSE_ATOL, what));
    };
    case(&bare, SparseOptions::default(), "plain", "splade-tiny");
    // A pass's logits hold 3 tokens: one text at a time, each a piece at a time (the longest text has 32 tokens).
    let pieces = SparseOptions { logits_bytes: 3 * 4 * 30522, ..SparseOptions::default() };
    case(&bare, pieces, "plain", "splade-tiny, 3 tokens a pass");
    case(&stack, SparseOptions::default(), "splade-log1p-short", "the sparse stack");
    let query = SparseOptions { prompt: Some("query".into()), ..SparseOptions::default() };
    case(&stack, query, "splade-log1p-short prompt query", "the sparse stack, prompt query");
    let top = SparseOptions { max_active_dims: Some(5), ..SparseOptions::default() };
    case(&stack, top, "splade-log1p-short max_active_dims 5", "the sparse stack, max_active_dims 5");
    eprintln!("sparse on {}: max |ours − sentence-transformers| {worst:e}", bare.device());
}

#[test]
fn sparse_vectors_as_sentence_transformers_on_the_cpu() {
    sparse_cases(Device::Cpu);
}

#[test]
fn sparse_vectors_as_sentence_transformers_on_the_gpu() {
    if common::gpu().is_none() {
        return;
    }
    sparse_cases(Device::Gpu);
}

fn token_cases(device: Device) {
    let g = golden();
    let texts = texts(&g);
    let text_refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let cases = g["tokens"].as_object().unwrap();
    assert_eq!(cases.len(), 4, "the golden's per-token cases");
    let mut worst = 0f32;
    for (key, want) in cases {
        let (dir, prompt) = match key.split_once(" prompt ") {
            _ if key == "plain" => (root().join("models/all-MiniLM-L6-v2"), None),
            Some((stack, p)) => (common::sentence_stack(&root().join("tests/models/st-stacks").join(stack), stack), Some(p)),
            None => (common::sentence_stack(&root().join("tests/models/st-stacks").join(key), key), None),
        };
        let e = load(&dir, device);
        let opts = TokenOptions { prompt: prompt.map(str::to_string), ..TokenOptions::default() };
        let got = pollster::block_on(e.embed_tokens(&text_refs, &opts)).expect("token vectors");
        let want = want.as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{key}: one list per text");
        for (i, (t, w)) in got.iter().zip(want).enumerate() {
            let ids: Vec<u32> = w["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(t.ids, ids, "{key}: text {i}: the tokens sentence-transformers embeds");
            assert_eq!((t.tokens.len(), t.offsets.len(), t.dims), (ids.len(), ids.len(), 384), "{key}: text {i}");
            let flat: Vec<f32> = w["vectors"].as_array().unwrap().iter().flat_map(f32s).collect();
            worst = worst.max(common::assert_close(&format!("{key}: text {i}"), &t.vectors, &flat, TOKEN_ATOL, 0.0));
            // Offsets point into the text given, past the prompt: each real token's span is its own text.
            for (tok, &(s, end)) in t.tokens.iter().zip(&t.offsets) {
                if end > s {
                    let piece: String = texts[i].chars().skip(s).take(end - s).collect();
                    assert_eq!(piece.to_lowercase(), tok.trim_start_matches("##"), "{key}: text {i}: offsets");
                }
            }
        }
        eprintln!("tokens {key} on {}: max |ours − sentence-transformers| {worst:e}", e.device());
    }
}

#[test]
fn token_vectors_as_sentence_transformers_on_the_cpu() {
    token_cases(Device::Cpu);
}

#[test]
fn token_vectors_as_sentence_transformers_on_the_gpu() {
    if common::gpu().is_none() {
        return;
    }
    token_cases(Device::Gpu);
}

fn codes(q: Quantized) -> Vec<Vec<i64>> {
    match q {
        Quantized::Int8(v) => v.into_iter().map(|r| r.into_iter().map(i64::from).collect()).collect(),
        Quantized::Uint8(v) => v.into_iter().map(|r| r.into_iter().map(i64::from).collect()).collect(),
        Quantized::Float32(_) => panic!("float32 is not a code"),
    }
}

fn ints(v: &Value) -> Vec<Vec<i64>> {
    v.as_array().unwrap().iter().map(|r| r.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()).collect()
}

/// sentence-transformers' own float vectors give its codes exactly; our embeddings give codes that differ only
/// where the float is within [`EMBED_ATOL`] of a step's edge (int8, uint8) or of 0 (binary, ubinary).
#[test]
fn quantized_codes_as_sentence_transformers() {
    let g = golden();
    let q = &g["quantized"];
    let input: Vec<Vec<f32>> = q["input"].as_array().unwrap().iter().map(f32s).collect();
    let r = q["ranges"].as_array().unwrap();
    let ranges = Ranges { min: f32s(&r[0]), max: f32s(&r[1]) };
    assert_eq!((input.len(), ranges.min.len()), (6, 384));
    let mut ours_texts = texts(&g);
    ours_texts.extend(["A second look at the same question.".to_string(), "Nothing to see here.".to_string()]);
    let refs: Vec<&str> = ours_texts.iter().map(String::as_str).collect();
    let e = load(&root().join("models/all-MiniLM-L6-v2"), Device::Cpu);
    let ours = pollster::block_on(e.embed(&refs, &EmbedOptions::default())).unwrap();
    for p in [Precision::Int8, Precision::Uint8, Precision::Binary, Precision::Ubinary] {
        for (key, r) in [("from_input", None), ("with_ranges", Some(&ranges))] {
            let want = ints(&q[key][p.name()]);
            assert_eq!(codes(quantize(input.clone(), p, r).unwrap()), want, "{} {key}: sentence-transformers' floats", p.name());
            let got = codes(quantize(ours.clone(), p, r).unwrap());
            assert_eq!(got.len(), want.len());
            let own = Ranges::of(&input).unwrap();
            let r = r.unwrap_or(&own);
            for (i, (gr, wr)) in got.iter().zip(&want).enumerate() {
                assert_eq!(gr.len(), wr.len(), "{} {key}: text {i}: width", p.name());
                for (j, (&a, &b)) in gr.iter().zip(wr).enumerate() {
                    if a == b {
                        continue;
                    }
                    // Where the codes differ, the float must sit at the edge that separates them.
                    let x = input[i][if p.needs_ranges() { j } else { 8 * j }];
                    let near = if p.needs_ranges() {
                        let step = (r.max[j] - r.min[j]) / 255.0;
                        let edge = (x - r.min[j]) / step;
                        (a - b).abs() == 1 && (edge - edge.round()).abs() * step <= EMBED_ATOL
                    } else {
                        // a byte: some one of its 8 floats near 0
                        (0..8).any(|k| input[i].get(8 * j + k).is_some_and(|x| x.abs() <= EMBED_ATOL))
                    };
                    assert!(near, "{} {key}: text {i}[{j}]: ours {a}, sentence-transformers {b} (float {x})", p.name());
                }
            }
        }
    }
}

/// The CLI's `embed-sparse`, `embed-tokens` and `embed --precision`, against the goldens; what does not apply is
/// refused with exit 2 before any line.
#[test]
fn the_cli_gives_every_kind_of_vector() {
    let g = golden();
    let texts = texts(&g);
    let stdin: String = texts.iter().map(|t| serde_json::json!({ "text": t }).to_string() + "\n").collect();
    let run = |args: &[&str]| -> Vec<Value> {
        let out = common::run_cli(args, &stdin);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let stack = sparse_stack();
    let lines = run(&["embed-sparse", "--model", stack.to_str().unwrap(), "--device", "cpu", "--prompt", "query"]);
    let got: Vec<SparseVector> = lines
        .iter()
        .map(|l| {
            let indices: Vec<u32> = l["indices"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(l["tokens"].as_array().unwrap().len(), indices.len(), "a token per entry");
            SparseVector { indices, values: f32s(&l["values"]) }
        })
        .collect();
    check_sparse(&got, &g["sparse"]["splade-log1p-short prompt query"], SPARSE_ATOL, "cli embed-sparse");

    let minilm = root().join("models/all-MiniLM-L6-v2");
    let lines = run(&["embed-tokens", "--model", minilm.to_str().unwrap(), "--device", "cpu"]);
    let want = g["tokens"]["plain"].as_array().unwrap();
    assert_eq!(lines.len(), want.len());
    for (i, (l, w)) in lines.iter().zip(want).enumerate() {
        assert_eq!(l["ids"], w["ids"], "cli embed-tokens: text {i}");
        let got: Vec<f32> = l["vectors"].as_array().unwrap().iter().flat_map(f32s).collect();
        let want: Vec<f32> = w["vectors"].as_array().unwrap().iter().flat_map(f32s).collect();
        common::assert_close(&format!("cli embed-tokens: text {i}"), &got, &want, TOKEN_ATOL, 0.0);
    }

    // ubinary on MiniLM's own vectors: its codes match sentence-transformers' where no float is near 0.
    let q = &g["quantized"];
    let input: Vec<Vec<f32>> = q["input"].as_array().unwrap().iter().map(f32s).collect();
    let lines = run(&["embed", "--model", minilm.to_str().unwrap(), "--device", "cpu", "--precision", "ubinary"]);
    let want = ints(&q["from_input"]["ubinary"]);
    assert_eq!(lines.len(), texts.len());
    for (i, l) in lines.iter().enumerate() {
        let got: Vec<i64> = l["embedding"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        assert_eq!(got.len(), 48, "384 bits in 48 bytes");
        for (j, (a, b)) in got.iter().zip(&want[i]).enumerate() {
            let near = (0..8).any(|k| input[i][8 * j + k].abs() <= EMBED_ATOL);
            assert!(a == b || near, "cli ubinary: text {i} byte {j}: ours {a}, sentence-transformers {b}");
        }
    }
    let ranges = std::env::temp_dir().join(format!("bertgpu-ranges-{}.json", std::process::id()));
    std::fs::write(&ranges, serde_json::to_string(&q["ranges"]).unwrap()).unwrap();
    let lines = run(&["embed", "--model", minilm.to_str().unwrap(), "--device", "cpu", "--precision", "int8", "--ranges",
        ranges.to_str().unwrap()]);
    let want = ints(&q["with_ranges"]["int8"]);
    for (i, l) in lines.iter().enumerate() {
        let got: Vec<i64> = l["embedding"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        assert_eq!(got.len(), 384);
        let off = got.iter().zip(&want[i]).filter(|(a, b)| a != b).count();
        assert!(got.iter().zip(&want[i]).all(|(a, b)| (a - b).abs() <= 1) && off <= 2, "cli int8: text {i}: {off} codes off");
    }

    let refused = |args: &[&str], says: &str| {
        let out = common::run_cli(args, "Paris\n");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing answered");
    };
    let m = minilm.to_str().unwrap();
    refused(&["embed", "--model", m, "--device", "cpu", "--precision", "int8"], "--precision int8 needs --ranges FILE");
    refused(&["embed-sparse", "--model", m, "--device", "cpu"], "makes dense vectors");
    refused(&["embed", "--model", stack.to_str().unwrap(), "--device", "cpu"], "this is a sparse encoder");
    refused(&["embed-tokens", "--model", m, "--device", "cpu", "--prompt", "query"], "prompt `query`");
}

/// A sparse encoder through `convert`: the GGUF carries SpladePooling, its prompts and max_seq_length.
#[test]
fn a_gguf_carries_the_sparse_encoder() {
    let g = golden();
    let dir = sparse_stack();
    let file = dir.join("model.gguf");
    bertgpu::weights::gguf::convert(&dir, bertgpu::dtype::Dtype::F32, &file).expect("convert");
    let e = load(&file, Device::Cpu);
    let query = SparseOptions { prompt: Some("query".into()), ..SparseOptions::default() };
    check_sparse(&sparse(&e, &texts(&g), &query), &g["sparse"]["splade-log1p-short prompt query"], SPARSE_ATOL, "gguf");
    let err = pollster::block_on(e.embed(&["x"], &EmbedOptions::default())).unwrap_err().to_string();
    assert!(err.contains("sparse encoder"), "{err}");
}
