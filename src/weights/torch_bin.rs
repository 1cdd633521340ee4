//! `pytorch_model.bin` → [`Weights`], without running any of its pickled code: the state dict's pickle is read by a
//! stack machine that only builds data ([`super::pickle`]) and may name only what a state dict is made of:
//! `collections.OrderedDict`, `torch._utils`' `_rebuild_tensor_v2`, `_rebuild_tensor` and `_rebuild_parameter`, and
//! torch's storage types (`torch.FloatStorage`, ...). Any other name (`os.system`, `builtins.eval`, a class of the
//! checkpoint's own) is refused, naming it, before anything else happens; so is a BUILD of anything but a dict.
//!
//! Both of `torch.save`'s formats:
//! - a zip archive (torch >= 1.6): `<archive>/data.pkl`, the storages as `<archive>/data/<key>` (stored, not
//!   compressed; the `zip` crate reads the container and checks each entry's CRC), `<archive>/byteorder`;
//! - the format before it: five pickles in a row (a magic number, the protocol version 1001, the system's byte
//!   order, the state dict, the storages' keys), then each storage as its element count (8 bytes) and its bytes.
//!
//! What the pickle may name, how a tensor is checked against its storage and copied out, are
//! [`super::torch_state`]'s; here, the two containers, each storage's bytes checked against what the pickle says of
//! it, and [`Weights`]. The counts a hostile file could inflate are bounded (tensors, dimensions, archive entries,
//! elements; the pickle's own bounds), and a storage is only allocated once its size is known to fit in the file.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::rc::Rc;

use super::bytes::ByteSource;
use super::pickle::{self, Value};
use super::torch_state::{build, element_budget, err, read_buf, state_dict, Obj, Torch};
pub use super::torch_state::{MAX_DIMS, MAX_TENSORS};
pub(crate) use super::torch_state::Entry;
use super::Weights;
use crate::{Error, Result};

/// The file's name in a folder.
pub const FILE: &str = "pytorch_model.bin";
/// The most entries the zip archive may have: the storages and a few files beside them.
const MAX_ENTRIES: usize = MAX_TENSORS + 64;
/// The format before torch 1.6: the magic number its first pickle holds, and the protocol version of its second.
const LEGACY_MAGIC: u128 = 0x1950a86a20f9469cfc6c;
const LEGACY_PROTOCOL: i64 = 1001;

/// Whether a file's first bytes are a `torch.save` checkpoint's (a zip archive, or the magic number's pickle) rather
/// than a safetensors file's (whose 8-byte header length would be over its 100 MB cap).
pub fn is_torch_bin(head: &[u8]) -> bool {
    head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") || head.starts_with(&[0x80, 0x02, 0x8a, 0x0a])
}

/// A reader that can seek, as a trait object: the readers below are compiled once, whatever the file comes from (a
/// wasm module carries every copy of generic code).
pub(crate) trait ReadSeek: Read + Seek {}
impl<T: Read + Seek> ReadSeek for T {}

/// The tensors of the checkpoint `r` (`len` bytes), either format; `what` names it in every error.
pub(crate) fn read(r: &mut dyn ReadSeek, len: u64, what: &str) -> Result<Vec<(String, Entry)>> {
    let mut head = [0u8; 4];
    let n = (len as usize).min(4);
    r.read_exact(&mut head[..n]).map_err(|e| err(what, format!("cannot be read ({e})")))?;
    r.seek(SeekFrom::Start(0)).map_err(|e| err(what, format!("cannot be read ({e})")))?;
    if head.starts_with(b"PK") {
        read_zip(std::io::BufReader::new(r), len, what)
    } else if head[..n].starts_with(&[0x80, 0x02, 0x8a, 0x0a]) {
        read_legacy(std::io::BufReader::new(r), len, what)
    } else {
        Err(err(what, "is not a PyTorch checkpoint: neither the zip archive torch.save writes nor its format before \
            torch 1.6 (the file may be truncated, or not a checkpoint at all)"))
    }
}

