//! A weights file that arrives in pieces, in file order (the browser's download, read as it comes): the header is
//! parsed as soon as it is all there, then each tensor's bytes are copied straight into its storage as they arrive.
//! Neither the whole file nor a second copy of it is ever held, so a model's peak memory during the load is its
//! tensors plus one piece of the download.
//!
//! The checks are the whole-file readers' ([`Weights::from_safetensors_source`], [`gguf::read_bert`]), with the same
//! errors; the fuzz targets (`crate::fuzzing`) feed every input both ways and require the same answer.

use std::any::Any;
use std::path::Path;
use std::sync::Arc;

use safetensors::SafeTensorError;
use sha2::{Digest, Sha256};

use super::gguf::{self, BertGguf, Gguf};
use super::safetensors::{bf16_to_f32, header, invalid};
use super::{non_finite_in, word_hash, HostData, HostTensor, Placed, Weights, WORD_HASH_SEED};
use crate::dtype::Dtype;
use crate::{Error, Result};

/// The safetensors file readers: a file on disk is streamed, so the one reader of its pieces serves both.
impl Weights {
    /// Reads a `.safetensors` file.
    pub fn from_safetensors_file(path: impl AsRef<Path>) -> Result<Weights> {
        Self::from_safetensors_file_to(path.as_ref(), None)
    }

    /// [`Weights::from_safetensors_file`], its matrices written into `sink`'s device memory as they are read, when a
    /// sink is given ([`WeightStream::place_on_device`]).
    pub fn from_safetensors_file_to(path: &Path, sink: Option<&dyn DeviceSink>) -> Result<Weights> {
        match read_file_to(path, Format::Safetensors, sink) {
            Ok(Streamed::Safetensors(w)) => Ok(w),
            Ok(Streamed::Gguf(_)) => Err(Error::Weights("a safetensors read returned a GGUF".into())),
            Err(Error::Weights(m)) => Err(Error::Weights(format!("{}: {m}", path.display()))),
            Err(other) => Err(other),
        }
    }
}

/// Which kind of file arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `model.safetensors`: the tensors alone.
    Safetensors,
    /// A BERT `.gguf`: config, tokenizer and tensors.
    Gguf,
}

/// Device memory a stream writes weights into as their bytes arrive, instead of host memory (a GPU backend): the
/// matrices of the file go there ([`WeightStream::place_on_device`]), and the host keeps a [`Placed`] of each.
pub trait DeviceSink {
    /// Zeroed device memory for a weight of `bytes` bytes stored as `dtype`, with room for its last partial word.
    fn create(&self, dtype: Dtype, shape: &[usize], bytes: usize) -> Result<Arc<dyn Any + Send + Sync>>;
    /// Writes `data` (whole 4-byte words) at `offset` (a multiple of 4) of the memory `handle` made.
    fn write(&self, handle: &(dyn Any + Send + Sync), offset: usize, data: &[u8]) -> Result<()>;
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
    /// [`WeightStream::place_on_device`].
    place: bool,
}

/// The tensors of a parsed header, filled in file order.
struct Body {
    slots: Vec<Slot>,
    /// The slot being filled (`slots` are sorted by their place in the file).
    at: usize,
    /// safetensors: where the data ends (the file must end there too). GGUF: bytes after the last tensor are allowed.
    end: Option<usize>,
    gguf: Option<Gguf>,
    /// Each layer's q, k and v weights placed into one device buffer ([`Body::choose_placed`]).
    joints: Vec<Joint>,
}

/// One device buffer for a layer's q, k and v weights, rows stacked in that order, as the model joins them: made when
/// the first of them arrives, so that none is ever held apart and then copied.
struct Joint {
    shape: Vec<usize>,
    bytes: usize,
    handle: Option<Arc<dyn Any + Send + Sync>>,
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
    /// Its bytes go to the device ([`WeightStream::place_on_device`]).
    device: bool,
    /// Into [`Body::joints`]`[.0]`, from byte `.1`.
    joint: Option<(usize, usize)>,
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
    Device(DeviceFill),
}

