//! Weights on the host: safetensors and GGUF files read into [`HostTensor`]s under Hugging Face names, behind a
//! VarBuilder-like [`Weights`] (`pp("encoder")`, `get(name, shape)`) that checks every shape and accepts the name
//! variants real checkpoints carry.
//!
//! Lowest first: [`bytes`] (where a file's bytes come from: [`bytes::ByteSource`]), [`quant`] (Q8_0 / Q4_0 blocks),
//! [`safetensors`] (bytes at hand → [`Weights`], and the f32 writer), [`gguf`] (GGUF v3 and BERT in it), [`stream`]
//! (a file that arrives in pieces, either format; the file readers), the relatives' names ([`albert`],
//! [`distilbert`], [`electra`], [`mpnet`], [`roberta`]), [`peft`] (LoRA adapters) and [`sentence`] (sentence-transformers'
//! files and a Dense module's tensors beside the weights); here, [`Weights`] itself.

pub mod albert;
pub mod distilbert;
pub mod electra;
pub mod mpnet;
pub mod roberta;
pub mod peft;
pub mod bytes;
pub mod safetensors;
pub mod sentence;
pub mod sharded;
pub mod stream;

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::Family;
use crate::dtype::Dtype;
use crate::{Error, Result};

pub mod gguf;
pub mod quant;

/// The names of a relative of BERT whose encoder is BERT's under a prefix (or at the root) and whose masked-LM head is
/// BERT's `cls.predictions` under other module names (RoBERTa's `lm_head`, ELECTRA's generator): the mapping both ways.
struct RenamedBert {
    /// `roberta.`, `electra.`: where task checkpoints keep the encoder.
    prefix: &'static str,
    /// The BERT module paths (with their trailing dot) stored under `prefix`.
    prefixed: &'static [&'static str],
    /// The masked-LM head: BERT's module path ↔ the family's.
    lm_head: [(&'static str, &'static str); 3],
    /// The names the family may store BERT's MLM bias (`cls.predictions.bias`, tied to its `decoder.bias`) under,
    /// most likely first.
    mlm_bias: &'static [&'static str],
}

impl RenamedBert {
    /// A BERT tensor name (with or without `bert.`) → the names the family's checkpoints may store it under besides
    /// the bare name (which BERT's lookup tries already), most likely first; empty when the family has no such tensor.
    fn from_bert(&self, name: &str) -> Vec<String> {
        let name = name.strip_prefix("bert.").unwrap_or(name);
        if self.prefixed.iter().any(|p| name.starts_with(p)) {
            return vec![format!("{}{name}", self.prefix)];
        }
        if name == "cls.predictions.bias" || name == "cls.predictions.decoder.bias" {
            return self.mlm_bias.iter().map(|&n| n.into()).collect();
        }
        let Some((module, param)) = name.rsplit_once('.') else { return Vec::new() };
        match self.lm_head.iter().find(|(b, _)| *b == module) {
            Some((_, f)) => vec![format!("{f}.{param}")],
            None => Vec::new(),
        }
    }

    /// A tensor name of the family → BERT's (without `bert.`); a name with no BERT twin passes through without the
    /// prefix.
    fn to_bert(&self, name: &str) -> String {
        let bare = name.strip_prefix(self.prefix).unwrap_or(name);
        if self.mlm_bias.contains(&bare) {
            return "cls.predictions.bias".into();
        }
        if let Some((module, param)) = bare.rsplit_once('.') {
            if let Some((b, _)) = self.lm_head.iter().find(|(_, f)| *f == module) {
                return format!("{b}.{param}");
            }
        }
        bare.to_string()
    }
}

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
    /// Already in a device's memory: the bytes went there as the file arrived ([`stream::DeviceSink`]), and only a
    /// backend on that device reads them (others read them back first: [`Placed`]).
    Placed(Placed),
}

