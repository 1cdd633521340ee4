//! DeBERTa-v2's and DeBERTa-v3's choices (transformers `models/deberta_v2/configuration_deberta_v2.py`), read from
//! config.json beside BERT's fields: what bertgpu runs of them, and every other value refused by the key's name.
//!
//! What runs: post-LN layers as BERT's; absolute positions or none (`position_biased_input`); a token-type table or
//! none (`type_vocab_size` 0); the disentangled attention (`relative_attention`: `pos_att_type` both `c2p` and `p2c`,
//! `share_att_key: true`) over the relative table `encoder.rel_embeddings`, optionally LayerNorm'd
//! (`norm_rel_ebd: "layer_norm"`), its offsets bucketed logarithmically (`position_buckets` > 0) or not; the
//! `ContextPooler` (`pooler.dense` + `pooler_hidden_act`). Refused: the convolution after the first layer
//! (`conv_kernel_size` > 0, DeBERTa-v2-xlarge's), separate position projections (`share_att_key: false`), one of
//! `c2p` / `p2c` alone or `p2p`, an embedding width other than the hidden size (`embed_proj`).

use serde_json::Value;

use crate::activation::Activation;
use crate::{Error, Result};

/// The DeBERTa part of [`super::BertConfig`].
#[derive(Clone, Debug, PartialEq)]
pub struct DebertaV2 {
    /// `position_biased_input` (transformers' default true): absolute position embeddings added to the words.
    pub position_biased_input: bool,
    /// `type_vocab_size` > 0: a token-type table (DeBERTa-v3 has none: every type id is ignored).
    pub token_types: bool,
    /// The disentangled attention, when `relative_attention` is true.
    pub relative: Option<Relative>,
    /// `pooler_hidden_act` of the `ContextPooler` (transformers' default `gelu`, the exact one).
    pub pooler_hidden_act: Activation,
    /// `pooler_dropout` (default 0): the `ContextPooler`'s dropout of the first token before its dense layer.
    pub pooler_dropout: f32,
    /// `cls_dropout`: the sequence classifier's dropout of the pooled vector (`None`: `hidden_dropout_prob`).
    pub cls_dropout: Option<f32>,
}

/// The relative positions of the disentangled attention.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Relative {
    /// `position_buckets` (DeBERTa-v3: 256); 0 when not bucketed (≤ 0 in config.json).
    pub buckets: usize,
    /// `max_relative_positions`, `max_position_embeddings` where config.json says < 1.
    pub max_relative_positions: usize,
    /// `att_span`: `position_buckets` when bucketed, else `max_relative_positions`; `encoder.rel_embeddings` has
    /// 2·span rows.
    pub span: usize,
    /// `norm_rel_ebd` holds `layer_norm`: the table goes through `encoder.LayerNorm` first.
    pub layer_norm: bool,
}

impl Relative {
    /// transformers' `make_log_bucket_position` of one offset `rel` = i − j (query minus key) when bucketed, else
    /// `rel` itself: offsets with |rel| ≤ buckets/2 keep their value, larger ones share logarithmic buckets up to
    /// `max_relative_positions`, sign kept. In f32 as PyTorch computes it (`ceil` of an f32 quotient).
    pub fn bucket(&self, rel: i64) -> i64 {
        if self.buckets == 0 {
            return rel;
        }
        let mid = (self.buckets / 2) as i64;
        let abs = if rel < mid && rel > -mid { mid - 1 } else { rel.abs() };
        if abs <= mid {
            return rel;
        }
        let ratio = ((self.max_relative_positions - 1) as f64 / mid as f64) as f32;
        let log_pos = ((abs as f32 / mid as f32).ln() / ratio.ln() * (mid - 1) as f32).ceil() + mid as f32;
        log_pos as i64 * rel.signum()
    }

    /// The row of the (2·span)-row relative table that the scores of query i and key j read, both `c2p` (from the
    /// query's content) and `p2c` (from the key's): `clamp(bucket(i − j) + span, 0, 2·span − 1)`. (transformers'
    /// `p2c_pos` is `clamp(−bucket(j − i) + span)`, the same row: the buckets are odd in the offset.)
    pub fn row(&self, i_minus_j: i64) -> usize {
        (self.bucket(i_minus_j) + self.span as i64).clamp(0, 2 * self.span as i64 - 1) as usize
    }
}

/// The keys' values or their defaults as `DebertaV2Config` has them.
fn int(v: &Value, key: &str, default: i64) -> Result<i64> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x.as_i64().ok_or_else(|| Error::Config(format!("config.json's `{key}` {x} is not an integer"))),
    }
}

fn float(v: &Value, key: &str) -> Result<Option<f32>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x.as_f64().map(|f| Some(f as f32))
            .ok_or_else(|| Error::Config(format!("config.json's `{key}` {x} is not a number"))),
    }
}

fn boolean(v: &Value, key: &str, default: bool) -> Result<bool> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(x) => x.as_bool().ok_or_else(|| Error::Config(format!("config.json's `{key}` {x} is not true or false"))),
    }
}

