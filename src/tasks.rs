//! The platform-neutral API: a loaded model (config + tokenizer + encoder on a backend) and the tasks run on it.
//! The CLI (`src/bin/bertgpu.rs`) and the wasm shim are thin layers over this module.
//!
//! The backend is chosen at run time: [`Engine`] is an enum over the loaded [`Model`] on each backend, and every task
//! is written once, generic over [`Backend`], on [`Model`]. Tasks are `async` because reading back from a GPU is
//! asynchronous in the browser; native callers use `pollster::block_on`. Methods take `&self`.

use std::cell::RefCell;
use std::rc::Rc;

use crate::backend::cpu::CpuBackend;
use crate::backend::gpu::{Gpu, GpuBackend};
use crate::backend::{Activation, Backend};
use crate::heads::trainer::{self, AdamW, HeadSpec, LabelScore, SplitMix64, Trainer, TrainedHead};
use crate::config::BertConfig;
use crate::model::BertModel;
use crate::tokenizer::{Batch, Encoded, Tokenizer};
use crate::weights::Weights;
use crate::{Error, Result};

/// How token vectors become one sentence vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pooling {
    /// Mean over the real tokens (padding excluded): sentence-transformers' default.
    #[default]
    Mean,
    /// The `[CLS]` token's hidden state.
    Cls,
}

impl std::str::FromStr for Pooling {
    type Err = Error;
    fn from_str(s: &str) -> Result<Pooling> {
        match s {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            other => Err(Error::Input(format!("unknown pooling `{other}`; use `mean` or `cls`"))),
        }
    }
}

/// Options of [`Model::embed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbedOptions {
    pub pooling: Pooling,
    /// L2-normalise each vector (what cosine-similarity search wants).
    pub normalize: bool,
    /// Texts per forward pass. Texts are sorted by length first, so each batch pads little.
    pub batch_size: usize,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions { pooling: Pooling::Mean, normalize: false, batch_size: 32 }
    }
}

/// A model ready to run on backend `B`.
pub struct Model<B: Backend> {
    pub backend: B,
    pub config: BertConfig,
    pub tokenizer: Tokenizer,
    pub bert: BertModel<B>,
    /// The task heads the checkpoint carries (fill-mask, NSP, classification, NER, QA); tasks in `heads::pipelines`.
    pub heads: crate::heads::Heads<B>,
    /// A classification head trained with [`Model::train_head`] or loaded with [`Model::load_head`]; used by
    /// [`Model::classify_with_head`]. Behind a `RefCell` because tasks take `&self`; an `Rc` so a task clones it
    /// and never holds the borrow across an `await` (JS may start another task meanwhile).
    pub head: RefCell<Option<Rc<TrainedHead<B>>>>,
}

impl<B: Backend> Model<B> {
    /// Uploads the encoder from `weights` to `backend`. Heads load from the same `weights` before they are dropped.
    pub fn new(backend: B, config: BertConfig, tokenizer: Tokenizer, weights: &Weights) -> Result<Model<B>> {
        let bert = BertModel::load(weights, &config, &backend)?;
        let heads = crate::heads::Heads::load(weights, &config, &backend);
        Ok(Model { backend, config, tokenizer, bert, heads, head: RefCell::new(None) })
    }

    /// Tokenizes single texts (truncated to the tokenizer's max length).
    pub fn encode_texts(&self, texts: &[&str]) -> Result<Vec<Encoded>> {
        texts.iter().map(|t| self.tokenizer.encode(t, None)).collect()
    }

    /// One vector per text, in order.
    pub async fn embed(&self, texts: &[&str], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let encoded = self.encode_texts(texts)?;
        self.embed_encoded(&encoded, opts).await
    }

