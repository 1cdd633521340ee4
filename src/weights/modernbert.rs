//! ModernBERT's tensor names (transformers `modeling_modernbert.py`) ↔ BERT's. Task checkpoints keep the encoder
//! under `model.`, the bare `ModernBertModel` at the root:
//!
//! | BERT | ModernBERT |
//! |---|---|
//! | `embeddings.word_embeddings` | `embeddings.tok_embeddings` |
//! | `embeddings.LayerNorm` | `embeddings.norm` |
//! | `encoder.layer.{i}.attention.LayerNorm` (pre-LN; none at layer 0) | `layers.{i}.attn_norm` |
//! | `…attention.self.qkv` (`[q; k; v]` rows) | `layers.{i}.attn.Wqkv` |
//! | `…attention.output.dense` | `layers.{i}.attn.Wo` |
//! | `…intermediate.LayerNorm` (pre-LN) | `layers.{i}.mlp_norm` |
//! | `…intermediate.up_gate` | `layers.{i}.mlp.Wi` (`[input; gate]`: its halves are swapped at load, `model::layer`) |
//! | `…output.dense` | `layers.{i}.mlp.Wo` |
//! | `encoder.final_norm` | `final_norm` |
//! | `cls.predictions.transform.dense`, `…LayerNorm` | `head.dense`, `head.norm` |
//! | `cls.predictions.decoder`, `cls.predictions.bias` | `decoder`, `decoder.bias` |
//!
//! `…attention.LayerNorm`, `…intermediate.LayerNorm` and `encoder.final_norm` are BERT-side names for what a post-LN
//! BERT does not have; the layer asks for them only when its norms come first (`config::Norms::Pre`). The
//! classifiers read `head` as the masked LM does, under BERT's `cls.predictions.transform` (the one module it is),
//! and `classifier` keeps BERT's name.

use super::rotary::{from_bert_in, to_bert_in, Names};

/// Modules of a layer: BERT's path below `encoder.layer.{i}.` ↔ ModernBERT's below `layers.{i}.`.
const LAYER: [(&str, &str); 6] = [
    ("attention.LayerNorm", "attn_norm"),
    ("attention.self.qkv", "attn.Wqkv"),
    ("attention.output.dense", "attn.Wo"),
    ("intermediate.LayerNorm", "mlp_norm"),
    ("intermediate.up_gate", "mlp.Wi"),
    ("output.dense", "mlp.Wo"),
];

/// Names outside the layers: BERT's full name ↔ ModernBERT's (before the prefix).
const OTHER: [(&str, &str); 8] = [
    ("embeddings.word_embeddings", "embeddings.tok_embeddings"),
    ("embeddings.LayerNorm", "embeddings.norm"),
    ("encoder.final_norm", "final_norm"),
    ("cls.predictions.transform.dense", "head.dense"),
    ("cls.predictions.transform.LayerNorm", "head.norm"),
    ("cls.predictions.decoder", "decoder"),
    // Both BERT names of the MLM bias are this one tensor; the last of equal matches wins going back.
    ("cls.predictions.decoder.bias", "decoder.bias"),
    ("cls.predictions.bias", "decoder.bias"),
];

const NAMES: Names = Names {
    prefixes: &["model."],
    encoder: &["embeddings.", "layers.", "final_norm."],
    layers: "layers.",
    layer: &LAYER,
    other: &OTHER,
};

/// A BERT tensor name (with or without `bert.`) → the names ModernBERT's checkpoints may store it under besides the
/// bare BERT name, most likely first: under `model.`, then at the root.
pub fn from_bert(name: &str) -> Vec<String> {
    from_bert_in(&NAMES, name)
}

/// A ModernBERT tensor name → BERT's (without `bert.`); `classifier` keeps its name.
pub fn to_bert(name: &str) -> String {
    to_bert_in(&NAMES, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the tiny checkpoints tests/golden/modernbert.py saves with transformers map to BERT's and back;
    /// a bare ModernBertModel's too.
    #[test]
    fn names_round_trip() {
        let pairs = [
            ("model.embeddings.tok_embeddings.weight", "embeddings.word_embeddings.weight"),
            ("model.embeddings.norm.weight", "embeddings.LayerNorm.weight"),
            ("model.embeddings.norm.bias", "embeddings.LayerNorm.bias"),
            ("model.layers.1.attn_norm.weight", "encoder.layer.1.attention.LayerNorm.weight"),
            ("model.layers.0.attn.Wqkv.weight", "encoder.layer.0.attention.self.qkv.weight"),
            ("model.layers.3.attn.Wqkv.bias", "encoder.layer.3.attention.self.qkv.bias"),
            ("model.layers.0.attn.Wo.weight", "encoder.layer.0.attention.output.dense.weight"),
            ("model.layers.2.mlp_norm.bias", "encoder.layer.2.intermediate.LayerNorm.bias"),
            ("model.layers.0.mlp.Wi.weight", "encoder.layer.0.intermediate.up_gate.weight"),
            ("model.layers.0.mlp.Wo.bias", "encoder.layer.0.output.dense.bias"),
            ("model.final_norm.weight", "encoder.final_norm.weight"),
            ("head.dense.weight", "cls.predictions.transform.dense.weight"),
            ("head.norm.weight", "cls.predictions.transform.LayerNorm.weight"),
            ("decoder.weight", "cls.predictions.decoder.weight"),
            ("decoder.bias", "cls.predictions.bias"),
        ];
        for (m, b) in pairs {
            assert_eq!(to_bert(m), b, "{m}");
            assert!(from_bert(b).contains(&m.to_string()), "{b}: {:?}", from_bert(b));
            assert!(from_bert(&format!("bert.{b}")).contains(&m.to_string()), "bert.{b}");
            if let Some(bare) = m.strip_prefix("model.") {
                assert_eq!(to_bert(bare), b, "{bare}");
                assert!(from_bert(b).contains(&bare.to_string()), "{b}: {:?}", from_bert(b));
            }
        }
        assert!(from_bert("cls.predictions.decoder.bias").contains(&"decoder.bias".to_string()));
        for n in ["classifier.weight", "classifier.bias"] {
            assert_eq!(to_bert(n), n);
        }
    }
}
