//! GGUF: bit-exact quantization against llama.cpp's quantizers, write → read round trips, BERT files made by
//! llama.cpp's writer, MiniLM converted at every dtype, and hostile files (each a clear error, never a panic).

use std::collections::HashSet;
use std::path::Path;

use bertgpu::tokenizer::gguf_vocab::{self, from_phantom_vocab, to_phantom_vocab};
use bertgpu::weights::gguf::{
    self, gguf_to_hf_name, hf_to_gguf_name, read_bert, tensors_from_safetensors, write_bert, Array, BertGgufMeta,
    Gguf, GgufWriter, Value,
};
use bertgpu::dtype::Dtype;
use bertgpu::weights::quant;
use bertgpu::weights::safetensors::ByteSource;
use bertgpu::weights::{HostData, HostTensor};

mod common;
use common::{cosine, MIN_COSINE_F16, MIN_COSINE_Q4_0, MIN_COSINE_Q8_0};

const MINILM: &str = "models/all-MiniLM-L6-v2";

fn golden(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)).unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Our quantizers reproduce llama.cpp's (gguf-py's numpy port of `quantize_row_q*_ref`) byte for byte, on
/// typical weights, f16-subnormal scales, zero blocks, exact halves, magnitude ties and near-f16-max values.
#[test]
fn quantizers_match_llama_cpp_bit_for_bit() {
    let g: serde_json::Value = serde_json::from_str(&golden("quant_blocks.json")).unwrap();
    let x: Vec<f32> =
        g["input_f32_bits"].as_array().unwrap().iter().map(|b| f32::from_bits(b.as_u64().unwrap() as u32)).collect();
    let q8 = quant::quantize_q8_0(&x).unwrap();
    let q4 = quant::quantize_q4_0(&x).unwrap();
    let want8 = hex(g["q8_0_hex"].as_str().unwrap());
    let want4 = hex(g["q4_0_hex"].as_str().unwrap());
    let first_diff = |a: &[u8], b: &[u8]| a.iter().zip(b).position(|(x, y)| x != y);
    assert_eq!(q8.len(), want8.len());
    assert_eq!(first_diff(&q8, &want8), None, "Q8_0 differs from llama.cpp");
    assert_eq!(q4.len(), want4.len());
    assert_eq!(first_diff(&q4, &want4), None, "Q4_0 differs from llama.cpp");
}

fn sample_tensor(shape: &[usize], seed: u32) -> HostTensor {
    let n: usize = shape.iter().product();
    let data = (0..n).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / 16777216.0 - 0.5).collect();
    HostTensor { shape: shape.to_vec(), data: HostData::F32(data) }
}

/// Every dtype and every metadata value type survives write → read unchanged; dims come back in PyTorch order.
#[test]
fn write_read_round_trip_every_dtype() {
    let base = sample_tensor(&[3, 64], 1);
    let tensors = vec![
        ("a.f32".to_string(), base.clone()),
        ("b.f16".to_string(), quant::to_f16(&base).unwrap()),
        ("c.q8_0".to_string(), quant::quantize(&base, Dtype::Q8_0).unwrap()),
        ("d.q4_0".to_string(), quant::quantize(&base, Dtype::Q4_0).unwrap()),
        ("e.1d".to_string(), sample_tensor(&[7], 2)),
        ("f.4d".to_string(), sample_tensor(&[2, 3, 1, 5], 3)),
    ];
    let meta = vec![
        ("k.u8", Value::U8(200)),
        ("k.i8", Value::I8(-3)),
        ("k.u16", Value::U16(60000)),
        ("k.i16", Value::I16(-30000)),
        ("k.u32", Value::U32(4_000_000_000)),
        ("k.i32", Value::I32(-2_000_000_000)),
        ("k.f32", Value::F32(1.5e-12)),
        ("k.bool", Value::Bool(true)),
        ("k.str", Value::String("héllo ▁wörld".into())),
        ("k.u64", Value::U64(u64::MAX)),
        ("k.i64", Value::I64(i64::MIN)),
        ("k.f64", Value::F64(-2.25)),
        ("k.arr.str", Value::Array(Array::String(vec!["a".into(), "".into(), "[CLS]".into()]))),
        ("k.arr.i32", Value::Array(Array::I32(vec![1, -2, 3]))),
        ("k.arr.f32", Value::Array(Array::F32(vec![0.5, -0.25]))),
        ("k.arr.bool", Value::Array(Array::Bool(vec![true, false]))),
        ("k.arr.u8", Value::Array(Array::U8(vec![]))),
    ];
    let mut w = GgufWriter::new();
    for (k, v) in &meta {
        w.set(k, v.clone());
    }
    for (n, t) in &tensors {
        w.add_tensor(n, t.clone()).unwrap();
    }
    let bytes = w.to_bytes().unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.alignment, 32);
    for (k, v) in &meta {
        assert_eq!(g.get(k), Some(v), "{k}");
    }
    let back = g.load_all(&bytes).unwrap();
    assert_eq!(back, tensors);
    for t in &g.tensors {
        assert_eq!(t.start % 32, 0, "{} is not aligned", t.name);
    }
    assert_eq!(g.tensor_info("f.4d").unwrap().shape, vec![2, 3, 1, 5]);
    assert_eq!(g.tensor_info("c.q8_0").unwrap().dtype, Dtype::Q8_0);
}

