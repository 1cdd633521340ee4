//! The families bertgpu runs: what `model_type` and the architecture classes of config.json name, and what each
//! family implies for the computation and the heads.

use crate::activation::Activation;
use crate::{Error, Result};

/// Which member of the BERT family a checkpoint is. All run the same post-LN encoder; they differ in tensor names,
/// in whether there are token-type (segment) embeddings, in their position ids, and in the heads (the activation of
/// the `[CLS]` projection that the sequence classifier reads, the masked-LM transform's activation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `model_type: "bert"`: BERT as its paper defines it.
    Bert,
    /// `model_type: "distilbert"` (transformers `models/distilbert`): no token-type embeddings, its own tensor names
    /// (see `weights::distilbert`), and `pre_classifier` + ReLU where BERT has the pooler's dense + tanh.
    DistilBert,
    /// `model_type: "roberta"` (transformers `models/roberta`): BERT's encoder under `roberta.`, position ids that
    /// start at `pad_token_id + 1` (see [`BertConfig::position_offset`]), token type 0 for every token (its tokenizer
    /// returns no type ids), a byte-level BPE tokenizer, and its own heads (`lm_head.*` with exact GELU whatever
    /// `hidden_act` says; `classifier.dense` + tanh + `classifier.out_proj` on the `<s>` token, no pooler): see
    /// `weights::roberta`.
    Roberta,
    /// `model_type: "xlm-roberta"` (transformers `models/xlm_roberta`, a copy of RoBERTa's code): RoBERTa with a
    /// SentencePiece Unigram tokenizer; the base of multilingual-e5 and bge-m3.
    XlmRoberta,
    /// `model_type: "camembert"` (transformers `models/camembert`, generated from RoBERTa's code with
    /// `base_model_prefix = "roberta"`, so its tensors are RoBERTa's names): RoBERTa with a SentencePiece Unigram
    /// tokenizer whose `<s>` and `</s>` are not ids 0 and 2 (camembert-base: 5 and 6).
    Camembert,
    /// `model_type: "electra"` (transformers `models/electra`): BERT's encoder under `electra.`, with embeddings of
    /// [`BertConfig::embedding_size`] E and, when E differs from the hidden size, `embeddings_project` (E → H) after
    /// their LayerNorm; no pooler. Its heads: the discriminator (`discriminator_predictions`, one "replaced" logit
    /// per token), the generator's masked LM (`generator_predictions` H → E + exact GELU + LayerNorm,
    /// `generator_lm_head`), `classifier.dense` + exact GELU + `classifier.out_proj` on the first token: see
    /// `weights::electra`.
    Electra,
    /// `model_type: "albert"` (transformers `models/albert`): factorised embeddings (E), `embedding_hidden_mapping_in`
    /// (E → H), and one post-LN layer whose weights every one of the `num_hidden_layers` passes shares; a
    /// SentencePiece Unigram tokenizer with `[CLS] A [SEP] B [SEP]` and token types. See `weights::albert`.
    Albert,
    /// `model_type: "mpnet"` (transformers `models/mpnet`): BERT's post-LN layers under `mpnet.` with its own names
    /// (`attention.attn.{q,k,v,o}`: see `weights::mpnet`), RoBERTa's positions (from `padding_idx + 1`, padding_idx
    /// 1), no token types, RoBERTa's heads (`lm_head`, `classifier.dense` + tanh + `out_proj`), and a relative
    /// position bias: `encoder.relative_attention_bias` `(32, heads)`, T5's buckets of j − i, added to every layer's
    /// scores ([`BertConfig::relative_attention_buckets`]).
    MPNet,
    /// `model_type: "nomic_bert"` (transformers `models/nomic_bert`; nomic-embed-text): BERT's post-LN layers with
    /// rotary positions (no position table), no biases in the layers, a gated feed-forward `fc2(fc11(x) ⊙
    /// silu(fc12(x)))` (SwiGLU), BERT's token types, pooler and masked-LM head (its transform's activation
    /// `hidden_act`); the names of nomic-ai's repositories (`encoder.layers.{i}.attn.Wqkv`, `mlp.fc11`, `norm1`...:
    /// see `weights::rotary`).
    NomicBert,
    /// `model_type: "gte"` (transformers `models/gte`), or `"new"` in Alibaba-NLP's repositories (gte-base-en-v1.5,
    /// gte-multilingual-base): BERT's post-LN layers with rotary positions, a packed `qkv_proj` and `o_proj` with
    /// biases, a gated feed-forward `down(up ⊙ gelu(gate))` whose `up_gate_proj` has no bias, token types only when
    /// `type_vocab_size` > 0, BERT's pooler, and `lm_head` (dense + exact GELU + `norm` + decoder).
    Gte,
    /// `model_type: "deberta-v2"` (transformers `models/deberta_v2`: DeBERTa-v2, DeBERTa-v3, mDeBERTa): BERT's post-LN
    /// layers under `deberta.` with `attention.self.{query,key,value}_proj`, absolute positions or none, a
    /// token-type table or none, and the disentangled attention over `encoder.rel_embeddings`
    /// (`config::deberta`, `model::disentangled`); the `ContextPooler` (`pooler.dense` + `pooler_hidden_act`) and
    /// `classifier`; BERT's masked-LM head as `lm_predictions.lm_head` (or, `legacy`, `cls.predictions`). See
    /// `weights::deberta`.
    DebertaV2,
    /// `model_type: "modernbert"` (transformers `models/modernbert`): pre-LN layers (`Norms::Pre`, a `final_norm`)
    /// with LayerNorms without β by default (`norm_bias`), no position table and no token types, rotary positions
    /// with a global and a local theta, sliding-window attention on the local layers, a packed `Wqkv`, GeGLU from
    /// one `Wi` whose first half is activated, and biases only where `attention_bias` / `mlp_bias` say
    /// (`config::modernbert`); its heads share `head` (dense + `classifier_activation` + norm): the masked LM's
    /// `decoder` after it, the classifiers' `classifier` after it (the sequence classifier on the first token or the
    /// mean, `classifier_pooling`). See `weights::modernbert`.
    ModernBert,
    /// JinaBERT v2 (jinaai's jina-bert-implementation, the hub's remote code: jina-embeddings-v2-small/base-en,
    /// jina-reranker-v1): `model_type: "bert"` with `position_embedding_type: "alibi"`, BERT's names and heads
    /// under `bert.`, no position table: ALiBi's per-head `−slope·|i − j|` added to the scores
    /// ([`Positions::Alibi`](super::Positions::Alibi)), and each layer's feed-forward a gated block `mlp.gated_layers`
    /// (no bias) whose first half is activated, `mlp.wo` and `mlp.layernorm` (post-LN): see `config::jina`,
    /// `weights::jina`.
    JinaBert,
}

