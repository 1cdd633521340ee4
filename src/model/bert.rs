//! `BertEncoder` (the stack of layers) and `BertModel` (embeddings + encoder; the pooler is a head, see
//! `crate::heads`).

use crate::backend::{Activation, Backend};
use crate::config::{BertConfig, Family, Norms};
use crate::tokenizer::Batch;
use crate::weights::Weights;
use crate::Result;

use super::alibi::Alibi;
use super::disentangled::{Disentangled, PositionBias};
use super::relative::RelativeBias;
use super::rotary::Rope;
use super::window::{Window, WindowTensors};
use super::{BertEmbeddings, BertLayer, LayerInputs, LayerNorm, Local};

/// `BertEncoder`: `num_hidden_layers` layers (post-LN; ModernBERT's pre-LN, then `final_norm`). ALBERT's layers share one set of weights
/// (`AlbertTransformer` with one layer group of one layer): it is loaded and uploaded once, as `layers[0]`, and run
/// `num_hidden_layers` times, so the device holds one layer's weights rather than a copy per pass.
pub struct BertEncoder<B: Backend> {
    /// The distinct layers: one per pass, or ALBERT's one shared layer.
    pub layers: Vec<BertLayer<B>>,
    /// How many layers the input passes through (`num_hidden_layers`).
    pub passes: usize,
    /// MPNet's relative position bias, added to every layer's scores.
    pub relative: Option<RelativeBias>,
    /// JinaBERT's ALiBi slopes, a score bias every layer adds.
    pub alibi: Option<Alibi>,
    /// The rotary families' frequencies: every layer turns its queries and keys by one table per forward.
    pub rope: Option<Rope>,
    /// DeBERTa's relative table, whose rows every layer's attention projects and reads.
    pub disentangled: Option<Disentangled>,
    /// ModernBERT's local layers' window and rotation.
    pub window: Option<Window>,
    /// The LayerNorm after the last pre-LN layer (ModernBERT's `final_norm`, BERT-side `encoder.final_norm`).
    pub final_norm: Option<LayerNorm<B>>,
}

/// What a forward of padded length T computes once for every layer: MPNet's relative bias, JinaBERT's ALiBi or
/// DeBERTa's relative rows, the rotary table, ModernBERT's local layers' table and window.
struct Positional<T> {
    bias: Option<PositionBias<T>>,
    rope: Option<T>,
    window: Option<WindowTensors<T>>,
}

impl<T> Positional<T> {
    fn new<B: Backend<Tensor = T>>(backend: &B, relative: Option<&RelativeBias>,
        disentangled: Option<&Disentangled>, alibi: Option<&Alibi>, rope: Option<&Rope>, window: Option<&Window>,
        seq: usize) -> Result<Self> {
        Ok(Positional {
            bias: position_bias(backend, relative, disentangled, alibi, seq)?,
            rope: rope.map(|r| r.upload(backend, seq)).transpose()?,
            window: window.map(|w| w.upload(backend, seq)).transpose()?,
        })
    }

    fn inputs<'a>(&'a self, mask: &'a T, batch: usize, seq: usize) -> LayerInputs<'a, T> {
        let local = self.window.as_ref().map(|w| Local { rope: &w.rope, window: &w.bias });
        LayerInputs { mask, bias: self.bias.as_ref(), rope: self.rope.as_ref(), local, batch, seq }
    }
}

