//! A BERT model in GGUF, both ways: read (ours or llama.cpp's `bert` and `nomic-bert` files, in the form a Hugging
//! Face folder would give them) and write (llama.cpp's `{arch}.*` and `tokenizer.ggml.*` metadata beside the original
//! JSON files; the families beyond BERT's layout under the architectures and keys of [`super::families`]).

use std::collections::HashSet;

use super::storage::{file_type, storage_for, store};
use super::families::{self, ARCH_NOMIC};
use super::names::{canonical_hf_name, gguf_to_hf_name_in, hf_to_gguf_name_in};
use super::{gguf_err, Array, Gguf, GgufWriter, Value, KEY_ARCHITECTURE, KEY_TOKENS};
use crate::config::Family;
use crate::dtype::Dtype;
use crate::tokenizer::gguf_vocab::{
    from_phantom_vocab, standard_specials, to_phantom_vocab, tokenizer_model_type, vocab_from_tokenizer_json,
    wordpiece_tokenizer_json, TOKEN_CONTROL, TOKEN_NORMAL,
};
use crate::weights::bytes::ByteSource;
use crate::weights::{albert, deberta, distilbert, electra, mpnet, roberta, rotary, HostTensor};
use crate::{Error, Result};

/// Metadata key holding the model's Hugging Face `config.json`, verbatim.
pub const KEY_CONFIG_JSON: &str = "bertgpu.config_json";
/// Metadata key holding the Hugging Face `tokenizer_config.json` (special-token names), verbatim, when the folder had one.
pub const KEY_TOKENIZER_CONFIG_JSON: &str = "bertgpu.tokenizer_config_json";
/// Metadata key holding the Hugging Face `tokenizer.json`, verbatim (llama.cpp's name for it).
pub const KEY_TOKENIZER_JSON: &str = "tokenizer.huggingface.json";

/// Everything a BERT `.gguf` holds, in the form a Hugging Face folder would give it.
#[derive(Debug)]
pub struct BertGguf {
    /// Tensors under Hugging Face names (no `bert.` prefix), PyTorch shapes, stored dtypes.
    pub tensors: Vec<(String, HostTensor)>,
    /// `config.json` text: the original one, or one rebuilt from llama.cpp's `bert.*` keys.
    pub config_json: String,
    /// `tokenizer.json` text: the original one, or a WordPiece tokenizer rebuilt from `tokenizer.ggml.tokens`.
    pub tokenizer_json: String,
    /// `tokenizer_config.json` text, if the file carries one.
    pub tokenizer_config_json: Option<String>,
    /// The WordPiece vocabulary by id (`##` continuation form).
    pub vocab: Vec<String>,
    /// Sentence-embedding pooling from `{arch}.pooling_type` (llama.cpp: 0 none, 1 mean, 2 cls, 3 last), if present.
    pub pooling: Option<&'static str>,
    /// sentence-transformers' description of the model ([`crate::sentence::SentenceConfig`] as JSON,
    /// [`KEY_SENTENCE_JSON`]), where the file carries one.
    pub sentence_json: Option<String>,
    /// The parsed header (all metadata).
    pub header: Gguf,
}

/// Our key for sentence-transformers' description of the model (its modules, max_seq_length, prompts), as JSON;
/// a Dense module's tensors are stored under [`crate::sentence::DENSE_PREFIX`] names.
pub const KEY_SENTENCE_JSON: &str = "bertgpu.sentence_transformers";

fn meta_u64(g: &Gguf, key: &str) -> Result<u64> {
    g.get(key).and_then(|v| v.as_u64()).ok_or_else(|| {
        gguf_err(format!("metadata `{key}` is missing or not an unsigned integer; this BERT GGUF is incomplete"))
    })
}

