//! Weights on the host: safetensors and GGUF files read into [`HostTensor`]s under Hugging Face names, behind a
//! VarBuilder-like [`Weights`] (`pp("encoder")`, `get(name, shape)`) that checks every shape and accepts the name
//! variants real checkpoints carry.
//!
//! Lowest first: [`bytes`] (where a file's bytes come from: [`bytes::ByteSource`]), [`quant`] (Q8_0 / Q4_0 blocks),
//! [`safetensors`] (bytes at hand → [`Weights`], and the f32 writer), [`pickle`], `torch_state` and [`torch_bin`]
//! (`pytorch_model.bin` read as data: its pickle's opcodes, never its code), [`gguf`] (GGUF v3 and BERT in it),
//! [`stream`] (a file that arrives in pieces, either format; the file readers), the relatives' names ([`albert`],
//! [`deberta`], [`distilbert`], [`electra`], [`mpnet`], [`roberta`], [`rotary`], [`modernbert`]), [`peft`] (LoRA
//! adapters) and [`sentence`] (sentence-transformers' files and a Dense module's tensors beside the weights); here,
//! [`Weights`] itself.

pub mod albert;
pub mod deberta;
pub mod distilbert;
pub mod electra;
pub mod jina;
pub mod modernbert;
pub mod mpnet;
pub mod roberta;
pub mod rotary;
pub mod peft;
pub mod bytes;
pub mod safetensors;
pub mod sentence;
pub mod sharded;
pub mod stream;
pub mod pickle;
mod torch_state;
pub mod torch_bin;
mod tensor;

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::Family;
use crate::{Error, Result};

pub mod gguf;
pub mod quant;

pub(crate) use tensor::{non_finite_in, placed_error};
pub use tensor::{word_hash, HostData, HostTensor, Placed, WORD_HASH_SEED};

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

/// Where `family`'s task checkpoints (`…ForSequenceClassification` and the like) keep the encoder: `bert.`,
/// `distilbert.`, `roberta.` (XLM-R's and CamemBERT's too), `electra.`, `albert.`; `None` for the families whose trained
/// models are not written yet ([`family_name`]).
pub fn family_prefix(family: Family) -> Option<&'static str> {
    match family {
        Family::Bert => Some("bert."),
        Family::DistilBert => Some("distilbert."),
        Family::Roberta | Family::XlmRoberta | Family::Camembert => Some(roberta::NAMES.prefix),
        Family::Electra => Some(electra::NAMES.prefix),
        Family::Albert => Some("albert."),
        Family::MPNet => Some("mpnet."),
        Family::NomicBert => Some("nomic_bert."),
        Family::Gte => Some("gte."),
        Family::DebertaV2 => Some("deberta."),
        Family::ModernBert => Some("model."),
        Family::JinaBert => Some("bert."),
    }
}

/// The name `family`'s task checkpoints store BERT's tensor `name` (`bert.`-prefixed, as a BERT task model names
/// it) under: what a trained model of that family is exported as. DistilBERT's
/// `bert.encoder.layer.0.output.dense.weight` is `distilbert.transformer.layer.0.ffn.lin2.weight`, RoBERTa's
/// `roberta.encoder.layer.0.output.dense.weight`. `None` where the family has no such tensor, or where
/// [`family_prefix`] has none.
pub fn family_name(family: Family, name: &str) -> Option<String> {
    let names = match family {
        Family::Bert => return Some(name.to_string()),
        Family::DistilBert => distilbert::from_bert(name),
        Family::Roberta | Family::XlmRoberta | Family::Camembert => roberta::NAMES.from_bert(name),
        Family::Electra => electra::NAMES.from_bert(name),
        Family::Albert => albert::from_bert(name),
        Family::MPNet => mpnet::from_bert(name),
        Family::DebertaV2 => deberta::from_bert(name),
        Family::ModernBert => modernbert::from_bert(name),
        Family::JinaBert => {
            return jina::from_bert(name).into_iter().next().or_else(|| Some(name.to_string()));
        }
        // The first of the names is under the task checkpoints' prefix; a head's own tensors (`classifier`,
        // NomicBERT's `cls.predictions.bias`) keep BERT's name.
        Family::NomicBert | Family::Gte => {
            let names = rotary::from_bert(family, name);
            return names.into_iter().next().or_else(|| Some(name.strip_prefix("bert.").unwrap_or(name).to_string()));
        }
    };
    names.into_iter().next()
}

/// `encoder.layer.{i}.{module}.{param}` with `module` renamed by `layer`, a table of (BERT's module path, the
/// family's): BERT → the family when `to_family`, else back; other names as they are. MPNet's and DeBERTa's layers
/// differ from BERT's in module names only.
fn rename_layer(name: &str, layer: &[(&str, &str)], to_family: bool) -> String {
    let Some(rest) = name.strip_prefix("encoder.layer.") else { return name.to_string() };
    let Some((index, rest)) = rest.split_once('.') else { return name.to_string() };
    let Some((module, param)) = rest.rsplit_once('.') else { return name.to_string() };
    match layer.iter().find(|(b, f)| if to_family { *b == module } else { *f == module }) {
        Some((b, f)) => format!("encoder.layer.{index}.{}.{param}", if to_family { f } else { b }),
        None => name.to_string(),
    }
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
            Some(f @ (Family::NomicBert | Family::Gte)) => out.extend(rotary::from_bert(f, full)),
            Some(Family::DebertaV2) => out.extend(deberta::from_bert(full)),
            Some(Family::ModernBert) => out.extend(modernbert::from_bert(full)),
            Some(Family::JinaBert) => out.extend(jina::from_bert(full)),
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
    use crate::dtype::Dtype;

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
