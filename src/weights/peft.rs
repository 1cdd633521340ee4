//! A LoRA adapter as peft saves it (`adapter_config.json` + `adapter_model.safetensors`) folded into its base
//! model's weights at load: `W + (lora_alpha / r)·B·A` for every adapted linear (peft's `merge_and_unload`), and the
//! adapter's whole modules (`modules_to_save`, e.g. a new classifier) in place of the base's. Other kinds of adapter
//! and LoRA variants we do not compute (DoRA, rsLoRA, per-module ranks or alphas, fan-in-fan-out weights) are refused
//! by name. `training::lora` writes such adapters; `tests/lora_golden.rs` checks both against peft.

use std::collections::BTreeMap;

use super::{HostTensor, Weights};
use crate::config::BertConfig;
use crate::{Error, Result};

/// peft's state-dict prefix before transformers' names.
const PREFIX: &str = "base_model.model.";

/// `weights` (and `config`, whose label set follows a new classifier) with the adapter applied.
pub fn apply_lora(weights: &Weights, config: &mut BertConfig, adapter_config: &[u8], adapter: &[u8]) -> Result<Weights> {
    let bad = |what: String| Error::Weights(format!("LoRA adapter: {what}"));
    let c: serde_json::Value =
        serde_json::from_slice(adapter_config).map_err(|e| bad(format!("adapter_config.json: {e}")))?;
    if c["peft_type"].as_str() != Some("LORA") {
        return Err(bad(format!("peft_type {} is not supported; only LORA adapters load", c["peft_type"])));
    }
    for key in ["use_dora", "use_rslora", "fan_in_fan_out"] {
        if c[key].as_bool() == Some(true) {
            return Err(bad(format!("`{key}` adapters are not supported")));
        }
    }
    for key in ["rank_pattern", "alpha_pattern"] {
        if c[key].as_object().is_some_and(|o| !o.is_empty()) {
            return Err(bad(format!("per-module `{key}` is not supported")));
        }
    }
    let r = c["r"].as_u64().filter(|&r| r > 0).ok_or_else(|| bad("`r` must be a positive integer".into()))? as usize;
    let alpha = c["lora_alpha"].as_f64().ok_or_else(|| bad("`lora_alpha` is missing".into()))?;
    let scale = (alpha / r as f64) as f32;
    let file = Weights::from_safetensors(adapter)?;
    let tensors: BTreeMap<String, HostTensor> =
        file.names().into_iter().filter_map(|n| Some((n.to_string(), file.stored(n)?.clone()))).collect();
    let mut out = weights.clone();
    // The base's name for a module: as the adapter names it, or without `bert.` (a BertModel checkpoint's names).
    let base_name = |name: &str| -> Option<String> {
        [name.to_string(), name.strip_prefix("bert.").unwrap_or(name).to_string()]
            .into_iter()
            .find(|n| weights.stored(n).is_some())
    };
    for (name, a) in &tensors {
        let Some(module) = name.strip_prefix(PREFIX).and_then(|n| n.strip_suffix(".lora_A.weight")) else { continue };
        let b = tensors
            .get(&format!("{PREFIX}{module}.lora_B.weight"))
            .ok_or_else(|| bad(format!("{module}: lora_A without lora_B")))?;
        // NomicBERT's and GTE's modules (`self_attn.q_proj`...) are rows of the checkpoint's packed tensors.
        let packed = || -> Option<(String, usize, usize)> {
            let fam = config.family;
            if !matches!(fam, crate::config::Family::NomicBert | crate::config::Family::Gte) {
                return None;
            }
            let (bert, first, rows) = super::rotary::peft_weight(fam, module, config.hidden_size, config.intermediate_size)?;
            let stored = super::rotary::from_bert(fam, &bert).into_iter().find(|n| weights.stored(n).is_some())?;
            Some((stored, first, rows))
        };
        let (w_name, first, rows) = match base_name(&format!("{module}.weight")) {
            Some(n) => {
                let rows = weights.stored(&n).expect("found").rows_cols().0;
                (n, 0, rows)
            }
            None => packed().ok_or_else(|| bad(format!("{module}: the base model has no such linear")))?,
        };
        // An earlier adapter may have folded into the same packed tensor.
        let w = out.stored(&w_name).expect("found above").clone();
        let (total, in_f) = w.rows_cols();
        let out_f = rows;
        if a.shape != [r, in_f] || b.shape != [out_f, r] || first + rows > total {
            return Err(bad(format!(
                "{module}: lora_A {:?} and lora_B {:?} do not fit a ({out_f}, {in_f}) weight at r = {r}",
                a.shape, b.shape
            )));
        }
        let (mut wv, av, bv) = (w.to_f32()?, a.to_f32()?, b.to_f32()?);
        for o in 0..out_f {
            for k in 0..r {
                let s = scale * bv[o * r + k];
                let row = (first + o) * in_f;
                for (x, &y) in wv[row..row + in_f].iter_mut().zip(&av[k * in_f..(k + 1) * in_f]) {
                    *x += s * y;
                }
            }
        }
        out.insert(w_name, HostTensor::f32(vec![total, in_f], wv)?);
    }
    // Whole modules (peft's modules_to_save, e.g. the classifier) replace the base's.
    for (name, t) in &tensors {
        let Some(plain) = name.strip_prefix(PREFIX) else {
            return Err(bad(format!("`{name}` is not a peft name (base_model.model.…)")));
        };
        if plain.contains(".lora_") {
            continue;
        }
        let plain = plain.replace(".modules_to_save.default.", ".").replace(".modules_to_save.", ".");
        if plain == "classifier.weight" || plain == "classifier.out_proj.weight" {
            // A new classifier (RoBERTa's and ELECTRA's: `out_proj`): its labels from the metadata bertgpu writes, else named as transformers names
            // unnamed ones.
            let named = metadata_labels(adapter).filter(|l| l.len() == t.shape[0]);
            if named.is_some() || config.id2label.len() != t.shape[0] {
                let labels = named.unwrap_or_else(|| (0..t.shape[0]).map(|i| format!("LABEL_{i}")).collect());
                config.id2label = labels.into_iter().enumerate().collect();
                config.label2id = config.id2label.iter().map(|(i, l)| (l.clone(), *i)).collect();
            }
        }
        out.insert(base_name(&plain).unwrap_or(plain), t.clone());
    }
    if let Some(arch) = match c["task_type"].as_str() {
        Some("SEQ_CLS") => Some("BertForSequenceClassification"),
        Some("TOKEN_CLS") => Some("BertForTokenClassification"),
        Some("QUESTION_ANS") => Some("BertForQuestionAnswering"),
        _ => None,
    } {
        config.architectures = vec![arch.to_string()];
    }
    Ok(out)
}

