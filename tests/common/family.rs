//! The golden checks that BERT's relatives share (tests/distilbert.rs, tests/roberta.rs, tests/electra_albert.rs):
//! each takes one family's section of its golden JSON (`g`: the whole of distilbert.json, `roberta.json["xlmr"]`, …)
//! and the family's name for the messages, so that a family's test file keeps only what is its own. The families
//! with their own position or bias terms (tests/jina.rs, modernbert.rs, rotary.rs, deberta.rs, mpnet.rs) share the
//! checks of those terms: padding must not move them, leaving one out must move the embeddings as it moved the
//! reference's, and a folder streamed into GPU memory gives the same model. Their config tests share the reading of
//! a config.json with one key changed, and the check that it is refused by name.
//!
//! Every case's token ids are checked wherever the golden records them (an embedding golden may not; DistilBERT's
//! does not), before its numbers; counts are checked before every zip.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use bertgpu::backend::Backend;
use bertgpu::backend::cpu::CpuBackend;
use bertgpu::config::BertConfig;
use bertgpu::engine::{Device, Engine, Placement};
use bertgpu::heads::qa;
use bertgpu::loader::{self, LoadOptions, ModelSource};
use bertgpu::tasks::{EmbedOptions, Model, Pooling};
use bertgpu::tokenizer::Tokenizer;
use bertgpu::dtype::Dtype;
use bertgpu::weights::gguf;
use bertgpu::weights::stream::{read_file_to, Format, Streamed};
use bertgpu::weights::{HostData, Weights};
use serde_json::Value;

use super::{assert_close, floats};

/// Pipeline scores (softmax and sigmoid outputs, in [0, 1]) against PyTorch's: measured worst 1.3e-6 (ELECTRA's
/// replaced-token scores through the CLI; the library's fill-mask, classifier and QA scores ≤ 8.3e-7 on the CPU, on
/// lavapipe and through an f32 GGUF), each test printing its own (`cargo test --test roberta --test distilbert
/// --test electra_albert -- --nocapture`, "measured … scores"). 5e-6 is about 4× that.
pub const SCORE_TOL: f32 = 5e-6;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// tests/golden/`file`, parsed.
pub fn golden(file: &str) -> Value {
    let text = std::fs::read_to_string(root().join("tests/golden").join(file)).expect(file);
    serde_json::from_str(&text).unwrap()
}

/// tests/models/`name`.
pub fn dir(name: &str) -> PathBuf {
    root().join("tests/models").join(name)
}

/// A checkpoint folder (config.json, its tokenizer, model.safetensors) as a model on `backend`.
pub fn load<B: Backend>(d: &Path, backend: B) -> Model<B> {
    load_edited(d, backend, |_, _| {})
}

/// `load`, with the config and the weights changed by `edit` before the model is built (a term left out on purpose).
pub fn load_edited<B: Backend>(d: &Path, backend: B, edit: impl FnOnce(&mut BertConfig, &mut Weights)) -> Model<B> {
    let mut cfg = BertConfig::from_file(d.join("config.json")).unwrap();
    let mut w = Weights::from_safetensors_file(d.join("model.safetensors")).unwrap();
    edit(&mut cfg, &mut w);
    let tok = Tokenizer::from_dir(d, cfg.max_position_embeddings).unwrap();
    Model::new(backend, cfg, tok, &w).unwrap()
}

/// tests/models/`name`/config.json as JSON, to be changed before `parse_config` reads it.
pub fn config_json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir(name).join("config.json")).unwrap()).unwrap()
}

/// A config.json's JSON as a config.
pub fn parse_config(v: &Value) -> bertgpu::Result<BertConfig> {
    BertConfig::from_json_str(&v.to_string())
}

/// `v` with key `k` set to `val`, as a config.
pub fn config_with(v: &Value, k: &str, val: Value) -> bertgpu::Result<BertConfig> {
    let mut v = v.clone();
    v[k] = val;
    parse_config(&v)
}

