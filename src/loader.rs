//! One way to load a model: a [`ModelSource`] (a folder or `.gguf` path, the bytes of a folder's files, the bytes of
//! a GGUF) → config + tokenizer + weights, with every check a model must pass before it reaches a backend:
//! config.json's own checks, a tokenizer (tokenizer.json, else vocab.txt, with tokenizer_config.json when present),
//! a truncation limit within `max_position_embeddings`, and a tokenizer whose ids all have a row in the word
//! embeddings (`vocab_size`). The engine (`Engine::load`), the CLI and the wasm package all load through here.

#[cfg(not(target_arch = "wasm32"))]
use std::path::{Path, PathBuf};

use crate::config::BertConfig;
use crate::tokenizer::Tokenizer;
use crate::weights::gguf::BertGguf;
use crate::weights::bytes::ByteSource;
use crate::weights::Weights;
use crate::{Error, Result};

/// The bytes of a Hugging Face-style model folder (what the browser fetches).
pub struct ModelFiles {
    /// `config.json`.
    pub config: Vec<u8>,
    /// `tokenizer.json`; preferred over `vocab`.
    pub tokenizer: Option<Vec<u8>>,
    /// `vocab.txt`, for folders without a tokenizer.json.
    pub vocab: Option<Vec<u8>>,
    /// `tokenizer_config.json`, if any.
    pub tokenizer_config: Option<Vec<u8>>,
    /// `model.safetensors`, or `pytorch_model.bin` where the folder has no safetensors weights.
    pub weights: WeightsFile,
    /// A LoRA adapter to fold in, as peft saves it: `adapter_config.json` and `adapter_model.safetensors`
    /// ([`crate::weights::peft`]).
    pub adapter: Option<(Vec<u8>, Vec<u8>)>,
    /// sentence-transformers' files by their path in the folder (`modules.json`, `1_Pooling/config.json`,
    /// `2_Dense/model.safetensors`, ...): those the folder has ([`crate::sentence`]). Empty: none.
    pub sentence: Vec<(String, Vec<u8>)>,
}

/// A folder's `model.safetensors` (or its `pytorch_model.bin`: the bytes say which).
pub enum WeightsFile {
    /// Its bytes (a `Vec<u8>`), or wherever they are (in the browser, the JS bytes it was downloaded into), read a
    /// tensor at a time ([`crate::weights::bytes::ByteSource`]).
    Bytes(Box<dyn ByteSource>),
    /// Read already, as it downloaded ([`crate::weights::stream`]).
    Read(Weights),
}

/// Where a model comes from.
pub enum ModelSource<'a> {
    /// A Hugging Face-style folder (`config.json`, the tokenizer files, `model.safetensors`) or a `.gguf` file.
    #[cfg(not(target_arch = "wasm32"))]
    Path(&'a Path),
    /// The bytes of a folder's files. Consumed: the weights' file bytes are released once parsed (wasm memory only
    /// grows, so they must go before the backend allocates).
    Files(ModelFiles),
    /// A BERT `.gguf` (ours or llama.cpp's `bert` files): config, tokenizer and weights in one file, read in
    /// place or (in the browser, from the JS bytes) a header and a tensor at a time.
    Gguf(&'a dyn ByteSource),
    /// A BERT `.gguf` read already, as it downloaded ([`crate::weights::stream`]).
    ReadGguf(Box<BertGguf>),
}

/// How to load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Truncation limit in tokens, special tokens included; the model's `max_position_embeddings` by default.
    pub max_length: Option<usize>,
}

/// A checked model, before it is put on a device.
pub struct LoadedModel {
    pub config: BertConfig,
    pub tokenizer: Tokenizer,
    weights: PendingWeights,
    /// Tensors from beside the weights file (a sentence-transformers Dense module's), added to the weights.
    extra: Vec<(String, crate::weights::HostTensor)>,
}