    /// As [`Self::embed`], from tokenized texts.
    pub async fn embed_encoded(&self, encoded: &[Encoded], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        if opts.batch_size == 0 {
            return Err(Error::Input("batch size must be at least 1".into()));
        }
        // Longest first, so the batches pad as little as possible; results go back to input order. Batches hold at
        // most `batch_size` texts, fewer when their activations would not fit the backend.
        let mut order: Vec<usize> = (0..encoded.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encoded[i].len()));
        let lens: Vec<usize> = order.iter().map(|&i| encoded[i].len()).collect();
        let mut out = vec![Vec::new(); encoded.len()];
        for range in self.fitting_groups(&lens, &[], opts.batch_size)? {
            let chunk = &order[range];
            let group: Vec<Encoded> = chunk.iter().map(|&i| encoded[i].clone()).collect();
            let batch = self.tokenizer.batch(&group);
            for (&i, v) in chunk.iter().zip(self.embed_batch(&batch, opts).await?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Pooled (and optionally normalised) vectors of a padded batch: pooling runs on the device and only `(B, H)`
    /// is read back.
    pub async fn embed_batch(&self, batch: &Batch, opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let be = &self.backend;
        let h = self.config.hidden_size;
        if batch.b == 0 {
            return Ok(Vec::new());
        }
        if batch.t == 0 {
            return Err(Error::Input("a batch of empty sequences cannot be embedded".into()));
        }
        let pooled = self.pool_batch(batch, opts.pooling)?; // (B, H)
        let flat = be.read(&pooled).await?;
        Ok(flat
            .chunks_exact(h)
            .map(|v| {
                let mut v = v.to_vec();
                if opts.normalize {
                    l2_normalize(&mut v);
                }
                v
            })
            .collect())
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

    /// Runs one tiny forward with both poolings, so that every pipeline a forward needs is built now, during the
    /// load (with its progress bar), not inside the user's first call: compiling shaders is the stall users of
    /// in-browser runtimes complain about most on first use (ANCHORS.md).
    pub async fn warm_up(&self) -> Result<()> {
        let e = self.tokenizer.encode("warm up", None)?;
        let batch = self.tokenizer.batch(std::slice::from_ref(&e));
        for pooling in [Pooling::Mean, Pooling::Cls] {
            let pooled = self.pool_batch(&batch, pooling)?;
            self.backend.read(&pooled).await?;
        }
        Ok(())
    }

    /// Encoder forward and pooling of a padded batch, left on the device: `(B, H)`.
    pub fn pool_batch(&self, batch: &Batch, pooling: Pooling) -> Result<B::Tensor> {
        let be = &self.backend;
        if batch.b == 0 || batch.t == 0 {
            return Err(Error::Input("an empty batch cannot be pooled".into()));
        }
        let mask = be.mask(batch)?; // (B, T)
        let hidden = self.bert.forward_with_mask(be, batch, &mask)?; // (B*T, H)
        match pooling {
            Pooling::Mean => be.mean_pool(&hidden, &mask, batch.b, batch.t), // (B, H)
            Pooling::Cls => {
                let rows: Vec<u32> = (0..batch.b).map(|b| (b * batch.t) as u32).collect();
                be.gather_rows(&hidden, &rows) // (B, H)
            }
        }
    }

    /// Trains a classification head on the frozen encoder's pooled features (see `heads/trainer.rs` for the math)
    /// and makes it the live head of [`Self::classify_with_head`]. Features are computed once, uploaded once, and
    /// every step (forward, backward, AdamW) runs on the backend; only the per-epoch evaluation logits are read
    /// back. Deterministic for a seed. With a validation split, training stops after `patience` epochs without a
    /// lower validation loss and the best epoch's weights are kept.
    pub async fn train_head(&self, examples: &[TrainExample], opts: &TrainOptions,
        mut on_progress: impl FnMut(&EpochProgress)) -> Result<TrainReport> {
        let be = &self.backend;
        let labels = check_training_input(examples, opts)?;
        let index: std::collections::HashMap<&str, u32> =
            labels.iter().enumerate().map(|(i, l)| (l.as_str(), i as u32)).collect();
        let y: Vec<u32> = examples.iter().map(|e| index[e.label.as_str()]).collect();

        // Features once: (N, H) on the device.
        let texts: Vec<&str> = examples.iter().map(|e| e.text.as_str()).collect();
        let embed_opts = EmbedOptions { pooling: opts.pooling, normalize: false, batch_size: 32 };
        let feats = self.embed(&texts, &embed_opts).await?;
        let h = self.config.hidden_size;
        let flat: Vec<f32> = feats.concat();
        let all = be.input(&flat, examples.len(), h)?; // (N, H)

        // Seeded split: one shuffle of the example order, the first ⌈split·N⌉ go to validation.
        let mut rng = SplitMix64::new(opts.seed);
        let mut order: Vec<usize> = (0..examples.len()).collect();
        rng.shuffle(&mut order);
        let n_val = if opts.validation_split > 0.0 {
            ((opts.validation_split as f64 * examples.len() as f64).ceil() as usize).min(examples.len() - 1)
        } else {
            0
        };
        let (val_idx, train_idx) = order.split_at(n_val);
        let rows = |idx: &[usize]| idx.iter().map(|&i| i as u32).collect::<Vec<u32>>();
        let train_x = be.gather_rows(&all, &rows(train_idx))?; // (N_train, H)
        let train_y: Vec<u32> = train_idx.iter().map(|&i| y[i]).collect();
        let val_x = if n_val > 0 { Some(be.gather_rows(&all, &rows(val_idx))?) } else { None }; // (N_val, H)
        let val_y: Vec<u32> = val_idx.iter().map(|&i| y[i]).collect();

        let spec = HeadSpec {
            input_size: h,
            hidden: opts.hidden.map(|d| (d, opts.activation)),
            labels: labels.clone(),
            pooling: opts.pooling,
        };
        let init = spec.init(&mut rng);
        let opt = AdamW { lr: opts.learning_rate, weight_decay: opts.weight_decay, ..AdamW::default() };
        let mut tr = Trainer::new(be, spec.clone(), &init, opt)?;
        let c = labels.len();
        let mut history = Vec::new();
        // The best epoch's parameters, copied to the host (a few KB) so later steps cannot touch them.
        let mut best: Option<(f32, usize, Vec<Vec<f32>>)> = None;
        let mut local: Vec<usize> = (0..train_idx.len()).collect();
        for epoch in 1..=opts.epochs {
            rng.shuffle(&mut local);
            for chunk in local.chunks(opts.batch_size) {
                let xb = be.gather_rows(&train_x, &rows(chunk))?; // (b, H)
                let yb: Vec<u32> = chunk.iter().map(|&i| train_y[i]).collect();
                tr.step(be, &xb, &yb)?;
            }
            let eval = |x: &B::Tensor| trainer::forward(be, &spec, &tr.params, x).map(|a| a.logits);
            let (loss, accuracy) = trainer::loss_and_accuracy(&be.read(&eval(&train_x)?).await?, c, &train_y);
            let (val_loss, val_accuracy) = match &val_x {
                Some(vx) => {
                    let (l, a) = trainer::loss_and_accuracy(&be.read(&eval(vx)?).await?, c, &val_y);
                    (Some(l), Some(a))
                }
                None => (None, None),
            };
            let p = EpochProgress { epoch, loss, accuracy, val_loss, val_accuracy };
            on_progress(&p);
            history.push(p);
            if let Some(vl) = val_loss {
                if best.as_ref().is_none_or(|b| vl < b.0) {
                    let mut host = Vec::with_capacity(tr.params.len());
                    for p in &tr.params {
                        host.push(be.read(p).await?);
                    }
                    best = Some((vl, epoch, host));
                } else if best.as_ref().is_some_and(|b| epoch - b.1 >= opts.patience) {
                    break;
                }
            }
        }
        let (best_epoch, host) = match best {
            Some((_, e, host)) => (e, host),
            None => {
                let mut host = Vec::with_capacity(tr.params.len());
                for p in &tr.params {
                    host.push(be.read(p).await?);
                }
                (history.len(), host)
            }
        };
        *self.head.borrow_mut() = Some(Rc::new(TrainedHead::from_host(be, spec, host)?));
        Ok(TrainReport { labels, best_epoch, history })
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
        let (spec, host) = trainer::import_safetensors(bytes, self.config.hidden_size)?;
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

    /// Classifies tokenized texts with the live trained head: `{label, score}` (softmax) best first per text.
    pub async fn classify_with_head(&self, encoded: &[Encoded], top_k: Option<usize>) -> Result<Vec<Vec<LabelScore>>> {
        crate::heads::pipelines::check_top_k(top_k)?;
        let head = self.head.borrow().clone();
        let Some(head) = head else {
            return Err(Error::Input("no classification head: train one (train-head) or load one (--head FILE)".into()));
        };
        let be = &self.backend;
        let c = head.spec.labels.len();
        let mut order: Vec<usize> = (0..encoded.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encoded[i].len()));
        let lens: Vec<usize> = order.iter().map(|&i| encoded[i].len()).collect();
        let mut out = vec![Vec::new(); encoded.len()];
        for range in self.fitting_groups(&lens, &[], 32)? {
            let chunk = &order[range];
            let group: Vec<Encoded> = chunk.iter().map(|&i| encoded[i].clone()).collect();
            let batch = self.tokenizer.batch(&group);
            let pooled = self.pool_batch(&batch, head.spec.pooling)?; // (B, H)
            let logits = be.read(&head.logits(be, &pooled)?).await?; // (B, C)
            for (&i, row) in chunk.iter().zip(logits.chunks_exact(c)) {
                out[i] = head.postprocess(row, top_k);
            }
        }
        Ok(out)
    }
}

/// One labelled training example.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct TrainExample {
    pub text: String,
    pub label: String,
}

/// Options of [`Model::train_head`].
#[derive(Clone, Debug, PartialEq)]
pub struct TrainOptions {
    /// The label set in class order; by default the labels of the examples in order of first appearance.
    pub labels: Option<Vec<String>>,
    pub epochs: usize,
    pub learning_rate: f32,
    pub batch_size: usize,
    /// AdamW's decoupled weight decay (torch's default 0.01).
    pub weight_decay: f32,
    /// Fraction of the examples held out for early stopping, in [0, 1).
    pub validation_split: f32,
    pub seed: u64,
    /// One hidden layer of this width (activation [`Self::activation`]), or a single linear layer.
    pub hidden: Option<usize>,
    pub activation: Activation,
    pub pooling: Pooling,
    /// Epochs without a lower validation loss before stopping.
    pub patience: usize,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            labels: None,
            epochs: 20,
            learning_rate: 1e-3,
            batch_size: 16,
            weight_decay: 0.01,
            validation_split: 0.1,
            seed: 0,
            hidden: None,
            activation: Activation::Relu,
            pooling: Pooling::Mean,
            patience: 5,
        }
    }
}

