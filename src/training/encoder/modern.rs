//! What ModernBERT changes in the trainable encoder (transformers `ModernBertModel`): pre-LN layers, its embeddings
//! and its final norm. A choice of [`super::Encoder`] (its parameters, linears and dropout plan
//! are the encoder's), read by its forward and backward when the checkpoint is a ModernBERT one.
//!
//! # The math
//!
//! Forward, with the tensors kept for the backward marked * (LN without β where `norm_bias` is false):
//! ```text
//! e* = tok[ids]                x₀ = LN_e(e)                                   (no positions, no token types)
//! per layer l:  n1* = LN1(x)  (layer 0: n1 = x, `attn_norm` is nn.Identity)
//!   qkv* = R_l·(n1·Wqkvᵀ)       ctx* = attention(qkv, mask, window_l)         a = ctx·Woᵀ        p1* = x + a
//!   n2* = LN2(p1)             u* = n2·Wi'ᵀ   g* = glu(u)                      o = g·W2ᵀ          x' = p1 + o
//! out = LN_f(x_L)  (`final_norm`, x_L kept)
//! ```
//! `R_l` turns by the global theta on the global layers (every `global_attn_every_n_layers`-th from layer 0) and by
//! the local theta on the others, which also add the window's constant score bias (`model::window`: 0 where
//! |i − j| ≤ half, a large negative beyond; `Backend::attention_biased`, its gradient never asked) and read their own
//! mask, where a padded query whose window holds no real key sees every key alike (`Window::training_mask`). `Wi` is
//! `[input; gate]` with the activation on `input`; `Wi' = swap(Wi)` is its halves swapped ([`super::gated`]), so that
//! `glu`'s `up ⊙ act(gate)` is ModernBERT's `act(input) ⊙ gate`.
//!
//! Backward: `dx_L = LN_f'(dout)`; per layer, down: `dg = do·W2`, `du = glu'(dg)`, `dWi = swap(duᵀ·n2)`,
//! `dn2 = du·Wi'`, `dp1 = dx' + LN2'(dn2)`, `dctx = dp1·Wo`, `dqkv = R_lᵀ·attention'(dctx)` (the rotation's
//! transpose: [`super::rotary`]'s inverse table of the layer's theta), `dn1 = dqkv·Wqkv`, `dx = dp1 + LN1'(dn1)`
//! (layer 0: `+ dn1`); the embeddings: `LN_e'` then the scatter-add into `tok` (none into the padding row: its
//! `padding_idx`). A LayerNorm without β gets no β gradient (`layernorm_backward`'s is dropped).
//!
//! With `mlp_bias`, `Wi`'s bias swaps its halves likewise (`b' = b·P`, back `db = db'·Pᵀ`), and a LoRA adapter on `Wi`
//! (peft's, on the module in its own `[input; gate]` order) has its B's rows swapped: [`super::gated`].
//!
//! Dropout (a training forward given a [`DropoutPlan`]), where `ModernBertModel` drops: `x₀ = drop(LN_e(e))`
//! (`embedding_dropout`, the plan's embedding probability, stream 0), the attention probabilities (`attention_dropout`,
//! stream `3l + 1`), `a = drop(ctx·Woᵀ)` (`ModernBertAttention.out_drop`, `attention_dropout` too, stream `3l + 2`)
//! and `g = drop(glu(u))` before `mlp.Wo` (`mlp_dropout`, the hidden probability, stream
//! [`super::rotary::GLU_STREAM`]` + l`); nothing after `mlp.Wo`. The backward applies each mask to its gradient
//! (the attention's recomputed).

use super::gated::SwappedUp;
use super::rotary::GLU_STREAM;
use super::{apply_dropout, DropoutPlan, EmbIdx, Encoder, LayerIdx, Saved};
use crate::backend::{Backend, EmbeddingTables};
use crate::config::{BertConfig, Family};
use crate::model::rotary::Rope;
use crate::model::window::Window;
use crate::tokenizer::Batch;
use crate::weights::{family_name, Weights};
use crate::{Error, Result};