#[test]
fn names_map_both_ways() {
    let pairs = [
        ("embeddings.word_embeddings.weight", "token_embd.weight"),
        ("embeddings.position_embeddings.weight", "position_embd.weight"),
        ("embeddings.token_type_embeddings.weight", "token_types.weight"),
        ("embeddings.LayerNorm.weight", "token_embd_norm.weight"),
        ("embeddings.LayerNorm.bias", "token_embd_norm.bias"),
        ("encoder.layer.0.attention.self.query.weight", "blk.0.attn_q.weight"),
        ("encoder.layer.1.attention.self.key.bias", "blk.1.attn_k.bias"),
        ("encoder.layer.2.attention.self.value.weight", "blk.2.attn_v.weight"),
        ("encoder.layer.3.attention.output.dense.weight", "blk.3.attn_output.weight"),
        ("encoder.layer.4.attention.output.LayerNorm.bias", "blk.4.attn_output_norm.bias"),
        ("encoder.layer.5.intermediate.dense.weight", "blk.5.ffn_up.weight"),
        ("encoder.layer.11.output.dense.bias", "blk.11.ffn_down.bias"),
        ("encoder.layer.0.output.LayerNorm.weight", "blk.0.layer_output_norm.weight"),
        ("pooler.dense.weight", "pooler.dense.weight"),
        ("cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.weight"),
        ("classifier.bias", "classifier.bias"),
        ("qa_outputs.weight", "qa_outputs.weight"),
    ];
    for (hf, g) in pairs {
        assert_eq!(hf_to_gguf_name(hf), g);
        assert_eq!(gguf_to_hf_name(g), hf);
    }
    // `bert.` prefix and legacy gamma/beta are normalized first.
    assert_eq!(hf_to_gguf_name("bert.embeddings.LayerNorm.gamma"), "token_embd_norm.weight");
    assert_eq!(hf_to_gguf_name("bert.encoder.layer.1.output.LayerNorm.beta"), "blk.1.layer_output_norm.bias");
    assert_eq!(hf_to_gguf_name("cls.predictions.transform.LayerNorm.gamma"), "cls.predictions.transform.LayerNorm.weight");
}

#[test]
fn phantom_vocab_round_trip() {
    let vocab: Vec<String> = ["[PAD]", "[CLS]", "hello", "##ing", "▁odd", "a"].iter().map(|s| s.to_string()).collect();
    let special: HashSet<usize> = [0, 1].into();
    let (tokens, types) = to_phantom_vocab(&vocab, &special);
    assert_eq!(tokens, ["[PAD]", "[CLS]", "▁hello", "ing", "▁▁odd", "▁a"]);
    assert_eq!(types, [3, 3, 1, 1, 1, 1]);
    assert_eq!(from_phantom_vocab(&tokens, Some(&types)), vocab);
}

