//! `BertConfig`: the architecture of a checkpoint, read from a Hugging Face `config.json` (or built from GGUF
//! metadata and then checked with [`BertConfig::validate`]).

mod encoder;
mod deberta;
mod family;
mod jina;
mod modernbert;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::activation::Activation;
use crate::{Error, Result};

pub use encoder::{FeedForward, LayerBiases, Norms, Positions, SlidingWindow};
pub use modernbert::ModernBert;
pub use deberta::{DebertaV2, Relative as DebertaRelative};
pub use family::Family;
use family::family_of;

/// The fields of `BertConfig` (transformers `models/bert/configuration_bert.py`) that change the computation, plus
/// the label maps and metadata the task heads use.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    /// BERT, DistilBERT, RoBERTa, XLM-RoBERTa, CamemBERT, ELECTRA, ALBERT, MPNet, NomicBERT, GTE, DeBERTa-v2 or
    /// ModernBERT.
    pub family: Family,
    pub vocab_size: usize,
    /// E: the width of the embedding tables, their LayerNorm and the masked-LM head's transform. The hidden size
    /// for BERT, DistilBERT and RoBERTa; config.json's `embedding_size` for ELECTRA and ALBERT (factorised
    /// embeddings, projected to H: [`Family::has_embedding_projection`]).
    pub embedding_size: usize,
    /// H.
    pub hidden_size: usize,
    /// L.
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// The feed-forward width (4·H in the original BERT).
    pub intermediate_size: usize,
    /// The feed-forward activation (`hidden_act`).
    pub hidden_act: Activation,
    pub layer_norm_eps: f32,
    /// The number of positions a sequence can use, special tokens included: the longest input the model takes, and
    /// the tokenizer's truncation limit. config.json's `max_position_embeddings` for BERT and DistilBERT; for
    /// RoBERTa and XLM-R that value less [`Self::position_offset`] (514 → 512), since their first position is
    /// `pad_token_id + 1`.
    pub max_position_embeddings: usize,
    /// The position id of a sequence's first token: 0 for BERT and DistilBERT; `pad_token_id + 1` for RoBERTa and
    /// XLM-R (`create_position_ids_from_input_ids`: token j of a right-padded row is at position j + pad + 1).
    /// The position table in the checkpoint has `max_position_embeddings + position_offset` rows.
    pub position_offset: usize,
    pub type_vocab_size: usize,
    pub pad_token_id: u32,
    /// Where positions enter: the learned table of [`Self::max_position_embeddings`] rows (BERT and its relatives),
    /// or a rotation of the queries and keys (NomicBERT, GTE).
    pub positions: Positions,
    /// A rotary model's fixed NTK scaling factor `s` (Alibaba-NLP's gte-*-en-v1.5: `rope_scaling` `{"type": "ntk",
    /// "factor": s}`): the inverse frequencies `1 / (s·theta)^(2i/d) / s^(2/d)` at every position, as its own
    /// `NTKScalingRotaryEmbedding` computes them ([`crate::model::rotary::Rope`]). `None`: the plain rotation.
    pub rope_ntk_factor: Option<f32>,
    /// Whether the embeddings add a token-type table's rows: the BERT family's own rule
    /// ([`Family::has_token_type_table`]), and for GTE whether `type_vocab_size` is above 0 (gte-base-en-v1.5 has
    /// none). Without one, a single all-zero row stands in (`type_vocab_size` 1) and every token is of type 0.
    pub token_type_table: bool,
    /// The feed-forward: plain or gated (NomicBERT's SwiGLU, GTE's GeGLU).
    pub feed_forward: FeedForward,
    /// Which of each layer's linear maps have a bias (all for BERT; none for NomicBERT; GTE's all but the gated
    /// block's `up_gate_proj`; ModernBERT's where `attention_bias` / `mlp_bias` say).
    pub biases: LayerBiases,
    /// Where the layers' LayerNorms sit: after each block (BERT) or before it, with a final one (ModernBERT).
    pub norms: Norms,
    /// Whether the LayerNorms have a β (ModernBERT's `norm_bias`, false by default: β = 0); true for the others.
    pub norm_bias: bool,
    /// ModernBERT's local layers: a window of keys, their own rotary theta; `None`: every layer attends to every key.
    pub sliding_window: Option<SlidingWindow>,
    /// ModernBERT's head choices (`classifier_pooling`, `classifier_activation`, its biases); `None` for the others.
    pub modernbert: Option<ModernBert>,
    /// MPNet's relative position buckets (`relative_attention_num_buckets`, 32): the rows of
    /// `encoder.relative_attention_bias`; 0 for the families without a relative bias.
    pub relative_attention_buckets: usize,
    /// DeBERTa-v2/v3's choices (positions, token types, the disentangled attention, the pooler's activation);
    /// `None` for the other families.
    pub deberta: Option<DebertaV2>,
    /// Class index → label, from `id2label` (whose keys HF writes as strings: `{"0": "NEGATIVE"}`).
    pub id2label: BTreeMap<usize, String>,
    /// Label → class index, from `label2id`.
    pub label2id: BTreeMap<String, usize>,
    /// `single_label_classification`, `multi_label_classification` or `regression`, when the checkpoint says.
    pub problem_type: Option<String>,
    /// E.g. `["BertForMaskedLM"]`: tells which heads the file carries.
    pub architectures: Vec<String>,
    /// Whether the MLM decoder shares the word-embedding matrix (HF's default is true).
    pub tie_word_embeddings: bool,
    /// The standard deviation of a new weight's normal initialiser (`initializer_range`, HF's default 0.02): a head
    /// that fine-tuning adds starts from it, as `_init_weights` does.
    pub initializer_range: f32,
    /// Dropout after the embeddings and after each layer's two output projections while fine-tuning
    /// (`hidden_dropout_prob`, transformers' default 0.1); never at inference.
    pub hidden_dropout_prob: f32,
    /// Dropout of the attention probabilities while fine-tuning (`attention_probs_dropout_prob`, default 0.1).
    pub attention_probs_dropout_prob: f32,
    /// Dropout before a classification head while fine-tuning (`classifier_dropout`); `None`: the hidden dropout,
    /// as `BertForSequenceClassification` and `BertForTokenClassification` fall back to it. DistilBERT's are
    /// `dropout`, `attention_dropout` and its sequence classifier's `seq_classif_dropout` (default 0.2); ALBERT's
    /// classifiers' `classifier_dropout_prob` (default 0.1).
    pub classifier_dropout: Option<f32>,
    /// DistilBERT's `qa_dropout` (default 0.1) before `qa_outputs`; `None` for the other families (no dropout there).
    pub qa_dropout: Option<f32>,
    /// sentence-transformers' description of the model (modules.json and the files beside it), where the model
    /// has one: set by the loader, never read from config.json ([`crate::sentence`]).
    pub sentence: Option<crate::sentence::SentenceConfig>,
}

