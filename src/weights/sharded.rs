//! A checkpoint saved in pieces: `model.safetensors.index.json` (transformers' `save_pretrained(max_shard_size=...)`,
//! the hub's larger models) maps each tensor to the shard file that holds it; every shard is a whole safetensors file,
//! read as `model.safetensors` is. Older checkpoints' `pytorch_model.bin.index.json` does the same for
//! `pytorch_model-0000i-of-0000n.bin` shards, each read as `pytorch_model.bin` is ([`super::torch_bin`]). The shards'
//! tensors are joined into one [`Weights`] after checking them against the index: a shard the index names but the
//! caller could not give, a tensor found in two shards, a tensor in a shard other than the one the index names, and a
//! tensor the index lists but its shard lacks are each an error that names it, never a model quietly missing a weight
//! or holding the wrong one.
//!
//! The index is a file from the network (the browser fetches it), so its size, the number of its entries and of the
//! shards it names are bounded, and a shard's name must be a plain file name in the same folder (no path).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{HostTensor, Weights};
use crate::{Error, Result};

/// The index's file name, beside config.json.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// The index of shards that are `pytorch_model.bin` files (transformers 4.x's `safe_serialization=False`).
pub const BIN_INDEX_FILE: &str = "pytorch_model.bin.index.json";

/// The most bytes an index may have. BERT-sized models' indexes are a few kB; the largest on the hub (LLMs of
/// thousands of tensors) are under 1 MB.
pub const MAX_INDEX_BYTES: usize = 8 << 20;

/// The most tensors an index may list (a BERT-large has about 400).
pub const MAX_INDEX_TENSORS: usize = 100_000;

/// The most shard files an index may name.
pub const MAX_SHARDS: usize = 1_000;

/// Tensors under their names, as `convert` lists a file's.
pub type NamedTensors = Vec<(String, HostTensor)>;

/// A parsed, checked `model.safetensors.index.json` (or `pytorch_model.bin.index.json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardIndex {
    /// Tensor name → the shard file the index says holds it.
    weight_map: BTreeMap<String, String>,
    /// The shard files, each once, sorted (`model-00001-of-00003.safetensors` first).
    shards: Vec<String>,
    /// The index's own file name: [`INDEX_FILE`] or [`BIN_INDEX_FILE`].
    file: &'static str,
}

#[derive(Deserialize)]
struct RawIndex {
    weight_map: Option<BTreeMap<String, String>>,
}

/// Whether `name` is a plain file name in the index's own folder: no separators, no `..`, not hidden.
fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl ShardIndex {
    /// Parses and checks the bytes of a `model.safetensors.index.json`.
    pub fn parse(bytes: &[u8]) -> Result<ShardIndex> {
        Self::parse_as(bytes, INDEX_FILE)
    }

    /// Parses and checks the bytes of the index `file` ([`INDEX_FILE`], whose shards are `.safetensors` files, or
    /// [`BIN_INDEX_FILE`], whose shards are `.bin` files).
    pub fn parse_as(bytes: &[u8], file: &'static str) -> Result<ShardIndex> {
        let index = file;
        let ext = if file == BIN_INDEX_FILE { ".bin" } else { ".safetensors" };
        if bytes.len() > MAX_INDEX_BYTES {
            return Err(Error::Weights(format!(
                "{index} is {} bytes, more than the {MAX_INDEX_BYTES} an index of shards may have",
                bytes.len()
            )));
        }
        let raw: RawIndex = serde_json::from_slice(bytes)
            .map_err(|e| Error::Weights(format!("{index} is not a valid index of shards ({e})")))?;
        let weight_map = raw
            .weight_map
            .ok_or_else(|| Error::Weights(format!("{index} has no `weight_map` (tensor name → shard file)")))?;
        if weight_map.is_empty() {
            return Err(Error::Weights(format!("{index}'s `weight_map` lists no tensors")));
        }
        if weight_map.len() > MAX_INDEX_TENSORS {
            return Err(Error::Weights(format!(
                "{index} lists {} tensors, more than the {MAX_INDEX_TENSORS} allowed",
                weight_map.len()
            )));
        }
        let mut shards: Vec<String> = weight_map.values().cloned().collect();
        shards.sort_unstable();
        shards.dedup();
        if shards.len() > MAX_SHARDS {
            return Err(Error::Weights(format!(
                "{index} names {} shard files, more than the {MAX_SHARDS} allowed",
                shards.len()
            )));
        }
        if let Some(bad) = shards.iter().find(|s| !plain_file_name(s) || !s.ends_with(ext)) {
            return Err(Error::Weights(format!(
                "{index} names the shard `{bad}`: a shard must be a {ext} file in the index's own folder \
                 (letters, digits, `-`, `_` and `.`, no path)"
            )));
        }
        Ok(ShardIndex { weight_map, shards, file })
    }

    /// The index's file name.
    pub fn file(&self) -> &'static str {
        self.file
    }

    /// The shard files, each once, in the order they are read.
    pub fn shards(&self) -> &[String] {
        &self.shards
    }

    /// Starts joining the shards' tensors.
    pub fn joiner(&self) -> ShardJoin<'_> {
        ShardJoin { index: self, found: BTreeMap::new(), next: 0 }
    }
}