/// One progress event, after each epoch: mean cross-entropy and accuracy of the head on the training and the
/// validation examples (`None` without a validation split).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EpochProgress {
    pub epoch: usize,
    pub loss: f32,
    pub accuracy: f32,
    pub val_loss: Option<f32>,
    pub val_accuracy: Option<f32>,
}

/// What [`Model::train_head`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainReport {
    pub labels: Vec<String>,
    /// The epoch whose weights were kept (the best validation loss, or the last epoch).
    pub best_epoch: usize,
    pub history: Vec<EpochProgress>,
}

/// Validates training input and options; returns the label set in class order.
fn check_training_input(examples: &[TrainExample], opts: &TrainOptions) -> Result<Vec<String>> {
    if opts.epochs == 0 {
        return Err(Error::Input("epochs must be at least 1".into()));
    }
    if opts.batch_size == 0 {
        return Err(Error::Input("batch size must be at least 1".into()));
    }
    if !(opts.learning_rate.is_finite() && opts.learning_rate > 0.0) {
        return Err(Error::Input(format!("learning rate must be a positive number, got {}", opts.learning_rate)));
    }
    if !(opts.weight_decay.is_finite() && opts.weight_decay >= 0.0) {
        return Err(Error::Input(format!("weight decay must be ≥ 0, got {}", opts.weight_decay)));
    }
    if !(0.0..1.0).contains(&opts.validation_split) {
        return Err(Error::Input(format!("validation split must be in [0, 1), got {}", opts.validation_split)));
    }
    if opts.hidden == Some(0) {
        return Err(Error::Input("a hidden layer needs at least 1 unit (or leave `hidden` unset)".into()));
    }
    if let Some(i) = examples.iter().position(|e| e.text.trim().is_empty()) {
        return Err(Error::Input(format!("example {i} has an empty text; every example needs some text")));
    }
    if let Some(i) = examples.iter().position(|e| e.label.is_empty()) {
        return Err(Error::Input(format!("example {i} has an empty label")));
    }
    let labels = match &opts.labels {
        Some(given) => {
            let mut seen = std::collections::HashSet::new();
            if let Some(d) = given.iter().find(|l| !seen.insert(l.as_str())) {
                return Err(Error::Input(format!("label `{d}` is listed twice in `labels`")));
            }
            if let Some((i, e)) = examples.iter().enumerate().find(|(_, e)| !seen.contains(e.label.as_str())) {
                return Err(Error::Input(format!(
                    "example {i} has label `{}`, which is not in the given `labels` {given:?}", e.label
                )));
            }
            given.clone()
        }
        None => {
            let mut out: Vec<String> = Vec::new();
            for e in examples {
                if !out.contains(&e.label) {
                    out.push(e.label.clone());
                }
            }
            out
        }
    };
    if labels.len() < 2 {
        return Err(Error::Input(format!(
            "a classifier needs at least 2 labels, the examples have {}: {labels:?}; add examples of another label",
            labels.len()
        )));
    }
    let n_val = (opts.validation_split as f64 * examples.len() as f64).ceil() as usize;
    if examples.len() < 2 || n_val >= examples.len() {
        return Err(Error::Input(format!(
            "{} examples leave none to train on after the validation split of {}; add examples or lower the split",
            examples.len(),
            opts.validation_split
        )));
    }
    Ok(labels)
}

