//! The platform-neutral API: a loaded model (config + tokenizer + encoder on a backend) and the tasks run on it.
//!
//! Every task is written once, generic over [`Backend`], on [`Model`]: embedding and the trained head here, the
//! checkpoint's heads in [`pipelines`]. `crate::engine::Engine` picks the backend at run time. Tasks are `async`
//! because reading back from a GPU is asynchronous in the browser; native callers use `pollster::block_on`.
//! Methods take `&self`. [`twin`] keeps a CPU copy of a GPU model for the calls the CPU finishes sooner.
//! [`zero_shot`]: zero-shot classification through an NLI checkpoint's classifier, as transformers' pipeline.

pub mod pipelines;
pub mod twin;
pub mod vectors;
pub mod zero_shot;

use std::cell::RefCell;
use std::rc::Rc;

use crate::backend::Backend;
use crate::config::BertConfig;
use crate::heads::classifier::LabelScore;
use crate::heads::sentence::SentenceHead;
pub use crate::heads::Pooling;
use crate::training::head::{self, TrainedHead};
pub use crate::training::{self, EpochProgress, TrainExample, TrainOptions, TrainReport};
use crate::model::BertModel;
use crate::tokenizer::{Batch, Encoded, Tokenizer};
use crate::weights::Weights;
use crate::{Error, Result};

/// Options of [`Model::embed`]. Each one left `None` is what the model's own files say (sentence-transformers'
/// modules, [`crate::sentence`]): its pooling, its Normalize, its default prompt; a model without those files pools by
/// mean and does not normalise. An option given overrides the files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbedOptions {
    pub pooling: Option<Pooling>,
    /// L2-normalise each vector (what cosine-similarity search wants).
    pub normalize: Option<bool>,
    /// One of the model's prompts, by name (`config_sentence_transformers.json`), prepended to every text.
    pub prompt: Option<String>,
    /// Matryoshka truncation: the first `dimensions` values of each vector (normalised again where the vectors
    /// are normalised).
    pub dimensions: Option<usize>,
    /// Texts per forward pass. Texts are sorted by length first, so each batch pads little.
    pub batch_size: usize,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions { pooling: None, normalize: None, prompt: None, dimensions: None, batch_size: 32 }
    }
}

/// [`EmbedOptions`] with the model's own choices filled in.
#[derive(Clone, Copy, Debug)]
struct Resolved {
    pooling: Pooling,
    normalize: bool,
    dimensions: Option<usize>,
    /// The prompt's tokens at the start of every text that the pooling leaves out (`include_prompt: false`).
    excluded: usize,
}

/// A model ready to run on backend `B`.
pub struct Model<B: Backend> {
    pub backend: B,
    pub config: BertConfig,
    pub tokenizer: Tokenizer,
    pub bert: BertModel<B>,
    /// The task heads the checkpoint carries (fill-mask, NSP, classification, NER, QA); tasks in [`pipelines`].
    pub heads: crate::heads::Heads<B>,
    /// sentence-transformers' modules after the encoder, where the model's files list them ([`crate::sentence`]).
    pub sentence: Option<SentenceHead<B>>,
    /// The tokenizer embedding truncates with where sentence-transformers' `max_seq_length` is below the
    /// tokenizer's limit (the other tasks keep the tokenizer's, as transformers' pipelines do).
    pub embed_tokenizer: Option<Tokenizer>,
    /// A classification head trained with [`Model::train_head`] or loaded with [`Model::load_head`]; used by
    /// [`Model::classify_with_head`]. Behind a `RefCell` because tasks take `&self`; an `Rc` so a task clones it
    /// and never holds the borrow across an `await` (JS may start another task meanwhile).
    pub head: RefCell<Option<Rc<TrainedHead<B>>>>,
    /// Why this model is not on the GPU although the GPU was considered (`Device::Auto` found no adapter, a software
    /// one, or one that failed the load-time check): set by `crate::engine`, `None` otherwise.
    pub device_reason: Option<String>,
    /// On a GPU: the CPU's side of the load-time check (crate::engine::canary), kept to check the GPU again
    /// whenever its kernels change.
    pub canary: Option<ReferenceOutput>,
    /// On a GPU: a CPU copy of this model for the short calls it finishes sooner ([`twin`]); set where asked for
    /// (`crate::engine::crossover`), `None` otherwise. Behind a `RefCell` and an `Rc` as `head` is.
    pub cpu_twin: RefCell<Option<Rc<twin::CpuTwin>>>,
}

