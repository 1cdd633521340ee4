//! ModernBERT's keys (transformers `models/modernbert/configuration_modernbert.py`), read from config.json beside
//! BERT's fields: what bertgpu runs of them, and every value that would change the computation unseen refused by
//! the key's name.
//!
//! What runs: pre-LN layers (`Norms::Pre`), LayerNorms with or without β (`norm_bias`), the linear maps' biases
//! where `attention_bias` / `mlp_bias` say, GeGLU (`hidden_activation` on the first half of `Wi`), rotary positions
//! with two thetas, and sliding-window attention on the local layers; the heads' `classifier_pooling` (`cls` or
//! `mean`), `classifier_activation`, `classifier_bias` and `decoder_bias`.
//!
//! Both forms of the key set transformers accepts: its own (transformers 5's `save_pretrained`: `layer_types`,
//! `rope_parameters` by layer type) and the hub's older one (`global_attn_every_n_layers`, `global_rope_theta`,
//! `local_rope_theta`, `rope_scaling`), as `ModernBertConfig.__post_init__` and `convert_rope_params_to_dict` merge
//! them: a theta under `rope_parameters` wins over the older key, which wins over the default (160000 global, 10000
//! local). Keys that change nothing at inference (`sparse_prediction`, which only drops unlabelled rows from a
//! loss; `reference_compile`, `deterministic_flash_attn`) are read as transformers reads them: not at all. The
//! dropouts are read for training (`training::encoder::DropoutOptions::of_config`).

use serde_json::Value;

use super::encoder::{LayerBiases, SlidingWindow};
use crate::activation::Activation;
use crate::sentence::Pooling;
use crate::{Error, Result};

/// What ModernBERT's heads read from config.json (`ModernBertPredictionHead` and the task classes).
#[derive(Clone, Debug, PartialEq)]
pub struct ModernBert {
    /// `classifier_pooling`: the sequence classifier reads the first token ([`Pooling::Cls`]) or the mean over the
    /// attention mask ([`Pooling::Mean`]).
    pub classifier_pooling: Pooling,
    /// `classifier_activation` (default `gelu`, the exact one): `head`'s activation, between its dense and norm.
    pub classifier_activation: Activation,
    /// `classifier_bias` (default false): whether `head.dense` has a bias.
    pub classifier_bias: bool,
    /// `decoder_bias` (default true): whether the masked LM's `decoder` has a bias.
    pub decoder_bias: bool,
    /// `embedding_dropout` and `mlp_dropout` (default 0; training only): training drops each site at its own
    /// probability (the dropout plan's embedding and hidden ones).
    pub embedding_dropout: f32,
    pub mlp_dropout: f32,
}

/// Everything ModernBERT's config.json says beyond BERT's field names, in BERT's terms.
pub(super) struct Keys {
    pub heads: ModernBert,
    pub hidden_act: Activation,
    pub layer_norm_eps: f64,
    pub biases: LayerBiases,
    pub norm_bias: bool,
    /// The global layers' theta.
    pub theta: f32,
    pub window: SlidingWindow,
    /// Training's dropouts in BERT's terms: the larger of `embedding_dropout` and `mlp_dropout` (hidden),
    /// `attention_dropout`, `classifier_dropout` (ModernBertConfig's defaults all 0).
    pub dropout: [f32; 3],
}

fn refuse(what: String) -> Error {
    Error::Config(format!("{what} is not supported in a ModernBERT checkpoint"))
}

fn boolean(v: &Value, key: &str, default: bool) -> Result<bool> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x.as_bool().ok_or_else(|| Error::Config(format!("config.json's `{key}` {x} is not true or false"))),
    }
}

fn text<'a>(v: &'a Value, key: &str, default: &'a str) -> Result<&'a str> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x.as_str().ok_or_else(|| Error::Config(format!("config.json's `{key}` {x} is not a string"))),
    }
}

fn number(v: &Value, key: &str) -> Result<Option<f64>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x.as_f64().map(Some).ok_or_else(|| Error::Config(format!("config.json's `{key}` {x} is not a number"))),
    }
}

fn activation(v: &Value, key: &str) -> Result<Activation> {
    let name = text(v, key, "gelu")?;
    Activation::from_hf(name).map_err(|_| refuse(format!("`{key}` `{name}` (gelu, gelu_new, relu, silu, tanh run)")))
}