/// A weight whose bytes are in device memory, not here: what the host keeps to use, check and read it back.
#[derive(Clone)]
pub struct Placed {
    /// How the bytes are stored (as the file stores them).
    pub dtype: Dtype,
    /// The tensor's bytes; the device buffer holds them from `offset`, zero-padded to whole words and more.
    pub bytes: usize,
    /// Where in the device buffer they start: 0, but for the q, k and v weights of a layer, which arrive into one
    /// buffer, in that order, as the model joins them (the key's rows after the query's).
    pub offset: usize,
    /// [`word_hash`] of the bytes as they arrived (zero-padded to a whole word): a read-back must give it again.
    pub hash: u64,
    /// The first non-finite value (or Q8_0/Q4_0 block scale) among the bytes, as [`HostTensor::first_non_finite`].
    pub non_finite: Option<(usize, &'static str)>,
    /// The device's buffer, whatever type the sink made it.
    pub handle: Arc<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for Placed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Placed({}, {} bytes)", self.dtype, self.bytes)
    }
}

impl PartialEq for Placed {
    /// The same device memory.
    fn eq(&self, other: &Placed) -> bool {
        Arc::ptr_eq(&self.handle, &other.handle) && self.offset == other.offset
    }
}

/// A 64-bit FNV-1a over little-endian 32-bit words, continued from `h` (start from [`WORD_HASH_SEED`]): fast enough
/// to run over every weight as it arrives (a word a multiply), and what a read-back of device memory is checked
/// with. Not a defence against anyone: a check that the device holds what was written. `bytes` is whole words.
pub fn word_hash(mut h: u64, bytes: &[u8]) -> u64 {
    for w in bytes.chunks_exact(4) {
        h = (h ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Where [`word_hash`] starts: FNV-1a's offset basis.
pub const WORD_HASH_SEED: u64 = 0xcbf2_9ce4_8422_2325;

fn kind_f32(x: f32) -> &'static str {
    if x.is_nan() { "NaN" } else { "an infinity" }
}

/// An f16 with all exponent bits set is an infinity (mantissa 0) or a NaN.
fn half_kind(b: u16) -> Option<&'static str> {
    (b & 0x7c00 == 0x7c00).then(|| if b & 0x03ff == 0 { "an infinity" } else { "NaN" })
}

/// [`HostTensor::first_non_finite`] of `dtype` data as its little-endian bytes (whole values or blocks).
pub(crate) fn non_finite_in(dtype: Dtype, bytes: &[u8]) -> Option<(usize, &'static str)> {
    let scales = |block: usize| {
        bytes.chunks(block).enumerate().find_map(|(i, c)| half_kind(u16::from_le_bytes([c[0], *c.get(1)?])).map(|k| (i, k)))
    };
    match dtype {
        Dtype::F32 => bytes.chunks_exact(4).enumerate().find_map(|(i, c)| {
            let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            (!x.is_finite()).then(|| (i, kind_f32(x)))
        }),
        Dtype::F16 => bytes.chunks_exact(2).enumerate().find_map(|(i, c)| half_kind(u16::from_le_bytes([c[0], c[1]])).map(|k| (i, k))),
        Dtype::Q8_0 => scales(quant::Q8_0_BLOCK_BYTES),
        Dtype::Q4_0 => scales(quant::Q4_0_BLOCK_BYTES),
    }
}

/// The error of a host operation on a [`HostData::Placed`] tensor.
pub(crate) fn placed_error(what: &str) -> Error {
    Error::Weights(format!(
        "{what}: the weight is in GPU memory (it went there as the file arrived), not on the host; load the model \
         with device \"cpu\" to run this on the host"
    ))
}

impl HostData {
    /// How the values are stored.
    pub fn dtype(&self) -> Dtype {
        match self {
            HostData::F32(_) => Dtype::F32,
            HostData::F16(_) => Dtype::F16,
            HostData::Q8_0(_) => Dtype::Q8_0,
            HostData::Q4_0(_) => Dtype::Q4_0,
            HostData::Placed(p) => p.dtype,
        }
    }
}

impl HostTensor {
    pub fn f32(shape: Vec<usize>, data: Vec<f32>) -> Result<HostTensor> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::Weights(format!("shape {shape:?} needs {n} values, got {}", data.len())));
        }
        Ok(HostTensor { shape, data: HostData::F32(data) })
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// `(rows, cols)` as a backend sees it: 1-D tensors become `(1, n)`; higher ranks fold the leading dimensions.
    pub fn rows_cols(&self) -> (usize, usize) {
        match self.shape.len() {
            0 => (1, 1),
            1 => (1, self.shape[0]),
            _ => {
                let cols = self.shape[self.shape.len() - 1];
                (self.numel() / cols.max(1), cols)
            }
        }
    }

    /// The values as f32, whatever the storage.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        match &self.data {
            HostData::F32(v) => Ok(v.clone()),
            HostData::F16(v) => Ok(v.iter().map(|&b| half::f16::from_bits(b).to_f32()).collect()),
            // Block dequantization, bit-exact with ggml's `dequantize_row_q8_0/q4_0`.
            HostData::Q8_0(_) | HostData::Q4_0(_) => quant::to_f32(self),
            HostData::Placed(_) => Err(placed_error("reading its values")),
        }
    }

    /// The index (in elements, or blocks for Q8_0/Q4_0) and kind of the first NaN or infinite value, if any. For
    /// quantized data the f16 block scales are what can be non-finite.
    pub fn first_non_finite(&self) -> Option<(usize, &'static str)> {
        match &self.data {
            HostData::F32(v) => v.iter().position(|x| !x.is_finite()).map(|i| (i, kind_f32(v[i]))),
            HostData::F16(v) => v.iter().enumerate().find_map(|(i, &b)| half_kind(b).map(|k| (i, k))),
            HostData::Q8_0(v) => non_finite_in(Dtype::Q8_0, v),
            HostData::Q4_0(v) => non_finite_in(Dtype::Q4_0, v),
            HostData::Placed(p) => p.non_finite,
        }
    }

    /// Concatenates tensors along their first dimension (e.g. the q, k, v weights `(H, H)` ×3 → `(3H, H)`, or their
    /// biases `(H)` ×3 → `(3H)`). All parts must share the dtype and every other dimension. Works for block-quantized
    /// data too: blocks run along the last dimension, so rows stay contiguous.
    pub fn concat_rows(parts: &[&HostTensor]) -> Result<HostTensor> {
        if parts.iter().any(|p| matches!(p.data, HostData::Placed(_))) {
            return Err(placed_error("joining rows of weights on the host"));
        }
        let is = |p: &&HostTensor, d: Dtype| p.data.dtype() == d;
        if parts.iter().any(|p| is(p, Dtype::Q4_0)) && parts.iter().any(|p| is(p, Dtype::Q8_0))
            && parts.iter().all(|p| p.data.dtype().is_quantized())
        {
            // A mixed-precision GGUF (e.g. attn_v kept at Q8_0 in a Q4_0 file): Q4_0 widens to Q8_0 exactly.
            let widened = parts.iter().map(|p| quant::widen_q4_0_to_q8_0(p)).collect::<Result<Vec<_>>>()?;
            return Self::concat_rows(&widened.iter().collect::<Vec<_>>());
        }
        let first = parts.first().ok_or_else(|| Error::Weights("concat_rows of no tensors".into()))?;
        if first.shape.is_empty() {
            return Err(Error::Weights("concat_rows of a scalar".into()));
        }
        let mut rows = 0;
        for p in parts {
            if p.shape.len() != first.shape.len() || p.shape[1..] != first.shape[1..] {
                return Err(Error::Weights(format!(
                    "cannot fuse tensors of shapes {:?} and {:?}: they differ beyond the first dimension",
                    first.shape, p.shape
                )));
            }
            if p.data.dtype() != first.data.dtype() {
                return Err(Error::Weights(format!(
                    "cannot fuse a {} tensor with a {} one; store the parts in one dtype",
                    first.data.dtype(),
                    p.data.dtype()
                )));
            }
            rows += p.shape[0];
        }
        let mut shape = first.shape.clone();
        shape[0] = rows;
        macro_rules! cat {
            ($variant:ident) => {{
                let mut out = Vec::new();
                for p in parts {
                    if let HostData::$variant(v) = &p.data {
                        out.extend_from_slice(v);
                    }
                }
                HostData::$variant(out)
            }};
        }
        let data = match first.data {
            HostData::F32(_) => cat!(F32),
            HostData::F16(_) => cat!(F16),
            HostData::Q8_0(_) => cat!(Q8_0),
            HostData::Q4_0(_) => cat!(Q4_0),
            HostData::Placed(_) => return Err(placed_error("joining rows of weights on the host")),
        };
        Ok(HostTensor { shape, data })
    }

    /// Rows `rows` of the first dimension (of a 2-D tensor `(rows, cols)`), e.g. the positions a table keeps.
    pub fn slice_rows(&self, rows: std::ops::Range<usize>) -> Result<HostTensor> {
        self.check_storage()?;
        let (m, n) = self.rows_cols();
        if self.shape.len() != 2 || rows.start > rows.end || rows.end > m {
            return Err(Error::Weights(format!("rows {rows:?} of a tensor of shape {:?}", self.shape)));
        }
        let cut = |row_len: usize| rows.start * row_len..rows.end * row_len;
        let data = match &self.data {
            HostData::F32(v) => HostData::F32(v[cut(n)].to_vec()),
            HostData::F16(v) => HostData::F16(v[cut(n)].to_vec()),
            HostData::Q8_0(v) => HostData::Q8_0(v[cut(quant::quantized_bytes(Dtype::Q8_0, n))].to_vec()),
            HostData::Q4_0(v) => HostData::Q4_0(v[cut(quant::quantized_bytes(Dtype::Q4_0, n))].to_vec()),
            HostData::Placed(_) => return Err(placed_error("taking rows of a weight on the host")),
        };
        Ok(HostTensor { shape: vec![rows.len(), n], data })
    }

    /// Rows `rows` of a 2-D tensor, in that order (repeats allowed).
    pub fn gather_rows(&self, rows: &[usize]) -> Result<HostTensor> {
        let mut parts = Vec::with_capacity(rows.len());
        for &r in rows {
            parts.push(self.slice_rows(r..r + 1)?);
        }
        if parts.is_empty() {
            return self.slice_rows(0..0);
        }
        HostTensor::concat_rows(&parts.iter().collect::<Vec<_>>())
    }

    /// Fails unless the storage holds exactly the shape's elements (quantized: rows of whole blocks of 32), with
    /// the checks [`quant::RowView::new`] makes of a matrix.
    fn check_storage(&self) -> Result<()> {
        let (rows, n) = self.rows_cols();
        let quantized = |kind: Dtype, bytes: usize| {
            quant::check_len(kind, bytes, rows * n).and_then(|_| quant::check_blocks(&format!("{} row", kind.ggml_name()), n))
        };
        match &self.data {
            HostData::F32(v) if v.len() == rows * n => Ok(()),
            HostData::F16(v) if v.len() == rows * n => Ok(()),
            HostData::Q8_0(b) => quantized(Dtype::Q8_0, b.len()),
            HostData::Q4_0(b) => quantized(Dtype::Q4_0, b.len()),
            _ => Err(Error::Weights(format!("storage does not hold shape {:?}", self.shape))),
        }
    }
}

