//! The choices that make one encoder many families (what differs between BERT, NomicBERT and GTE fits in a few
//! values read once from config.json; the model and the kernels read them, none gains a copy per family), and how
//! the rotary families' config.json files state theirs: transformers' own keys (`rope_parameters`, `rope_theta`)
//! and the keys of the hub repositories that predate transformers' classes (nomic-ai's `n_embd`,
//! `rotary_emb_base`...; Alibaba-NLP's `model_type: "new"` with `rope_theta`, `rope_scaling`). Every key that would
//! change the computation in a way bertgpu does not follow is refused by name.

use serde::Deserialize;
use serde_json::Value;

use super::Family;
use crate::{Error, Result};

/// Where a token's position enters the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Positions {
    /// A learned table added to the embeddings (BERT; RoBERTa's from `pad_token_id + 1`).
    Absolute,
    /// No table and no rotation: the attention's relative terms carry the positions (DeBERTa-v3,
    /// `position_biased_input: false`).
    Relative,
    /// Rotary position embeddings on each head's queries and keys (transformers' `apply_rotary_pos_emb`, the
    /// `rotate_half` form: dimension `i` of the first half turns with `i + d/2`), inverse frequencies
    /// `1 / theta^(2i/d)`; no position table.
    Rotary { theta: f32 },
    /// ALiBi (Press et al., "Train Short, Test Long", in its symmetric form, JinaBERT v2): no table and no rotation;
    /// head h adds `−slope_h·|i − j|` to each scaled score (`model::alibi`).
    Alibi,
}

/// Where each layer's LayerNorms sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norms {
    /// BERT: after each block, on its output plus the residual, `x = LN(x + f(x))`.
    Post,
    /// ModernBERT: before each block, `x = x + f(LN(x))`, the first layer's attention without one (transformers'
    /// `nn.Identity` at layer 0), and a final LayerNorm after the last layer (`final_norm`).
    Pre,
}

/// Attention over a window of keys on some layers (ModernBERT's local layers; the others attend to every key).
#[derive(Clone, Debug, PartialEq)]
pub struct SlidingWindow {
    /// Query i sees key j only where |i − j| ≤ `half` (transformers' `sliding_window`, `local_attention // 2`,
    /// in `sliding_window_bidirectional_overlay`).
    pub half: usize,
    /// The rotary theta of the sliding layers (`local_rope_theta`, `rope_parameters.sliding_attention`); the other
    /// layers turn by [`Positions::Rotary`]'s.
    pub theta: f32,
    /// `layers[i]`: whether layer i slides (transformers' `layer_types[i] == "sliding_attention"`).
    pub layers: Vec<bool>,
}

/// The feed-forward block between the attention and the output LayerNorm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedForward {
    /// `W2·act(W1·x)` (BERT).
    Plain,
    /// `W2·(up(x) ⊙ act(gate(x)))` (GLU: SwiGLU with SiLU, GeGLU with GELU): one matmul gives `[up | gate]`, the
    /// backend's `glu` multiplies them.
    Gated,
}

impl FeedForward {
    /// The up-projection's output width for an intermediate size `i`: `i`, or `2i` for `[up | gate]`.
    pub fn up_width(self, i: usize) -> usize {
        match self {
            FeedForward::Plain => i,
            FeedForward::Gated => 2 * i,
        }
    }
}

/// Which of a layer's linear maps carry a bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerBiases {
    /// The query, key and value projections.
    pub qkv: bool,
    /// The attention's output projection.
    pub attention_output: bool,
    /// The feed-forward's first matmul (BERT's `intermediate.dense`; a gated block's `[up | gate]`).
    pub up: bool,
    /// The feed-forward's second matmul (`output.dense`, `down_proj`).
    pub down: bool,
}

impl LayerBiases {
    /// BERT: every linear map has its bias.
    pub const ALL: LayerBiases = LayerBiases { qkv: true, attention_output: true, up: true, down: true };
    /// NomicBERT: none.
    pub const NONE: LayerBiases = LayerBiases { qkv: false, attention_output: false, up: false, down: false };
}

/// What a rotary family's config.json states beyond BERT's keys, in BERT's terms.
#[derive(Debug, Default)]
pub(super) struct RotaryKeys {
    pub theta: f32,
    /// GTE's fixed NTK scaling (`rope_scaling` `{"type": "ntk", "factor"}`): [`super::BertConfig::rope_ntk_factor`].
    pub ntk_factor: Option<f32>,
    /// Sizes under nomic-ai's hub names (`n_embd`, `n_layer`, `n_head`, `n_inner`, `n_positions`,
    /// `layer_norm_epsilon`), where transformers' are absent.
    pub hidden_size: Option<usize>,
    pub num_hidden_layers: Option<usize>,
    pub num_attention_heads: Option<usize>,
    pub intermediate_size: Option<usize>,
    pub max_position_embeddings: Option<usize>,
    pub layer_norm_eps: Option<f64>,
    /// The gate's activation from nomic-ai's `activation_function` (`swiglu` → `silu`).
    pub hidden_act: Option<&'static str>,
    /// transformers' `head_dim`, which must be hidden_size / heads.
    pub head_dim: Option<usize>,
    /// nomic-ai's dropout keys (`resid_pdrop`, which its code also applies to the embeddings as `embd_pdrop`, and
    /// `attn_pdrop`), where transformers' are absent.
    pub hidden_dropout: Option<f64>,
    pub attention_dropout: Option<f64>,
}

