//! NomicBERT's and GTE's tensor names ↔ BERT's. transformers 5 saves both as their hub repositories do (its
//! `conversion_mapping.py` maps these names to its modules on load and back on save), so one set of names each:
//!
//! | BERT | NomicBERT (`nomic_bert.` or the root) | GTE (`gte.`, the hub's `new.`, or the root) |
//! |---|---|---|
//! | `embeddings.LayerNorm` | `emb_ln` | `embeddings.LayerNorm` |
//! | `encoder.layer.{i}.attention.self.qkv` (`[q; k; v]` rows) | `encoder.layers.{i}.attn.Wqkv` | `encoder.layer.{i}.attention.qkv_proj` |
//! | `…attention.output.dense` | `…attn.out_proj` | `…attention.o_proj` |
//! | `…attention.output.LayerNorm` | `…norm1` | `…attn_ln` |
//! | `…intermediate.up`, `…intermediate.gate` | `…mlp.fc11`, `…mlp.fc12` | — |
//! | `…intermediate.up_gate` (`[up; gate]` rows) | — | `…mlp.up_gate_proj` |
//! | `…output.dense` | `…mlp.fc2` | `…mlp.down_proj` |
//! | `…output.LayerNorm` | `…norm2` | `…mlp_ln` |
//! | `cls.predictions.transform.LayerNorm` | `cls.predictions.transform.layer_norm` | `lm_head.norm` |
//! | `cls.predictions.transform.dense`, `…decoder`, `cls.predictions.bias` | BERT's | `lm_head.dense`, `lm_head.decoder`, `lm_head.decoder.bias` |
//!
//! `…qkv`, `…up`, `…gate` and `…up_gate` are BERT-side names for what BERT itself does not have (a packed
//! projection, a gated feed-forward); the layer asks for them only in these families. The pooler (`pooler.dense`),
//! `classifier` and the token-type table keep BERT's names.

use crate::config::Family;

/// Modules of a layer: BERT's path below `encoder.layer.{i}.` ↔ NomicBERT's below `encoder.layers.{i}.`.
const NOMIC_LAYER: [(&str, &str); 7] = [
    ("attention.self.qkv", "attn.Wqkv"),
    ("attention.output.dense", "attn.out_proj"),
    ("attention.output.LayerNorm", "norm1"),
    ("intermediate.up", "mlp.fc11"),
    ("intermediate.gate", "mlp.fc12"),
    ("output.dense", "mlp.fc2"),
    ("output.LayerNorm", "norm2"),
];

/// Modules of a layer: BERT's path below `encoder.layer.{i}.` ↔ GTE's (the same `encoder.layer.{i}.`).
const GTE_LAYER: [(&str, &str); 6] = [
    ("attention.self.qkv", "attention.qkv_proj"),
    ("attention.output.dense", "attention.o_proj"),
    ("attention.output.LayerNorm", "attn_ln"),
    ("intermediate.up_gate", "mlp.up_gate_proj"),
    ("output.dense", "mlp.down_proj"),
    ("output.LayerNorm", "mlp_ln"),
];

/// Names outside the layers that differ: BERT's full name ↔ the family's (before any prefix).
const NOMIC_OTHER: [(&str, &str); 3] = [
    ("embeddings.LayerNorm.weight", "emb_ln.weight"),
    ("embeddings.LayerNorm.bias", "emb_ln.bias"),
    ("cls.predictions.transform.LayerNorm", "cls.predictions.transform.layer_norm"),
];
const GTE_OTHER: [(&str, &str); 5] = [
    ("cls.predictions.transform.dense", "lm_head.dense"),
    ("cls.predictions.transform.LayerNorm", "lm_head.norm"),
    ("cls.predictions.decoder", "lm_head.decoder"),
    // Both BERT names of the MLM bias are this one tensor; the last of equal matches wins going back.
    ("cls.predictions.decoder.bias", "lm_head.decoder.bias"),
    ("cls.predictions.bias", "lm_head.decoder.bias"),
];

/// A family's names as tables ([`super::modernbert`] keeps ModernBERT's in one too).
pub(super) struct Names {
    /// Where task checkpoints keep the encoder (the bare model keeps it at the root).
    pub prefixes: &'static [&'static str],
    /// The family's module paths (renamed) that live under those prefixes.
    pub encoder: &'static [&'static str],
    /// BERT's `encoder.layer.` ↔ the family's.
    pub layers: &'static str,
    pub layer: &'static [(&'static str, &'static str)],
    pub other: &'static [(&'static str, &'static str)],
}

/// The modules of NomicBERT's and GTE's encoders (the pooler's too).
const ENCODER: &[&str] = &["embeddings.", "emb_ln.", "encoder.", "pooler."];
const NOMIC: Names = Names {
    prefixes: &["nomic_bert."],
    encoder: ENCODER,
    layers: "encoder.layers.",
    layer: &NOMIC_LAYER,
    other: &NOMIC_OTHER,
};
const GTE: Names =
    Names { prefixes: &["gte.", "new."], encoder: ENCODER, layers: "encoder.layer.", layer: &GTE_LAYER, other: &GTE_OTHER };

