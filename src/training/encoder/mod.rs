//! The BERT encoder as a trainable thing: every parameter in f32 on the backend, a forward that keeps what the
//! backward needs, and the backward through every layer down to the embedding tables. The task heads, their losses
//! and the optimiser step are in [`super::finetune`]. BERT's relatives that are this encoder under other names
//! (RoBERTa, XLM-R, CamemBERT, DistilBERT, ELECTRA, ALBERT, MPNet, DeBERTa-v2/v3) train through the same code:
//! [`load`] has what each one changes, [`relative`] MPNet's relative position bias, [`disentangled`] DeBERTa's
//! relative table (its attention: `Backend::attention_disentangled`, back through
//! `Backend::attention_backward_disentangled`). The rotary families (NomicBERT, GTE) turn their
//! queries and keys instead of reading a position table and gate their feed-forward: [`rotary`] has their math;
//! JinaBERT's ALiBi and gated feed-forward: [`jina`]; its `gated_layers` and ModernBERT's `Wi` are read with their
//! halves swapped: [`gated`].
//!
//! # The math
//!
//! Forward, per layer (post-LN, as `BertLayer`), with the tensors kept for the backward marked *:
//! ```text
//! e* = word[ids] + pos[p] + type[tt]           x* = LN(e)           (ELECTRA with E ≠ H: x = LN(e)·Wpᵀ + bp)
//! qkv* = x·Wqkvᵀ + bqkv                         ctx* = attention(qkv, mask)
//! a = ctx·Woᵀ + bo        p1* = a + x           h1* = LN(p1)
//! u* = h1·W1ᵀ + b1        g* = GELU(u)          o = g·W2ᵀ + b2
//! p2* = o + h1            x' = LN(p2)           (x' is the next layer's x*)
//! ```
//! Backward, for a linear `y = x·Wᵀ + b`: `dW = dyᵀ·x`, `db = Σ_rows dy`, `dx = dy·W`; through `LN`:
//! `Backend::layernorm_backward` from the LN's input; a residual sum passes its gradient to both addends (and a
//! tensor read twice sums the two gradients); the attention: `Backend::attention_backward` (MPNet's, with the
//! relative bias every layer adds to its scores: `Backend::attention_backward_biased`, whose `dbias` of every layer
//! sums into the one bias table); the embeddings:
//! `Backend::embeddings_backward` (scatter-add into the three tables). RoBERTa's (and MPNet's) positions are
//! transformers' `create_position_ids_from_input_ids`: a real token reads row `pad_token_id + 1 + t`, a padding token
//! row `pad_token_id` (`padding_idx`); the forward gathers each token's row (`Backend::gather_rows`, added to the
//! sum of the other two tables) and the real tokens' gradients go back to their rows (`Backend::scatter_rows`):
//! row `padding_idx` gets none, as `nn.Embedding(padding_idx=…)` in transformers, and the rows before it none (no
//! token reads them). So every position's output, padding included, is transformers' (QA's loss reads them all).
//! The families without token types read type 0 for every token (DistilBERT from a zero row that is not a
//! parameter).
//!
//! Dropout (a training forward given a [`DropoutPlan`]; evaluation and inference have none), at `BertModel`'s four
//! places: `x₀ = drop(LN(e))` (`BertEmbeddings`), `a = drop(ctx·Woᵀ + bo)` (`BertSelfOutput`, before the residual),
//! `o = drop(g·W2ᵀ + b2)` (`BertOutput`, likewise), and the attention probabilities (`BertSelfAttention`,
//! `Backend::attention_dropout`). Each is `y = x ⊙ M/(1 − p)` with a mask recomputed from (seed, stream) by
//! `Backend::dropout` ([`crate::backend::Dropout`]), so the backward applies the same op to the gradient: `dx = dy ⊙
//! M/(1 − p)`; the attention's backward recomputes its mask. The kept tensors (`x*`, `ctx*`, `p1*`, ...) are the
//! dropped ones, which is what the next op read. A probability of 0 skips its site (no op is recorded). GTE has a
//! fifth, `GteMLP`'s dropout on the gated product before `down_proj` ([`rotary`]).

mod disentangled;
mod gated;
mod jina;
mod load;
mod modern;
mod relative;
mod rotary;

use std::borrow::Cow;

use super::lora::Lora;
use super::params::{put, Param};
use crate::backend::{Activation, AttentionShape, Backend, Dropout, Dtype, EmbeddingTables};
use crate::config::{BertConfig, Family};
use crate::tokenizer::Batch;
use crate::weights::HostTensor;
use crate::{Error, Result};

pub(crate) use load::get;
pub(crate) use gated::swap_halves;
pub(crate) use modern::Norm;
pub(crate) use rotary::{check_config_keys, transformers_config};