/// `v / max(‖v‖₂, 1e-12)`, as `torch.nn.functional.normalize`.
pub fn l2_normalize(v: &mut [f32]) {
    let n = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt().max(1e-12) as f32;
    v.iter_mut().for_each(|x| *x /= n);
}

/// Which backend to run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    /// The GPU when a hardware adapter exists, else the CPU (a software adapter such as lavapipe or SwiftShader
    /// is slower than the CPU backend on the same cores).
    #[default]
    Auto,
    Gpu,
    Cpu,
}

impl std::str::FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Device> {
        match s {
            "auto" => Ok(Device::Auto),
            "gpu" | "webgpu" => Ok(Device::Gpu),
            "cpu" => Ok(Device::Cpu),
            other => Err(Error::Input(format!("unknown device `{other}`; use auto, gpu or cpu"))),
        }
    }
}

/// The bytes of a Hugging Face-style model folder (what the browser fetches).
pub struct ModelFiles {
    /// `config.json`.
    pub config: Vec<u8>,
    /// `tokenizer.json`.
    pub tokenizer: Vec<u8>,
    /// `tokenizer_config.json`, if any.
    pub tokenizer_config: Option<Vec<u8>>,
    /// `model.safetensors`.
    pub weights: Vec<u8>,
}

/// A loaded model on the backend picked at run time. Every task dispatches to the generic [`Model`] method.
pub enum Engine {
    Cpu(Model<CpuBackend>),
    Gpu(Model<GpuBackend>),
}

