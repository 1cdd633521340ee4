//! What the rotary families (NomicBERT, GTE) change in the trainable encoder: the rotation of the queries and keys
//! in place of a position table, and the gated feed-forward. Both are choices of [`super::Encoder`], read by its
//! forward and backward; their parameters are loaded in [`super::load`].
//!
//! # The math
//!
//! Rotary: `qkv_r = R_t·qkv` ([`Backend::rotary`]), each head's dimension pair `(i, i + d/2)` of token `t` turned by
//! the angle `t·f_i`; the values are not turned. A rotation is orthogonal, `R⁻¹ = Rᵀ = R(−angle)`, so the backward is
//! `dqkv = R_tᵀ·dqkv_r`: the same `Backend::rotary` kernel reading a second table, the first's with its sine half
//! negated (`cos(−a) = cos a`, `sin(−a) = −sin a`); no kernel of its own. The attention keeps (and its backward
//! reads) the turned `qkv_r`; the gradient of the values passes as it is.
//!
//! Gated feed-forward: `u* = h1·W1ᵀ (+ b1)` `(R, 2I)` = `[up | gate]`, `g* = up ⊙ act(gate)` ([`Backend::glu`]),
//! `o = g·W2ᵀ + b2`; back: `du = [dg ⊙ act(gate) | dg ⊙ up ⊙ act'(gate)]` ([`Backend::glu_backward`]). GTE drops
//! `g` out before `down_proj` (`GteMLP`'s dropout, stream [`GLU_STREAM`]` + l` of layer `l`); NomicBERT's MLP has
//! no dropout of its own. The kept `g` is the dropped one (what `W2` read); the backward applies the same mask to
//! `dg` before `glu_backward`.
//!
//! NomicBERT's layers have no biases and GTE's up/gate projection none ([`crate::config::LayerBiases`]): those
//! parameters do not exist, and the linears run without them.

use super::{apply_dropout, DropoutPlan, Saved};
use crate::backend::{Activation, Backend};
use crate::config::{BertConfig, Family, Positions};
use crate::model::rotary::Rope;
use crate::weights::HostTensor;
use crate::Result;

/// The dropout stream of layer `l`'s gated product (GTE's `GteMLP.dropout`) is `GLU_STREAM + l`: apart from
/// every other encoder site's (`0..3L + 1`) and the head's (`u32::MAX`).
pub const GLU_STREAM: u32 = 0x8000_0000;

/// The rotary families' choices: the frequencies, and whether the gated product is dropped out.
pub(super) struct Rotary {
    rope: Rope,
    /// GTE: `GteMLP` drops its gated product out before `down_proj`.
    glu_dropout: bool,
}

impl Rotary {
    /// `None` for the families with a position table.
    pub(super) fn new(cfg: &BertConfig) -> Option<Rotary> {
        Rope::new(cfg).map(|rope| Rotary { rope, glu_dropout: cfg.family == crate::config::Family::Gte })
    }

    /// The forward's `(T, d)` table of cosines and sines.
    pub(super) fn table<B: Backend>(&self, be: &B, seq: usize) -> Result<B::Tensor> {
        self.rope.upload(be, seq)
    }

    /// The backward's table ([`inverse`] of the forward's).
    pub(super) fn inverse<B: Backend>(&self, be: &B, seq: usize) -> Result<B::Tensor> {
        inverse(&self.rope, be, seq)
    }

    /// The gated product of layer `l` from `u` = `[up | gate]`, dropped out where GTE drops it.
    pub(super) fn glu<B: Backend>(&self, be: &B, u: &B::Tensor, act: Activation, l: usize, dropout: Option<DropoutPlan>)
        -> Result<B::Tensor> {
        let g = be.glu(u, act)?;
        let site = dropout.filter(|_| self.glu_dropout).and_then(|d| d.site(d.hidden, GLU_STREAM + l as u32));
        apply_dropout(be, g, site)
    }