impl Family {
    /// The `model_type` string of config.json.
    pub fn model_type(self) -> &'static str {
        match self {
            Family::Bert => "bert",
            Family::DistilBert => "distilbert",
            Family::Roberta => "roberta",
            Family::XlmRoberta => "xlm-roberta",
            Family::Camembert => "camembert",
            Family::Electra => "electra",
            Family::Albert => "albert",
            Family::MPNet => "mpnet",
            Family::NomicBert => "nomic_bert",
            Family::Gte => "gte",
            Family::DebertaV2 => "deberta-v2",
            Family::ModernBert => "modernbert",
            // The hub's config says `bert`; `position_embedding_type: "alibi"` tells it apart.
            Family::JinaBert => "bert",
        }
    }

    /// The prefix of the family's transformers classes (`BertForMaskedLM`, `XLMRobertaModel`, ...).
    pub fn class_prefix(self) -> &'static str {
        match self {
            Family::Bert => "Bert",
            Family::DistilBert => "DistilBert",
            Family::Roberta => "Roberta",
            Family::XlmRoberta => "XLMRoberta",
            Family::Camembert => "Camembert",
            Family::Electra => "Electra",
            Family::Albert => "Albert",
            Family::MPNet => "MPNet",
            Family::NomicBert => "NomicBert",
            Family::Gte => "Gte",
            Family::DebertaV2 => "DebertaV2",
            Family::ModernBert => "ModernBert",
            Family::JinaBert => "JinaBert",
        }
    }

    /// Whether token type (segment) ids reach the model. Without them every token is of type 0, so a pair is
    /// `[CLS] A [SEP] B [SEP]` (RoBERTa: `<s> A </s></s> B </s>`) told apart by its separators alone, as
    /// transformers feeds DistilBERT (no table) and RoBERTa (whose tokenizers return no `token_type_ids`, so its
    /// embeddings add row 0 of its table to every token).
    pub fn has_token_types(self) -> bool {
        matches!(self, Family::Bert | Family::Electra | Family::Albert | Family::NomicBert | Family::Gte | Family::DebertaV2
            | Family::JinaBert)
    }

    /// Whether the checkpoint has a token-type embedding table (`embeddings.token_type_embeddings`).
    pub fn has_token_type_table(self) -> bool {
        !matches!(self, Family::DistilBert | Family::MPNet | Family::ModernBert)
    }

    /// RoBERTa, XLM-R and CamemBERT (`modeling_roberta.py` and its copies): position ids from `padding_idx + 1`,
    /// `RobertaLMHead`, `RobertaClassificationHead`.
    pub fn is_roberta(self) -> bool {
        matches!(self, Family::Roberta | Family::XlmRoberta | Family::Camembert)
    }

    /// The activation of the `[CLS]` projection before a sequence classifier (BERT's and ALBERT's pooler: tanh;
    /// DistilBERT's `pre_classifier`: ReLU; ELECTRA's `classifier.dense`: the exact GELU, `get_activation("gelu")`
    /// whatever `hidden_act` says).
    pub fn pooler_activation(self) -> Activation {
        match self {
            Family::Bert
            | Family::Roberta
            | Family::XlmRoberta
            | Family::Camembert
            | Family::Albert
            | Family::MPNet
            | Family::NomicBert
            | Family::Gte
            | Family::DebertaV2
            | Family::JinaBert => {
                Activation::Tanh
            }
            Family::DistilBert => Activation::Relu,
            // ModernBERT's `head` has its own: `classifier_activation` (BertConfig::pooler_activation).
            Family::Electra | Family::ModernBert => Activation::Gelu,
        }
    }

    /// Whether the sequence classifier is `classifier.dense` + activation + `classifier.out_proj` on the first token
    /// (RoBERTa's and ELECTRA's heads) rather than a pooler and `classifier`.
    pub fn has_classification_head_module(self) -> bool {
        matches!(self, Family::Roberta | Family::XlmRoberta | Family::Camembert | Family::Electra | Family::MPNet)
    }

    /// The activation of the masked-LM head's transform: `hidden_act` for BERT (`BertPredictionHeadTransform`),
    /// DistilBERT (`vocab_transform`) and ALBERT (`AlbertMLMHead`), but always the exact (erf) GELU in
    /// `RobertaLMHead`, which calls `gelu` directly, in ELECTRA's `generator_predictions`
    /// (`get_activation("gelu")`) and in `GteLMHead`. JinaBERT's transform reads `hidden_act`, which its config
    /// must state as `gelu` (`config::jina`), whatever its feed-forward's activation.
    pub fn mlm_activation(self, hidden_act: Activation) -> Activation {
        if self.is_roberta() || matches!(self, Family::Electra | Family::MPNet | Family::Gte | Family::JinaBert) {
            Activation::Gelu
        } else {
            hidden_act
        }
    }

    /// Whether the embeddings are followed by a projection E → H: always for ALBERT
    /// (`embedding_hidden_mapping_in`), for ELECTRA when E ≠ H (`embeddings_project`, created only then).
    pub fn has_embedding_projection(self, embedding_size: usize, hidden_size: usize) -> bool {
        self == Family::Albert || (self == Family::Electra && embedding_size != hidden_size)
    }
}

