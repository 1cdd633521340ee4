//! A state dict's pickle as tensors: what the pickle of a `pytorch_model.bin` may name and call (the [`Loader`] of
//! [`super::pickle`]'s stack machine: `collections.OrderedDict`, `torch._utils`' `_rebuild_tensor_v2`,
//! `_rebuild_tensor` and `_rebuild_parameter`, torch's storage types, and nothing else), the state dict it built
//! checked (names, each tensor's view within its storage, the elements in all), and the tensors copied out of their
//! storages once [`super::torch_bin`] has read them from the file, in either of its formats.
//!
//! A tensor is a view of a storage: an offset, a shape and strides. Each is checked against its storage (which the
//! file reader checks against the bytes the file holds for it), then copied out: a contiguous view as it is, any
//! other (a transposed matrix, a broadcast) element by element into a contiguous tensor. Tensors are f32, f16 (kept
//! as f16) or bf16 (widened to f32, exactly), as the safetensors reader gives them; integer and bool buffers (the
//! i64 `position_ids` of older files) are recorded by dtype and only an error if a model asks for them.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::rc::Rc;

use super::pickle::{Loader, Value};
use super::safetensors::bf16_to_f32;
use super::{HostData, HostTensor};
use crate::{Error, Result};

/// The most tensors (and storages) one file may hold (a BERT-large has about 400).
pub const MAX_TENSORS: usize = 100_000;
/// The most dimensions a tensor may have.
pub const MAX_DIMS: usize = 8;
/// A storage's element type, by its torch storage class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dtype {
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
    pub(super) fn size(self) -> u64 {
        match self {
            Dtype::F64 | Dtype::I64 => 8,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::BF16 | Dtype::I16 => 2,
            Dtype::I8 | Dtype::U8 | Dtype::Bool => 1,
        }
    }
    /// The name the safetensors reader gives the same dtype.
    pub(super) fn name(self) -> &'static str {
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
pub(super) enum Obj {
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
pub(super) struct Storage {
    pub(super) key: Rc<str>,
    pub(super) dtype: Dtype,
    pub(super) numel: u64,
    base: u64,
    len: u64,
}

#[derive(Debug)]
pub(super) struct TensorRef {
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
pub(super) struct Torch<'a> {
    pub(super) what: &'a str,
    pub(super) storages: HashMap<Rc<str>, (Dtype, u64)>,
    tensors: usize,
}

impl<'a> Torch<'a> {
    pub(super) fn new(what: &'a str) -> Torch<'a> {
        Torch { what, storages: HashMap::new(), tensors: 0 }
    }
}

pub(super) fn err(what: &str, msg: impl std::fmt::Display) -> Error {
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
pub(super) fn state_dict(root: Value<Obj>, budget: u64, what: &str) -> Result<Vec<(String, Rc<TensorRef>)>> {
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
        total = total.saturating_add(check_extent(name, t, what)?);
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
pub(super) fn element_budget(len: u64) -> u64 {
    len.saturating_mul(2).saturating_add(1 << 24)
}

/// A storage's elements as read: f32, or the bits of f16 / bf16.
pub(super) enum Buf {
    F32(Vec<f32>),
    U16(Vec<u16>),
}

/// `numel` elements of `dtype` (f32, f16 or bf16) from `r`, swapped where the file's byte order is not this machine's.
pub(super) fn read_buf(r: &mut dyn Read, dtype: Dtype, numel: usize, big_endian: bool, what: &str, key: &str) -> Result<Buf> {
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
pub(super) fn build(refs: Vec<(String, Rc<TensorRef>)>, read: &mut dyn FnMut(&Storage) -> Result<Buf>) -> Result<Vec<(String, Entry)>> {
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
}