/// A weight's bytes on their way to device memory: written in whole words (and whole blocks, so that each block's
/// scale is checked as it passes), the last partial unit kept until the next piece.
struct DeviceFill {
    handle: Arc<dyn Any + Send + Sync>,
    dtype: Dtype,
    bytes: usize,
    /// Where in the memory its bytes start ([`Placed::offset`]).
    base: usize,
    written: usize,
    pending: Vec<u8>,
    hash: u64,
    non_finite: Option<(usize, &'static str)>,
}

/// Reads the file at `path` through a [`WeightStream`], a piece at a time: the tensors are the only copy of the
/// weights the host ever holds (reading the whole file first held it twice at the peak). Natively, the model folder's
/// `model.safetensors` and a `.gguf` path load this way.
pub fn read_file(path: &std::path::Path, format: Format) -> Result<Streamed> {
    read_file_to(path, format, None)
}

/// [`read_file`], the file's matrices written to `sink`'s device memory as they are read
/// ([`WeightStream::place_on_device`]), when a sink is given.
pub fn read_file_to(path: &std::path::Path, format: Format, sink: Option<&dyn DeviceSink>) -> Result<Streamed> {
    use std::io::Read;
    /// The piece size: large enough that reading costs no more than a whole-file read, small beside any model.
    const PIECE: usize = 1 << 20;
    let cannot = |e| Error::io(format!("cannot read weights file {}", path.display()), e);
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    let len = file.metadata().map_err(cannot)?.len();
    let len = usize::try_from(len).map_err(|_| Error::Weights(format!("{} is too large", path.display())))?;
    let mut stream = WeightStream::new(format, Some(len), len, false);
    if sink.is_some() {
        stream.place_on_device();
    }
    let mut piece = vec![0u8; PIECE.min(len.max(1))];
    loop {
        let n = match file.read(&mut piece) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(cannot(e)),
        };
        stream.push_to(&piece[..n], sink)?;
    }
    Ok(stream.finish_to(sink)?.0)
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
            place: false,
        }
    }

    /// The file's matrices go to the device the pushes name ([`WeightStream::push_to`]) as their bytes arrive, never
    /// into host memory; vectors (biases, LayerNorm), position tables (RoBERTa's are cut at load), bf16, and q, k, v
    /// weights the device cannot join stay on the host (`Body::choose_placed`). Call before the first push.
    pub fn place_on_device(&mut self) {
        self.place = true;
    }

    /// The bytes that follow those already pushed.
    pub fn push(&mut self, piece: &[u8]) -> Result<()> {
        self.push_to(piece, None)
    }

    /// [`WeightStream::push`], the placed weights' bytes written to `sink`'s memory (always the same sink).
    pub fn push_to(&mut self, piece: &[u8], sink: Option<&dyn DeviceSink>) -> Result<()> {
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
            Some(body) => body.fill(at, piece, sink),
            None => {
                self.head.extend_from_slice(piece);
                self.take_header(false, sink).map(drop)
            }
        }
    }

    /// The file is complete: its contents, and the SHA-256 of its bytes (lower-case hex) if asked for.
    pub fn finish(self) -> Result<(Streamed, Option<String>)> {
        self.finish_to(None)
    }

    /// [`WeightStream::finish`] of a stream pushed with [`WeightStream::push_to`] `sink`.
    pub fn finish_to(mut self, sink: Option<&dyn DeviceSink>) -> Result<(Streamed, Option<String>)> {
        if self.len.is_some_and(|len| self.received < len) {
            return Err(self.truncated());
        }
        self.len = Some(self.received);
        if self.body.is_none() && !self.take_header(true, sink)? {
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
        Ok((body.finish(sink)?, digest))
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
    fn take_header(&mut self, last: bool, sink: Option<&dyn DeviceSink>) -> Result<bool> {
        if !self.parse_header(last)? {
            return Ok(false);
        }
        let head = std::mem::take(&mut self.head);
        let body = self.body.as_mut().expect("parsed");
        if self.place {
            body.choose_placed();
        }
        body.fill(0, &head, sink)?;
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
                        device: false,
                        joint: None,
                    })
                    .collect();
                // (A tensor of no bytes first among those that start where it does.)
                slots.sort_by_key(|s| (s.start, s.len));
                self.body = Some(Body { slots, at: 0, end: Some(base + meta.data_len()), gguf: None, joints: Vec::new() });
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
                let arch = gguf::bert::check_bert(&g)?;
                let mut slots: Vec<Slot> = g
                    .tensors
                    .iter()
                    .enumerate()
                    .map(|(order, t)| Slot {
                        name: gguf::gguf_to_hf_name_in(arch, &t.name),
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
                        device: false,
                        joint: None,
                    })
                    .collect();
                slots.sort_by_key(|s| s.start);
                self.body = Some(Body { slots, at: 0, end: None, gguf: Some(g), joints: Vec::new() });
            }
        }
        Ok(true)
    }
}