    /// Back through [`Self::glu`]: `dg` `(R, I)` → `du` `(R, 2I)`.
    pub(super) fn glu_backward<B: Backend>(&self, be: &B, dg: &B::Tensor, u: &B::Tensor, act: Activation, l: usize,
        saved: &Saved<B::Tensor>) -> Result<B::Tensor> {
        let site = saved.dropout.filter(|_| self.glu_dropout).and_then(|d| d.site(d.hidden, GLU_STREAM + l as u32));
        match site {
            Some(m) => be.glu_backward(&be.dropout(dg, m)?, u, act),
            None => be.glu_backward(dg, u, act),
        }
    }
}

/// The backward's table of `rope`: the forward's with its sine half negated, so that `Backend::rotary` turns by the
/// opposite angles (the transpose of the forward's rotation).
pub(super) fn inverse<B: Backend>(rope: &Rope, be: &B, seq: usize) -> Result<B::Tensor> {
    let t = rope.table(seq)?;
    let d = t.shape[1];
    let mut v = t.to_f32()?;
    for row in v.chunks_exact_mut(d.max(1)) {
        row[d / 2..].iter_mut().for_each(|s| *s = -*s);
    }
    be.upload(&HostTensor::f32(vec![seq, d], v)?)
}

/// Whether a NomicBERT or GTE config.json is in its hub repository's form (nomic-ai's `n_embd`, `rotary_emb_base`...;
/// Alibaba-NLP's `model_type: "new"`), naming the key that says so.
fn hub_form(family: Family, original: &serde_json::Value) -> Option<String> {
    const NOMIC_HUB: [&str; 6] = ["n_embd", "n_head", "n_layer", "n_inner", "n_positions", "rotary_emb_base"];
    match family {
        Family::NomicBert => NOMIC_HUB.iter().find(|k| original.get(**k).is_some()).map(|k| format!("`{k}`")),
        Family::Gte => (original["model_type"] == "new").then(|| "model_type `new`".to_string()),
        _ => None,
    }
}

/// Refuses, by name, a checkpoint whose trained folder could not be written in transformers' form: GTE's NTK-scaled
/// rotation (gte-base/large-en-v1.5's `rope_scaling` `ntk`), which transformers' `GteModel` has no rope type for, so
/// that the folder would compute another model there. A hub-form config otherwise trains, and its folder is written
/// in transformers' keys ([`transformers_config`]). Other families pass.
pub fn check_config_keys(cfg: &BertConfig, original: &serde_json::Value) -> Result<()> {
    match (hub_form(cfg.family, original), cfg.rope_ntk_factor) {
        (Some(key), Some(f)) => Err(crate::Error::Config(format!(
            "training a `{}` checkpoint with the NTK-scaled rotation (rope_scaling `ntk`, factor {f}; its config.json \
             is in its hub repository's form, {key}) is not supported: the folder written is transformers' {}For... \
             class, which has no NTK rotation, so it would compute another model",
            cfg.family.model_type(),
            cfg.family.class_prefix()
        ))),
        _ => Ok(()),
    }
}