fn damaged(what: &str, e: impl std::fmt::Display) -> Error {
    err(what, format!("its zip archive cannot be read ({e}): the file is truncated or damaged; download it again"))
}

/// torch.save's zip archive.
fn read_zip(r: std::io::BufReader<&mut dyn ReadSeek>, len: u64, what: &str) -> Result<Vec<(String, Entry)>> {
    let mut zip = zip::ZipArchive::new(r).map_err(|e| damaged(what, e))?;
    if zip.len() > MAX_ENTRIES {
        return Err(err(what, format!("its zip archive has {} entries, more than the {MAX_ENTRIES} allowed", zip.len())));
    }
    let pkl = zip.file_names().filter(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1).min().map(str::to_string);
    let Some(pkl) = pkl else {
        return Err(err(what, "is a zip archive without `<archive>/data.pkl`: not a checkpoint torch.save wrote"));
    };
    let prefix = &pkl[..pkl.len() - "/data.pkl".len()];
    let big_endian = match zip.by_name(&format!("{prefix}/byteorder")) {
        Ok(f) => {
            let mut order = String::new();
            f.take(16).read_to_string(&mut order).map_err(|e| damaged(what, e))?;
            match order.trim() {
                "little" => false,
                "big" => true,
                other => return Err(err(what, format!("its byteorder is {other:?}, neither \"little\" nor \"big\""))),
            }
        }
        Err(zip::result::ZipError::FileNotFound) => false,
        Err(e) => return Err(damaged(what, e)),
    };
    let pickle = {
        let f = zip.by_name(&pkl).map_err(|e| damaged(what, e))?;
        if f.size() > pickle::MAX_PICKLE_BYTES || f.size() > len {
            return Err(err(what, format!("its pickle is {} bytes, more than the {} allowed", f.size(), pickle::MAX_PICKLE_BYTES)));
        }
        let mut v = Vec::with_capacity(f.size() as usize);
        f.take(pickle::MAX_PICKLE_BYTES).read_to_end(&mut v).map_err(|e| damaged(what, e))?;
        v
    };
    let mut loader = Torch::new(what);
    let (root, _) = pickle::load(&mut &pickle[..], pickle.len() as u64, &mut loader, what)?;
    drop(pickle);
    let refs = state_dict(root, element_budget(len), what)?;
    build(refs, &mut |s| {
        let name = format!("{prefix}/data/{}", s.key);
        let mut f = match zip.by_name(&name) {
            Ok(f) => f,
            Err(zip::result::ZipError::FileNotFound) => {
                return Err(err(what, format!("its pickle names storage `{}`, which its archive lacks ({name})", s.key)))
            }
            Err(e) => return Err(damaged(what, e)),
        };
        let want = s.numel.checked_mul(s.dtype.size()).filter(|&b| b <= len);
        if want != Some(f.size()) {
            return Err(err(what, format!(
                "storage `{}` holds {} bytes, but its pickle says {} {} values ({} bytes): the storage is shorter \
                 or longer than the tensors claim (the file is damaged)",
                s.key,
                f.size(),
                s.numel,
                s.dtype.name(),
                s.numel.saturating_mul(s.dtype.size())
            )));
        }
        let buf = read_buf(&mut f, s.dtype, s.numel as usize, big_endian, what, &s.key)?;
        // Reading on to the end makes the zip reader check the entry's CRC.
        match f.read(&mut [0u8; 1]) {
            Ok(0) => Ok(buf),
            Ok(_) => Err(err(what, format!("storage `{}` holds more bytes than its entry says", s.key))),
            Err(e) => Err(damaged(what, format!("storage `{}`: {e}", s.key))),
        }
    })
}

/// One pickle of the format before 1.6, from `*pos`, which moves past it.
fn next_pickle(r: &mut dyn Read, pos: &mut u64, len: u64, loader: &mut Torch<'_>) -> Result<Value<Obj>> {
    let (v, n) = pickle::load(r, len - *pos, loader, loader.what)?;
    *pos += n;
    Ok(v)
}