/// The shards' tensors as they are joined, each checked against the index ([`ShardIndex::joiner`]).
pub struct ShardJoin<'a> {
    index: &'a ShardIndex,
    /// Tensor name → the shard it was found in.
    found: BTreeMap<String, String>,
    /// The next shard expected, into `index.shards`.
    next: usize,
}

impl ShardJoin<'_> {
    /// Checks the tensor names of the next shard, `shard` (the shards come in [`ShardIndex::shards`]' order).
    pub fn check<'n>(&mut self, shard: &str, names: impl IntoIterator<Item = &'n str>) -> Result<()> {
        let index = self.index.file;
        match self.index.shards.get(self.next) {
            Some(want) if want == shard => self.next += 1,
            _ => return Err(Error::Weights(format!("shard `{shard}` is not the next one {index} names"))),
        }
        for name in names {
            if let Some(first) = self.found.insert(name.to_string(), shard.to_string()) {
                return Err(Error::Weights(format!(
                    "tensor `{name}` is in two shards, {first} and {shard}: the checkpoint is inconsistent"
                )));
            }
            match self.index.weight_map.get(name) {
                Some(listed) if listed == shard => {}
                Some(listed) => {
                    return Err(Error::Weights(format!(
                        "tensor `{name}` is in {shard}, but {index} puts it in {listed}: the checkpoint is \
                         inconsistent"
                    )))
                }
                None => {
                    return Err(Error::Weights(format!(
                        "tensor `{name}` is in {shard}, but {index} does not list it: the checkpoint is \
                         inconsistent"
                    )))
                }
            }
        }
        Ok(())
    }

    /// Every shard was checked and holds every tensor the index lists for it.
    pub fn finish(self) -> Result<()> {
        let index = self.index.file;
        if let Some(missing) = self.index.shards.get(self.next) {
            return Err(Error::Weights(format!("{index} names the shard {missing}, which was not read")));
        }
        match self.index.weight_map.iter().find(|(name, _)| !self.found.contains_key(*name)) {
            Some((name, shard)) => Err(Error::Weights(format!(
                "{index} puts tensor `{name}` in {shard}, which does not hold it: the checkpoint is inconsistent"
            ))),
            None => Ok(()),
        }
    }
}

impl ShardIndex {
    /// The shards' weights, read already, each with its file name in [`ShardIndex::shards`]' order, joined into one
    /// set after the index's checks.
    pub fn join_weights(&self, shards: Vec<(String, Weights)>) -> Result<Weights> {
        let mut join = self.joiner();
        let mut out = Weights::new();
        for (shard, w) in shards {
            let names = w.tensors.keys().chain(w.unsupported.keys()).map(String::as_str);
            join.check(&shard, names)?;
            for (name, t) in w.tensors.iter() {
                std::sync::Arc::make_mut(&mut out.tensors).insert(name.clone(), t.clone());
            }
            for (name, dtype) in w.unsupported.iter() {
                out.insert_unsupported(name.clone(), dtype.clone());
            }
        }
        join.finish()?;
        Ok(out)
    }