/// What bertgpu runs, for the messages that refuse everything else.
const SUPPORTED: &str = "bertgpu runs BERT (`model_type: \"bert\"`), DistilBERT (`\"distilbert\"`), RoBERTa \
    (`\"roberta\"`), XLM-RoBERTa (`\"xlm-roberta\"`), CamemBERT (`\"camembert\"`), ELECTRA (`\"electra\"`), ALBERT \
    (`\"albert\"`), MPNet (`\"mpnet\"`), NomicBERT (`\"nomic_bert\"`), GTE (`\"gte\"`, the hub's `\"new\"`), \
    DeBERTa-v2/v3 (`\"deberta-v2\"`), ModernBERT (`\"modernbert\"`) and JinaBERT v2 (`\"bert\"` with \
    `position_embedding_type: \"alibi\"`); XLM-RoBERTa-XL, RoBERTa-PreLayerNorm, \
    Megatron-BERT, DeBERTa (v1, `\"deberta\"`) and the other BERT-like families compute differently (pre-LN, relative \
    positions, other attention) and would give wrong results";

/// The classes of RoBERTa, XLM-R and CamemBERT whose encoder bertgpu runs (after the family's class prefix). The
/// prefix alone would also take `XLMRobertaXL*` and `RobertaPreLayerNorm*`, pre-LN models under names that start the same.
const ROBERTA_CLASSES: [&str; 6] =
    ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice"];

/// ELECTRA's classes whose encoder bertgpu runs: the discriminator (`ForPreTraining`), the generator
/// (`ForMaskedLM`), the task heads, and the bare model. `ElectraForCausalLM` (a decoder) is not among them.
const ELECTRA_CLASSES: [&str; 7] = ["Model", "ForPreTraining", "ForMaskedLM", "ForSequenceClassification",
    "ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice"];

