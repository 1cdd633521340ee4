//! The one list of tensor storage formats: its name, its GGUF (`ggml_type`) id, its block size, and the code the
//! shaders' `WDT` / `*_DT` override constants take. Every layer names a format through this type: the weights'
//! host storage ([`crate::weights::HostData::dtype`]), the GGUF reader and writer, the backends, `bertgpu convert
//! --dtype`.
//!
//! Q8_0 and Q4_0 are llama.cpp's block layouts: 32 values per block along the row, an f16 scale first
//! (`block_q8_0`: 2 + 32 bytes; `block_q4_0`: 2 + 16 bytes).

use crate::{Error, Result};

/// Values per block of Q8_0 and Q4_0 (llama.cpp's `QK8_0` = `QK4_0` = 32).
pub const QK: usize = 32;
/// Bytes of one Q8_0 block: an f16 scale and 32 signed bytes.
pub const Q8_0_BLOCK_BYTES: usize = 2 + QK;
/// Bytes of one Q4_0 block: an f16 scale and 32 nibbles.
pub const Q4_0_BLOCK_BYTES: usize = 2 + QK / 2;

/// How a tensor's elements are stored. Activations are always f32; a weight matrix keeps the dtype of its file and
/// is decoded inside the op that reads it (`linear`, `embeddings`), so device memory holds the file's bytes, not an
/// f32 copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
pub enum Dtype {
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "f32"))]
    F32,
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "f16"))]
    F16,
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "q8_0"))]
    Q8_0,
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "q4_0"))]
    Q4_0,
}

impl Dtype {
    pub const ALL: [Dtype; 4] = [Dtype::F32, Dtype::F16, Dtype::Q8_0, Dtype::Q4_0];

    /// `"f32"`, `"f16"`, `"q8_0"` or `"q4_0"` (the names `convert --dtype` takes).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Q8_0 => "q8_0",
            Dtype::Q4_0 => "q4_0",
        }
    }

    /// The name ggml prints (`"F32"`, `"Q8_0"`, ...).
    pub fn ggml_name(self) -> &'static str {
        ggml_type_name(self.ggml_id())
    }

    /// The `enum ggml_type` value a GGUF file stores.
    pub fn ggml_id(self) -> u32 {
        match self {
            Dtype::F32 => 0,
            Dtype::F16 => 1,
            Dtype::Q4_0 => 2,
            Dtype::Q8_0 => 8,
        }
    }

    /// The dtype of a GGUF tensor type id; `tensor` names the tensor in the error for any other type.
    pub fn from_ggml_id(id: u32, tensor: &str) -> Result<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.ggml_id() == id).ok_or_else(|| {
            Error::Gguf(format!(
                "tensor `{tensor}` has unsupported tensor type {} (ggml type {id}); bertgpu reads F32, F16, Q8_0 and \
                 Q4_0: re-convert the model with `bertgpu convert --dtype f16|q8_0|q4_0`",
                ggml_type_name(id)
            ))
        })
    }

    /// (values per block, bytes per block).
    pub fn block(self) -> (usize, usize) {
        match self {
            Dtype::F32 => (1, 4),
            Dtype::F16 => (1, 2),
            Dtype::Q8_0 => (QK, Q8_0_BLOCK_BYTES),
            Dtype::Q4_0 => (QK, Q4_0_BLOCK_BYTES),
        }
    }

    /// Q8_0 or Q4_0: stored in blocks of [`QK`] values along the row.
    pub fn is_quantized(self) -> bool {
        matches!(self, Dtype::Q8_0 | Dtype::Q4_0)
    }

    /// The code the shaders' `WDT` / `*_DT` override constants take (shaders/lib/quant.wgsl: 0 f32, 1 f16,
    /// 2 Q8_0, 3 Q4_0).
    pub fn shader_code(self) -> u32 {
        match self {
            Dtype::F32 => 0,
            Dtype::F16 => 1,
            Dtype::Q8_0 => 2,
            Dtype::Q4_0 => 3,
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Dtype {
    type Err = Error;
    /// A [`Dtype::name`], in any case.
    fn from_str(s: &str) -> Result<Dtype> {
        let lower = s.to_ascii_lowercase();
        Dtype::ALL
            .into_iter()
            .find(|d| d.name() == lower)
            .ok_or_else(|| Error::Input(format!("unknown dtype `{s}`: use f32, f16, q8_0 or q4_0")))
    }
}

/// Names of ggml types by id, for error messages.
fn ggml_type_name(id: u32) -> &'static str {
    const NAMES: [&str; 42] = [
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
        "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16",
        "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4",
        "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4", "NVFP4", "?",
    ];
    NAMES.get(id as usize).copied().unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids_round_trip() {
        for d in Dtype::ALL {
            assert_eq!(d.name().parse::<Dtype>().unwrap(), d);
            assert_eq!(d.name().to_ascii_uppercase().parse::<Dtype>().unwrap(), d);
            assert_eq!(Dtype::from_ggml_id(d.ggml_id(), "t").unwrap(), d);
            assert_eq!(d.ggml_name(), d.name().to_ascii_uppercase());
        }
        let e = Dtype::from_ggml_id(12, "blk.0.ffn_up.weight").unwrap_err().to_string();
        assert!(e.contains("Q4_K") && e.contains("blk.0.ffn_up.weight"), "{e}");
        assert!("bf16".parse::<Dtype>().is_err());
    }

    #[test]
    fn llama_cpp_block_layouts() {
        // ggml.c's type_traits: Q8_0 is 34 bytes per 32 values, Q4_0 is 18.
        assert_eq!(Dtype::Q8_0.block(), (32, 34));
        assert_eq!(Dtype::Q4_0.block(), (32, 18));
        // Blocks are 2-byte aligned but not 4-byte aligned: GPU code reading them from `array<u32>` must handle
        // blocks that straddle words.
        assert!(Q8_0_BLOCK_BYTES % 4 != 0 && Q4_0_BLOCK_BYTES % 4 != 0);
    }
}