/// Reads a BERT GGUF (ours or llama.cpp's) from memory.
pub fn read_bert(bytes: &(impl ByteSource + ?Sized)) -> Result<BertGguf> {
    let g = Gguf::parse(bytes)?;
    let arch = check_bert(&g)?;
    let mut tensors = Vec::with_capacity(g.tensors.len());
    for t in &g.tensors {
        tensors.push((gguf_to_hf_name_in(arch, &t.name), g.load(bytes, t)?));
    }
    bert_from(g, tensors)
}

/// A BERT GGUF file's header only, read from its start in growing prefixes: its config and tokenizer, no tensors
/// (`tensors` is empty). A loader reads the tensors later, once it knows the device they go to.
#[cfg(not(target_arch = "wasm32"))]
pub fn read_bert_header(path: &std::path::Path) -> Result<BertGguf> {
    use std::io::Read;
    let cannot = |e| Error::io(format!("cannot read {}", path.display()), e);
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    let len = file.metadata().map_err(cannot)?.len();
    let len = usize::try_from(len).map_err(|_| gguf_err(format!("{} is too large", path.display())))?;
    let g = Gguf::parse_growing(len, |_, into| file.read_exact(into).map_err(cannot))?;
    check_bert(&g)?;
    bert_from(g, Vec::new())
}

/// Refuses a GGUF whose header does not describe a model bertgpu runs (`general.architecture`: `bert`, or a family
/// of [`families::ARCHITECTURES`]); the architecture otherwise.
pub(crate) fn check_bert(g: &Gguf) -> Result<&'static str> {
    match g.get(KEY_ARCHITECTURE).and_then(|v| v.as_str()) {
        Some(a) => families::ARCHITECTURES.into_iter().find(|&known| known == a).ok_or_else(|| {
            gguf_err(format!(
                "this GGUF holds a `{a}` model (general.architecture); bertgpu runs {} models only",
                families::ARCHITECTURES.map(|k| format!("`{k}`")).join(", ")
            ))
        }),
        None => Err(gguf_err(format!("`{KEY_ARCHITECTURE}` is missing; is this a model file?"))),
    }
}