/// Indices of the embeddings' parameters.
#[derive(Clone, Copy)]
struct EmbIdx {
    word: usize,     // (V, E)
    /// `(max_position_embeddings + position_offset, E)`: RoBERTa's whole table, the rows before its first position
    /// included (they get no gradient, and decay as transformers' AdamW decays them); none for the rotary families.
    position: Option<usize>,
    /// `(type_vocab_size, E)`; none for DistilBERT.
    token_type: Option<usize>,
    ln_g: usize,     // (E)
    ln_b: usize,     // (E)
    /// ELECTRA's `embeddings_project` weight `(H, E)` and bias `(H)`, when E differs from H.
    project: Option<[usize; 2]>,
}

/// Indices of one layer's parameters (a bias is `None` where the family's linear has none). A gated feed-forward's
/// `i_w` is `[up; gate]` `(2I, H)`.
#[derive(Clone, Copy)]
struct LayerIdx {
    qkv_w: usize,
    qkv_b: Option<usize>,
    o_w: usize,
    o_b: Option<usize>,
    ln1_g: usize,
    ln1_b: usize,
    i_w: usize,
    i_b: Option<usize>,
    out_w: usize,
    out_b: Option<usize>,
    ln2_g: usize,
    ln2_b: usize,
}

/// The dropout of one training forward: the probabilities and the seed every site's mask derives from (site `s`
/// gets stream `s`: the embeddings 0; layer `l`'s attention probabilities `3l + 1`, its attention output `3l + 2`,
/// its feed-forward output `3l + 3`; a task head [`HEAD_STREAM`]). A new seed for every forward.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DropoutPlan {
    /// `hidden_dropout_prob`.
    pub hidden: f32,
    /// `attention_probs_dropout_prob`.
    pub attention: f32,
    /// A task head's (the encoder does not read it).
    pub classifier: f32,
    /// DeBERTa's `ContextPooler`: the first token's before the pooler's dense layer (`pooler_dropout`).
    pub pooler: f32,
    /// ModernBERT's embeddings' (`embedding_dropout`; its `mlp_dropout` is `hidden`); the other families drop their
    /// embeddings at `hidden`.
    pub embedding: f32,
    pub seed: u32,
}

/// Dropout while fine-tuning: the probabilities (transformers' Trainer trains with the checkpoint's:
/// [`DropoutOptions::of_config`]) and the seed of every training forward's masks. Micro-batch `n` (counted from 0
/// over the fine-tuning) gets [`Self::plan`]`(n)`: a new mask everywhere for every micro-batch, the same for a seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DropoutOptions {
    pub hidden: f32,
    pub attention: f32,
    /// Before a classification head (sequence and token classification).
    pub classifier: f32,
    /// DeBERTa's `pooler_dropout`, before its sequence classifier's `ContextPooler` (0 for the other families).
    pub pooler: f32,
    /// ModernBERT's `embedding_dropout` (the other families read `hidden` there).
    pub embedding: f32,
    pub seed: u64,
}

impl DropoutOptions {
    /// The checkpoint's `hidden_dropout_prob`, `attention_probs_dropout_prob`, `classifier_dropout` (the hidden
    /// one where it has none), DeBERTa's `pooler_dropout` and ModernBERT's `embedding_dropout` and `mlp_dropout`
    /// (hidden), with `seed`.
    pub fn of_config(cfg: &BertConfig, seed: u64) -> DropoutOptions {
        let (hidden, embedding) = cfg.modernbert.as_ref()
            .map_or((cfg.hidden_dropout_prob, cfg.hidden_dropout_prob), |m| (m.mlp_dropout, m.embedding_dropout));
        let pooler = cfg.deberta.as_ref().map_or(0.0, |d| d.pooler_dropout);
        let classifier = cfg.classifier_dropout.unwrap_or(cfg.hidden_dropout_prob);
        DropoutOptions { hidden, attention: cfg.attention_probs_dropout_prob, classifier, pooler, embedding, seed }
    }

    /// Checks every probability is in `[0, 1)`.
    pub fn check(&self) -> Result<()> {
        [self.hidden, self.attention, self.classifier, self.pooler, self.embedding].iter()
            .try_for_each(|&p| Dropout { p, seed: 0, stream: 0 }.check())
    }

    /// Micro-batch `n`'s plan: its seed is output `n` of a SplitMix64 seeded from `seed` (apart from the shuffles'
    /// stream of the same seed), its top 32 bits.
    pub fn plan(&self, n: u64) -> DropoutPlan {
        const SALT: u64 = 0xD209_0D70_5EED_0001;
        let state = (self.seed ^ SALT).wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let seed = (super::rng::SplitMix64::new(state).next_u64() >> 32) as u32;
        DropoutPlan { hidden: self.hidden, attention: self.attention, classifier: self.classifier, pooler: self.pooler,
            embedding: self.embedding, seed }
    }
}

/// The stream of a task head's dropout (the classifier's input), apart from every encoder site's.
pub const HEAD_STREAM: u32 = u32::MAX;

impl DropoutPlan {
    /// Site `stream`'s dropout at probability `p`; `None` when `p` is 0 (nothing to do).
    pub fn site(&self, p: f32, stream: u32) -> Option<Dropout> {
        (p > 0.0).then_some(Dropout { p, seed: self.seed, stream })
    }
}