enum PendingWeights {
    Ready(Weights),
    /// A folder's `model.safetensors`, read when the weights are asked for (tokenizing needs none).
    #[cfg(not(target_arch = "wasm32"))]
    File(PathBuf),
    /// A folder's `pytorch_model.bin` (it has no safetensors weights), read when the weights are asked for: on the
    /// host, its pickle as data ([`crate::weights::torch_bin`]).
    #[cfg(not(target_arch = "wasm32"))]
    TorchBin(PathBuf),
    /// A folder's shards, `model.safetensors.index.json` (or `pytorch_model.bin.index.json`) read and checked: its
    /// shards are read when the weights are asked for, one at a time, each as `model.safetensors` (or
    /// `pytorch_model.bin`) is ([`crate::weights::sharded`]).
    #[cfg(not(target_arch = "wasm32"))]
    Shards(PathBuf, crate::weights::sharded::ShardIndex),
    /// A `.gguf` path whose header (config, tokenizer, the tensors' places) is read: its tensors are read when the
    /// weights are asked for, a piece at a time. `seen`: the config and the tensors' entries the header gave.
    #[cfg(not(target_arch = "wasm32"))]
    GgufFile { path: PathBuf, seen: (String, Vec<crate::weights::gguf::TensorInfo>) },
}

impl LoadedModel {
    /// The model with a LoRA adapter (peft's `adapter_config.json` and `adapter_model.safetensors`) folded into its
    /// weights ([`crate::weights::peft`]).
    pub fn with_adapter(mut self, adapter_config: &[u8], adapter: &[u8]) -> Result<LoadedModel> {
        let merged = crate::weights::peft::apply_lora(&self.weights()?, &mut self.config, adapter_config, adapter)?;
        self.weights = PendingWeights::Ready(merged);
        Ok(self)
    }

    /// The weights: already parsed (GGUF, bytes), or read from the folder's `model.safetensors` (or
    /// `pytorch_model.bin`) now.
    pub fn weights(&self) -> Result<Weights> {
        let w = match &self.weights {
            PendingWeights::Ready(w) => w.clone(),
            #[cfg(not(target_arch = "wasm32"))]
            PendingWeights::File(p) => Weights::from_safetensors_file(p)?,
            #[cfg(not(target_arch = "wasm32"))]
            PendingWeights::TorchBin(p) => Weights::from_torch_bin_file(p)?,
            #[cfg(not(target_arch = "wasm32"))]
            PendingWeights::Shards(dir, index) => shard_weights(dir, index, None)?,
            #[cfg(not(target_arch = "wasm32"))]
            PendingWeights::GgufFile { path, seen } => gguf_weights(path, seen, None)?,
        };
        Ok(self.with_extra(w))
    }

    fn with_extra(&self, mut w: Weights) -> Weights {
        for (name, t) in &self.extra {
            w.insert(name.clone(), t.clone());
        }
        w
    }

    /// [`LoadedModel::weights`] for a model that will run on `sink`'s device: a folder's matrices are read from the
    /// file straight into device memory ([`crate::weights::stream::WeightStream::place_on_device`]), never held on
    /// the host; weights parsed already stay as they are, and a `pytorch_model.bin` is read on the host.
    #[cfg_attr(target_arch = "wasm32", allow(unused_variables))]
    pub fn weights_to(&self, sink: &dyn crate::weights::stream::DeviceSink) -> Result<Weights> {
        let w = match &self.weights {
            PendingWeights::Ready(w) => w.clone(),
            #[cfg(not(target_arch = "wasm32"))]
            PendingWeights::File(p) => Weights::from_safetensors_file_to(p, Some(sink))?,
            #[cfg(not(target_arch = "wasm32"))]
            PendingWeights::TorchBin(p) => Weights::from_torch_bin_file(p)?,
            #[cfg(not(target_arch = "wasm32"))]
            PendingWeights::Shards(dir, index) => shard_weights(dir, index, Some(sink))?,
            #[cfg(not(target_arch = "wasm32"))]
            PendingWeights::GgufFile { path, seen } => gguf_weights(path, seen, Some(sink))?,
        };
        Ok(self.with_extra(w))
    }
}

/// The tensors of the `.gguf` at `path` (on `sink`'s device where one is given), read through the stream; refused if
/// the file's header is no longer the one `seen` at load (another config, other tensors or dtypes).
#[cfg(not(target_arch = "wasm32"))]
fn gguf_weights(path: &Path, seen: &(String, Vec<crate::weights::gguf::TensorInfo>),
    sink: Option<&dyn crate::weights::stream::DeviceSink>) -> Result<Weights> {
    use crate::weights::stream::{read_file_to, Format, Streamed};
    let read = match read_file_to(path, Format::Gguf, sink)? {
        Streamed::Gguf(read) => read,
        Streamed::Safetensors(_) => return Err(Error::Weights("a GGUF read returned a safetensors file".into())),
    };
    if (&read.config_json, &read.header.tensors) != (&seen.0, &seen.1) {
        return Err(Error::Weights(format!(
            "{} changed while the model was loading (its header is not the one read first); load it again",
            path.display()
        )));
    }
    Ok(read.tensors.into_iter().collect())
}

