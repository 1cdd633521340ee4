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
//! A tensor is a view of a storage: an offset, a shape and strides. Each is checked against its storage (which is
//! checked against the bytes the file holds for it), then copied out: a contiguous view as it is, any other (a
//! transposed matrix, a broadcast) element by element into a contiguous tensor. Tensors are f32, f16 (kept as f16)
//! or bf16 (widened to f32, exactly), as the safetensors reader gives them; integer and bool buffers (the i64
//! `position_ids` of older files) are recorded by dtype and only an error if a model asks for them. The counts a
//! hostile file could inflate are bounded (tensors, dimensions, archive entries; the pickle's own bounds), and a
//! storage is only allocated once its size is known to fit in the file.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::rc::Rc;

use super::bytes::ByteSource;
use super::pickle::{self, Loader, Value};
use super::safetensors::bf16_to_f32;
use super::{HostData, HostTensor, Weights};
use crate::{Error, Result};

/// The file's name in a folder.
pub const FILE: &str = "pytorch_model.bin";
/// The most tensors (and storages) one file may hold (a BERT-large has about 400).
pub const MAX_TENSORS: usize = 100_000;
/// The most dimensions a tensor may have.
pub const MAX_DIMS: usize = 8;
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

/// A storage's element type, by its torch storage class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dtype {
    F32,
    F16,
    BF16,
    F64,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl Dtype {
    fn of_storage(class: &str) -> Option<Dtype> {
        Some(match class {
            "FloatStorage" => Dtype::F32,
            "HalfStorage" => Dtype::F16,
            "BFloat16Storage" => Dtype::BF16,
            "DoubleStorage" => Dtype::F64,
            "LongStorage" => Dtype::I64,
            "IntStorage" => Dtype::I32,
            "ShortStorage" => Dtype::I16,
            "CharStorage" => Dtype::I8,
            "ByteStorage" => Dtype::U8,
            "BoolStorage" => Dtype::Bool,
            _ => return None,
        })
    }
    fn size(self) -> u64 {
        match self {
            Dtype::F64 | Dtype::I64 => 8,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::BF16 | Dtype::I16 => 2,
            Dtype::I8 | Dtype::U8 | Dtype::Bool => 1,
        }
    }
    /// The name the safetensors reader gives the same dtype.
    fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "F32",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::I32 => "I32",
            Dtype::I16 => "I16",
            Dtype::I8 => "I8",
            Dtype::U8 => "U8",
            Dtype::Bool => "BOOL",
        }
    }
    fn is_read(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F16 | Dtype::BF16)
    }
}

/// What the pickle's allowed names, persistent ids and calls make.
#[derive(Clone, Debug)]
enum Obj {
    OrderedDict,
    RebuildTensorV2,
    RebuildTensor,
    RebuildParameter,
    StorageType(Dtype),
    Storage(Rc<Storage>),
    Tensor(Rc<TensorRef>),
}

/// A storage as a persistent id names it: the entry `key`, `numel` elements of `dtype`; a view of it (the format
/// before 1.6 could save one) is its elements `base..base + len`.
#[derive(Debug)]
struct Storage {
    key: Rc<str>,
    dtype: Dtype,
    numel: u64,
    base: u64,
    len: u64,
}

#[derive(Debug)]
struct TensorRef {
    storage: Rc<Storage>,
    offset: u64,
    shape: Vec<u64>,
    stride: Vec<u64>,
}

/// One tensor of the file, read: its data, or the dtype of a buffer that is not read.
#[derive(Debug)]
pub(crate) enum Entry {
    Tensor(HostTensor),
    Unsupported(&'static str),
}

/// The state dict's loader: the allow-list, and the storages named so far (a key must always mean the same).
struct Torch<'a> {
    what: &'a str,
    storages: HashMap<Rc<str>, (Dtype, u64)>,
    tensors: usize,
}

fn err(what: &str, msg: impl std::fmt::Display) -> Error {
    Error::Weights(format!("{what}: {msg}"))
}

/// An integer argument that must be a count or an index.
fn count(v: &Value<Obj>, what: &str, of: &str) -> Result<u64> {
    match v {
        Value::Int(n) if *n >= 0 => Ok(*n as u64),
        Value::Int(_) | Value::BigInt(_) => Err(err(what, format!("its pickle gives {of} out of range"))),
        other => Err(err(what, format!("its pickle gives {of} as {}, not an integer", other.kind()))),
    }
}

