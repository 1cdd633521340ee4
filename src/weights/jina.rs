//! JinaBERT v2's tensor names (jinaai/jina-bert-implementation's `modeling_bert.py`) ↔ BERT's. Everything is BERT's
//! (`bert.` in task checkpoints, the root in a bare `JinaBertModel`; `cls.predictions`, `pooler`, `classifier`)
//! except each layer's feed-forward, `JinaBertGLUMLP`:
//!
//! | BERT | JinaBERT |
//! |---|---|
//! | `encoder.layer.{i}.intermediate.up_gate` (`(2I, H)`, no bias) | `encoder.layer.{i}.mlp.gated_layers` (`[gated; non_gated]`: its halves are swapped at load, `model::layer`) |
//! | `…output.dense` | `…mlp.wo` |
//! | `…output.LayerNorm` | `…mlp.layernorm` |
//!
//! There is no position table. The qk-post-norm variant (jina-embeddings-v2-base-code's
//! `jinaai/jina-bert-v2-qk-post-norm`: `attention.self.layer_norm_q`/`layer_norm_k`, `mlp.up_gated_layer`,
//! `mlp.down_layer`) computes otherwise and is refused by its tensors' names ([`check`]).

use super::Weights;
use crate::{Error, Result};

/// Modules of a layer: BERT's path below `encoder.layer.{i}.` ↔ JinaBERT's.
const LAYER: [(&str, &str); 3] = [
    ("intermediate.up_gate", "mlp.gated_layers"),
    ("output.dense", "mlp.wo"),
    ("output.LayerNorm", "mlp.layernorm"),
];

/// The qk-post-norm variant's own modules, each refused by name.
const QK_POST_NORM: [&str; 4] = ["attention.self.layer_norm_q", "attention.self.layer_norm_k", "mlp.up_gated_layer",
    "mlp.down_layer"];

/// A BERT tensor name (with or without `bert.`) → the names JinaBERT checkpoints may store it under besides the bare
/// BERT name, most likely first: under `bert.`, then at the root, with the feed-forward's names renamed.
pub fn from_bert(name: &str) -> Vec<String> {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    let renamed = super::rename_layer(name, &LAYER, true);
    if renamed == name {
        return Vec::new();
    }
    vec![format!("bert.{renamed}"), renamed]
}

/// A JinaBERT tensor name → BERT's (without `bert.`); heads keep their names.
pub fn to_bert(name: &str) -> String {
    super::rename_layer(name.strip_prefix("bert.").unwrap_or(name), &LAYER, false)
}

/// Refuses the qk-post-norm variant's checkpoints by the name of the first of its tensors found.
pub fn check(w: &Weights) -> Result<()> {
    let found = w.names().into_iter().find(|n| QK_POST_NORM.iter().any(|m| n.contains(&format!(".{m}."))));
    match found {
        Some(n) => Err(Error::Weights(format!(
            "tensor `{n}` is JinaBERT's qk-post-norm variant (jinaai/jina-bert-v2-qk-post-norm, as \
             jina-embeddings-v2-base-code), which normalises the queries and keys and has its own feed-forward; \
             bertgpu runs JinaBERT v2 as jina-bert-implementation defines it (`mlp.gated_layers`, `mlp.wo`)"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name of the layers of a JinaBertForMaskedLM's state dict maps to BERT's and back; a bare model's too.
    #[test]
    fn names_round_trip() {
        let pairs = [
            ("bert.encoder.layer.0.mlp.gated_layers.weight", "encoder.layer.0.intermediate.up_gate.weight"),
            ("bert.encoder.layer.11.mlp.wo.weight", "encoder.layer.11.output.dense.weight"),
            ("bert.encoder.layer.2.mlp.wo.bias", "encoder.layer.2.output.dense.bias"),
            ("bert.encoder.layer.3.mlp.layernorm.weight", "encoder.layer.3.output.LayerNorm.weight"),
            ("bert.encoder.layer.3.mlp.layernorm.bias", "encoder.layer.3.output.LayerNorm.bias"),
        ];
        for (j, b) in pairs {
            assert_eq!(to_bert(j), b, "{j}");
            assert_eq!(from_bert(b)[0], j, "{b}");
            assert_eq!(from_bert(&format!("bert.{b}"))[0], j, "bert.{b}");
            let bare = j.strip_prefix("bert.").unwrap();
            assert_eq!(to_bert(bare), b);
            assert!(from_bert(b).contains(&bare.to_string()));
        }
        for n in ["encoder.layer.0.attention.self.query.weight", "embeddings.word_embeddings.weight", "pooler.dense.bias"] {
            assert_eq!(to_bert(n), n);
            assert!(from_bert(n).is_empty(), "{n}: BERT's own name already");
        }
        assert_eq!(to_bert("cls.predictions.bias"), "cls.predictions.bias");
    }

    #[test]
    fn refuses_the_qk_post_norm_variant() {
        let t = || crate::weights::HostTensor::f32(vec![1], vec![0.0]).unwrap();
        let ok: Weights = [("bert.encoder.layer.0.mlp.gated_layers.weight".to_string(), t())].into_iter().collect();
        assert!(check(&ok).is_ok());
        for n in ["encoder.layer.0.attention.self.layer_norm_q.weight", "bert.encoder.layer.1.mlp.up_gated_layer.weight"] {
            let w: Weights = [(n.to_string(), t())].into_iter().collect();
            let e = check(&w).unwrap_err().to_string();
            assert!(e.contains(n) && e.contains("qk-post-norm"), "{e}");
        }
    }
}
