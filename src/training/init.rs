//! A BERT from scratch, for pre-training: every weight of `BertForPreTraining` (or of `BertForMaskedLM`, when
//! config.json's `architectures` says so) drawn as transformers' `BertPreTrainedModel._init_weights` draws them:
//! - every linear weight and every embedding table ~ N(0, `initializer_range`), the word table's `pad_token_id` row
//!   zero (`nn.Embedding(padding_idx=...)`);
//! - every bias zero, the masked-LM decoder's bias (`cls.predictions.bias`) included;
//! - every LayerNorm γ = 1, β = 0;
//! - the decoder tied to the word embeddings, so not stored (as transformers saves a tied model).
//!
//! The normal draws come from the seeded [`SplitMix64`] (Box–Muller), not from torch's generator: a seed gives the
//! same model on every platform and in the browser, with torch's distribution but not torch's numbers.

use std::collections::BTreeMap;

use super::rng::SplitMix64;
use crate::config::{BertConfig, Family};
use crate::weights::safetensors::{write_f32, F32Tensor};
use crate::{Error, Result};

/// `n` values ~ N(0, std), two per pair of uniforms (Box–Muller).
pub(crate) fn normal(rng: &mut SplitMix64, n: usize, std: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        // Two uniforms in (0, 1] and [0, 1) → two standard normals.
        let (u1, u2) = (1.0 - rng.next_f64(), rng.next_f64());
        let r = (-2.0 * u1.ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * u2;
        out.push((r * t.cos()) as f32 * std);
        out.push((r * t.sin()) as f32 * std);
    }
    out.truncate(n);
    out
}

/// Which heads a model from scratch has: config.json's `architectures`, `BertForPreTraining` (masked LM and
/// next-sentence prediction, the paper's) when it names none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heads {
    PreTraining,
    MaskedLm,
}

impl Heads {
    pub fn of(cfg: &BertConfig) -> Result<Heads> {
        match cfg.architectures.first().map(String::as_str) {
            None | Some("BertForPreTraining") => Ok(Heads::PreTraining),
            Some("BertForMaskedLM") => Ok(Heads::MaskedLm),
            Some(other) => Err(Error::Config(format!(
                "a model from scratch is a BertForPreTraining or a BertForMaskedLM; config.json's architectures says \
                 `{other}`"
            ))),
        }
    }

    pub fn architecture(self) -> &'static str {
        match self {
            Heads::PreTraining => "BertForPreTraining",
            Heads::MaskedLm => "BertForMaskedLM",
        }
    }
}

/// The model of `config_json` with fresh weights from `seed`: its config.json (as given, with `architectures` and
/// `model_type` set) and its model.safetensors. Only BERT itself (`model_type` "bert") with the
/// decoder tied to the word embeddings, the model pre-training trains.
pub fn initial_model(config_json: &str, seed: u64) -> Result<(String, Vec<u8>)> {
    let cfg = BertConfig::from_json_str(config_json)?;
    if cfg.family != Family::Bert {
        return Err(Error::Config(format!(
            "a model from scratch is a BERT (model_type \"bert\"); this config.json is a `{}`",
            cfg.family.model_type()
        )));
    }
    if !cfg.tie_word_embeddings {
        return Err(Error::Config(
            "a model from scratch ties its masked-LM decoder to the word embeddings: remove tie_word_embeddings: false"
                .into(),
        ));
    }
    let heads = Heads::of(&cfg)?;
    let tensors = initial_tensors(&cfg, heads, seed);
    let refs: Vec<F32Tensor<'_>> =
        tensors.iter().map(|(name, shape, values)| F32Tensor { name: name.clone(), shape: shape.clone(), values }).collect();
    let mut meta = BTreeMap::new();
    meta.insert("format", "pt".to_string());
    let safetensors = write_f32(&refs, &meta)?;
    let mut json: serde_json::Value = serde_json::from_str(config_json)?;
    let obj = json.as_object_mut().ok_or_else(|| Error::Config("config.json is not a JSON object".into()))?;
    obj.insert("architectures".into(), serde_json::json!([heads.architecture()]));
    obj.insert("model_type".into(), "bert".into());
    Ok((serde_json::to_string_pretty(&json)? + "\n", safetensors))
}