fn counts(v: &Value<Obj>, what: &str, of: &str) -> Result<Vec<u64>> {
    let Value::Tuple(items) = v else {
        return Err(err(what, format!("its pickle gives a tensor's {of} as {}, not a tuple", v.kind())));
    };
    if items.len() > MAX_DIMS {
        return Err(err(what, format!("a tensor of {} dimensions, more than the {MAX_DIMS} allowed", items.len())));
    }
    items.iter().map(|x| count(x, what, &format!("a tensor's {of}"))).collect()
}

impl Loader for Torch<'_> {
    type Obj = Obj;

    fn find_class(&mut self, module: &str, name: &str) -> Result<Obj> {
        Ok(match (module, name) {
            ("collections", "OrderedDict") => Obj::OrderedDict,
            ("torch._utils", "_rebuild_tensor_v2") => Obj::RebuildTensorV2,
            ("torch._utils", "_rebuild_tensor") => Obj::RebuildTensor,
            ("torch._utils", "_rebuild_parameter") => Obj::RebuildParameter,
            ("torch", class) if Dtype::of_storage(class).is_some() => Obj::StorageType(Dtype::of_storage(class).expect("matched")),
            _ => {
                return Err(err(self.what, format!(
                    "its pickle names `{module}.{name}`, which is not part of a PyTorch state dict: refused (bertgpu \
                     reads a pickle as data and never runs its code; it allows only collections.OrderedDict, \
                     torch._utils' _rebuild_tensor_v2, _rebuild_tensor and _rebuild_parameter, and torch's storage \
                     types). Do not load this file in Python with torch.load(weights_only=False) either"
                )))
            }
        })
    }

    fn persistent_load(&mut self, pid: Value<Obj>) -> Result<Value<Obj>> {
        let what = self.what;
        let bad = || err(what, "its pickle has a persistent id that is not a storage's ('storage', type, key, location, size)");
        let Value::Tuple(t) = pid else { return Err(bad()) };
        let [Value::Str(tag), Value::Obj(Obj::StorageType(dtype)), Value::Str(key), Value::Str(_), numel, view @ ..] = &t[..]
        else {
            return Err(bad());
        };
        if &**tag != "storage" || view.len() > 1 {
            return Err(bad());
        }
        let numel = count(numel, what, "a storage's size")?;
        let plain = |k: &str| {
            !k.is_empty() && k.len() <= 64 && !k.starts_with('.')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        };
        if !plain(key) {
            return Err(err(what, format!("its pickle names the storage {key:?}: not a plain key")));
        }
        match self.storages.get(key) {
            Some(&seen) if seen != (*dtype, numel) => {
                return Err(err(what, format!(
                    "its pickle names storage `{key}` as {} {} values and as {numel} {}: the file is damaged",
                    seen.1,
                    seen.0.name(),
                    dtype.name()
                )))
            }
            Some(_) => {}
            None if self.storages.len() >= MAX_TENSORS => {
                return Err(err(what, format!("more than {MAX_TENSORS} storages")));
            }
            None => {
                self.storages.insert(key.clone(), (*dtype, numel));
            }
        }
        let (base, len) = match view {
            [] | [Value::None] => (0, numel),
            [Value::Tuple(v)] => match &v[..] {
                [Value::Str(_), offset, size] => {
                    let (o, s) = (count(offset, what, "a view's offset")?, count(size, what, "a view's size")?);
                    if o.checked_add(s).is_none_or(|end| end > numel) {
                        return Err(err(what, format!("a view of elements {o}.. ({s} of them) of storage `{key}`, \
                            which holds {numel}: the file is damaged")));
                    }
                    (o, s)
                }
                _ => return Err(bad()),
            },
            _ => return Err(bad()),
        };
        Ok(Value::Obj(Obj::Storage(Rc::new(Storage { key: key.clone(), dtype: *dtype, numel, base, len }))))
    }

    fn reduce(&mut self, callable: Obj, args: &[Value<Obj>]) -> Result<Value<Obj>> {
        let what = self.what;
        match (callable, args) {
            (Obj::OrderedDict, []) => Ok(Value::Dict(Rc::default())),
            (Obj::RebuildTensorV2, [storage, offset, size, stride, _requires_grad, _hooks, ..]) if args.len() <= 7 => {
                self.tensor(storage, offset, size, stride)
            }
            (Obj::RebuildTensor, [storage, offset, size, stride]) => self.tensor(storage, offset, size, stride),
            (Obj::RebuildParameter, [t @ Value::Obj(Obj::Tensor(_)), _requires_grad, _hooks]) => Ok(t.clone()),
            (callable, _) => Err(err(what, format!(
                "its pickle calls {} with {} arguments, which is not how a state dict is rebuilt: refused",
                callable_name(&callable),
                args.len()
            ))),
        }
    }

    fn build(&mut self, target: &Value<Obj>, _state: &Value<Obj>) -> Result<()> {
        match target {
            // An OrderedDict's attributes (transformers' state dicts carry `_metadata`): nothing to keep.
            Value::Dict(_) => Ok(()),
            other => Err(err(self.what, format!("its pickle sets the state of {} (BUILD): refused", other.kind()))),
        }
    }
}

