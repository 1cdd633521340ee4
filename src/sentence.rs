//! sentence-transformers' own description of a model, as data: the modules after the encoder (`modules.json` and
//! each module's folder: `1_Pooling/config.json`, `2_Dense/config.json`, `Normalize`), the length it truncates to
//! (`sentence_bert_config.json`'s `max_seq_length`) and its prompts (`config_sentence_transformers.json`). Read from
//! the files by name through a reader, so that a folder on disk, files fetched by the browser and the copy a GGUF
//! carries read alike. The modules run in `heads::sentence`; a Dense module's weights are read by the loader.
//!
//! What sentence-transformers computes (`sentence_transformers/sentence_transformer/modules/pooling.py`,
//! `base/modules/dense.py`, `base/modules/normalize.py`): Pooling reduces the token vectors to one, by the mode its
//! config names; Dense is `activation(x·Wᵀ + b)`; Normalize divides by the L2 norm. A sparse encoder's
//! (`sparse_encoder/modules/splade_pooling.py`) SpladePooling takes the masked-LM logits of every token to
//! `log(1 + ReLU(x))` (applied twice for `log1p_relu`) and keeps each vocabulary entry's largest over the tokens. A
//! module this crate does not run (LayerNorm, WeightedLayerPooling, a CNN, a Router, SpladePooling by sum, ...) is an
//! error that names it, never skipped: a vector computed without it would be silently wrong.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::activation::Activation;
use crate::{Error, Result};

/// How token vectors become one sentence vector (sentence-transformers' pooling modes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// Mean over the real tokens (padding excluded): sentence-transformers' default.
    #[default]
    Mean,
    /// The `[CLS]` token's hidden state (the first real token).
    Cls,
    /// The largest value of each dimension over the real tokens.
    Max,
    /// The sum over the real tokens divided by the square root of their count.
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "mean_sqrt_len"))]
    MeanSqrtLen,
    /// The mean weighted by position: token `t` (from 0) weighs `t + 1`.
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "weightedmean"))]
    #[serde(rename = "weightedmean")]
    WeightedMean,
    /// The last real token's hidden state.
    #[cfg_attr(not(target_arch = "wasm32"), value(name = "lasttoken"))]
    #[serde(rename = "lasttoken")]
    LastToken,
}

impl Pooling {
    /// Every mode, in sentence-transformers' order.
    pub const ALL: [Pooling; 6] =
        [Pooling::Cls, Pooling::Max, Pooling::Mean, Pooling::MeanSqrtLen, Pooling::WeightedMean, Pooling::LastToken];

    /// Our name (the CLI's `--pooling`, JavaScript's `pooling`).
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Max => "max",
            Pooling::MeanSqrtLen => "mean_sqrt_len",
            Pooling::WeightedMean => "weightedmean",
            Pooling::LastToken => "lasttoken",
        }
    }

    /// sentence-transformers' name of the mode (`pooling_mode` in its config) and its legacy boolean key.
    fn st_names(self) -> (&'static str, &'static str) {
        match self {
            Pooling::Cls => ("cls", "pooling_mode_cls_token"),
            Pooling::Max => ("max", "pooling_mode_max_tokens"),
            Pooling::Mean => ("mean", "pooling_mode_mean_tokens"),
            Pooling::MeanSqrtLen => ("mean_sqrt_len_tokens", "pooling_mode_mean_sqrt_len_tokens"),
            Pooling::WeightedMean => ("weightedmean", "pooling_mode_weightedmean_tokens"),
            Pooling::LastToken => ("lasttoken", "pooling_mode_lasttoken"),
        }
    }
}

impl std::str::FromStr for Pooling {
    type Err = Error;
    fn from_str(s: &str) -> Result<Pooling> {
        Pooling::ALL.into_iter().find(|p| p.name() == s || p.st_names().0 == s).ok_or_else(|| {
            let names: Vec<&str> = Pooling::ALL.iter().map(|p| p.name()).collect();
            Error::Input(format!("unknown pooling `{s}`; use one of {}", names.join(", ")))
        })
    }
}