/// The shards of the folder `dir` that `index` names (on `sink`'s device where one is given), each read as a
/// `model.safetensors` (or, `.bin` shards, on the host as a `pytorch_model.bin`) is, then joined after the index's
/// checks.
#[cfg(not(target_arch = "wasm32"))]
fn shard_weights(dir: &Path, index: &crate::weights::sharded::ShardIndex,
    sink: Option<&dyn crate::weights::stream::DeviceSink>) -> Result<Weights> {
    let mut shards = Vec::with_capacity(index.shards().len());
    for name in index.shards() {
        let path = dir.join(name);
        if !path.is_file() {
            return Err(Error::Weights(format!("{} names the shard {name}, which is not in {}", index.file(), dir.display())));
        }
        let w = if name.ends_with(".bin") { Weights::from_torch_bin_file(&path)? } else { Weights::from_safetensors_file_to(&path, sink)? };
        shards.push((name.clone(), w));
    }
    index.join_weights(shards).map_err(|e| match e {
        Error::Weights(m) => Error::Weights(format!("{}: {m}", dir.display())),
        other => other,
    })
}

/// Which weights file a native folder has, safetensors first: `model.safetensors`, else
/// `model.safetensors.index.json` and its shards, else `pytorch_model.bin` (read as data: its pickle runs no code),
/// else `pytorch_model.bin.index.json` and its `.bin` shards (an index read and checked now).
#[cfg(not(target_arch = "wasm32"))]
fn folder_weights(path: &Path) -> Result<PendingWeights> {
    use crate::weights::sharded::{ShardIndex, BIN_INDEX_FILE, INDEX_FILE, MAX_INDEX_BYTES};
    let single = path.join("model.safetensors");
    let bin = path.join(crate::weights::torch_bin::FILE);
    let index_file = match () {
        _ if single.exists() => return Ok(PendingWeights::File(single)),
        _ if path.join(INDEX_FILE).exists() => INDEX_FILE,
        _ if bin.exists() => return Ok(PendingWeights::TorchBin(bin)),
        _ if path.join(BIN_INDEX_FILE).exists() => BIN_INDEX_FILE,
        _ => return Ok(PendingWeights::File(single)),
    };
    let index = path.join(index_file);
    let cannot = |e| Error::io(format!("cannot read {}", index.display()), e);
    let len = std::fs::metadata(&index).map_err(cannot)?.len();
    if len > MAX_INDEX_BYTES as u64 {
        return Err(Error::Weights(format!(
            "{} is {len} bytes, more than the {MAX_INDEX_BYTES} an index of shards may have",
            index.display()
        )));
    }
    let bytes = std::fs::read(&index).map_err(cannot)?;
    let parsed = ShardIndex::parse_as(&bytes, index_file).map_err(|e| match e {
        Error::Weights(m) => Error::Weights(format!("{}: {m}", path.display())),
        other => other,
    })?;
    Ok(PendingWeights::Shards(path.to_path_buf(), parsed))
}