/// The format before torch 1.6: the magic number, the protocol version, the system's byte order, the state dict,
/// the storages' keys (five pickles), then each storage's element count and elements, in the keys' order.
fn read_legacy(mut r: std::io::BufReader<&mut dyn ReadSeek>, len: u64, what: &str) -> Result<Vec<(String, Entry)>> {
    let mut loader = Torch::new(what);
    let mut pos = 0;
    let magic = next_pickle(&mut r, &mut pos, len, &mut loader)?;
    if !matches!(&magic, Value::BigInt(b) if **b == LEGACY_MAGIC.to_le_bytes()[..10]) {
        return Err(err(what, "is not a PyTorch checkpoint: its first pickle is not torch.save's magic number"));
    }
    match next_pickle(&mut r, &mut pos, len, &mut loader)? {
        Value::Int(LEGACY_PROTOCOL) => {}
        other => return Err(err(what, format!("its protocol version is {}, not {LEGACY_PROTOCOL}", other.kind()))),
    }
    let big_endian = match next_pickle(&mut r, &mut pos, len, &mut loader)? {
        Value::Dict(d) => d.iter().any(|(k, v)| matches!((k, v), (Value::Str(k), Value::Bool(false)) if &**k == "little_endian")),
        other => return Err(err(what, format!("its system description is {}, not a dict", other.kind()))),
    };
    let root = next_pickle(&mut r, &mut pos, len, &mut loader)?;
    let refs = state_dict(root, element_budget(len), what)?;
    let keys = match next_pickle(&mut r, &mut pos, len, &mut loader)? {
        Value::List(l) => l,
        other => return Err(err(what, format!("its list of storages is {}, not a list", other.kind()))),
    };
    // Where each storage's elements are: after its 8-byte count, which must be the pickle's.
    let mut at: HashMap<Rc<str>, u64> = HashMap::new();
    for key in keys.iter() {
        let Value::Str(key) = key else {
            return Err(err(what, format!("its list of storages holds {}, not a key", key.kind())));
        };
        let Some(&(dtype, numel)) = loader.storages.get(key) else {
            return Err(err(what, format!("its list of storages names `{key}`, which no tensor uses: the file is damaged")));
        };
        let mut n = [0u8; 8];
        r.seek(SeekFrom::Start(pos)).and_then(|_| r.read_exact(&mut n))
            .map_err(|_| err(what, format!("storage `{key}` is cut short: the file is truncated; download it again")))?;
        let n = if big_endian { u64::from_be_bytes(n) } else { u64::from_le_bytes(n) };
        if n != numel {
            return Err(err(what, format!("storage `{key}` holds {n} values, but its pickle says {numel}: the file is damaged")));
        }
        let end = numel.checked_mul(dtype.size()).and_then(|b| b.checked_add(pos + 8)).filter(|&e| e <= len);
        let Some(end) = end else {
            return Err(err(what, format!("storage `{key}` ({numel} {} values) runs past the end of the file: it is \
                truncated; download it again", dtype.name())));
        };
        if at.insert(key.clone(), pos + 8).is_some() {
            return Err(err(what, format!("its list of storages names `{key}` twice")));
        }
        pos = end;
    }
    build(refs, &mut |s| {
        let Some(&from) = at.get(&s.key) else {
            return Err(err(what, format!("its pickle names storage `{}`, which its list of storages lacks", s.key)));
        };
        r.seek(SeekFrom::Start(from)).map_err(|e| err(what, format!("cannot be read ({e})")))?;
        read_buf(&mut r, s.dtype, s.numel as usize, big_endian, what, &s.key)
    })
}

/// A [`ByteSource`] as a reader that can seek (what the zip crate reads).
struct SourceReader<'a> {
    src: &'a dyn ByteSource,
    pos: u64,
}