/// The config.json of a folder trained from `cfg` (read from `original`): `original` itself, except that a NomicBERT
/// or GTE config in its hub repository's form is written in the keys of transformers' `NomicBertConfig` /
/// `GteConfig` (the trained tensors are already under transformers' names), from what bertgpu read: the sizes, the
/// activation, LayerNorm's epsilon, the dropouts, the rotation's theta. Of the hub config only the keys that mean
/// the same to transformers (labels, special token ids, initializer range, dtype) are kept; the rest (nomic-ai's
/// `n_embd`..., `auto_map`'s remote code, Alibaba-NLP's `pack_qkv`...) would be read as another model or ignored.
pub fn transformers_config(cfg: &BertConfig, original: &serde_json::Value) -> Result<serde_json::Value> {
    if hub_form(cfg.family, original).is_none() {
        return Ok(original.clone());
    }
    const KEPT: [&str; 9] = ["id2label", "label2id", "problem_type", "bos_token_id", "eos_token_id", "initializer_range",
        "classifier_dropout", "dtype", "torch_dtype"];
    let theta = match cfg.positions {
        Positions::Rotary { theta } => theta,
        _ => return Err(crate::Error::Config(format!("a `{}` config without rotary positions", cfg.family.model_type()))),
    };
    let act = match cfg.hidden_act {
        Activation::GeluTanh => "gelu_pytorch_tanh",
        a => a.name(),
    };
    let mut out = serde_json::Map::new();
    for k in KEPT {
        if let Some(v) = original.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    let types = original.get("type_vocab_size").cloned().unwrap_or_else(|| cfg.type_vocab_size.into());
    for (k, v) in [
        ("model_type", serde_json::json!(cfg.family.model_type())),
        ("vocab_size", cfg.vocab_size.into()),
        ("hidden_size", cfg.hidden_size.into()),
        ("num_hidden_layers", cfg.num_hidden_layers.into()),
        ("num_attention_heads", cfg.num_attention_heads.into()),
        ("intermediate_size", cfg.intermediate_size.into()),
        ("hidden_act", act.into()),
        ("hidden_dropout_prob", f64::from(cfg.hidden_dropout_prob).into()),
        ("attention_probs_dropout_prob", f64::from(cfg.attention_probs_dropout_prob).into()),
        ("max_position_embeddings", cfg.max_position_embeddings.into()),
        ("type_vocab_size", types),
        ("layer_norm_eps", f64::from(cfg.layer_norm_eps).into()),
        ("pad_token_id", cfg.pad_token_id.into()),
        ("tie_word_embeddings", cfg.tie_word_embeddings.into()),
        ("rope_parameters", serde_json::json!({ "rope_type": "default", "rope_theta": f64::from(theta) })),
    ] {
        out.insert(k.into(), v);
    }
    Ok(serde_json::Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;
    use crate::backend::AttentionShape;

    /// The backward's table turns back what the forward's turned (R(−a)·R(a) = I), and it is the forward's
    /// transpose: for any w, ⟨w, R·x⟩ = ⟨Rᵀ·w, x⟩, checked against central differences of ⟨w, R·x⟩ in x.
    #[test]
    fn the_inverse_table_is_the_rotations_transpose() {
        let cfg_json = r#"{"model_type": "gte", "hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 1,
            "intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 16, "rope_theta": 10.0}"#;
        let cfg = BertConfig::from_json_str(cfg_json).unwrap();
        let r = Rotary::new(&cfg).unwrap();
        let be = CpuBackend::new();
        let s = AttentionShape { batch: 2, seq: 5, heads: 2, head_dim: 8 };
        let n = s.batch * s.seq * 3 * 16;
        let x: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
        let w: Vec<f32> = (0..n).map(|i| ((i * 53 % 97) as f32 / 48.0) - 1.0).collect();
        let (fwd, inv) = (r.table(&be, s.seq).unwrap(), r.inverse(&be, s.seq).unwrap());
        let rows = s.batch * s.seq;
        let turn = |v: &[f32], t| be.rotary(&be.input(v, rows, 48).unwrap(), t, s).unwrap().to_vec();
        let back = turn(&turn(&x, &fwd), &inv);
        let worst = back.iter().zip(&x).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(worst < 1e-6, "R(−a)·R(a)·x differs from x by {worst}");
        let grad = turn(&w, &inv);
        let dot = |v: &[f32]| turn(v, &fwd).iter().zip(&w).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>();
        let eps = 1e-2f32;
        for i in (0..n).step_by(7) {
            let (mut up, mut down) = (x.clone(), x.clone());
            up[i] += eps;
            down[i] -= eps;
            let fd = (dot(&up) - dot(&down)) / (2.0 * eps as f64);
            assert!((fd - grad[i] as f64).abs() < 1e-3, "element {i}: finite difference {fd}, Rᵀ·w {}", grad[i]);
        }
    }
}