/// A fixed input and the last hidden state the CPU backend computed for it: the load-time check's reference (made
/// by `engine::canary`), kept with a GPU model to check it again whenever its kernels change.
#[derive(Clone, Debug)]
pub struct ReferenceOutput {
    pub batch: Batch,
    /// `(B*T, H)`, row-major.
    pub hidden: Vec<f32>,
}

impl<B: Backend> Model<B> {
    /// Uploads the encoder from `weights` to `backend`. Heads load from the same `weights` before they are dropped.
    pub fn new(backend: B, config: BertConfig, tokenizer: Tokenizer, weights: &Weights) -> Result<Model<B>> {
        let bert = BertModel::load(weights, &config, &backend)?;
        let heads = crate::heads::Heads::load(weights, &config, &backend);
        let sentence =
            config.sentence.as_ref().map(|s| SentenceHead::load(s, weights, config.hidden_size, &backend)).transpose()?;
        let embed_tokenizer = match config.sentence.as_ref().and_then(|s| s.max_seq_length) {
            Some(m) if m < tokenizer.max_length() => {
                let mut t = tokenizer.clone();
                t.set_max_length(m.max(t.min_max_length()))?;
                Some(t)
            }
            _ => None,
        };
        Ok(Model { backend, config, tokenizer, bert, heads, sentence, embed_tokenizer, head: RefCell::new(None),
            device_reason: None, canary: None, cpu_twin: RefCell::new(None) })
    }

    /// The tokenizer of [`Self::embed`]: truncating at sentence-transformers' `max_seq_length` where the model's
    /// files set one below the tokenizer's limit.
    pub fn embedding_tokenizer(&self) -> &Tokenizer {
        self.embed_tokenizer.as_ref().unwrap_or(&self.tokenizer)
    }

    /// The model's prompts by name (`config_sentence_transformers.json`; empty where it has none).
    pub fn prompts(&self) -> std::collections::BTreeMap<String, String> {
        self.config.sentence.as_ref().map(|s| s.prompts.clone()).unwrap_or_default()
    }

    /// Checks `opts` against the model (its prompts, its vectors' width) without embedding anything.
    pub fn check_embed_options(&self, opts: &EmbedOptions) -> Result<()> {
        self.resolve(opts).map(|_| ())
    }

    /// The prompt text `opts` asks for (or the model's default prompt), checked against the model's prompts: what
    /// [`Self::encode_for_embedding`] puts before every text.
    pub fn prompt_text(&self, opts: &EmbedOptions) -> Result<Option<String>> {
        self.prompt_named(opts.prompt.as_deref())
    }

    /// The text of the prompt named `name` (or the model's default prompt), checked against the model's prompts:
    /// what every vector task puts before each text.
    pub fn prompt_named(&self, name: Option<&str>) -> Result<Option<String>> {
        match &self.config.sentence {
            Some(s) => Ok(s.prompt(name)?.map(str::to_string)),
            None => match name {
                Some(name) => Err(Error::Input(format!(
                    "prompt `{name}`: this model has no prompts (it has no config_sentence_transformers.json)"
                ))),
                None => Ok(None),
            },
        }
    }

    /// `opts` with the model's own choices filled in, checked (the dimensions against the vectors' width).
    fn resolve(&self, opts: &EmbedOptions) -> Result<Resolved> {
        self.check_dense()?;
        let st = self.config.sentence.as_ref();
        let (own_pooling, include_prompt) = st.and_then(|s| s.pooling()).unwrap_or((Pooling::Mean, true));
        let width = st.map_or(self.config.hidden_size, |s| s.output_width(self.config.hidden_size));
        if let Some(d) = opts.dimensions {
            if d == 0 || d > width {
                return Err(Error::Input(format!(
                    "dimensions {d}: this model's vectors have {width} values; ask for 1 to {width}"
                )));
            }
        }
        let excluded = match (include_prompt, self.prompt_text(opts)?) {
            (false, Some(p)) if !p.is_empty() => {
                // As sentence-transformers counts it: the prompt's tokens alone, less a closing special token.
                let e = self.tokenizer.encode(&p, None)?;
                e.len() - e.special_tokens_mask.last().is_some_and(|&s| s == 1) as usize
            }
            _ => 0,
        };
        Ok(Resolved {
            pooling: opts.pooling.unwrap_or(own_pooling),
            normalize: opts.normalize.unwrap_or_else(|| st.is_some_and(|s| s.normalizes())),
            dimensions: opts.dimensions,
            excluded,
        })
    }

