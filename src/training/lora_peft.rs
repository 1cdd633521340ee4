//! LoRA on a [`FineTuner`] as peft does it ([`super::lora`] has the math): [`FineTuner::set_lora`] freezes the
//! encoder and puts the adapters on it; [`export_adapter`] writes peft's `adapter_config.json` and
//! `adapter_model.safetensors` (`PeftModel.from_pretrained` loads them); [`merged`] gives the weights with `W + s·B·A`
//! folded in, as `merge_and_unload`, for a plain Hugging Face folder. Checked against peft by `tests/lora_golden.rs`.

use super::lora::{Adapter, Lora, LoraOptions, LoraTargets};
use super::finetune::{FineTuneTask, FineTuner};
use super::rng::SplitMix64;
use crate::backend::Backend;
use crate::config::Family;
use crate::weights::safetensors::{write_f32, F32Tensor};
use crate::weights::HostTensor;
use crate::{Error, Result};

/// peft's `task_type` for a task.
pub fn task_type(task: FineTuneTask) -> &'static str {
    match task {
        FineTuneTask::Sequence => "SEQ_CLS",
        FineTuneTask::Token => "TOKEN_CLS",
        FineTuneTask::Qa => "QUESTION_ANS",
        FineTuneTask::Embedding => "FEATURE_EXTRACTION",
        FineTuneTask::Pretrain => "FEATURE_EXTRACTION", // peft has no pre-training task type; the closest
    }
}