/// The theta of one layer type: `rope_parameters[kind].rope_theta`, else the older top-level key, else the default;
/// a scaled rotation (any `rope_type` but `default`, or `rope_scaling`) refused by its type.
fn theta(v: &Value, kind: &str, older: &str, default: f64) -> Result<f32> {
    let scaled = |t: &str| refuse(format!("rope type `{t}` (bertgpu rotates by the plain \"default\" rotary embeddings)"));
    if let Some(s) = v.get("rope_scaling").filter(|s| !s.is_null()) {
        return Err(scaled(s.get("rope_type").or_else(|| s.get("type")).and_then(Value::as_str).unwrap_or("unnamed")));
    }
    let params = match v.get("rope_parameters") {
        None | Some(Value::Null) => None,
        Some(p) => {
            let obj = p.as_object().ok_or_else(|| refuse(format!("`rope_parameters` {p} (not an object)")))?;
            if let Some((k, _)) = obj.iter().find(|(k, x)| !x.is_object() && !x.is_null() || !matches!(k.as_str(),
                "full_attention" | "sliding_attention")) {
                return Err(refuse(format!("`rope_parameters` key `{k}` (ModernBERT's are by layer type: \
                    `full_attention`, `sliding_attention`)")));
            }
            obj.get(kind).filter(|x| x.is_object())
        }
    };
    let mut theta = number(v, older)?.unwrap_or(default);
    if let Some(p) = params {
        let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str).unwrap_or("default");
        if kind != "default" {
            return Err(scaled(kind));
        }
        if let Some(t) = number(p, "rope_theta")? {
            theta = t;
        }
    }
    if !(theta.is_finite() && theta > 1.0) {
        return Err(refuse(format!("rope theta {theta} for `{kind}` (it must be a finite number above 1)")));
    }
    Ok(theta as f32)
}

/// Which of `layers` layers slide: `layer_types`, else every layer but each `global_attn_every_n_layers`-th (from
/// layer 0), as `ModernBertConfig.__post_init__` builds it.
fn sliding_layers(v: &Value, layers: usize) -> Result<Vec<bool>> {
    if let Some(types) = v.get("layer_types").filter(|t| !t.is_null()) {
        let list = types.as_array().ok_or_else(|| refuse(format!("`layer_types` {types} (not a list)")))?;
        if list.len() != layers {
            return Err(refuse(format!("`layer_types` of {} entries for {layers} layers", list.len())));
        }
        return list
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(refuse(format!("`layer_types` entry {t} (only `full_attention` and `sliding_attention`)"))),
            })
            .collect();
    }
    let every = match v.get("global_attn_every_n_layers") {
        None | Some(Value::Null) => 3,
        Some(x) => x.as_u64().filter(|&n| n > 0).ok_or_else(|| {
            refuse(format!("`global_attn_every_n_layers` {x} (it must be a positive integer)"))
        })? as usize,
    };
    Ok((0..layers).map(|i| i % every != 0).collect())
}

/// Reads and checks ModernBERT's keys of `config.json` (`v`); `layers` as [`super::BertConfig`] read it.
pub(super) fn parse(v: &Value, layers: usize) -> Result<Keys> {
    let pooling = match text(v, "classifier_pooling", "cls")? {
        "cls" => Pooling::Cls,
        "mean" => Pooling::Mean,
        other => return Err(refuse(format!("`classifier_pooling` `{other}` (only `cls` and `mean`)"))),
    };
    if let Some(d) = v.get("head_dim").and_then(Value::as_u64) {
        let (h, n) = (v.get("hidden_size").and_then(Value::as_u64), v.get("num_attention_heads").and_then(Value::as_u64));
        if h.zip(n).is_none_or(|(h, n)| n == 0 || d * n != h) {
            return Err(refuse(format!("`head_dim` {d} unlike hidden_size / num_attention_heads")));
        }
    }
    let local = match v.get("local_attention") {
        None | Some(Value::Null) => 128,
        Some(x) => x.as_u64().ok_or_else(|| refuse(format!("`local_attention` {x} (not a whole number)")))? as usize,
    };
    // `sliding_window` is a property of ModernBertConfig (local_attention // 2); written out, it must say the same.
    if let Some(sw) = v.get("sliding_window").filter(|x| !x.is_null()) {
        if sw.as_u64() != Some((local / 2) as u64) {
            return Err(refuse(format!("`sliding_window` {sw} unlike `local_attention` {local} / 2")));
        }
    }
    let (attention, mlp) = (boolean(v, "attention_bias", false)?, boolean(v, "mlp_bias", false)?);
    let p = |key: &str| -> Result<f32> { Ok(number(v, key)?.unwrap_or(0.0) as f32) };
    let (embedding_dropout, mlp_dropout) = (p("embedding_dropout")?, p("mlp_dropout")?);
    let dropout = [embedding_dropout.max(mlp_dropout), p("attention_dropout")?, p("classifier_dropout")?];
    Ok(Keys {
        dropout,
        heads: ModernBert {
            classifier_pooling: pooling,
            classifier_activation: activation(v, "classifier_activation")?,
            classifier_bias: boolean(v, "classifier_bias", false)?,
            decoder_bias: boolean(v, "decoder_bias", true)?,
            embedding_dropout,
            mlp_dropout,
        },
        hidden_act: activation(v, "hidden_activation")?,
        layer_norm_eps: number(v, "norm_eps")?.unwrap_or(1e-5),
        biases: LayerBiases { qkv: attention, attention_output: attention, up: mlp, down: mlp },
        norm_bias: boolean(v, "norm_bias", false)?,
        theta: theta(v, "full_attention", "global_rope_theta", 160_000.0)?,
        window: SlidingWindow {
            half: local / 2,
            theta: theta(v, "sliding_attention", "local_rope_theta", 10_000.0)?,
            layers: sliding_layers(v, layers)?,
        },
    })
}
