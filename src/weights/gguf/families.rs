//! The families beyond BERT's layout in GGUF: which `general.architecture` each is written under, and the metadata
//! that states every choice its config.json makes ([`crate::config::Positions`], [`FeedForward`], [`LayerBiases`],
//! the token-type table, MPNet's relative buckets, DeBERTa's disentangled attention), so that a reader that does not
//! parse the JSON (llama.cpp) sees them, and a file whose keys and config disagree is refused.
//!
//! | family | `general.architecture` | whose keys |
//! |---|---|---|
//! | BERT, DistilBERT, RoBERTa, XLM-R, CamemBERT, ELECTRA, ALBERT | `bert` | llama.cpp's |
//! | NomicBERT | `nomic-bert` | llama.cpp's (`nomic-bert.rope.freq_base`), and bertgpu's `bertgpu.encoder.*` |
//! | ModernBERT | `modern-bert` | llama.cpp's (`modern-bert.rope.freq_base`, `.rope.freq_base_swa`, `.attention.sliding_window`, `.attention.sliding_window_pattern`), and bertgpu's `bertgpu.encoder.*` |
//! | MPNet, GTE, DeBERTa-v2/v3, JinaBERT v2 | `bertgpu-mpnet`, `bertgpu-gte`, `bertgpu-deberta-v2`, `bertgpu-jina-bert-v2` | llama.cpp's forms under the architecture's name, bertgpu's for what llama.cpp has no key for |
//!
//! llama.cpp runs none of MPNet, GTE (Alibaba-NLP's `NewModel`) or DeBERTa, and runs JinaBERT from another tensor
//! layout (see [`ARCH_JINA`]): under `bert` it would load them and
//! compute something else without a word (MPNet's relative bias, GTE's rotation and gated block, DeBERTa's
//! disentangled attention ignored), so they take architectures of their own that llama.cpp refuses by name.
//!
//! Reading: the config comes from `bertgpu.config_json` as for BERT, and every key [`arch_keys`] gives for it must be
//! in the file with the same value ([`check_keys`]); a missing key is refused by its name. A llama.cpp `nomic-bert`
//! file, which has no config.json inside, has its config rebuilt from llama.cpp's keys ([`nomic_config_json`]).

use super::{gguf_err, Array, Gguf, Value};
use crate::config::{BertConfig, Family, FeedForward, LayerBiases, Norms, Positions};
use crate::{Error, Result};

/// llama.cpp's architecture name for NomicBERT (`gguf-py` `MODEL_ARCH.NOMIC_BERT`).
pub const ARCH_NOMIC: &str = "nomic-bert";
pub const ARCH_MPNET: &str = "bertgpu-mpnet";
pub const ARCH_GTE: &str = "bertgpu-gte";
pub const ARCH_DEBERTA: &str = "bertgpu-deberta-v2";
/// llama.cpp's architecture name for ModernBERT (`gguf-py` `MODEL_ARCH.MODERN_BERT`).
pub const ARCH_MODERNBERT: &str = "modern-bert";
/// JinaBERT v2 under bertgpu's name: llama.cpp's `jina-bert-v2` stores `mlp.gated_layers` as two tensors
/// (`ffn_gate` its first half, `ffn_up` its second); here it stays one, GTE's `ffn_up_gate`, so a file of ours does
/// not pass for llama.cpp's.
pub const ARCH_JINA: &str = "bertgpu-jina-bert-v2";
/// Every architecture bertgpu reads.
pub const ARCHITECTURES: [&str; 7] =
    ["bert", ARCH_NOMIC, ARCH_MPNET, ARCH_GTE, ARCH_DEBERTA, ARCH_MODERNBERT, ARCH_JINA];