impl<B: Backend> FineTuner<B> {
    /// Freezes the encoder and adds LoRA adapters (A from the seeded initialiser, B zero): from here on only the
    /// adapters and the head's last linear train.
    pub fn set_lora(&mut self, be: &B, opts: LoraOptions, seed: u64) -> Result<()> {
        if opts.r == 0 || !(opts.alpha.is_finite() && opts.alpha > 0.0) {
            return Err(Error::Input(format!("LoRA needs a rank ≥ 1 and alpha > 0; got r {} and alpha {}", opts.r, opts.alpha)));
        }
        if self.top_layers().is_some() || self.encoder.lora.is_some() {
            return Err(Error::Input("LoRA trains adapters on every layer: it cannot be combined with --layers".into()));
        }
        let (head, _) = self.head_modules();
        let enc = &mut self.encoder;
        let mut trains = vec![false; enc.params.len()];
        for i in head {
            trains[i] = true;
        }
        let (h, inter, r) = (enc.config.hidden_size, enc.config.intermediate_size, opts.r);
        // A stream of its own, apart from the head's initialiser and the data shuffle of the same seed.
        let mut rng = SplitMix64::new(seed ^ 0x4c6f_5241);
        let mut adapters = Vec::new();
        let all = opts.targets != LoraTargets::Qv;
        let rotary = matches!(enc.config.family, Family::NomicBert | Family::Gte);
        let modern = enc.config.family == Family::ModernBert;
        let jina = enc.config.family == Family::JinaBert;
        // ALBERT's layers are one layer run at every pass: one adapter per module, applied at every pass (its
        // forward finds it by the weight), its gradient summed over the passes (`params::put`), as peft's on the
        // shared module.
        let layers = if enc.shares_layers() { 1 } else { enc.layers() };
        // (the weight, which of its names, the rows of the fused output and its total, out, in)
        let mut projection = Vec::new();
        if opts.targets == LoraTargets::AllProjection {
            // The embeddings' projection into the layers' width, below the layers: ALBERT's
            // `embedding_hidden_mapping_in`, ELECTRA's `embeddings_project` (E → H).
            let w = enc.projection().ok_or_else(|| Error::Input(format!(
                "LoRA targets all-projection adapt the embeddings' projection (ALBERT's `embedding_hidden_mapping_in`, \
                 ELECTRA's `embeddings_project` when embedding_size differs from hidden_size); this `{}` checkpoint has \
                 none: use --lora-targets all",
                enc.config.family.model_type()
            )))?;
            projection.push((w, 0, None, h, enc.params[w].cols));
        }
        for l in 0..layers {
            let [qkv, o, i, out] = enc.layer_linears(l);
            let mut targets = if l == 0 { std::mem::take(&mut projection) } else { Vec::new() };
            if modern {
                // peft targets the packed modules whole: `attn.Wqkv` (queries, keys and values), and with "all"
                // `attn.Wo`, `mlp.Wi` ([input; gate]) and `mlp.Wo`.
                targets.push((qkv, 0, None, 3 * h, h));
                if all {
                    targets.extend([(o, 0, None, h, h), (i, 0, None, 2 * inter, h), (out, 0, None, h, inter)]);
                }
            } else {
                targets.push((qkv, 0, Some((0, 3 * h)), h, h));
                if all {
                    targets.push((qkv, 1, Some((h, 3 * h)), h, h));
                }
                targets.push((qkv, 2, Some((2 * h, 3 * h)), h, h));
            }
            if all && rotary {
                // `[up; gate]` is one parameter: peft's `up_proj` and `gate_proj` are its two halves.
                targets.extend([(o, 0, None, h, h), (i, 0, Some((0, 2 * inter)), inter, h),
                    (i, 1, Some((inter, 2 * inter)), inter, h), (out, 0, None, h, inter)]);
            } else if all && jina {
                // `mlp.gated_layers` `(2I, H)` whole (no bias), `mlp.wo`.
                targets.extend([(o, 0, None, h, h), (i, 0, None, 2 * inter, h), (out, 0, None, h, inter)]);
            } else if all && !modern {
                targets.extend([(o, 0, None, h, h), (i, 0, None, inter, h), (out, 0, None, h, inter)]);
            }
            for (weight, k, rows, n_out, n_in) in targets {
                // The module under the family's names, e.g. `bert.encoder.layer.0.attention.self.query`; the rotary
                // families' under transformers' modules, which peft targets (`gte.layers.0.self_attn.q_proj`).
                let module = match rotary {
                    true => {
                        let role = match weight {
                            w if w == qkv => ["q_proj", "k_proj", "v_proj"][k],
                            w if w == o => "o_proj",
                            w if w == i => ["up_proj", "gate_proj"][k],
                            _ => "down_proj",
                        };
                        crate::weights::rotary::peft_module(enc.config.family, l, role)
                    }
                    false => {
                        let name = &enc.params[weight].names[k];
                        name.strip_suffix(".weight").unwrap_or(name).to_string()
                    }
                };
                // ModernBERT's forward reads `Wi' = swap(Wi)` ([gate; input]), JinaBERT's `gated_layers` likewise
                // ([non_gated; gated]): B's rows follow it there.
                let perm = ((modern || jina) && weight == i).then(|| super::encoder::swap_halves(inter));
                let bound = 1.0 / (n_in as f64).sqrt();
                let av: Vec<f32> = (0..r * n_in).map(|_| ((rng.next_f64() * 2.0 - 1.0) * bound) as f32).collect();
                let a = enc.push(be, vec![format!("{module}.lora_A.weight")], &HostTensor::f32(vec![r, n_in], av)?, r, n_in, true)?;
                let zeros = HostTensor::f32(vec![n_out, r], vec![0.0; n_out * r])?;
                let b = enc.push(be, vec![format!("{module}.lora_B.weight")], &zeros, n_out, r, true)?;
                trains.extend([true, true]);
                adapters.push(Adapter { module, a, b, weight, rows, perm });
            }
        }
        let mut s = vec![0f32; r * r];
        for k in 0..r {
            s[k * r + k] = opts.scale();
        }
        let scale = be.input(&s, r, r)?;
        enc.lora = Some(Lora { opts, adapters, trains, scale });
        Ok(())
    }
}

