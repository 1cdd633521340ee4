//! ALBERT's tensor names (transformers `modeling_albert.py`) ↔ BERT's. The embeddings are BERT's under `albert.`
//! (of width `embedding_size` E); the encoder is `albert.encoder.embedding_hidden_mapping_in` (E → H, asked for as
//! `embeddings_project`, ELECTRA's name for the same projection) and ONE layer,
//! `albert.encoder.albert_layer_groups.0.albert_layers.0.*`, that every pass shares: it is BERT's
//! `encoder.layer.0.*` (bertgpu supports one group of one layer, as every released ALBERT; `config.rs` refuses
//! others). A bare `AlbertModel` stores the same names without `albert.`.
//!
//! Heads: the pooler is a plain linear `albert.pooler` (BERT's `pooler.dense`), the masked LM `predictions.{dense,
//! LayerNorm, decoder, bias}` (BERT's `cls.predictions.{transform.dense, transform.LayerNorm, decoder, bias}`, the
//! decoder tied to the word embeddings), `classifier` and `qa_outputs` as BERT's. The sentence-order head
//! `sop_classifier` is not read.

/// Modules of the shared layer: BERT's path below `encoder.layer.0.` ↔ ALBERT's below
/// `encoder.albert_layer_groups.0.albert_layers.0.`.
const LAYER: [(&str, &str); 8] = [
    ("attention.self.query", "attention.query"),
    ("attention.self.key", "attention.key"),
    ("attention.self.value", "attention.value"),
    ("attention.output.dense", "attention.dense"),
    ("attention.output.LayerNorm", "attention.LayerNorm"),
    ("intermediate.dense", "ffn"),
    ("output.dense", "ffn_output"),
    ("output.LayerNorm", "full_layer_layer_norm"),
];

/// The path of the shared layer.
const SHARED: &str = "encoder.albert_layer_groups.0.albert_layers.0";

/// Modules outside the layer: BERT's path (without `bert.`) ↔ ALBERT's (without `albert.`).
const TOP: [(&str, &str); 5] = [
    ("embeddings_project", "encoder.embedding_hidden_mapping_in"),
    ("pooler.dense", "pooler"),
    ("cls.predictions.transform.dense", "predictions.dense"),
    ("cls.predictions.transform.LayerNorm", "predictions.LayerNorm"),
    ("cls.predictions.decoder", "predictions.decoder"),
];

/// Whether an ALBERT module path belongs to the base model (stored under `albert.` in task checkpoints).
fn in_base(albert_module: &str) -> bool {
    albert_module.starts_with("embeddings") || albert_module.starts_with("encoder.") || albert_module == "pooler"
}

/// A BERT tensor name (with or without `bert.`) → the names ALBERT checkpoints may store it under, most likely
/// first; empty when ALBERT has no such tensor (layers other than the shared one, the NSP head).
pub fn from_bert(name: &str) -> Vec<String> {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    // `predictions.bias` is the MLM bias, tied to `predictions.decoder.bias`; files hold either or both.
    if name == "cls.predictions.bias" || name == "cls.predictions.decoder.bias" {
        return vec!["predictions.bias".into(), "predictions.decoder.bias".into()];
    }
    let Some((module, param)) = name.rsplit_once('.') else { return Vec::new() };
    let albert = if module.starts_with("embeddings.") {
        module.to_string()
    } else if let Some((_, a)) = TOP.iter().find(|(b, _)| *b == module) {
        a.to_string()
    } else if let Some(sub) = module.strip_prefix("encoder.layer.0.") {
        match LAYER.iter().find(|(b, _)| *b == sub) {
            Some((_, a)) => format!("{SHARED}.{a}"),
            None => return Vec::new(),
        }
    } else {
        return Vec::new();
    };
    let full = format!("{albert}.{param}");
    if in_base(&albert) { vec![format!("albert.{full}"), full] } else { vec![full] }
}

