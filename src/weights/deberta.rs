//! DeBERTa-v2/v3's tensor names (transformers `modeling_deberta_v2.py`) ↔ BERT's. The encoder is BERT's under
//! `deberta.` (or at the root, a bare `DebertaV2Model`), but each layer's projections are
//! `attention.self.{query,key,value}_proj` where BERT has `attention.self.{query,key,value}`; the rest of a layer
//! keeps BERT's names. `encoder.rel_embeddings` (the relative table) and `encoder.LayerNorm` (its LayerNorm) have no
//! BERT twin and keep their names under `deberta.`. The `ContextPooler` is `pooler.dense` at the root, which BERT's
//! lookup of `bert.pooler.dense` already tries; `classifier` and `qa_outputs` are BERT's. The masked-LM head is
//! BERT's `cls.predictions.*` as stored (`legacy: true`), or `lm_predictions.lm_head.{dense, LayerNorm, bias}` with
//! the word embeddings as its decoder (`legacy: false`, DeBERTa-v3's released checkpoints).

/// The prefix, and the masked-LM head of `legacy: false`.
const NAMES: super::RenamedBert = super::RenamedBert {
    prefix: "deberta.",
    prefixed: &["embeddings.", "encoder."],
    lm_head: [
        ("cls.predictions.transform.dense", "lm_predictions.lm_head.dense"),
        ("cls.predictions.transform.LayerNorm", "lm_predictions.lm_head.LayerNorm"),
        // Tied to the word embeddings, never stored: BERT's own fallback finds them.
        ("cls.predictions.decoder", "cls.predictions.decoder"),
    ],
    mlm_bias: &["lm_predictions.lm_head.bias"],
};

/// A layer's projections: BERT's module name ↔ DeBERTa's.
const LAYER: [(&str, &str); 3] =
    [("attention.self.query", "attention.self.query_proj"), ("attention.self.key", "attention.self.key_proj"),
        ("attention.self.value", "attention.self.value_proj")];

/// `encoder.layer.{i}.{module}.{param}` with `module` renamed (BERT → DeBERTa or back); other names as they are.
fn rename_layer(name: &str, to_deberta: bool) -> String {
    super::rename_layer(name, &LAYER, to_deberta)
}

/// A BERT tensor name (with or without `bert.`) → the names DeBERTa checkpoints may store it under besides the bare
/// BERT name, most likely first: under `deberta.`, then at the root, with the layer's projections renamed.
pub fn from_bert(name: &str) -> Vec<String> {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    let renamed = rename_layer(name, true);
    let mut out = NAMES.from_bert(&renamed);
    if renamed != name {
        out.push(renamed);
    }
    out
}

/// A DeBERTa tensor name → BERT's (without `bert.`); the relative table, its LayerNorm and the heads keep theirs.
pub fn to_bert(name: &str) -> String {
    rename_layer(&NAMES.to_bert(name), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name of transformers' DebertaV2ForMaskedLM (legacy: false) state dict maps to BERT's and back.
    #[test]
    fn names_round_trip() {
        let pairs = [
            ("deberta.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
            ("deberta.embeddings.LayerNorm.bias", "embeddings.LayerNorm.bias"),
            ("deberta.encoder.layer.0.attention.self.query_proj.weight", "encoder.layer.0.attention.self.query.weight"),
            ("deberta.encoder.layer.1.attention.self.key_proj.bias", "encoder.layer.1.attention.self.key.bias"),
            ("deberta.encoder.layer.11.attention.self.value_proj.weight", "encoder.layer.11.attention.self.value.weight"),
            ("deberta.encoder.layer.0.attention.output.dense.weight", "encoder.layer.0.attention.output.dense.weight"),
            ("deberta.encoder.layer.2.output.LayerNorm.bias", "encoder.layer.2.output.LayerNorm.bias"),
            ("deberta.encoder.rel_embeddings.weight", "encoder.rel_embeddings.weight"),
            ("deberta.encoder.LayerNorm.weight", "encoder.LayerNorm.weight"),
            ("lm_predictions.lm_head.dense.weight", "cls.predictions.transform.dense.weight"),
            ("lm_predictions.lm_head.LayerNorm.bias", "cls.predictions.transform.LayerNorm.bias"),
            ("lm_predictions.lm_head.bias", "cls.predictions.bias"),
        ];
        for (d, b) in pairs {
            assert_eq!(to_bert(d), b, "{d}");
            assert_eq!(from_bert(b)[0], d, "{b}");
            assert_eq!(from_bert(&format!("bert.{b}"))[0], d, "bert.{b}");
        }
        for n in ["pooler.dense.weight", "classifier.weight", "qa_outputs.bias"] {
            assert_eq!(to_bert(n), n);
        }
    }
}