/// `pos_att_type` as `DebertaV2Config.__post_init__` reads it: a list, or a string split at `|`, lowercased.
fn pos_att_type(v: &Value) -> Result<Vec<String>> {
    Ok(match v.get("pos_att_type") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s.to_lowercase().split('|').map(|x| x.trim().to_string()).collect(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Config(format!("config.json's `pos_att_type` {a:?} is not a list of names")))?,
        Some(x) => return Err(Error::Config(format!("config.json's `pos_att_type` {x} is not a list of names"))),
    })
}

/// Reads and checks DeBERTa's keys of `config.json` (`v`); `hidden_size`, `max_position_embeddings` and
/// `num_attention_heads` as [`super::BertConfig`] read them.
pub fn parse(v: &Value, hidden_size: usize, heads: usize, max_position_embeddings: usize) -> Result<DebertaV2> {
    let refuse = |what: String| Err(Error::Config(format!("{what} is not supported in a DeBERTa-v2 checkpoint")));
    let conv = int(v, "conv_kernel_size", 0)?;
    if conv > 0 {
        return refuse(format!("`conv_kernel_size` {conv} (the convolution after the first layer, DeBERTa-v2-xlarge's)"));
    }
    if let Some(e) = v.get("embedding_size").and_then(Value::as_u64) {
        if e as usize != hidden_size {
            return refuse(format!("`embedding_size` {e} unlike hidden_size {hidden_size} (the `embed_proj` projection)"));
        }
    }
    if let Some(d) = v.get("attention_head_size").and_then(Value::as_u64) {
        if heads == 0 || d as usize * heads != hidden_size {
            return refuse(format!("`attention_head_size` {d} unlike hidden_size / num_attention_heads"));
        }
    }
    let types = pos_att_type(v)?;
    if let Some(t) = types.iter().find(|t| !matches!(t.as_str(), "c2p" | "p2c")) {
        return refuse(format!("`pos_att_type` entry `{t}` (bertgpu runs `c2p` and `p2c` together)"));
    }
    let relative_attention = boolean(v, "relative_attention", false)?;
    let both = types.iter().any(|t| t == "c2p") && types.iter().any(|t| t == "p2c");
    if relative_attention && !both {
        return refuse(format!("`pos_att_type` {types:?} (bertgpu runs `c2p` and `p2c` together, as every released DeBERTa)"));
    }
    if !relative_attention && !types.is_empty() {
        // The scores would be scaled by 1/√(d·(1 + |pos_att_type|)) with no relative term: not a released shape.
        return refuse(format!("`pos_att_type` {types:?} with `relative_attention` false"));
    }
    let relative = if relative_attention {
        if !boolean(v, "share_att_key", false)? {
            return refuse("`share_att_key` false (separate `pos_key_proj` / `pos_query_proj`)".into());
        }
        let norm = v.get("norm_rel_ebd").and_then(Value::as_str).unwrap_or("none").to_lowercase();
        let norms: Vec<&str> = norm.split('|').map(str::trim).collect();
        if let Some(n) = norms.iter().find(|n| !matches!(**n, "layer_norm" | "none")) {
            return refuse(format!("`norm_rel_ebd` `{n}` (only `layer_norm` or `none`)"));
        }
        let max_rel = int(v, "max_relative_positions", -1)?;
        let max_relative_positions = if max_rel < 1 { max_position_embeddings } else { max_rel as usize };
        let buckets = int(v, "position_buckets", -1)?.max(0) as usize;
        if buckets == 1 || (buckets > 0 && max_relative_positions <= buckets / 2 + 1) {
            return refuse(format!(
                "`position_buckets` {buckets} with `max_relative_positions` {max_relative_positions} (the logarithmic \
                 buckets need position_buckets ≥ 2 and max_relative_positions > position_buckets / 2 + 1)"
            ));
        }
        let span = if buckets > 0 { buckets } else { max_relative_positions };
        Some(Relative { buckets, max_relative_positions, span, layer_norm: norms.contains(&"layer_norm") })
    } else {
        None
    };
    let pooler = v.get("pooler_hidden_size").and_then(Value::as_u64).unwrap_or(hidden_size as u64);
    if pooler as usize != hidden_size {
        return refuse(format!("`pooler_hidden_size` {pooler} unlike hidden_size {hidden_size}"));
    }
    Ok(DebertaV2 {
        position_biased_input: boolean(v, "position_biased_input", true)?,
        token_types: int(v, "type_vocab_size", 2)? > 0,
        relative,
        pooler_hidden_act: Activation::from_hf(v.get("pooler_hidden_act").and_then(Value::as_str).unwrap_or("gelu"))?,
        pooler_dropout: float(v, "pooler_dropout")?.unwrap_or(0.0),
        cls_dropout: float(v, "cls_dropout")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// transformers' `make_log_bucket_position(rel, 256, 512)` at the edges of its ranges (printed by PyTorch; every
    /// offset −300..300 is in tests/golden/deberta.json, checked by tests/deberta.rs).
    #[test]
    fn v3_buckets() {
        let r = Relative { buckets: 256, max_relative_positions: 512, span: 256, layer_norm: true };
        for (rel, b) in [(0, 0), (1, 1), (-1, -1), (128, 128), (-128, -128), (129, 129), (200, 169), (300, 207), (-300, -207)] {
            assert_eq!(r.bucket(rel), b, "offset {rel}");
        }
        assert_eq!(r.row(0), 256);
        assert_eq!(r.row(-100000), 0);
    }
}
