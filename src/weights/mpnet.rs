//! MPNet's tensor names (transformers `modeling_mpnet.py`) ↔ BERT's. The encoder is BERT's under `mpnet.` (task
//! checkpoints) or at the root (`MPNetModel`: all-mpnet-base-v2), but each layer's attention is `attention.attn.{q,
//! k, v, o}` and `attention.LayerNorm` where BERT has `attention.self.{query, key, value}` and `attention.output.
//! {dense, LayerNorm}`; the feed-forward keeps BERT's names. The relative position bias
//! `encoder.relative_attention_bias.weight` `(32, heads)` has no BERT twin and keeps its name. There are no token-type
//! embeddings. The masked-LM head is RoBERTa's `lm_head` (see `super::roberta`), and the sequence classifier
//! RoBERTa's `classifier.dense` + tanh + `classifier.out_proj` (read under its own names by `heads::classifier`).

/// The prefix, and the masked-LM head as RoBERTa's: `NAMES` maps what is not inside a layer.
const NAMES: super::RenamedBert = super::RenamedBert {
    prefix: "mpnet.",
    prefixed: &["embeddings.", "encoder.", "pooler."],
    lm_head: super::roberta::NAMES.lm_head,
    mlm_bias: super::roberta::NAMES.mlm_bias,
};

/// Modules of a layer: BERT's path below `encoder.layer.{i}.` ↔ MPNet's.
const LAYER: [(&str, &str); 5] = [
    ("attention.self.query", "attention.attn.q"),
    ("attention.self.key", "attention.attn.k"),
    ("attention.self.value", "attention.attn.v"),
    ("attention.output.dense", "attention.attn.o"),
    ("attention.output.LayerNorm", "attention.LayerNorm"),
];

/// `encoder.layer.{i}.{module}.{param}` with `module` renamed (BERT → MPNet or back); other names as they are.
fn rename_layer(name: &str, to_mpnet: bool) -> String {
    super::rename_layer(name, &LAYER, to_mpnet)
}

/// A BERT tensor name (with or without `bert.`) → the names MPNet checkpoints may store it under besides the bare BERT
/// name, most likely first: under `mpnet.`, then at the root (a bare `MPNetModel`), with the layer's names renamed.
pub fn from_bert(name: &str) -> Vec<String> {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    let renamed = rename_layer(name, true);
    let mut out = NAMES.from_bert(&renamed);
    if renamed != name {
        out.push(renamed);
    }
    out
}

/// An MPNet tensor name → BERT's (without `bert.`); the relative bias and the classification heads keep their names.
pub fn to_bert(name: &str) -> String {
    rename_layer(&NAMES.to_bert(name), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name of transformers' MPNetForMaskedLM state dict maps to BERT's and back; a bare MPNetModel's too.
    #[test]
    fn names_round_trip() {
        let pairs = [
            ("mpnet.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
            ("mpnet.embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight"),
            ("mpnet.embeddings.LayerNorm.bias", "embeddings.LayerNorm.bias"),
            ("mpnet.encoder.layer.0.attention.attn.q.weight", "encoder.layer.0.attention.self.query.weight"),
            ("mpnet.encoder.layer.3.attention.attn.k.bias", "encoder.layer.3.attention.self.key.bias"),
            ("mpnet.encoder.layer.11.attention.attn.v.weight", "encoder.layer.11.attention.self.value.weight"),
            ("mpnet.encoder.layer.0.attention.attn.o.weight", "encoder.layer.0.attention.output.dense.weight"),
            ("mpnet.encoder.layer.0.attention.LayerNorm.weight", "encoder.layer.0.attention.output.LayerNorm.weight"),
            ("mpnet.encoder.layer.2.intermediate.dense.weight", "encoder.layer.2.intermediate.dense.weight"),
            ("mpnet.encoder.layer.2.output.LayerNorm.bias", "encoder.layer.2.output.LayerNorm.bias"),
            ("mpnet.encoder.relative_attention_bias.weight", "encoder.relative_attention_bias.weight"),
            ("mpnet.pooler.dense.weight", "pooler.dense.weight"),
            ("lm_head.dense.weight", "cls.predictions.transform.dense.weight"),
            ("lm_head.layer_norm.bias", "cls.predictions.transform.LayerNorm.bias"),
            ("lm_head.decoder.weight", "cls.predictions.decoder.weight"),
            ("lm_head.bias", "cls.predictions.bias"),
        ];
        for (m, b) in pairs {
            assert_eq!(to_bert(m), b, "{m}");
            assert_eq!(from_bert(b)[0], m, "{b}");
            assert_eq!(from_bert(&format!("bert.{b}"))[0], m, "bert.{b}");
            // A bare MPNetModel (sentence-transformers' all-mpnet-base-v2) stores the encoder at the root.
            if let Some(bare) = m.strip_prefix("mpnet.") {
                assert_eq!(to_bert(bare), b, "{bare}");
                assert!(b == bare || from_bert(b).contains(&bare.to_string()), "{b}: {:?}", from_bert(b));
            }
        }
        for n in ["classifier.dense.weight", "classifier.out_proj.bias", "classifier.weight", "qa_outputs.weight"] {
            assert_eq!(to_bert(n), n);
        }
        assert!(from_bert("cls.seq_relationship.weight").is_empty());
        assert!(from_bert("embeddings.token_type_embeddings.weight").iter().all(|n| !n.contains("attn")));
    }
}