impl Read for SourceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let len = self.src.byte_len() as u64;
        let n = (len.saturating_sub(self.pos)).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0); // at or past the end (a seek may go past it)
        }
        self.src.read(self.pos as usize, &mut buf[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for SourceReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let len = self.src.byte_len() as u64;
        let at = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = at.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a seek before the start"))?;
        Ok(self.pos)
    }
}

/// The tensors of a checkpoint's bytes (`what`: its name in errors).
pub(crate) fn read_source(src: &(impl ByteSource + ?Sized), what: &str) -> Result<Vec<(String, Entry)>> {
    read_dyn(&Forward(src), what)
}

fn read_dyn(src: &dyn ByteSource, what: &str) -> Result<Vec<(String, Entry)>> {
    read(&mut SourceReader { src, pos: 0 }, src.byte_len() as u64, what)
}

/// Any [`ByteSource`] (a slice too) as a `dyn ByteSource`.
struct Forward<'a, S: ?Sized>(&'a S);

impl<S: ByteSource + ?Sized> ByteSource for Forward<'_, S> {
    fn byte_len(&self) -> usize {
        self.0.byte_len()
    }
    fn read(&self, at: usize, out: &mut [u8]) {
        self.0.read(at, out)
    }
}

pub(crate) fn into_weights(entries: Vec<(String, Entry)>) -> Weights {
    let mut w = Weights::new();
    for (name, e) in entries {
        match e {
            Entry::Tensor(t) => w.insert(name, t),
            Entry::Unsupported(dtype) => w.insert_unsupported(name, dtype),
        }
    }
    w
}

impl Weights {
    /// Reads the bytes of a `pytorch_model.bin` (either of torch.save's formats), running none of its code.
    pub fn from_torch_bin(bytes: &[u8]) -> Result<Weights> {
        Self::from_torch_bin_source(bytes)
    }

    /// [`Weights::from_torch_bin`] of a file read in pieces from `src` (in the browser, the JS bytes).
    pub fn from_torch_bin_source(src: &(impl ByteSource + ?Sized)) -> Result<Weights> {
        read_source(src, FILE).map(into_weights)
    }

    /// A weights file's bytes, `model.safetensors` or `pytorch_model.bin`, told apart by their first bytes
    /// ([`is_torch_bin`]).
    pub fn from_file_source(src: &(impl ByteSource + ?Sized)) -> Result<Weights> {
        let mut head = [0u8; 4];
        let n = src.byte_len().min(4);
        src.read(0, &mut head[..n]);
        if is_torch_bin(&head[..n]) {
            Self::from_torch_bin_source(src)
        } else {
            Self::from_safetensors_source(src)
        }
    }

    /// Reads the `pytorch_model.bin` at `path` (a piece at a time: the file is never whole in memory).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_torch_bin_file(path: &std::path::Path) -> Result<Weights> {
        let cannot = |e| Error::io(format!("cannot read weights file {}", path.display()), e);
        let mut file = std::fs::File::open(path).map_err(cannot)?;
        let len = file.metadata().map_err(cannot)?.len();
        read(&mut file, len, &path.display().to_string()).map(into_weights)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_the_formats_apart() {
        assert!(is_torch_bin(b"PK\x03\x04rest") && is_torch_bin(&[0x80, 0x02, 0x8a, 0x0a, 0x6c]));
        assert!(!is_torch_bin(&[0x40, 0, 0, 0, 0, 0, 0, 0, b'{']));
        let e = Weights::from_torch_bin(b"{}").unwrap_err().to_string();
        assert!(e.contains("is not a PyTorch checkpoint"), "{e}");
        let e = Weights::from_torch_bin(b"").unwrap_err().to_string();
        assert!(e.contains("is not a PyTorch checkpoint"), "{e}");
        let e = Weights::from_torch_bin(b"PK\x03\x04 and no more").unwrap_err().to_string();
        assert!(e.contains("zip archive cannot be read"), "{e}");
    }
}
