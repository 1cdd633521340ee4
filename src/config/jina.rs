//! JinaBERT v2's keys (jinaai/jina-bert-implementation's `JinaBertConfig`, the hub's remote code for
//! jina-embeddings-v2-small/base-en and jina-reranker-v1): `model_type: "bert"` with `position_embedding_type:
//! "alibi"` and `feed_forward_type` `geglu` or `reglu`, the gated feed-forward's activation (`nn.GELU()`, the exact
//! one, or `nn.ReLU()`) whatever `hidden_act` says. What bertgpu does not run is refused by name: the qk-post-norm
//! variant (jina-embeddings-v2-base-code: `attention.self.layer_norm_q`/`layer_norm_k`, `mlp.up_gated_layer`; its
//! tensors, `weights::jina`), another `feed_forward_type`, absolute positions in a JinaBERT, ALiBi on another
//! `model_type`.

use serde_json::Value;

use super::{FeedForward, LayerBiases, Positions};
use crate::activation::Activation;
use crate::{Error, Result};

/// What a JinaBERT config states beyond BERT's keys, in BERT's terms.
pub(super) struct JinaKeys {
    /// The gated feed-forward's activation (`feed_forward_type`), which is what the layers' `hidden_act` means here.
    pub act: Activation,
}

impl JinaKeys {
    /// The encoder's choices: ALiBi, the gated block, biases everywhere but `mlp.gated_layers` (`bias=False`).
    pub fn encoder(&self) -> (Positions, FeedForward, LayerBiases) {
        (Positions::Alibi, FeedForward::Gated, LayerBiases { up: false, ..LayerBiases::ALL })
    }
}

/// JinaBERT's keys from config.json `v`; `jina`: the family is JinaBERT (`model_type: "bert"` with ALiBi or a
/// `JinaBert*` class). Refuses ALiBi anywhere else.
pub(super) fn parse(v: &Value, jina: bool) -> Result<Option<JinaKeys>> {
    let positions = v.get("position_embedding_type").and_then(Value::as_str);
    if !jina {
        if positions == Some("alibi") {
            let kind = v.get("model_type").and_then(Value::as_str).unwrap_or("(none)");
            return Err(Error::Config(format!(
                "position_embedding_type `alibi` with model_type `{kind}` is not supported: ALiBi runs as JinaBERT v2's \
                 (model_type `bert`, jinaai's jina-bert-implementation) only"
            )));
        }
        return Ok(None);
    }
    let auto_map = v.get("auto_map").and_then(Value::as_object).into_iter().flat_map(|m| m.values());
    if let Some(code) = auto_map.filter_map(Value::as_str).find(|c| c.contains("qk-post-norm")) {
        return Err(Error::Config(format!(
            "auto_map `{code}` is JinaBERT's qk-post-norm variant (as jina-embeddings-v2-base-code), which normalises \
             the queries and keys and has its own feed-forward: not supported; bertgpu runs JinaBERT v2 as \
             jinaai/jina-bert-implementation defines it"
        )));
    }
    if positions != Some("alibi") {
        return Err(Error::Config(format!(
            "a JinaBERT config with position_embedding_type `{}` is not supported: bertgpu runs JinaBERT v2 with ALiBi \
             (`position_embedding_type: \"alibi\"`, every released jina-embeddings-v2 and jina-reranker-v1)",
            positions.unwrap_or("absolute")
        )));
    }
    let act = match v.get("feed_forward_type").and_then(Value::as_str) {
        Some("geglu") => Activation::Gelu,
        Some("reglu") => Activation::Relu,
        other => {
            return Err(Error::Config(format!(
                "feed_forward_type `{}` is not supported for JinaBERT: only `geglu` and `reglu` (the gated \
                 feed-forward `mlp.gated_layers`, every released JinaBERT v2) are",
                other.unwrap_or("original")
            )))
        }
    };
    // The masked-LM head's transform reads `hidden_act` (Family::mlm_activation takes it as gelu).
    let hidden_act = v.get("hidden_act").and_then(Value::as_str).unwrap_or("gelu");
    if hidden_act != "gelu" {
        return Err(Error::Config(format!(
            "hidden_act `{hidden_act}` is not supported for JinaBERT: its masked-LM head reads `gelu` (every released \
             JinaBERT v2); the layers' activation is feed_forward_type's"
        )));
    }
    Ok(Some(JinaKeys { act }))
}

#[cfg(test)]
mod tests {
    use crate::config::{BertConfig, Family, FeedForward, Positions};

    /// jina-embeddings-v2-base-en's config.json as the hub has it (remote-code keys included).
    pub(crate) const BASE_EN: &str = r#"{"architectures": ["JinaBertForMaskedLM"], "attention_probs_dropout_prob": 0.0,
        "attn_implementation": "torch", "auto_map": {"AutoConfig": "jinaai/jina-bert-implementation--configuration_bert.JinaBertConfig"},
        "classifier_dropout": null, "emb_pooler": "mean", "feed_forward_type": "geglu", "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": 768, "intermediate_size": 3072, "layer_norm_eps": 1e-12,
        "max_position_embeddings": 8192, "model_max_length": 8192, "model_type": "bert", "num_attention_heads": 12,
        "num_hidden_layers": 12, "pad_token_id": 0, "position_embedding_type": "alibi", "type_vocab_size": 2,
        "vocab_size": 30528}"#;

    #[test]
    fn parses_the_hubs_config() {
        let c = BertConfig::from_json_str(BASE_EN).unwrap();
        assert_eq!(c.family, Family::JinaBert);
        assert_eq!(c.positions, Positions::Alibi);
        assert_eq!(c.feed_forward, FeedForward::Gated);
        assert!(!c.biases.up && c.biases.down && c.biases.qkv);
        assert!(!c.has_position_table());
        assert_eq!(c.max_position_embeddings, 8192);
        let r = BertConfig::from_json_str(&BASE_EN.replace("\"geglu\"", "\"reglu\"")).unwrap();
        assert_eq!(r.hidden_act, crate::activation::Activation::Relu);
    }

    #[test]
    fn refuses_by_name() {
        for (from, to, named) in [
            ("\"geglu\"", "\"original\"", "feed_forward_type `original`"),
            ("\"geglu\"", "\"swiglu\"", "feed_forward_type `swiglu`"),
            ("\"alibi\"", "\"absolute\"", "position_embedding_type `absolute`"),
            ("\"model_type\": \"bert\"", "\"model_type\": \"roberta\"", "architecture `JinaBertForMaskedLM`"),
            ("\"hidden_act\": \"gelu\"", "\"hidden_act\": \"relu\"", "hidden_act `relu`"),
            ("jinaai/jina-bert-implementation--configuration_bert", "jinaai/jina-bert-v2-qk-post-norm--configuration_bert",
                "qk-post-norm"),
        ] {
            let e = BertConfig::from_json_str(&BASE_EN.replace(from, to)).unwrap_err().to_string();
            assert!(e.contains(named), "{to}: {e}");
        }
        let roberta = BASE_EN.replace("\"model_type\": \"bert\"", "\"model_type\": \"roberta\"")
            .replace("JinaBertForMaskedLM", "RobertaForMaskedLM");
        let e = BertConfig::from_json_str(&roberta).unwrap_err().to_string();
        assert!(e.contains("`alibi` with model_type `roberta`"), "{e}");
    }
}