/// A BERT GGUF from its checked header ([`check_bert`]) and its tensors (in the header's order, under Hugging Face
/// names): the config and tokenizer as a folder would give them. A family beyond BERT's layout is refused unless its
/// metadata states what its config says ([`families::check_keys`]).
pub(crate) fn bert_from(g: Gguf, tensors: Vec<(String, HostTensor)>) -> Result<BertGguf> {
    let arch = check_bert(&g)?;
    let types: Option<Vec<i32>> = match g.get("tokenizer.ggml.token_type") {
        Some(Value::Array(Array::I32(v))) => Some(v.clone()),
        _ => None,
    };
    let ggml_vocab = match g.get(KEY_TOKENS) {
        Some(Value::Array(Array::String(t))) => Some(from_phantom_vocab(t, types.as_deref())),
        Some(_) => return Err(gguf_err(format!("`{KEY_TOKENS}` is not an array of strings"))),
        None => None,
    };

    let (tokenizer_json, vocab) = match g.get(KEY_TOKENIZER_JSON) {
        Some(v) => {
            let text = v.as_str().ok_or_else(|| gguf_err(format!("`{KEY_TOKENIZER_JSON}` is not a string")))?;
            let json: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| gguf_err(format!("`{KEY_TOKENIZER_JSON}` is not valid JSON: {e}")))?;
            (text.to_string(), vocab_from_tokenizer_json(&json)?.0)
        }
        None => {
            let vocab = ggml_vocab.ok_or_else(|| {
                gguf_err(format!("the file has neither `{KEY_TOKENIZER_JSON}` nor `{KEY_TOKENS}`: no tokenizer"))
            })?;
            let special: HashSet<usize> = match &types {
                Some(t) => t.iter().enumerate().filter(|(_, &ty)| ty == TOKEN_CONTROL).map(|(i, _)| i).collect(),
                None => standard_specials(&vocab),
            };
            (wordpiece_tokenizer_json(&vocab, &special)?, vocab)
        }
    };

    let config_json = match g.get(KEY_CONFIG_JSON) {
        Some(v) => v.as_str().ok_or_else(|| gguf_err(format!("`{KEY_CONFIG_JSON}` is not a string")))?.to_string(),
        None if arch != "bert" && arch != ARCH_NOMIC => {
            // The families only bertgpu writes: their config.json is always inside.
            return Err(gguf_err(format!("metadata `{KEY_CONFIG_JSON}` is missing; a `{arch}` GGUF needs it \
                (re-convert the model with `bertgpu convert`)")));
        }
        None => {
            // llama.cpp's keys; the type-vocabulary size and vocabulary size come from the tensors' shapes, read from
            // the header: the tensors may not be read yet ([`read_bert_header`]).
            let rows = |hf: &str| {
                let t = g.tensors.iter().find(|t| gguf_to_hf_name_in(arch, &t.name) == hf);
                t.and_then(|t| t.shape.first().copied())
            };
            let pad = g.get("tokenizer.ggml.padding_token_id").and_then(|v| v.as_u64()).unwrap_or(0);
            if arch == ARCH_NOMIC {
                families::nomic_config_json(&g, &rows, vocab.len(), pad)?
            } else {
                bert_config_json(&g, &rows, vocab.len(), pad)?
            }
        }
    };
    if arch != "bert" {
        let cfg = crate::config::BertConfig::from_json_str(&config_json)?;
        families::check_keys(&g, &cfg, arch, g.get(KEY_CONFIG_JSON).is_some())?;
    }
    let pooling = match g.get(&format!("{arch}.pooling_type")).and_then(|v| v.as_u64()) {
        Some(1) => Some("mean"),
        Some(2) => Some("cls"),
        Some(3) => Some("lasttoken"),
        _ => None,
    };
    let tokenizer_config_json = g.get(KEY_TOKENIZER_CONFIG_JSON).and_then(|v| v.as_str()).map(String::from);
    let sentence_json = g.get(KEY_SENTENCE_JSON).and_then(|v| v.as_str()).map(String::from);
    Ok(BertGguf { tensors, config_json, tokenizer_json, tokenizer_config_json, vocab, pooling, sentence_json, header: g })
}

/// A BERT config.json rebuilt from a llama.cpp `bert` file's keys and tensor shapes (`rows` of a tensor by its Hugging
/// Face name).
fn bert_config_json(g: &Gguf, rows: &dyn Fn(&str) -> Option<usize>, vocab: usize, pad: u64) -> Result<String> {
    let eps = g.get("bert.attention.layer_norm_epsilon").and_then(|v| v.as_f64()).unwrap_or(1e-12);
    Ok(serde_json::json!({
        "model_type": "bert",
        "architectures": ["BertModel"],
        "vocab_size": rows("embeddings.word_embeddings.weight").unwrap_or(vocab),
        "hidden_size": meta_u64(g, "bert.embedding_length")?,
        "num_hidden_layers": meta_u64(g, "bert.block_count")?,
        "num_attention_heads": meta_u64(g, "bert.attention.head_count")?,
        "intermediate_size": meta_u64(g, "bert.feed_forward_length")?,
        "max_position_embeddings": meta_u64(g, "bert.context_length")?,
        "type_vocab_size": rows("embeddings.token_type_embeddings.weight").unwrap_or(2),
        // llama.cpp stores ε as f32; 1e-12 comes back as 9.9999999e-13, which is what it computes with.
        "layer_norm_eps": eps,
        "hidden_act": "gelu",
        "pad_token_id": pad,
    })
    .to_string())
}

/// A BERT `.gguf` loaded like a model folder: config, tokenizer and weights (in their stored dtypes).
pub struct GgufModel {
    pub config: crate::config::BertConfig,
    pub tokenizer: crate::tokenizer::Tokenizer,
    pub weights: crate::weights::Weights,
    /// Sentence-embedding pooling recorded in the file (`{arch}.pooling_type`), if any.
    pub pooling: Option<&'static str>,
}

