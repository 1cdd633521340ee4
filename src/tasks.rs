//! The platform-neutral API: a loaded model (config + tokenizer + encoder on a backend) and the tasks run on it.
//! The CLI (`src/bin/bertgpu.rs`) and the wasm shim are thin layers over this module.
//!
//! The backend is chosen at run time: [`Engine`] is an enum over the loaded [`Model`] on each backend, and every task
//! is written once, generic over [`Backend`], on [`Model`]. Tasks are `async` because reading back from a GPU is
//! asynchronous in the browser; native callers use `pollster::block_on`. Methods take `&self`.

use crate::backend::cpu::CpuBackend;
use crate::backend::gpu::{Gpu, GpuBackend};
use crate::backend::Backend;
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
}

impl<B: Backend> Model<B> {
    /// Uploads the encoder from `weights` to `backend`. Heads load from the same `weights` before they are dropped.
    pub fn new(backend: B, config: BertConfig, tokenizer: Tokenizer, weights: &Weights) -> Result<Model<B>> {
        let bert = BertModel::load(weights, &config, &backend)?;
        let heads = crate::heads::Heads::load(weights, &config, &backend);
        Ok(Model { backend, config, tokenizer, bert, heads })
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
        // Longest first, so the batches pad as little as possible; results go back to input order.
        let mut order: Vec<usize> = (0..encoded.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encoded[i].len()));
        let mut out = vec![Vec::new(); encoded.len()];
        for chunk in order.chunks(opts.batch_size) {
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
        let mask = be.mask(batch)?; // (B, T)
        let hidden = self.bert.forward_with_mask(be, batch, &mask)?; // (B*T, H)
        let pooled = match opts.pooling {
            Pooling::Mean => be.mean_pool(&hidden, &mask, batch.b, batch.t)?, // (B, H)
            Pooling::Cls => {
                let rows: Vec<u32> = (0..batch.b).map(|b| (b * batch.t) as u32).collect();
                be.gather_rows(&hidden, &rows)? // (B, H)
            }
        };
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

/// `v / max(‖v‖₂, 1e-12)`, as `torch.nn.functional.normalize`.
pub fn l2_normalize(v: &mut [f32]) {
    let n = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt().max(1e-12) as f32;
    v.iter_mut().for_each(|x| *x /= n);
}

/// Which backend to run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    /// The GPU when an adapter exists, else the CPU.
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
        let m = crate::weights::gguf::load_gguf(bytes)?;
        Self::from_parts(m.config, m.tokenizer, &m.weights, device).await
    }

    /// Puts the encoder on the requested device.
    pub async fn from_parts(config: BertConfig, tokenizer: Tokenizer, weights: &Weights, device: Device) -> Result<Engine> {
        match device {
            Device::Cpu => Ok(Engine::Cpu(Model::new(CpuBackend, config, tokenizer, weights)?)),
            Device::Gpu => {
                let gpu = GpuBackend::new(Gpu::new().await?)?;
                Ok(Engine::Gpu(Model::new(gpu, config, tokenizer, weights)?))
            }
            // The GPU when there is an adapter (and the backend accepts its limits), else the CPU.
            Device::Auto => match Gpu::new().await.and_then(GpuBackend::new) {
                Ok(gpu) => Ok(Engine::Gpu(Model::new(gpu, config, tokenizer, weights)?)),
                Err(_) => Ok(Engine::Cpu(Model::new(CpuBackend, config, tokenizer, weights)?)),
            },
        }
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

    /// See [`Model::embed_encoded`].
    pub async fn embed_encoded(&self, encoded: &[Encoded], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        with_model!(self, m => m.embed_encoded(encoded, opts).await)
    }
}