/// The `id2label` a bertgpu adapter keeps in its safetensors metadata, in class order.
fn metadata_labels(safetensors: &[u8]) -> Option<Vec<String>> {
    let n = u64::from_le_bytes(safetensors.get(..8)?.try_into().ok()?) as usize;
    let header: serde_json::Value = serde_json::from_slice(safetensors.get(8..8usize.checked_add(n)?)?).ok()?;
    let map: BTreeMap<usize, String> = serde_json::from_str::<BTreeMap<String, String>>(header["__metadata__"]["id2label"].as_str()?)
        .ok()?
        .into_iter()
        .map(|(k, v)| Some((k.parse().ok()?, v)))
        .collect::<Option<_>>()?;
    map.keys().copied().eq(0..map.len()).then(|| map.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::safetensors::{write_f32, F32Tensor};

    fn config() -> BertConfig {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/models/tiny-classifier/config.json");
        BertConfig::from_json_str(&std::fs::read_to_string(dir).unwrap()).unwrap()
    }

    fn adapter(tensors: &[(&str, Vec<usize>, Vec<f32>)], labels: Option<&str>) -> Vec<u8> {
        let views: Vec<F32Tensor<'_>> =
            tensors.iter().map(|(n, s, v)| F32Tensor { name: n.to_string(), shape: s.clone(), values: v }).collect();
        let mut meta = std::collections::BTreeMap::new();
        if let Some(l) = labels {
            meta.insert("id2label", l.to_string());
        }
        write_f32(&views, &meta).unwrap()
    }

    #[test]
    fn lora_folds_in_as_merge_and_unload_and_the_head_replaces_the_base() {
        // A (2, 3) linear with r = 1, alpha = 2 (scale 2), and a new 2-class classifier.
        let mut base = Weights::new();
        base.insert("encoder.layer.0.attention.self.query.weight", HostTensor::f32(vec![2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap());
        let st = adapter(&[
            ("base_model.model.bert.encoder.layer.0.attention.self.query.lora_A.weight", vec![1, 3], vec![0.5, -1., 2.]),
            ("base_model.model.bert.encoder.layer.0.attention.self.query.lora_B.weight", vec![2, 1], vec![1., -0.25]),
            ("base_model.model.classifier.weight", vec![2, 3], vec![0.; 6]),
            ("base_model.model.classifier.bias", vec![2], vec![0.; 2]),
        ], Some(r#"{"0": "spam", "1": "ham"}"#));
        let ac = br#"{"peft_type": "LORA", "r": 1, "lora_alpha": 2, "task_type": "SEQ_CLS", "target_modules": ["query"]}"#;
        let mut cfg = config();
        let w = apply_lora(&base, &mut cfg, ac, &st).unwrap();
        // W + 2·B·A: row 0 adds 2·1·A, row 1 adds 2·(−0.25)·A.
        let merged = w.stored("encoder.layer.0.attention.self.query.weight").unwrap().to_f32().unwrap();
        assert_eq!(merged, vec![2., 0., 7., 3.75, 5.5, 5.]);
        assert_eq!(w.stored("classifier.weight").unwrap().shape, vec![2, 3]);
        assert_eq!(cfg.id2label.values().collect::<Vec<_>>(), ["spam", "ham"]);
        assert_eq!(cfg.architectures, ["BertForSequenceClassification"]);
    }

    #[test]
    fn other_adapters_are_refused_by_name() {
        let base = Weights::new();
        for (adapter_config, want) in [
            (r#"{"peft_type": "IA3"}"#, "peft_type \"IA3\""),
            (r#"{"peft_type": "LORA", "r": 1, "lora_alpha": 1, "use_dora": true}"#, "use_dora"),
            (r#"{"peft_type": "LORA", "r": 1, "lora_alpha": 1, "rank_pattern": {"query": 4}}"#, "rank_pattern"),
            (r#"{"peft_type": "LORA", "r": 0, "lora_alpha": 1}"#, "`r` must be a positive integer"),
        ] {
            let e = apply_lora(&base, &mut config(), adapter_config.as_bytes(), &adapter(&[], None)).err().unwrap().to_string();
            assert!(e.contains(want), "{adapter_config}: {e}");
        }
        let missing = adapter(&[("base_model.model.bert.encoder.layer.0.attention.self.query.lora_A.weight", vec![1, 3], vec![0.; 3])], None);
        let e = apply_lora(&base, &mut config(), br#"{"peft_type": "LORA", "r": 1, "lora_alpha": 1}"#, &missing).err().unwrap();
        assert!(e.to_string().contains("lora_A without lora_B"), "{e}");
    }
}
