//! A weights file that arrives in pieces, in file order (the browser's download, read as it comes): the header is
//! parsed as soon as it is all there, then each tensor's bytes are copied straight into its storage as they arrive.
//! Neither the whole file nor a second copy of it is ever held, so a model's peak memory during the load is its
//! tensors plus one piece of the download.
//!
//! The checks are the whole-file readers' ([`Weights::from_safetensors_source`], [`gguf::read_bert`]), with the same
//! errors; the fuzz targets (`crate::fuzzing`) feed every input both ways and require the same answer.

use safetensors::SafeTensorError;
use sha2::{Digest, Sha256};

use super::gguf::{self, BertGguf, Gguf};
use super::safetensors::{bf16_to_f32, header, invalid};
use super::{HostData, HostTensor, Weights};
use crate::dtype::Dtype;
use crate::{Error, Result};

/// Which kind of file arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `model.safetensors`: the tensors alone.
    Safetensors,
    /// A BERT `.gguf`: config, tokenizer and tensors.
    Gguf,
}

/// What a finished file holds.
pub enum Streamed {
    Safetensors(Weights),
    Gguf(Box<BertGguf>),
}

/// A file being received: [`WeightStream::push`] its pieces in order, then [`WeightStream::finish`].
pub struct WeightStream {
    format: Format,
    /// The file's length where announced (a download's content-length), else the most it may hold.
    len: Option<usize>,
    limit: usize,
    received: usize,
    hasher: Option<Sha256>,
    /// The file's first bytes, until the header is parsed.
    head: Vec<u8>,
    /// GGUF: parse the header again once `head` holds this many bytes (its length is not written up front).
    next_try: usize,
    body: Option<Body>,
}

/// The tensors of a parsed header, filled in file order.
struct Body {
    slots: Vec<Slot>,
    /// The slot being filled (`slots` are sorted by their place in the file).
    at: usize,
    /// safetensors: where the data ends (the file must end there too). GGUF: bytes after the last tensor are allowed.
    end: Option<usize>,
    gguf: Option<Gguf>,
}

struct Slot {
    name: String,
    shape: Vec<usize>,
    /// Where the header lists it (GGUF's tensors keep the header's order).
    order: usize,
    start: usize,
    len: usize,
    /// `Err(dtype)`: a dtype we do not read, skipped and recorded (safetensors' i64 `position_ids`).
    dtype: std::result::Result<Stored, String>,
    data: Option<Filling>,
}

#[derive(Clone, Copy)]
enum Stored {
    F32,
    F16,
    Bf16,
    Q8_0,
    Q4_0,
}

/// A tensor's storage while its bytes arrive.
enum Filling {
    F32(Vec<f32>),
    /// f16 bits, or bf16 bits widened to f32 once complete.
    U16(Vec<u16>, bool),
    Blocks(Vec<u8>, Dtype),
}

/// Reads the file at `path` through a [`WeightStream`], a piece at a time: the tensors are the only copy of the
/// weights the host ever holds (reading the whole file first held it twice at the peak). Natively, the model folder's
/// `model.safetensors` and a `.gguf` path load this way.
#[cfg(not(target_arch = "wasm32"))]
pub fn read_file(path: &std::path::Path, format: Format) -> Result<Streamed> {
    use std::io::Read;
    /// The piece size: large enough that reading costs no more than a whole-file read, small beside any model.
    const PIECE: usize = 1 << 20;
    let cannot = |e| Error::io(format!("cannot read weights file {}", path.display()), e);
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    let len = file.metadata().map_err(cannot)?.len();
    let len = usize::try_from(len).map_err(|_| Error::Weights(format!("{} is too large", path.display())))?;
    let mut stream = WeightStream::new(format, Some(len), len, false);
    let mut piece = vec![0u8; PIECE.min(len.max(1))];
    loop {
        let n = match file.read(&mut piece) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(cannot(e)),
        };
        stream.push(&piece[..n])?;
    }
    Ok(stream.finish()?.0)
}

impl WeightStream {
    /// A file of `format`, `len` bytes long if known; none may be longer than `limit` (the caller's `maxBytes`).
    /// `hash`: keep the SHA-256 of the bytes, for a pinned file ([`WeightStream::finish`] returns it).
    pub fn new(format: Format, len: Option<usize>, limit: usize, hash: bool) -> WeightStream {
        WeightStream {
            format,
            len,
            limit: len.unwrap_or(limit),
            received: 0,
            hasher: hash.then(Sha256::new),
            head: Vec::new(),
            next_try: 0,
            body: None,
        }
    }

    /// The bytes that follow those already pushed.
    pub fn push(&mut self, piece: &[u8]) -> Result<()> {
        if piece.len() > self.limit - self.received {
            return Err(Error::Weights(format!(
                "the file is longer than the {} bytes {}",
                self.limit,
                if self.len.is_some() { "its download announced" } else { "allowed" }
            )));
        }
        if let Some(h) = &mut self.hasher {
            h.update(piece);
        }
        let at = self.received;
        self.received += piece.len();
        match &mut self.body {
            Some(body) => body.fill(at, piece),
            None => {
                self.head.extend_from_slice(piece);
                self.take_header(false).map(drop)
            }
        }
    }