impl<B: Backend> BertEncoder<B> {
    /// `w` at `encoder`.
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let layers = (0..Self::distinct_layers(cfg))
            .map(|i| BertLayer::load(&w.pp(&format!("layer.{i}")), cfg, i, backend))
            .collect::<Result<Vec<_>>>()?;
        Ok(BertEncoder {
            layers,
            passes: cfg.num_hidden_layers,
            relative: RelativeBias::load(w, cfg)?,
            alibi: Alibi::new(cfg),
            disentangled: Disentangled::load(w, cfg)?,
            rope: Rope::new(cfg),
            window: Window::new(cfg),
            final_norm: Self::load_final_norm(w, cfg, backend)?,
        })
    }

    /// `w` at `encoder`: the pre-LN models' last LayerNorm.
    fn load_final_norm(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Option<LayerNorm<B>>> {
        (cfg.norms == Norms::Pre).then(|| LayerNorm::load(&w.pp("final_norm"), cfg, backend)).transpose()
    }

    /// How many distinct layers the checkpoint holds: one per pass, or ALBERT's one shared layer.
    fn distinct_layers(cfg: &BertConfig) -> usize {
        if cfg.family == Family::Albert { 1 } else { cfg.num_hidden_layers }
    }

    /// The layer pass `i` of `passes` runs, among `distinct`: `AlbertTransformer`'s group index
    /// int(i / (L / groups)), which is `i` itself when every pass has its own layer.
    fn layer_of_pass(i: usize, distinct: usize, passes: usize) -> usize {
        i * distinct / passes
    }

    /// x `(B*T, H)`, mask `(B, T)` → last hidden state `(B*T, H)`.
    pub fn forward(&self, backend: &B, x: B::Tensor, mask: &B::Tensor, batch: usize, seq: usize) -> Result<B::Tensor> {
        let mut x = x;
        // MPNet's relative bias, JinaBERT's ALiBi or DeBERTa's relative rows, the rotary families' table, ModernBERT's
        // window: one per forward, read by every layer.
        let positional = Positional::new(backend, self.relative.as_ref(), self.disentangled.as_ref(),
            self.alibi.as_ref(), self.rope.as_ref(), self.window.as_ref(), seq)?;
        let inputs = positional.inputs(mask, batch, seq);
        for i in 0..self.passes {
            // Pass i runs layer i, or the shared one.
            let layer = &self.layers[Self::layer_of_pass(i, self.layers.len(), self.passes)];
            x = layer.forward(backend, &x, &inputs)?;
        }
        match &self.final_norm {
            Some(n) => n.forward(backend, &x, None),
            None => Ok(x),
        }
    }
}

/// The position terms of a padded length `seq` that every layer's attention reads: a score bias by offset
/// (`PositionBias::Relative`: JinaBERT's ALiBi or MPNet's relative bias), DeBERTa's relative rows, or none.
fn position_bias<B: Backend>(backend: &B, relative: Option<&RelativeBias>, disentangled: Option<&Disentangled>,
    alibi: Option<&Alibi>, seq: usize) -> Result<Option<PositionBias<B::Tensor>>> {
    if let Some(a) = alibi {
        return Ok(Some(PositionBias::Relative(a.upload(backend, seq)?)));
    }
    if let Some(r) = relative {
        return Ok(Some(PositionBias::Relative(r.upload(backend, seq)?)));
    }
    disentangled.map(|d| d.upload(backend, seq)).transpose()
}

/// `BertModel` without its pooler: token ids → last hidden state.
pub struct BertModel<B: Backend> {
    pub config: BertConfig,
    pub embeddings: BertEmbeddings<B>,
    /// ELECTRA's `embeddings_project` or ALBERT's `embedding_hidden_mapping_in`: weight `(H, E)` and bias `(H)`,
    /// from the embeddings' width E to the hidden size H ([`crate::config::Family::has_embedding_projection`]).
    pub embeddings_project: Option<(B::Tensor, B::Tensor)>,
    pub encoder: BertEncoder<B>,
}