/// Loads a BERT `.gguf` (ours or llama.cpp's) from its bytes.
pub fn load_gguf(bytes: &(impl ByteSource + ?Sized)) -> Result<GgufModel> {
    gguf_model(read_bert(bytes)?)
}

/// [`load_gguf`]'s second half: a read BERT GGUF as a model's config, tokenizer and weights.
pub fn gguf_model(m: BertGguf) -> Result<GgufModel> {
    let mut config = crate::config::BertConfig::from_json_str(&m.config_json)?;
    // The model's sentence-transformers description as the file carries it; a llama.cpp file records only its
    // pooling, which is then the model's own too.
    config.sentence = match (&m.sentence_json, m.pooling) {
        (Some(json), _) => {
            let st: crate::sentence::SentenceConfig = serde_json::from_str(json)
                .map_err(|e| Error::Gguf(format!("{KEY_SENTENCE_JSON} is not a sentence-transformers description: {e}")))?;
            st.check(config.hidden_size).map_err(|e| Error::Gguf(format!("{KEY_SENTENCE_JSON}: {e}")))?;
            Some(st)
        }
        (None, Some(p)) => Some(crate::sentence::SentenceConfig {
            modules: vec![crate::sentence::Module::Pooling { mode: p.parse()?, include_prompt: true }],
            ..Default::default()
        }),
        (None, None) => None,
    };
    let tokenizer = crate::tokenizer::Tokenizer::from_json(
        m.tokenizer_json.as_bytes(),
        m.tokenizer_config_json.as_deref().map(str::as_bytes),
        config.max_position_embeddings,
    )?;
    let weights = m.tensors.into_iter().collect();
    Ok(GgufModel { config, tokenizer, weights, pooling: m.pooling })
}

/// What [`write_bert`] needs besides the tensors.
pub struct BertGgufMeta<'a> {
    pub name: &'a str,
    pub config_json: &'a str,
    pub tokenizer_json: &'a str,
    /// `tokenizer_config.json`, if the folder has one.
    pub tokenizer_config_json: Option<&'a str>,
    /// Sentence-embedding pooling (`"mean"` or `"cls"`), from sentence-transformers' `1_Pooling/config.json`.
    pub pooling: Option<&'a str>,
}

/// Writes a complete BERT GGUF: tensors (Hugging Face names in, llama.cpp names out) stored per [`storage_for`],
/// llama.cpp's `bert.*` and `tokenizer.ggml.*` metadata, and the original config and tokenizer JSON.
pub fn write_bert(meta: &BertGgufMeta, tensors: &[(String, HostTensor)], dtype: Dtype) -> Result<Vec<u8>> {
    write_bert_with(meta, None, tensors, dtype)
}

