//! How each tensor of a BERT GGUF is stored for a `--dtype`: the rule the writer ([`super::bert::write_bert`]) applies
//! and the converter (`convert.rs`) reports, apart from both so that neither imports the other for it.

use crate::dtype::{Dtype, QK};
use crate::weights::{quant, HostData, HostTensor};
use crate::Result;

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
        // A packed `[q; k; v]` (NomicBERT, GTE) holds `attn_v`; a gated block's gate (and GTE's packed `[up; gate]`)
        // is kept with its `ffn_up`.
        let up = matches!(module, "ffn_up.weight" | "ffn_gate.weight" | "ffn_up_gate.weight");
        if module == "attn_v.weight" || module == "attn_qkv.weight" || (up && 2 * layer >= n_layers) {
            return Dtype::Q8_0;
        }
    }
    quant
}

/// `t` converted to storage `ty` (a copy when it is already stored so).
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