/// Loads and checks config and tokenizer (and, except for a folder, the weights) of `source`.
pub fn load(source: ModelSource<'_>, opts: &LoadOptions) -> Result<LoadedModel> {
    let (source, adapter) = match source {
        ModelSource::Files(mut files) => {
            let adapter = files.adapter.take();
            (ModelSource::Files(files), adapter)
        }
        other => (other, None),
    };
    let mut extra = Vec::new();
    let (config, mut tokenizer, weights) = match source {
        #[cfg(not(target_arch = "wasm32"))]
        ModelSource::Path(path) => {
            if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
                // The header now (config and tokenizer); the tensors once the device is known, as a folder's are.
                let header = crate::weights::gguf::read_bert_header(path)?;
                let seen = (header.config_json.clone(), header.header.tensors.clone());
                let (config, tokenizer, _) = gguf(header)?;
                (config, tokenizer, PendingWeights::GgufFile { path: path.to_path_buf(), seen })
            } else {
                let (mut config, tokenizer, weights) = folder(path)?;
                let mut read = |name: &str| -> Result<Option<Vec<u8>>> {
                    let p = path.join(name);
                    match std::fs::read(&p) {
                        Ok(bytes) => Ok(Some(bytes)),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                        Err(e) => Err(Error::io(format!("reading {}", p.display()), e)),
                    }
                };
                (config.sentence, extra) = crate::weights::sentence::read_sentence(config.hidden_size, &mut read)?;
                (config, tokenizer, weights)
            }
        }
        ModelSource::Files(files) => {
            let ModelFiles { config, tokenizer, vocab, tokenizer_config, weights, sentence, .. } = files;
            let text =
                std::str::from_utf8(&config).map_err(|_| Error::Config("config.json is not UTF-8 text".into()))?;
            let config = BertConfig::from_json_str(text)?;
            let max = config.max_position_embeddings;
            let tokenizer = match (tokenizer, vocab) {
                (Some(json), _) => Tokenizer::from_json(&json, tokenizer_config.as_deref(), max)?,
                (None, Some(vocab)) => {
                    let vocab =
                        String::from_utf8(vocab).map_err(|_| Error::Tokenizer("vocab.txt is not UTF-8 text".into()))?;
                    Tokenizer::from_vocab(&vocab, tokenizer_config.as_deref(), max)?
                }
                (None, None) => return Err(Error::Tokenizer("give tokenizer.json or vocab.txt".into())),
            };
            let parsed = match weights {
                WeightsFile::Bytes(bytes) => Weights::from_file_source(&*bytes)?,
                WeightsFile::Read(w) => w,
            };
            let mut config = config;
            let mut read = |name: &str| -> Result<Option<Vec<u8>>> {
                Ok(sentence.iter().find(|(n, _)| n == name).map(|(_, b)| b.clone()))
            };
            (config.sentence, extra) = crate::weights::sentence::read_sentence(config.hidden_size, &mut read)?;
            (config, tokenizer, PendingWeights::Ready(parsed))
        }
        ModelSource::Gguf(bytes) => gguf(crate::weights::gguf::read_bert(bytes)?)?,
        ModelSource::ReadGguf(read) => gguf(*read)?,
    };
    let max_positions = config.max_position_embeddings;
    let max_length = opts.max_length.unwrap_or(max_positions);
    if max_length > max_positions {
        return Err(Error::Input(format!(
            "max length {max_length} exceeds the model's max_position_embeddings ({max_positions})"
        )));
    }
    tokenizer.set_max_length(max_length)?;
    // Every id the tokenizer can produce must have a row in the word embeddings.
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(Error::Tokenizer(format!(
            "the tokenizer has {} tokens but the config says vocab_size {}: the tokenizer belongs to another model",
            tokenizer.vocab_size(),
            config.vocab_size
        )));
    }
    let model = LoadedModel { config, tokenizer, weights, extra };
    match adapter {
        Some((adapter_config, adapter)) => model.with_adapter(&adapter_config, &adapter),
        None => Ok(model),
    }
}

fn gguf(read: BertGguf) -> Result<(BertConfig, Tokenizer, PendingWeights)> {
    let g = crate::weights::gguf::gguf_model(read)?;
    Ok((g.config, g.tokenizer, PendingWeights::Ready(g.weights)))
}

#[cfg(not(target_arch = "wasm32"))]
fn folder(path: &Path) -> Result<(BertConfig, Tokenizer, PendingWeights)> {
    if !path.is_dir() {
        let why = if path.exists() { "it is not a folder" } else { "no such folder" };
        return Err(Error::Input(format!(
            "{why}; pass a Hugging Face-style folder with config.json, model.safetensors and tokenizer.json \
             (scripts/fetch-models.sh fetches the test models into models/)"
        )));
    }
    let config = BertConfig::from_file(path.join("config.json"))?;
    // The folder's tokenizer starts at the model's own limit; `load` sets the requested one.
    let tokenizer = Tokenizer::from_dir(path, config.max_position_embeddings)?;
    Ok((config, tokenizer, folder_weights(path)?))
}