    /// The file is complete: its contents, and the SHA-256 of its bytes (lower-case hex) if asked for.
    pub fn finish(mut self) -> Result<(Streamed, Option<String>)> {
        if self.len.is_some_and(|len| self.received < len) {
            return Err(self.truncated());
        }
        self.len = Some(self.received);
        if self.body.is_none() && !self.take_header(true)? {
            return Err(self.truncated());
        }
        let body = self.body.take().expect("parsed");
        // (A tensor of no bytes is complete without any.)
        if let Some(slot) = body.slots[body.at..].iter().find(|s| s.len > 0) {
            return Err(match self.format {
                Format::Safetensors => invalid(SafeTensorError::MetadataIncompleteBuffer),
                Format::Gguf => gguf::gguf_err(format!(
                    "tensor `{}` ({:?}) needs bytes up to {} but the file has {} bytes: the file is truncated or corrupt",
                    slot.name,
                    slot.shape,
                    slot.start + slot.len,
                    self.received
                )),
            });
        }
        if body.end.is_some_and(|end| end != self.received) {
            return Err(invalid(SafeTensorError::MetadataIncompleteBuffer));
        }
        let digest = self.hasher.take().map(|h| h.finalize().iter().map(|b| format!("{b:02x}")).collect());
        Ok((body.finish()?, digest))
    }

    fn truncated(&self) -> Error {
        match self.format {
            Format::Safetensors => invalid(SafeTensorError::MetadataIncompleteBuffer),
            Format::Gguf => gguf::gguf_err(format!(
                "file is truncated: {} bytes arrived{} (incomplete download?)",
                self.received,
                self.len.map_or(String::new(), |len| format!(" of {len}"))
            )),
        }
    }

    /// Parses the header once `head` can hold it all (`last`: no more bytes will come), then hands the bytes after
    /// it to the tensors; true once parsed.
    fn take_header(&mut self, last: bool) -> Result<bool> {
        if !self.parse_header(last)? {
            return Ok(false);
        }
        let head = std::mem::take(&mut self.head);
        self.body.as_mut().expect("parsed").fill(0, &head)?;
        Ok(true)
    }

    /// [`WeightStream::take_header`]'s parse: the tensors' slots, in file order.
    fn parse_header(&mut self, last: bool) -> Result<bool> {
        let len = if last { Some(self.received) } else { self.len };
        match self.format {
            Format::Safetensors => {
                let Some((meta, base)) = header(&self.head, len)? else { return Ok(false) };
                if base.saturating_add(meta.data_len()) > self.limit {
                    return Err(Error::Weights(format!(
                        "the safetensors header describes a file of {} bytes, more than the {} bytes allowed",
                        base.saturating_add(meta.data_len()),
                        self.limit
                    )));
                }
                let mut slots: Vec<Slot> = meta
                    .tensors()
                    .into_iter()
                    .map(|(name, info)| Slot {
                        name,
                        shape: info.shape.clone(),
                        order: 0, // (a map: no order to keep)
                        start: base + info.data_offsets.0,
                        len: info.data_offsets.1 - info.data_offsets.0,
                        dtype: match info.dtype {
                            safetensors::Dtype::F32 => Ok(Stored::F32),
                            safetensors::Dtype::F16 => Ok(Stored::F16),
                            safetensors::Dtype::BF16 => Ok(Stored::Bf16),
                            other => Err(format!("{other:?}")),
                        },
                        data: None,
                    })
                    .collect();
                // (A tensor of no bytes first among those that start where it does.)
                slots.sort_by_key(|s| (s.start, s.len));
                self.body = Some(Body { slots, at: 0, end: Some(base + meta.data_len()), gguf: None });
            }
            Format::Gguf => {
                // The header's length is known only once parsed: try again at 2 MiB, then every time the bytes
                // have grown fourfold (as the whole-file reader does), and when the file is complete.
                let enough = self.len.is_some_and(|l| self.head.len() >= l);
                if !last && !enough && self.head.len() < self.next_try.max(gguf::read::HEADER_GUESS) {
                    return Ok(false);
                }
                self.next_try = self.head.len().saturating_mul(4);
                let Some(g) = Gguf::parse_prefix(&self.head, len, self.limit)? else { return Ok(false) };
                gguf::bert::check_bert(&g)?;
                let mut slots: Vec<Slot> = g
                    .tensors
                    .iter()
                    .enumerate()
                    .map(|(order, t)| Slot {
                        name: gguf::gguf_to_hf_name(&t.name),
                        shape: t.shape.clone(),
                        order,
                        start: t.start,
                        len: t.len,
                        dtype: Ok(match t.dtype {
                            Dtype::F32 => Stored::F32,
                            Dtype::F16 => Stored::F16,
                            Dtype::Q8_0 => Stored::Q8_0,
                            Dtype::Q4_0 => Stored::Q4_0,
                        }),
                        data: None,
                    })
                    .collect();
                slots.sort_by_key(|s| s.start);
                self.body = Some(Body { slots, at: 0, end: None, gguf: Some(g) });
            }
        }
        Ok(true)
    }
}