#[derive(Deserialize)]
struct Raw {
    rope_parameters: Option<Value>,
    rope_theta: Option<f64>,
    rope_scaling: Option<Value>,
    partial_rotary_factor: Option<f64>,
    head_dim: Option<usize>,
    // nomic-ai's hub config (contrastors' NomicBertConfig).
    n_embd: Option<usize>,
    n_head: Option<usize>,
    n_inner: Option<usize>,
    n_layer: Option<usize>,
    n_positions: Option<usize>,
    layer_norm_epsilon: Option<f64>,
    activation_function: Option<String>,
    rotary_emb_base: Option<f64>,
    resid_pdrop: Option<f64>,
    embd_pdrop: Option<f64>,
    attn_pdrop: Option<f64>,
    rotary_emb_fraction: Option<f64>,
    rotary_emb_interleaved: Option<bool>,
    rotary_scaling_factor: Option<Value>,
    qkv_proj_bias: Option<bool>,
    mlp_fc1_bias: Option<bool>,
    mlp_fc2_bias: Option<bool>,
    prenorm: Option<bool>,
    use_rms_norm: Option<bool>,
    causal: Option<bool>,
    // Alibaba-NLP's hub config (`model_type: "new"`).
    layer_norm_type: Option<String>,
    logn_attention_scale: Option<bool>,
    pack_qkv: Option<bool>,
}

fn refuse(key: &str, value: impl std::fmt::Display, why: &str) -> Error {
    Error::Config(format!("{key} {value} is not supported: {why}"))
}

/// The rope parameters transformers reads (`rope_parameters` {`rope_type`, `rope_theta`}, or the older top-level
/// `rope_theta` / `rope_scaling`): the plain ("default") rotation, and for GTE the fixed NTK scaling that
/// Alibaba-NLP's gte-base/large-en-v1.5 configs name (`rope_scaling` `{"type": "ntk", "factor": 2.0}`, run by the
/// repositories' own `NTKScalingRotaryEmbedding`; transformers' `GteModel` has no `ntk` rope type). Any other
/// scaled rotation (`dynamic`, `yarn`, `linear`, NTK's `mixed_b`, ...) is refused by name. Returns theta and the NTK
/// factor.
fn theta_of(raw: &Raw, default: f64, family: Family) -> Result<(f64, Option<f32>)> {
    let scaled = |kind: &str| {
        refuse("rope type", format!("`{kind}`"), "bertgpu rotates by the plain (\"default\") rotary embeddings, and \
            GTE's fixed `ntk`; another scaled rotation would give other vectors without a word")
    };
    let mut ntk = None;
    if let Some(s) = raw.rope_scaling.as_ref().filter(|v| !v.is_null()) {
        let kind = s.get("rope_type").or_else(|| s.get("type")).and_then(Value::as_str).unwrap_or("unnamed");
        if kind != "ntk" || family != Family::Gte {
            return Err(scaled(kind));
        }
        if let Some(b) = s.get("mixed_b").filter(|v| !v.is_null()) {
            return Err(refuse("rope_scaling mixed_b", b, "GTE's fixed NTK scaling is run, not its mixed form"));
        }
        let f = s.get("factor").and_then(Value::as_f64).filter(|f| f.is_finite() && *f > 1.0);
        // At a factor of 1 or below the repositories' code leaves the rotation plain; no released config says so.
        let f = f.ok_or_else(|| refuse("rope_scaling factor", s.get("factor").unwrap_or(&Value::Null),
            "the NTK factor must be a number above 1"))?;
        ntk = Some(f as f32);
    }
    let mut theta = raw.rope_theta;
    if let Some(p) = raw.rope_parameters.as_ref().filter(|v| !v.is_null()) {
        let obj = p.as_object().ok_or_else(|| refuse("rope_parameters", p, "it must be an object"))?;
        if obj.values().any(Value::is_object) {
            return Err(refuse("rope_parameters", "by layer type", "one rotation for every layer is supported"));
        }
        let kind = obj.get("rope_type").or_else(|| obj.get("type")).and_then(Value::as_str).unwrap_or("default");
        if kind != "default" {
            return Err(scaled(kind));
        }
        if let Some(f) = obj.get("partial_rotary_factor").and_then(Value::as_f64).filter(|f| *f != 1.0) {
            return Err(refuse("partial_rotary_factor", f, "every dimension of a head is rotated here"));
        }
        if let Some(t) = obj.get("rope_theta") {
            theta = Some(t.as_f64().ok_or_else(|| refuse("rope_theta", t, "it must be a number"))?);
        }
    }
    if let Some(f) = raw.partial_rotary_factor.filter(|f| *f != 1.0) {
        return Err(refuse("partial_rotary_factor", f, "every dimension of a head is rotated here"));
    }
    Ok((theta.unwrap_or(default), ntk))
}

