//! `model.safetensors` → [`Weights`]: f32 as is, f16 kept as f16 (backends decide how to hold it), bf16 widened to
//! f32 (exact: bf16 is the top half of an f32). Tensors of other dtypes (e.g. the i64 `position_ids` buffer some
//! files carry) are recorded and only an error if a model asks for them.
//!
//! This file reads bytes already at hand ([`ByteSource`]); a file on disk is read as it streams in, by
//! [`super::stream`] ([`Weights::from_safetensors_file`] is there).

use safetensors::tensor::Metadata;
use safetensors::{Dtype, SafeTensorError};

pub use super::bytes::ByteSource;
use super::bytes::read_le;
use super::{HostData, HostTensor, Weights};
use crate::{Error, Result};

impl Weights {
    /// Parses the bytes of a `.safetensors` file (the header's offsets are checked against the length, so a
    /// truncated file is an error, not a panic).
    pub fn from_safetensors(bytes: &[u8]) -> Result<Weights> {
        Self::from_safetensors_source(bytes)
    }

    /// Parses a `.safetensors` file read in pieces from `src`: the header, then each tensor's bytes copied once,
    /// straight into its own storage. A file that lives outside this memory (the browser's JS bytes) is thus never
    /// held whole beside the tensors decoded from it.
    pub fn from_safetensors_source(src: &(impl ByteSource + ?Sized)) -> Result<Weights> {
        let len = src.byte_len();
        let mut head = vec![0u8; len.min(8)];
        src.read(0, &mut head);
        let (meta, base) = match header(&head, Some(len))? {
            Some(parsed) => parsed,
            None => {
                // The length is there and fits the file (`header` checked): now the whole header.
                head.resize(8 + header_len(&head), 0);
                src.read(8, &mut head[8..]);
                header(&head, Some(len))?.ok_or_else(|| invalid(SafeTensorError::InvalidHeaderLength))?
            }
        };
        drop(head);
        let mut w = Weights::new();
        for (name, info) in meta.tensors() {
            let (start, end) = info.data_offsets;
            let Some(data) = read_host_data(info.dtype, src, base + start, end - start) else {
                w.insert_unsupported(name, format!("{:?}", info.dtype));
                continue;
            };
            w.insert(name, HostTensor { shape: info.shape.clone(), data });
        }
        Ok(w)
    }
}

/// A safetensors error as ours, with the advice a truncated or damaged download needs.
pub(crate) fn invalid(e: SafeTensorError) -> Error {
    Error::Weights(format!("not a valid safetensors file ({e}); the file may be truncated: download it again"))
}

/// The header's length, from the file's first 8 bytes (at least 8 given).
fn header_len(head: &[u8]) -> usize {
    u64::from_le_bytes(head[..8].try_into().expect("8 bytes")) as usize
}

/// The header of a safetensors file from its first bytes `head` (the file's length `len`, where known): the tensors'
/// metadata and where their data starts, or `None` while `head` is too short to hold the header. Everything the
/// header says is checked as far as `head` and `len` allow (the `safetensors` crate's checks: offsets that follow
/// one another and match each shape and dtype; a data section that ends where the file does).
pub(crate) fn header(head: &[u8], len: Option<usize>) -> Result<Option<(Metadata, usize)>> {
    if head.len() < 8 {
        return match len {
            Some(len) if len < 8 => Err(invalid(SafeTensorError::HeaderTooSmall)),
            _ => Ok(None),
        };
    }
    // The `safetensors` crate's own limits: a header of at most 100 MB, within the file.
    let n = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    if n > MAX_HEADER_BYTES {
        return Err(invalid(SafeTensorError::HeaderTooLarge));
    }
    let n = n as usize;
    if len.is_some_and(|len| n > len - 8) {
        return Err(invalid(SafeTensorError::InvalidHeaderLength));
    }
    let Some(text) = head.get(8..8 + n) else { return Ok(None) };
    let text = std::str::from_utf8(text).map_err(|e| invalid(SafeTensorError::InvalidHeader(e)))?;
    let meta: Metadata =
        serde_json::from_str(text).map_err(|e| invalid(SafeTensorError::InvalidHeaderDeserialization(e)))?;
    let base = 8 + n;
    if len.is_some_and(|len| base.checked_add(meta.data_len()) != Some(len)) {
        return Err(invalid(SafeTensorError::MetadataIncompleteBuffer));
    }
    Ok(Some((meta, base)))
}