    /// [`ShardIndex::join_weights`] for tensors as lists (`convert`'s: integer buffers already left out, so a tensor
    /// the index lists that a list lacks is looked for among `skipped`, the names each shard left out).
    pub fn join_lists(&self, shards: Vec<(String, NamedTensors, Vec<String>)>) -> Result<NamedTensors> {
        let mut join = self.joiner();
        let mut out = Vec::new();
        for (shard, tensors, skipped) in shards {
            join.check(&shard, tensors.iter().map(|(n, _)| n.as_str()).chain(skipped.iter().map(String::as_str)))?;
            out.extend(tensors);
        }
        join.finish()?;
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> HostTensor {
        HostTensor::f32(vec![1], vec![0.5]).unwrap()
    }

    fn index(json: &str) -> Result<ShardIndex> {
        ShardIndex::parse(json.as_bytes())
    }

    const TWO: &str = r#"{"metadata": {"total_size": 8}, "weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}}"#;

    #[test]
    fn joins_the_shards_the_index_names() {
        let ix = index(TWO).unwrap();
        assert_eq!(ix.shards(), ["m-1.safetensors", "m-2.safetensors"]);
        let w = ix
            .join_weights(vec![
                ("m-1.safetensors".into(), [("a".to_string(), t())].into_iter().collect()),
                ("m-2.safetensors".into(), [("b".to_string(), t())].into_iter().collect()),
            ])
            .unwrap();
        assert_eq!(w.names(), ["a", "b"]);
    }

    #[test]
    fn refuses_an_inconsistent_checkpoint_by_name() {
        let ix = index(TWO).unwrap();
        let one = |n: &str| -> Weights { [(n.to_string(), t())].into_iter().collect() };
        let err = |shards: Vec<(&str, Weights)>| {
            let shards = shards.into_iter().map(|(s, w)| (s.to_string(), w)).collect();
            ix.join_weights(shards).unwrap_err().to_string()
        };
        let both: Weights = [("a".to_string(), t()), ("b".to_string(), t())].into_iter().collect();
        let e = err(vec![("m-1.safetensors", one("a")), ("m-2.safetensors", both)]);
        assert!(e.contains("`a` is in two shards, m-1.safetensors and m-2.safetensors"), "{e}");
        let e = err(vec![("m-1.safetensors", one("b")), ("m-2.safetensors", one("a"))]);
        assert!(e.contains("`b` is in m-1.safetensors, but model.safetensors.index.json puts it in m-2"), "{e}");
        let e = err(vec![("m-1.safetensors", one("a")), ("m-2.safetensors", one("c"))]);
        assert!(e.contains("`c` is in m-2.safetensors, but model.safetensors.index.json does not list it"), "{e}");
        let e = err(vec![("m-1.safetensors", one("a")), ("m-2.safetensors", Weights::new())]);
        assert!(e.contains("puts tensor `b` in m-2.safetensors, which does not hold it"), "{e}");
        let e = err(vec![("m-1.safetensors", one("a"))]);
        assert!(e.contains("names the shard m-2.safetensors, which was not read"), "{e}");
        let e = err(vec![("m-2.safetensors", one("b"))]);
        assert!(e.contains("shard `m-2.safetensors` is not the next one"), "{e}");
    }

    #[test]
    fn refuses_a_bad_index() {
        for (json, want) in [
            ("[]", "not a valid index"),
            ("{}", "has no `weight_map`"),
            (r#"{"weight_map": {}}"#, "lists no tensors"),
            (r#"{"weight_map": {"a": "../x.safetensors"}}"#, "names the shard `../x.safetensors`"),
            (r#"{"weight_map": {"a": "/etc/x.safetensors"}}"#, "no path"),
            (r#"{"weight_map": {"a": "pytorch_model-1.bin"}}"#, "must be a .safetensors file"),
            (r#"{"weight_map": {"a": "x"}}"#, "must be a .safetensors file"),
            (r#"{"weight_map": {"a": 3}}"#, "not a valid index"),
        ] {
            let e = index(json).unwrap_err().to_string();
            assert!(e.contains(want), "{json}: {e}");
        }
        // pytorch_model.bin.index.json: .bin shards, and its own name in messages.
        let bin = ShardIndex::parse_as(br#"{"weight_map": {"a": "pytorch_model-1.bin"}}"#, BIN_INDEX_FILE).unwrap();
        assert_eq!((bin.shards(), bin.file()), (&["pytorch_model-1.bin".to_string()][..], BIN_INDEX_FILE));
        let e = ShardIndex::parse_as(br#"{"weight_map": {"a": "m.safetensors"}}"#, BIN_INDEX_FILE).unwrap_err().to_string();
        assert!(e.contains("pytorch_model.bin.index.json names the shard `m.safetensors`: a shard must be a .bin file"), "{e}");
        let big = vec![b' '; MAX_INDEX_BYTES + 1];
        assert!(ShardIndex::parse(&big).unwrap_err().to_string().contains("more than the"));
        let many: BTreeMap<String, String> = (0..=MAX_SHARDS).map(|i| (format!("t{i}"), format!("m-{i}.safetensors"))).collect();
        let json = serde_json::json!({ "weight_map": many }).to_string();
        assert!(index(&json).unwrap_err().to_string().contains("shard files, more than"));
    }
}
