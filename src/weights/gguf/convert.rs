//! `bertgpu convert`: a Hugging Face folder → one BERT `.gguf`, each tensor stored as [`super::storage`] rules.

use super::bert::BertGgufMeta;
use crate::tokenizer::gguf_vocab::{standard_specials, wordpiece_tokenizer_json};
use crate::dtype::Dtype;
use crate::weights::safetensors::host_data;
use crate::weights::HostTensor;
use crate::{Error, Result};

/// Hugging Face safetensors bytes → tensors (f32, f16 and bf16 kept as f32/f16; integer buffers such as
/// `embeddings.position_ids` are skipped: they are not weights).
pub fn tensors_from_safetensors(bytes: &[u8]) -> Result<Vec<(String, HostTensor)>> {
    Ok(tensors_and_skipped(bytes)?.0)
}

/// [`tensors_from_safetensors`] (or of a `pytorch_model.bin`: the bytes say which), and the names of the integer
/// buffers it left out.
fn tensors_and_skipped(bytes: &[u8]) -> Result<(crate::weights::sharded::NamedTensors, Vec<String>)> {
    use safetensors::{Dtype, SafeTensors};
    if crate::weights::torch_bin::is_torch_bin(bytes) {
        return torch_bin_tensors(bytes);
    }
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| Error::Weights(format!("model.safetensors cannot be read: {e}")))?;
    let (mut out, mut skipped) = (Vec::new(), Vec::new());
    let mut names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
    names.sort();
    for name in names {
        let v = st.tensor(&name).map_err(|e| Error::Weights(format!("tensor `{name}`: {e}")))?;
        let data = match (v.dtype(), host_data(v.dtype(), v.data())) {
            (_, Some(data)) => data,
            (Dtype::I64 | Dtype::I32 | Dtype::U8 | Dtype::BOOL, None) => {
                skipped.push(name);
                continue;
            }
            (other, None) => {
                return Err(Error::Weights(format!("tensor `{name}` has dtype {other:?}; expected f32, f16 or bf16")))
            }
        };
        out.push((name, HostTensor { shape: v.shape().to_vec(), data }));
    }
    Ok((out, skipped))
}