/// One module after the encoder, in `modules.json`'s order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Module {
    /// `include_prompt: false`: the prompt's tokens are left out of the pooling.
    Pooling { mode: Pooling, include_prompt: bool },
    /// `activation(x·Wᵀ + b)`, W `(out_features, in_features)` in `{path}/model.safetensors` as `linear.weight`.
    Dense { path: String, in_features: usize, out_features: usize, bias: bool, activation: Activation },
    Normalize,
    /// SPLADE: the vocabulary logits of every token, `log1p(relu(x))` (twice where `log1p_relu`), the largest per
    /// entry over the tokens: one sparse vector as wide as the vocabulary.
    Splade { log1p_relu: bool },
}

/// sentence-transformers' description of a model (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SentenceConfig {
    /// The modules after the encoder, in order: a Pooling first, then Dense layers, Normalize last if at all.
    pub modules: Vec<Module>,
    /// The length, in tokens, inputs are truncated to (`sentence_bert_config.json`).
    pub max_seq_length: Option<usize>,
    /// Prompts by name (`config_sentence_transformers.json`), prepended to a text as sentence-transformers does.
    pub prompts: BTreeMap<String, String>,
    /// The prompt used when the caller names none.
    pub default_prompt_name: Option<String>,
}

/// Where the loader puts a Dense module's tensors among the model's weights: `{DENSE_PREFIX}{path}.linear.weight`
/// and `.bias` (the names sentence-transformers gives them in `{path}/model.safetensors`).
pub const DENSE_PREFIX: &str = "sentence_transformers.";

/// Bounds on what a file from the network may declare (each file is read whole by the caller, within its size cap).
const MAX_MODULES: usize = 16;
const MAX_PROMPTS: usize = 256;

/// The files sentence-transformers writes beside the model (those the loader looks for), apart from each module's
/// folder.
pub const FILES: [&str; 3] = ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"];

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct DenseFile {
    in_features: usize,
    out_features: usize,
    #[serde(default = "yes")]
    bias: bool,
    #[serde(default)]
    activation_function: Option<String>,
}

fn yes() -> bool {
    true
}

fn json<T: serde::de::DeserializeOwned>(bytes: &[u8], name: &str) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| Error::Config(format!("{name}: {e}")))
}

/// A Dense module's `activation_function` as sentence-transformers saves it (a torch class path) → ours; `None`
/// (absent) is sentence-transformers' default, Tanh.
fn dense_activation(name: Option<&str>, file: &str) -> Result<Activation> {
    let Some(name) = name else { return Ok(Activation::Tanh) };
    match name.rsplit('.').next().unwrap_or(name) {
        "Tanh" | "tanh" => Ok(Activation::Tanh),
        "Identity" => Ok(Activation::None),
        "ReLU" | "relu" => Ok(Activation::Relu),
        "GELU" | "gelu" => Ok(Activation::Gelu),
        _ => Err(Error::Config(format!(
            "{file}: activation_function `{name}` is not supported; the Dense modules run Tanh, Identity, ReLU or GELU"
        ))),
    }
}

/// A SpladePooling module's config: the `max` strategy (SPLADE v2 and later); `sum` is refused by name.
fn splade_module(v: &serde_json::Value, file: &str) -> Result<Module> {
    let name = |key: &str, default: &'static str| -> Result<String> {
        match v.get(key) {
            None | Some(serde_json::Value::Null) => Ok(default.to_string()),
            Some(serde_json::Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(Error::Config(format!("{file}: {key} {other} is not a name"))),
        }
    };
    let strategy = name("pooling_strategy", "max")?;
    if strategy != "max" {
        return Err(Error::Config(format!(
            "{file}: pooling_strategy `{strategy}` is not supported; SpladePooling by `max` is"
        )));
    }
    let log1p_relu = match name("activation_function", "relu")?.as_str() {
        "relu" => false,
        "log1p_relu" => true,
        other => {
            return Err(Error::Config(format!(
                "{file}: activation_function `{other}` is not one of SpladePooling's (relu, log1p_relu)"
            )))
        }
    };
    Ok(Module::Splade { log1p_relu })
}