/// A LayerNorm's γ and, where `norm_bias` is true, β.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Norm {
    pub g: usize,
    pub b: Option<usize>,
}

/// One layer's parameters: `attn_norm` (none at layer 0), `Wqkv`, `Wo`, `mlp_norm`, `Wi`, `mlp.Wo`, and whether
/// it slides.
#[derive(Clone, Copy)]
pub(super) struct ModernLayer {
    attn_norm: Option<Norm>,
    mlp_norm: Norm,
    local: bool,
}

/// ModernBERT's choices: the layers' norms, the embeddings' and the final norm, the two rotations and the window.
pub(super) struct Modern<T> {
    layers: Vec<ModernLayer>,
    pub(super) emb_norm: Norm,
    pub(super) final_norm: Norm,
    /// The zero β of the norms without one `(1, H)`, not a parameter.
    zero_beta: T,
    global: Rope,
    local: Rope,
    window: Window,
    /// `Wi`'s halves swapped ([`super::gated`]).
    up: SwappedUp,
    /// With `mlp_bias`: the `(2I, 2I)` permutation matrix P of the swap, `b' = b·P` (a bias is one row).
    swap: Option<T>,
}

/// What a ModernBERT forward keeps beyond [`Saved`]'s.
pub(super) struct ModernSaved<T> {
    layers: Vec<ModernLayerSaved<T>>,
    /// The last layer's output, the final norm's input.
    last: T,
    /// The local layers' attention mask (`Window::training_mask`).
    local_mask: T,
}

struct ModernLayerSaved<T> {
    x: T,
    n1: Option<T>,
    qkv: T,
    ctx: T,
    p1: T,
    n2: T,
    u: T,
    g: T,
    /// `Wi'`, the swapped `Wi` this forward read.
    wi: T,
}