/// [`tensors_and_skipped`] of a `pytorch_model.bin`, read as data ([`crate::weights::torch_bin`]).
fn torch_bin_tensors(bytes: &[u8]) -> Result<(crate::weights::sharded::NamedTensors, Vec<String>)> {
    use crate::weights::torch_bin::{read_source, Entry, FILE};
    let (mut out, mut skipped) = (Vec::new(), Vec::new());
    for (name, e) in read_source(bytes, FILE)? {
        match e {
            Entry::Tensor(t) => out.push((name, t)),
            Entry::Unsupported("I64" | "I32" | "U8" | "BOOL") => skipped.push(name),
            Entry::Unsupported(other) => {
                return Err(Error::Weights(format!("tensor `{name}` has dtype {other}; expected f32, f16 or bf16")))
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok((out, skipped))
}

/// A folder's weights, as bytes.
pub enum WeightsBytes<'a> {
    /// `model.safetensors` (or `pytorch_model.bin`: the bytes say which).
    One(&'a [u8]),
    /// `model.safetensors.index.json` (`file`; or `pytorch_model.bin.index.json`) and its shards by file name
    /// ([`crate::weights::sharded`]).
    Sharded { index: &'a [u8], file: &'static str, shards: &'a [(String, Vec<u8>)] },
}

impl WeightsBytes<'_> {
    /// The tensors, the shards' joined after the index's checks.
    fn tensors(&self) -> Result<Vec<(String, HostTensor)>> {
        match self {
            WeightsBytes::One(bytes) => tensors_from_safetensors(bytes),
            WeightsBytes::Sharded { index, file, shards } => {
                let index = crate::weights::sharded::ShardIndex::parse_as(index, file)?;
                let mut lists = Vec::with_capacity(shards.len());
                for (name, bytes) in shards.iter() {
                    let (tensors, skipped) = tensors_and_skipped(bytes)
                        .map_err(|e| Error::Weights(format!("shard {name}: {e}")))?;
                    lists.push((name.clone(), tensors, skipped));
                }
                index.join_lists(lists)
            }
        }
    }

    /// The bytes of the weights' files.
    #[cfg(not(target_arch = "wasm32"))]
    fn len(&self) -> usize {
        match self {
            WeightsBytes::One(bytes) => bytes.len(),
            WeightsBytes::Sharded { index, shards, .. } => index.len() + shards.iter().map(|(_, b)| b.len()).sum::<usize>(),
        }
    }
}

/// The files of a Hugging Face folder, as bytes.
pub struct FolderFiles<'a> {
    /// The model's name in the GGUF's metadata.
    pub name: &'a str,
    pub config: &'a [u8],
    /// tokenizer.json, or else vocab.txt.
    pub tokenizer: Option<&'a [u8]>,
    pub vocab: Option<&'a [u8]>,
    pub tokenizer_config: Option<&'a [u8]>,
    /// A sentence-transformers folder's own files by their path in the folder (modules.json, each module's
    /// folder, sentence_bert_config.json, config_sentence_transformers.json): carried into the GGUF.
    pub sentence: &'a [(String, Vec<u8>)],
    pub weights: WeightsBytes<'a>,
}

/// A folder's files → the bytes of one `.gguf` with weights in `dtype` (see [`convert`]), and its tensor count.
/// The browser's `exportModel({ format: "gguf" })` and the CLI's `convert` both use it.
pub fn convert_files(f: &FolderFiles<'_>, dtype: Dtype) -> Result<(Vec<u8>, usize)> {
    let text = |name: &str, bytes: &[u8]| -> Result<String> {
        String::from_utf8(bytes.to_vec()).map_err(|_| Error::Input(format!("{name} is not UTF-8")))
    };
    let config_json = text("config.json", f.config)?;
    let tokenizer_json = match (f.tokenizer, f.vocab) {
        (Some(t), _) => text("tokenizer.json", t)?,
        (None, Some(v)) => {
            let vocab: Vec<String> = text("vocab.txt", v)?.lines().map(|l| l.to_string()).collect();
            wordpiece_tokenizer_json(&vocab, &standard_specials(&vocab))?
        }
        (None, None) => return Err(Error::Tokenizer("the folder has neither tokenizer.json nor vocab.txt".into())),
    };
    let tokenizer_config_json = f.tokenizer_config.map(|b| text("tokenizer_config.json", b)).transpose()?;
    let mut tensors = f.weights.tensors()?;
    let hidden = crate::config::BertConfig::from_json_str(&config_json)?.hidden_size;
    let mut read = |name: &str| Ok(f.sentence.iter().find(|(n, _)| n == name).map(|(_, b)| b.clone()));
    let (sentence, dense) = crate::weights::sentence::read_sentence(hidden, &mut read)?;
    tensors.extend(dense);
    let meta = BertGgufMeta {
        name: f.name,
        config_json: &config_json,
        tokenizer_json: &tokenizer_json,
        tokenizer_config_json: tokenizer_config_json.as_deref(),
        pooling: None,
    };
    Ok((super::bert::write_bert_with(&meta, sentence.as_ref(), &tensors, dtype)?, tensors.len()))
}

/// Sizes reported by [`convert`].
#[derive(Clone, Debug)]
pub struct ConvertReport {
    pub safetensors_bytes: u64,
    pub gguf_bytes: u64,
    pub tensors: usize,
}

/// `bertgpu convert`: a Hugging Face BERT folder (`config.json`, `model.safetensors` or the shards
/// `model.safetensors.index.json` names, `tokenizer.json` or `vocab.txt`, optional sentence-transformers
/// `1_Pooling/config.json`) → one `.gguf` file.
#[cfg(not(target_arch = "wasm32"))]
pub fn convert(model_dir: &std::path::Path, dtype: Dtype, out: &std::path::Path) -> Result<ConvertReport> {
    let read = |name: &str| {
        std::fs::read(model_dir.join(name)).map_err(|e| {
            let why = format!(
                "cannot read {} (convert takes a Hugging Face folder with config.json, model.safetensors and \
                 tokenizer.json or vocab.txt)",
                model_dir.join(name).display()
            );
            Error::io(why, e)
        })
    };
    let optional = |name: &str| std::fs::read(model_dir.join(name)).ok();
    let (tokenizer, vocab) = (optional("tokenizer.json"), optional("vocab.txt"));
    if tokenizer.is_none() && vocab.is_none() {
        return Err(Error::Tokenizer(format!("{} has neither tokenizer.json nor vocab.txt", model_dir.display())));
    }
    let config = read("config.json")?;
    // sentence-transformers' files, as bytes for convert_files (which reads and checks them): those its description
    // reads, then each Dense module's weights (model.safetensors, else pytorch_model.bin).
    let mut sentence: Vec<(String, Vec<u8>)> = Vec::new();
    let config_text = String::from_utf8_lossy(&config);
    if let Ok(cfg) = crate::config::BertConfig::from_json_str(&config_text) {
        let mut keep = |name: &str| -> Result<Option<Vec<u8>>> {
            let bytes = optional(name);
            if let Some(b) = &bytes {
                sentence.push((name.to_string(), b.clone()));
            }
            Ok(bytes)
        };
        if let Some(st) = crate::sentence::SentenceConfig::read(cfg.hidden_size, &mut keep)? {
            for m in st.dense() {
                if let crate::sentence::Module::Dense { path, .. } = m {
                    if keep(&format!("{path}/model.safetensors"))?.is_none() {
                        keep(&format!("{path}/pytorch_model.bin"))?;
                    }
                }
            }
        }
    }
    let tokenizer_config = optional("tokenizer_config.json");
    // The folder's weights, safetensors first: model.safetensors, else its index of shards and each shard it names,
    // else pytorch_model.bin, else its index and shards.
    use crate::weights::sharded::{ShardIndex, BIN_INDEX_FILE, INDEX_FILE, MAX_INDEX_BYTES};
    use crate::weights::torch_bin::FILE as BIN;
    let has = |name: &str| model_dir.join(name).exists();
    let (mut st, mut index, mut shards) = (Vec::new(), Vec::new(), Vec::new());
    let index_file = match () {
        _ if has("model.safetensors") || !(has(INDEX_FILE) || has(BIN) || has(BIN_INDEX_FILE)) => None,
        _ if has(INDEX_FILE) => Some(INDEX_FILE),
        _ if has(BIN) => None,
        _ => Some(BIN_INDEX_FILE),
    };
    if let Some(file) = index_file {
        if std::fs::metadata(model_dir.join(file)).map_or(0, |m| m.len()) > MAX_INDEX_BYTES as u64 {
            return Err(Error::Weights(format!("{} is larger than the {MAX_INDEX_BYTES} bytes allowed",
                model_dir.join(file).display())));
        }
        index = read(file)?;
        for name in ShardIndex::parse_as(&index, file)?.shards() {
            if !model_dir.join(name).is_file() {
                return Err(Error::Weights(format!("{file} names the shard {name}, which is not in {}",
                    model_dir.display())));
            }
            shards.push((name.clone(), read(name)?));
        }
    } else {
        let file = if !has("model.safetensors") && has(BIN) { BIN } else { "model.safetensors" };
        st = read(file)?;
        if file == BIN && !crate::weights::torch_bin::is_torch_bin(&st) {
            crate::weights::Weights::from_torch_bin(&st)?; // says what it is not, rather than the safetensors reader
        }
    }
    let weights = match index_file {
        Some(file) => WeightsBytes::Sharded { index: &index, file, shards: &shards },
        None => WeightsBytes::One(&st),
    };
    let weights_bytes = weights.len() as u64;
    let files = FolderFiles {
        name: model_dir.file_name().and_then(|n| n.to_str()).unwrap_or("bert"),
        config: &config,
        tokenizer: tokenizer.as_deref(),
        vocab: vocab.as_deref(),
        tokenizer_config: tokenizer_config.as_deref(),
        sentence: &sentence,
        weights,
    };
    let (bytes, tensors) = convert_files(&files, dtype)?;
    std::fs::write(out, &bytes).map_err(|e| Error::io(format!("writing {}", out.display()), e))?;
    Ok(ConvertReport { safetensors_bytes: weights_bytes, gguf_bytes: bytes.len() as u64, tensors })
}
