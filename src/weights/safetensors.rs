//! `model.safetensors` → [`Weights`]: f32 as is, f16 kept as f16 (backends decide how to hold it), bf16 widened to
//! f32 (exact: bf16 is the top half of an f32). Tensors of other dtypes (e.g. the i64 `position_ids` buffer some
//! files carry) are recorded and only an error if a model asks for them.

use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use super::{HostData, HostTensor, Weights};
use crate::{Error, Result};

impl Weights {
    /// Reads a `.safetensors` file.
    pub fn from_safetensors_file(path: impl AsRef<Path>) -> Result<Weights> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| Error::io(format!("cannot read weights file {}", path.display()), e))?;
        Self::from_safetensors(&bytes).map_err(|e| match e {
            Error::Weights(m) => Error::Weights(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Parses the bytes of a `.safetensors` file (the header's offsets are checked against the length by the
    /// `safetensors` crate, so a truncated file is an error, not a panic).
    pub fn from_safetensors(bytes: &[u8]) -> Result<Weights> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| {
            Error::Weights(format!("not a valid safetensors file ({e}); the file may be truncated: download it again"))
        })?;
        let mut w = Weights::new();
        for (name, view) in st.tensors() {
            let shape = view.shape().to_vec();
            let Some(data) = host_data(view.dtype(), view.data()) else {
                w.insert_unsupported(name, format!("{:?}", view.dtype()));
                continue;
            };
            w.insert(name, HostTensor { shape, data });
        }
        Ok(w)
    }
}

/// One tensor's little-endian bytes → host storage: f32 as is, f16 kept as f16 bits, bf16 widened to f32; `None` for
/// any other dtype. The one decoder of safetensors data: [`Weights::from_safetensors`] and the GGUF converter
/// ([`crate::weights::gguf::tensors_from_safetensors`]) both use it.
pub(crate) fn host_data(dtype: Dtype, raw: &[u8]) -> Option<HostData> {
    Some(match dtype {
        Dtype::F32 => HostData::F32(raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()),
        Dtype::F16 => HostData::F16(raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()),
        Dtype::BF16 => HostData::F32(raw.chunks_exact(2).map(|c| bf16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect()),
        _ => return None,
    })
}

/// A bf16 (raw bits) as f32, exactly: bf16 is the top half of an f32, so every value, NaN payloads included, is kept.
fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// One f32 tensor to write: its name, its shape, its values (row-major).
pub struct F32Tensor<'a> {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: &'a [f32],
}

/// The bytes of a `.safetensors` file of f32 tensors, laid out in name order with the header's keys sorted, so the
/// same tensors always give the same bytes (the `safetensors` crate's writer takes its metadata as a `HashMap`,
/// whose order changes from run to run).
pub fn write_f32(tensors: &[F32Tensor<'_>], metadata: &std::collections::BTreeMap<&str, String>) -> Result<Vec<u8>> {
    use serde_json::{json, Value};
    use std::collections::BTreeMap;
    let mut header: BTreeMap<String, Value> = BTreeMap::new();
    header.insert("__metadata__".into(), json!(metadata));
    let mut order: Vec<&F32Tensor<'_>> = tensors.iter().collect();
    order.sort_by(|a, b| a.name.cmp(&b.name));
    let (mut offset, mut data) = (0usize, Vec::new());
    for t in order {
        if t.shape.iter().product::<usize>() != t.values.len() {
            return Err(Error::Input(format!("{}: {} values for shape {:?}", t.name, t.values.len(), t.shape)));
        }
        let end = offset + t.values.len() * 4;
        if header.insert(t.name.clone(), json!({"dtype": "F32", "shape": t.shape, "data_offsets": [offset, end]})).is_some() {
            return Err(Error::Input(format!("tensor `{}` is given twice", t.name)));
        }
        data.extend(t.values.iter().flat_map(|x| x.to_le_bytes()));
        offset = end;
    }
    let mut head = serde_json::to_vec(&header)?;
    while head.len() % 8 != 0 {
        head.push(b' '); // the format pads the header with spaces to an 8-byte boundary
    }
    let mut out = Vec::with_capacity(8 + head.len() + data.len());
    out.extend((head.len() as u64).to_le_bytes());
    out.extend(head);
    out.extend(data);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    fn file(dtype: Dtype, bytes: &[u8], shape: Vec<usize>) -> Vec<u8> {
        let v = TensorView::new(dtype, shape, bytes).unwrap();
        safetensors::serialize([("x", v)], None).unwrap()
    }

    #[test]
    fn reads_dtypes() {
        let f: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let w = Weights::from_safetensors(&file(Dtype::F32, &f, vec![2])).unwrap();
        assert_eq!(w.get("x", &[2]).unwrap().to_f32().unwrap(), vec![1.5, -2.0]);
        // bf16 1.5 = 0x3fc0, -2 = 0xc000
        let b: Vec<u8> = [0x3fc0u16, 0xc000].iter().flat_map(|v| v.to_le_bytes()).collect();
        let w = Weights::from_safetensors(&file(Dtype::BF16, &b, vec![2])).unwrap();
        assert_eq!(w.get("x", &[2]).unwrap().data, HostData::F32(vec![1.5, -2.0]));
        // f16 1.5 = 0x3e00
        let h: Vec<u8> = [0x3e00u16, 0xc000].iter().flat_map(|v| v.to_le_bytes()).collect();
        let w = Weights::from_safetensors(&file(Dtype::F16, &h, vec![1, 2])).unwrap();
        assert_eq!(w.get("x", &[1, 2]).unwrap().to_f32().unwrap(), vec![1.5, -2.0]);
        let i: Vec<u8> = [3i64].iter().flat_map(|v| v.to_le_bytes()).collect();
        let w = Weights::from_safetensors(&file(Dtype::I64, &i, vec![1])).unwrap();
        assert!(w.get("x", &[1]).unwrap_err().to_string().contains("I64"));
    }

    #[test]
    fn bf16_to_f32_is_exact() {
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(bf16_to_f32(0xc020), -2.5);
        // The largest finite bf16: exponent 254, mantissa all ones = (2 − 2⁻⁷) · 2¹²⁷.
        assert_eq!(bf16_to_f32(0x7f7f), (2.0 - 2f32.powi(-7)) * 2f32.powi(127));
        assert_eq!(bf16_to_f32(0x7f7f), 3.389_531_4e38);
        // The smallest subnormal: 2⁻¹³³ (an f32 subnormal too).
        assert_eq!(bf16_to_f32(0x0001), 2f32.powi(-133));
        assert_eq!(bf16_to_f32(0x0001).to_bits(), 0x0001_0000);
        assert_eq!(bf16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        assert_eq!(bf16_to_f32(0x7f80), f32::INFINITY);
    }

    #[test]
    fn truncated_is_an_error() {
        let f: Vec<u8> = [1.5f32; 16].iter().flat_map(|v| v.to_le_bytes()).collect();
        let bytes = file(Dtype::F32, &f, vec![16]);
        for cut in [0, 4, 8, bytes.len() / 2, bytes.len() - 1] {
            let e = Weights::from_safetensors(&bytes[..cut]).unwrap_err().to_string();
            assert!(e.contains("truncated"), "{e}");
        }
    }
}