/// The GGUF architecture `family` is written under; a family without one is refused by name.
#[allow(unreachable_patterns)] // a family added later is refused until it has a GGUF form
pub fn architecture(family: Family) -> Result<&'static str> {
    Ok(match family {
        Family::Bert
        | Family::DistilBert
        | Family::Roberta
        | Family::XlmRoberta
        | Family::Camembert
        | Family::Electra
        | Family::Albert => "bert",
        Family::NomicBert => ARCH_NOMIC,
        Family::MPNet => ARCH_MPNET,
        Family::Gte => ARCH_GTE,
        Family::DebertaV2 => ARCH_DEBERTA,
        Family::ModernBert => ARCH_MODERNBERT,
        Family::JinaBert => ARCH_JINA,
        other => {
            return Err(Error::Config(format!(
                "converting a {} (`{}`) checkpoint to GGUF is not supported yet; load its safetensors folder instead",
                other.class_prefix(),
                other.model_type()
            )))
        }
    })
}

/// Whether a key is llama.cpp's (also in its own files) or bertgpu's (only in ours).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    LlamaCpp,
    Bertgpu,
}

fn num(v: usize) -> Result<Value> {
    u32::try_from(v)
        .map(Value::U32)
        .map_err(|_| Error::Config(format!("config.json: {v} does not fit the GGUF's 32-bit field")))
}

fn strings(v: &[&str]) -> Value {
    Value::Array(Array::String(v.iter().map(|s| s.to_string()).collect()))
}

/// The names [`LayerBiases`] has in `bertgpu.encoder.biases`, in its fields' order.
fn bias_names(b: LayerBiases) -> Vec<&'static str> {
    [("qkv", b.qkv), ("attention_output", b.attention_output), ("up", b.up), ("down", b.down)]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| n)
        .collect()
}