/// A config refused, with an error that names `says` (the key or value that bertgpu does not run).
pub fn refused(r: bertgpu::Result<BertConfig>, says: &str) {
    let e = r.expect_err(says).to_string();
    assert!(e.contains(says), "{e}");
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

/// A golden matrix (an array of rows), row after row.
pub fn rows(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().flat_map(floats).collect()
}

/// Golden token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// `assert_close`, printing the measured worst error (`cargo test -- --nocapture` shows it).
pub fn close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    let err = assert_close(what, got, want, atol, rtol);
    eprintln!("measured {what}: {err:.2e}");
}

/// The tokenizer on tokens.py's tricky strings (pairs among them): ids, token types (the golden's when `with_types`,
/// which it must then record; else every token of type 0), character offsets, decodes.
pub fn tokens(fam: &str, g: &Value, tok: &Tokenizer, with_types: bool) {
    let cases = g["tokens"].as_array().unwrap();
    assert!(cases.len() > 40, "the tricky strings of tokens.py");
    assert!(cases.iter().any(|c| c["text_pair"].is_string()), "pairs are covered");
    let mut tok = tok.clone();
    for c in cases {
        let name = c["name"].as_str().unwrap();
        tok.set_max_length(c["max_length"].as_u64().unwrap() as usize).unwrap();
        let e = tok.encode(c["text"].as_str().unwrap(), c["text_pair"].as_str()).unwrap();
        assert_eq!(e.ids, ids(&c["input_ids"]), "{fam} {name}: ids");
        if with_types {
            let types = c.get("token_type_ids").unwrap_or_else(|| panic!("{fam} {name}: the golden lacks token_type_ids"));
            assert_eq!(e.type_ids, ids(types), "{fam} {name}: token type ids");
        } else {
            assert!(e.type_ids.iter().all(|&t| t == 0), "{fam} {name}: one token type");
        }
        let want: Vec<(usize, usize)> = c["offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o[0].as_u64().unwrap() as usize, o[1].as_u64().unwrap() as usize))
            .collect();
        assert_eq!(e.offsets, want, "{fam} {name}: character offsets");
        assert_eq!(tok.decode(&e.ids, false).unwrap(), c["decoded"].as_str().unwrap(), "{fam} {name}: decode");
        assert_eq!(tok.decode(&e.ids, true).unwrap(), c["decoded_skip"].as_str().unwrap(), "{fam} {name}: decode");
    }
}

/// Mean- and CLS-pooled embeddings, unnormalised; first the token ids when `with_ids` (the golden must record them).
pub fn embeddings<B: Backend>(fam: &str, g: &Value, m: &Model<B>, atol: f32, with_ids: bool) {
    let cases = g["embeddings"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    for (t, c) in texts.iter().zip(cases) {
        if with_ids {
            let want = c.get("input_ids").unwrap_or_else(|| panic!("{fam}: the golden lacks the ids of {t}"));
            assert_eq!(m.tokenizer.encode(t, None).unwrap().ids, ids(want), "{fam} ids of {t}");
        }
    }
    for (pooling, key) in [(Pooling::Mean, "mean"), (Pooling::Cls, "cls")] {
        let opts = EmbedOptions { pooling: Some(pooling), normalize: Some(false), batch_size: 4, ..EmbedOptions::default() };
        let got = block_on(m.embed(&texts, &opts)).unwrap();
        assert_eq!(got.len(), cases.len(), "one vector per text");
        let want: Vec<f32> = cases.iter().flat_map(|c| floats(&c[key])).collect();
        close(&format!("{fam} {key} embeddings"), &got.concat(), &want, atol, 0.0);
    }
}

/// `embeddings` (token ids included) of the texts in `g[key]`, in a padded batch (batches of 4), then their mean
/// embeddings with each text alone (batch_size 1): what follows positions over the padded length (ALiBi's table, the
/// rotation, a sliding window, a relative bias, the disentangled terms) must not change for real tokens when the
/// padding goes.
pub fn embeddings_padded_and_alone<B: Backend>(what: &str, g: &Value, key: &str, m: &Model<B>, atol: f32) {
    let cases = &g[key];
    embeddings(what, &serde_json::json!({ "embeddings": cases }), m, atol, true);
    let alone = EmbedOptions { batch_size: 1, ..mean_unnormalised() };
    let got = block_on(m.embed(&texts(cases), &alone)).unwrap();
    assert_eq!(got.len(), cases.as_array().unwrap().len(), "one vector per text");
    close(&format!("{what} mean embeddings, each text alone"), &got.concat(), &means(cases), atol, 0.0);
}

/// The logits at every mask and the pipeline's top 5 per mask.
///
/// `near_ties`: whether the golden may hold neighbours closer than twice SCORE_TOL (random tiny weights give them:
/// XLM-R's smallest gap is 2.3e-5, ALBERT's 1.1e-4; the scripts print it), which may then come out in either order
/// and are matched by their token. `false` asserts that it holds none, so that the order must match exactly.
pub fn fill_mask<B: Backend>(fam: &str, g: &Value, m: &Model<B>, atol: f32, near_ties: bool) {
    let cases = g["fill_mask"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let encoded: Vec<_> = texts.iter().map(|t| m.tokenizer.encode(t, None).unwrap()).collect();
    for (e, c) in encoded.iter().zip(cases) {
        assert_eq!(e.ids, ids(&c["input_ids"]), "{fam} ids of {}", c["text"]);
        if !near_ties {
            let gap = c["min_score_gap"].as_f64().unwrap();
            assert!(gap >= 2.0 * SCORE_TOL as f64, "{fam} {}: golden neighbours {gap} apart", c["text"]);
        }
    }
    let positions: Vec<Vec<usize>> = cases
        .iter()
        .map(|c| c["mask_rows"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap() as usize).collect())
        .collect();
    let got = block_on(m.fill_mask_logits(&encoded, &positions)).unwrap();
    let want: Vec<f32> = cases.iter().flat_map(|c| rows(&c["mask_logits"])).collect();
    close(&format!("{fam} fill-mask logits"), &got, &want, atol, atol);
    let out = block_on(m.fill_mask(&texts, 5)).unwrap();
    assert_eq!(out.len(), cases.len());
    let mut worst = 0.0f32;
    for (per_text, c) in out.iter().zip(cases) {
        let want = c["predictions"].as_array().unwrap();
        assert_eq!(per_text.len(), want.len(), "{}: one list per mask", c["text"]);
        for (row, wrow) in per_text.iter().zip(want) {
            let wrow = wrow.as_array().unwrap();
            assert_eq!(row.len(), wrow.len());
            for (i, (p, w)) in row.iter().zip(wrow).enumerate() {
                let tie = |j: usize| {
                    (wrow[i]["score"].as_f64().unwrap() - wrow[j]["score"].as_f64().unwrap()).abs() < 2.0 * SCORE_TOL as f64
                };
                let w = if p.token as u64 == w["token"].as_u64().unwrap() {
                    w
                } else {
                    let j = (0..wrow.len()).find(|&j| wrow[j]["token"].as_u64() == Some(p.token as u64));
                    match j {
                        Some(j) if tie(j) => &wrow[j],
                        _ => panic!("{fam} {}: prediction {i} is token {}, golden {}", c["text"], p.token, w["token"]),
                    }
                };
                assert_eq!(p.token_str, w["token_str"].as_str().unwrap(), "{fam} {}", c["text"]);
                assert_eq!(p.sequence, w["sequence"].as_str().unwrap(), "{fam} {}", c["text"]);
                let err = (p.score - w["score"].as_f64().unwrap() as f32).abs();
                worst = worst.max(err);
                assert!(err <= SCORE_TOL, "{fam} {}: score off by {err}", c["text"]);
            }
        }
    }
    eprintln!("measured {fam} fill-mask scores: {worst:.2e}");
}

/// Sequence classification, pairs included: token ids (and types when `with_types`: the golden must record them),
/// logits, and the pipeline's labels in order (the goldens' smallest score gap, 2.4e-3, is far above SCORE_TOL) with their scores.
pub fn classify<B: Backend>(fam: &str, g: &Value, m: &Model<B>, atol: f32, with_types: bool) {
    let cases = g["classifier"].as_array().unwrap();
    let inputs: Vec<(&str, Option<&str>)> =
        cases.iter().map(|c| (c["text"].as_str().unwrap(), c.get("text_pair").and_then(Value::as_str))).collect();
    assert!(inputs.iter().any(|(_, p)| p.is_some()), "the goldens include pairs");
    let encoded: Vec<_> = inputs.iter().map(|(a, b)| m.tokenizer.encode(a, *b).unwrap()).collect();
    for (e, c) in encoded.iter().zip(cases) {
        assert_eq!(e.ids, ids(&c["input_ids"]), "token ids of {}", c["text"]);
        if with_types {
            let types = c.get("token_type_ids").unwrap_or_else(|| panic!("{fam}: the golden lacks token types"));
            assert_eq!(e.type_ids, ids(types), "token type ids of {}", c["text"]);
        }
    }
    let logits = block_on(m.classify_logits(&encoded)).unwrap();
    assert_eq!(logits.len(), cases.len());
    let want: Vec<f32> = cases.iter().flat_map(|c| floats(&c["logits"])).collect();
    close(&format!("{fam} classifier logits"), &logits.concat(), &want, atol, atol);
    let out = block_on(m.classify(&inputs, None)).unwrap();
    assert_eq!(out.len(), cases.len());
    let mut worst = 0.0f32;
    for (got, c) in out.iter().zip(cases) {
        let want = c["pipeline"].as_array().unwrap();
        assert_eq!(got.len(), want.len());
        for (l, w) in got.iter().zip(want) {
            assert_eq!(l.label, w["label"].as_str().unwrap(), "{}", c["text"]);
            let err = (l.score - w["score"].as_f64().unwrap() as f32).abs();
            worst = worst.max(err);
            assert!(err <= SCORE_TOL, "{}: score off by {err}", c["text"]);
        }
    }
    eprintln!("measured {fam} classifier scores: {worst:.2e}");
}

/// Token classification: ids and the logits of every token.
pub fn token_logits<B: Backend>(fam: &str, g: &Value, m: &Model<B>, atol: f32) {
    let cases = g["ner"].as_array().unwrap();
    let encoded: Vec<_> = cases.iter().map(|c| m.tokenizer.encode(c["text"].as_str().unwrap(), None).unwrap()).collect();
    for (e, c) in encoded.iter().zip(cases) {
        assert_eq!(e.ids, ids(&c["input_ids"]), "{fam} ids of {}", c["text"]);
    }
    let got = block_on(m.token_logits(&encoded)).unwrap();
    assert_eq!(got.len(), cases.len());
    let want: Vec<f32> = cases.iter().flat_map(|c| rows(&c["logits"])).collect();
    close(&format!("{fam} token logits"), &got.concat(), &want, atol, atol);
}

/// The longest answer in tokens (qa_reference's MAX_ANSWER_LEN in tests/golden/heads.py).
const MAX_ANSWER_LEN: usize = 15;

/// QA windows (a multi-window context among them), their ids and logits; then the answer. Random tiny weights give
/// near-tied spans (RoBERTa's, ELECTRA's and ALBERT's multi-window goldens have best spans 3e-6–1.4e-4 apart), so
/// the reference decoding (tests/golden/heads.py's qa_reference: a softmax over each window's context tokens,
/// p_start·p_end over spans of at most MAX_ANSWER_LEN tokens, the best over all windows) is redone here in f64 on
/// the golden's logits, checked to give the golden's answer, and every span within twice SCORE_TOL of its best is a
/// tie: the answer must be one of those spans, its score within SCORE_TOL of that span's.
pub fn answer<B: Backend>(fam: &str, g: &Value, m: &Model<B>, atol: f32) {
    let cases = g["qa"].as_array().unwrap();
    assert!(cases.iter().any(|c| c["windows"].as_array().unwrap().len() > 1), "a multi-window context is covered");
    let mut worst = 0.0f64;
    for case in cases {
        let (q, c) = (case["question"].as_str().unwrap(), case["context"].as_str().unwrap());
        let (len, stride) = qa::window_params(&m.tokenizer, &m.config);
        let windows = qa::windows(&m.tokenizer, q, c, len, stride).unwrap();
        let want_windows = case["windows"].as_array().unwrap();
        assert_eq!(windows.len(), want_windows.len(), "{fam} {q}: number of windows");
        for (w, ww) in windows.iter().zip(want_windows) {
            assert_eq!(w.ids, ids(&ww["input_ids"]), "{fam} {q}: window ids");
        }
        let logits = block_on(m.qa_logits(&windows)).unwrap();
        assert_eq!(logits.len(), want_windows.len(), "{fam} {q}: number of windows");
        for (l, w) in logits.iter().zip(want_windows) {
            let want: Vec<f32> =
                floats(&w["start_logits"]).into_iter().zip(floats(&w["end_logits"])).flat_map(|(a, b)| [a, b]).collect();
            close(&format!("{fam} qa logits ({q})"), l, &want, atol, atol);
        }
        // Every span of every window with its reference score, in characters of the context.
        let mut spans: Vec<(f64, usize, usize)> = Vec::new();
        for (w, ww) in windows.iter().zip(want_windows) {
            let f64s = |v: &Value| -> Vec<f64> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
            let (sl, el) = (f64s(&ww["start_logits"]), f64s(&ww["end_logits"]));
            assert_eq!((sl.len(), el.len()), (w.len(), w.len()), "{fam} {q}: one logit pair per token");
            let ctx: Vec<usize> = (0..w.len()).filter(|&i| w.sequence_ids[i] == Some(1)).collect();
            let softmax = |x: &[f64]| -> Vec<f64> {
                let v: Vec<f64> = ctx.iter().map(|&i| x[i]).collect();
                let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = v.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                e.iter().map(|x| x / sum).collect()
            };
            let (ps, pe) = (softmax(&sl), softmax(&el));
            for s in 0..ctx.len() {
                for e in s..ctx.len().min(s + MAX_ANSWER_LEN) {
                    spans.push((ps[s] * pe[e], w.offsets[ctx[s]].0, w.offsets[ctx[e]].1));
                }
            }
        }
        assert!(!spans.is_empty(), "{fam} {q}: no span");
        let best = spans.iter().copied().fold((f64::NEG_INFINITY, 0, 0), |b, s| if s.0 > b.0 { s } else { b });
        let wa = &case["answer"];
        let golden_span = (wa["start"].as_u64().unwrap() as usize, wa["end"].as_u64().unwrap() as usize);
        assert_eq!((best.1, best.2), golden_span, "{fam} {q}: the reference decoding redone gives the golden's answer");
        assert!((best.0 - wa["score"].as_f64().unwrap()).abs() <= 1e-9, "{fam} {q}: reference score {}", best.0);
        let tied: Vec<&(f64, usize, usize)> = spans.iter().filter(|s| s.0 >= best.0 - 2.0 * SCORE_TOL as f64).collect();
        let ans = block_on(m.answer(q, c)).unwrap();
        let chosen = tied.iter().find(|s| (s.1, s.2) == (ans.start, ans.end)).unwrap_or_else(|| {
            panic!("{fam} {q}: answer {:?} at {}..{} is none of the {} spans within 2·SCORE_TOL of the best {:?}",
                ans.answer, ans.start, ans.end, tied.len(), wa["answer"])
        });
        let text: String = c.chars().skip(ans.start).take(ans.end - ans.start).collect();
        assert_eq!(ans.answer, text, "{fam} {q}");
        let err = (ans.score as f64 - chosen.0).abs();
        worst = worst.max(err);
        assert!(err <= SCORE_TOL as f64, "{fam} {q}: score {} against {}", ans.score, chosen.0);
        if tied.len() > 1 {
            eprintln!("{fam} {q}: {} spans tied within 2·SCORE_TOL; the answer is {}", tied.len(),
                if (ans.start, ans.end) == golden_span { "the golden's" } else { "another of them" });
        }
    }
    eprintln!("measured {fam} qa scores: {worst:.2e}");
}

/// The texts of a golden's embedding cases (`[{"text", "mean", …}, …]`).
fn texts(cases: &Value) -> Vec<&str> {
    cases.as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap()).collect()
}

/// The golden's mean-pooled vectors of `cases`, one after the other.
fn means(cases: &Value) -> Vec<f32> {
    cases.as_array().unwrap().iter().flat_map(|c| floats(&c["mean"])).collect()
}

/// Mean pooling without normalisation, as the goldens' `mean` vectors.
fn mean_unnormalised() -> EmbedOptions {
    EmbedOptions { pooling: Some(Pooling::Mean), normalize: Some(false), ..EmbedOptions::default() }
}

/// How far our move may be from the reference's in `moved_without` (each the largest |broken − golden|). Measured
/// ≤ 1.5e-6 (GTE with theta = ∞; every check prints its own, `-- --nocapture`, "measured … moved by"), over moves
/// of 0.32–2.1. 1e-3 is the bound each family's check had before they were shared: ~700× the measurement, kept
/// because it is still 0.3% of the smallest move, so a model that moves otherwise than the reference's fails.
const MOVED_TOL: f32 = 1e-3;

/// A term left out on purpose is seen: `m` (a model with a position or bias term removed) gives mean embeddings of
/// `cases` further than `floor` from the golden's (far outside the tolerance, which would see the term missing), and
/// as far as the reference's own model moved with the same term removed (`recorded`, in the golden), within
/// MOVED_TOL: the term is applied where the reference applies it. `what` names the break for the messages.
pub fn moved_without<B: Backend>(what: &str, cases: &Value, m: &Model<B>, floor: f32, recorded: &Value) {
    let got = block_on(m.embed(&texts(cases), &mean_unnormalised())).unwrap().concat();
    let want = means(cases);
    assert_eq!(got.len(), want.len(), "{what}: one vector per text");
    let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let recorded = recorded.as_f64().unwrap() as f32;
    eprintln!("measured {what}: moved by {worst}, the reference by {recorded}");
    assert!(worst > floor, "{what}: the embeddings moved by {worst} only");
    assert!((worst - recorded).abs() < MOVED_TOL, "{what}: the reference moved by {recorded}, ours by {worst}");
}

/// An engine's mean embeddings of `cases` (unnormalised, the default batches), within `atol` of the golden's per
/// value; returned for further comparison.
pub fn engine_embeddings(what: &str, e: &Engine, cases: &Value, atol: f32) -> Vec<f32> {
    let got = block_on(e.embed(&texts(cases), &mean_unnormalised())).unwrap();
    assert_eq!(got.len(), cases.as_array().unwrap().len(), "{what}: one vector per text");
    let got = got.concat();
    close(&format!("{what}, mean embeddings"), &got, &means(cases), atol, 0.0);
    got
}

/// The folder `d` placed on the GPU as a folder loads there, its model.safetensors read straight into device memory
/// as the file arrives: every matrix written there but `{kept}.weight`, which must exist (a gated block whose halves
/// swap on the host at load); the engine over those weights passes the load-time check (its CPU reference a module
/// at a time, read back from device memory: it stays on the GPU), is the same, bit for bit, as the engine over the
/// host weights, and gives the golden mean embeddings of `cases` within `atol`. Returns that engine; `None` (the test
/// skips) where there is no GPU and `BERTGPU_REQUIRE_GPU` allows it.
pub fn placed_on_the_gpu(d: &Path, kept: &str, cases: &Value, atol: f32) -> Option<Engine> {
    let g = super::gpu()?;
    let m = loader::load(ModelSource::Path(d), &LoadOptions::default()).unwrap();
    let host = m.weights().unwrap();
    let Streamed::Safetensors(placed) = read_file_to(&d.join("model.safetensors"), Format::Safetensors, Some(&g)).unwrap()
    else {
        panic!("a safetensors read gave a GGUF")
    };
    let names = placed.names();
    assert!(names.iter().any(|n| n.contains(&format!("{kept}.weight"))), "{}: no {kept}.weight", d.display());
    for n in names {
        let t = placed.stored(n).unwrap();
        let on_device = matches!(t.data, HostData::Placed(_));
        assert_eq!(on_device, t.shape.len() == 2 && !n.contains(&format!("{kept}.")), "{n}");
    }
    let on = |w: &Weights, g| {
        block_on(Engine::place(m.config.clone(), m.tokenizer.clone(), w, Placement::on(Device::Gpu, g), CpuBackend::new()))
            .unwrap()
    };
    let (from_host, from_file) = (on(&host, super::gpu().unwrap()), on(&placed, g));
    assert_eq!(from_file.device(), "gpu");
    let got = engine_embeddings("placed on the GPU", &from_file, cases, atol);
    let host = block_on(from_host.embed(&texts(cases), &mean_unnormalised())).unwrap().concat();
    assert_eq!(got, host, "the placed weights' model differs from the host weights'");
    Some(from_file)
}

/// The GGUF that `convert` writes for tests/models/`name`.
pub fn gguf_bytes(name: &str, dtype: Dtype) -> Vec<u8> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("{name}-{}-{n}.gguf", std::process::id()));
    gguf::convert(&dir(name), dtype, &out).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    bytes
}