/// A Pooling module's config: the new form (`pooling_mode`, a name or a list) or the legacy booleans.
fn pooling_module(v: &serde_json::Value, file: &str) -> Result<Module> {
    let obj = v.as_object().ok_or_else(|| Error::Config(format!("{file}: not a JSON object")))?;
    let mut modes = Vec::new();
    match obj.get("pooling_mode") {
        Some(serde_json::Value::String(s)) => modes.push(s.clone()),
        Some(serde_json::Value::Array(a)) => {
            for m in a {
                modes.push(m.as_str().ok_or_else(|| Error::Config(format!("{file}: pooling_mode {m} is not a name")))?.into());
            }
        }
        Some(other) => return Err(Error::Config(format!("{file}: pooling_mode {other} is not a name or a list"))),
        None => {
            for p in Pooling::ALL {
                if obj.get(p.st_names().1).and_then(|b| b.as_bool()) == Some(true) {
                    modes.push(p.st_names().0.to_string());
                }
            }
        }
    }
    let mode = match modes.as_slice() {
        [one] => one.parse::<Pooling>().map_err(|_| {
            Error::Config(format!("{file}: pooling mode `{one}` is not one of sentence-transformers' modes"))
        })?,
        [] => return Err(Error::Config(format!("{file}: no pooling mode is set"))),
        many => {
            return Err(Error::Config(format!(
                "{file}: the pooling modes {many:?} together (their vectors concatenated) are not supported; one mode \
                 is"
            )))
        }
    };
    let include_prompt = obj.get("include_prompt").and_then(|b| b.as_bool()).unwrap_or(true);
    Ok(Module::Pooling { mode, include_prompt })
}