/// Every tensor of the model, under transformers' names, in a fixed order (the order of the draws).
fn initial_tensors(cfg: &BertConfig, heads: Heads, seed: u64) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let (h, i, std) = (cfg.hidden_size, cfg.intermediate_size, cfg.initializer_range);
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::new();
    let mut normal_t = |out: &mut Vec<_>, name: String, shape: Vec<usize>| {
        let values = normal(&mut rng, shape.iter().product(), std);
        out.push((name, shape, values));
    };
    let filled = |name: String, n: usize, v: f32| (name, vec![n], vec![v; n]);
    let e = "bert.embeddings";
    normal_t(&mut out, format!("{e}.word_embeddings.weight"), vec![cfg.vocab_size, h]);
    if let Some(row) = out.last_mut().and_then(|w| w.2.chunks_mut(h).nth(cfg.pad_token_id as usize)) {
        row.fill(0.0);
    }
    normal_t(&mut out, format!("{e}.position_embeddings.weight"), vec![cfg.max_position_embeddings, h]);
    normal_t(&mut out, format!("{e}.token_type_embeddings.weight"), vec![cfg.type_vocab_size, h]);
    let layer_norm = |out: &mut Vec<_>, p: &str| {
        out.push(filled(format!("{p}.LayerNorm.weight"), h, 1.0));
        out.push(filled(format!("{p}.LayerNorm.bias"), h, 0.0));
    };
    layer_norm(&mut out, e);
    let mut linear = |out: &mut Vec<_>, p: String, rows: usize, cols: usize| {
        normal_t(out, format!("{p}.weight"), vec![rows, cols]);
        out.push(filled(format!("{p}.bias"), rows, 0.0));
    };
    for l in 0..cfg.num_hidden_layers {
        let p = format!("bert.encoder.layer.{l}");
        for qkv in ["query", "key", "value"] {
            linear(&mut out, format!("{p}.attention.self.{qkv}"), h, h);
        }
        linear(&mut out, format!("{p}.attention.output.dense"), h, h);
        layer_norm(&mut out, &format!("{p}.attention.output"));
        linear(&mut out, format!("{p}.intermediate.dense"), i, h);
        linear(&mut out, format!("{p}.output.dense"), h, i);
        layer_norm(&mut out, &format!("{p}.output"));
    }
    linear(&mut out, "cls.predictions.transform.dense".into(), h, h);
    layer_norm(&mut out, "cls.predictions.transform");
    out.push(filled("cls.predictions.bias".into(), cfg.vocab_size, 0.0));
    if heads == Heads::PreTraining {
        linear(&mut out, "bert.pooler.dense".into(), h, h);
        linear(&mut out, "cls.seq_relationship".into(), 2, h);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{"model_type": "bert", "vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2,
        "pad_token_id": 0, "initializer_range": 0.05}"#;

    #[test]
    fn the_draws_are_normal_with_the_configured_spread() {
        let v = normal(&mut SplitMix64::new(1), 200_001, 0.05);
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let sd = (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
        // Standard errors: mean 0.05/√n ≈ 1.1e-4, sd 0.05/√(2n) ≈ 7.9e-5; five of each.
        assert!(mean.abs() < 6e-4 && (sd - 0.05).abs() < 4e-4, "mean {mean}, sd {sd}");
        let within = v.iter().filter(|&&x| x.abs() <= 0.05).count() as f64 / n;
        assert!((within - 0.6827).abs() < 0.005, "{within} within one sd");
    }

    #[test]
    fn every_tensor_of_bert_for_pretraining_with_transformers_init() {
        let (json, bytes) = initial_model(CONFIG, 3).unwrap();
        let cfg = BertConfig::from_json_str(&json).unwrap();
        assert_eq!(cfg.architectures, ["BertForPreTraining"]);
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let get = |n: &str| -> Vec<f32> {
            st.tensor(n).unwrap().data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
        };
        // 5 embedding tensors, 16 per layer, pooler 2, MLM transform 4 + bias, NSP 2.
        assert_eq!(st.names().len(), 5 + 16 * 2 + 2 + 5 + 2);
        let word = get("bert.embeddings.word_embeddings.weight");
        assert_eq!(word.len(), 300 * 32);
        assert!(word[..32].iter().all(|&x| x == 0.0), "the padding row is zero");
        assert!(word[32..].iter().all(|&x| x != 0.0 && x.abs() < 0.05 * 6.0));
        assert!(get("bert.encoder.layer.1.output.LayerNorm.weight").iter().all(|&x| x == 1.0));
        assert!(get("cls.predictions.transform.LayerNorm.bias").iter().all(|&x| x == 0.0));
        assert!(get("cls.predictions.bias").iter().all(|&x| x == 0.0) && get("cls.predictions.bias").len() == 300);
        assert!(get("bert.encoder.layer.0.intermediate.dense.bias").iter().all(|&x| x == 0.0));
        assert_eq!(st.tensor("bert.encoder.layer.0.intermediate.dense.weight").unwrap().shape(), [64, 32]);
        assert_eq!(st.tensor("cls.seq_relationship.weight").unwrap().shape(), [2, 32]);
        assert!(st.tensor("cls.predictions.decoder.weight").is_err(), "tied: not stored");
        // Seeded: the same seed, the same bytes; another, others.
        assert_eq!(initial_model(CONFIG, 3).unwrap().1, bytes);
        assert_ne!(initial_model(CONFIG, 4).unwrap().1, bytes);
    }

    #[test]
    fn masked_lm_alone_and_refusals() {
        let mlm = CONFIG.replace("{\"model_type\"", "{\"architectures\": [\"BertForMaskedLM\"], \"model_type\"");
        let (_, bytes) = initial_model(&mlm, 0).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert!(st.tensor("cls.seq_relationship.weight").is_err() && st.tensor("bert.pooler.dense.weight").is_err());
        let err = |c: &str| initial_model(c, 0).unwrap_err().to_string();
        let cls = CONFIG.replace("{\"model_type\"", "{\"architectures\": [\"BertForSequenceClassification\"], \"model_type\"");
        assert!(err(&cls).contains("`BertForSequenceClassification`"), "{}", err(&cls));
        let untied = CONFIG.replace("{\"model_type\"", "{\"tie_word_embeddings\": false, \"model_type\"");
        assert!(err(&untied).contains("tie_word_embeddings"), "{}", err(&untied));
        let roberta = CONFIG.replace("\"bert\"", "\"roberta\"");
        assert!(err(&roberta).contains("roberta"), "{}", err(&roberta));
        assert!(err("{\"hidden_size\": 32}").contains("vocab_size"), "{}", err("{\"hidden_size\": 32}"));
    }
}