impl<T> Encoder<T> {
    /// ModernBERT's parameters from `w` (the checkpoint under BERT's names), in `enc`'s order: the embeddings'
    /// table and norm, each layer's, the final norm.
    pub(super) fn load_modern<B: Backend<Tensor = T>>(&mut self, be: &B, cfg: &BertConfig, w: &Weights) -> Result<()> {
        let (h, inter, biases) = (cfg.hidden_size, cfg.intermediate_size, cfg.biases);
        let name = |n: &str| -> Result<String> {
            family_name(Family::ModernBert, &format!("bert.{n}"))
                .ok_or_else(|| Error::Config(format!("a `modernbert` checkpoint has no tensor for BERT's `{n}`")))
        };
        let get = super::get;
        let norm = |enc: &mut Self, p: &str| -> Result<Norm> {
            let m = w.pp(p);
            let g = enc.push(be, vec![name(&format!("{p}.weight"))?], &get(&m, "weight", &[h])?, 1, h, false)?;
            let b = match cfg.norm_bias {
                true => Some(enc.push(be, vec![name(&format!("{p}.bias"))?], &get(&m, "bias", &[h])?, 1, h, false)?),
                false => None,
            };
            Ok(Norm { g, b })
        };
        let vocab = cfg.vocab_size;
        let word = self.push_table(be, vec![name("embeddings.word_embeddings.weight")?],
            &get(&w.pp("embeddings"), "word_embeddings.weight", &[vocab, h])?, vocab, h)?;
        self.emb = EmbIdx { word, position: None, token_type: None, ln_g: 0, ln_b: 0, project: None };
        let emb_norm = norm(self, "embeddings.LayerNorm")?;
        let window = Window::new(cfg).ok_or_else(|| Error::Config("a ModernBERT config without its window".into()))?;
        let slides = cfg.sliding_window.as_ref().map(|s| s.layers.clone()).unwrap_or_default();
        let mut layers = Vec::new();
        for l in 0..cfg.num_hidden_layers {
            let lw = w.pp(&format!("encoder.layer.{l}"));
            let n = |s: &str| name(&format!("encoder.layer.{l}.{s}"));
            let linear = |enc: &mut Self, p: &str, out: usize, inp: usize, bias: bool| -> Result<(usize, Option<usize>)> {
                let m = lw.pp(p);
                let wi = enc.push(be, vec![n(&format!("{p}.weight"))?], &get(&m, "weight", &[out, inp])?, out, inp, true)?;
                let bi = match bias {
                    true => Some(enc.push(be, vec![n(&format!("{p}.bias"))?], &get(&m, "bias", &[out])?, 1, out, false)?),
                    false => None,
                };
                Ok((wi, bi))
            };
            let attn_norm = match l {
                0 => None, // transformers' nn.Identity
                _ => Some(norm(self, &format!("encoder.layer.{l}.attention.LayerNorm"))?),
            };
            let (qkv_w, qkv_b) = linear(self, "attention.self.qkv", 3 * h, h, biases.qkv)?;
            let (o_w, o_b) = linear(self, "attention.output.dense", h, h, biases.attention_output)?;
            let mlp_norm = norm(self, &format!("encoder.layer.{l}.intermediate.LayerNorm"))?;
            let (i_w, i_b) = linear(self, "intermediate.up_gate", 2 * inter, h, biases.up)?;
            let (out_w, out_b) = linear(self, "output.dense", h, inter, biases.down)?;
            // The encoder's common indices (LoRA's linears; `ln2_b + 1` of the last layer is the final norm, the
            // first parameter above the layers); the norms are ModernLayer's.
            self.layers.push(LayerIdx { qkv_w, qkv_b, o_w, o_b, ln1_g: mlp_norm.g, ln1_b: mlp_norm.g, i_w, i_b,
                out_w, out_b, ln2_g: mlp_norm.g, ln2_b: out_b.unwrap_or(out_w) });
            layers.push(ModernLayer { attn_norm, mlp_norm, local: slides.get(l) == Some(&true) });
        }
        let final_norm = norm(self, "encoder.final_norm")?;
        let sliding = cfg.sliding_window.as_ref().ok_or_else(|| Error::Config("a ModernBERT config without its window".into()))?;
        let up = SwappedUp::new(inter);
        self.modern = Some(Modern {
            layers,
            emb_norm,
            final_norm,
            zero_beta: be.input(&vec![0.0; h], 1, h)?,
            global: Rope::new(cfg).ok_or_else(|| Error::Config("a ModernBERT config without its rotary theta".into()))?,
            local: Rope::with_theta(sliding.theta, cfg.head_dim()),
            window,
            swap: biases.up.then(|| up.permutation(be)).transpose()?,
            up,
        });
        Ok(())
    }

    /// A LayerNorm of `x` (ModernBERT's, `head.norm` too; a pre-training head's): without β where `n.b` is `None`
    /// (ModernBERT's `norm_bias: false`).
    pub(crate) fn norm<B: Backend<Tensor = T>>(&self, be: &B, x: &T, n: Norm) -> Result<T> {
        let beta = match n.b {
            Some(b) => self.t(b),
            None => &self.modern.as_ref().ok_or_else(|| Error::Input("a LayerNorm without β outside ModernBERT".into()))?.zero_beta,
        };
        be.layernorm(x, None, self.t(n.g), beta, self.config.layer_norm_eps)
    }

    /// Back through [`Self::norm`] from its input `x`: γ's (and β's) gradient into `grads`; returns `dx`.
    pub(crate) fn norm_backward<B: Backend<Tensor = T>>(&self, be: &B, dy: &T, x: &T, n: Norm, grads: &mut [Option<T>])
        -> Result<T> {
        let (dx, dg, db) = be.layernorm_backward(dy, x, self.t(n.g), self.config.layer_norm_eps)?;
        if self.trains(n.g) {
            super::put(be, grads, n.g, dg)?;
        }
        if let Some(b) = n.b.filter(|&b| self.trains(b)) {
            super::put(be, grads, b, db)?;
        }
        Ok(dx)
    }