/// A BERT GGUF written by llama.cpp's own writer (gguf-py), shaped like `convert_hf_to_gguf.py` output: no
/// tokenizer.json, no config.json, phantom-space vocabulary, mixed F32/F16/Q8_0/Q4_0 tensors.
#[test]
fn reads_llama_cpp_bert_gguf() {
    let bytes = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/llamacpp_tiny_bert.gguf")).unwrap();
    let want: serde_json::Value = serde_json::from_str(&golden("llamacpp_tiny_bert.json")).unwrap();
    let m = read_bert(&bytes).unwrap();
    let vocab: Vec<String> = want["vocab"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    assert_eq!(m.vocab, vocab);
    assert_eq!(m.pooling, Some("mean"));
    let cfg: serde_json::Value = serde_json::from_str(&m.config_json).unwrap();
    assert_eq!(cfg["hidden_size"], 64);
    assert_eq!(cfg["num_hidden_layers"], 1);
    assert_eq!(cfg["num_attention_heads"], 2);
    assert_eq!(cfg["intermediate_size"], 128);
    assert_eq!(cfg["max_position_embeddings"], 16);
    assert_eq!(cfg["vocab_size"], 20);
    assert_eq!(cfg["type_vocab_size"], 2);
    assert!((cfg["layer_norm_eps"].as_f64().unwrap() - 1e-12).abs() < 1e-18);

    let tensors = want["tensors"].as_object().unwrap();
    assert_eq!(m.tensors.len(), tensors.len());
    for (gname, w) in tensors {
        let hf = gguf_to_hf_name(gname);
        assert_ne!(&hf, gname, "{gname} should map to a Hugging Face name");
        let (_, t) = m.tensors.iter().find(|(n, _)| *n == hf).unwrap_or_else(|| panic!("{hf} missing"));
        let shape: Vec<usize> = w["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        assert_eq!(t.shape, shape, "{hf}");
        let x = quant::to_f32(t).unwrap();
        let first: Vec<f32> = w["first"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        assert_eq!(&x[..8], &first[..], "{hf}: decoded values differ from gguf-py's dequantize");
        // The sum of ≤ 8192 values each |x| < 1, computed in f64 on both sides: only f32→f64 rounding differs (none).
        let sum: f64 = x.iter().map(|&v| v as f64).sum();
        assert!((sum - w["sum"].as_f64().unwrap()).abs() < 1e-9, "{hf}: sum {sum} vs {}", w["sum"]);
    }

    // The rebuilt WordPiece tokenizer works with the `tokenizers` crate.
    let tok = tokenizers::Tokenizer::from_bytes(m.tokenizer_json.as_bytes()).unwrap();
    let enc = tok.encode("Hello world, the cats sat", true).unwrap();
    let toks: Vec<&str> = enc.get_tokens().iter().map(|s| s.as_str()).collect();
    assert_eq!(toks, ["[CLS]", "hello", "world", ",", "the", "cat", "##s", "sat", "[SEP]"]);
}

fn minilm() -> Option<std::path::PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(MINILM);
    if p.join("model.safetensors").exists() {
        Some(p)
    } else {
        // The checkpoints are fetched by scripts/fetch-models.sh; say so instead of passing silently.
        panic!("{} is missing: run scripts/fetch-models.sh", p.display());
    }
}

fn minilm_meta_and_tensors() -> (String, String, Vec<(String, HostTensor)>) {
    let dir = minilm().unwrap();
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let tok = std::fs::read_to_string(dir.join("tokenizer.json")).unwrap();
    let tensors = tensors_from_safetensors(&std::fs::read(dir.join("model.safetensors")).unwrap()).unwrap();
    (config, tok, tensors)
}

/// The F32 GGUF of all-MiniLM-L6-v2 holds bit-identical tensors under the same Hugging Face names, plus the
/// original config.json and tokenizer.json verbatim; converting is deterministic.
#[test]
fn minilm_f32_gguf_is_bit_identical() {
    let (config, tok, tensors) = minilm_meta_and_tensors();
    let meta = BertGgufMeta { name: "all-MiniLM-L6-v2", config_json: &config, tokenizer_json: &tok, tokenizer_config_json: None, pooling: Some("mean") };
    let bytes = write_bert(&meta, &tensors, Dtype::F32).unwrap();
    assert_eq!(bytes, write_bert(&meta, &tensors, Dtype::F32).unwrap(), "convert is not deterministic");
    let m = read_bert(&bytes).unwrap();
    assert_eq!(m.config_json, config);
    assert_eq!(m.tokenizer_json, tok);
    assert_eq!(m.pooling, Some("mean"));
    assert_eq!(m.vocab.len(), 30522);
    assert_eq!(m.vocab[101], "[CLS]");
    assert_eq!(m.tensors.len(), tensors.len());
    for (name, t) in &tensors {
        let (_, got) = m.tensors.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(got, t, "{name} differs");
    }
    // llama.cpp's names are in the file.
    assert!(m.header.tensor_info("blk.5.ffn_down.weight").is_some());
    assert_eq!(m.header.get("bert.block_count"), Some(&Value::U32(6)));
    assert_eq!(m.header.get("bert.embedding_length"), Some(&Value::U32(384)));
}

/// Quantized conversions store exactly `quantize(original)` for the encoder linears and word embeddings,
/// f16 for the other matrices and f32 for vectors; sizes against the f32 safetensors are printed and checked
/// against the targets (Q8_0 ≤ 0.30×, Q4_0 ≤ 0.18×).
#[test]
fn minilm_quantized_conversions() {
    let (config, tok, tensors) = minilm_meta_and_tensors();
    let st_bytes = std::fs::metadata(minilm().unwrap().join("model.safetensors")).unwrap().len() as f64;
    let meta = BertGgufMeta { name: "all-MiniLM-L6-v2", config_json: &config, tokenizer_json: &tok, tokenizer_config_json: None, pooling: Some("mean") };
    for (dtype, limit) in [(Dtype::F16, 0.55), (Dtype::Q8_0, 0.30), (Dtype::Q4_0, 0.18)] {
        let bytes = write_bert(&meta, &tensors, dtype).unwrap();
        let ratio = bytes.len() as f64 / st_bytes;
        println!("{dtype:?}: {} bytes = {ratio:.3} × the f32 safetensors ({st_bytes} bytes)", bytes.len());
        assert!(ratio <= limit, "{dtype:?} is {ratio:.3}× the f32 size, above {limit}");
        let m = read_bert(&bytes).unwrap();
        for (name, t) in &tensors {
            let (_, got) = m.tensors.iter().find(|(n, _)| n == name).unwrap();
            let gname = hf_to_gguf_name(name);
            let want = match gguf::storage_for(&gname, &t.shape, dtype, 6) {
                Dtype::F32 => t.clone(),
                Dtype::F16 => quant::to_f16(t).unwrap(),
                Dtype::Q8_0 => quant::quantize(t, Dtype::Q8_0).unwrap(),
                Dtype::Q4_0 => quant::quantize(t, Dtype::Q4_0).unwrap(),
            };
            assert_eq!(got, &want, "{name}");
            let quantized = dtype != Dtype::F16 && (gname.starts_with("blk.") && t.shape.len() == 2 || gname == "token_embd.weight");
            // Q4_0 keeps attn_v everywhere and ffn_up in the last half of the 6 layers at Q8_0 (see storage_for).
            let q8_in_q4 = gname.ends_with("attn_v.weight") || ["blk.3.ffn_up", "blk.4.ffn_up", "blk.5.ffn_up"].iter().any(|p| gname.starts_with(p));
            let expected = match (quantized, dtype) {
                (false, _) if t.shape.len() == 1 => Dtype::F32,
                (false, _) => Dtype::F16,
                (true, Dtype::Q4_0) if q8_in_q4 => Dtype::Q8_0,
                (true, Dtype::Q4_0) => Dtype::Q4_0,
                (true, _) => Dtype::Q8_0,
            };
            assert_eq!(got.data.dtype(), expected, "{name}");
        }
    }
}

/// A tied MLM decoder (equal to the word embeddings) is not stored twice.
#[test]
fn tied_decoder_is_not_stored() {
    let (config, tok, mut tensors) = minilm_meta_and_tensors();
    let word = tensors.iter().find(|(n, _)| n == "embeddings.word_embeddings.weight").unwrap().1.clone();
    tensors.push(("cls.predictions.decoder.weight".into(), word));
    tensors.push(("cls.predictions.bias".into(), sample_tensor(&[30522], 9)));
    let meta = BertGgufMeta { name: "x", config_json: &config, tokenizer_json: &tok, tokenizer_config_json: None, pooling: None };
    let m = read_bert(&write_bert(&meta, &tensors, Dtype::Q8_0).unwrap()).unwrap();
    assert!(m.tensors.iter().all(|(n, _)| n != "cls.predictions.decoder.weight"));
    assert!(m.tensors.iter().any(|(n, _)| n == "cls.predictions.bias"));
}

/// The WordPiece tokenizer rebuilt from a vocabulary alone (what a llama.cpp file carries) tokenizes like the
/// model's own tokenizer.json.
#[test]
fn rebuilt_tokenizer_matches_minilm() {
    let dir = minilm().unwrap();
    let mut orig = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    orig.with_padding(None).with_truncation(None).unwrap();
    let vocab: Vec<String> = std::fs::read_to_string(dir.join("vocab.txt")).unwrap().lines().map(String::from).collect();
    let special: HashSet<usize> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .iter()
        .map(|s| vocab.iter().position(|v| v == s).unwrap())
        .collect();
    let rebuilt = tokenizers::Tokenizer::from_bytes(gguf_vocab::wordpiece_tokenizer_json(&vocab, &special).unwrap().as_bytes()).unwrap();
    for (a, b) in [
        ("The quick brown fox jumps over the lazy dog.", None),
        ("Héllo, WORLD!! naïve café — 東京 tokenization [MASK] x", None),
        ("What is the capital of France?", Some("Paris is the capital of France.")),
    ] {
        let (e1, e2) = match b {
            None => (orig.encode(a, true).unwrap(), rebuilt.encode(a, true).unwrap()),
            Some(b) => (orig.encode((a, b), true).unwrap(), rebuilt.encode((a, b), true).unwrap()),
        };
        assert_eq!(e1.get_ids(), e2.get_ids(), "{a}");
        assert_eq!(e1.get_type_ids(), e2.get_type_ids(), "{a}");
        assert_eq!(e1.get_offsets(), e2.get_offsets(), "{a}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Hostile files
// ---------------------------------------------------------------------------------------------------------------

/// A small valid file: two tensors (F32 and Q8_0) and a few metadata entries.
fn small_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("bert".into()));
    w.set("a.list", Value::Array(Array::String(vec!["x".into(), "yz".into()])));
    w.add_tensor("t0", sample_tensor(&[2, 3], 1)).unwrap();
    w.add_tensor("t1", quant::quantize(&sample_tensor(&[2, 32], 2), Dtype::Q8_0).unwrap()).unwrap();
    w.to_bytes().unwrap()
}

fn err(bytes: &[u8]) -> String {
    match Gguf::parse(bytes) {
        Ok(_) => panic!("hostile file was accepted"),
        Err(e @ bertgpu::Error::Gguf(_)) => e.to_string(),
        Err(e) => panic!("not a Gguf error: {e}"),
    }
}

fn expect(bytes: &[u8], needle: &str) {
    let e = err(bytes);
    assert!(e.contains(needle), "error `{e}` does not mention `{needle}`");
}

/// Builds a header by hand: magic, version, counts, then raw bytes.
fn header(version: u32, n_tensors: u64, n_kv: u64, rest: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&n_tensors.to_le_bytes());
    b.extend_from_slice(&n_kv.to_le_bytes());
    b.extend_from_slice(rest);
    b
}

fn s(x: &str) -> Vec<u8> {
    let mut b = (x.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(x.as_bytes());
    b
}

/// One tensor info: name, dims (GGUF order), type, offset.
fn tinfo(name: &str, ne: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut b = s(name);
    b.extend_from_slice(&(ne.len() as u32).to_le_bytes());
    for d in ne {
        b.extend_from_slice(&d.to_le_bytes());
    }
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(&offset.to_le_bytes());
    b
}

/// A file with the given tensor infos and `data` bytes of tensor data (after 32-byte alignment).
fn with_tensors(infos: &[Vec<u8>], data: usize) -> Vec<u8> {
    let mut b = header(3, infos.len() as u64, 0, &infos.concat());
    b.resize(b.len().div_ceil(32) * 32 + data, 0);
    b
}

#[test]
fn truncated_anywhere_is_a_clear_error() {
    let f = small_file();
    assert!(Gguf::parse(&f).is_ok());
    for cut in 0..f.len() {
        let e = err(&f[..cut]);
        assert!(e.contains("truncated") || e.contains("past the end"), "cut at {cut}: {e}");
    }
}

#[test]
fn wrong_magic_and_version() {
    let mut f = small_file();
    f[0] = b'X';
    expect(&f, "not a GGUF file");
    expect(b"PK\x03\x04 this is a zip", "not a GGUF file");
    for v in [0u32, 1, 4, u32::MAX] {
        expect(&header(v, 0, 0, &[]), &format!("version {v} is not supported"));
    }
    assert!(Gguf::parse(&header(2, 0, 0, &[])).is_ok(), "version 2 has the same layout");
}

#[test]
fn absurd_counts() {
    expect(&header(3, u64::MAX, 0, &[]), "tensors, more than the limit");
    expect(&header(3, 0, 1 << 40, &[]), "metadata entries, more than the limit");
    // Within the caps but with nothing behind them.
    expect(&header(3, 1000, 0, &[]), "truncated");
    expect(&header(3, 0, 1000, &[]), "truncated");
}

#[test]
fn huge_strings_and_arrays() {
    let mut kv = (u64::MAX).to_le_bytes().to_vec(); // key length
    expect(&header(3, 0, 1, &kv), "more than the limit");
    kv = s("k");
    kv.extend_from_slice(&8u32.to_le_bytes());
    kv.extend_from_slice(&(1u64 << 62).to_le_bytes()); // string value length
    expect(&header(3, 0, 1, &kv), "more than the limit of");
    kv = s("k");
    kv.extend_from_slice(&8u32.to_le_bytes());
    kv.extend_from_slice(&(1u64 << 20).to_le_bytes()); // under the cap, but past the end
    expect(&header(3, 0, 1, &kv), "truncated");
    // Arrays: over the cap, and a count that cannot fit in the remaining bytes.
    for (n, needle) in [(u64::MAX, "more than the limit"), ((1u64 << 24) - 1, "truncated")] {
        kv = s("arr");
        kv.extend_from_slice(&9u32.to_le_bytes());
        kv.extend_from_slice(&8u32.to_le_bytes()); // of strings
        kv.extend_from_slice(&n.to_le_bytes());
        expect(&header(3, 0, 1, &kv), needle);
    }
    // Nested arrays, unknown value types, bad bools, duplicate keys.
    kv = s("arr");
    kv.extend_from_slice(&9u32.to_le_bytes());
    kv.extend_from_slice(&9u32.to_le_bytes());
    kv.extend_from_slice(&1u64.to_le_bytes());
    expect(&header(3, 0, 1, &kv), "array of arrays");
    kv = s("k");
    kv.extend_from_slice(&13u32.to_le_bytes());
    expect(&header(3, 0, 1, &kv), "unknown value type 13");
    kv = s("k");
    kv.extend_from_slice(&7u32.to_le_bytes());
    kv.push(2);
    expect(&header(3, 0, 1, &kv), "bool byte is 2");
    let mut one = s("k");
    one.extend_from_slice(&4u32.to_le_bytes());
    one.extend_from_slice(&1u32.to_le_bytes());
    expect(&header(3, 0, 2, &[one.clone(), one].concat()), "appears twice");
    // Invalid UTF-8 in a key.
    let mut bad = 2u64.to_le_bytes().to_vec();
    bad.extend_from_slice(&[0xff, 0xfe]);
    bad.extend_from_slice(&4u32.to_le_bytes());
    bad.extend_from_slice(&1u32.to_le_bytes());
    expect(&header(3, 0, 1, &bad), "not valid UTF-8");
}

#[test]
fn bad_alignment_value() {
    for a in [0u32, 3, 48, 1 << 30] {
        let mut kv = s("general.alignment");
        kv.extend_from_slice(&4u32.to_le_bytes());
        kv.extend_from_slice(&a.to_le_bytes());
        expect(&header(3, 0, 1, &kv), "power of two");
    }
}

#[test]
fn absurd_dimensions() {
    expect(&with_tensors(&[tinfo("t", &[], 0, 0)], 0), "has 0 dimensions");
    expect(&with_tensors(&[tinfo("t", &[1, 1, 1, 1, 1], 0, 0)], 0), "has 5 dimensions");
    expect(&with_tensors(&[tinfo("t", &[4, 0], 0, 0)], 0), "of size 0");
    expect(&with_tensors(&[tinfo("t", &[1 << 32, 1 << 32, 1 << 32], 0, 0)], 0), "overflows");
    // The element count fits in u64 but the byte size does not.
    expect(&with_tensors(&[tinfo("t", &[1 << 62, 2], 0, 0)], 0), "overflows");
    // A large but representable tensor in a small file.
    expect(&with_tensors(&[tinfo("t", &[1 << 20, 1 << 20], 0, 0)], 64), "past the end of the file");
}

#[test]
fn offsets_past_the_end_overlaps_and_misalignment() {
    // 4×4 f32 = 64 bytes at offset 0 in 64 bytes of data: fine. At 32: past the end.
    assert!(Gguf::parse(&with_tensors(&[tinfo("t", &[4, 4], 0, 0)], 64)).is_ok());
    expect(&with_tensors(&[tinfo("t", &[4, 4], 0, 32)], 64), "past the end of the file");
    expect(&with_tensors(&[tinfo("t", &[4, 4], 0, u64::MAX - 31)], 64), "past the end of the file");
    expect(&with_tensors(&[tinfo("t", &[4, 4], 0, 8)], 128), "not a multiple of the alignment");
    // Two tensors sharing bytes: a tensor whose real size is larger than the gap before the next one.
    expect(&with_tensors(&[tinfo("a", &[4, 4], 0, 0), tinfo("b", &[4], 0, 32)], 128), "overlap");
    expect(&with_tensors(&[tinfo("a", &[4], 0, 0), tinfo("a", &[4], 0, 32)], 128), "appears twice");
}

#[test]
fn unsupported_and_mismatched_types() {
    expect(&with_tensors(&[tinfo("t", &[32], 3, 0)], 64), "unsupported tensor type Q4_1");
    expect(&with_tensors(&[tinfo("t", &[32], 30, 0)], 64), "unsupported tensor type BF16");
    expect(&with_tensors(&[tinfo("t", &[32], 12, 0)], 256), "unsupported tensor type Q4_K");
    expect(&with_tensors(&[tinfo("t", &[32], 9999, 0)], 64), "unsupported tensor type unknown");
    // Q8_0 rows must hold whole blocks.
    expect(&with_tensors(&[tinfo("t", &[33, 2], 8, 0)], 128), "not a multiple of the block size 32");
}

/// Flipping any single byte of a valid file never panics (errors or, rarely, a different valid file).
#[test]
fn single_byte_corruption_never_panics() {
    let f = small_file();
    for i in 0..f.len() {
        for v in [0x00u8, 0xff, 0x80, 0x7f] {
            let mut g = f.clone();
            g[i] = v;
            if let Ok(h) = Gguf::parse(&g) {
                let _ = h.load_all(&g);
            }
            let _ = read_bert(&g);
        }
    }
}

/// Random multi-byte mutations (seeded xorshift) of a valid file and of the llama.cpp-written BERT file, plus
/// random truncation: parsing, loading every tensor and reading as BERT never panic.
#[test]
fn random_mutations_never_panic() {
    let tiny = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/llamacpp_tiny_bert.gguf")).unwrap();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for base in [small_file(), tiny] {
        for _ in 0..400 {
            let mut f = base.clone();
            for _ in 0..1 + next() % 8 {
                let i = (next() % f.len() as u64) as usize;
                f[i] = next() as u8;
            }
            if next() % 4 == 0 {
                f.truncate((next() % f.len() as u64) as usize);
            }
            if let Ok(h) = Gguf::parse(&f) {
                let _ = h.load_all(&f);
            }
            let _ = read_bert(&f);
        }
    }
}

#[test]
fn read_bert_refuses_other_architectures() {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    let e = read_bert(&w.to_bytes().unwrap()).unwrap_err().to_string();
    assert!(e.contains("`llama` model"), "{e}");
    let e = read_bert(&GgufWriter::new().to_bytes().unwrap()).unwrap_err().to_string();
    assert!(e.contains("general.architecture"), "{e}");
}

// ---------------------------------------------------------------------------------------------------------------
// Whole-model accuracy of converted files (CPU backend, against the PyTorch goldens of tests/golden/model.py)
// ---------------------------------------------------------------------------------------------------------------

// The cosine floors per dtype (MIN_COSINE_F16, MIN_COSINE_Q8_0, MIN_COSINE_Q4_0) are in tests/common/mod.rs: the
// converted families of tests/gguf_families.rs are held to the same ones.

/// Convert → load → embed: the F32 GGUF gives bit-identical embeddings to the safetensors folder; F16, Q8_0 and
/// Q4_0 stay within their cosine floors of the PyTorch goldens for every sentence.
#[test]
fn minilm_gguf_embeddings_match_goldens() {
    use bertgpu::engine::{Device, Engine};
    use bertgpu::tasks::{EmbedOptions, Pooling};
    let g: serde_json::Value = serde_json::from_str(&golden("model.json")).unwrap();
    let g = &g["all-MiniLM-L6-v2"];
    let sentences: Vec<&str> = g["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let want: Vec<Vec<f32>> = g["mean_normalized"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect();
    let opts = EmbedOptions { pooling: Some(Pooling::Mean), normalize: Some(true), batch_size: 8, ..EmbedOptions::default() };
    let folder = pollster::block_on(Engine::from_dir(minilm().unwrap(), Device::Cpu)).unwrap();
    let base = pollster::block_on(folder.embed(&sentences, &opts)).unwrap();

    let (config, tok, tensors) = minilm_meta_and_tensors();
    let tc = std::fs::read_to_string(minilm().unwrap().join("tokenizer_config.json")).ok();
    let meta = BertGgufMeta { name: "m", config_json: &config, tokenizer_json: &tok, tokenizer_config_json: tc.as_deref(), pooling: Some("mean") };
    for (dtype, floor) in [
        (Dtype::F32, 1.0),
        (Dtype::F16, MIN_COSINE_F16),
        (Dtype::Q8_0, MIN_COSINE_Q8_0),
        (Dtype::Q4_0, MIN_COSINE_Q4_0),
    ] {
        let bytes = write_bert(&meta, &tensors, dtype).unwrap();
        let e = pollster::block_on(Engine::from_gguf(&bytes, Device::Cpu)).unwrap();
        let got = pollster::block_on(e.embed(&sentences, &opts)).unwrap();
        if dtype == Dtype::F32 {
            assert_eq!(got, base, "the F32 GGUF must give bit-identical embeddings to the folder");
            continue;
        }
        let cos: Vec<f64> = got.iter().zip(&want).map(|(a, b)| cosine(a, b)).collect();
        let (worst, &min) = cos.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).unwrap();
        println!("{dtype:?}: cosines to PyTorch {cos:.6?}");
        assert!(min >= floor, "{dtype:?}: sentence {worst} ({:?}) has cosine {min:.6} < {floor}", sentences[worst]);
    }
}

/// The same floors on the GPU backend (lavapipe natively), which keeps the weights as stored and runs the packed
/// kernels (`matmul_packed`, the embeddings' table decoding): every encoder linear and the word table are checked to
/// be on the device in the file's dtype. Skips, saying why, only when there is no GPU adapter.
#[test]
fn minilm_gguf_embeddings_on_gpu() {
    use bertgpu::engine::{Device, Engine};
    use bertgpu::tasks::{EmbedOptions, Pooling};
    let g: serde_json::Value = serde_json::from_str(&golden("model.json")).unwrap();
    let g = &g["all-MiniLM-L6-v2"];
    let sentences: Vec<&str> = g["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let want: Vec<Vec<f32>> = g["mean_normalized"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect();
    let opts = EmbedOptions { pooling: Some(Pooling::Mean), normalize: Some(true), batch_size: 8, ..EmbedOptions::default() };
    let (config, tok, tensors) = minilm_meta_and_tensors();
    let meta = BertGgufMeta { name: "m", config_json: &config, tokenizer_json: &tok, tokenizer_config_json: None, pooling: Some("mean") };
    for (dtype, floor) in [
        (Dtype::F16, MIN_COSINE_F16),
        (Dtype::Q8_0, MIN_COSINE_Q8_0),
        (Dtype::Q4_0, MIN_COSINE_Q4_0),
    ] {
        let bytes = write_bert(&meta, &tensors, dtype).unwrap();
        let what = format!("minilm_gguf_embeddings_on_gpu ({dtype:?})");
        let Some(e) = common::on_gpu(&what, pollster::block_on(Engine::from_gguf(&bytes, Device::Gpu))) else {
            return;
        };
        let bertgpu::engine::Engine::Gpu(m) = &e else { panic!("asked for the GPU") };
        let stored = m.bert.embeddings.word_embeddings();
        let want_dtype = match dtype {
            Dtype::F16 => bertgpu::backend::Dtype::F16,
            Dtype::Q4_0 => bertgpu::backend::Dtype::Q4_0,
            _ => bertgpu::backend::Dtype::Q8_0,
        };
        assert_eq!(bertgpu::backend::Backend::dtype(&m.backend, stored), want_dtype, "word table widened on the GPU");
        let got = pollster::block_on(e.embed(&sentences, &opts)).unwrap();
        let cos: Vec<f64> = got.iter().zip(&want).map(|(a, b)| cosine(a, b)).collect();
        let (worst, &min) = cos.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).unwrap();
        println!("{dtype:?} on the GPU: cosines to PyTorch {cos:.6?}");
        assert!(min >= floor, "{dtype:?}: sentence {worst} ({:?}) has cosine {min:.6} < {floor}", sentences[worst]);
    }
}

/// |ours − PyTorch| per value of the llama.cpp file's mean-pooled embeddings (values ~0.07), on the CPU. Both run in
/// f32 on the same decoded weights (gguf-py's dequantization is exact in f32, and so is ours), so only the order of
/// summation differs: measured max 6.0e-8 (8 ulps). The bound is about 16× that, for other CPUs' kernels (FMA or
/// not); a wrong weight, ε or GELU moves values by far more.
const LLAMACPP_EMBED_ATOL: f32 = 1e-6;

/// The llama.cpp-style file (no tokenizer.json, no config.json: the tokenizer is rebuilt from the phantom-space
/// vocabulary, the config from `bert.*` keys) tokenizes and embeds as PyTorch's BertTokenizer and BertModel do on
/// the same vocabulary and dequantized weights (tests/golden/make_llamacpp_bert_gguf.py).
#[test]
fn llama_cpp_file_matches_pytorch() {
    use bertgpu::engine::{Device, Engine};
    use bertgpu::tasks::EmbedOptions;
    let bytes = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/llamacpp_tiny_bert.gguf")).unwrap();
    let g: serde_json::Value = serde_json::from_str(&golden("llamacpp_tiny_bert.json")).unwrap();
    let cases = g["embeddings"]["texts"].as_array().unwrap();
    assert!(!cases.is_empty());
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let e = pollster::block_on(Engine::from_gguf(&bytes, Device::Cpu)).unwrap();
    let Engine::Cpu(m) = &e else { panic!("asked for the CPU") };
    for (t, c) in texts.iter().zip(cases) {
        let ids: Vec<u64> = m.tokenizer.encode(t, None).unwrap().ids.iter().map(|&i| i as u64).collect();
        let want: Vec<u64> = c["input_ids"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap()).collect();
        assert_eq!(ids, want, "token ids of {t:?}");
    }
    // One padded batch: the texts differ in length.
    let got = pollster::block_on(e.embed(&texts, &EmbedOptions::default())).unwrap();
    assert_eq!(got.len(), cases.len());
    let mut worst = 0f32;
    for (v, c) in got.iter().zip(cases) {
        let want = common::floats(&c["mean_pooled"]);
        assert_eq!(v.len(), 64, "hidden size");
        worst = worst.max(common::assert_close(&format!("{:?}", c["text"]), v, &want, LLAMACPP_EMBED_ATOL, 0.0));
    }
    println!("llama.cpp file: max |ours − torch| = {worst:e}");
}

fn convert_folder(name: &str, dtype: Dtype) -> Vec<u8> {
    // Tests run in parallel threads of one process, and two of them convert the same folder: a name per call.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name);
    let out = std::env::temp_dir().join(format!("bertgpu-test-{name}-{dtype:?}-{}-{call}.gguf", std::process::id()));
    gguf::convert(&dir, dtype, &out).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    bytes
}

/// splade-tiny (BertForMaskedLM, legacy gamma/beta names, tied decoder absent) through `convert`: Q8_0 leaves
/// the top-1 prediction of every golden mask unchanged, and F32 reproduces the folder's scores exactly.
#[test]
fn splade_fill_mask_top1_unchanged_by_q8_0() {
    use bertgpu::engine::{Device, Engine};
    let g: serde_json::Value = serde_json::from_str(&golden("heads.json")).unwrap();
    let cases = g["splade_fill_mask"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let folder = pollster::block_on(Engine::from_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/splade-tiny"), Device::Cpu)).unwrap();
    let base = pollster::block_on(folder.fill_mask(&texts, 5)).unwrap();
    let f32e = pollster::block_on(Engine::from_gguf(&convert_folder("splade-tiny", Dtype::F32), Device::Cpu)).unwrap();
    let q8e = pollster::block_on(Engine::from_gguf(&convert_folder("splade-tiny", Dtype::Q8_0), Device::Cpu)).unwrap();
    let f32p = pollster::block_on(f32e.fill_mask(&texts, 5)).unwrap();
    let q8p = pollster::block_on(q8e.fill_mask(&texts, 5)).unwrap();
    for (i, c) in cases.iter().enumerate() {
        for (m, preds) in c["predictions"].as_array().unwrap().iter().enumerate() {
            let want = preds[0]["token"].as_u64().unwrap() as u32;
            assert_eq!(base[i][m][0].token, want, "folder, {:?} mask {m}", texts[i]);
            assert_eq!(q8p[i][m][0].token, want, "Q8_0 changed the top-1 of {:?} mask {m}", texts[i]);
            let scores = |p: &Vec<bertgpu::heads::masked_lm::FillMaskPrediction>| p.iter().map(|x| (x.token, x.score)).collect::<Vec<_>>();
            assert_eq!(scores(&f32p[i][m]), scores(&base[i][m]), "F32 GGUF differs from the folder");
        }
    }
}

/// The same on the GPU: splade-tiny in Q8_0 runs the packed kernels there (the MLM transform is an f16 matrix, the
/// tied decoder is the Q8_0 word table) and keeps the top-1 of every golden mask. Skips only without an adapter.
#[test]
fn splade_fill_mask_top1_unchanged_by_q8_0_on_gpu() {
    use bertgpu::engine::{Device, Engine};
    let g: serde_json::Value = serde_json::from_str(&golden("heads.json")).unwrap();
    let cases = g["splade_fill_mask"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let q8 = pollster::block_on(Engine::from_gguf(&convert_folder("splade-tiny", Dtype::Q8_0), Device::Gpu));
    let Some(q8e) = common::on_gpu("splade_fill_mask_top1_unchanged_by_q8_0_on_gpu", q8) else { return };
    let q8p = pollster::block_on(q8e.fill_mask(&texts, 5)).unwrap();
    for (i, c) in cases.iter().enumerate() {
        for (m, preds) in c["predictions"].as_array().unwrap().iter().enumerate() {
            let want = preds[0]["token"].as_u64().unwrap() as u32;
            assert_eq!(q8p[i][m][0].token, want, "Q8_0 on the GPU changed the top-1 of {:?} mask {m}", texts[i]);
        }
    }
}

/// `bertgpu convert` then `bertgpu embed --model FILE.gguf`: the F32 file gives the folder's output line for
/// line; a truncated file exits 2 with a message naming the problem.
#[test]
fn cli_convert_and_embed_from_gguf() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let bin = env!("CARGO_BIN_EXE_bertgpu");
    let dir = minilm().unwrap();
    let out = std::env::temp_dir().join(format!("bertgpu-cli-{}.gguf", std::process::id()));
    let st = Command::new(bin)
        .args(["convert", "--model", dir.to_str().unwrap(), "--dtype", "f32", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let embed = |model: &Path| {
        let mut c = Command::new(bin)
            .args(["embed", "--device", "cpu", "--normalize", "--model", model.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(b"Hello world!\n{\"text\": \"a\"}\n").unwrap();
        c.wait_with_output().unwrap()
    };
    let a = embed(&dir);
    let b = embed(&out);
    assert!(a.status.success() && b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    assert_eq!(a.stdout, b.stdout);
    let bytes = std::fs::read(&out).unwrap();
    std::fs::write(&out, &bytes[..bytes.len() / 2]).unwrap();
    let t = embed(&out);
    let _ = std::fs::remove_file(&out);
    assert_eq!(t.status.code(), Some(2));
    let err = String::from_utf8_lossy(&t.stderr);
    assert!(err.contains("truncated") || err.contains("past the end"), "{err}");
}

/// A file outside this memory (no `as_slice`, as the browser's JS bytes): read only through `read`.
struct Elsewhere<'a>(&'a [u8]);

impl ByteSource for Elsewhere<'_> {
    fn byte_len(&self) -> usize {
        self.0.len()
    }
    fn read(&self, at: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.0[at..at + out.len()]);
    }
}

#[test]
fn reads_a_file_outside_memory_a_piece_at_a_time() {
    // A header longer than the first read (2 MiB): a 3 MiB metadata string, so that the prefix has to grow.
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("bert".into()));
    w.set("big", Value::String("x".repeat(3 << 20)));
    w.add_tensor("t0", sample_tensor(&[2, 3], 1)).unwrap();
    w.add_tensor("t1", quant::quantize(&sample_tensor(&[64, 32], 2), Dtype::Q8_0).unwrap()).unwrap();
    let bytes = w.to_bytes().unwrap();
    let (there, here) = (Gguf::parse(&Elsewhere(&bytes)).unwrap(), Gguf::parse(&bytes).unwrap());
    assert_eq!(there.get("big"), here.get("big"));
    assert_eq!(there.load_all(&Elsewhere(&bytes)).unwrap(), here.load_all(&bytes).unwrap());
    // Cut anywhere (in the first read, in the string past it, in the tensors): the error a file in memory gets.
    for cut in [100, (2 << 20) + 5, 3 << 20, bytes.len() - 1] {
        let there = Gguf::parse(&Elsewhere(&bytes[..cut])).err().map(|e| e.to_string());
        let here = Gguf::parse(&bytes[..cut]).err().map(|e| e.to_string());
        assert!(here.is_some(), "cut at {cut} was accepted");
        assert_eq!(there, here, "cut at {cut}");
    }
}