/// The `safetensors` crate's cap on the header's length.
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor's little-endian bytes → host storage: f32 as is, f16 kept as f16 bits, bf16 widened to f32; `None` for
/// any other dtype. The one decoder of safetensors data: [`Weights::from_safetensors`] and the GGUF converter
/// ([`crate::weights::gguf::tensors_from_safetensors`]) both use it.
pub(crate) fn host_data(dtype: Dtype, raw: &[u8]) -> Option<HostData> {
    read_host_data(dtype, raw, 0, raw.len())
}

/// [`host_data`] of the `bytes` bytes at `at` in `src`, read straight into the tensor's storage ([`read_le`]).
fn read_host_data(dtype: Dtype, src: &(impl ByteSource + ?Sized), at: usize, bytes: usize) -> Option<HostData> {
    Some(match dtype {
        Dtype::F32 => HostData::F32(read_le(src, at, bytes)),
        Dtype::F16 => HostData::F16(read_le(src, at, bytes)),
        Dtype::BF16 => HostData::F32(read_le::<u16>(src, at, bytes).into_iter().map(bf16_to_f32).collect()),
        _ => return None,
    })
}

/// A bf16 (raw bits) as f32, exactly: bf16 is the top half of an f32, so every value, NaN payloads included, is kept.
pub(crate) fn bf16_to_f32(bits: u16) -> f32 {
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

    /// A file read in pieces, recording the largest piece asked for.
    struct Pieces<'a>(&'a [u8], std::cell::Cell<usize>);

    impl ByteSource for Pieces<'_> {
        fn byte_len(&self) -> usize {
            self.0.len()
        }
        fn read(&self, at: usize, out: &mut [u8]) {
            self.1.set(self.1.get().max(out.len()));
            self.0.read(at, out);
        }
    }

    #[test]
    fn reads_tensor_by_tensor() {
        let a: Vec<u8> = (0..64).flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes()).collect();
        let b: Vec<u8> = [0x3e00u16, 0xc000, 0x0001].iter().flat_map(|v| v.to_le_bytes()).collect();
        let c: Vec<u8> = [0x3fc0u16, 0x7f80].iter().flat_map(|v| v.to_le_bytes()).collect();
        let views = [
            ("a", TensorView::new(Dtype::F32, vec![8, 8], &a).unwrap()),
            ("b", TensorView::new(Dtype::F16, vec![3], &b).unwrap()),
            ("c", TensorView::new(Dtype::BF16, vec![2], &c).unwrap()),
        ];
        let bytes = safetensors::serialize(views, None).unwrap();
        let src = Pieces(&bytes, std::cell::Cell::new(0));
        let (whole, pieces) = (Weights::from_safetensors(&bytes).unwrap(), Weights::from_safetensors_source(&src).unwrap());
        for (name, shape) in [("a", &[8, 8][..]), ("b", &[3]), ("c", &[2])] {
            assert_eq!(pieces.stored(name), whole.stored(name), "{name}");
            assert_eq!(pieces.stored(name).unwrap().shape, shape);
        }
        assert_eq!(pieces.stored("c").unwrap().data, HostData::F32(vec![1.5, f32::INFINITY]));
        // Never the whole file at once: the largest piece is the header or the largest tensor.
        let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(src.1.get(), header.max(a.len()));
        assert!(src.1.get() < bytes.len() - 8);
    }

    #[test]
    fn truncated_is_an_error() {
        let f: Vec<u8> = [1.5f32; 16].iter().flat_map(|v| v.to_le_bytes()).collect();
        let bytes = file(Dtype::F32, &f, vec![16]);
        for cut in [0, 4, 8, 12, bytes.len() / 2, bytes.len() - 1] {
            let e = Weights::from_safetensors(&bytes[..cut]).unwrap_err().to_string();
            assert!(e.contains("truncated"), "{e}");
        }
        // Bytes after the last tensor, and a header length past the end.
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Weights::from_safetensors(&longer).unwrap_err().to_string().contains("truncated"));
        let mut huge = bytes.clone();
        huge[..8].copy_from_slice(&(u64::MAX).to_le_bytes());
        assert!(Weights::from_safetensors(&huge).unwrap_err().to_string().contains("not a valid safetensors"));
    }
}