impl Body {
    /// The file's bytes from `at` on.
    fn fill(&mut self, mut at: usize, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let Some(slot) = self.slots.get_mut(self.at) else {
                if self.end.is_some() {
                    return Err(invalid(SafeTensorError::MetadataIncompleteBuffer));
                }
                return Ok(()); // GGUF: whatever follows the last tensor is not read
            };
            if at < slot.start {
                let skip = (slot.start - at).min(bytes.len());
                (at, bytes) = (at + skip, &bytes[skip..]);
                continue;
            }
            // Sorted and never overlapping (both headers are checked for that), so `at` is never past a start.
            let off = at - slot.start;
            let n = (slot.len - off).min(bytes.len());
            if let Ok(stored) = slot.dtype {
                if slot.data.is_none() {
                    slot.data = Some(Filling::new(stored, slot.len, &slot.name)?);
                }
                slot.data.as_mut().expect("made").bytes_mut()[off..off + n].copy_from_slice(&bytes[..n]);
            }
            (at, bytes) = (at + n, &bytes[n..]);
            if off + n == slot.len {
                self.at += 1;
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<Streamed> {
        let mut slots = self.slots;
        slots.sort_by_key(|s| s.order);
        let mut tensors = Vec::with_capacity(slots.len());
        let mut unsupported = Vec::new();
        for s in slots {
            let data = match (s.dtype, s.data) {
                (Err(dtype), _) => {
                    unsupported.push((s.name, dtype));
                    continue;
                }
                (Ok(_), Some(f)) => f.done(),
                // A tensor of no bytes got none: its (empty) storage is made here.
                (Ok(stored), None) => Filling::new(stored, 0, &s.name)?.done(),
            };
            tensors.push((s.name, HostTensor { shape: s.shape, data }));
        }
        match self.gguf {
            None => {
                let mut w = Weights::new();
                for (name, t) in tensors {
                    w.insert(name, t);
                }
                for (name, dtype) in unsupported {
                    w.insert_unsupported(name, dtype);
                }
                Ok(Streamed::Safetensors(w))
            }
            Some(g) => Ok(Streamed::Gguf(Box::new(gguf::bert::bert_from(g, tensors)?))),
        }
    }
}

impl Filling {
    /// Zeroed storage for `bytes` bytes, or an error that names the tensor if memory cannot hold it (a header may
    /// claim more than will ever arrive: the storage is made when its first byte does).
    fn new(stored: Stored, bytes: usize, name: &str) -> Result<Filling> {
        fn zeroed<T: Clone + Default>(n: usize, name: &str) -> Result<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| {
                Error::Weights(format!(
                    "tensor `{name}` needs {} bytes, more than this memory can hold",
                    n * std::mem::size_of::<T>()
                ))
            })?;
            v.resize(n, T::default());
            Ok(v)
        }
        Ok(match stored {
            Stored::F32 => Filling::F32(zeroed(bytes / 4, name)?),
            Stored::F16 => Filling::U16(zeroed(bytes / 2, name)?, false),
            Stored::Bf16 => Filling::U16(zeroed(bytes / 2, name)?, true),
            Stored::Q8_0 => Filling::Blocks(zeroed(bytes, name)?, Dtype::Q8_0),
            Stored::Q4_0 => Filling::Blocks(zeroed(bytes, name)?, Dtype::Q4_0),
        })
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Filling::F32(v) => bytemuck::cast_slice_mut(v),
            Filling::U16(v, _) => bytemuck::cast_slice_mut(v),
            Filling::Blocks(v, _) => v,
        }
    }

    /// The complete tensor's values (little-endian in the file: a big-endian host swaps them).
    fn done(self) -> HostData {
        match self {
            Filling::F32(mut v) => {
                if cfg!(target_endian = "big") {
                    v.iter_mut().for_each(|x| *x = f32::from_bits(x.to_bits().swap_bytes()));
                }
                HostData::F32(v)
            }
            Filling::U16(mut v, bf16) => {
                if cfg!(target_endian = "big") {
                    v.iter_mut().for_each(|x| *x = x.swap_bytes());
                }
                if bf16 {
                    HostData::F32(v.into_iter().map(bf16_to_f32).collect())
                } else {
                    HostData::F16(v)
                }
            }
            Filling::Blocks(v, Dtype::Q4_0) => HostData::Q4_0(v),
            Filling::Blocks(v, _) => HostData::Q8_0(v),
        }
    }
}
