//! The encoder's parameters from a checkpoint of any family it trains: read under BERT's names through
//! [`Weights::for_family`] (as the inference side reads them), and named as the family's own checkpoints name them
//! ([`crate::weights::family_name`]), so that gradients, checkpoints, the exported folder and LoRA adapters carry
//! the family's tensor names. What differs by family is a few choices, not a copy of the encoder:
//! - RoBERTa, XLM-R, CamemBERT: the position table keeps all its rows, the `pad_token_id + 1` the positions of
//!   real tokens start after included ([`BertConfig::position_offset`]); every token is of type 0.
//! - DistilBERT: no token-type table (an all-zero row stands in for it, not a parameter), every token of type 0; no
//!   dropout after the attention's `out_lin` (`MultiHeadSelfAttention` has none).
//! - ELECTRA: embeddings of `embedding_size` E and, when E differs from H, `embeddings_project` (E → H).
//! - ALBERT: E-wide embeddings, `embedding_hidden_mapping_in` (E → H, always), and one layer every pass runs: its
//!   parameters are loaded once and every pass's indices name them, so the backward sums the passes' gradients into
//!   them ([`super::super::params::put`]); no dropout after its feed-forward (`AlbertLayer` has none).
//! - NomicBERT, GTE: no position table (rotary, [`super::rotary`]); the packed query/key/value projection
//!   (`attn.Wqkv`, `attention.qkv_proj`, one parameter); a gated feed-forward whose `[up; gate]` is one parameter
//!   (GTE's `mlp.up_gate_proj`; NomicBERT's `mlp.fc11` and `mlp.fc12`, joined, each keeping its name); the biases
//!   the family has ([`crate::config::LayerBiases`]: NomicBERT none, GTE none on `up_gate_proj`); the token-type
//!   table where the checkpoint has one (GTE's `type_vocab_size: 0` has none).
//! - MPNet: RoBERTa's positions, no token types, the layers under MPNet's names (`attention.attn.{q,k,v,o}`,
//!   `attention.LayerNorm`), and the relative position bias table `encoder.relative_attention_bias` every layer
//!   adds to its scores ([`super::relative`]), one parameter whose gradient sums the layers'.
//! - DeBERTa-v2/v3: the layers under DeBERTa's names (`attention.self.{query,key,value}_proj`), no position table
//!   where `position_biased_input` is false, no token types where `type_vocab_size` is 0, and the relative table
//!   `encoder.rel_embeddings` with its LayerNorm that every layer's disentangled attention reads through its own
//!   query and key projections ([`super::disentangled`]); the options the inference side refuses stay refused.

use super::{EmbIdx, Encoder, LayerIdx};
use crate::backend::Backend;
use crate::config::{BertConfig, Family};
use crate::weights::{family_name, HostTensor, Weights};
use crate::{Error, Result};

/// A tensor of the checkpoint, copied.
pub(crate) fn get(w: &Weights, name: &str, shape: &[usize]) -> Result<HostTensor> {
    Ok(w.get(name, shape)?.clone())
}

impl<T> Encoder<T> {
    /// The encoder's parameters from a checkpoint (task or bare, of any family), in f32 on
    /// `be`.
    pub fn load<B: Backend<Tensor = T>>(be: &B, cfg: &BertConfig, weights: &Weights) -> Result<Encoder<T>> {
        Self::load_with(be, cfg, weights, false)
    }