/// All tensors of a checkpoint under Hugging Face names, plus a name prefix: `w.pp("encoder").pp("layer.0")`.
///
/// Name resolution accepts what real BERT checkpoints contain:
/// - `bert.` in front of every encoder name or not (a `BertForMaskedLM` file says `bert.embeddings...`, a
///   `BertModel` file says `embeddings...`): asked for one, the other is tried too;
/// - `LayerNorm.gamma` / `LayerNorm.beta` (TF-era files) for `LayerNorm.weight` / `LayerNorm.bias`;
/// - tied weights absent from the file: [`Weights::get_first`] takes the name and its fallbacks (e.g. the MLM decoder,
///   else the word embeddings, from [`Weights::root`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Weights {
    /// Each tensor behind its own `Arc`, so that a backend may keep it without a copy ([`Weights::get_shared`]).
    tensors: Arc<HashMap<String, Arc<HostTensor>>>,
    /// Tensors the file holds in a dtype we do not read (e.g. the i64 `position_ids` buffer): name → dtype. Asking
    /// for one is an error that names the dtype; not asking costs nothing.
    unsupported: Arc<HashMap<String, String>>,
    prefix: String,
    /// Whose names the file uses: the model asks for BERT's, and a DistilBERT or RoBERTa file is searched under its
    /// own too.
    family: Option<Family>,
    /// [`Weights::logging`].
    log: Lookups,
}