/// `x` through `d`'s dropout; `x` itself without one.
pub fn apply_dropout<B: Backend>(be: &B, x: B::Tensor, d: Option<Dropout>) -> Result<B::Tensor> {
    match d {
        Some(d) => be.dropout(&x, d),
        None => Ok(x),
    }
}

/// What the encoder's forward keeps for its backward.
pub struct Saved<T> {
    /// The attention's mask (DeBERTa's with its padded queries marked: [`Encoder::attention_mask`]).
    pub mask: T,
    emb_sum: T,
    /// The projection's input (the embeddings after their LayerNorm and dropout), when there is one.
    projected: Option<T>,
    layers: Vec<LayerSaved<T>>,
    dropout: Option<DropoutPlan>,
    /// MPNet's relative bias of this forward.
    relative: Option<relative::RelSaved<T>>,
    /// ModernBERT's layers ([`modern`]).
    modern: Option<modern::ModernSaved<T>>,
    /// DeBERTa's relative table of this forward.
    disentangled: Option<disentangled::DisSaved<T>>,
}

impl<T> Saved<T> {
    /// The site `stream`'s dropout of the forward that made this (hidden probability or attention's).
    fn site(&self, attention: bool, stream: u32) -> Option<Dropout> {
        self.dropout.and_then(|d| d.site(if attention { d.attention } else { d.hidden }, stream))
    }
}

struct LayerSaved<T> {
    x: T,
    qkv: T,
    ctx: T,
    pre1: T,
    h1: T,
    u: T,
    g: T,
    pre2: T,
    /// DeBERTa: the table this layer projected where its `pos_dropout` dropped it, and the projection `(R, 3H)`.
    rel: Option<T>,
    pos: Option<T>,
    /// JinaBERT: `Wg'`, the swapped `gated_layers` `(2I, H)` the forward read ([`gated`]).
    wg: Option<T>,
}

/// The parameter list being trained, and the encoder's part of it.
pub struct Encoder<T> {
    pub config: BertConfig,
    pub params: Vec<Param<T>>,
    emb: EmbIdx,
    layers: Vec<LayerIdx>,
    /// LoRA adapters ([`super::lora`]): with them, only the parameters [`Lora::trains`] names get gradients.
    pub lora: Option<Lora<T>>,
    /// DistilBERT's stand-in for the token-type table: one zero row `(1, E)`, not a parameter.
    zero_types: Option<T>,
    /// Whether the attention's output projection is dropped (`BertSelfOutput`'s dropout; DistilBERT's `out_lin`
    /// has none).
    attn_out_dropout: bool,
    /// Whether the feed-forward's output is dropped (`BertOutput`'s dropout; ALBERT's layer has none).
    ffn_dropout: bool,
    /// NomicBERT's and GTE's rotation and gated feed-forward ([`rotary`]).
    rotary: Option<rotary::Rotary>,
    /// MPNet's relative position bias table, shared by every layer ([`relative`]).
    relative: Option<relative::RelIdx>,
    /// ModernBERT's pre-LN layers, norms, rotations and window ([`modern`]).
    modern: Option<modern::Modern<T>>,
    /// Whether the layers' linear weights are frozen (LoRA follows the load) and so kept in the checkpoint's stored
    /// dtype ([`Self::push_weight`]).
    frozen_base: bool,
    /// DeBERTa's relative table and its LayerNorm, shared by every layer ([`disentangled`]).
    disentangled: Option<disentangled::DisIdx>,
    /// JinaBERT's ALiBi and gated feed-forward ([`jina`]).
    jina: Option<jina::Jina>,
}


impl<T> Encoder<T> {
    /// Adds a parameter (uploaded in f32) and returns its index.
    pub fn push<B: Backend<Tensor = T>>(&mut self, be: &B, names: Vec<String>, t: &HostTensor, rows: usize,
        cols: usize, decay: bool) -> Result<usize> {
        let values = t.to_f32()?;
        if values.len() != rows * cols {
            return Err(Error::Weights(format!("{}: {} values for ({rows}, {cols})", names[0], values.len())));
        }
        let tensor = be.input(&values, rows, cols)?;
        self.params.push(Param { names, tensor, rows, cols, matrix: t.shape.len() == 2, decay, stored: Dtype::F32 });
        Ok(self.params.len() - 1)
    }

    /// Adds a layer's linear weight `(rows, cols)`. With a frozen base (LoRA) an f16, Q8_0 or Q4_0 weight stays in
    /// that dtype on the backend (the forward's `linear` and the backward's `matmul_weight` read it as stored; it
    /// gets no gradient); otherwise it is [`Self::push`]ed in f32, a quantized one refused: its values are an
    /// approximation that only LoRA trains beside.
    pub fn push_weight<B: Backend<Tensor = T>>(&mut self, be: &B, names: Vec<String>, t: &HostTensor, rows: usize,
        cols: usize) -> Result<usize> {
        let dtype = t.data.dtype();
        if !self.frozen_base && dtype.is_quantized() {
            return Err(Error::Config(format!(
                "a {} base trains only its LoRA adapters: its weights are quantized, and training them needs f32 \
                 values; fine-tune it with LoRA (--lora R, or fineTune's `lora`), or train every weight of the f32 or \
                 f16 checkpoint it was converted from ({})",
                dtype.name().to_uppercase(),
                names[0]
            )));
        }
        self.push_stored(be, names, t, rows, cols, B::upload)
    }