fn callable_name(o: &Obj) -> &'static str {
    match o {
        Obj::OrderedDict => "collections.OrderedDict",
        Obj::RebuildTensorV2 => "torch._utils._rebuild_tensor_v2",
        Obj::RebuildTensor => "torch._utils._rebuild_tensor",
        Obj::RebuildParameter => "torch._utils._rebuild_parameter",
        Obj::StorageType(_) => "a storage type",
        Obj::Storage(_) => "a storage",
        Obj::Tensor(_) => "a tensor",
    }
}

impl Torch<'_> {
    fn tensor(&mut self, storage: &Value<Obj>, offset: &Value<Obj>, size: &Value<Obj>, stride: &Value<Obj>)
        -> Result<Value<Obj>> {
        let what = self.what;
        let Value::Obj(Obj::Storage(storage)) = storage else {
            return Err(err(what, format!("its pickle rebuilds a tensor from {}, not a storage", storage.kind())));
        };
        self.tensors += 1;
        if self.tensors > MAX_TENSORS {
            return Err(err(what, format!("more than {MAX_TENSORS} tensors")));
        }
        let (shape, stride) = (counts(size, what, "size")?, counts(stride, what, "stride")?);
        if shape.len() != stride.len() {
            return Err(err(what, format!("a tensor of shape {shape:?} with strides {stride:?}")));
        }
        let offset = count(offset, what, "a tensor's storage offset")?;
        Ok(Value::Obj(Obj::Tensor(Rc::new(TensorRef { storage: storage.clone(), offset, shape, stride }))))
    }
}

/// The state dict the pickle built: its tensors by name, in its order, each checked against its storage. `budget`:
/// the most elements all of them may have together (views may share a storage, and a broadcast repeats one, so
/// what they give is bounded apart from the storages' sizes).
fn state_dict(root: Value<Obj>, budget: u64, what: &str) -> Result<Vec<(String, Rc<TensorRef>)>> {
    let Value::Dict(items) = root else {
        return Err(err(what, format!("its pickle holds {}, not a state dict (a dict of tensors by name)", root.kind())));
    };
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(items.len());
    let mut total = 0u64;
    for (k, v) in items.iter() {
        let Value::Str(name) = k else {
            return Err(err(what, format!("its state dict has a key that is {}, not a tensor's name", k.kind())));
        };
        let Value::Obj(Obj::Tensor(t)) = v else {
            return Err(err(what, format!("its state dict's `{name}` is {}, not a tensor", v.kind())));
        };
        if !seen.insert(name.clone()) {
            return Err(err(what, format!("its state dict names `{name}` twice")));
        }
        total += check_extent(name, t, what)?;
        if total > budget {
            return Err(err(what, format!(
                "its tensors (up to `{name}`) have {total} elements, more than a file of its size can give ({budget}): \
                 the file is damaged or hostile"
            )));
        }
        out.push((name.to_string(), t.clone()));
    }
    Ok(out)
}

/// The number of elements of `t`, once its shape, strides and offset are known to lie within its storage.
fn check_extent(name: &str, t: &TensorRef, what: &str) -> Result<u64> {
    let s = &t.storage;
    let Some(numel) = t.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).filter(|&n| usize::try_from(n).is_ok()) else {
        return Err(err(what, format!("tensor `{name}` has shape {:?}: more elements than any memory holds (the file \
            is damaged or hostile)", t.shape)));
    };
    if numel == 0 {
        return Ok(0);
    }
    let last = t.shape.iter().zip(&t.stride).try_fold(t.offset, |at, (&d, &st)| at.checked_add((d - 1).checked_mul(st)?));
    match last {
        Some(last) if last < s.len => Ok(numel),
        _ => Err(err(what, format!(
            "tensor `{name}` (shape {:?}, strides {:?}, offset {}) reaches past the {} {} values of its storage `{}`: \
             the storage is shorter than the tensor claims (the file is damaged)",
            t.shape,
            t.stride,
            t.offset,
            s.len,
            s.dtype.name(),
            s.key
        ))),
    }
}

