//! DistilBERT's tensor names (transformers `modeling_distilbert.py`) ↔ BERT's. The computation is BERT's post-LN
//! encoder under other names, so the model code asks for BERT names and [`super::Weights`] finds DistilBERT's; the
//! GGUF converter stores DistilBERT's tensors under BERT's names.
//!
//! The encoder lives under `distilbert.` in task checkpoints and at the root in a bare `DistilBertModel`; the heads
//! are at the root: `pre_classifier` (BERT's `bert.pooler.dense`, with ReLU instead of tanh: see
//! `config::Family::pooler_activation`), `vocab_transform` / `vocab_layer_norm` / `vocab_projector` (the MLM head:
//! `cls.predictions.transform.dense` / `.transform.LayerNorm` / `.decoder` and its bias), `classifier`, `qa_outputs`.

/// Modules of one layer: BERT's path below `encoder.layer.N.` ↔ DistilBERT's below `transformer.layer.N.`.
const LAYER: [(&str, &str); 8] = [
    ("attention.self.query", "attention.q_lin"),
    ("attention.self.key", "attention.k_lin"),
    ("attention.self.value", "attention.v_lin"),
    ("attention.output.dense", "attention.out_lin"),
    ("attention.output.LayerNorm", "sa_layer_norm"),
    ("intermediate.dense", "ffn.lin1"),
    ("output.dense", "ffn.lin2"),
    ("output.LayerNorm", "output_layer_norm"),
];

/// Modules outside the layers: BERT's path (without `bert.`) ↔ DistilBERT's (embeddings without `distilbert.`).
const TOP: [(&str, &str); 7] = [
    ("embeddings.word_embeddings", "embeddings.word_embeddings"),
    ("embeddings.position_embeddings", "embeddings.position_embeddings"),
    ("embeddings.LayerNorm", "embeddings.LayerNorm"),
    ("pooler.dense", "pre_classifier"),
    ("cls.predictions.transform.dense", "vocab_transform"),
    ("cls.predictions.transform.LayerNorm", "vocab_layer_norm"),
    ("cls.predictions.decoder", "vocab_projector"),
];

/// Whether a DistilBERT module path belongs to the encoder (stored under `distilbert.` in task checkpoints).
fn in_encoder(distil_module: &str) -> bool {
    distil_module.starts_with("embeddings.") || distil_module.starts_with("transformer.")
}

/// A BERT tensor name (with or without `bert.`) → the names DistilBERT checkpoints store it under, most likely
/// first; empty when DistilBERT has no such tensor (token-type embeddings, the NSP head).
pub fn from_bert(name: &str) -> Vec<String> {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    let Some((module, param)) = name.rsplit_once('.') else { return Vec::new() };
    // BERT's MLM bias is `cls.predictions.bias` (tied to `decoder.bias`); DistilBERT's is `vocab_projector.bias`.
    let module = if name == "cls.predictions.bias" { "cls.predictions.decoder" } else { module };
    let distil = if let Some((_, d)) = TOP.iter().find(|(b, _)| *b == module) {
        d.to_string()
    } else if let Some((n, sub)) = module.strip_prefix("encoder.layer.").and_then(|r| r.split_once('.')) {
        match LAYER.iter().find(|(b, _)| *b == sub) {
            Some((_, d)) if n.parse::<usize>().is_ok() => format!("transformer.layer.{n}.{d}"),
            _ => return Vec::new(),
        }
    } else if ["classifier", "qa_outputs"].contains(&module) {
        module.to_string()
    } else {
        return Vec::new();
    };
    let full = format!("{distil}.{param}");
    if in_encoder(&distil) { vec![format!("distilbert.{full}"), full] } else { vec![full] }
}

/// A DistilBERT tensor name → BERT's (without `bert.`); names it does not know pass through.
pub fn to_bert(name: &str) -> String {
    let bare = name.strip_prefix("distilbert.").unwrap_or(name);
    let Some((module, param)) = bare.rsplit_once('.') else { return name.to_string() };
    if let Some((b, _)) = TOP.iter().find(|(_, d)| *d == module) {
        if *b == "cls.predictions.decoder" && param == "bias" {
            return "cls.predictions.bias".into();
        }
        return format!("{b}.{param}");
    }
    if let Some((n, sub)) = module.strip_prefix("transformer.layer.").and_then(|r| r.split_once('.')) {
        if let Some((b, _)) = LAYER.iter().find(|(_, d)| *d == sub) {
            if n.parse::<usize>().is_ok() {
                return format!("encoder.layer.{n}.{b}.{param}");
            }
        }
    }
    bare.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name of a transformers DistilBertForMaskedLM / ForSequenceClassification state dict maps to BERT's and
    /// back.
    #[test]
    fn names_round_trip() {
        let distil = [
            "distilbert.embeddings.word_embeddings.weight",
            "distilbert.embeddings.position_embeddings.weight",
            "distilbert.embeddings.LayerNorm.bias",
            "distilbert.transformer.layer.0.attention.q_lin.weight",
            "distilbert.transformer.layer.5.attention.out_lin.bias",
            "distilbert.transformer.layer.1.sa_layer_norm.weight",
            "distilbert.transformer.layer.1.ffn.lin1.weight",
            "distilbert.transformer.layer.1.ffn.lin2.bias",
            "distilbert.transformer.layer.11.output_layer_norm.bias",
            "pre_classifier.weight",
            "classifier.bias",
            "qa_outputs.weight",
            "vocab_transform.weight",
            "vocab_layer_norm.bias",
            "vocab_projector.weight",
            "vocab_projector.bias",
        ];
        let bert = [
            "embeddings.word_embeddings.weight",
            "embeddings.position_embeddings.weight",
            "embeddings.LayerNorm.bias",
            "encoder.layer.0.attention.self.query.weight",
            "encoder.layer.5.attention.output.dense.bias",
            "encoder.layer.1.attention.output.LayerNorm.weight",
            "encoder.layer.1.intermediate.dense.weight",
            "encoder.layer.1.output.dense.bias",
            "encoder.layer.11.output.LayerNorm.bias",
            "pooler.dense.weight",
            "classifier.bias",
            "qa_outputs.weight",
            "cls.predictions.transform.dense.weight",
            "cls.predictions.transform.LayerNorm.bias",
            "cls.predictions.decoder.weight",
            "cls.predictions.bias",
        ];
        for (d, b) in distil.iter().zip(bert) {
            assert_eq!(to_bert(d), b, "{d}");
            assert_eq!(from_bert(b)[0], *d, "{b}");
            assert_eq!(from_bert(&format!("bert.{b}"))[0], *d, "bert.{b}");
        }
        // A bare DistilBertModel stores the encoder without the prefix.
        assert_eq!(from_bert("encoder.layer.0.output.dense.weight")[1], "transformer.layer.0.ffn.lin2.weight");
        assert_eq!(to_bert("transformer.layer.0.ffn.lin2.weight"), "encoder.layer.0.output.dense.weight");
        assert_eq!(from_bert("cls.predictions.decoder.bias")[0], "vocab_projector.bias");
        assert!(from_bert("embeddings.token_type_embeddings.weight").is_empty());
        assert!(from_bert("cls.seq_relationship.weight").is_empty());
        assert!(from_bert("encoder.layer.x.output.dense.weight").is_empty());
    }
}