    /// [`Self::load`]; with `frozen_base` (LoRA follows) the layers' linear weights stay in the checkpoint's dtype
    /// ([`Encoder::push_weight`]).
    pub fn load_with<B: Backend<Tensor = T>>(be: &B, cfg: &BertConfig, weights: &Weights, frozen_base: bool)
        -> Result<Encoder<T>> {
        cfg.validate()?;
        let fam = cfg.family;
        let (h, e_size, inter) = (cfg.hidden_size, cfg.embedding_size, cfg.intermediate_size);
        let (types, pos) = (cfg.type_vocab_size, cfg.max_position_embeddings + cfg.position_offset);
        // The family's name of BERT's `bert.{n}`.
        let name = |n: &str| -> Result<String> {
            family_name(fam, &format!("bert.{n}"))
                .ok_or_else(|| Error::Config(format!("a `{}` checkpoint has no tensor for BERT's `{n}`", fam.model_type())))
        };
        let w = weights.for_family(fam);
        let zero_types = match cfg.has_token_type_table() {
            true => None,
            false => Some(be.input(&vec![0.0; e_size], 1, e_size)?), // DistilBERT: type 0 adds nothing
        };
        let mut enc = Encoder {
            config: cfg.clone(),
            params: Vec::new(),
            emb: EmbIdx { word: 0, position: None, token_type: None, ln_g: 0, ln_b: 0, project: None },
            layers: Vec::new(),
            lora: None,
            zero_types,
            attn_out_dropout: fam != Family::DistilBert,
            // JinaBERT's MLP drops its gated product instead (`super::jina`).
            ffn_dropout: !matches!(fam, Family::Albert | Family::JinaBert),
            rotary: super::rotary::Rotary::new(cfg),
            relative: None,
            modern: None,
            frozen_base,
            disentangled: None,
            jina: super::jina::Jina::new(cfg),
        };
        if fam == Family::ModernBert {
            enc.rotary = None; // its two rotations are `modern`'s
            enc.load_modern(be, cfg, &w)?;
            return Ok(enc);
        }
        let e = w.pp("embeddings");
        let en = |n: &str| name(&format!("embeddings.{n}")).map(|s| vec![s]);
        let vocab = cfg.vocab_size;
        enc.emb.word = enc.push_table(be, en("word_embeddings.weight")?, &get(&e, "word_embeddings.weight", &[vocab, e_size])?,
            vocab, e_size)?;
        if cfg.has_position_table() {
            enc.emb.position = Some(enc.push_table(be, en("position_embeddings.weight")?,
                &get(&e, "position_embeddings.weight", &[pos, e_size])?, pos, e_size)?);
        }
        if cfg.has_token_type_table() {
            let t = get(&e, "token_type_embeddings.weight", &[types, e_size])?;
            enc.emb.token_type = Some(enc.push_table(be, en("token_type_embeddings.weight")?, &t, types, e_size)?);
        }
        enc.emb.ln_g = enc.push(be, en("LayerNorm.weight")?, &get(&e, "LayerNorm.weight", &[e_size])?, 1, e_size, false)?;
        enc.emb.ln_b = enc.push(be, en("LayerNorm.bias")?, &get(&e, "LayerNorm.bias", &[e_size])?, 1, e_size, false)?;
        if e_size != h || fam == Family::Albert {
            // ELECTRA's `embeddings_project`, ALBERT's `embedding_hidden_mapping_in`.
            let p = w.pp("embeddings_project");
            let (pw, pb) = (get(&p, "weight", &[h, e_size])?, get(&p, "bias", &[h])?);
            enc.emb.project = Some([
                enc.push(be, vec![name("embeddings_project.weight")?], &pw, h, e_size, true)?,
                enc.push(be, vec![name("embeddings_project.bias")?], &pb, 1, h, false)?,
            ]);
        }
        // MPNet: the relative bias table every layer reads, after the embeddings (below every layer).
        let rel_name = name("encoder.relative_attention_bias.weight");
        enc.relative = match cfg.relative_attention_buckets {
            0 => None,
            _ => super::relative::RelIdx::load(be, &mut enc, cfg, &w, rel_name?)?,
        };
        // DeBERTa: the relative table (and its LayerNorm) every layer reads, below every layer.
        enc.disentangled = super::disentangled::DisIdx::load(be, &mut enc, cfg, &w, &name)?;
        // ALBERT: one layer, shared by every pass.
        let distinct = if fam == Family::Albert { 1 } else { cfg.num_hidden_layers };
        for l in 0..distinct {
            if enc.rotary.is_some() {
                let idx = enc.rotary_layer(be, cfg, &w, l, &name)?;
                enc.layers.push(idx);
                continue;
            }
            let lw = w.pp(&format!("encoder.layer.{l}"));
            let n = |s: &str| name(&format!("encoder.layer.{l}.{s}"));
            let pair = |p: &str, out: usize, inp: usize| -> Result<(HostTensor, HostTensor)> {
                let p = lw.pp(p);
                let weight = if inp == 0 { get(&p, "weight", &[out])? } else { get(&p, "weight", &[out, inp])? };
                Ok((weight, get(&p, "bias", &[out])?))
            };
            let ((qw, qb), (kw, kb), (vw, vb)) =
                (pair("attention.self.query", h, h)?, pair("attention.self.key", h, h)?, pair("attention.self.value", h, h)?);
            let qkv_names = |s: &str| -> Result<Vec<String>> {
                ["query", "key", "value"].iter().map(|k| n(&format!("attention.self.{k}.{s}"))).collect()
            };
            let (o_w, o_b) = pair("attention.output.dense", h, h)?;
            let (ln1_g, ln1_b) = pair("attention.output.LayerNorm", h, 0)?;
            // JinaBERT's `mlp.gated_layers` `(2I, H)` has no bias.
            let jina = enc.jina.is_some();
            let (i_w, i_b) = match jina {
                true => (get(&lw.pp("intermediate.up_gate"), "weight", &[2 * inter, h])?, None),
                false => pair("intermediate.dense", inter, h).map(|(w, b)| (w, Some(b)))?,
            };
            let i_name = if jina { "intermediate.up_gate" } else { "intermediate.dense" };
            let (out_w, out_b) = pair("output.dense", h, inter)?;
            let (ln2_g, ln2_b) = pair("output.LayerNorm", h, 0)?;
            let idx = LayerIdx {
                qkv_w: enc.push_weight(be, qkv_names("weight")?, &HostTensor::concat_rows(&[&qw, &kw, &vw])?, 3 * h, h)?,
                qkv_b: Some(enc.push(be, qkv_names("bias")?, &HostTensor::concat_rows(&[&qb, &kb, &vb])?, 1, 3 * h, false)?),
                o_w: enc.push_weight(be, vec![n("attention.output.dense.weight")?], &o_w, h, h)?,
                o_b: Some(enc.push(be, vec![n("attention.output.dense.bias")?], &o_b, 1, h, false)?),
                ln1_g: enc.push(be, vec![n("attention.output.LayerNorm.weight")?], &ln1_g, 1, h, false)?,
                ln1_b: enc.push(be, vec![n("attention.output.LayerNorm.bias")?], &ln1_b, 1, h, false)?,
                // JinaBERT's `gated_layers` is read through a row gather (its halves swapped), which reads f32: in f32
                // whatever the base's dtype, as ModernBERT's `Wi`.
                i_w: match jina {
                    true => enc.push(be, vec![n(&format!("{i_name}.weight"))?], &i_w, 2 * inter, h, true)?,
                    false => enc.push_weight(be, vec![n(&format!("{i_name}.weight"))?], &i_w, i_w.shape[0], h)?,
                },
                i_b: i_b.map(|b| enc.push(be, vec![n(&format!("{i_name}.bias"))?], &b, 1, inter, false)).transpose()?,
                out_w: enc.push_weight(be, vec![n("output.dense.weight")?], &out_w, h, inter)?,
                out_b: Some(enc.push(be, vec![n("output.dense.bias")?], &out_b, 1, h, false)?),
                ln2_g: enc.push(be, vec![n("output.LayerNorm.weight")?], &ln2_g, 1, h, false)?,
                ln2_b: enc.push(be, vec![n("output.LayerNorm.bias")?], &ln2_b, 1, h, false)?,
            };
            enc.layers.push(idx);
        }
        while enc.layers.len() < cfg.num_hidden_layers {
            enc.layers.push(enc.layers[0]);
        }
        Ok(enc)
    }
}