/// The most elements a file of `len` bytes may give in all: each of its bytes twice (bf16 tied weights: two tensors
/// of one storage), and 16M more.
fn element_budget(len: u64) -> u64 {
    len.saturating_mul(2).saturating_add(1 << 24)
}

/// A storage's elements as read: f32, or the bits of f16 / bf16.
enum Buf {
    F32(Vec<f32>),
    U16(Vec<u16>),
}

/// `numel` elements of `dtype` (f32, f16 or bf16) from `r`, swapped where the file's byte order is not this machine's.
fn read_buf(r: &mut impl Read, dtype: Dtype, numel: usize, big_endian: bool, what: &str, key: &str) -> Result<Buf> {
    let swap = big_endian != cfg!(target_endian = "big");
    let short = |e: std::io::Error| err(what, format!("storage `{key}` cannot be read ({e}): the file is truncated or \
        damaged; download it again"));
    Ok(if dtype == Dtype::F32 {
        let mut v = vec![0f32; numel];
        r.read_exact(bytemuck::cast_slice_mut(&mut v)).map_err(short)?;
        if swap {
            v.iter_mut().for_each(|x| *x = f32::from_bits(x.to_bits().swap_bytes()));
        }
        Buf::F32(v)
    } else {
        let mut v = vec![0u16; numel];
        r.read_exact(bytemuck::cast_slice_mut(&mut v)).map_err(short)?;
        if swap {
            v.iter_mut().for_each(|x| *x = x.swap_bytes());
        }
        Buf::U16(v)
    })
}

/// The elements of a view (`start`, `shape`, `stride`) of `src`, in order, as a contiguous vector.
fn gather<T: Copy>(src: &[T], start: usize, shape: &[usize], stride: &[usize], numel: usize) -> Vec<T> {
    if numel == 0 {
        return Vec::new();
    }
    if contiguous(shape, stride) {
        return src[start..start + numel].to_vec();
    }
    let mut out = Vec::with_capacity(numel);
    let mut idx = vec![0usize; shape.len()];
    let mut at = start;
    loop {
        out.push(src[at]);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            at += stride[d];
            if idx[d] < shape[d] {
                break;
            }
            at -= stride[d] * shape[d];
            idx[d] = 0;
        }
    }
}

/// The tensors of `refs`, each storage read once through `read` (in the order the state dict first names them) and
/// dropped once its tensors are copied out; a storage that one tensor covers whole becomes that tensor's data.
fn build(refs: Vec<(String, Rc<TensorRef>)>, mut read: impl FnMut(&Storage) -> Result<Buf>) -> Result<Vec<(String, Entry)>> {
    let mut order: Vec<Rc<str>> = Vec::new();
    let mut users: HashMap<Rc<str>, Vec<usize>> = HashMap::new();
    for (i, (_, t)) in refs.iter().enumerate() {
        users.entry(t.storage.key.clone()).or_insert_with(|| {
            order.push(t.storage.key.clone());
            Vec::new()
        }).push(i);
    }
    let mut out: Vec<Option<Entry>> = refs.iter().map(|_| None).collect();
    for key in order {
        let idx = &users[&key];
        let storage = &refs[idx[0]].1.storage;
        if !storage.dtype.is_read() {
            idx.iter().for_each(|&i| out[i] = Some(Entry::Unsupported(storage.dtype.name())));
            continue;
        }
        let mut buf = Some(read(storage)?);
        for (n, &i) in idx.iter().enumerate() {
            let t = &refs[i].1;
            let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
            let stride: Vec<usize> = t.stride.iter().map(|&d| d as usize).collect();
            let numel: usize = shape.iter().product();
            let start = (t.storage.base + t.offset) as usize;
            let whole = start == 0 && numel as u64 == storage.numel && contiguous(&shape, &stride);
            let last = n + 1 == idx.len();
            let data = match (buf.as_ref().expect("kept until the last"), storage.dtype) {
                (Buf::F32(_), _) if whole && last => match buf.take() {
                    Some(Buf::F32(v)) => HostData::F32(v),
                    _ => unreachable!(),
                },
                (Buf::U16(_), Dtype::F16) if whole && last => match buf.take() {
                    Some(Buf::U16(v)) => HostData::F16(v),
                    _ => unreachable!(),
                },
                (Buf::F32(v), _) => HostData::F32(gather(v, start, &shape, &stride, numel)),
                (Buf::U16(v), Dtype::F16) => HostData::F16(gather(v, start, &shape, &stride, numel)),
                (Buf::U16(v), _) => HostData::F32(gather(v, start, &shape, &stride, numel).into_iter().map(bf16_to_f32).collect()),
            };
            out[i] = Some(Entry::Tensor(HostTensor { shape, data }));
        }
    }
    Ok(refs.into_iter().zip(out).map(|((name, _), e)| (name, e.expect("every tensor's storage was read"))).collect())
}