impl SentenceConfig {
    /// Reads the description through `read` (a file's path relative to the model folder → its bytes, `None` when
    /// absent). `None` when the folder has none of sentence-transformers' files: today's defaults apply. `hidden`:
    /// the encoder's width, which the first module must take.
    pub fn read(hidden: usize, read: &mut dyn FnMut(&str) -> Result<Option<Vec<u8>>>) -> Result<Option<SentenceConfig>> {
        let modules_json = read("modules.json")?;
        let bert_config = read("sentence_bert_config.json")?;
        let st_config = read("config_sentence_transformers.json")?;
        if modules_json.is_none() && bert_config.is_none() && st_config.is_none() {
            return Ok(None);
        }
        let mut out = SentenceConfig::default();
        if let Some(bytes) = modules_json {
            let entries: Vec<ModuleEntry> = json(&bytes, "modules.json")?;
            if entries.len() > MAX_MODULES {
                return Err(Error::Config(format!("modules.json lists {} modules (at most {MAX_MODULES})", entries.len())));
            }
            let kind = |e: &ModuleEntry| e.kind.rsplit('.').next().unwrap_or(&e.kind).to_string();
            match entries.first().map(kind).as_deref() {
                // A sparse encoder's first module (sentence-transformers 5's name for a masked-LM Transformer).
                Some("Transformer" | "MLMTransformer") => {}
                Some(other) => {
                    return Err(Error::Config(format!(
                        "modules.json: the first module is `{other}`; a model whose first module is the Transformer is \
                         supported"
                    )))
                }
                None => return Err(Error::Config("modules.json lists no modules".into())),
            }
            for e in &entries[1..] {
                if e.path.split(['/', '\\']).any(|part| part == "..") || e.path.starts_with('/') {
                    return Err(Error::Config(format!("modules.json: module path `{}` leaves the model folder", e.path)));
                }
                let module = match kind(e).as_str() {
                    "Pooling" => {
                        let file = format!("{}/config.json", e.path);
                        let bytes = read(&file)?.ok_or_else(|| Error::Config(format!("{file} is missing")))?;
                        pooling_module(&json(&bytes, &file)?, &file)?
                    }
                    "Dense" => {
                        let file = format!("{}/config.json", e.path);
                        let bytes = read(&file)?.ok_or_else(|| Error::Config(format!("{file} is missing")))?;
                        let d: DenseFile = json(&bytes, &file)?;
                        let activation = dense_activation(d.activation_function.as_deref(), &file)?;
                        Module::Dense {
                            path: e.path.clone(),
                            in_features: d.in_features,
                            out_features: d.out_features,
                            bias: d.bias,
                            activation,
                        }
                    }
                    "Normalize" => Module::Normalize,
                    "SpladePooling" => {
                        let file = format!("{}/config.json", e.path);
                        match read(&file)? {
                            Some(bytes) => splade_module(&json(&bytes, &file)?, &file)?,
                            None => Module::Splade { log1p_relu: false }, // its defaults
                        }
                    }
                    other => {
                        return Err(Error::Config(format!(
                            "modules.json: the module `{other}` ({}) is not supported: bertgpu runs Pooling, Dense and \
                             Normalize (SpladePooling for sparse vectors) after the Transformer, and refuses a model it would run without one of its modules",
                            e.kind
                        )))
                    }
                };
                out.modules.push(module);
            }
            out.check(hidden)?;
        }
        if let Some(bytes) = bert_config {
            let v: serde_json::Value = json(&bytes, "sentence_bert_config.json")?;
            out.max_seq_length = match v.get("max_seq_length") {
                None | Some(serde_json::Value::Null) => None,
                Some(n) => Some(n.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                    Error::Config(format!("sentence_bert_config.json: max_seq_length {n} is not a positive integer"))
                })? as usize),
            };
        }
        if let Some(bytes) = st_config {
            let v: serde_json::Value = json(&bytes, "config_sentence_transformers.json")?;
            if let Some(p) = v.get("prompts").filter(|p| !p.is_null()) {
                let map = p.as_object().ok_or_else(|| {
                    Error::Config("config_sentence_transformers.json: prompts is not an object of names".into())
                })?;
                if map.len() > MAX_PROMPTS {
                    return Err(Error::Config(format!(
                        "config_sentence_transformers.json: {} prompts (at most {MAX_PROMPTS})",
                        map.len()
                    )));
                }
                for (name, text) in map {
                    let text = text.as_str().ok_or_else(|| {
                        Error::Config(format!("config_sentence_transformers.json: prompt `{name}` is not text"))
                    })?;
                    out.prompts.insert(name.clone(), text.to_string());
                }
            }
            if let Some(name) = v.get("default_prompt_name").and_then(|n| n.as_str()) {
                if !out.prompts.contains_key(name) {
                    return Err(Error::Config(format!(
                        "config_sentence_transformers.json: default_prompt_name `{name}` is not one of its prompts"
                    )));
                }
                out.default_prompt_name = Some(name.to_string());
            }
        }
        Ok(Some(out))
    }

    /// The order the modules run in, and each Dense's width against what it receives.
    pub fn check(&self, hidden: usize) -> Result<()> {
        let mut width = hidden;
        let mut pooled = false;
        // The module that must come last, once it has come: nothing may follow Normalize or SpladePooling.
        let mut last: Option<&str> = None;
        for m in &self.modules {
            if let Some(last) = last {
                return Err(Error::Config(format!(
                    "modules.json: a module after {last} is not supported; {last} must come last"
                )));
            }
            match m {
                Module::Splade { .. } if pooled => {
                    return Err(Error::Config("modules.json: SpladePooling after a Pooling is not supported".into()))
                }
                Module::Splade { .. } => {
                    pooled = true;
                    last = Some("SpladePooling");
                }
                Module::Pooling { .. } if pooled => {
                    return Err(Error::Config("modules.json: two Pooling modules are not supported".into()))
                }
                Module::Pooling { .. } => pooled = true,
                Module::Dense { .. } | Module::Normalize if !pooled => {
                    let what = match path_of(m) {
                        Some(path) => format!("the Dense module `{path}`"),
                        None => "Normalize".into(),
                    };
                    return Err(Error::Config(format!(
                        "modules.json: {what} comes before any Pooling; per-token modules are not supported"
                    )));
                }
                Module::Dense { path, in_features, out_features, .. } => {
                    if *in_features != width {
                        return Err(Error::Config(format!(
                            "{path}/config.json: in_features {in_features}, but the vector it receives has {width} \
                             values"
                        )));
                    }
                    if *out_features == 0 {
                        return Err(Error::Config(format!("{path}/config.json: out_features is 0")));
                    }
                    width = *out_features;
                }
                Module::Normalize => last = Some("Normalize"),
            }
        }
        if !pooled && !self.modules.is_empty() {
            return Err(Error::Config("modules.json has no Pooling module".into()));
        }
        Ok(())
    }

    /// The Pooling module's mode and whether the prompt is pooled too.
    pub fn pooling(&self) -> Option<(Pooling, bool)> {
        self.modules.iter().find_map(|m| match m {
            Module::Pooling { mode, include_prompt } => Some((*mode, *include_prompt)),
            _ => None,
        })
    }

    /// Whether this is a sparse encoder (SpladePooling), and its activation: `Some(log1p_relu)`.
    pub fn splade(&self) -> Option<bool> {
        self.modules.iter().find_map(|m| match m {
            Module::Splade { log1p_relu } => Some(*log1p_relu),
            _ => None,
        })
    }

    /// Whether the vectors end normalised (a Normalize module).
    pub fn normalizes(&self) -> bool {
        self.modules.contains(&Module::Normalize)
    }

    /// The Dense modules, in order.
    pub fn dense(&self) -> impl Iterator<Item = &Module> {
        self.modules.iter().filter(|m| matches!(m, Module::Dense { .. }))
    }

    /// The width of the vectors the modules give for an encoder of width `hidden`.
    pub fn output_width(&self, hidden: usize) -> usize {
        self.dense().last().map_or(hidden, |m| match m {
            Module::Dense { out_features, .. } => *out_features,
            _ => hidden,
        })
    }

    /// The prompt text `name` names (an error listing the model's prompts when it names none of them), or the
    /// default prompt's when `name` is `None`.
    pub fn prompt(&self, name: Option<&str>) -> Result<Option<&str>> {
        match name.or(self.default_prompt_name.as_deref()) {
            None => Ok(None),
            Some(n) => self.prompts.get(n).map(|p| Some(p.as_str())).ok_or_else(|| {
                let names: Vec<&str> = self.prompts.keys().map(String::as_str).collect();
                Error::Input(if names.is_empty() {
                    format!("prompt `{n}`: this model has no prompts (config_sentence_transformers.json names none)")
                } else {
                    format!("prompt `{n}` is not one of this model's prompts: {}", names.join(", "))
                })
            }),
        }
    }
}