    /// The texts as [`Self::embed`] sees them, tokenized: behind the prompt `opts` asks for, truncated by
    /// [`Self::embedding_tokenizer`].
    pub fn encode_for_embedding(&self, texts: &[&str], opts: &EmbedOptions) -> Result<Vec<Encoded>> {
        self.encode_with_prompt(texts, opts.prompt.as_deref())
    }

    /// [`Self::encode_for_embedding`] behind the prompt named `prompt` ([`Self::prompt_named`]).
    pub fn encode_with_prompt(&self, texts: &[&str], prompt: Option<&str>) -> Result<Vec<Encoded>> {
        let tokenizer = self.embedding_tokenizer();
        let prompted: Vec<String> = match self.prompt_named(prompt)? {
            Some(p) if !p.is_empty() => texts.iter().map(|t| format!("{p}{t}")).collect(),
            _ => texts.iter().map(|t| t.to_string()).collect(),
        };
        #[cfg(not(target_arch = "wasm32"))]
        {
            use rayon::prelude::*;
            prompted.par_iter().map(|t| tokenizer.encode(t, None)).collect()
        }
        #[cfg(target_arch = "wasm32")]
        prompted.iter().map(|t| tokenizer.encode(t, None)).collect()
    }

    /// Tokenizes single texts (truncated to the tokenizer's max length), in order; natively on rayon's threads (a
    /// long text takes about half a millisecond, as long as a GPU's forward of a batch of them).
    pub fn encode_texts(&self, texts: &[&str]) -> Result<Vec<Encoded>> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            use rayon::prelude::*;
            let tokenizer = &self.tokenizer;
            texts.par_iter().map(|t| tokenizer.encode(t, None)).collect()
        }
        #[cfg(target_arch = "wasm32")]
        texts.iter().map(|t| self.tokenizer.encode(t, None)).collect()
    }

    /// One vector per text, in order.
    pub async fn embed(&self, texts: &[&str], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let encoded = self.encode_for_embedding(texts, opts)?;
        self.embed_encoded(&encoded, opts).await
    }

    /// As [`Self::embed`], from texts tokenized by [`Self::encode_for_embedding`] with the same `opts`.
    pub async fn embed_encoded(&self, encoded: &[Encoded], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        if opts.batch_size == 0 {
            return Err(Error::Input("batch size must be at least 1".into()));
        }
        let r = self.resolve(opts)?;
        let mut out = vec![Vec::new(); encoded.len()];
        for (rows, batch) in self.batches_by_length(encoded, opts.batch_size)? {
            for (&i, v) in rows.iter().zip(self.embed_resolved(&batch, &r).await?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// `encoded`'s texts in padded batches, longest first so that they pad as little as possible, each with the
    /// indices of its texts in `encoded` (for putting results back in input order). A batch holds at most
    /// `max_rows` texts, fewer where its activations would not fit the backend ([`Self::fitting_groups`]).
    fn batches_by_length(&self, encoded: &[Encoded], max_rows: usize) -> Result<Vec<(Vec<usize>, Batch)>> {
        let mut order: Vec<usize> = (0..encoded.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encoded[i].len()));
        let lens: Vec<usize> = order.iter().map(|&i| encoded[i].len()).collect();
        Ok(self
            .fitting_groups(&lens, &[], max_rows)?
            .into_iter()
            .map(|range| {
                let rows = order[range].to_vec();
                let group: Vec<Encoded> = rows.iter().map(|&i| encoded[i].clone()).collect();
                let batch = self.tokenizer.batch(&group);
                (rows, batch)
            })
            .collect())
    }

    /// The vectors of a padded batch: pooling and the model's Dense layers run on the device and only the final
    /// `(B, width)` is read back; then the truncation to `dimensions` and the normalisation.
    pub async fn embed_batch(&self, batch: &Batch, opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let r = self.resolve(opts)?;
        self.embed_resolved(batch, &r).await
    }

    /// [`Self::embed_batch`] with the options resolved once for all of a call's batches.
    async fn embed_resolved(&self, batch: &Batch, r: &Resolved) -> Result<Vec<Vec<f32>>> {
        let be = &self.backend;
        if batch.b == 0 {
            return Ok(Vec::new());
        }
        if batch.t == 0 {
            return Err(Error::Input("a batch of empty sequences cannot be embedded".into()));
        }
        let pooled = self.pool_batch_excluding(batch, r.pooling, r.excluded)?; // (B, H)
        let out = match &self.sentence {
            Some(s) => s.dense(be, pooled)?,
            None => pooled,
        };
        let width = be.dims(&out).1;
        let flat = be.read(&out).await?;
        Ok(flat.chunks_exact(width).map(|v| crate::heads::sentence::finish(v.to_vec(), r.dimensions, r.normalize)).collect())
    }
}

impl<B: Backend> Model<B> {
    /// Splits sequences of `lens` tokens (in the order given) into consecutive groups of at most `max_rows` that
    /// one forward pass can take: the widest activation of the padded group, `(B*T, max(3H, I))` f32, plus
    /// `extra_bytes[i]` per sequence (e.g. a head's output rows), must fit [`Backend::max_tensor_bytes`]. So any
    /// number of texts runs in as many passes as the device needs, never as one allocation it cannot make. A single
    /// sequence that does not fit is an error saying the limit.
    pub fn fitting_groups(&self, lens: &[usize], extra_bytes: &[usize], max_rows: usize)
        -> Result<Vec<std::ops::Range<usize>>> {
        let limit = self.backend.max_tensor_bytes();
        let widest = 4 * (3 * self.config.hidden_size).max(self.config.intermediate_size); // bytes per token
        let extra = |i: usize| extra_bytes.get(i).copied().unwrap_or(0);
        let bytes = |rows: usize, t: usize, extra: usize| rows.saturating_mul(t).saturating_mul(widest).max(extra);
        let mut groups = Vec::new();
        let (mut start, mut t_max, mut extra_sum) = (0, 0, 0usize);
        for (i, &t) in lens.iter().enumerate() {
            if bytes(1, t, extra(i)) > limit {
                return Err(Error::Input(format!(
                    "a sequence of {t} tokens needs {} bytes for one tensor, more than this backend's limit of \
                     {limit} bytes: truncate the input (--max-length){}",
                    bytes(1, t, extra(i)),
                    if self.backend.name() == "gpu" { " or use the CPU backend (--device cpu)" } else { "" },
                )));
            }
            let rows = i - start + 1;
            let grown = (t_max.max(t), extra_sum.saturating_add(extra(i)));
            if rows > max_rows.max(1) || bytes(rows, grown.0, grown.1) > limit {
                groups.push(start..i);
                (start, t_max, extra_sum) = (i, t, extra(i));
            } else {
                (t_max, extra_sum) = grown;
            }
        }
        if start < lens.len() {
            groups.push(start..lens.len());
        }
        Ok(groups)
    }

    /// Encoder forward and pooling of a padded batch, left on the device: `(B, H)`.
    pub fn pool_batch(&self, batch: &Batch, pooling: Pooling) -> Result<B::Tensor> {
        self.pool_batch_excluding(batch, pooling, 0)
    }

    /// [`Self::pool_batch`] with the first `excluded` tokens of every row (a prompt's) left out of the pooling.
    fn pool_batch_excluding(&self, batch: &Batch, pooling: Pooling, excluded: usize) -> Result<B::Tensor> {
        let be = &self.backend;
        if batch.b == 0 || batch.t == 0 {
            return Err(Error::Input("an empty batch cannot be pooled".into()));
        }
        let mask = be.mask(batch)?; // (B, T)
        let hidden = self.bert.forward_with_mask(be, batch, &mask)?; // (B*T, H)
        let mut rows: Vec<f32> = batch.attention_mask.iter().map(|&m| (m != 0) as u32 as f32).collect();
        if excluded > 0 {
            rows.chunks_exact_mut(batch.t).for_each(|r| r[..excluded.min(batch.t)].fill(0.0));
        }
        let pool_mask = if excluded > 0 { be.input(&rows, batch.b, batch.t)? } else { mask };
        crate::heads::sentence::pool(be, &hidden, &pool_mask, &rows, batch.b, batch.t, pooling)
    }

    /// Trains a classification head on the frozen encoder's pooled features and makes it the live head of
    /// [`Self::classify_with_head`]. The features are computed once here; the training loop is
    /// [`crate::training::fit_head`] (see `training/head.rs` for the math).
    pub async fn train_head(&self, examples: &[TrainExample], opts: &TrainOptions,
        on_progress: impl FnMut(&EpochProgress)) -> Result<TrainReport> {
        let labels = training::check_training_input(examples, opts)?;
        let texts: Vec<&str> = examples.iter().map(|e| e.text.as_str()).collect();
        // The features `classify_with_head` computes: the pooled encoder output, without the model's
        // sentence-transformers modules (Dense, prompts, max_seq_length), which only `embed` applies.
        let feats = self.pooled_features(&self.encode_texts(&texts)?, opts.pooling).await?;
        let (head, report) = training::fit_head(&self.backend, &feats, labels, examples, opts, on_progress).await?;
        *self.head.borrow_mut() = Some(Rc::new(head));
        Ok(report)
    }

    /// The live head as safetensors bytes (see [`TrainedHead::export`]).
    pub fn export_head(&self) -> Result<Vec<u8>> {
        match self.head.borrow().as_ref() {
            Some(h) => h.export(),
            None => Err(Error::Input("there is no trained head to export: train one first (trainHead in JavaScript, `bertgpu train-head`)".into())),
        }
    }

    /// Makes a head file written by [`Self::export_head`] the live head; its hidden size must be the model's.
    pub fn load_head(&self, bytes: &[u8]) -> Result<()> {
        let (spec, host) = head::import_safetensors(bytes, self.config.hidden_size)?;
        let head = TrainedHead::from_host(&self.backend, spec, host)?;
        *self.head.borrow_mut() = Some(Rc::new(head));
        Ok(())
    }

    /// Whether a trained or loaded head is live.
    pub fn has_head(&self) -> bool {
        self.head.borrow().is_some()
    }

    /// The live head's labels in class order, if a head is live.
    pub fn head_labels(&self) -> Option<Vec<String>> {
        self.head.borrow().as_ref().map(|h| h.spec.labels.clone())
    }

    /// Drops the live head: `classify` goes back to the checkpoint's own classifier (if it has one).
    pub fn clear_head(&self) {
        *self.head.borrow_mut() = None;
    }

    /// The pooled encoder output `(H)` of each tokenized text, in order: a trained head's features.
    async fn pooled_features(&self, encoded: &[Encoded], pooling: Pooling) -> Result<Vec<Vec<f32>>> {
        let h = self.config.hidden_size;
        let mut out = vec![Vec::new(); encoded.len()];
        for (rows, batch) in self.batches_by_length(encoded, 32)? {
            let pooled = self.backend.read(&self.pool_batch(&batch, pooling)?).await?;
            for (&i, v) in rows.iter().zip(pooled.chunks_exact(h)) {
                out[i] = v.to_vec();
            }
        }
        Ok(out)
    }

    /// Classifies tokenized texts with the live trained head: `{label, score}` (softmax) best first per text.
    pub async fn classify_with_head(&self, encoded: &[Encoded], top_k: Option<usize>) -> Result<Vec<Vec<LabelScore>>> {
        pipelines::check_top_k(top_k)?;
        let head = self.head.borrow().clone();
        let Some(head) = head else {
            return Err(Error::Input("no classification head: train one (train-head) or load one (--head FILE)".into()));
        };
        let be = &self.backend;
        let c = head.spec.labels.len();
        let mut out = vec![Vec::new(); encoded.len()];
        for (rows, batch) in self.batches_by_length(encoded, 32)? {
            let pooled = self.pool_batch(&batch, head.spec.pooling)?; // (B, H)
            let logits = be.read(&head.logits(be, &pooled)?).await?; // (B, C)
            for (&i, row) in rows.iter().zip(logits.chunks_exact(c)) {
                out[i] = head.postprocess(row, top_k);
            }
        }
        Ok(out)
    }
}

pub use crate::heads::l2_normalize;