/// Whether strides `stride` lay out `shape` row-major without gaps (sizes of 1 take any stride, as torch's).
fn contiguous(shape: &[usize], stride: &[usize]) -> bool {
    let mut want = 1;
    shape.iter().zip(stride).rev().all(|(&d, &s)| {
        let ok = d == 1 || s == want;
        want *= d;
        ok
    })
}

/// The tensors of the checkpoint `r` (`len` bytes), either format; `what` names it in every error.
pub(crate) fn read<R: Read + Seek>(mut r: R, len: u64, what: &str) -> Result<Vec<(String, Entry)>> {
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
fn read_zip<R: Read + Seek>(r: R, len: u64, what: &str) -> Result<Vec<(String, Entry)>> {
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
    let mut loader = Torch { what, storages: HashMap::new(), tensors: 0 };
    let (root, _) = pickle::load(&mut &pickle[..], pickle.len() as u64, &mut loader, what)?;
    drop(pickle);
    let refs = state_dict(root, element_budget(len), what)?;
    build(refs, |s| {
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
fn next_pickle<R: Read>(r: &mut R, pos: &mut u64, len: u64, loader: &mut Torch<'_>) -> Result<Value<Obj>> {
    let (v, n) = pickle::load(r, len - *pos, loader, loader.what)?;
    *pos += n;
    Ok(v)
}

/// The format before torch 1.6: the magic number, the protocol version, the system's byte order, the state dict,
/// the storages' keys (five pickles), then each storage's element count and elements, in the keys' order.
fn read_legacy<R: Read + Seek>(mut r: R, len: u64, what: &str) -> Result<Vec<(String, Entry)>> {
    let mut loader = Torch { what, storages: HashMap::new(), tensors: 0 };
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
    build(refs, |s| {
        let Some(&from) = at.get(&s.key) else {
            return Err(err(what, format!("its pickle names storage `{}`, which its list of storages lacks", s.key)));
        };
        r.seek(SeekFrom::Start(from)).map_err(|e| err(what, format!("cannot be read ({e})")))?;
        read_buf(&mut r, s.dtype, s.numel as usize, big_endian, what, &s.key)
    })
}

/// A [`ByteSource`] as a reader that can seek (what the zip crate reads).
struct SourceReader<'a, S: ?Sized> {
    src: &'a S,
    pos: u64,
}

impl<S: ByteSource + ?Sized> Read for SourceReader<'_, S> {
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

impl<S: ByteSource + ?Sized> Seek for SourceReader<'_, S> {
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
    read(SourceReader { src, pos: 0 }, src.byte_len() as u64, what)
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
        let file = std::fs::File::open(path).map_err(cannot)?;
        let len = file.metadata().map_err(cannot)?.len();
        read(file, len, &path.display().to_string()).map(into_weights)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_views() {
        let src: Vec<u32> = (0..12).collect();
        // A (3, 4) matrix transposed: shape (4, 3), strides (1, 4).
        assert_eq!(gather(&src, 0, &[4, 3], &[1, 4], 12), [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
        assert_eq!(gather(&src, 2, &[2, 3], &[3, 1], 6), [2, 3, 4, 5, 6, 7]);
        assert_eq!(gather(&src, 1, &[3], &[4], 3), [1, 5, 9]);
        assert_eq!(gather(&src, 5, &[2, 3], &[0, 1], 6), [5, 6, 7, 5, 6, 7]);
        assert_eq!(gather(&src, 7, &[], &[], 1), [7]);
        assert!(gather(&src, 99, &[0, 4], &[4, 1], 0).is_empty());
        assert!(contiguous(&[1, 5], &[99, 1]) && !contiguous(&[2, 5], &[1, 2]));
    }

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
