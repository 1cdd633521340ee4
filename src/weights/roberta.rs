//! RoBERTa's and XLM-R's tensor names (transformers `modeling_roberta.py`, `modeling_xlm_roberta.py`) ↔ BERT's. The
//! encoder is BERT's under `roberta.` (task checkpoints) or at the root (`RobertaModel`, `XLMRobertaModel`: the
//! multilingual-e5 and bge-m3 checkpoints), with BERT's sub-names; the model code asks for BERT names and
//! [`super::Weights`] finds these too. The masked-LM head `lm_head.{dense, layer_norm, decoder, bias}` is BERT's
//! `cls.predictions.{transform.dense, transform.LayerNorm, decoder, bias}`.
//!
//! Not mapped, on purpose: RoBERTa's sequence-classification head is `classifier.dense` + tanh +
//! `classifier.out_proj` on the `<s>` token (no pooler), while its token-classification head is `classifier` itself.
//! Mapping BERT's `classifier.weight` to `classifier.out_proj.weight` would let a token classifier be built from a
//! sequence classifier's weights, so `heads::classifier` reads RoBERTa's head under its own names instead.

/// RoBERTa's names: the encoder and pooler under `roberta.`; the masked-LM head `lm_head`, whose bias
/// (`lm_head.bias`, tied to `lm_head.decoder.bias`: files hold either or both) is BERT's `cls.predictions.bias`.
/// `NAMES.to_bert` passes the classification heads (`classifier.dense`, `classifier.out_proj`, `classifier`,
/// `qa_outputs`) through; `NAMES.from_bert` is empty for the NSP head and BERT's classifier names.
pub(super) const NAMES: super::RenamedBert = super::RenamedBert {
    prefix: "roberta.",
    prefixed: &["embeddings.", "encoder.", "pooler."],
    lm_head: [
        ("cls.predictions.transform.dense", "lm_head.dense"),
        ("cls.predictions.transform.LayerNorm", "lm_head.layer_norm"),
        ("cls.predictions.decoder", "lm_head.decoder"),
    ],
    mlm_bias: &["lm_head.bias", "lm_head.decoder.bias"],
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name of a transformers RobertaForMaskedLM state dict maps to BERT's and back.
    #[test]
    fn names_round_trip() {
        let pairs = [
            ("roberta.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
            ("roberta.embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight"),
            ("roberta.embeddings.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight"),
            ("roberta.embeddings.LayerNorm.bias", "embeddings.LayerNorm.bias"),
            ("roberta.encoder.layer.0.attention.self.query.weight", "encoder.layer.0.attention.self.query.weight"),
            ("roberta.encoder.layer.11.output.LayerNorm.weight", "encoder.layer.11.output.LayerNorm.weight"),
            ("roberta.pooler.dense.weight", "pooler.dense.weight"),
            ("lm_head.dense.weight", "cls.predictions.transform.dense.weight"),
            ("lm_head.layer_norm.bias", "cls.predictions.transform.LayerNorm.bias"),
            ("lm_head.decoder.weight", "cls.predictions.decoder.weight"),
            ("lm_head.bias", "cls.predictions.bias"),
        ];
        for (r, b) in pairs {
            assert_eq!(NAMES.to_bert(r), b, "{r}");
            assert_eq!(NAMES.from_bert(b)[0], r, "{b}");
            assert_eq!(NAMES.from_bert(&format!("bert.{b}"))[0], r, "bert.{b}");
        }
        assert_eq!(NAMES.to_bert("lm_head.decoder.bias"), "cls.predictions.bias");
        assert_eq!(NAMES.from_bert("cls.predictions.decoder.bias"), ["lm_head.bias", "lm_head.decoder.bias"]);
        // The classification heads keep their names both ways: BERT's `classifier.weight` is never RoBERTa's
        // `classifier.out_proj.weight`, nor its pooler `classifier.dense`.
        for n in ["classifier.dense.weight", "classifier.out_proj.bias", "classifier.weight", "qa_outputs.weight"] {
            assert_eq!(NAMES.to_bert(n), n);
        }
        for n in ["classifier.weight", "bert.pooler.dense.weight", "qa_outputs.bias"] {
            assert!(!NAMES.from_bert(n).iter().any(|c| c.starts_with("classifier.")), "{n}");
        }
        assert!(NAMES.from_bert("cls.seq_relationship.weight").is_empty());
    }
}
