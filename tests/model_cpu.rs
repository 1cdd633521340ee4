//! The CPU model against PyTorch goldens (tests/golden/model.py → model.json) on the real checkpoints in ./models
//! (scripts/fetch-models.sh), single and batched with padding, plus loading errors.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bertgpu::backend::cpu::{CpuBackend, CpuTensor};
use bertgpu::backend::Backend;
use bertgpu::config::BertConfig;
use bertgpu::model::BertModel;
use bertgpu::tokenizer::Batch;
use bertgpu::dtype::Dtype;
use bertgpu::weights::{quant, Weights};
use serde_json::Value;

mod common;
use common::{floats, cosine};

/// Max |ours − PyTorch| on hidden-state values (issue 2's bar). Both sides are f32; ours sums in another order
/// (blocked GEMM, FMA), which moves values of magnitude ≲ 10 by ~1e-5 after 6 layers.
const HIDDEN_ATOL: f32 = 1e-4;
/// Min cosine between our pooled embeddings and PyTorch's, per sentence (issue 2's bar).
const MIN_COSINE: f64 = 0.99999;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn goldens() -> &'static Value {
    static G: OnceLock<Value> = OnceLock::new();
    G.get_or_init(|| {
        let text = std::fs::read_to_string(root().join("tests/golden/model.json")).expect("tests/golden/model.json");
        serde_json::from_str(&text).expect("model.json parses")
    })
}

fn load(name: &str) -> BertModel<CpuBackend> {
    let dir = root().join("models").join(name);
    assert!(dir.join("model.safetensors").exists(), "{} missing: run scripts/fetch-models.sh", dir.display());
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    let w = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    BertModel::load(&w, &cfg, &CpuBackend::new()).unwrap()
}

fn model(name: &str) -> &'static BertModel<CpuBackend> {
    static MINILM: OnceLock<BertModel<CpuBackend>> = OnceLock::new();
    static SPLADE: OnceLock<BertModel<CpuBackend>> = OnceLock::new();
    match name {
        "all-MiniLM-L6-v2" => MINILM.get_or_init(|| load(name)),
        "splade-tiny" => SPLADE.get_or_init(|| load(name)),
        _ => unreachable!(),
    }
}

fn ids(g: &Value) -> Vec<Vec<u32>> {
    g["input_ids"].as_array().unwrap().iter()
        .map(|s| s.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect())
        .collect()
}

/// Right-padded batch of single sentences (segment 0), padded to `t`.
fn batch(seqs: &[Vec<u32>], t: usize) -> Batch {
    let b = seqs.len();
    let mut out = Batch { input_ids: vec![0; b * t], token_type_ids: vec![0; b * t], attention_mask: vec![0; b * t], b, t };
    for (i, s) in seqs.iter().enumerate() {
        out.input_ids[i * t..i * t + s.len()].copy_from_slice(s);
        out.attention_mask[i * t..i * t + s.len()].fill(1);
    }
    out
}

fn read(t: &CpuTensor) -> Vec<f32> {
    pollster::block_on(CpuBackend::new().read(t)).unwrap()
}

fn max_abs_err(got: &[f32], want: &[f32]) -> (usize, f32) {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).enumerate().map(|(i, (g, w))| (i, (g - w).abs())).fold((0, 0.0), |a, b| if b.1 > a.1 || b.1.is_nan() { b } else { a })
}

fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