fn names(family: Family) -> &'static Names {
    if family == Family::Gte { &GTE } else { &NOMIC }
}

/// `module.param` or a whole name, renamed by the table `pairs` (BERT → family when `to_family`): the longest match of
/// a module path ending at a dot or the end.
fn rename(name: &str, pairs: &[(&str, &str)], to_family: bool) -> Option<String> {
    pairs
        .iter()
        .map(|&(b, f)| if to_family { (b, f) } else { (f, b) })
        .filter(|(from, _)| name == *from || name.strip_prefix(from).is_some_and(|r| r.starts_with('.')))
        .max_by_key(|(from, _)| from.len())
        .map(|(from, to)| format!("{to}{}", &name[from.len()..]))
}

/// A BERT name (without `bert.`) → the family's, before the prefix.
fn family_name(n: &Names, name: &str) -> String {
    if let Some(rest) = name.strip_prefix("encoder.layer.") {
        if let Some((index, rest)) = rest.split_once('.') {
            let module = rename(rest, n.layer, true).unwrap_or_else(|| rest.to_string());
            return format!("{}{index}.{module}", n.layers);
        }
    }
    rename(name, n.other, true).unwrap_or_else(|| name.to_string())
}

/// A BERT tensor name (with or without `bert.`) → the names `family`'s checkpoints may store it under besides the
/// bare BERT name, most likely first: under each prefix, then at the root.
pub fn from_bert(family: Family, name: &str) -> Vec<String> {
    from_bert_in(names(family), name)
}

/// [`from_bert`] by `n`'s tables.
pub(super) fn from_bert_in(n: &Names, name: &str) -> Vec<String> {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    let renamed = family_name(n, name);
    let mut out = Vec::new();
    let encoder = n.encoder.iter().any(|p| renamed.starts_with(p));
    if encoder {
        out.extend(n.prefixes.iter().map(|p| format!("{p}{renamed}")));
    }
    if renamed != name {
        out.push(renamed);
    }
    out
}

/// A tensor name of `family` → BERT's (without `bert.`); a name with no BERT twin passes through without the prefix.
pub fn to_bert(family: Family, name: &str) -> String {
    to_bert_in(names(family), name)
}

/// [`to_bert`] by `n`'s tables.
pub(super) fn to_bert_in(n: &Names, name: &str) -> String {
    let bare = n.prefixes.iter().find_map(|p| name.strip_prefix(p)).unwrap_or(name);
    if let Some(rest) = bare.strip_prefix(n.layers) {
        if let Some((index, rest)) = rest.split_once('.') {
            let module = rename(rest, n.layer, false).unwrap_or_else(|| rest.to_string());
            return format!("encoder.layer.{index}.{module}");
        }
    }
    rename(bare, n.other, false).unwrap_or_else(|| bare.to_string())
}

/// The module of layer `l` that peft's LoRA targets in transformers' `NomicBert...`/`Gte...` task classes, e.g.
/// `gte.layers.0.self_attn.q_proj` for `role` `q_proj` (`k_proj`, `v_proj`, `o_proj` under `self_attn`; `up_proj`,
/// `gate_proj`, `down_proj` under `mlp`): transformers' own modules, which its conversion mapping fills from the
/// checkpoint's packed tensors (`qkv_proj` / `Wqkv` rows `[q; k; v]`, `up_gate_proj` rows `[up; gate]`, `fc11` up,
/// `fc12` gate). [`peft_weight`] goes back.
pub fn peft_module(family: Family, l: usize, role: &str) -> String {
    let block = if matches!(role, "q_proj" | "k_proj" | "v_proj" | "o_proj") { "self_attn" } else { "mlp" };
    format!("{}layers.{l}.{block}.{role}", names(family).prefixes[0])
}