    /// ModernBERT's forward (see the module's doc): the final norm's output `(B*T, H)` and what the backward needs.
    pub(super) fn modern_forward<B: Backend<Tensor = T>>(&self, be: &B, batch: &Batch, dropout: Option<DropoutPlan>)
        -> Result<(T, Saved<T>)> {
        let site = |attention: bool, stream: u32| {
            dropout.and_then(|d| d.site(if attention { d.attention } else { d.hidden }, stream))
        };
        let m = self.modern.as_ref().expect("a ModernBERT encoder");
        let zero_types = self.zero_types.as_ref().ok_or_else(|| Error::Input("no token-type stand-in".into()))?;
        let eps = self.config.layer_norm_eps;
        let tables = EmbeddingTables { word: self.t(self.emb.word), position: None, token_type: zero_types,
            ln_gamma: self.t(m.emb_norm.g), ln_beta: &m.zero_beta, eps };
        let mask = be.mask(batch)?;
        // The local layers' own: a padded query with no real key in its window sees every key alike.
        let local_mask = be.input(&m.window.training_mask(batch), batch.b, batch.t)?;
        let typed = Batch { token_type_ids: vec![0; batch.token_type_ids.len()], ..batch.clone() };
        let emb_sum = be.embeddings_sum(&typed, &tables)?; // (B*T, H)
        let emb_drop = dropout.and_then(|d| d.site(d.embedding, 0)); // `embedding_dropout`
        let mut x = apply_dropout(be, self.norm(be, &emb_sum, m.emb_norm)?, emb_drop)?;
        let shape = self.shape(batch);
        let (global, local, window) = (m.global.upload(be, batch.t)?, m.local.upload(be, batch.t)?,
            m.window.upload(be, batch.t)?.bias);
        let mut layers = Vec::with_capacity(m.layers.len());
        for (l, (ml, li)) in m.layers.iter().zip(&self.layers).enumerate() {
            let s = 3 * l as u32;
            let n1 = ml.attn_norm.map(|n| self.norm(be, &x, n)).transpose()?;
            let qkv = self.linear(be, n1.as_ref().unwrap_or(&x), li.qkv_w, li.qkv_b)?; // (B*T, 3H)
            let qkv = be.rotary(&qkv, if ml.local { &local } else { &global }, shape)?;
            let lm = if ml.local { &local_mask } else { &mask };
            let ctx = match site(true, s + 1) {
                Some(d) => be.attention_dropout_biased(&qkv, lm, ml.local.then_some(&window), shape, d)?,
                None => be.attention_biased(&qkv, lm, ml.local.then_some(&window), shape)?, // (B*T, H)
            };
            let a = apply_dropout(be, self.linear(be, &ctx, li.o_w, li.o_b)?, site(true, s + 2))?; // `out_drop`
            let p1 = be.add(&x, &a)?;
            let n2 = self.norm(be, &p1, ml.mlp_norm)?;
            // (B*T, 2I) = [gate | input], and Wi' (2I, H) = [gate; input] for the backward.
            let (u, wi) = m.up.forward(be, self, &n2, li.i_w, li.i_b.zip(m.swap.as_ref()))?;
            let g = be.glu(&u, self.config.hidden_act)?; // act(input) ⊙ gate
            let g = apply_dropout(be, g, site(false, GLU_STREAM + l as u32))?; // `ModernBertMLP.drop`
            let o = self.linear(be, &g, li.out_w, li.out_b)?;
            let next = be.add(&p1, &o)?;
            layers.push(ModernLayerSaved { x, n1, qkv, ctx, p1, n2, u, g, wi });
            x = next;
        }
        let out = self.norm(be, &x, m.final_norm)?;
        let saved = Saved { mask, emb_sum, projected: None, layers: Vec::new(), dropout, relative: None,
            modern: Some(ModernSaved { layers, last: x, local_mask }), disentangled: None };
        Ok((out, saved))
    }