/// Runs `sentences` (indices into the golden table) as one batch padded to `t` and checks every golden hidden row
/// and pooled embedding of those sentences.
fn check(name: &str, sentences: &[usize], t: usize, extra_padding: usize) {
    let g = &goldens()[name];
    let all = ids(g);
    let seqs: Vec<Vec<u32>> = sentences.iter().map(|&i| all[i].clone()).collect();
    let t = t + extra_padding;
    let m = model(name);
    let h = m.config.hidden_size;
    let be = CpuBackend::new();
    let b = batch(&seqs, t);
    let mask = be.mask(&b).unwrap();
    let hidden = m.forward_with_mask(&be, &b, &mask).unwrap(); // (B*T, H)
    assert_eq!(be.dims(&hidden), (b.b * t, h));
    let hv = read(&hidden);
    let mut checked = 0;
    for row in g["rows"].as_array().unwrap() {
        let s = row["sentence"].as_u64().unwrap() as usize;
        let Some(bi) = sentences.iter().position(|&x| x == s) else { continue };
        let tok = row["token"].as_u64().unwrap() as usize;
        let got = &hv[(bi * t + tok) * h..(bi * t + tok + 1) * h];
        let (i, err) = max_abs_err(got, &floats(&row["values"]));
        assert!(err <= HIDDEN_ATOL, "{name} sentence {s} token {tok} (batch {sentences:?}, T={t}): max abs err {err} at {i}");
        checked += 1;
    }
    assert!(checked >= sentences.len(), "no golden rows checked");
    let pooled = read(&be.mean_pool(&hidden, &mask, b.b, t).unwrap()); // (B, H)
    for (bi, &s) in sentences.iter().enumerate() {
        let mut got = pooled[bi * h..(bi + 1) * h].to_vec();
        let (i, err) = max_abs_err(&got, &floats(&g["mean"][s]));
        assert!(err <= HIDDEN_ATOL, "{name} sentence {s}: mean-pool max abs err {err} at {i}");
        normalize(&mut got);
        let want = floats(&g["mean_normalized"][s]);
        let c = cosine(&got, &want);
        assert!(c >= MIN_COSINE, "{name} sentence {s}: cosine {c}");
        let (i, err) = max_abs_err(&got, &want);
        assert!(err <= HIDDEN_ATOL, "{name} sentence {s}: normalized max abs err {err} at {i}");
    }
}

/// All-MiniLM-L6-v2 with every matrix in Q8_0 against PyTorch f32, per sentence: the floor tests/gguf.rs and
/// tests/browser/q8-kernel.test.mjs hold the integer kernel to (measured 0.9982–0.9994 in the browser).
const MIN_COSINE_Q8_0: f64 = 0.995;

/// The wasm build's CPU path for Q8_0, natively (`CpuBackend::with_q8_kernel`): x rounded to 7 bits per block, each
/// linear weight repacked at its first use and then kept in that form only. Within Q8_0's floor of PyTorch, and the
/// second forward (on the repacked weights alone) equal to the first (on the blocks, repacking them) bit for bit.
#[test]
fn minilm_q8_0_through_the_integer_kernel() {
    let name = "all-MiniLM-L6-v2";
    let dir = root().join("models").join(name);
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    let f32w = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    let mut w = Weights::new();
    for n in f32w.names() {
        let t = f32w.stored(n).unwrap();
        let matrix = t.shape.len() == 2 && t.shape[1] % 32 == 0;
        w.insert(n, if matrix { quant::quantize(t, Dtype::Q8_0).unwrap() } else { t.clone() });
    }
    let be = CpuBackend::with_q8_kernel();
    let m = BertModel::load(&w, &cfg, &be).unwrap();
    drop(w);
    let g = &goldens()[name];
    let seqs = ids(g);
    let t = seqs.iter().map(Vec::len).max().unwrap();
    let (b, h) = (batch(&seqs, t), cfg.hidden_size);
    let mask = be.mask(&b).unwrap();
    let pooled = || read(&be.mean_pool(&m.forward_with_mask(&be, &b, &mask).unwrap(), &mask, b.b, t).unwrap());
    let (first, second) = (pooled(), pooled());
    assert_eq!(first, second, "the forward on the repacked weights alone differs from the first");
    for s in 0..seqs.len() {
        let mut got = first[s * h..(s + 1) * h].to_vec();
        normalize(&mut got);
        let c = cosine(&got, &floats(&g["mean_normalized"][s]));
        assert!(c >= MIN_COSINE_Q8_0, "sentence {s}: cosine {c} to PyTorch, below Q8_0's floor {MIN_COSINE_Q8_0}");
        eprintln!("sentence {s}: cosine {c:.5}");
    }
}