impl Body {
    /// Marks the weights [`WeightStream::place_on_device`] places: the matrices but the position table, in the
    /// dtypes the device reads as stored (not bf16). The q, k and v weights are joined into one matrix at load,
    /// which the device does by copying whole words of one dtype: where they are of several dtypes (a GGUF that keeps
    /// attention at Q8_0 in a Q4_0 file) or not of whole words, they stay on the host and are joined there.
    fn choose_placed(&mut self) {
        // A `modern-bert` GGUF's `Wi` (`ffn_up`, read as BERT's `intermediate.up_gate`) swaps its halves on the host
        // at load as the folder's does, and JinaBERT's `gated_layers` likewise; GTE's `up_gate` is used as it is.
        let arch = self.gguf.as_ref().and_then(|g| g.get(gguf::KEY_ARCHITECTURE)).and_then(|v| v.as_str());
        let modern = matches!(arch, Some(gguf::families::ARCH_MODERNBERT | gguf::families::ARCH_JINA));
        let matrix = |s: &Slot| {
            s.shape.len() >= 2
                && s.len > 0
                && !s.name.contains("position_embeddings")
                && !s.name.contains("relative_attention_bias") // MPNet's: read on the host each forward
                && !s.name.contains("rel_embeddings") // DeBERTa's: LayerNorm'd on the host at load
                && !s.name.contains("mlp.Wi.") // ModernBERT's: its halves swapped on the host at load (model::layer)
                && !s.name.contains("mlp.gated_layers.") // JinaBERT's: likewise
                && !(modern && s.name.contains("intermediate.up_gate."))
                && s.dtype.as_ref().is_ok_and(|t| !matches!(t, Stored::Bf16))
        };
        // BERT's names (every GGUF's, once read), ALBERT's, DistilBERT's and MPNet's.
        let qkv = |s: &Slot| {
            ["attention.self.", "attention.query.", "attention.key.", "attention.value.", "q_lin.", "k_lin.", "v_lin.",
                "attention.attn.q.", "attention.attn.k.", "attention.attn.v."]
                .iter()
                .any(|p| s.name.contains(p))
        };
        let mut kinds = self.slots.iter().filter(|s| matrix(s) && qkv(s)).filter_map(|s| s.dtype.as_ref().ok());
        let first = kinds.next().map(std::mem::discriminant);
        let joinable = kinds.all(|t| Some(std::mem::discriminant(t)) == first)
            && self.slots.iter().filter(|s| matrix(s) && qkv(s)).all(|s| s.len % 4 == 0);
        for s in &mut self.slots {
            s.device = matrix(s) && (joinable || !qkv(s));
        }
        if joinable {
            self.choose_joints();
        }
    }