/// peft's `target_modules` for the family's module names (DistilBERT's `q_lin`, `v_lin`, MPNet's `q`, `v`, ...).
fn target_modules(o: &LoraOptions, family: Family) -> &'static [&'static str] {
    match (family, o.targets) {
        (Family::DistilBert, LoraTargets::Qv) => &["q_lin", "v_lin"],
        (Family::DistilBert, LoraTargets::All) => &["q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"],
        // peft has no default for MPNet: its modules are `attention.attn.{q,k,v,o}` (the feed-forward's are BERT's).
        (Family::MPNet, LoraTargets::Qv) => &["q", "v"],
        (Family::MPNet, LoraTargets::All) => &["q", "k", "v", "o", "intermediate.dense", "output.dense"],
        (Family::DebertaV2, LoraTargets::Qv) => &["query_proj", "value_proj"],
        (Family::DebertaV2, LoraTargets::All) =>
            &["query_proj", "key_proj", "value_proj", "attention.output.dense", "intermediate.dense", "output.dense"],
        (Family::NomicBert | Family::Gte, LoraTargets::Qv) => &["q_proj", "v_proj"],
        (Family::NomicBert | Family::Gte, LoraTargets::All) =>
            &["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "gate_proj", "down_proj"],
        // peft has no default for ModernBERT: its packed modules whole (`Wo`: the attention's and the MLP's).
        (Family::ModernBert, LoraTargets::Qv) => &["Wqkv"],
        (Family::ModernBert, LoraTargets::All) => &["Wqkv", "Wo", "Wi"],
        // JinaBERT's attention is BERT's (peft's default), its feed-forward `JinaBertGLUMLP`'s.
        (Family::JinaBert, LoraTargets::All) =>
            &["query", "key", "value", "attention.output.dense", "mlp.gated_layers", "mlp.wo"],
        // ALBERT's shared layer (peft has no default for it; its q/v are BERT's names): `attention.dense`, `ffn`,
        // `ffn_output`; the embeddings' `embedding_hidden_mapping_in` is not a layer's: adapted with all-projection.
        (Family::Albert, LoraTargets::All) => &["query", "key", "value", "attention.dense", "ffn", "ffn_output"],
        (Family::Albert, LoraTargets::AllProjection) =>
            &["query", "key", "value", "attention.dense", "ffn", "ffn_output", "embedding_hidden_mapping_in"],
        _ => o.target_modules(),
    }
}

/// The name a parameter has in a peft state dict: `base_model.model.` before transformers' name (a bare encoder's
/// without the task models' prefix, as `BertModel`, `RobertaModel`, ... name them).
fn peft_name(task: FineTuneTask, family: Family, name: &str) -> String {
    let prefix = crate::weights::family_prefix(family).unwrap_or("bert.");
    let name = if task == FineTuneTask::Embedding { name.strip_prefix(prefix).unwrap_or(name) } else { name };
    format!("base_model.model.{name}")
}

/// The adapter as peft's `save_pretrained` writes it: `adapter_config.json` and `adapter_model.safetensors` (the
/// adapters' A and B, and the trained head under its own name, as peft stores `modules_to_save`). `base`: the base
/// model's name or path for `base_model_name_or_path`. A classifier's `labels` go in the safetensors metadata as
/// `id2label` (peft refuses unknown keys in adapter_config.json and ignores the metadata), where
/// `weights::peft::apply_lora` finds them.
pub async fn export_adapter<B: Backend>(be: &B, tuner: &FineTuner<B>, base: Option<&str>, labels: Option<&[String]>)
    -> Result<(String, Vec<u8>)> {
    let lora = tuner.encoder.lora.as_ref().ok_or_else(|| Error::Input("no LoRA adapters to export".into()))?;
    let task = tuner.task();
    let (_, head_module) = tuner.head_modules();
    let shapes = tuner.shapes();
    let mut tensors = Vec::new();
    for (_, p) in tuner.encoder.params.iter().enumerate().filter(|(i, _)| lora.trains(*i)) {
        tensors.push((peft_name(task, tuner.encoder.config.family, &p.names[0]), shapes[&p.names[0]].clone(), be.read(&p.tensor).await?));
    }
    let views: Vec<F32Tensor<'_>> =
        tensors.iter().map(|(name, shape, values)| F32Tensor { name: name.clone(), shape: shape.clone(), values }).collect();
    let mut meta = std::collections::BTreeMap::new();
    meta.insert("format", "pt".to_string());
    if let Some(labels) = labels {
        let id2label: std::collections::BTreeMap<String, &str> =
            labels.iter().enumerate().map(|(i, l)| (i.to_string(), l.as_str())).collect();
        meta.insert("id2label", serde_json::to_string(&id2label)?);
    }
    let o = &lora.opts;
    let config = serde_json::json!({
        "alpha_pattern": {},
        "auto_mapping": null,
        "base_model_name_or_path": base,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "layer_replication": null,
        "layers_pattern": null,
        "layers_to_transform": null,
        "loftq_config": {},
        "lora_alpha": if o.alpha.fract() == 0.0 { serde_json::json!(o.alpha as i64) } else { serde_json::json!(o.alpha) },
        "lora_dropout": 0.0,
        "megatron_config": null,
        "megatron_core": "megatron.core",
        // peft adds "score" (another architecture's classifier name) for SEQ_CLS and TOKEN_CLS; written as it does.
        "modules_to_save": head_module.map(|m| if m == "classifier" { vec![m, "score"] } else { vec![m] }),
        "peft_type": "LORA",
        "r": o.r,
        "rank_pattern": {},
        "revision": null,
        "target_modules": target_modules(o, tuner.encoder.config.family),
        "task_type": task_type(task),
        "use_dora": false,
        "use_rslora": false,
    });
    Ok((serde_json::to_string_pretty(&config)? + "\n", write_f32(&views, &meta)?))
}

/// [`FineTuner::named`]'s parameters with every adapter folded into its weight (`W + s·B·A`, as peft's
/// `merge_and_unload`) and the adapters themselves left out; without LoRA, the parameters as they are.
pub async fn merged<B: Backend>(be: &B, tuner: &FineTuner<B>) -> Result<Vec<(String, Vec<f32>)>> {
    let mut named = tuner.named(be, None).await?;
    let Some(lora) = tuner.encoder.lora.as_ref() else { return Ok(named) };
    let (params, s, r) = (&tuner.encoder.params, lora.opts.scale() as f64, lora.opts.r);
    for ad in &lora.adapters {
        let (a, b) = (be.read(&params[ad.a].tensor).await?, be.read(&params[ad.b].tensor).await?);
        let (n_out, n_in) = (params[ad.b].rows, params[ad.a].cols);
        // The module's own tensor, or (the rotary families' packed `qkv_proj`, `up_gate_proj`) its rows of one.
        let key = format!("{}.weight", ad.module);
        let (key, first) = match named.iter().any(|(n, _)| *n == key) {
            true => (key, 0),
            false => {
                // The parameter's names split its rows evenly (NomicBERT's `fc11`, `fc12`; GTE's one `qkv_proj`).
                let names = &params[ad.weight].names;
                let (f, total) = ad.rows.unwrap_or((0, params[ad.weight].rows));
                let per = total / names.len();
                (names[f / per].clone(), f % per)
            }
        };
        let w = &mut named.iter_mut().find(|(n, _)| *n == key).ok_or_else(|| Error::Weights(format!("no {key}")))?.1;
        for o in 0..n_out {
            for i in 0..n_in {
                let d: f64 = (0..r).map(|k| b[o * r + k] as f64 * a[k * n_in + i] as f64).sum();
                let at = (first + o) * n_in + i;
                w[at] = (w[at] as f64 + s * d) as f32;
            }
        }
    }
    let adapter_names: std::collections::HashSet<&str> =
        lora.adapters.iter().flat_map(|ad| [ad.a, ad.b]).map(|i| params[i].names[0].as_str()).collect();
    named.retain(|(n, _)| !adapter_names.contains(n.as_str()));
    Ok(named)
}