/// NomicBERT's and GTE's classes in transformers (GTE's hub repositories name them `New*`).
const ROTARY_CLASSES: [&str; 4] = ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification"];

/// ModernBERT's classes whose heads bertgpu runs (`ModernBertForMultipleChoice` is not among them).
const MODERNBERT_CLASSES: [&str; 5] =
    ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering"];

/// JinaBERT's classes in jinaai's remote code (`JinaBertForQuestionAnswering` and the others it copies from BERT
/// have no released checkpoint, and are not among them).
const JINA_CLASSES: [&str; 3] = ["Model", "ForMaskedLM", "ForSequenceClassification"];

/// ALBERT's classes (`ForPreTraining` is the masked LM plus the sentence-order head, which inference does not run
/// and pre-training trains).
const ALBERT_CLASSES: [&str; 7] = ["Model", "ForPreTraining", "ForMaskedLM", "ForSequenceClassification",
    "ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice"];

/// Whether `arch` is one of `family`'s classes.
fn is_class_of(family: Family, arch: &str) -> bool {
    let rest = match family {
        Family::Gte => arch.strip_prefix("Gte").or_else(|| arch.strip_prefix("New")),
        _ => arch.strip_prefix(family.class_prefix()),
    };
    let Some(rest) = rest else { return false };
    match family {
        // `RobertaModel` must not pass as `XLMRobertaModel` and the reverse: the prefixes differ, so strip_prefix
        // already tells them apart.
        Family::Roberta | Family::XlmRoberta | Family::Camembert => ROBERTA_CLASSES.contains(&rest),
        Family::Electra => ELECTRA_CLASSES.contains(&rest),
        Family::Albert => ALBERT_CLASSES.contains(&rest),
        // MPNet's are RoBERTa's six (`MPNetForMaskedLM`, ...).
        Family::MPNet => ROBERTA_CLASSES.contains(&rest),
        Family::NomicBert | Family::Gte => ROTARY_CLASSES.contains(&rest),
        Family::DebertaV2 => ROBERTA_CLASSES.contains(&rest),
        Family::ModernBert => MODERNBERT_CLASSES.contains(&rest),
        Family::JinaBert => JINA_CLASSES.contains(&rest),
        Family::Bert | Family::DistilBert => true,
    }
}

/// The family a config describes: its `model_type`, or for old configs without one, its architecture classes
/// (`Bert*`, `DistilBert*`, `Roberta*`, `XLMRoberta*`, `Camembert*`, `Electra*`, `Albert*`). Anything else is refused by name:
/// Megatron-BERT or XLM-RoBERTa-XL checkpoints, like RoBERTa's, share BERT's tensor names, so running one as another
/// family would give wrong vectors without a word.
///
/// `alibi`: config.json's `position_embedding_type` is `alibi`, which only JinaBERT's `model_type: "bert"` configs
/// say (the architectures `JinaBert*` say it too; one without the other is refused by `config::jina`).
pub(crate) fn family_of(model_type: Option<&str>, architectures: &[String], alibi: bool) -> Result<Family> {
    let jina = alibi || architectures.iter().any(|a| a.starts_with("JinaBert"));
    let family = match model_type {
        Some("bert") if jina => Family::JinaBert,
        Some("bert") => Family::Bert,
        Some("distilbert") => Family::DistilBert,
        Some("roberta") => Family::Roberta,
        Some("xlm-roberta") => Family::XlmRoberta,
        Some("camembert") => Family::Camembert,
        Some("electra") => Family::Electra,
        Some("albert") => Family::Albert,
        Some("mpnet") => Family::MPNet,
        Some("nomic_bert") => Family::NomicBert,
        Some("gte" | "new") => Family::Gte,
        Some("deberta-v2") => Family::DebertaV2,
        Some("modernbert") => Family::ModernBert,
        Some(kind) => return Err(Error::Config(format!("model_type `{kind}` is not supported: {SUPPORTED}"))),
        None => [
            Family::DistilBert,
            Family::Roberta,
            Family::XlmRoberta,
            Family::Camembert,
            Family::Electra,
            Family::Albert,
            Family::MPNet,
            Family::NomicBert,
            Family::Gte,
            Family::DebertaV2,
            Family::ModernBert,
            Family::JinaBert,
        ]
            .into_iter()
            .find(|f| architectures.iter().any(|a| is_class_of(*f, a)))
            .unwrap_or(Family::Bert),
    };
    if let Some(arch) = architectures.iter().find(|a| !is_class_of(family, a)) {
        return Err(Error::Config(format!(
            "architecture `{arch}` is not a {} class: {SUPPORTED}",
            family.model_type()
        )));
    }
    Ok(family)
}