/// Runs `$body` with `$m` bound to the `Model<_>` inside an [`Engine`], whatever its backend.
#[macro_export]
macro_rules! with_model {
    ($engine:expr, $m:ident => $body:expr) => {
        match $engine {
            $crate::tasks::Engine::Cpu($m) => $body,
            $crate::tasks::Engine::Gpu($m) => $body,
        }
    };
}

impl Engine {
    /// Loads from the bytes of a model folder.
    pub async fn from_files(files: &ModelFiles, device: Device) -> Result<Engine> {
        let text = std::str::from_utf8(&files.config)
            .map_err(|_| Error::Config("config.json is not UTF-8 text".into()))?;
        let config = BertConfig::from_json_str(text)?;
        let tokenizer = Tokenizer::from_json(&files.tokenizer, files.tokenizer_config.as_deref(), config.max_position_embeddings)?;
        let weights = Weights::from_safetensors(&files.weights)?;
        Self::from_parts(config, tokenizer, &weights, device).await
    }

    /// Loads a Hugging Face-style folder: `config.json`, the tokenizer files, `model.safetensors`.
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn from_dir(dir: impl AsRef<std::path::Path>, device: Device) -> Result<Engine> {
        let dir = dir.as_ref();
        let config = BertConfig::from_file(dir.join("config.json"))?;
        let tokenizer = Tokenizer::from_dir(dir, config.max_position_embeddings)?;
        let weights = Weights::from_safetensors_file(dir.join("model.safetensors"))?;
        Self::from_parts(config, tokenizer, &weights, device).await
    }

    /// Loads a BERT `.gguf` from its bytes (ours, or llama.cpp's `bert` files): see [`crate::weights::gguf`].
    pub async fn from_gguf(bytes: &[u8], device: Device) -> Result<Engine> {
        Self::from_gguf_on(bytes, device, CpuBackend::new()).await
    }