/// Every hyper-parameter key a file of `arch` states for `cfg`, with its value: llama.cpp's `{arch}.*` sizes for
/// every architecture, and for the families beyond BERT their choices (see the module's table and docs/GGUF.md).
pub fn arch_keys(cfg: &BertConfig, arch: &str) -> Result<Vec<(String, Value, Owner)>> {
    use Owner::{Bertgpu, LlamaCpp};
    let mut k: Vec<(String, Value, Owner)> = vec![
        (format!("{arch}.context_length"), num(cfg.max_position_embeddings)?, LlamaCpp),
        (format!("{arch}.embedding_length"), num(cfg.hidden_size)?, LlamaCpp),
        (format!("{arch}.feed_forward_length"), num(cfg.intermediate_size)?, LlamaCpp),
        (format!("{arch}.attention.head_count"), num(cfg.num_attention_heads)?, LlamaCpp),
        (format!("{arch}.block_count"), num(cfg.num_hidden_layers)?, LlamaCpp),
        (format!("{arch}.attention.layer_norm_epsilon"), Value::F32(cfg.layer_norm_eps), LlamaCpp),
        (format!("{arch}.attention.causal"), Value::Bool(false), LlamaCpp),
    ];
    if arch == "bert" {
        return Ok(k);
    }
    let mut add = |key: String, v: Value, o: Owner| k.push((key, v, o));
    // The encoder's choices (src/config/encoder.rs), bertgpu's keys in every one of these files.
    let positions = match cfg.positions {
        Positions::Absolute => "absolute",
        Positions::Relative => "relative",
        Positions::Rotary { .. } => "rotary",
        Positions::Alibi => "alibi",
    };
    add("bertgpu.encoder.positions".into(), Value::String(positions.into()), Bertgpu);
    let ff = match cfg.feed_forward {
        FeedForward::Plain => "plain",
        FeedForward::Gated => "gated",
    };
    add("bertgpu.encoder.feed_forward".into(), Value::String(ff.into()), Bertgpu);
    add("bertgpu.encoder.biases".into(), strings(&bias_names(cfg.biases)), Bertgpu);
    add("bertgpu.encoder.token_type_table".into(), Value::Bool(cfg.token_type_table), Bertgpu);
    add("bertgpu.encoder.hidden_act".into(), Value::String(cfg.hidden_act.name().into()), Bertgpu);
    if let Positions::Rotary { theta } = cfg.positions {
        // llama.cpp's key (`LLM_KV_ROPE_FREQ_BASE`), under GTE's own architecture name there; ModernBERT's global
        // layers' theta.
        let owner = if arch == ARCH_NOMIC || arch == ARCH_MODERNBERT { LlamaCpp } else { Bertgpu };
        add(format!("{arch}.rope.freq_base"), Value::F32(theta), owner);
    }
    if let Some(s) = cfg.rope_ntk_factor {
        // llama.cpp's key names (`LLM_KV_ROPE_SCALING_TYPE`, `_FACTOR`), with GTE's own scaling type.
        add(format!("{arch}.rope.scaling.type"), Value::String("ntk".into()), Bertgpu);
        add(format!("{arch}.rope.scaling.factor"), Value::F32(s), Bertgpu);
    }
    if arch == ARCH_MODERNBERT {
        // Pre-LN layers with a final norm, and whether the LayerNorms have a β (llama.cpp's graph has none).
        let norms = match cfg.norms {
            Norms::Post => "post",
            Norms::Pre => "pre",
        };
        add("bertgpu.encoder.norms".into(), Value::String(norms.into()), Bertgpu);
        add("bertgpu.encoder.norm_bias".into(), Value::Bool(cfg.norm_bias), Bertgpu);
    }
    if let Some(w) = &cfg.sliding_window {
        // llama.cpp's keys (`LLM_KV_ATTENTION_SLIDING_WINDOW`: the whole window, `local_attention`, of which it keeps
        // |i − j| ≤ half, its `LLAMA_SWA_TYPE_SYMMETRIC`; `LLM_KV_ROPE_FREQ_BASE_SWA`: the local layers' theta;
        // `LLM_KV_ATTENTION_SLIDING_WINDOW_PATTERN`: every n-th layer global from layer 0, where the layers follow
        // that rule), and bertgpu's list of which layers slide, which says it for any list.
        add(format!("{arch}.attention.sliding_window"), num(2 * w.half)?, LlamaCpp);
        add(format!("{arch}.rope.freq_base_swa"), Value::F32(w.theta), LlamaCpp);
        if let Some(n) = global_every(&w.layers) {
            add(format!("{arch}.attention.sliding_window_pattern"), num(n)?, LlamaCpp);
        }
        add("bertgpu.encoder.sliding_layers".into(), Value::Array(Array::Bool(w.layers.clone())), Bertgpu);
    }
    if cfg.relative_attention_buckets > 0 {
        // llama.cpp's name for T5's bucket count (`LLM_KV_ATTENTION_RELATIVE_BUCKETS_COUNT`).
        add(format!("{arch}.attention.relative_buckets_count"), num(cfg.relative_attention_buckets)?, Bertgpu);
    }
    if let Some(d) = &cfg.deberta {
        add(format!("{arch}.position_biased_input"), Value::Bool(d.position_biased_input), Bertgpu);
        add(format!("{arch}.attention.relative_attention"), Value::Bool(d.relative.is_some()), Bertgpu);
        if let Some(r) = &d.relative {
            add(format!("{arch}.attention.position_buckets"), num(r.buckets)?, Bertgpu);
            add(format!("{arch}.attention.max_relative_positions"), num(r.max_relative_positions)?, Bertgpu);
            // The only forms bertgpu runs (src/config/deberta.rs): both terms, the key projection shared.
            add(format!("{arch}.attention.pos_att_type"), strings(&["c2p", "p2c"]), Bertgpu);
            add(format!("{arch}.attention.share_att_key"), Value::Bool(true), Bertgpu);
            let norm = if r.layer_norm { "layer_norm" } else { "none" };
            add(format!("{arch}.attention.norm_rel_ebd"), Value::String(norm.into()), Bertgpu);
        }
        add(format!("{arch}.pooler_hidden_act"), Value::String(d.pooler_hidden_act.name().into()), Bertgpu);
    }
    Ok(k)
}

