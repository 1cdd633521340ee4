//! Weights on the host: safetensors and GGUF files read into [`HostTensor`]s under Hugging Face names.

pub mod gguf;
pub mod quant;

/// A tensor on the host in the dtype its file stores. Shapes are PyTorch's (a linear weight is `(out, in)`).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: HostData,
}

/// Element storage. Quantized formats use llama.cpp's block layouts along the last (contiguous) dimension.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    F32(Vec<f32>),
    /// IEEE half, as raw bits.
    F16(Vec<u16>),
    /// Blocks of 32: an f16 scale then 32 × i8 (34 bytes).
    Q8_0(Vec<u8>),
    /// Blocks of 32: an f16 scale then 16 bytes of 4-bit values offset by 8 (18 bytes).
    Q4_0(Vec<u8>),
}