/// A LoRA target module of [`peft_module`]'s form (with or without the task prefix) → the checkpoint's tensor (BERT's
/// name, as [`to_bert`] gives it) that holds its weight, and the first of its rows there with their count in units of
/// `hidden` (q/k/v/o) or `intermediate` (up/gate); `None` for a module of another form.
pub fn peft_weight(family: Family, module: &str, hidden: usize, intermediate: usize) -> Option<(String, usize, usize)> {
    let n = names(family);
    let bare = n.prefixes.iter().find_map(|p| module.strip_prefix(p)).unwrap_or(module);
    let (l, role) = bare.strip_prefix("layers.")?.split_once('.')?;
    let l: usize = l.parse().ok()?;
    let (h, i) = (hidden, intermediate);
    let (bert, first, rows) = match (role, family) {
        ("self_attn.q_proj", _) => ("attention.self.qkv", 0, h),
        ("self_attn.k_proj", _) => ("attention.self.qkv", h, h),
        ("self_attn.v_proj", _) => ("attention.self.qkv", 2 * h, h),
        ("self_attn.o_proj", _) => ("attention.output.dense", 0, h),
        ("mlp.up_proj", Family::Gte) => ("intermediate.up_gate", 0, i),
        ("mlp.gate_proj", Family::Gte) => ("intermediate.up_gate", i, i),
        ("mlp.up_proj", _) => ("intermediate.up", 0, i),
        ("mlp.gate_proj", _) => ("intermediate.gate", 0, i),
        ("mlp.down_proj", _) => ("output.dense", 0, h),
        _ => return None,
    };
    Some((format!("encoder.layer.{l}.{bert}.weight"), first, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the tiny checkpoints tests/golden/rotary.py saves with transformers map to BERT's and back.
    #[test]
    fn names_round_trip() {
        let nomic = [
            ("nomic_bert.emb_ln.weight", "embeddings.LayerNorm.weight"),
            ("nomic_bert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
            ("nomic_bert.embeddings.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight"),
            ("nomic_bert.encoder.layers.0.attn.Wqkv.weight", "encoder.layer.0.attention.self.qkv.weight"),
            ("nomic_bert.encoder.layers.1.attn.out_proj.weight", "encoder.layer.1.attention.output.dense.weight"),
            ("nomic_bert.encoder.layers.0.norm1.bias", "encoder.layer.0.attention.output.LayerNorm.bias"),
            ("nomic_bert.encoder.layers.0.mlp.fc11.weight", "encoder.layer.0.intermediate.up.weight"),
            ("nomic_bert.encoder.layers.0.mlp.fc12.weight", "encoder.layer.0.intermediate.gate.weight"),
            ("nomic_bert.encoder.layers.0.mlp.fc2.weight", "encoder.layer.0.output.dense.weight"),
            ("nomic_bert.encoder.layers.0.norm2.weight", "encoder.layer.0.output.LayerNorm.weight"),
            ("nomic_bert.pooler.dense.weight", "pooler.dense.weight"),
            ("cls.predictions.transform.layer_norm.bias", "cls.predictions.transform.LayerNorm.bias"),
            ("cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.weight"),
            ("cls.predictions.bias", "cls.predictions.bias"),
        ];
        let gte = [
            ("gte.embeddings.LayerNorm.weight", "embeddings.LayerNorm.weight"),
            ("gte.encoder.layer.0.attention.qkv_proj.bias", "encoder.layer.0.attention.self.qkv.bias"),
            ("gte.encoder.layer.1.attention.o_proj.weight", "encoder.layer.1.attention.output.dense.weight"),
            ("gte.encoder.layer.0.attn_ln.weight", "encoder.layer.0.attention.output.LayerNorm.weight"),
            ("gte.encoder.layer.0.mlp.up_gate_proj.weight", "encoder.layer.0.intermediate.up_gate.weight"),
            ("gte.encoder.layer.0.mlp.down_proj.bias", "encoder.layer.0.output.dense.bias"),
            ("gte.encoder.layer.0.mlp_ln.bias", "encoder.layer.0.output.LayerNorm.bias"),
            ("gte.pooler.dense.weight", "pooler.dense.weight"),
            ("lm_head.dense.weight", "cls.predictions.transform.dense.weight"),
            ("lm_head.norm.weight", "cls.predictions.transform.LayerNorm.weight"),
            ("lm_head.decoder.weight", "cls.predictions.decoder.weight"),
            ("lm_head.decoder.bias", "cls.predictions.bias"),
        ];
        for (family, pairs, prefix) in [(Family::NomicBert, &nomic[..], "nomic_bert."), (Family::Gte, &gte[..], "gte.")] {
            for &(f, b) in pairs {
                assert_eq!(to_bert(family, f), b, "{f}");
                assert!(from_bert(family, b).contains(&f.to_string()) || f == b, "{b}: {:?}", from_bert(family, b));
                // The bare model (NomicBertModel, GteModel) keeps the encoder at the root.
                if let Some(bare) = f.strip_prefix(prefix) {
                    assert_eq!(to_bert(family, bare), b, "{bare}");
                    assert!(bare == b || from_bert(family, b).contains(&bare.to_string()), "{b}");
                }
            }
        }
        // The hub's GTE prefix.
        assert_eq!(to_bert(Family::Gte, "new.encoder.layer.3.mlp_ln.weight"), "encoder.layer.3.output.LayerNorm.weight");
        assert!(from_bert(Family::Gte, "encoder.layer.3.output.LayerNorm.weight")
            .contains(&"new.encoder.layer.3.mlp_ln.weight".to_string()));
        for n in ["classifier.weight", "classifier.bias"] {
            assert_eq!(to_bert(Family::Gte, n), n);
            assert_eq!(to_bert(Family::NomicBert, n), n);
        }
    }
}
