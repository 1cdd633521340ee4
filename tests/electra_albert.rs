//! ELECTRA and ALBERT against PyTorch `transformers` (tests/golden/electra_albert.json, made by
//! tests/golden/electra_albert.py from the tiny seeded checkpoints tests/models/tiny-electra-* and tiny-albert-*):
//! factorised embeddings (E 16, projected to H 32 by ELECTRA's `embeddings_project` and ALBERT's
//! `embedding_hidden_mapping_in`; an ELECTRA with E = H and no projection), ALBERT's one layer shared by its three
//! passes, its SentencePiece Unigram tokenizer (ids, type ids, offsets, decodes of tokens.py's tricky strings),
//! embeddings, fill-mask (ALBERT's `predictions`, ELECTRA's generator), sequence classification with pairs (ELECTRA's
//! `classifier.dense` + exact GELU + `out_proj`, ALBERT's pooler + `classifier`), token classification, QA and
//! ELECTRA's replaced-token logits, on the CPU and the GPU backend, through a GGUF that `convert` wrote, and through
//! the CLI.

mod common;

use std::path::Path;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::Backend;
use bertgpu::config::Family;
use bertgpu::tasks::{EmbedOptions, Model, Pooling};
use bertgpu::dtype::Dtype;
use bertgpu::weights::gguf;
use common::family::{self, block_on, close, dir, ids, run, SCORE_TOL};
use common::{floats, gpu};
use serde_json::Value;

/// The CPU backend on f32 weights: tests/heads.rs's CPU_TOL. Measured worst |ours − torch| here: 8.9e-6 (ALBERT
/// token logits; 5.7e-6 through the GGUF, 1.2e-6 through the CLI), printed by [`close`] (run with `--nocapture`).
/// 1e-4 leaves ~11× margin and is far below what a mistake moves: type id 0 for an ALBERT pair's second text moves
/// a classifier logit by 1.6 (`albert_pairs_need_their_token_types`), the shared layer run twice instead of three
/// times moves the embedding by 2.9 (`albert_runs_the_shared_layer_every_pass`); a wrong head activation, a missing
/// projection or LayerNorm over H instead of E fails the goldens outright.
const CPU_ATOL: f32 = 1e-4;
/// The GPU: tests/heads.rs's GPU_TOL (its erf, exp and tanh differ from the CPU's by a few ulps in every layer).
/// Measured worst on lavapipe here: 8.0e-6 (ALBERT token logits).
const GPU_ATOL: f32 = 2e-4;

/// tiny-albert-mlm through a Q8_0 GGUF (its factorised tables f16) against the f32 golden, on the CPU. Measured worst
/// |q8 − torch| 0.105 (mask logits, of RMS 1.27; embeddings 0.070, of RMS 1.03): 8-bit blocks move every weight of
/// the one shared layer, which runs three times. 0.3 is about 3× that, and below what a mistake moves (1.6 and 2.9
/// for the two in CPU_ATOL's note).
const Q8_0_ATOL: f32 = 0.3;
/// The same per mask, as a whole row of vocabulary logits: measured lowest cosine 0.999760 (1 − cos = 2.4e-4, as
/// MiniLM's Q8_0 in tests/gguf.rs); 0.999 allows about 4× the measured 1 − cos.
const Q8_0_MIN_COSINE: f64 = 0.999;

/// The fill-mask goldens' smallest score gap, ALBERT's 1.1e-4 (the script prints it), is far above twice SCORE_TOL:
/// the order of every prediction must match. (QA's near-tied spans are handled by `family::answer`.)
const NEAR_TIES: bool = false;

fn golden() -> Value {
    family::golden("electra_albert.json")
}

fn load<B: Backend>(d: &Path, backend: B) -> Model<B> {
    let m = family::load(d, backend);
    assert!(matches!(m.config.family, Family::Electra | Family::Albert), "{}", d.display());
    m
}