/// An ALBERT tensor name → BERT's (without `bert.`), for storing a checkpoint under BERT's names: the shared layer
/// becomes `encoder.layer.0`. `encoder.embedding_hidden_mapping_in` keeps its ALBERT name (without `albert.`), as
/// do the heads without a BERT twin (`classifier`, `qa_outputs`, `sop_classifier`).
pub fn to_bert(name: &str) -> String {
    let bare = name.strip_prefix("albert.").unwrap_or(name);
    if bare == "predictions.bias" || bare == "predictions.decoder.bias" {
        return "cls.predictions.bias".into();
    }
    let Some((module, param)) = bare.rsplit_once('.') else { return bare.to_string() };
    if let Some(sub) = module.strip_prefix(SHARED).and_then(|r| r.strip_prefix('.')) {
        if let Some((b, _)) = LAYER.iter().find(|(_, a)| *a == sub) {
            return format!("encoder.layer.0.{b}.{param}");
        }
    }
    match TOP.iter().find(|(_, a)| *a == module) {
        Some((b, _)) if *b != "embeddings_project" => format!("{b}.{param}"),
        _ => bare.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name of transformers' AlbertForMaskedLM / AlbertForSequenceClassification state dicts maps to BERT's
    /// and back.
    #[test]
    fn names_round_trip() {
        let pairs = [
            ("albert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
            ("albert.embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight"),
            ("albert.embeddings.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight"),
            ("albert.embeddings.LayerNorm.bias", "embeddings.LayerNorm.bias"),
            ("albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight",
                "encoder.layer.0.attention.self.query.weight"),
            ("albert.encoder.albert_layer_groups.0.albert_layers.0.attention.dense.bias",
                "encoder.layer.0.attention.output.dense.bias"),
            ("albert.encoder.albert_layer_groups.0.albert_layers.0.attention.LayerNorm.weight",
                "encoder.layer.0.attention.output.LayerNorm.weight"),
            ("albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight", "encoder.layer.0.intermediate.dense.weight"),
            ("albert.encoder.albert_layer_groups.0.albert_layers.0.ffn_output.bias", "encoder.layer.0.output.dense.bias"),
            ("albert.encoder.albert_layer_groups.0.albert_layers.0.full_layer_layer_norm.weight",
                "encoder.layer.0.output.LayerNorm.weight"),
            ("albert.pooler.weight", "pooler.dense.weight"),
            ("predictions.dense.weight", "cls.predictions.transform.dense.weight"),
            ("predictions.LayerNorm.bias", "cls.predictions.transform.LayerNorm.bias"),
            ("predictions.decoder.weight", "cls.predictions.decoder.weight"),
            ("predictions.bias", "cls.predictions.bias"),
        ];
        for (a, b) in pairs {
            assert_eq!(to_bert(a), b, "{a}");
            assert_eq!(from_bert(b)[0], a, "{b}");
            assert_eq!(from_bert(&format!("bert.{b}"))[0], a, "bert.{b}");
        }
        // The projection keeps ALBERT's name in a GGUF, and is found under it and ELECTRA's.
        let mapping = "albert.encoder.embedding_hidden_mapping_in.weight";
        assert_eq!(to_bert(mapping), "encoder.embedding_hidden_mapping_in.weight");
        assert_eq!(from_bert("embeddings_project.weight"), [mapping, "encoder.embedding_hidden_mapping_in.weight"]);
        // A bare AlbertModel stores the base model without `albert.`.
        assert_eq!(from_bert("encoder.layer.0.output.dense.weight")[1],
            "encoder.albert_layer_groups.0.albert_layers.0.ffn_output.weight");
        assert_eq!(to_bert("encoder.albert_layer_groups.0.albert_layers.0.ffn_output.weight"), "encoder.layer.0.output.dense.weight");
        // Only the shared layer exists; the sentence-order head and BERT's NSP head have no twin.
        assert!(from_bert("encoder.layer.1.output.dense.weight").is_empty());
        assert!(from_bert("cls.seq_relationship.weight").is_empty());
        for n in ["classifier.weight", "qa_outputs.bias", "sop_classifier.classifier.weight"] {
            assert_eq!(to_bert(n), n);
        }
    }
}
