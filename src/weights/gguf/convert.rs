//! `bertgpu convert`: a Hugging Face folder → one BERT `.gguf`, and how each tensor is stored for a `--dtype`.

use super::bert::BertGgufMeta;
use crate::tokenizer::gguf_vocab::{standard_specials, wordpiece_tokenizer_json};
use crate::dtype::{Dtype, QK};
use crate::weights::quant;
use crate::weights::safetensors::host_data;
use crate::weights::{HostData, HostTensor};
use crate::{Error, Result};

/// llama.cpp's `general.file_type` for a `--dtype` (`LlamaFileType`: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2,
/// MOSTLY_Q8_0 7).
pub(super) fn file_type(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::F32 => 0,
        Dtype::F16 => 1,
        Dtype::Q4_0 => 2,
        Dtype::Q8_0 => 7,
    }
}

/// How one tensor is stored for a given `--dtype`, in a model of `n_layers` encoder layers. The policy was
/// measured on all-MiniLM-L6-v2 with `scripts/gguf_accuracy.py` (cosine of mean-pooled embeddings against f32
/// PyTorch; numbers in docs/GGUF.md):
/// - 1-D tensors (biases, LayerNorm γ/β, the MLM output bias) stay f32 at every dtype: they are 0.1% of the bytes
///   and feed additions and normalizations directly.
/// - Encoder linear weights (`blk.N.attn_*`, `ffn_*`) take the requested dtype: they are the matmul inputs whose
///   errors average out over a dot product of length H or 4H. Except for Q4_0, which alone costs too much
///   (min cosine 0.88, 0.94 on "Hello world!"): `attn_v` in every layer and `ffn_up` in the last half of the layers
///   stay Q8_0 (min cosine 0.95, ≥ 0.97 on the golden sentences, at 0.174× the f32 size instead of 0.159×). Like
///   llama.cpp's `Q4_K_M`, which also gives `attn_v` and half of the FFN layers more bits.
/// - The word embeddings take the requested dtype too: they are half of MiniLM's bytes and the size targets
///   (Q8_0 ≤ 0.30×, Q4_0 ≤ 0.18× of f32) cannot be met otherwise; measured, Q8_0 word embeddings cost nothing
///   (min cosine 0.99999) and Q4_0 ones 0.003.
/// - Position and token-type embeddings and the task-head matrices (pooler, classifier, MLM transform, QA): f16
///   for every dtype but f32. They are small, and their errors are not averaged by a long dot product before
///   they reach the output (head logits).
/// - A quantized dtype on a matrix whose rows are not a multiple of 32 falls back to f16.
pub fn storage_for(gguf_name: &str, shape: &[usize], dtype: Dtype, n_layers: usize) -> Dtype {
    let quant = match dtype {
        Dtype::F32 => return Dtype::F32,
        _ if shape.len() < 2 => return Dtype::F32,
        Dtype::F16 => return Dtype::F16,
        Dtype::Q8_0 | Dtype::Q4_0 => dtype,
    };
    let rows_fit = shape.last().is_some_and(|c| c % QK == 0);
    if !rows_fit {
        return Dtype::F16;
    }
    if gguf_name == "token_embd.weight" {
        return quant;
    }
    let Some(rest) = gguf_name.strip_prefix("blk.") else { return Dtype::F16 };
    if !gguf_name.ends_with(".weight") {
        return Dtype::F16;
    }
    if quant == Dtype::Q4_0 {
        let (layer, module) = rest.split_once('.').unwrap_or((rest, ""));
        let layer: usize = layer.parse().unwrap_or(0);
        if module == "attn_v.weight" || (module == "ffn_up.weight" && 2 * layer >= n_layers) {
            return Dtype::Q8_0;
        }
    }
    quant
}

pub(super) fn store(t: &HostTensor, ty: Dtype) -> Result<HostTensor> {
    match ty {
        Dtype::F32 => match &t.data {
            HostData::F32(_) => Ok(t.clone()),
            _ => Ok(HostTensor { shape: t.shape.clone(), data: HostData::F32(quant::to_f32(t)?) }),
        },
        Dtype::F16 => match &t.data {
            HostData::F16(_) => Ok(t.clone()),
            _ => quant::to_f16(t),
        },
        Dtype::Q8_0 | Dtype::Q4_0 => quant::quantize(t, ty),
    }
}

/// Hugging Face safetensors bytes → tensors (f32, f16 and bf16 kept as f32/f16; integer buffers such as
/// `embeddings.position_ids` are skipped: they are not weights).
pub fn tensors_from_safetensors(bytes: &[u8]) -> Result<Vec<(String, HostTensor)>> {
    use safetensors::{Dtype, SafeTensors};
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| Error::Weights(format!("model.safetensors cannot be read: {e}")))?;
    let mut out = Vec::new();
    let mut names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
    names.sort();
    for name in names {
        let v = st.tensor(&name).map_err(|e| Error::Weights(format!("tensor `{name}`: {e}")))?;
        let data = match (v.dtype(), host_data(v.dtype(), v.data())) {
            (_, Some(data)) => data,
            (Dtype::I64 | Dtype::I32 | Dtype::U8 | Dtype::BOOL, None) => continue,
            (other, None) => {
                return Err(Error::Weights(format!("tensor `{name}` has dtype {other:?}; expected f32, f16 or bf16")))
            }
        };
        out.push((name, HostTensor { shape: v.shape().to_vec(), data }));
    }
    Ok(out)
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
    pub safetensors: &'a [u8],
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
    let mut tensors = tensors_from_safetensors(f.safetensors)?;
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

/// `bertgpu convert`: a Hugging Face BERT folder (`config.json`, `model.safetensors`, `tokenizer.json` or
/// `vocab.txt`, optional sentence-transformers `1_Pooling/config.json`) → one `.gguf` file.
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
    // sentence-transformers' files: the fixed ones, then each module's folder that modules.json names.
    // (Read here only to learn which files there are; convert_files reads them, checked against the config.)
    let mut sentence: Vec<(String, Vec<u8>)> = Vec::new();
    let config_text = String::from_utf8(optional("config.json").unwrap_or_default()).unwrap_or_default();
    if let Ok(cfg) = crate::config::BertConfig::from_json_str(&config_text) {
        let mut read = |name: &str| -> Result<Option<Vec<u8>>> {
            let bytes = optional(name);
            if let Some(b) = &bytes {
                sentence.push((name.to_string(), b.clone()));
            }
            Ok(bytes)
        };
        crate::weights::sentence::read_sentence(cfg.hidden_size, &mut read)?;
    }
    let (st, config, tokenizer_config) = (read("model.safetensors")?, read("config.json")?, optional("tokenizer_config.json"));
    let files = FolderFiles {
        name: model_dir.file_name().and_then(|n| n.to_str()).unwrap_or("bert"),
        config: &config,
        tokenizer: tokenizer.as_deref(),
        vocab: vocab.as_deref(),
        tokenizer_config: tokenizer_config.as_deref(),
        sentence: &sentence,
        safetensors: &st,
    };
    let (bytes, tensors) = convert_files(&files, dtype)?;
    std::fs::write(out, &bytes).map_err(|e| Error::io(format!("writing {}", out.display()), e))?;
    Ok(ConvertReport { safetensors_bytes: st.len() as u64, gguf_bytes: bytes.len() as u64, tensors })
}