/// ELECTRA's discriminator: one logit per token, a pair included; the library's per-token probabilities are their
/// sigmoids, special tokens left out.
fn discriminator<B: Backend>(g: &Value, m: &Model<B>, atol: f32) {
    let cases = g["discriminator"].as_array().unwrap();
    let inputs: Vec<(&str, Option<&str>)> =
        cases.iter().map(|c| (c["text"].as_str().unwrap(), c.get("text_pair").and_then(Value::as_str))).collect();
    assert!(inputs.iter().any(|(_, p)| p.is_some()), "a pair is covered");
    let encoded: Vec<_> = inputs.iter().map(|(a, b)| m.tokenizer.encode(a, *b).unwrap()).collect();
    for (e, c) in encoded.iter().zip(cases) {
        assert_eq!(e.ids, ids(&c["input_ids"]), "ids of {}", c["text"]);
    }
    let got = block_on(m.replaced_token_logits(&encoded)).unwrap();
    let want: Vec<f32> = cases.iter().flat_map(|c| floats(&c["logits"])).collect();
    close("electra discriminator logits", &got.concat(), &want, atol, atol);
    let out = block_on(m.replaced_tokens(&inputs)).unwrap();
    assert_eq!(out.len(), cases.len(), "one result per input");
    for ((toks, e), c) in out.iter().zip(&encoded).zip(cases) {
        let logits = floats(&c["logits"]);
        assert_eq!(toks.len(), e.special_tokens_mask.iter().filter(|&&s| s == 0).count(), "every token but [CLS], [SEP]");
        for t in toks {
            assert_eq!(t.token, e.tokens[t.index]);
            let p = 1.0 / (1.0 + (-(logits[t.index] as f64)).exp());
            assert!((t.score as f64 - p).abs() <= SCORE_TOL as f64, "{}: {t:?}", c["text"]);
        }
    }
}

fn everything<B: Backend>(mk: impl Fn() -> B, atol: f32) {
    let g = golden();
    let (e, a) = (&g["electra"], &g["albert"]);
    let disc = load(&dir("tiny-electra-discriminator"), mk());
    assert_eq!((disc.config.family, disc.config.embedding_size, disc.config.hidden_size), (Family::Electra, 16, 32));
    assert!(disc.bert.embeddings_project.is_some());
    family::embeddings("electra", e, &disc, atol, true);
    discriminator(e, &disc, atol);
    family::fill_mask("electra", e, &load(&dir("tiny-electra-generator"), mk()), atol, NEAR_TIES);
    family::classify("electra", e, &load(&dir("tiny-electra-classifier"), mk()), atol, true);
    family::token_logits("electra", e, &load(&dir("tiny-electra-ner"), mk()), atol);
    let qa = load(&dir("tiny-electra-qa"), mk());
    assert!(qa.bert.embeddings_project.is_none(), "E = H: no embeddings_project");
    // QA windows `[CLS] question [SEP] context [SEP]` (types 0 then 1).
    family::answer("electra", e, &qa, atol);

    let mlm = load(&dir("tiny-albert-mlm"), mk());
    assert_eq!(mlm.config.family, Family::Albert);
    assert_eq!((mlm.bert.encoder.layers.len(), mlm.bert.encoder.passes), (1, 3), "one shared layer, three passes");
    // ALBERT's Unigram tokenizer: segment ids 0 then 1 for a pair.
    family::tokens("albert", a, &mlm.tokenizer, true);
    family::embeddings("albert", a, &mlm, atol, true);
    family::fill_mask("albert", a, &mlm, atol, NEAR_TIES);
    family::classify("albert", a, &load(&dir("tiny-albert-classifier"), mk()), atol, true);
    family::token_logits("albert", a, &load(&dir("tiny-albert-ner"), mk()), atol);
    family::answer("albert", a, &load(&dir("tiny-albert-qa"), mk()), atol);
}

#[test]
fn electra_and_albert_match_pytorch_on_cpu() {
    everything(CpuBackend::new, CPU_ATOL);
}

#[test]
fn electra_and_albert_match_pytorch_on_gpu() {
    if gpu().is_none() {
        return;
    }
    everything(|| gpu().expect("adapter"), GPU_ATOL);
}

/// Each checkpoint offers the tasks of its head and no other: ELECTRA's token classifier (`classifier.*`) is not a
/// sequence classifier (`classifier.dense`, `classifier.out_proj`), nor ALBERT's the reverse (both `classifier.*`:
/// the architecture tells them apart); a discriminator has no fill-mask, a generator no replaced-token head.
#[test]
fn tasks_follow_the_checkpoint() {
    for (name, tasks) in [
        ("tiny-electra-discriminator", vec!["replacedTokens"]),
        ("tiny-electra-generator", vec!["fillMask"]),
        ("tiny-electra-classifier", vec!["classify"]),
        ("tiny-electra-ner", vec!["tokenClassify"]),
        ("tiny-electra-qa", vec!["answer"]),
        ("tiny-albert-mlm", vec!["fillMask"]),
        ("tiny-albert-classifier", vec!["classify"]),
        ("tiny-albert-ner", vec!["tokenClassify"]),
        ("tiny-albert-qa", vec!["answer"]),
    ] {
        let m = load(&dir(name), CpuBackend::new());
        assert_eq!(m.available_tasks(), tasks, "{name}");
        assert_eq!(m.heads.discriminator().is_ok(), name == "tiny-electra-discriminator", "{name}");
    }
    let disc = load(&dir("tiny-electra-discriminator"), CpuBackend::new());
    let e = block_on(disc.fill_mask(&["the [MASK] sat."], 5)).unwrap_err().to_string();
    assert!(e.contains("ElectraForMaskedLM"), "{e}");
    let albert = load(&dir("tiny-albert-mlm"), CpuBackend::new());
    let e = block_on(albert.replaced_tokens(&[("a b", None)])).unwrap_err().to_string();
    assert!(e.contains("ElectraForPreTraining"), "{e}");
    let e = block_on(albert.next_sentence(&[("a", "b")])).unwrap_err().to_string();
    assert!(e.contains("next-sentence"), "{e}");
}