/// [`write_bert`] carrying a sentence-transformers description too ([`KEY_SENTENCE_JSON`]; its Dense modules'
/// tensors are among `tensors`), and its pooling as llama.cpp's `{arch}.pooling_type` where llama.cpp has the mode.
pub fn write_bert_with(meta: &BertGgufMeta, sentence: Option<&crate::sentence::SentenceConfig>,
    tensors: &[(String, HostTensor)], dtype: Dtype) -> Result<Vec<u8>> {
    // Parsed and checked as a load would (a family the loader refuses is refused here too); DistilBERT's sizes under
    // its own names come out as BERT's.
    let cfg = crate::config::BertConfig::from_json_str(meta.config_json)?;
    // The architecture and keys that state the family's choices (a family with no GGUF form is refused by name).
    let arch = families::architecture(cfg.family)?;
    let num = |v: usize| -> Result<u32> {
        u32::try_from(v).map_err(|_| Error::Config(format!("config.json: {v} does not fit the GGUF's 32-bit field")))
    };
    let tok_json: serde_json::Value = serde_json::from_str(meta.tokenizer_json)
        .map_err(|e| Error::Tokenizer(format!("tokenizer.json is not valid JSON: {e}")))?;
    let (vocab, special) = vocab_from_tokenizer_json(&tok_json)?;
    // llama.cpp's vocabulary: WordPiece in its "phantom space" form (`bert`); RoBERTa's byte-level BPE (`gpt2`, with
    // its merges) and XLM-R's Unigram (`t5`, with the piece scores) as they are, the form llama.cpp's converter
    // writes them in. bertgpu itself reads the tokenizer.json stored beside them.
    let model_type = tokenizer_model_type(&tok_json).unwrap_or_default().to_string();
    let (tokens, types) = if model_type == "WordPiece" {
        to_phantom_vocab(&vocab, &special)
    } else {
        let types = (0..vocab.len()).map(|i| if special.contains(&i) { TOKEN_CONTROL } else { TOKEN_NORMAL }).collect();
        (vocab.clone(), types)
    };

    let mut w = GgufWriter::new();
    w.set(KEY_ARCHITECTURE, Value::String(arch.into()));
    w.set("general.name", Value::String(meta.name.into()));
    w.set("general.file_type", Value::U32(file_type(dtype)));
    w.set("general.quantization_version", Value::U32(2));
    for (key, value, _) in families::arch_keys(&cfg, arch)? {
        w.set(&key, value);
    }
    let pooling = match sentence.and_then(|s| s.pooling()) {
        Some((p, _)) => Some(p.name()),
        None => meta.pooling,
    };
    let pooling_key = format!("{arch}.pooling_type");
    match pooling {
        Some("mean") => w.set(&pooling_key, Value::U32(1)),
        Some("cls") => w.set(&pooling_key, Value::U32(2)),
        Some("lasttoken") => w.set(&pooling_key, Value::U32(3)),
        _ => {}
    }
    if let Some(s) = sentence {
        let json = serde_json::to_string(s).map_err(|e| Error::Gguf(format!("{KEY_SENTENCE_JSON}: {e}")))?;
        w.set(KEY_SENTENCE_JSON, Value::String(json));
    }
    let ggml_model = match model_type.as_str() {
        "BPE" => "gpt2",
        "Unigram" => "t5",
        _ => "bert",
    };
    w.set("tokenizer.ggml.model", Value::String(ggml_model.into()));
    w.set(KEY_TOKENS, Value::Array(Array::String(tokens)));
    w.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    w.set("tokenizer.ggml.token_type_count", Value::U32(num(cfg.type_vocab_size)?));
    let model = &tok_json["model"];
    if let Some(merges) = model["merges"].as_array().filter(|_| ggml_model == "gpt2") {
        // Merges are "a b" strings in older files and ["a", "b"] pairs in newer ones; llama.cpp reads the former.
        let merges = merges
            .iter()
            .map(|m| match m {
                serde_json::Value::String(s) => Ok(s.clone()),
                serde_json::Value::Array(p) if p.len() == 2 => Ok(format!("{} {}", p[0].as_str().unwrap_or(""), p[1].as_str().unwrap_or(""))),
                _ => Err(Error::Tokenizer("tokenizer.json: a BPE merge is neither \"a b\" nor [\"a\", \"b\"]".into())),
            })
            .collect::<Result<Vec<_>>>()?;
        w.set("tokenizer.ggml.merges", Value::Array(Array::String(merges)));
    }
    if ggml_model == "t5" {
        let scores: Vec<f32> = model["vocab"].as_array().into_iter().flatten().map(|p| p[1].as_f64().unwrap_or(0.0) as f32).collect();
        // Added tokens past the Unigram vocabulary score 0, as llama.cpp's converter gives them.
        let mut scores = scores;
        scores.resize(vocab.len(), 0.0);
        w.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    }
    // BERT's names, RoBERTa's (`<s>` is llama.cpp's BOS and CLS, `</s>` its EOS and SEP).
    for (key, names) in [
        ("tokenizer.ggml.unknown_token_id", ["[UNK]", "<unk>"]),
        ("tokenizer.ggml.seperator_token_id", ["[SEP]", "</s>"]), // sic: llama.cpp's spelling
        ("tokenizer.ggml.padding_token_id", ["[PAD]", "<pad>"]),
        // llama.cpp (gguf-py `SpecialVocab`) records BERT's [CLS] as BOS and [SEP] as EOS.
        ("tokenizer.ggml.bos_token_id", ["[CLS]", "<s>"]),
        ("tokenizer.ggml.eos_token_id", ["[SEP]", "</s>"]),
        ("tokenizer.ggml.mask_token_id", ["[MASK]", "<mask>"]),
    ] {
        // The tokenizer's own kind first; ALBERT's Unigram vocabulary has BERT's `[CLS]`, `[SEP]` and `[MASK]` beside
        // `<unk>` and `<pad>`, so the other kind's name is tried next.
        let order = if model_type == "WordPiece" { [names[0], names[1]] } else { [names[1], names[0]] };
        if let Some(id) = order.iter().find_map(|pick| vocab.iter().position(|v| v == pick)) {
            w.set(key, Value::U32(id as u32));
        }
    }
    w.set(KEY_TOKENIZER_JSON, Value::String(meta.tokenizer_json.into()));
    w.set(KEY_CONFIG_JSON, Value::String(meta.config_json.into()));
    if let Some(tc) = meta.tokenizer_config_json {
        w.set(KEY_TOKENIZER_CONFIG_JSON, Value::String(tc.into()));
    }

    let n_layers = cfg.num_hidden_layers;
    // Every family is stored under BERT's names (llama.cpp's for the encoder); the config JSON says which it is.
    let bert_name = |n: &str| match cfg.family {
        Family::Bert => canonical_hf_name(n),
        Family::DistilBert => canonical_hf_name(&distilbert::to_bert(n)),
        Family::Roberta | Family::XlmRoberta | Family::Camembert => canonical_hf_name(&roberta::NAMES.to_bert(n)),
        Family::Electra => canonical_hf_name(&electra::NAMES.to_bert(n)),
        Family::Albert => canonical_hf_name(&albert::to_bert(n)),
        Family::MPNet => canonical_hf_name(&mpnet::to_bert(n)),
        f @ (Family::NomicBert | Family::Gte) => canonical_hf_name(&rotary::to_bert(f, n)),
        Family::DebertaV2 => canonical_hf_name(&deberta::to_bert(n)),
        Family::ModernBert => canonical_hf_name(&crate::weights::modernbert::to_bert(n)),
        Family::JinaBert => canonical_hf_name(&crate::weights::jina::to_bert(n)),
    };
    let word = tensors.iter().find(|(n, _)| bert_name(n) == "embeddings.word_embeddings.weight");
    for (name, t) in tensors {
        let hf = bert_name(name);
        // A decoder tied to the word embeddings is not stored; loaders tie it back (as for HF checkpoints).
        if hf == "cls.predictions.decoder.weight" && word.is_some_and(|(_, wt)| wt == t) {
            continue;
        }
        // RoBERTa's positions start at pad_token_id + 1: the rows before are dropped, as llama.cpp's converter does,
        // so that row j is token j's position and `bert.context_length` rows remain (the loader takes either form).
        let sliced;
        let t = if hf == "embeddings.position_embeddings.weight" && cfg.position_offset > 0 {
            let (rows, offset) = (t.rows_cols().0, cfg.position_offset);
            if rows != cfg.max_position_embeddings + offset {
                return Err(Error::Config(format!(
                    "`{name}` has {rows} rows but config.json's max_position_embeddings is {}",
                    cfg.max_position_embeddings + offset
                )));
            }
            sliced = t.slice_rows(offset..rows)?;
            &sliced
        } else {
            t
        };
        let g = hf_to_gguf_name_in(arch, &hf);
        let ty = storage_for(&g, &t.shape, dtype, n_layers);
        let stored = store(t, ty).map_err(|e| gguf_err(format!("tensor `{hf}`: {e}")))?;
        w.add_tensor(&g, stored)?;
    }
    w.to_bytes()
}