/// The tensors found so far: (the name asked for, with its prefix; the name stored), shared by every view of a
/// logging set ([`Weights::logging`]).
#[derive(Clone, Debug, Default)]
struct Lookups(Option<Arc<std::sync::Mutex<Vec<(String, String)>>>>);

impl PartialEq for Lookups {
    /// (What was looked up is not part of the weights.)
    fn eq(&self, _: &Lookups) -> bool {
        true
    }
}

impl FromIterator<(String, HostTensor)> for Weights {
    /// The tensors under their names, as [`Weights::insert`] puts them.
    fn from_iter<I: IntoIterator<Item = (String, HostTensor)>>(tensors: I) -> Weights {
        let mut w = Weights::new();
        for (name, t) in tensors {
            w.insert(name, t);
        }
        w
    }
}

impl Weights {
    /// An empty set, to be filled with [`Weights::insert`] (the GGUF loader builds its `Weights` this way).
    pub fn new() -> Weights {
        Weights::default()
    }

    /// Adds a tensor under its full Hugging Face name (ignores the current prefix). Cheap before the set is shared
    /// (cloned); afterwards it copies the map once.
    pub fn insert(&mut self, name: impl Into<String>, t: HostTensor) {
        Arc::make_mut(&mut self.tensors).insert(name.into(), Arc::new(t));
    }