/// transformers 5's AlbertTokenizer drops the segment ids of a pair (huggingface/transformers#48128), so that
/// PyTorch would see type 0 for the second text; bertgpu keeps the tokenizer's own (0, then 1), as ALBERT was trained
/// and as transformers 4 fed it: the goldens were made with them, and type 0 instead moves the logits far beyond the
/// tolerance.
#[test]
fn albert_pairs_need_their_token_types() {
    let m = load(&dir("tiny-albert-classifier"), CpuBackend::new());
    let g = golden();
    let pair = g["albert"]["classifier"].as_array().unwrap().iter().find(|c| c["text_pair"].is_string()).unwrap().clone();
    let e = m.tokenizer.encode(pair["text"].as_str().unwrap(), pair["text_pair"].as_str()).unwrap();
    assert!(e.type_ids.contains(&1));
    let zeroed = bertgpu::tokenizer::Encoded { type_ids: vec![0; e.len()], ..e.clone() };
    let right = block_on(m.classify_logits(&[e])).unwrap();
    let wrong = block_on(m.classify_logits(&[zeroed])).unwrap();
    close("albert pair logits", &right[0], &floats(&pair["logits"]), CPU_ATOL, CPU_ATOL);
    let diff = right[0].iter().zip(&wrong[0]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    eprintln!("type 0 for the second text moves the logits by {diff:.2e}");
    assert!(diff > 100.0 * CPU_ATOL, "type 0 for the second text moved the logits by only {diff}");
}

/// The shared layer is applied num_hidden_layers times: one pass fewer moves the embedding far beyond the tolerance.
#[test]
fn albert_runs_the_shared_layer_every_pass() {
    let d = dir("tiny-albert-mlm");
    let mut m = load(&d, CpuBackend::new());
    let opts = EmbedOptions { pooling: Some(Pooling::Mean), normalize: Some(false), batch_size: 4, ..EmbedOptions::default() };
    let text = ["the capital of france is paris."];
    let three = block_on(m.embed(&text, &opts)).unwrap();
    m.bert.encoder.passes = 2;
    let two = block_on(m.embed(&text, &opts)).unwrap();
    let diff = three[0].iter().zip(&two[0]).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    eprintln!("a pass fewer moves the embedding by {diff:.2e}");
    assert!(diff > 100.0 * CPU_ATOL, "a pass fewer moved the embedding by only {diff}");
}

/// `convert` stores ELECTRA and ALBERT under BERT's (llama.cpp's) names where BERT has the tensor (ALBERT's shared
/// layer as `blk.0`), their own HF names where it has none (`embeddings_project`,
/// `encoder.embedding_hidden_mapping_in`, `discriminator_predictions.*`), with their config JSON and tokenizer.json;
/// the GGUF runs to the same goldens (f32: the same tolerance).
#[test]
fn electra_and_albert_through_gguf_match_pytorch() {
    let g = golden();
    for name in ["tiny-electra-discriminator", "tiny-electra-generator", "tiny-electra-classifier", "tiny-electra-qa",
        "tiny-albert-mlm", "tiny-albert-classifier"]
    {
        let bytes = family::gguf_bytes(name, Dtype::F32);
        let header = gguf::read_bert(&bytes).unwrap();
        let names: Vec<&str> = header.tensors.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.iter().all(|n| !n.starts_with("electra.") && !n.starts_with("albert.") && !n.starts_with("generator_")),
            "{name}: tensors are stored under BERT's names: {names:?}");
        assert!(names.contains(&"encoder.layer.0.attention.self.query.weight"), "{name}: {names:?}");
        let fam = if name.contains("albert") { "albert" } else { "electra" };
        if fam == "albert" {
            assert!(!names.iter().any(|n| n.starts_with("encoder.layer.1.")), "one shared layer: {names:?}");
            assert!(names.contains(&"encoder.embedding_hidden_mapping_in.weight"), "{names:?}");
        } else if name != "tiny-electra-qa" {
            assert!(names.contains(&"embeddings_project.weight"), "{names:?}");
        }
        let m = gguf::load_gguf(&bytes).unwrap();
        let model = Model::new(CpuBackend::new(), m.config, m.tokenizer, &m.weights).unwrap();
        let gf = &g[fam];
        match name {
            "tiny-electra-discriminator" => {
                family::embeddings(fam, gf, &model, CPU_ATOL, true);
                discriminator(gf, &model, CPU_ATOL);
            }
            "tiny-electra-qa" => family::answer(fam, gf, &model, CPU_ATOL),
            _ if name.ends_with("mlm") || name.ends_with("generator") => {
                family::fill_mask(fam, gf, &model, CPU_ATOL, NEAR_TIES)
            }
            _ => family::classify(fam, gf, &model, CPU_ATOL, true),
        }
        if name == "tiny-albert-mlm" {
            family::embeddings(fam, gf, &model, CPU_ATOL, true);
        }
    }
    // Quantized: the factorised tables (E = 16 columns, not whole blocks of 32) stay f16, the rest Q8_0; the
    // golden's mask logits and embeddings within what 8-bit blocks move them.
    let bytes = family::gguf_bytes("tiny-albert-mlm", Dtype::Q8_0);
    let m = gguf::load_gguf(&bytes).unwrap();
    let model = Model::new(CpuBackend::new(), m.config, m.tokenizer, &m.weights).unwrap();
    let gf = &g["albert"];
    let cases = gf["fill_mask"].as_array().unwrap();
    let encoded: Vec<_> = cases.iter().map(|c| model.tokenizer.encode(c["text"].as_str().unwrap(), None).unwrap()).collect();
    for (e, c) in encoded.iter().zip(cases) {
        assert_eq!(e.ids, ids(&c["input_ids"]), "albert Q8_0 ids of {}", c["text"]);
    }
    let positions: Vec<Vec<usize>> = cases
        .iter()
        .map(|c| c["mask_rows"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap() as usize).collect())
        .collect();
    let got = block_on(model.fill_mask_logits(&encoded, &positions)).unwrap();
    let want: Vec<f32> = cases.iter().flat_map(|c| family::rows(&c["mask_logits"])).collect();
    close("albert Q8_0 fill-mask logits", &got, &want, Q8_0_ATOL, 0.0);
    // Each mask's row of logits over the vocabulary, as a whole: the error spread over every value.
    let vocab = model.config.vocab_size;
    assert_eq!(got.len() % vocab, 0);
    let cos: Vec<f64> = got.chunks(vocab).zip(want.chunks(vocab)).map(|(a, b)| common::cosine(a, b)).collect();
    let min = cos.iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!("measured albert Q8_0 fill-mask logits: cosines to PyTorch {cos:.6?}");
    assert!(min >= Q8_0_MIN_COSINE, "albert Q8_0 fill-mask logits: cosine {min} < {Q8_0_MIN_COSINE}");
    family::embeddings("albert Q8_0", gf, &model, Q8_0_ATOL, true);
    let got = block_on(model.fill_mask(&["the capital of france is [MASK]."], 5)).unwrap();
    assert_eq!(got[0][0].len(), 5);
}

