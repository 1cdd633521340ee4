//! The GGUF writer: a whole file built in memory.

use super::value::{write_string, write_value, Value, T_U32};
use super::{gguf_err, type_bytes, DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION, KEY_ALIGNMENT, MAX_DIMS, MAX_NAME_BYTES};
use crate::weights::{quant, HostData, HostTensor};
use crate::Result;

/// Builds a GGUF v3 file in memory: metadata in insertion order, tensors aligned to `general.alignment` (32).
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, HostTensor)>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a metadata entry. `general.alignment` is written by [`GgufWriter::to_bytes`].
    pub fn set(&mut self, key: &str, value: Value) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
    }

    /// Adds a tensor (PyTorch shape). Its storage must match its shape; quantized tensors need a last dimension
    /// that is a multiple of 32.
    pub fn add_tensor(&mut self, name: &str, t: HostTensor) -> Result<()> {
        if t.shape.is_empty() || t.shape.len() > MAX_DIMS as usize {
            return Err(gguf_err(format!("tensor `{name}` has shape {:?}; GGUF holds 1 to 4 dimensions", t.shape)));
        }
        if name.len() as u64 > MAX_NAME_BYTES {
            return Err(gguf_err(format!("tensor name `{name}` is longer than {MAX_NAME_BYTES} bytes")));
        }
        if self.tensors.iter().any(|(n, _)| n == name) {
            return Err(gguf_err(format!("tensor `{name}` added twice")));
        }
        let n = quant::numel(&t.shape)?;
        let dtype = t.data.dtype();
        let (per, _) = dtype.block();
        let last = *t.shape.last().unwrap_or(&0) as u64;
        if n == 0 || last % per as u64 != 0 {
            return Err(gguf_err(format!(
                "tensor `{name}` of shape {:?} cannot be stored as {} (rows must be non-empty and a multiple of {per})",
                t.shape,
                dtype.ggml_name()
            )));
        }
        let stored = match &t.data {
            HostData::F32(v) => v.len() as u64 * 4,
            HostData::F16(v) => v.len() as u64 * 2,
            HostData::Q8_0(b) | HostData::Q4_0(b) => b.len() as u64,
            HostData::Placed(_) => return Err(crate::weights::placed_error(&format!("writing `{name}` into a GGUF"))),
        };
        if Some(stored) != type_bytes(dtype, n as u64) {
            return Err(gguf_err(format!(
                "tensor `{name}` of shape {:?} has {stored} bytes of {} data, which does not match its shape",
                t.shape,
                dtype.ggml_name()
            )));
        }
        self.tensors.push((name.to_string(), t));
        Ok(())
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let align = DEFAULT_ALIGNMENT as usize;
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&GGUF_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        let has_align = self.metadata.iter().any(|(k, _)| k == KEY_ALIGNMENT);
        out.extend_from_slice(&((self.metadata.len() + usize::from(!has_align)) as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            let v = if k == KEY_ALIGNMENT { &Value::U32(align as u32) } else { v };
            write_string(&mut out, k);
            out.extend_from_slice(&v.type_id().to_le_bytes());
            write_value(&mut out, v);
        }
        if !has_align {
            write_string(&mut out, KEY_ALIGNMENT);
            out.extend_from_slice(&T_U32.to_le_bytes());
            out.extend_from_slice(&(align as u32).to_le_bytes());
        }
        let mut offset = 0usize;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for (name, t) in &self.tensors {
            write_string(&mut out, name);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for &d in t.shape.iter().rev() {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            out.extend_from_slice(&t.data.dtype().ggml_id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + data_bytes(&t.data)).div_ceil(align) * align;
        }
        out.resize(out.len().div_ceil(align) * align, 0);
        let data_start = out.len();
        for ((_, t), off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off, 0);
            match &t.data {
                HostData::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                HostData::F16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                HostData::Q8_0(b) | HostData::Q4_0(b) => out.extend_from_slice(b),
                HostData::Placed(_) => return Err(crate::weights::placed_error("writing a GGUF")),
            }
        }
        Ok(out)
    }
}

fn data_bytes(d: &HostData) -> usize {
    match d {
        HostData::F32(v) => v.len() * 4,
        HostData::F16(v) => v.len() * 2,
        HostData::Q8_0(b) | HostData::Q4_0(b) => b.len(),
        HostData::Placed(p) => p.bytes,
    }
}