    /// Groups each layer's placed q, k and v weights ([`Joint`]): the three of one name but for the part (`query`,
    /// `key`, `value`, or DistilBERT's `q_lin`, `k_lin`, `v_lin`, or MPNet's `q`, `k`, `v`, or DeBERTa's `query_proj`, ...), of one row length.
    /// Others stay apart.
    fn choose_joints(&mut self) {
        const PARTS: [[&str; 3]; 4] = [["query", "key", "value"], ["q_lin", "k_lin", "v_lin"], ["q", "k", "v"],
            ["query_proj", "key_proj", "value_proj"]];
        let part = |name: &str| {
            let pieces: Vec<&str> = name.split('.').collect();
            pieces.iter().enumerate().find_map(|(i, p)| {
                let k = PARTS.iter().find_map(|names| names.iter().position(|n| n == p))?;
                let mut key = pieces.clone();
                key[i] = "*";
                Some((key.join("."), k))
            })
        };
        let mut groups: std::collections::BTreeMap<String, [Option<usize>; 3]> = Default::default();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some((key, k)) = s.device.then(|| part(&s.name)).flatten() {
                groups.entry(key).or_default()[k] = Some(i);
            }
        }
        for group in groups.into_values() {
            let [Some(q), Some(k), Some(v)] = group else { continue };
            let [sq, sk, sv] = [&self.slots[q], &self.slots[k], &self.slots[v]];
            if sq.shape.len() != 2 || [sk, sv].iter().any(|s| s.shape.len() != 2 || s.shape[1] != sq.shape[1]) {
                continue;
            }
            let j = self.joints.len();
            let shape = vec![sq.shape[0] + sk.shape[0] + sv.shape[0], sq.shape[1]];
            let (lq, lk, lv) = (sq.len, sk.len, sv.len);
            self.joints.push(Joint { shape, bytes: lq + lk + lv, handle: None });
            self.slots[q].joint = Some((j, 0));
            self.slots[k].joint = Some((j, lq));
            self.slots[v].joint = Some((j, lq + lk));
        }
    }

    /// The file's bytes from `at` on.
    fn fill(&mut self, mut at: usize, mut bytes: &[u8], sink: Option<&dyn DeviceSink>) -> Result<()> {
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
                    slot.data = Some(match sink.filter(|_| slot.device) {
                        Some(sink) => {
                            let dtype = DeviceFill::dtype(stored)?;
                            let (handle, base) = match slot.joint {
                                Some((j, base)) => {
                                    let joint = &mut self.joints[j];
                                    let handle = match &joint.handle {
                                        Some(h) => h.clone(),
                                        None => joint.handle.insert(sink.create(dtype, &joint.shape, joint.bytes)?).clone(),
                                    };
                                    (handle, base)
                                }
                                None => (sink.create(dtype, &slot.shape, slot.len)?, 0),
                            };
                            Filling::Device(DeviceFill::new(handle, dtype, slot.len, base))
                        }
                        None => Filling::new(stored, slot.len, &slot.name)?,
                    });
                }
                match slot.data.as_mut().expect("made") {
                    Filling::Device(d) => d.push(sink, &bytes[..n])?,
                    host => host.bytes_mut()[off..off + n].copy_from_slice(&bytes[..n]),
                }
            }
            (at, bytes) = (at + n, &bytes[n..]);
            if off + n == slot.len {
                self.at += 1;
            }
        }
        Ok(())
    }

    fn finish(self, sink: Option<&dyn DeviceSink>) -> Result<Streamed> {
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
                (Ok(_), Some(f)) => f.done(sink)?,
                // A tensor of no bytes got none: its (empty) storage is made here.
                (Ok(stored), None) => Filling::new(stored, 0, &s.name)?.done(None)?,
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
            Filling::Device(_) => &mut [],
        }
    }

    /// The complete tensor's values (little-endian in the file: a big-endian host swaps them); a placed one's last
    /// bytes go to `sink`.
    fn done(self, sink: Option<&dyn DeviceSink>) -> Result<HostData> {
        Ok(match self {
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
            Filling::Device(d) => d.done(sink)?,
        })
    }
}