/// The CLI: `embed` on an ELECTRA discriminator gives the golden mean-pooled vectors, `classify` on ALBERT takes a
/// pair, `fill-mask` on ALBERT gives the golden predictions.
#[test]
fn electra_and_albert_through_the_cli() {
    let g = golden();
    let model = dir("tiny-electra-discriminator");
    family::cli_embeddings("electra", &g["electra"], &model, CPU_ATOL);

    // Replaced-token detection: every token but [CLS]/[SEP], its score sigmoid(the golden logit).
    let cases = g["electra"]["discriminator"].as_array().unwrap();
    let input: String = cases
        .iter()
        .map(|c| format!("{}\n", serde_json::json!({"text": c["text"], "text_pair": c.get("text_pair")})))
        .collect();
    let out = run(&["replaced-tokens", "--model", model.to_str().unwrap(), "--device", "cpu"], &input);
    assert_eq!(out.len(), cases.len(), "one line per input");
    let mut worst = 0.0f64;
    for (o, c) in out.iter().zip(cases) {
        let (toks, logits) = (o.as_array().unwrap(), floats(&c["logits"]));
        assert_eq!(toks.len(), logits.len() - if c.get("text_pair").is_some_and(|p| !p.is_null()) { 3 } else { 2 }, "{o}");
        for t in toks {
            let i = t["index"].as_u64().unwrap() as usize;
            let p = 1.0 / (1.0 + (-(logits[i] as f64)).exp());
            let err = (t["score"].as_f64().unwrap() - p).abs();
            worst = worst.max(err);
            assert!(err <= SCORE_TOL as f64, "{o}");
        }
    }
    eprintln!("measured cli replaced-token scores: {worst:.2e}");

    family::cli_classify(&g["albert"], &dir("tiny-albert-classifier"));
    family::cli_fill_mask(&g["albert"], &dir("tiny-albert-mlm"));
}