    /// [`Self::from_gguf`], with the backend to use if the CPU is chosen (e.g. one shard of a tensor-parallel model).
    pub async fn from_gguf_on(bytes: &[u8], device: Device, cpu: CpuBackend) -> Result<Engine> {
        let m = crate::weights::gguf::load_gguf(bytes)?;
        Self::from_parts_on(m.config, m.tokenizer, &m.weights, device, cpu).await
    }

    /// Puts the encoder on the requested device.
    pub async fn from_parts(config: BertConfig, tokenizer: Tokenizer, weights: &Weights, device: Device) -> Result<Engine> {
        Self::from_parts_on(config, tokenizer, weights, device, CpuBackend::new()).await
    }

    /// [`Self::from_parts`], with the backend to use if the CPU is chosen (a GPU model is always whole).
    pub async fn from_parts_on(config: BertConfig, tokenizer: Tokenizer, weights: &Weights, device: Device,
        cpu: CpuBackend) -> Result<Engine> {
        match device {
            Device::Cpu => Ok(Engine::Cpu(Model::new(cpu, config, tokenizer, weights)?)),
            Device::Gpu => {
                let gpu = GpuBackend::new(Gpu::new().await?)?;
                Engine::gpu(Model::new(gpu, config, tokenizer, weights)?).await
            }
            // The GPU when there is a hardware adapter (and the backend accepts its limits), else the CPU. A software
            // adapter (`DeviceType::Cpu`: Mesa lavapipe, SwiftShader) runs the same kernels on the same cores as the
            // CPU backend, several times slower (BENCHMARKS.md: MiniLM 8 × 128 on lavapipe takes ~7× the CPU
            // backend's time), so `auto` takes the CPU there, as the browser package does on a fallback adapter.
            // `Device::Gpu` still insists on any adapter.
            Device::Auto => match Gpu::new().await {
                Ok(gpu) if gpu.info.device_type != wgpu::DeviceType::Cpu => match GpuBackend::new(gpu) {
                    Ok(gpu) => Engine::gpu(Model::new(gpu, config, tokenizer, weights)?).await,
                    Err(_) => Ok(Engine::Cpu(Model::new(cpu, config, tokenizer, weights)?)),
                },
                _ => Ok(Engine::Cpu(Model::new(cpu, config, tokenizer, weights)?)),
            },
        }
    }

    /// A GPU engine with its pipelines built (see [`Model::warm_up`]).
    async fn gpu(model: Model<GpuBackend>) -> Result<Engine> {
        model.warm_up().await?;
        Ok(Engine::Gpu(model))
    }

    /// `"cpu"` or `"gpu"`.
    pub fn device(&self) -> &'static str {
        with_model!(self, m => m.backend.name())
    }

    pub fn config(&self) -> &BertConfig {
        with_model!(self, m => &m.config)
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        with_model!(self, m => &m.tokenizer)
    }

    /// See [`Model::embed`].
    pub async fn embed(&self, texts: &[&str], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        with_model!(self, m => m.embed(texts, opts).await)
    }

    /// See [`Model::train_head`].
    pub async fn train_head(&self, examples: &[TrainExample], opts: &TrainOptions,
        on_progress: impl FnMut(&EpochProgress)) -> Result<TrainReport> {
        with_model!(self, m => m.train_head(examples, opts, on_progress).await)
    }

    /// See [`Model::export_head`].
    pub fn export_head(&self) -> Result<Vec<u8>> {
        with_model!(self, m => m.export_head())
    }

    /// See [`Model::load_head`].
    pub fn load_head(&self, bytes: &[u8]) -> Result<()> {
        with_model!(self, m => m.load_head(bytes))
    }

    /// See [`Model::head_labels`].
    pub fn head_labels(&self) -> Option<Vec<String>> {
        with_model!(self, m => m.head_labels())
    }

    /// See [`Model::clear_head`].
    pub fn clear_head(&self) {
        with_model!(self, m => m.clear_head())
    }

    /// See [`Model::classify_with_head`].
    pub async fn classify_with_head(&self, encoded: &[Encoded], top_k: Option<usize>) -> Result<Vec<Vec<LabelScore>>> {
        with_model!(self, m => m.classify_with_head(encoded, top_k).await)
    }

    /// See [`Model::embed_encoded`].
    pub async fn embed_encoded(&self, encoded: &[Encoded], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        with_model!(self, m => m.embed_encoded(encoded, opts).await)
    }
}