    /// Records a tensor the file has but whose dtype cannot be read.
    pub(crate) fn insert_unsupported(&mut self, name: impl Into<String>, dtype: impl Into<String>) {
        Arc::make_mut(&mut self.unsupported).insert(name.into(), dtype.into());
    }

    /// The same tensors, recording each one found from now on, by the name it was asked for: what a module loaded
    /// from them needs is then known ([`Weights::found_under`]).
    pub fn logging(&self) -> Weights {
        Weights { log: Lookups(Some(Default::default())), ..self.clone() }
    }

    /// The stored names of the tensors found through this set (since [`Weights::logging`]) when asked for under
    /// `prefix` (a full name: `encoder.layer.3`), without repeats.
    pub fn found_under(&self, prefix: &str) -> Vec<String> {
        let Some(log) = &self.log.0 else { return Vec::new() };
        let log = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<String> = log
            .iter()
            .filter(|(asked, _)| asked.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('.')))
            .map(|(_, stored)| stored.clone())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether any tensor is in device memory ([`HostData::Placed`]).
    pub fn any_placed(&self) -> bool {
        self.tensors.values().any(|t| matches!(t.data, HostData::Placed(_)))
    }

    /// The same set with the tensor stored under `name` replaced by `t` (the views made from this one keep the old).
    pub fn replaced(&self, name: &str, t: HostTensor) -> Weights {
        let mut w = self.clone();
        Arc::make_mut(&mut w.tensors).insert(name.to_string(), Arc::new(t));
        w
    }