/// nomic-ai's hub keys: each that would change the computation (a bias, pre-norm, RMSNorm, a partial or interleaved
/// or scaled rotation, a causal mask, an ungated MLP) refused by name.
fn nomic_hub(raw: &Raw, keys: &mut RotaryKeys) -> Result<()> {
    for (key, v, why) in [
        ("qkv_proj_bias", raw.qkv_proj_bias, "NomicBERT's attention has no biases (transformers' NomicBertAttention)"),
        ("mlp_fc1_bias", raw.mlp_fc1_bias, "NomicBERT's feed-forward has no biases"),
        ("mlp_fc2_bias", raw.mlp_fc2_bias, "NomicBERT's feed-forward has no biases"),
        ("prenorm", raw.prenorm, "NomicBERT's layers are post-LN"),
        ("use_rms_norm", raw.use_rms_norm, "NomicBERT's norms are LayerNorms"),
        ("causal", raw.causal, "bertgpu runs bidirectional encoders"),
        ("rotary_emb_interleaved", raw.rotary_emb_interleaved, "the rotation pairs dimension i with i + d/2"),
    ] {
        if v == Some(true) {
            return Err(refuse(key, true, why));
        }
    }
    if let Some(f) = raw.rotary_emb_fraction.filter(|f| *f != 1.0) {
        return Err(refuse("rotary_emb_fraction", f, "every dimension of a head is rotated here"));
    }
    if let Some(s) = raw.rotary_scaling_factor.as_ref().filter(|v| !v.is_null()) {
        return Err(refuse("rotary_scaling_factor", s, "bertgpu rotates by the plain rotary embeddings only"));
    }
    if let Some(act) = raw.activation_function.as_deref() {
        keys.hidden_act = Some(match act {
            "swiglu" => "silu",
            "geglu" => "gelu",
            other => return Err(refuse("activation_function", format!("`{other}`"),
                "NomicBERT runs its gated feed-forward (swiglu or geglu)")),
        });
    }
    if let Some(base) = raw.rotary_emb_base {
        keys.theta = base as f32;
    }
    keys.hidden_size = raw.n_embd;
    keys.num_hidden_layers = raw.n_layer;
    keys.num_attention_heads = raw.n_head;
    keys.intermediate_size = raw.n_inner;
    keys.max_position_embeddings = raw.n_positions;
    keys.layer_norm_eps = raw.layer_norm_epsilon;
    // transformers' NomicBert drops the embeddings and the residual branches with one probability.
    if let (Some(e), Some(r)) = (raw.embd_pdrop, raw.resid_pdrop) {
        if e != r {
            return Err(refuse("embd_pdrop", e, &format!("the embeddings' dropout must be resid_pdrop's ({r}), as \
                transformers' NomicBert applies one probability to both")));
        }
    }
    keys.hidden_dropout = raw.resid_pdrop.or(raw.embd_pdrop);
    keys.attention_dropout = raw.attn_pdrop;
    Ok(())
}

/// Alibaba-NLP's hub keys (`model_type: "new"`): its LayerNorm, packed projections and plain attention scale.
fn gte_hub(raw: &Raw) -> Result<()> {
    if let Some(kind) = raw.layer_norm_type.as_deref().filter(|k| *k != "layer_norm") {
        return Err(refuse("layer_norm_type", format!("`{kind}`"), "GTE's norms are LayerNorms here"));
    }
    if raw.logn_attention_scale == Some(true) {
        return Err(refuse("logn_attention_scale", true, "the scores are scaled by 1/√d alone"));
    }
    if raw.pack_qkv == Some(false) {
        return Err(refuse("pack_qkv", false, "GTE's query, key and value are read as one packed `qkv_proj`"));
    }
    Ok(())
}

/// The rotary keys of a NomicBERT or GTE config.json (`text`), from either key set.
pub(super) fn rotary_keys(text: &str, family: Family) -> Result<RotaryKeys> {
    let raw: Raw = serde_json::from_str(text)
        .map_err(|e| Error::Config(format!("config.json is not a valid {} config ({e})", family.model_type())))?;
    // NomicBertConfig's default theta is 1000, GteConfig's 160000 (gte-multilingual-base's).
    let default = if family == Family::NomicBert { 1_000.0 } else { 160_000.0 };
    let mut keys = RotaryKeys { head_dim: raw.head_dim, ..RotaryKeys::default() };
    let (theta, ntk) = theta_of(&raw, default, family)?;
    (keys.theta, keys.ntk_factor) = (theta as f32, ntk);
    match family {
        Family::NomicBert => nomic_hub(&raw, &mut keys)?,
        _ => gte_hub(&raw)?,
    }
    if !(keys.theta.is_finite() && keys.theta > 1.0) {
        return Err(refuse("rope theta", keys.theta, "it must be a finite number above 1"));
    }
    Ok(keys)
}