fn path_of(m: &Module) -> Option<&str> {
    match m {
        Module::Dense { path, .. } => Some(path),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files<'a>(list: &'a [(&'a str, &'a str)]) -> impl FnMut(&str) -> Result<Option<Vec<u8>>> + 'a {
        move |name| Ok(list.iter().find(|(n, _)| *n == name).map(|(_, t)| t.as_bytes().to_vec()))
    }

    const MODULES: &str = r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
        {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
        {"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.models.Dense"},
        {"idx":3,"name":"3","path":"3_Normalize","type":"sentence_transformers.models.Normalize"}]"#;

    #[test]
    fn reads_a_stack_in_the_legacy_and_the_new_forms() {
        let legacy = r#"{"word_embedding_dimension": 8, "pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#;
        let dense = r#"{"in_features": 8, "out_features": 4, "bias": true,
            "activation_function": "torch.nn.modules.activation.Tanh"}"#;
        let st = r#"{"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": null}"#;
        let c = SentenceConfig::read(8, &mut files(&[("modules.json", MODULES), ("1_Pooling/config.json", legacy),
            ("2_Dense/config.json", dense), ("sentence_bert_config.json", r#"{"max_seq_length": 16}"#),
            ("config_sentence_transformers.json", st)])).unwrap().unwrap();
        assert_eq!(c.pooling(), Some((Pooling::Cls, true)));
        assert!(c.normalizes());
        assert_eq!(c.output_width(8), 4);
        assert_eq!(c.max_seq_length, Some(16));
        assert_eq!(c.prompt(Some("query")).unwrap(), Some("query: "));
        assert_eq!(c.prompt(None).unwrap(), None);
        let e = c.prompt(Some("q")).unwrap_err().to_string();
        assert!(e.contains("`q` is not one of this model's prompts: passage, query"), "{e}");
        let new = r#"{"embedding_dimension": 8, "pooling_mode": "weightedmean", "include_prompt": false}"#;
        let c = SentenceConfig::read(8, &mut files(&[("modules.json", MODULES), ("1_Pooling/config.json", new),
            ("2_Dense/config.json", dense)])).unwrap().unwrap();
        assert_eq!(c.pooling(), Some((Pooling::WeightedMean, false)));
        assert!(SentenceConfig::read(8, &mut files(&[])).unwrap().is_none());
    }

    #[test]
    fn refuses_what_it_does_not_run_by_name() {
        let err = |list: &[(&str, &str)]| SentenceConfig::read(8, &mut files(list)).unwrap_err().to_string();
        let pool = r#"{"pooling_mode_mean_tokens": true}"#;
        let unknown = r#"[{"path":"","type":"sentence_transformers.models.Transformer"},
            {"path":"1_LayerNorm","type":"sentence_transformers.models.LayerNorm"}]"#;
        assert!(err(&[("modules.json", unknown)]).contains("the module `LayerNorm`"));
        let dense = r#"{"in_features": 7, "out_features": 4}"#;
        let e = err(&[("modules.json", MODULES), ("1_Pooling/config.json", pool), ("2_Dense/config.json", dense)]);
        assert!(e.contains("in_features 7, but the vector it receives has 8"), "{e}");
        let two = r#"{"pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true}"#;
        assert!(err(&[("modules.json", MODULES), ("1_Pooling/config.json", two)]).contains("together"));
        let escape = r#"[{"path":"","type":"x.Transformer"},{"path":"../x","type":"x.Pooling"}]"#;
        assert!(err(&[("modules.json", escape)]).contains("leaves the model folder"));
        let act = r#"{"in_features": 8, "out_features": 4, "activation_function": "torch.nn.modules.activation.Sigmoid"}"#;
        let e = err(&[("modules.json", MODULES), ("1_Pooling/config.json", pool), ("2_Dense/config.json", act)]);
        assert!(e.contains("activation_function `torch.nn.modules.activation.Sigmoid` is not supported"), "{e}");
        let st = r#"{"prompts": {"query": "q: "}, "default_prompt_name": "passage"}"#;
        assert!(err(&[("config_sentence_transformers.json", st)]).contains("default_prompt_name `passage`"));
        assert!("median".parse::<Pooling>().unwrap_err().to_string().contains("cls, max, mean"));
    }

    #[test]
    fn reads_a_sparse_encoder_and_refuses_what_splade_does_not_run() {
        let modules = r#"[{"path":"","type":"sentence_transformers.sparse_encoder.models.MLMTransformer"},
            {"path":"1_SpladePooling","type":"sentence_transformers.sparse_encoder.models.SpladePooling"}]"#;
        let read = |cfg: &str| {
            SentenceConfig::read(8, &mut files(&[("modules.json", modules), ("1_SpladePooling/config.json", cfg)]))
        };
        let c = read(r#"{"pooling_strategy": "max", "activation_function": "log1p_relu"}"#).unwrap().unwrap();
        assert_eq!(c.splade(), Some(true));
        assert_eq!(c.pooling(), None);
        assert_eq!(read(r#"{"word_embedding_dimension": 30522}"#).unwrap().unwrap().splade(), Some(false));
        let e = read(r#"{"pooling_strategy": "sum"}"#).unwrap_err().to_string();
        assert!(e.contains("pooling_strategy `sum` is not supported"), "{e}");
        let e = read(r#"{"activation_function": "gelu"}"#).unwrap_err().to_string();
        assert!(e.contains("activation_function `gelu`"), "{e}");
        let after = r#"[{"path":"","type":"x.MLMTransformer"},{"path":"1","type":"x.SpladePooling"},
            {"path":"2","type":"x.Normalize"}]"#;
        let e = SentenceConfig::read(8, &mut files(&[("modules.json", after)])).unwrap_err().to_string();
        assert!(e.contains("a module after SpladePooling is not supported"), "{e}");
    }
}