impl<T> Encoder<T> {
    /// Layer `l` of a rotary family (NomicBERT, GTE) from `w` (the checkpoint under BERT's names, as
    /// `model::layer` reads it), each parameter named by `name` (BERT's `encoder.layer.{l}.…` → the family's).
    fn rotary_layer<B: Backend<Tensor = T>>(&mut self, be: &B, cfg: &BertConfig, w: &Weights, l: usize,
        name: &dyn Fn(&str) -> Result<String>) -> Result<LayerIdx> {
        let (h, inter, biases) = (cfg.hidden_size, cfg.intermediate_size, cfg.biases);
        let lw = w.pp(&format!("encoder.layer.{l}"));
        let n = |s: &str| name(&format!("encoder.layer.{l}.{s}"));
        // A linear's weight `(out, in)` and, where the family has it, its bias.
        let linear = |enc: &mut Self, p: &str, out: usize, inp: usize, bias: bool| -> Result<(usize, Option<usize>)> {
            let m = lw.pp(p);
            let wi = enc.push_weight(be, vec![n(&format!("{p}.weight"))?], &get(&m, "weight", &[out, inp])?, out, inp)?;
            let bi = match bias {
                true => Some(enc.push(be, vec![n(&format!("{p}.bias"))?], &get(&m, "bias", &[out])?, 1, out, false)?),
                false => None,
            };
            Ok((wi, bi))
        };
        let (qkv_w, qkv_b) = linear(self, "attention.self.qkv", 3 * h, h, biases.qkv)?;
        let (o_w, o_b) = linear(self, "attention.output.dense", h, h, biases.attention_output)?;
        let norm = |enc: &mut Self, p: &str| -> Result<[usize; 2]> {
            let m = lw.pp(p);
            Ok([
                enc.push(be, vec![n(&format!("{p}.weight"))?], &get(&m, "weight", &[h])?, 1, h, false)?,
                enc.push(be, vec![n(&format!("{p}.bias"))?], &get(&m, "bias", &[h])?, 1, h, false)?,
            ])
        };
        let [ln1_g, ln1_b] = norm(self, "attention.output.LayerNorm")?;
        let (i_w, i_b) = if cfg.family == Family::Gte {
            linear(self, "intermediate.up_gate", 2 * inter, h, biases.up)? // [up; gate] rows already
        } else {
            // NomicBERT's `fc11` (up) and `fc12` (gate): one parameter `[up; gate]`, each half under its own name.
            let (up, gate) = (lw.pp("intermediate.up"), lw.pp("intermediate.gate"));
            let names = vec![n("intermediate.up.weight")?, n("intermediate.gate.weight")?];
            let wt = HostTensor::concat_rows(&[&get(&up, "weight", &[inter, h])?, &get(&gate, "weight", &[inter, h])?])?;
            let wi = self.push_weight(be, names, &wt, 2 * inter, h)?;
            let bi = match biases.up {
                true => {
                    let names = vec![n("intermediate.up.bias")?, n("intermediate.gate.bias")?];
                    let bt = HostTensor::concat_rows(&[&get(&up, "bias", &[inter])?, &get(&gate, "bias", &[inter])?])?;
                    Some(self.push(be, names, &bt, 1, 2 * inter, false)?)
                }
                false => None,
            };
            (wi, bi)
        };
        let (out_w, out_b) = linear(self, "output.dense", h, inter, biases.down)?;
        let [ln2_g, ln2_b] = norm(self, "output.LayerNorm")?;
        Ok(LayerIdx { qkv_w, qkv_b, o_w, o_b, ln1_g, ln1_b, i_w, i_b, out_w, out_b, ln2_g, ln2_b })
    }
}