    /// Adds an embedding table `(rows, cols)`. With a frozen base (LoRA never trains the embeddings) an f16, Q8_0 or
    /// Q4_0 table stays as stored (`Backend::upload_table`): the lookup decodes only the rows it gathers, and a tied
    /// masked-LM decoder reads it as the frozen linears are read. A bert-base's Q8_0 word table is 24 MiB where f32
    /// takes 89. Otherwise it is [`Self::push`]ed in f32.
    pub fn push_table<B: Backend<Tensor = T>>(&mut self, be: &B, names: Vec<String>, t: &HostTensor, rows: usize,
        cols: usize) -> Result<usize> {
        self.push_stored(be, names, t, rows, cols, |be, t| be.upload_table(&std::sync::Arc::new(t.clone())))
    }

    /// [`Self::push_weight`]'s and [`Self::push_table`]'s common part: without a frozen base, or for an f32 tensor,
    /// a plain [`Self::push`]; otherwise the tensor is checked to be `(rows, cols)` and kept in its stored dtype by
    /// `upload` (`Backend::upload` for a linear, `Backend::upload_table` for an embedding table).
    fn push_stored<B: Backend<Tensor = T>>(&mut self, be: &B, names: Vec<String>, t: &HostTensor, rows: usize,
        cols: usize, upload: impl FnOnce(&B, &HostTensor) -> Result<T>) -> Result<usize> {
        let dtype = t.data.dtype();
        if !self.frozen_base || dtype == Dtype::F32 {
            return self.push(be, names, t, rows, cols, true);
        }
        if t.shape != [rows, cols] {
            return Err(Error::Weights(format!("{}: shape {:?} for ({rows}, {cols})", names[0], t.shape)));
        }
        let tensor = upload(be, t)?;
        self.params.push(Param { names, tensor, rows, cols, matrix: true, decay: true, stored: dtype });
        Ok(self.params.len() - 1)
    }

    /// Whether the linears are frozen and kept as stored ([`Self::push_weight`]).
    pub fn frozen_base(&self) -> bool {
        self.frozen_base
    }

    pub fn t(&self, i: usize) -> &T {
        &self.params[i].tensor
    }

    /// The word embeddings' index (the masked-LM decoder is tied to them).
    pub(super) fn word_embeddings(&self) -> usize {
        self.emb.word
    }

    /// RoBERTa's position row of every token `(B*T)`, as transformers' `create_position_ids_from_input_ids`: a
    /// padding token (`input_ids == padding_idx`) reads row `pad_token_id`, the others `pad_token_id + 1 + n`, `n`
    /// the tokens before it that are not padding (with right padding, the token's index).
    fn position_rows(&self, batch: &Batch) -> Vec<u32> {
        let pad = self.config.pad_token_id;
        let mut rows = Vec::with_capacity(batch.input_ids.len());
        for ids in batch.input_ids.chunks(batch.t.max(1)) {
            let mut n = 0;
            for &id in ids {
                n += (id != pad) as u32;
                rows.push(if id == pad { pad } else { pad + n });
            }
        }
        rows
    }

