//! ELECTRA's tensor names (transformers `modeling_electra.py`) ↔ BERT's. The encoder is BERT's under `electra.`
//! (every checkpoint) or at the root (a bare `ElectraModel` saved alone), with BERT's sub-names; the model code asks
//! for BERT names and [`super::Weights`] finds these too. Besides BERT's modules:
//! - `electra.embeddings_project` (E → H after the embeddings' LayerNorm, present when `embedding_size` differs from
//!   `hidden_size`), asked for as `embeddings_project`;
//! - the generator's masked-LM head `generator_predictions.{dense, LayerNorm}` and `generator_lm_head` (its weight
//!   tied to the word embeddings, its bias the MLM bias) are BERT's `cls.predictions.{transform.dense,
//!   transform.LayerNorm, decoder}` and `cls.predictions.bias`;
//! - the discriminator head `discriminator_predictions.{dense, dense_prediction}` has no BERT twin and keeps its name.
//!
//! Not mapped, on purpose, as for RoBERTa: the sequence classifier `classifier.dense` + `classifier.out_proj` is read
//! under its own names (`heads::classifier`), so that a token classifier's `classifier.*` is never taken for it.

/// ELECTRA's names: the encoder and `embeddings_project` under `electra.`; the generator's masked-LM head.
/// `NAMES.to_bert` passes the heads without a BERT twin (`discriminator_predictions.*`, `classifier.dense`,
/// `classifier.out_proj`, `classifier`, `qa_outputs`) and `embeddings_project` through without `electra.`;
/// `NAMES.from_bert` is empty for BERT tensors ELECTRA lacks (pooler, NSP head).
pub(super) const NAMES: super::RenamedBert = super::RenamedBert {
    prefix: "electra.",
    prefixed: &["embeddings.", "encoder.", "embeddings_project."],
    lm_head: [
        ("cls.predictions.transform.dense", "generator_predictions.dense"),
        ("cls.predictions.transform.LayerNorm", "generator_predictions.LayerNorm"),
        ("cls.predictions.decoder", "generator_lm_head"),
    ],
    mlm_bias: &["generator_lm_head.bias"],
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name of transformers' ElectraForPreTraining / ElectraForMaskedLM state dicts maps to BERT's and back.
    #[test]
    fn names_round_trip() {
        let pairs = [
            ("electra.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
            ("electra.embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight"),
            ("electra.embeddings.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight"),
            ("electra.embeddings.LayerNorm.bias", "embeddings.LayerNorm.bias"),
            ("electra.embeddings_project.weight", "embeddings_project.weight"),
            ("electra.encoder.layer.0.attention.self.query.weight", "encoder.layer.0.attention.self.query.weight"),
            ("electra.encoder.layer.11.output.LayerNorm.weight", "encoder.layer.11.output.LayerNorm.weight"),
            ("generator_predictions.dense.weight", "cls.predictions.transform.dense.weight"),
            ("generator_predictions.LayerNorm.bias", "cls.predictions.transform.LayerNorm.bias"),
            ("generator_lm_head.weight", "cls.predictions.decoder.weight"),
            ("generator_lm_head.bias", "cls.predictions.bias"),
        ];
        for (e, b) in pairs {
            assert_eq!(NAMES.to_bert(e), b, "{e}");
            assert_eq!(NAMES.from_bert(b)[0], e, "{b}");
            assert_eq!(NAMES.from_bert(&format!("bert.{b}"))[0], e, "bert.{b}");
        }
        assert_eq!(NAMES.from_bert("cls.predictions.decoder.bias"), ["generator_lm_head.bias"]);
        for n in ["discriminator_predictions.dense.weight", "discriminator_predictions.dense_prediction.bias",
            "classifier.dense.weight", "classifier.out_proj.bias", "classifier.weight", "qa_outputs.weight"]
        {
            assert_eq!(NAMES.to_bert(n), n);
        }
        // ELECTRA has no pooler and no NSP head.
        assert!(NAMES.from_bert("pooler.dense.weight").is_empty());
        assert!(NAMES.from_bert("cls.seq_relationship.weight").is_empty());
    }
}