/// The n for which layer i slides exactly where i % n ≠ 0 (ModernBERT's `global_attn_every_n_layers`, llama.cpp's
/// sliding-window pattern with its dense layer first), if the layers follow such a rule.
fn global_every(sliding: &[bool]) -> Option<usize> {
    (1..=sliding.len().max(1)).find(|&n| sliding.iter().enumerate().all(|(i, &s)| s == (i % n != 0)))
}

/// Two metadata values that state the same thing (an integer in any width, a float in either).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::F32(_) | Value::F64(_), _) => a.as_f64().is_some() && a.as_f64() == b.as_f64(),
        (Value::String(_) | Value::Bool(_) | Value::Array(_), _) => a == b,
        _ => a.as_u64().is_some() && a.as_u64() == b.as_u64(),
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("`{s}`"),
        Value::Array(Array::String(a)) => format!("{a:?}"),
        other => other.as_f64().map_or_else(|| format!("{other:?}"), |x| x.to_string()),
    }
}

/// Refuses a file of `arch` whose metadata does not state `cfg` (its config.json): a key missing (llama.cpp's
/// keys always; bertgpu's in files that carry `bertgpu.config_json`, which llama.cpp's do not) or saying otherwise.
pub fn check_keys(g: &Gguf, cfg: &BertConfig, arch: &str, ours: bool) -> Result<()> {
    let family_arch = architecture(cfg.family)?;
    if family_arch != arch {
        return Err(gguf_err(format!(
            "general.architecture `{arch}` does not hold a {} model (its config.json says `{}`; that is \
             `{family_arch}`)",
            cfg.family.class_prefix(),
            cfg.family.model_type()
        )));
    }
    for (key, want, owner) in arch_keys(cfg, arch)? {
        match g.get(&key) {
            None if owner == Owner::Bertgpu && !ours => {}
            None => {
                return Err(gguf_err(format!(
                    "metadata `{key}` is missing; a `{arch}` GGUF needs it (re-convert the model with \
                     `bertgpu convert`)"
                )))
            }
            Some(got) if !same(got, &want) => {
                return Err(gguf_err(format!(
                    "metadata `{key}` is {} but the model's config.json says {}; the file is inconsistent",
                    shown(got),
                    shown(&want)
                )))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A NomicBERT config.json rebuilt from a llama.cpp `nomic-bert` file's keys and tensor shapes (`rows` of a tensor
/// by its Hugging Face name): SwiGLU (`silu`), as llama.cpp's converter requires and its graph computes; no
/// token-type table where the file has none.
pub fn nomic_config_json(g: &Gguf, rows: &dyn Fn(&str) -> Option<usize>, vocab: usize, pad: u64) -> Result<String> {
    let u = |key: &str| {
        let key = format!("{ARCH_NOMIC}.{key}");
        g.get(&key).and_then(Value::as_u64).ok_or_else(|| {
            gguf_err(format!("metadata `{key}` is missing or not an unsigned integer; this `{ARCH_NOMIC}` GGUF is incomplete"))
        })
    };
    let f = |key: &str| {
        let key = format!("{ARCH_NOMIC}.{key}");
        g.get(&key).and_then(Value::as_f64).ok_or_else(|| {
            gguf_err(format!("metadata `{key}` is missing or not a number; this `{ARCH_NOMIC}` GGUF is incomplete"))
        })
    };
    Ok(serde_json::json!({
        "model_type": "nomic_bert",
        "architectures": ["NomicBertModel"],
        "vocab_size": rows("embeddings.word_embeddings.weight").unwrap_or(vocab),
        "hidden_size": u("embedding_length")?,
        "num_hidden_layers": u("block_count")?,
        "num_attention_heads": u("attention.head_count")?,
        "intermediate_size": u("feed_forward_length")?,
        "max_position_embeddings": u("context_length")?,
        "type_vocab_size": rows("embeddings.token_type_embeddings.weight").unwrap_or(0),
        "layer_norm_eps": f("attention.layer_norm_epsilon")?,
        "hidden_act": "silu",
        "pad_token_id": pad,
        "rope_parameters": { "rope_type": "default", "rope_theta": f("rope.freq_base")? },
    })
    .to_string())
}