impl<B: Backend> BertModel<B> {
    /// `w` at the checkpoint root: names with or without the `bert.` prefix both resolve (see [`Weights`]).
    pub fn load(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Self> {
        let w = &Self::checked(w, cfg)?;
        Ok(BertModel {
            config: cfg.clone(),
            embeddings: BertEmbeddings::load(&w.pp("embeddings"), cfg, backend)?,
            embeddings_project: Self::load_projection(w, cfg, backend)?,
            encoder: BertEncoder::load(&w.pp("encoder"), cfg, backend)?,
        })
    }

    /// The checks of [`Self::load`] before any upload; `w` seen under the family's names.
    fn checked(w: &Weights, cfg: &BertConfig) -> Result<Weights> {
        cfg.validate()?;
        if cfg.family == Family::JinaBert {
            crate::weights::jina::check(w)?;
        }
        Ok(w.for_family(cfg.family))
    }

    /// ELECTRA's / ALBERT's projection from E to H, when the family has one (`w` at the root).
    fn load_projection(w: &Weights, cfg: &BertConfig, backend: &B) -> Result<Option<(B::Tensor, B::Tensor)>> {
        let (e, h) = (cfg.embedding_size, cfg.hidden_size);
        if !cfg.family.has_embedding_projection(e, h) {
            return Ok(None);
        }
        // Asked for under ELECTRA's name; ALBERT's `encoder.embedding_hidden_mapping_in` is found for it.
        let p = w.pp("embeddings_project");
        Ok(Some((backend.upload(p.get("weight", &[h, e])?)?, backend.upload(p.get("bias", &[h])?)?)))
    }

    /// [`Self::forward`] of the model in `w` without loading it whole: each module is uploaded just before it runs
    /// and dropped after, so `backend` holds at most the embeddings' or one layer's weights at a time (on the CPU
    /// backend a weight's upload is a copy). For a one-off forward beside a model already loaded elsewhere: the
    /// GPU's load-time check computes its CPU reference this way (`crate::engine::canary`). Reads back nothing;
    /// returns the last hidden state `(B*T, H)`.
    ///
    /// `host(w, module)` gives the weights each module (`embeddings`, `embeddings_project`, `encoder.layer.{i}`) is
    /// loaded from: `w` itself, or `w` with that module's weights in device memory read back
    /// ([`crate::weights::Placed`]), so that only one module's are on the host at a time.
    pub async fn forward_streamed(w: &Weights, cfg: &BertConfig, backend: &B, batch: &Batch,
        host: impl AsyncFn(&Weights, &str) -> Result<Weights>) -> Result<B::Tensor> {
        let w = &Self::checked(w, cfg)?;
        let mask = backend.mask(batch)?; // (B, T)
        let x = BertEmbeddings::load(&host(w, "embeddings").await?.pp("embeddings"), cfg, backend)?.forward(backend, batch)?; // (B*T, E)
        let mut x = match Self::load_projection(&host(w, "embeddings_project").await?, cfg, backend)? {
            Some((weight, bias)) => backend.linear(&x, &weight, Some(&bias), Activation::None)?, // (B*T, H)
            None => x,
        };
        let (distinct, passes) = (BertEncoder::<B>::distinct_layers(cfg), cfg.num_hidden_layers);
        let relative = RelativeBias::load(&host(w, "encoder.relative_attention_bias").await?.pp("encoder"), cfg)?;
        let disentangled = Disentangled::load(&host(w, "encoder.rel_embeddings").await?.pp("encoder"), cfg)?;
        let positional = Positional::new(backend, relative.as_ref(), disentangled.as_ref(), Alibi::new(cfg).as_ref(),
            Rope::new(cfg).as_ref(), Window::new(cfg).as_ref(), batch.t)?;
        let inputs = positional.inputs(&mask, batch.b, batch.t);
        let mut held: Option<(usize, BertLayer<B>)> = None; // ALBERT's shared layer stays for every pass
        for i in 0..passes {
            let l = BertEncoder::<B>::layer_of_pass(i, distinct, passes);
            if !matches!(held, Some((j, _)) if j == l) {
                drop(held.take()); // the previous layer's weights go before the next one's come
                let module = host(w, &format!("encoder.layer.{l}")).await?;
                held = Some((l, BertLayer::load(&module.pp("encoder").pp(&format!("layer.{l}")), cfg, l, backend)?));
            }
            if let Some((_, layer)) = &held {
                x = layer.forward(backend, &x, &inputs)?; // (B*T, H)
            }
        }
        drop(held);
        let w_final = host(w, "encoder.final_norm").await?;
        match BertEncoder::load_final_norm(&w_final.pp("encoder"), cfg, backend)? {
            Some(n) => n.forward(backend, &x, None),
            None => Ok(x),
        }
    }

    /// The last hidden state `(B*T, H)` of a padded batch. Padding rows hold values too (as in PyTorch), but no real
    /// token attends to them, so they change nothing else.
    pub fn forward(&self, backend: &B, batch: &Batch) -> Result<B::Tensor> {
        let mask = backend.mask(batch)?; // (B, T)
        self.forward_with_mask(backend, batch, &mask)
    }

    /// As [`Self::forward`], with the `(B, T)` mask from `backend.mask(batch)` supplied (a pooling head needs it too).
    pub fn forward_with_mask(&self, backend: &B, batch: &Batch, mask: &B::Tensor) -> Result<B::Tensor> {
        let x = self.embeddings.forward(backend, batch)?; // (B*T, E)
        let x = match &self.embeddings_project {
            Some((weight, bias)) => backend.linear(&x, weight, Some(bias), Activation::None)?, // (B*T, H)
            None => x,
        };
        self.encoder.forward(backend, x, mask, batch.b, batch.t)
    }
}
