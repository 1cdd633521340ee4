//! `bertgpu convert`: a Hugging Face folder → one BERT `.gguf`, and how each tensor is stored for a `--dtype`.

#[cfg(not(target_arch = "wasm32"))]
use super::bert::{write_bert, BertGgufMeta};
#[cfg(not(target_arch = "wasm32"))]
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
    let text = |name: &str| -> Result<String> {
        String::from_utf8(read(name)?).map_err(|_| Error::Input(format!("{name} is not UTF-8")))
    };
    let config_json = text("config.json")?;
    let tokenizer_json = if model_dir.join("tokenizer.json").exists() {
        text("tokenizer.json")?
    } else if model_dir.join("vocab.txt").exists() {
        let vocab: Vec<String> = text("vocab.txt")?.lines().map(|l| l.to_string()).collect();
        let special = standard_specials(&vocab);
        wordpiece_tokenizer_json(&vocab, &special)?
    } else {
        return Err(Error::Tokenizer(format!("{} has neither tokenizer.json nor vocab.txt", model_dir.display())));
    };
    let pooling = std::fs::read_to_string(model_dir.join("1_Pooling/config.json")).ok().and_then(|s| {
        let v: serde_json::Value = serde_json::from_str(&s).ok()?;
        if v.get("pooling_mode_mean_tokens")?.as_bool()? {
            Some("mean")
        } else if v.get("pooling_mode_cls_token")?.as_bool()? {
            Some("cls")
        } else {
            None
        }
    });
    let st = read("model.safetensors")?;
    let tensors = tensors_from_safetensors(&st)?;
    let name = model_dir.file_name().and_then(|n| n.to_str()).unwrap_or("bert");
    let tokenizer_config_json = std::fs::read_to_string(model_dir.join("tokenizer_config.json")).ok();
    let meta = BertGgufMeta {
        name,
        config_json: &config_json,
        tokenizer_json: &tokenizer_json,
        tokenizer_config_json: tokenizer_config_json.as_deref(),
        pooling,
    };
    let bytes = write_bert(&meta, &tensors, dtype)?;
    std::fs::write(out, &bytes).map_err(|e| Error::io(format!("writing {}", out.display()), e))?;
    Ok(ConvertReport { safetensors_bytes: st.len() as u64, gguf_bytes: bytes.len() as u64, tensors: tensors.len() })
}