    /// The batch as the embeddings read it: every token of type 0 in the families without token types (RoBERTa's
    /// tokenizers return none, DistilBERT has no table). A padding token among the real ones is refused where
    /// positions start after it (transformers numbers positions around it: see `model::embeddings`).
    fn embedding_batch<'a>(&self, batch: &'a Batch) -> Result<Cow<'a, Batch>> {
        let c = &self.config;
        if c.position_offset > 0 {
            let pad = c.pad_token_id;
            if batch.input_ids.iter().zip(&batch.attention_mask).any(|(&id, &m)| m != 0 && id == pad) {
                return Err(Error::Input(format!(
                    "the input contains the padding token (id {pad}) as a real token, e.g. `<pad>` typed in the text: \
                     RoBERTa-style models number positions around it, so remove it from the text"
                )));
            }
        }
        Ok(match c.has_token_types() {
            true => Cow::Borrowed(batch),
            false => Cow::Owned(Batch { token_type_ids: vec![0; batch.token_type_ids.len()], ..batch.clone() }),
        })
    }

    fn shape(&self, batch: &Batch) -> AttentionShape {
        let heads = self.config.num_attention_heads;
        AttentionShape { batch: batch.b, seq: batch.t, heads, head_dim: self.config.hidden_size / heads }
    }

    /// The last hidden state `(B*T, H)` of a batch, and what the backward needs; with `dropout`, a training
    /// forward (see the module's doc).
    pub fn forward<B: Backend<Tensor = T>>(&self, be: &B, batch: &Batch, dropout: Option<DropoutPlan>)
        -> Result<(T, Saved<T>)> {
        if let Some(d) = dropout {
            [d.hidden, d.attention, d.embedding].iter().try_for_each(|&p| Dropout { p, seed: 0, stream: 0 }.check())?;
        }
        if self.modern.is_some() {
            return self.modern_forward(be, batch, dropout);
        }
        let site = |attention: bool, stream: u32| {
            dropout.and_then(|d| d.site(if attention { d.attention } else { d.hidden }, stream))
        };
        let eps = self.config.layer_norm_eps;
        let em = self.emb;
        // RoBERTa's positions are per token (`position_rows`): each token's row gathered `(B*T, E)`, which the
        // embeddings read as the table of one sequence of B*T tokens (token r reads row r), so that the sum is
        // `word + pos + type` in BERT's order.
        let token_positions = match (self.config.position_offset, em.position) {
            (0, _) | (_, None) => None,
            (_, Some(p)) => {
                let positions = self.config.max_position_embeddings;
                if batch.t > positions {
                    return Err(Error::Input(format!(
                        "sequences of {} tokens are longer than the model's {positions} positions; truncate the input",
                        batch.t
                    )));
                }
                Some(be.gather_rows(self.t(p), &self.position_rows(batch))?) // (B*T, E)
            }
        };
        let tables = EmbeddingTables {
            word: self.t(em.word),
            position: token_positions.as_ref().or(em.position.map(|p| self.t(p))),
            token_type: match (em.token_type, &self.zero_types) {
                (Some(i), _) => self.t(i),
                (None, Some(z)) => z,
                (None, None) => return Err(Error::Input("the encoder has no token-type table nor its stand-in".into())),
            },
            ln_gamma: self.t(em.ln_g),
            ln_beta: self.t(em.ln_b),
            eps,
        };
        let mask = self.attention_mask(be, batch)?;
        let emb_batch = self.embedding_batch(batch)?;
        let emb_sum = match token_positions {
            Some(_) => {
                let flat = Batch { b: 1, t: batch.b * batch.t, ..emb_batch.into_owned() };
                be.embeddings_sum(&flat, &tables)? // (B*T, E)
            }
            None => be.embeddings_sum(emb_batch.as_ref(), &tables)?, // (B*T, E)
        };
        let x0 = be.layernorm(&emb_sum, None, self.t(em.ln_g), self.t(em.ln_b), eps)?;
        let x0 = self.zero_padding(be, batch, apply_dropout(be, x0, site(false, 0))?)?;
        let (mut x, projected) = match em.project {
            Some([w, b]) => (self.linear(be, &x0, w, b)?, Some(x0)), // (B*T, H), with a LoRA adapter on it
            None => (x0, None),
        };
        let shape = self.shape(batch);
        let rope = self.rotary.as_ref().map(|r| r.table(be, batch.t)).transpose()?; // (T, d)
        let rel = self.relative.map(|r| r.forward(be, self.t(r.table), batch.t)).transpose()?;
        let alibi = self.jina.as_ref().map(|j| j.bias(be, batch.t)).transpose()?; // (heads, 2T − 1), constant
        let bias = rel.as_ref().map(|r| &r.bias).or(alibi.as_ref());
        let dis = self.disentangled.map(|d| d.forward(be, self, batch.t)).transpose()?;
        let mut layers = Vec::with_capacity(self.layers.len());
        for (l, li) in self.layers.iter().enumerate() {
            let s = 3 * l as u32;
            let qkv = self.linear(be, &x, li.qkv_w, li.qkv_b)?; // (B*T, 3H)
            let qkv = match &rope {
                Some(r) => be.rotary(&qkv, r, shape)?, // q and k turned; the attention keeps these
                None => qkv,
            };
            let (mut rel_l, mut pos) = (None, None);
            let ctx = match (site(true, s + 1), &dis) {
                (d, Some(ds)) => {
                    rel_l = disentangled::dropped(be, &ds.rel, site(false, disentangled::pos_stream(l)))?;
                    let p = self.linear(be, rel_l.as_ref().unwrap_or(&ds.rel), li.qkv_w, li.qkv_b)?; // (R, 3H)
                    let ctx = match d {
                        Some(d) => be.attention_dropout_disentangled(&qkv, &mask, &p, &ds.index, shape, d)?,
                        None => be.attention_disentangled(&qkv, &mask, &p, &ds.index, shape)?,
                    };
                    pos = Some(p);
                    ctx
                }
                (Some(d), None) => be.attention_dropout_biased(&qkv, &mask, bias, shape, d)?,
                (None, None) => be.attention_biased(&qkv, &mask, bias, shape)?, // (B*T, H)
            };
            let a = self.linear(be, &ctx, li.o_w, li.o_b)?;
            let a = apply_dropout(be, a, site(false, s + 2).filter(|_| self.attn_out_dropout))?;
            let pre1 = be.add(&a, &x)?;
            let h1 = be.layernorm(&pre1, None, self.t(li.ln1_g), self.t(li.ln1_b), eps)?;
            let (u, wg) = match &self.jina {
                // (B*T, 2I), its halves swapped; Wg' (2I, H) kept for the backward
                Some(j) => j.up.forward(be, self, &h1, li.i_w, None).map(|(u, wg)| (u, Some(wg)))?,
                None => (self.linear(be, &h1, li.i_w, li.i_b)?, None), // (B*T, I); gated: (B*T, 2I)
            };
            let g = match (&self.rotary, &self.jina) {
                (Some(r), _) => r.glu(be, &u, self.config.hidden_act, l, dropout)?,
                (_, Some(j)) => j.glu(be, &u, self.config.hidden_act, l, dropout)?,
                _ => be.activation(&u, self.config.hidden_act)?,
            };
            let o = self.linear(be, &g, li.out_w, li.out_b)?; // (B*T, H)
            let o = apply_dropout(be, o, site(false, s + 3).filter(|_| self.ffn_dropout))?;
            let pre2 = be.add(&o, &h1)?;
            let next = be.layernorm(&pre2, None, self.t(li.ln2_g), self.t(li.ln2_b), eps)?;
            layers.push(LayerSaved { x, qkv, ctx, pre1, h1, u, g, pre2, rel: rel_l, pos, wg });
            x = next;
        }
        Ok((x, Saved { mask, emb_sum, projected, layers, dropout, relative: rel, modern: None, disentangled: dis }))
    }

    /// The attention's mask `(B, T)`: the batch's ([`Backend::mask`]), and DeBERTa's with every padded query marked
    /// [`crate::backend::UNIFORM_FILLED`]: transformers' `DisentangledSelfAttention` masks the scores with the outer
    /// product of the padding mask (`masked_fill` by `finfo.min`), so a padded query's probabilities are 1/T over
    /// every key and its scores get no gradient. Nothing real reads those rows, but question answering's loss reads
    /// every position's logit.
    pub(super) fn attention_mask<B: Backend<Tensor = T>>(&self, be: &B, batch: &Batch) -> Result<T> {
        if self.config.family != Family::DebertaV2 {
            return be.mask(batch);
        }
        let m: Vec<f32> = batch.attention_mask.iter().map(|&m| if m != 0 { 1.0 } else { crate::backend::UNIFORM_FILLED })
            .collect();
        be.input(&m, batch.b, batch.t)
    }

    /// DeBERTa's `embeddings * mask` (`DebertaV2Embeddings`): the padding rows of `x (B*T, E)` zeroed, in the forward
    /// and (the same product) in the backward; every other family's `x` as it is.
    fn zero_padding<B: Backend<Tensor = T>>(&self, be: &B, batch: &Batch, x: T) -> Result<T> {
        if self.config.family != Family::DebertaV2 || batch.attention_mask.iter().all(|&m| m != 0) {
            return Ok(x);
        }
        let real: Vec<u32> = (0..batch.attention_mask.len() as u32).filter(|&r| batch.attention_mask[r as usize] != 0).collect();
        match real.is_empty() {
            true => be.input(&vec![0.0; batch.b * batch.t * self.params[self.emb.word].cols], batch.b * batch.t,
                self.params[self.emb.word].cols),
            false => be.scatter_rows(&be.gather_rows(&x, &real)?, &real, batch.b * batch.t),
        }
    }

    /// `y = x·Wᵀ + b` of an encoder layer, plus its LoRA adapters' updates.
    pub(super) fn linear<B: Backend<Tensor = T>>(&self, be: &B, x: &T, w: usize, b: impl Into<Option<usize>>)
        -> Result<T> {
        let y = be.linear(x, self.t(w), b.into().map(|b| self.t(b)), Activation::None)?;
        match &self.lora {
            Some(l) => l.forward(be, &self.params, x, w, y),
            None => Ok(y),
        }
    }

    /// Whether parameter `i` gets a gradient (all do, unless LoRA freezes them).
    pub fn trains(&self, i: usize) -> bool {
        self.lora.as_ref().is_none_or(|l| l.trains(i))
    }

    /// Indices of layer `l`'s weights: the fused query/key/value, attention.output, intermediate, output.
    pub(crate) fn layer_linears(&self, l: usize) -> [usize; 4] {
        let li = self.layers[l];
        [li.qkv_w, li.o_w, li.i_w, li.out_w]
    }

    /// Back through `y = x·Wᵀ + b` (parameters `w`, `b`, and LoRA adapters on `w`): the gradients of those that
    /// train into `grads`; returns `dx`.
    pub fn linear_backward<B: Backend<Tensor = T>>(&self, be: &B, dy: &T, x: &T, w: usize, b: impl Into<Option<usize>>,
        grads: &mut [Option<T>]) -> Result<T> {
        if self.trains(w) {
            put(be, grads, w, be.matmul(dy, true, x, false)?)?; // (N, K)
        }
        if let Some(b) = b.into().filter(|&b| self.trains(b)) {
            put(be, grads, b, be.sum_rows(dy)?)?; // (1, N)
        }
        let dx = be.matmul_weight(dy, self.t(w))?; // (M, K), W in its stored dtype
        match self.lora.as_ref().map(|l| l.backward(be, &self.params, dy, x, w, grads)).transpose()?.flatten() {
            Some(d) => be.add(&dx, &d),
            None => Ok(dx),
        }
    }

    /// The embeddings' projection into the layers' width (ELECTRA's `embeddings_project` when E ≠ H, ALBERT's
    /// `embedding_hidden_mapping_in`): its weight `(H, E)`.
    pub(crate) fn projection(&self) -> Option<usize> {
        self.emb.project.map(|[w, _]| w)
    }

    /// The number of encoder layers (passes).
    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// Whether the layers are one layer's parameters run several times (ALBERT).
    pub fn shares_layers(&self) -> bool {
        self.layers.len() > 1 && self.layers[0].qkv_w == self.layers[1].qkv_w
    }

    /// The first parameter the backward reaches when only the top `k` layers train (`None`: all of them): the
    /// parameters are pushed in order, the embeddings', each layer's (its query/key/value weight first), the head's.
    pub(crate) fn first_trained(&self, top: Option<usize>) -> usize {
        match top.map(|k| self.layers.len().saturating_sub(k)) {
            None => 0,
            Some(l) => self.layers.get(l).map_or_else(|| self.layers.last().map_or(0, |li| li.ln2_b + 1), |li| li.qkv_w),
        }
    }

    /// Back from `dlast = ∂L/∂(last hidden state)` `(B*T, H)` to the encoder parameters' gradients in `grads`:
    /// every parameter's, or with `top: Some(k)` only the last `k` layers' (the backward stops there, so the
    /// embeddings and the lower layers get none and stay frozen).
    pub fn backward<B: Backend<Tensor = T>>(&self, be: &B, batch: &Batch, saved: Saved<T>, dlast: T,
        grads: &mut [Option<T>], top: Option<usize>) -> Result<()> {
        if self.modern.is_some() {
            return self.modern_backward(be, batch, saved, dlast, grads, top);
        }
        let eps = self.config.layer_norm_eps;
        let shape = self.shape(batch);
        let depth = top.unwrap_or(self.layers.len()).min(self.layers.len());
        let unrope = self.rotary.as_ref().map(|r| r.inverse(be, batch.t)).transpose()?; // (T, d), angles negated
        let alibi = self.jina.as_ref().map(|j| j.bias(be, batch.t)).transpose()?; // the forward's, no gradient asked
        let mut dx = dlast;
        // DeBERTa: the relative table's gradient summed over the layers (not when only the top layers train).
        let dis = saved.disentangled.as_ref().zip(self.disentangled);
        let want_rel = dis.is_some_and(|(_, d)| top.is_none() && self.trains(d.table()));
        let mut drel: Option<T> = None;
        for (l, (li, ls)) in self.layers.iter().zip(&saved.layers).enumerate().rev().take(depth) {
            let s = 3 * l as u32;
            // Back through a site's dropout: the same mask on the gradient (`None`: the gradient as it is).
            let undrop = |d: &T, stream: u32| -> Result<Option<T>> {
                saved.site(false, stream).map(|m| be.dropout(d, m)).transpose()
            };
            let (dpre2, dg2, db2) = be.layernorm_backward(&dx, &ls.pre2, self.t(li.ln2_g), eps)?;
            put(be, grads, li.ln2_g, dg2)?;
            put(be, grads, li.ln2_b, db2)?;
            let dout = if self.ffn_dropout { undrop(&dpre2, s + 3)? } else { None };
            let dg = self.linear_backward(be, dout.as_ref().unwrap_or(&dpre2), &ls.g, li.out_w, li.out_b, grads)?;
            let du = match (&self.rotary, &self.jina) {
                (Some(r), _) => r.glu_backward(be, &dg, &ls.u, self.config.hidden_act, l, &saved)?,
                (_, Some(j)) => j.glu_backward(be, &dg, &ls.u, self.config.hidden_act, l, &saved)?,
                _ => be.activation_grad(&dg, &ls.u, self.config.hidden_act)?,
            };
            let dh1 = match (&self.jina, &ls.wg) {
                (Some(j), Some(wg)) => j.up.backward(be, self, &du, &ls.h1, li.i_w, wg, None, grads)?,
                (None, _) => self.linear_backward(be, &du, &ls.h1, li.i_w, li.i_b, grads)?,
                (Some(_), None) => return Err(Error::Input("a JinaBERT backward without its forward's `Wg'`".into())),
            };
            let dh1 = be.add(&dh1, &dpre2)?; // h1 feeds the FFN and the second residual
            let (dpre1, dg1, db1) = be.layernorm_backward(&dh1, &ls.pre1, self.t(li.ln1_g), eps)?;
            put(be, grads, li.ln1_g, dg1)?;
            put(be, grads, li.ln1_b, db1)?;
            let da = if self.attn_out_dropout { undrop(&dpre1, s + 2)? } else { None };
            let dctx = self.linear_backward(be, da.as_ref().unwrap_or(&dpre1), &ls.ctx, li.o_w, li.o_b, grads)?;
            // MPNet: the table's gradient from every layer (not when only the top layers train: it is below them).
            let rel = saved.relative.as_ref().zip(self.relative);
            let want = rel.is_some_and(|(_, r)| top.is_none() && self.trains(r.table));
            let (dqkv, dbias) = match (dis, &ls.pos) {
                (Some((ds, _)), Some(pos)) => {
                    let (dqkv, dpos) = be.attention_backward_disentangled(&dctx, &ls.qkv, &saved.mask, pos, &ds.index,
                        shape, saved.site(true, s + 1))?;
                    // Through the layer's projection of the table (its weight's and bias's gradients added).
                    let d = self.linear_backward(be, &dpos, ls.rel.as_ref().unwrap_or(&ds.rel), li.qkv_w, li.qkv_b, grads)?;
                    if want_rel {
                        let d = apply_dropout(be, d, saved.site(false, disentangled::pos_stream(l)))?;
                        drel = Some(match drel.take() {
                            Some(acc) => be.add(&acc, &d)?,
                            None => d,
                        });
                    }
                    (dqkv, None)
                }
                _ => be.attention_backward_biased(&dctx, &ls.qkv, &saved.mask, rel.map(|(r, _)| &r.bias).or(alibi.as_ref()),
                    shape, saved.site(true, s + 1), want)?,
            };
            if let (Some((r, ri)), Some(db)) = (rel, dbias) {
                put(be, grads, ri.table, r.table_grad(be, &db)?)?;
            }
            let dqkv = match &unrope {
                Some(r) => be.rotary(&dqkv, r, shape)?, // back through the rotation: its transpose
                None => dqkv,
            };
            let dxq = self.linear_backward(be, &dqkv, &ls.x, li.qkv_w, li.qkv_b, grads)?;
            dx = be.add(&dxq, &dpre1)?; // x feeds the projections and the first residual
        }
        if let (Some((ds, di)), Some(d)) = (dis, drel) {
            di.backward(be, self, ds, d, grads)?;
        }
        if let Some(l) = &self.lora {
            grads.iter_mut().enumerate().filter(|(i, _)| !l.trains(*i)).for_each(|(_, g)| *g = None);
        }
        // With LoRA nothing below the layers trains but an adapter on the embeddings' projection.
        let em = self.emb;
        let adapted_projection = self.lora.as_ref().zip(em.project).is_some_and(|(l, [w, _])| l.adapts(w));
        if top.is_some() || (self.lora.is_some() && !adapted_projection) {
            return Ok(());
        }
        let dx = match (em.project, saved.projected.as_ref()) {
            (Some([w, b]), Some(x0)) => self.linear_backward(be, &dx, x0, w, b, grads)?, // (B*T, E)
            _ => dx,
        };
        if self.lora.is_some() {
            return Ok(());
        }
        let dx = apply_dropout(be, self.zero_padding(be, batch, dx)?, saved.site(false, 0))?;
        let (demb, dg0, db0) = be.layernorm_backward(&dx, &saved.emb_sum, self.t(em.ln_g), eps)?;
        put(be, grads, em.ln_g, dg0)?;
        put(be, grads, em.ln_b, db0)?;
        let rows = |i: Option<usize>| i.map_or(1, |i| self.params[i].rows);
        let positions = self.config.max_position_embeddings;
        let (dw, dp, dt) = be.embeddings_backward(&demb, self.embedding_batch(batch)?.as_ref(), rows(Some(em.word)), positions,
            rows(em.token_type), Some(self.config.pad_token_id))?;
        put(be, grads, em.word, dw)?;
        // RoBERTa: each real token's gradient into its own row (`position_rows`); the padding tokens' row
        // `padding_idx` gets none, as transformers' `nn.Embedding(padding_idx=pad_token_id)`, whose row PyTorch
        // never updates, and the rows before it none (no token reads them).
        if let Some(p) = em.position {
            let dp = match self.config.position_offset {
                0 => dp,
                _ => {
                    let pad = self.config.pad_token_id;
                    let (real, rows): (Vec<u32>, Vec<u32>) = self.position_rows(batch).into_iter().enumerate()
                        .filter(|&(_, r)| r != pad).map(|(i, r)| (i as u32, r)).unzip();
                    let (n, e) = (self.params[p].rows, self.params[p].cols);
                    match real.is_empty() {
                        true => be.input(&vec![0.0; n * e], n, e)?,
                        false => be.scatter_rows(&be.gather_rows(&demb, &real)?, &rows, n)?, // (real tokens, E) → (n, E)
                    }
                }
            };
            put(be, grads, p, dp)?;
        }
        if let Some(t) = em.token_type {
            put(be, grads, t, dt)?;
        }
        Ok(())
    }
}