    /// The same tensors, with `prefix.` appended to the current prefix.
    pub fn pp(&self, prefix: &str) -> Weights {
        let mut w = self.clone();
        if !prefix.is_empty() {
            w.prefix = if self.prefix.is_empty() { prefix.to_string() } else { format!("{}.{prefix}", self.prefix) };
        }
        w
    }

    /// The same tensors, looked up as the `family`'s checkpoints name them (BERT's names are always tried first: a
    /// GGUF made by `convert` stores every family under them).
    pub fn for_family(&self, family: Family) -> Weights {
        Weights { family: Some(family), ..self.clone() }
    }

    /// The same tensors with no prefix.
    pub fn root(&self) -> Weights {
        Weights { prefix: String::new(), ..self.clone() }
    }

    /// The current prefix (`""` at the root).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Every full name in the set, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.tensors.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// The tensor stored under exactly `name` (one of [`Self::names`]), without the prefix, fallbacks or checks of
    /// [`Self::get`].
    pub fn stored(&self, name: &str) -> Option<&HostTensor> {
        self.tensors.get(name).map(|t| &**t)
    }

    fn full(&self, name: &str) -> String {
        if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) }
    }

    /// The names a tensor may be stored under, most likely first.
    fn candidates(&self, full: &str) -> Vec<String> {
        let mut out = Self::bert_candidates(full);
        match self.family {
            Some(Family::DistilBert) => out.extend(distilbert::from_bert(full)),
            Some(Family::Roberta | Family::XlmRoberta | Family::Camembert) => out.extend(roberta::NAMES.from_bert(full)),
            Some(Family::Electra) => out.extend(electra::NAMES.from_bert(full)),
            Some(Family::Albert) => out.extend(albert::from_bert(full)),
            Some(Family::MPNet) => out.extend(mpnet::from_bert(full)),
            Some(Family::Bert) | None => {}
        }
        out
    }

    fn bert_candidates(full: &str) -> Vec<String> {
        let mut bases = vec![full.to_string()];
        match full.strip_prefix("bert.") {
            Some(rest) => bases.push(rest.to_string()),
            None => bases.push(format!("bert.{full}")),
        }
        let mut out = bases.clone();
        for b in &bases {
            if let Some(stem) = b.strip_suffix("LayerNorm.weight") {
                out.push(format!("{stem}LayerNorm.gamma"));
            } else if let Some(stem) = b.strip_suffix("LayerNorm.bias") {
                out.push(format!("{stem}LayerNorm.beta"));
            }
        }
        out
    }

    fn lookup(&self, name: &str) -> Result<Option<(String, &Arc<HostTensor>)>> {
        let full = self.full(name);
        for c in self.candidates(&full) {
            if let Some(t) = self.tensors.get(&c) {
                return Ok(Some((c, t)));
            }
            if let Some(dtype) = self.unsupported.get(&c) {
                return Err(Error::Weights(format!(
                    "tensor `{c}` is stored as {dtype}; only f32, f16 and bf16 weights can be read"
                )));
            }
        }
        Ok(None)
    }

    /// The name `name` (under the prefix, with the accepted variants) is stored under, if it exists.
    pub fn stored_name(&self, name: &str) -> Result<Option<String>> {
        Ok(self.lookup(name)?.map(|(found, _)| found))
    }

    /// Whether `name` (under the prefix, with the accepted variants) exists.
    pub fn contains(&self, name: &str) -> bool {
        matches!(self.lookup(name), Ok(Some(_)))
    }

    /// The tensor `name` (under the prefix), checked to have exactly `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<&HostTensor> {
        self.checked(name, shape).map(|t| &**t)
    }

    /// [`Self::get`], as the stored tensor's `Arc`: a backend that keeps weights in host memory (the CPU's) shares
    /// it instead of copying it ([`crate::backend::Backend::upload_shared`]).
    pub fn get_shared(&self, name: &str, shape: &[usize]) -> Result<Arc<HostTensor>> {
        self.checked(name, shape).cloned()
    }

    fn checked(&self, name: &str, shape: &[usize]) -> Result<&Arc<HostTensor>> {
        match self.lookup(name)? {
            Some((found, t)) => {
                if t.shape != shape {
                    return Err(Error::Shape { name: found, got: t.shape.clone(), expected: shape.to_vec() });
                }
                // A NaN or infinity in a weight turns every output it reaches into NaN: refuse the file at load
                // rather than answer with NaN scores later.
                if let Some((i, kind)) = t.first_non_finite() {
                    let unit = if t.data.dtype().is_quantized() { "block scale" } else { "value" };
                    return Err(Error::Weights(format!(
                        "tensor `{found}` holds {kind} ({unit} {i}): the file is damaged or was saved from a diverged \
                         training run; re-download or re-export it"
                    )));
                }
                if let Some(log) = &self.log.0 {
                    log.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((self.full(name), found));
                }
                Ok(t)
            }
            None => Err(Error::Weights(format!(
                "tensor `{}` is missing from the weights file (looked for {}); is this a BERT checkpoint matching \
                 its config.json?",
                self.full(name),
                self.candidates(&self.full(name)).join(", ")
            ))),
        }
    }

    /// The first of `names` that exists (each under the prefix), checked to have `shape`: for tied weights, e.g.
    /// `w.get_first(&["cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"], &[V, H])`.
    pub fn get_first(&self, names: &[&str], shape: &[usize]) -> Result<&HostTensor> {
        for n in names {
            if self.lookup(n)?.is_some() {
                return self.get(n, shape);
            }
        }
        Err(Error::Weights(format!(
            "none of the tensors {} is in the weights file",
            names.iter().map(|n| format!("`{}`", self.full(n))).collect::<Vec<_>>().join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize]) -> HostTensor {
        let n = shape.iter().product();
        HostTensor::f32(shape.to_vec(), (0..n).map(|i| i as f32).collect()).unwrap()
    }

    #[test]
    fn resolves_name_variants() {
        let mut w = Weights::new();
        w.insert("bert.embeddings.LayerNorm.gamma", t(&[4]));
        w.insert("encoder.layer.0.output.LayerNorm.bias", t(&[4]));
        w.insert("bert.embeddings.word_embeddings.weight", t(&[10, 4]));
        let e = w.pp("embeddings");
        assert!(e.contains("LayerNorm.weight"));
        assert!(!e.contains("LayerNorm.bias"));
        assert_eq!(e.get("LayerNorm.weight", &[4]).unwrap().shape, vec![4]);
        // Asked with `bert.`, stored without.
        assert!(w.pp("bert").pp("encoder.layer.0").contains("output.LayerNorm.bias"));
        // Shape mismatch names the tensor found.
        match w.get("embeddings.word_embeddings.weight", &[10, 5]) {
            Err(Error::Shape { name, got, .. }) => {
                assert_eq!(name, "bert.embeddings.word_embeddings.weight");
                assert_eq!(got, vec![10, 4]);
            }
            other => panic!("{other:?}"),
        }
        // Tied decoder: absent, falls back to the word embeddings.
        let d = w.get_first(&["cls.predictions.decoder.weight", "embeddings.word_embeddings.weight"], &[10, 4]);
        assert_eq!(d.unwrap().shape, vec![10, 4]);
        let e = w.get("pooler.dense.weight", &[4, 4]).unwrap_err().to_string();
        assert!(e.contains("pooler.dense.weight") && e.contains("missing"), "{e}");
    }

    #[test]
    fn concat_rows_fuses_qkv() {
        let a = t(&[2, 3]);
        let b = HostTensor::f32(vec![1, 3], vec![9.0, 8.0, 7.0]).unwrap();
        let c = HostTensor::concat_rows(&[&a, &b]).unwrap();
        assert_eq!(c.shape, vec![3, 3]);
        assert_eq!(c.to_f32().unwrap(), vec![0., 1., 2., 3., 4., 5., 9., 8., 7.]);
        assert!(HostTensor::concat_rows(&[&a, &t(&[2, 4])]).is_err());
        let bias = HostTensor::concat_rows(&[&t(&[2]), &t(&[2])]).unwrap();
        assert_eq!(bias.shape, vec![4]);
    }

    #[test]
    fn slices_keep_the_stored_values() {
        let a = t(&[2, 3]); // 0 1 2 / 3 4 5
        assert_eq!(a.slice_rows(1..2).unwrap().to_f32().unwrap(), vec![3., 4., 5.]);
        assert!(a.slice_rows(1..3).is_err());
        // Q8_0 (2, 64): two blocks per row; a row keeps its blocks, the same values dequantized.
        let x: Vec<f32> = (0..128).map(|i| (i as f32 * 0.37).sin()).collect();
        let q = quant::quantize(&HostTensor::f32(vec![2, 64], x).unwrap(), Dtype::Q8_0).unwrap();
        let full = q.to_f32().unwrap();
        assert_eq!(q.slice_rows(1..2).unwrap().to_f32().unwrap(), full[64..].to_vec());
        // Storage that does not match the shape is refused, not indexed past its end.
        let short = HostTensor { shape: vec![2, 64], data: HostData::Q8_0(vec![0; 100]) };
        assert!(short.slice_rows(0..1).is_err());
    }

    #[test]
    fn non_finite_weights_are_refused() {
        let mut w = Weights::new();
        w.insert("a", HostTensor::f32(vec![3], vec![1.0, f32::NAN, 2.0]).unwrap());
        w.insert("b", HostTensor { shape: vec![2], data: HostData::F16(vec![0x3c00, 0xfc00]) }); // 1, -inf
        let mut q = vec![0u8; 68]; // two Q8_0 blocks, the second's scale a NaN (0x7e00)
        q[34..36].copy_from_slice(&0x7e00u16.to_le_bytes());
        w.insert("c", HostTensor { shape: vec![64], data: HostData::Q8_0(q) });
        w.insert("ok", HostTensor { shape: vec![2], data: HostData::F16(vec![0x7bff, 0x0001]) }); // max, subnormal
        for (name, shape, want) in [("a", vec![3], "NaN (value 1)"), ("b", vec![2], "an infinity (value 1)"),
            ("c", vec![64], "NaN (block scale 1)")] {
            let e = w.get(name, &shape).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("re-download"), "{e}");
        }
        assert!(w.get("ok", &[2]).is_ok());
    }

    #[test]
    fn f16_to_f32() {
        let h = HostTensor { shape: vec![2], data: HostData::F16(vec![0x3c00, 0xc000]) };
        assert_eq!(h.to_f32().unwrap(), vec![1.0, -2.0]);
        // One Q8_0 block with scale 2.0 (f16 0x4000) and q = -3, 0, 0, ...
        let mut block = vec![0u8; 34];
        block[1] = 0x40;
        block[2] = (-3i8) as u8;
        let q = HostTensor { shape: vec![32], data: HostData::Q8_0(block) };
        let x = q.to_f32().unwrap();
        assert_eq!((x[0], x[1], x.len()), (-6.0, 0.0, 32));
        let bad = HostTensor { shape: vec![32], data: HostData::Q8_0(vec![0; 33]) };
        assert!(bad.to_f32().unwrap_err().to_string().contains("34 bytes"));
    }
}