    /// Back through [`Self::modern_forward`] (see the module's doc); `top: Some(k)` stops above the last `k` layers.
    pub(super) fn modern_backward<B: Backend<Tensor = T>>(&self, be: &B, batch: &Batch, saved: Saved<T>, dout: T,
        grads: &mut [Option<T>], top: Option<usize>) -> Result<()> {
        let m = self.modern.as_ref().expect("a ModernBERT encoder");
        let ms = saved.modern.as_ref().ok_or_else(|| Error::Input("a ModernBERT backward without its forward's tensors".into()))?;
        let shape = self.shape(batch);
        let depth = top.unwrap_or(self.layers.len()).min(self.layers.len());
        let (global, local) = (super::rotary::inverse(&m.global, be, batch.t)?, super::rotary::inverse(&m.local, be, batch.t)?);
        let window = m.window.upload(be, batch.t)?.bias;
        let mut dx = self.norm_backward(be, &dout, &ms.last, m.final_norm, grads)?;
        for (l, ((ml, li), ls)) in m.layers.iter().zip(&self.layers).zip(&ms.layers).enumerate().rev().take(depth) {
            let s = 3 * l as u32;
            // x' = p1 + o: dp1 gets dx' directly and through the feed-forward.
            let dg = self.linear_backward(be, &dx, &ls.g, li.out_w, li.out_b, grads)?;
            let dg = apply_dropout(be, dg, saved.site(false, GLU_STREAM + l as u32))?;
            let du = be.glu_backward(&dg, &ls.u, self.config.hidden_act)?; // (B*T, 2I)
            let bias = li.i_b.zip(m.swap.as_ref());
            let dn2 = m.up.backward(be, self, &du, &ls.n2, li.i_w, &ls.wi, bias, grads)?; // (B*T, H)
            let dp1 = be.add(&dx, &self.norm_backward(be, &dn2, &ls.p1, ml.mlp_norm, grads)?)?;
            // p1 = x + a.
            let da = saved.site(true, s + 2).map(|d| be.dropout(&dp1, d)).transpose()?;
            let dctx = self.linear_backward(be, da.as_ref().unwrap_or(&dp1), &ls.ctx, li.o_w, li.o_b, grads)?;
            let lm = if ml.local { &ms.local_mask } else { &saved.mask };
            let (dqkv, _) = be.attention_backward_biased(&dctx, &ls.qkv, lm, ml.local.then_some(&window), shape,
                saved.site(true, s + 1), false)?;
            let dqkv = be.rotary(&dqkv, if ml.local { &local } else { &global }, shape)?;
            let dn1 = self.linear_backward(be, &dqkv, ls.n1.as_ref().unwrap_or(&ls.x), li.qkv_w, li.qkv_b, grads)?;
            let dn1 = match ml.attn_norm {
                Some(n) => self.norm_backward(be, &dn1, &ls.x, n, grads)?,
                None => dn1,
            };
            dx = be.add(&dp1, &dn1)?;
        }
        if let Some(l) = &self.lora {
            grads.iter_mut().enumerate().filter(|(i, _)| !l.trains(*i)).for_each(|(_, g)| *g = None);
        }
        if top.is_some() || self.lora.is_some() {
            return Ok(());
        }
        let dx = apply_dropout(be, dx, saved.dropout.and_then(|d| d.site(d.embedding, 0)))?; // `embedding_dropout`
        let demb = self.norm_backward(be, &dx, &saved.emb_sum, m.emb_norm, grads)?;
        let typed = Batch { token_type_ids: vec![0; batch.token_type_ids.len()], ..batch.clone() };
        let (dw, _, _) = be.embeddings_backward(&demb, &typed, self.params[self.emb.word].rows,
            self.config.max_position_embeddings, 1, Some(self.config.pad_token_id))?;
        super::put(be, grads, self.emb.word, dw)?;
        Ok(())
    }
}