/// `config.json` as written, every field optional so that a missing one gets a message naming it.
#[derive(Deserialize)]
struct RawConfig {
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    intermediate_size: Option<usize>,
    hidden_act: Option<String>,
    layer_norm_eps: Option<f64>,
    max_position_embeddings: Option<usize>,
    type_vocab_size: Option<usize>,
    pad_token_id: Option<u32>,
    relative_attention_num_buckets: Option<usize>,
    position_embedding_type: Option<String>,
    model_type: Option<String>,
    // ELECTRA's and ALBERT's factorised embeddings; ALBERT's layer sharing.
    embedding_size: Option<usize>,
    num_hidden_groups: Option<usize>,
    inner_group_num: Option<usize>,
    // DistilBERT's names for the sizes (`DistilBertConfig`), and its fixed-vs-learned position switch.
    dim: Option<usize>,
    n_layers: Option<usize>,
    n_heads: Option<usize>,
    hidden_dim: Option<usize>,
    activation: Option<String>,
    sinusoidal_pos_embds: Option<bool>,
    is_decoder: Option<bool>,
    #[serde(default)]
    id2label: Option<BTreeMap<String, String>>,
    #[serde(default)]
    label2id: Option<BTreeMap<String, serde_json::Value>>,
    problem_type: Option<String>,
    #[serde(default)]
    architectures: Option<Vec<String>>,
    tie_word_embeddings: Option<bool>,
    initializer_range: Option<f64>,
    hidden_dropout_prob: Option<f64>,
    attention_probs_dropout_prob: Option<f64>,
    classifier_dropout: Option<f64>,
    // DistilBERT's names for the dropouts (its token classifier's is `dropout`, its sequence classifier's
    // `seq_classif_dropout`).
    dropout: Option<f64>,
    attention_dropout: Option<f64>,
    seq_classif_dropout: Option<f64>,
    qa_dropout: Option<f64>,
    // ALBERT's classifier dropout (AlbertConfig's default 0.1).
    classifier_dropout_prob: Option<f64>,
}

fn required(v: Option<usize>, name: &str) -> Result<usize> {
    v.ok_or_else(|| Error::Config(format!("config.json has no `{name}`; it is required for a BERT model")))
}