/// The bertgpu CLI with `args` and `input` on stdin: it must succeed; its stdout's JSON lines.
pub fn run(args: &[&str], input: &str) -> Vec<Value> {
    let out = super::cli(args, input);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect()
}

/// `embed` on the CPU through the CLI: one line per text, the golden mean-pooled vectors.
pub fn cli_embeddings(fam: &str, g: &Value, model: &Path, atol: f32) {
    let cases = g["embeddings"].as_array().unwrap();
    let input: String = cases.iter().map(|c| format!("{}\n", serde_json::json!({"text": c["text"]}))).collect();
    let out = run(&["embed", "--model", model.to_str().unwrap(), "--device", "cpu"], &input);
    assert_eq!(out.len(), cases.len(), "one line per text");
    let got: Vec<f32> = out.iter().flat_map(|o| floats(&o["embedding"])).collect();
    let want: Vec<f32> = cases.iter().flat_map(|c| floats(&c["mean"])).collect();
    close(&format!("cli {fam} embeddings"), &got, &want, atol, 0.0);
}

/// `classify` on the CPU through the CLI, pairs included: the golden pipeline's labels in order and their scores.
pub fn cli_classify(g: &Value, model: &Path) {
    let cases = g["classifier"].as_array().unwrap();
    let input: String = cases
        .iter()
        .map(|c| format!("{}\n", serde_json::json!({"text": c["text"], "text_pair": c.get("text_pair")})))
        .collect();
    let out = run(&["classify", "--model", model.to_str().unwrap(), "--device", "cpu"], &input);
    assert_eq!(out.len(), cases.len(), "one line per input");
    let mut worst = 0.0f64;
    for (o, c) in out.iter().zip(cases) {
        let (got, want) = (o.as_array().unwrap(), c["pipeline"].as_array().unwrap());
        assert_eq!(got.len(), want.len(), "{o}");
        for (l, w) in got.iter().zip(want) {
            assert_eq!(l["label"], w["label"]);
            let err = (l["score"].as_f64().unwrap() - w["score"].as_f64().unwrap()).abs();
            worst = worst.max(err);
            assert!(err <= SCORE_TOL as f64, "{o}");
        }
    }
    eprintln!("measured cli classifier scores: {worst:.2e}");
}

/// `fill-mask` on the CPU through the CLI, on the goldens with one mask: the golden's best token and sequence.
pub fn cli_fill_mask(g: &Value, model: &Path) {
    let cases = g["fill_mask"].as_array().unwrap();
    let single: Vec<&Value> = cases.iter().filter(|c| c["mask_rows"].as_array().unwrap().len() == 1).collect();
    assert!(!single.is_empty());
    let input: String = single.iter().map(|c| format!("{}\n", serde_json::json!({"text": c["text"]}))).collect();
    let out = run(&["fill-mask", "--model", model.to_str().unwrap(), "--device", "cpu"], &input);
    assert_eq!(out.len(), single.len(), "one line per text");
    for (o, c) in out.iter().zip(&single) {
        let best = &c["predictions"][0][0];
        let got = if o.is_array() && o[0].is_array() { &o[0][0] } else { &o[0] };
        assert_eq!(got["token"], best["token"], "{o}");
        assert_eq!(got["sequence"], best["sequence"], "{o}");
    }
}