impl DeviceFill {
    /// How the device stores a weight stored so in the file: as it is (bf16 is widened on the host).
    fn dtype(stored: Stored) -> Result<Dtype> {
        Ok(match stored {
            Stored::F32 => Dtype::F32,
            Stored::F16 => Dtype::F16,
            Stored::Q8_0 => Dtype::Q8_0,
            Stored::Q4_0 => Dtype::Q4_0,
            Stored::Bf16 => return Err(Error::Weights("bf16 weights are widened on the host".into())),
        })
    }

    /// A weight of `bytes` bytes written into `handle`'s memory from byte `base` on.
    fn new(handle: Arc<dyn Any + Send + Sync>, dtype: Dtype, bytes: usize, base: usize) -> DeviceFill {
        DeviceFill { handle, dtype, bytes, base, written: 0, pending: Vec::new(), hash: WORD_HASH_SEED, non_finite: None }
    }

    /// What is written at once: whole words of whole values (blocks).
    fn unit(&self) -> usize {
        match self.dtype {
            Dtype::F32 | Dtype::F16 => 4,
            Dtype::Q8_0 => 4 * super::quant::Q8_0_BLOCK_BYTES / 2, // 68: two blocks
            Dtype::Q4_0 => 2 * super::quant::Q4_0_BLOCK_BYTES,     // 36: two blocks
        }
    }

    /// Bytes a value (or block) takes, to count them for [`DeviceFill::non_finite`].
    fn value_bytes(&self) -> usize {
        match self.dtype {
            Dtype::F32 => 4,
            Dtype::F16 => 2,
            Dtype::Q8_0 => super::quant::Q8_0_BLOCK_BYTES,
            Dtype::Q4_0 => super::quant::Q4_0_BLOCK_BYTES,
        }
    }

    fn push(&mut self, sink: Option<&dyn DeviceSink>, mut data: &[u8]) -> Result<()> {
        let sink = sink.ok_or_else(|| Error::Weights("a placed weight's bytes arrived without their device".into()))?;
        let unit = self.unit();
        if !self.pending.is_empty() {
            let take = (unit - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() < unit {
                return Ok(());
            }
            let whole = std::mem::take(&mut self.pending);
            self.emit(sink, &whole, unit)?;
        }
        let whole = data.len() / unit * unit;
        if whole > 0 {
            self.emit(sink, &data[..whole], whole)?;
        }
        self.pending.extend_from_slice(&data[whole..]);
        Ok(())
    }

    /// Writes `data` (whole units, or the zero-padded last one, of which the first `real` bytes are the tensor's)
    /// after what is written.
    fn emit(&mut self, sink: &dyn DeviceSink, data: &[u8], real: usize) -> Result<()> {
        self.scan(&data[..real]);
        self.hash = word_hash(self.hash, data);
        sink.write(&*self.handle, self.base + self.written, data)?;
        self.written += data.len();
        Ok(())
    }

    /// Checks the values in `real` (the next bytes, before any padding) for a non-finite one.
    fn scan(&mut self, real: &[u8]) {
        if self.non_finite.is_none() {
            let before = self.written / self.value_bytes();
            self.non_finite = non_finite_in(self.dtype, real).map(|(i, kind)| (before + i, kind));
        }
    }

    fn done(mut self, sink: Option<&dyn DeviceSink>) -> Result<HostData> {
        if !self.pending.is_empty() {
            let sink = sink.ok_or_else(|| Error::Weights("a placed weight finished without its device".into()))?;
            let mut last = std::mem::take(&mut self.pending);
            let real = last.len();
            last.resize(real.div_ceil(4) * 4, 0);
            self.emit(sink, &last, real)?;
        }
        let DeviceFill { handle, dtype, bytes, base, hash, non_finite, .. } = self;
        Ok(HostData::Placed(Placed { dtype, bytes, offset: base, hash, non_finite, handle }))
    }
}