fn n_sentences(name: &str) -> usize {
    goldens()[name]["input_ids"].as_array().unwrap().len()
}

fn padded_len(name: &str) -> usize {
    goldens()[name]["padded_len"].as_u64().unwrap() as usize
}

#[test]
fn minilm_batched_with_padding_matches_pytorch() {
    let n = n_sentences("all-MiniLM-L6-v2");
    check("all-MiniLM-L6-v2", &(0..n).collect::<Vec<_>>(), padded_len("all-MiniLM-L6-v2"), 0);
}

#[test]
fn minilm_single_sentences_match_pytorch() {
    let name = "all-MiniLM-L6-v2";
    let all = ids(&goldens()[name]);
    for (i, s) in all.iter().enumerate() {
        check(name, &[i], s.len(), 0);
    }
}

#[test]
fn minilm_extra_padding_changes_nothing() {
    // The shortest sentences padded far beyond the longest one, in another order.
    let name = "all-MiniLM-L6-v2";
    check(name, &[4, 0, 1], padded_len(name), 40);
}

#[test]
fn legacy_mlm_checkpoint_matches_pytorch() {
    // splade-tiny: `bert.` prefix, LayerNorm.gamma/beta, tied decoder absent from the file.
    let name = "splade-tiny";
    let n = n_sentences(name);
    check(name, &(0..n).collect::<Vec<_>>(), padded_len(name), 0);
    let all = ids(&goldens()[name]);
    check(name, &[2], all[2].len(), 0);
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bertgpu-test-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn missing_weights_file_is_a_clear_error() {
    let e = Weights::from_safetensors_file(Path::new("/nonexistent/model.safetensors")).unwrap_err().to_string();
    assert!(e.contains("cannot read weights file") && e.contains("/nonexistent/model.safetensors"), "{e}");
}

#[test]
fn truncated_weights_file_is_a_clear_error() {
    let src = root().join("models/splade-tiny/model.safetensors");
    let bytes = std::fs::read(&src).unwrap();
    let d = temp_dir("trunc");
    let p = d.join("model.safetensors");
    std::fs::write(&p, &bytes[..bytes.len() / 3]).unwrap();
    let e = Weights::from_safetensors_file(&p).unwrap_err().to_string();
    assert!(e.contains("truncated") && e.contains("model.safetensors"), "{e}");
    std::fs::remove_dir_all(d).ok();
}

#[test]
fn weights_of_another_model_are_a_shape_error() {
    // splade-tiny's weights with MiniLM's config: every size differs; the error names a tensor and both shapes.
    let cfg = BertConfig::from_file(root().join("models/all-MiniLM-L6-v2/config.json")).unwrap();
    let w = Weights::from_safetensors_file(root().join("models/splade-tiny/model.safetensors")).unwrap();
    let e = BertModel::load(&w, &cfg, &CpuBackend::new()).err().expect("must fail").to_string();
    assert!(e.contains("embeddings.word_embeddings.weight") && e.contains("[30522, 128]") && e.contains("[30522, 384]"), "{e}");
}

#[test]
fn config_with_indivisible_heads_is_a_clear_error() {
    let text = std::fs::read_to_string(root().join("models/all-MiniLM-L6-v2/config.json")).unwrap();
    let bad = text.replace("\"num_attention_heads\": 12", "\"num_attention_heads\": 7");
    assert_ne!(bad, text);
    let e = BertConfig::from_json_str(&bad).unwrap_err().to_string();
    assert!(e.contains("384") && e.contains("7") && e.contains("not divisible"), "{e}");
}

#[test]
fn sequence_longer_than_positions_is_an_input_error() {
    let m = model("splade-tiny");
    let b = batch(&[vec![101; 513]], 513);
    let e = m.forward(&CpuBackend::new(), &b).err().expect("must fail").to_string();
    assert!(e.contains("513") && e.contains("512"), "{e}");
}