impl BertConfig {
    /// Reads and checks a `config.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<BertConfig> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("cannot read model config {}", path.display()), e))?;
        Self::from_json_str(&text)
    }

    /// Parses and checks the text of a `config.json`.
    pub fn from_json_str(text: &str) -> Result<BertConfig> {
        let raw: RawConfig = serde_json::from_str(text)
            .map_err(|e| Error::Config(format!("config.json is not a valid BERT config ({e})")))?;
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::Config(format!("config.json is not a valid BERT config ({e})")))?;
        let alibi = raw.position_embedding_type.as_deref() == Some("alibi");
        let family = family_of(raw.model_type.as_deref(), raw.architectures.as_deref().unwrap_or_default(), alibi)?;
        // JinaBERT's keys; ALiBi anywhere else refused by name.
        let jk = jina::parse(&v, family == Family::JinaBert)?;
        let rotary = matches!(family, Family::NomicBert | Family::Gte);
        // NomicBERT's and GTE's own keys (transformers' or their hub repositories'), read apart.
        let rk = if rotary { Some(encoder::rotary_keys(text, family)?) } else { None };
        // ModernBERT's own keys, read apart too (`hidden_activation`, `norm_eps`, the two thetas, the window).
        let mk = if family == Family::ModernBert { Some(modernbert::parse(&v, raw.num_hidden_layers.unwrap_or(0))?) } else { None };
        if let Some(kind) = raw.position_embedding_type.as_deref() {
            // Alibaba-NLP's GTE config says `rope`, which it is.
            if kind != "absolute" && !(family == Family::Gte && kind == "rope") && jk.is_none() {
                return Err(Error::Config(format!(
                    "position_embedding_type `{kind}` is not supported; only `absolute` position embeddings are"
                )));
            }
        }
        if raw.is_decoder == Some(true) {
            return Err(Error::Config(
                "is_decoder: true is not supported: this checkpoint is a causal (left-to-right) decoder, and bertgpu \
                 runs bidirectional encoders only"
                    .into(),
            ));
        }
        // DistilBERT: its own field names, LayerNorm ε fixed at 1e-12 in its code, no token types.
        let distil = family == Family::DistilBert;
        if distil && raw.sinusoidal_pos_embds == Some(true) {
            return Err(Error::Config(
                "sinusoidal_pos_embds: true is not supported: only DistilBERT checkpoints with learned position \
                 embeddings (the default, and every released one) are"
                    .into(),
            ));
        }
        let pick = |distil_value: Option<usize>, bert_value: Option<usize>| if distil { distil_value } else { bert_value };
        let act = if distil { raw.activation.as_deref() } else { raw.hidden_act.as_deref() };
        let act = act.or(rk.as_ref().and_then(|k| k.hidden_act));
        // AlbertConfig's default is gelu_new, NomicBertConfig's silu; every other family's gelu.
        let default_act = match family {
            Family::Albert => "gelu_new",
            Family::NomicBert => "silu",
            _ => "gelu",
        };
        let hidden_act = match (&mk, &jk) {
            (Some(k), _) => k.hidden_act,
            (_, Some(j)) => j.act,
            _ => Activation::from_hf(act.unwrap_or(default_act))?,
        };
        if family == Family::Albert {
            for (name, v) in [("num_hidden_groups", raw.num_hidden_groups), ("inner_group_num", raw.inner_group_num)] {
                if v.unwrap_or(1) != 1 {
                    return Err(Error::Config(format!(
                        "{name} {} is not supported: bertgpu runs ALBERT checkpoints with one shared layer \
                         (num_hidden_groups 1 and inner_group_num 1, as every released ALBERT)",
                        v.unwrap_or(1)
                    )));
                }
            }
        }
        let mut id2label = BTreeMap::new();
        for (k, v) in raw.id2label.unwrap_or_default() {
            let id: usize = k.trim().parse().map_err(|_| {
                Error::Config(format!("id2label key `{k}` is not a class index; keys must be \"0\", \"1\", ..."))
            })?;
            id2label.insert(id, v);
        }
        let mut label2id = BTreeMap::new();
        for (k, v) in raw.label2id.unwrap_or_default() {
            // HF writes integers; some files carry them as strings.
            let id = match &v {
                serde_json::Value::Number(n) => n.as_u64().map(|n| n as usize),
                serde_json::Value::String(s) => s.trim().parse().ok(),
                _ => None,
            }
            .ok_or_else(|| Error::Config(format!("label2id[`{k}`] = {v} is not a class index")))?;
            label2id.insert(k, id);
        }
        let (hidden, layers, heads, ffn) = if distil {
            (("dim", raw.dim), ("n_layers", raw.n_layers), ("n_heads", raw.n_heads), ("hidden_dim", raw.hidden_dim))
        } else if let Some(k) = rk.as_ref().filter(|_| raw.hidden_size.is_none()) {
            // nomic-ai's hub names.
            (("n_embd", k.hidden_size), ("n_layer", k.num_hidden_layers), ("n_head", k.num_attention_heads),
                ("n_inner", k.intermediate_size))
        } else {
            (
                ("hidden_size", raw.hidden_size),
                ("num_hidden_layers", raw.num_hidden_layers),
                ("num_attention_heads", raw.num_attention_heads),
                ("intermediate_size", raw.intermediate_size),
            )
        };
        // RoBERTa: padding_idx = pad_token_id (1 in every released checkpoint, also RobertaConfig's default), and the
        // positions of real tokens start after it.
        let mpnet = family == Family::MPNet;
        let pad_token_id = raw.pad_token_id.unwrap_or(match family {
            f if f.is_roberta() || mpnet => 1,
            Family::ModernBert => 50283, // ModernBertConfig's
            _ => 0,
        });
        let table_rows = raw.max_position_embeddings
            .or(rk.as_ref().and_then(|k| k.max_position_embeddings))
            .unwrap_or(match family {
                Family::ModernBert => 8192,
                _ if rotary => 2048,
                _ => 512,
            });
        let position_offset = if family.is_roberta() || mpnet { pad_token_id as usize + 1 } else { 0 };
        // MPNet's code fixes padding_idx at 1 and buckets relative positions into 32 whatever config.json says.
        let buckets = raw.relative_attention_num_buckets.unwrap_or(32);
        if mpnet && (pad_token_id != 1 || buckets != 32) {
            return Err(Error::Config(format!(
                "pad_token_id {pad_token_id} / relative_attention_num_buckets {buckets} is not supported: MPNet's code \
                 numbers positions from padding_idx 1 and buckets them into 32, so only pad_token_id 1 and 32 buckets \
                 (every released MPNet) run as transformers runs them"
            )));
        }
        if table_rows <= position_offset {
            return Err(Error::Config(format!(
                "max_position_embeddings {table_rows} leaves no position for a token: {} positions start at \
                 pad_token_id + 1 = {position_offset}",
                family.model_type()
            )));
        }
        let hidden_size = required(hidden.1, hidden.0)?;
        let deberta = if family == Family::DebertaV2 {
            Some(deberta::parse(&v, hidden_size, raw.num_attention_heads.unwrap_or(0), table_rows)?)
        } else {
            None
        };
        let vocab_size = required(raw.vocab_size, "vocab_size")?;
        let num_attention_heads = required(heads.1, heads.0)?;
        if let Some(d) = rk.as_ref().and_then(|k| k.head_dim) {
            if num_attention_heads == 0 || d * num_attention_heads != hidden_size {
                return Err(Error::Config(format!(
                    "head_dim {d} is not supported: it must be hidden_size {hidden_size} / num_attention_heads \
                     {num_attention_heads}"
                )));
            }
        }
        // NomicBERT's table is BERT's (type_vocab_size 2 by default); GTE has one only when type_vocab_size > 0
        // (GteConfig's default 1).
        let token_type_table = match family {
            Family::Gte => raw.type_vocab_size.unwrap_or(1) > 0,
            Family::DebertaV2 => deberta.as_ref().is_some_and(|d| d.token_types),
            Family::NomicBert => raw.type_vocab_size.unwrap_or(2) > 0,
            f => f.has_token_type_table(),
        };
        let (positions, feed_forward, biases) = match &rk {
            // DeBERTa-v3 (`position_biased_input: false`): its relative terms carry the positions.
            None if deberta.as_ref().is_some_and(|d| !d.position_biased_input) => {
                (Positions::Relative, FeedForward::Plain, LayerBiases::ALL)
            }
            None => match (&mk, &jk) {
                (Some(k), _) => (Positions::Rotary { theta: k.theta }, FeedForward::Gated, k.biases),
                (_, Some(j)) => j.encoder(),
                _ => (Positions::Absolute, FeedForward::Plain, LayerBiases::ALL),
            },
            Some(k) => {
                let biases = if family == Family::Gte {
                    LayerBiases { up: false, ..LayerBiases::ALL }
                } else {
                    LayerBiases::NONE
                };
                (Positions::Rotary { theta: k.theta }, FeedForward::Gated, biases)
            }
        };
        // ElectraConfig's and AlbertConfig's default embedding_size is 128; the other families have none (E = H).
        let embedding_size = match family {
            Family::Electra | Family::Albert => raw.embedding_size.unwrap_or(128),
            _ => hidden_size,
        };
        let cfg = BertConfig {
            family,
            vocab_size,
            embedding_size,
            hidden_size,
            num_hidden_layers: required(layers.1, layers.0)?,
            num_attention_heads,
            intermediate_size: required(ffn.1, ffn.0)?,
            hidden_act,
            // ModernBERT's is `norm_eps` alone.
            layer_norm_eps: if distil { 1e-12 } else {
                mk.as_ref().map(|k| k.layer_norm_eps).or(raw.layer_norm_eps).or(rk.as_ref().and_then(|k| k.layer_norm_eps))
                    .unwrap_or(1e-12) as f32
            },
            max_position_embeddings: table_rows - position_offset,
            position_offset,
            // One all-zero row stands for DistilBERT's missing table (BertEmbeddings), so every token adds nothing.
            // MPNet, and the families without a token-type table (GTE or DeBERTa at type_vocab_size 0): one zero row
            // stands in.
            type_vocab_size: if mpnet || !token_type_table { 1 } else { pick(Some(1), raw.type_vocab_size).unwrap_or(2) },
            positions,
            rope_ntk_factor: rk.as_ref().and_then(|k| k.ntk_factor),
            token_type_table,
            feed_forward,
            biases,
            norms: if mk.is_some() { Norms::Pre } else { Norms::Post },
            norm_bias: mk.as_ref().is_none_or(|k| k.norm_bias),
            sliding_window: mk.as_ref().map(|k| k.window.clone()),
            modernbert: mk.as_ref().map(|k| k.heads.clone()),
            pad_token_id,
            relative_attention_buckets: if mpnet { buckets } else { 0 },
            deberta,
            id2label,
            label2id,
            problem_type: raw.problem_type,
            architectures: raw.architectures.unwrap_or_default(),
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(true),
            initializer_range: raw.initializer_range.unwrap_or(0.02) as f32,
            // Absent keys take the family's config class's defaults (NomicBertConfig 0 and 0, GteConfig 0.1 and 0,
            // BertConfig's 0.1 and 0.1 for the rest); nomic-ai's hub keys where transformers' are absent; ModernBERT's
            // own keys.
            hidden_dropout_prob: mk.as_ref().map_or(if distil { raw.dropout } else { raw.hidden_dropout_prob }
                .or(rk.as_ref().and_then(|k| k.hidden_dropout))
                .unwrap_or(if family == Family::NomicBert { 0.0 } else { 0.1 }) as f32, |k| k.dropout[0]),
            attention_probs_dropout_prob: mk.as_ref().map_or(if distil { raw.attention_dropout } else {
                raw.attention_probs_dropout_prob }
                .or(rk.as_ref().and_then(|k| k.attention_dropout))
                .unwrap_or(if rotary { 0.0 } else { 0.1 }) as f32, |k| k.dropout[1]),
            classifier_dropout: if let Some(k) = &mk { Some(k.dropout[2]) } else { match family {
                Family::DistilBert => Some(raw.seq_classif_dropout.unwrap_or(0.2)),
                Family::Albert => Some(raw.classifier_dropout_prob.unwrap_or(0.1)),
                _ => raw.classifier_dropout,
            }
            .map(|p| p as f32) },
            qa_dropout: distil.then(|| raw.qa_dropout.unwrap_or(0.1) as f32),
            sentence: None,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks that the sizes describe a model that can exist.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("embedding_size", self.embedding_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ] {
            if v == 0 {
                return Err(Error::Config(format!("`{name}` is 0; it must be positive")));
            }
        }
        if self.hidden_size % self.num_attention_heads != 0 {
            return Err(Error::Config(format!(
                "hidden_size {} is not divisible by num_attention_heads {}: each head must get hidden_size / heads \
                 dimensions; fix one of the two in config.json",
                self.hidden_size, self.num_attention_heads
            )));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps >= 0.0) {
            return Err(Error::Config(format!("layer_norm_eps {} must be a finite non-negative number", self.layer_norm_eps)));
        }
        if let Some(w) = self.sliding_window.as_ref().filter(|w| w.layers.len() != self.num_hidden_layers) {
            return Err(Error::Config(format!(
                "the sliding window names {} layers' kinds for num_hidden_layers {}",
                w.layers.len(),
                self.num_hidden_layers
            )));
        }
        if let Some((&id, _)) = self.id2label.iter().next_back() {
            if id + 1 != self.id2label.len() {
                return Err(Error::Config(format!(
                    "id2label has {} labels but its largest index is {id}; indices must be 0..n-1",
                    self.id2label.len()
                )));
            }
        }
        Ok(())
    }

    /// `hidden_size / num_attention_heads`.
    /// The activation of the `[CLS]` projection before a sequence classifier: DeBERTa's `pooler_hidden_act`, else
    /// the family's ([`Family::pooler_activation`]).
    pub fn pooler_activation(&self) -> Activation {
        if let Some(m) = &self.modernbert {
            return m.classifier_activation;
        }
        self.deberta.as_ref().map_or(self.family.pooler_activation(), |d| d.pooler_hidden_act)
    }

    /// The activation of the masked-LM head's transform: ModernBERT's `classifier_activation` (its `head`), else
    /// the family's ([`Family::mlm_activation`]).
    pub fn mlm_activation(&self) -> Activation {
        self.modernbert.as_ref().map_or(self.family.mlm_activation(self.hidden_act), |m| m.classifier_activation)
    }

    /// Whether the token-type table is in the checkpoint ([`Self::token_type_table`]).
    pub fn has_token_type_table(&self) -> bool {
        self.token_type_table
    }

    /// Whether token type ids reach the model (see [`Family::has_token_types`]).
    pub fn has_token_types(&self) -> bool {
        self.family.has_token_types() && self.token_type_table
    }

    /// Whether an absolute position table is added to the embeddings (all but the rotary families and a DeBERTa
    /// with `position_biased_input: false`).
    pub fn has_position_table(&self) -> bool {
        self.positions == Positions::Absolute
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Number of classes of a classification head (`id2label`), 0 when the config names none.
    pub fn num_labels(&self) -> usize {
        self.id2label.len()
    }

    /// The label of class `id`, or `LABEL_{id}` as transformers names classes it was not told about.
    pub fn label(&self, id: usize) -> String {
        self.id2label.get(&id).cloned().unwrap_or_else(|| format!("LABEL_{id}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINI: &str = r#"{"vocab_size": 100, "hidden_size": 12, "num_hidden_layers": 2, "num_attention_heads": 3,
        "intermediate_size": 48, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "max_position_embeddings": 64,
        "type_vocab_size": 2, "pad_token_id": 0, "id2label": {"0": "NEG", "1": "POS"},
        "label2id": {"NEG": 0, "POS": 1}, "architectures": ["BertForSequenceClassification"]}"#;

    #[test]
    fn parses_hf_config() {
        let c = BertConfig::from_json_str(MINI).unwrap();
        assert_eq!((c.hidden_size, c.num_attention_heads, c.head_dim()), (12, 3, 4));
        assert_eq!(c.hidden_act, Activation::Gelu);
        assert_eq!(c.label(1), "POS");
        assert_eq!(c.label2id["NEG"], 0);
        assert_eq!(c.num_labels(), 2);
        assert!(c.tie_word_embeddings);
    }

    #[test]
    fn activations() {
        for (s, a) in [("gelu_new", Activation::GeluTanh), ("gelu_pytorch_tanh", Activation::GeluTanh), ("relu", Activation::Relu)] {
            assert_eq!(Activation::from_hf(s).unwrap(), a);
        }
        let e = BertConfig::from_json_str(&MINI.replace("\"gelu\"", "\"mish\"")).unwrap_err().to_string();
        assert!(e.contains("mish"), "{e}");
    }

    #[test]
    fn rejects_inconsistent_configs() {
        let e = BertConfig::from_json_str(&MINI.replace("\"num_attention_heads\": 3", "\"num_attention_heads\": 5"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not divisible"), "{e}");
        let e = BertConfig::from_json_str(&MINI.replace("\"hidden_size\": 12,", "")).unwrap_err().to_string();
        assert!(e.contains("hidden_size"), "{e}");
        let e = BertConfig::from_json_str(&MINI.replace("\"intermediate_size\": 48", "\"intermediate_size\": 0"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("intermediate_size"), "{e}");
        let e = BertConfig::from_json_str(&MINI.replace("{\"vocab", "{\"position_embedding_type\": \"relative_key\", \"vocab"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("relative_key"), "{e}");
        assert!(BertConfig::from_json_str("not json").is_err());
    }

    /// RoBERTa and XLM-R configs carry BERT's fields and their checkpoints BERT's tensor names: loading one as BERT
    /// gives vectors at cosine ~0.95 to PyTorch's. They must be refused by name, never run.
    #[test]
    fn refuses_other_architectures_by_name() {
        for (kind, arch) in [("deberta", "DebertaModel"), ("megatron-bert", "MegatronBertModel"),
            ("xlm-roberta-xl", "XLMRobertaXLModel"), ("roberta-prelayernorm", "RobertaPreLayerNormForMaskedLM")]
        {
            let with_type = MINI.replace("{\"vocab", &format!("{{\"model_type\": \"{kind}\", \"vocab"));
            let e = BertConfig::from_json_str(&with_type).unwrap_err().to_string();
            assert!(e.contains(&format!("model_type `{kind}` is not supported")) && e.contains("ALBERT"), "{e}");
            let no_type = MINI.replace("BertForSequenceClassification", arch);
            let e = BertConfig::from_json_str(&no_type).unwrap_err().to_string();
            assert!(e.contains(&format!("architecture `{arch}` is not a bert class")), "{e}");
        }
        let bert = MINI.replace("{\"vocab", "{\"model_type\": \"bert\", \"vocab");
        assert_eq!(BertConfig::from_json_str(&bert).unwrap(), BertConfig::from_json_str(MINI).unwrap());
        let mixed = bert.replace("BertForSequenceClassification", "DistilBertForSequenceClassification");
        let e = BertConfig::from_json_str(&mixed).unwrap_err().to_string();
        assert!(e.contains("`DistilBertForSequenceClassification` is not a bert class"), "{e}");
    }

    /// RoBERTa and XLM-R configs use BERT's field names; their positions start at pad_token_id + 1, so 514 table rows
    /// give 512 usable positions.
    #[test]
    fn parses_roberta_configs() {
        for (kind, arch, family) in [("roberta", "RobertaForMaskedLM", Family::Roberta),
            ("xlm-roberta", "XLMRobertaModel", Family::XlmRoberta), ("camembert", "CamembertForMaskedLM", Family::Camembert)]
        {
            let text = MINI
                .replace("{\"vocab", &format!("{{\"model_type\": \"{kind}\", \"vocab"))
                .replace("BertForSequenceClassification", arch)
                .replace("\"max_position_embeddings\": 64", "\"max_position_embeddings\": 514")
                .replace("\"type_vocab_size\": 2, \"pad_token_id\": 0", "\"type_vocab_size\": 1, \"pad_token_id\": 1");
            let c = BertConfig::from_json_str(&text).unwrap();
            assert_eq!(c.family, family);
            assert_eq!((c.max_position_embeddings, c.position_offset, c.pad_token_id), (512, 2, 1));
            assert!(!c.family.has_token_types() && c.family.has_token_type_table());
            assert_eq!(c.family.pooler_activation(), Activation::Tanh);
            assert_eq!(c.family.mlm_activation(Activation::GeluTanh), Activation::Gelu);
            // Without model_type, the architecture says it.
            let c2 = BertConfig::from_json_str(&text.replace(&format!("\"model_type\": \"{kind}\", "), "")).unwrap();
            assert_eq!(c2, c);
            let e = BertConfig::from_json_str(&text.replace(arch, "BertModel")).unwrap_err().to_string();
            assert!(e.contains(&format!("`BertModel` is not a {kind} class")), "{e}");
            let e = BertConfig::from_json_str(&text.replace("514", "2")).unwrap_err().to_string();
            assert!(e.contains("max_position_embeddings 2"), "{e}");
            let e = BertConfig::from_json_str(&text.replace("\"vocab_size\"", "\"is_decoder\": true, \"vocab_size\"")).unwrap_err().to_string();
            assert!(e.contains("is_decoder"), "{e}");
            let e = BertConfig::from_json_str(&text.replace("\"vocab_size\"", "\"position_embedding_type\": \"relative_key_query\", \"vocab_size\""))
                .unwrap_err()
                .to_string();
            assert!(e.contains("relative_key_query"), "{e}");
        }
        // CamemBERT's decoder class is not among those that run; nor is RoBERTa's class under CamemBERT's model_type.
        let camembert = MINI.replace("{\"vocab", "{\"model_type\": \"camembert\", \"vocab");
        for arch in ["CamembertForCausalLM", "RobertaForMaskedLM"] {
            let e = BertConfig::from_json_str(&camembert.replace("BertForSequenceClassification", arch)).unwrap_err();
            assert!(e.to_string().contains(&format!("`{arch}` is not a camembert class")), "{e}");
        }
        // Pre-LN relatives whose class names start like RoBERTa's are not taken for it.
        for arch in ["XLMRobertaXLModel", "RobertaPreLayerNormModel"] {
            let e = BertConfig::from_json_str(&MINI.replace("BertForSequenceClassification", arch)).unwrap_err().to_string();
            assert!(e.contains(&format!("`{arch}` is not a bert class")), "{e}");
        }
        // BERT keeps its positions from 0.
        assert_eq!(BertConfig::from_json_str(MINI).unwrap().position_offset, 0);
    }

    /// ELECTRA and ALBERT: BERT's field names plus `embedding_size` (transformers' default 128 when absent), token
    /// types, positions from 0; ALBERT's default activation is gelu_new and its layer sharing must be 1 group of 1.
    #[test]
    fn parses_electra_and_albert_configs() {
        for (kind, arch, family) in [("electra", "ElectraForPreTraining", Family::Electra),
            ("albert", "AlbertForMaskedLM", Family::Albert)]
        {
            let text = MINI
                .replace("{\"vocab", &format!("{{\"model_type\": \"{kind}\", \"embedding_size\": 8, \"vocab"))
                .replace("BertForSequenceClassification", arch);
            let c = BertConfig::from_json_str(&text).unwrap();
            assert_eq!(c.family, family);
            assert_eq!((c.embedding_size, c.hidden_size, c.position_offset), (8, 12, 0));
            assert!(c.family.has_token_types() && c.family.has_token_type_table());
            assert!(c.family.has_embedding_projection(8, 12));
            let c2 = BertConfig::from_json_str(&text.replace(&format!("\"model_type\": \"{kind}\", "), "")).unwrap();
            assert_eq!(c2, c, "the architecture says the family");
            let c = BertConfig::from_json_str(&text.replace("\"embedding_size\": 8, ", "")).unwrap();
            assert_eq!(c.embedding_size, 128, "transformers' default");
            let e = BertConfig::from_json_str(&text.replace(arch, "BertModel")).unwrap_err().to_string();
            assert!(e.contains(&format!("`BertModel` is not a {kind} class")), "{e}");
        }
        let electra = MINI
            .replace("{\"vocab", "{\"model_type\": \"electra\", \"embedding_size\": 12, \"vocab")
            .replace("BertForSequenceClassification", "ElectraForSequenceClassification");
        let c = BertConfig::from_json_str(&electra).unwrap();
        assert!(!c.family.has_embedding_projection(c.embedding_size, c.hidden_size), "E = H: no embeddings_project");
        assert_eq!(c.family.pooler_activation(), Activation::Gelu);
        assert_eq!(c.family.mlm_activation(Activation::GeluTanh), Activation::Gelu);
        let e = BertConfig::from_json_str(&electra.replace("ElectraForSequenceClassification", "ElectraForCausalLM"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`ElectraForCausalLM` is not a electra class"), "{e}");
        // ALBERT: the default hidden_act is gelu_new; more than one layer group or inner layer is refused by name.
        let albert = MINI
            .replace("{\"vocab", "{\"model_type\": \"albert\", \"vocab")
            .replace(", \"hidden_act\": \"gelu\"", "")
            .replace("BertForSequenceClassification", "AlbertForSequenceClassification");
        let c = BertConfig::from_json_str(&albert).unwrap();
        assert_eq!((c.hidden_act, c.family.pooler_activation()), (Activation::GeluTanh, Activation::Tanh));
        assert_eq!(c.family.mlm_activation(Activation::GeluTanh), Activation::GeluTanh);
        for key in ["num_hidden_groups", "inner_group_num"] {
            let e = BertConfig::from_json_str(&albert.replace("\"vocab_size\"", &format!("\"{key}\": 2, \"vocab_size\"")))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("{key} 2 is not supported")), "{e}");
            assert!(BertConfig::from_json_str(&albert.replace("\"vocab_size\"", &format!("\"{key}\": 1, \"vocab_size\""))).is_ok());
        }
    }

    /// DistilBERT's config names its sizes differently and has no token types or configurable ε.
    #[test]
    fn parses_distilbert_config() {
        let distil = r#"{"model_type": "distilbert", "vocab_size": 100, "dim": 12, "n_layers": 2, "n_heads": 3,
            "hidden_dim": 48, "activation": "gelu", "max_position_embeddings": 64, "sinusoidal_pos_embds": false,
            "pad_token_id": 0, "architectures": ["DistilBertForMaskedLM"]}"#;
        let c = BertConfig::from_json_str(distil).unwrap();
        assert_eq!(c.family, Family::DistilBert);
        assert_eq!((c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size), (12, 2, 3, 48));
        assert_eq!((c.type_vocab_size, c.layer_norm_eps, c.hidden_act), (1, 1e-12, Activation::Gelu));
        assert!(!c.family.has_token_types());
        assert_eq!(c.family.pooler_activation(), Activation::Relu);
        // Without model_type, the architecture says it.
        let c2 = BertConfig::from_json_str(&distil.replace("\"model_type\": \"distilbert\", ", "")).unwrap();
        assert_eq!(c2, c);
        let e = BertConfig::from_json_str(&distil.replace("\"dim\": 12, ", "")).unwrap_err().to_string();
        assert!(e.contains("`dim`"), "{e}");
        let e = BertConfig::from_json_str(&distil.replace("\"sinusoidal_pos_embds\": false", "\"sinusoidal_pos_embds\": true"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sinusoidal_pos_embds"), "{e}");
        let e = BertConfig::from_json_str(&distil.replace("\"gelu\"", "\"mish\"")).unwrap_err().to_string();
        assert!(e.contains("mish"), "{e}");
    }
}
