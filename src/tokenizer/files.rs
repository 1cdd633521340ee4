//! What the tokenizer files say besides the pipeline: `tokenizer_config.json` (flags and special-token names),
//! `vocab.txt`, and the special tokens and post-processor of a `tokenizer.json`, checked before the `tokenizers`
//! crate trusts them.

use std::collections::HashMap;

use serde_json::Value;
use tokenizers::AddedToken;

use super::{SpecialToken, SpecialTokens};
use crate::error::{Error, Result};

/// Which tokenizer_config.json key names which special token, and the `BertTokenizer` default when the key is absent.
pub(super) const SPECIAL_KEYS: [(&str, &str); 5] = [
    ("cls_token", "[CLS]"),
    ("sep_token", "[SEP]"),
    ("pad_token", "[PAD]"),
    ("unk_token", "[UNK]"),
    ("mask_token", "[MASK]"),
];

/// The settings of tokenizer_config.json that matter for BERT.
#[derive(Debug, Default)]
pub(super) struct TokenizerConfig {
    pub(super) do_lower_case: Option<bool>,
    pub(super) strip_accents: Option<bool>,
    pub(super) tokenize_chinese_chars: Option<bool>,
    pub(super) clean_up_tokenization_spaces: Option<bool>,
    /// key (`cls_token`, ...) → token string
    pub(super) special: HashMap<&'static str, String>,
    /// added_tokens_decoder entries: (id, token)
    pub(super) added: Vec<(u32, AddedToken)>,
}

pub(super) fn parse_config(bytes: Option<&[u8]>) -> Result<TokenizerConfig> {
    let Some(bytes) = bytes else { return Ok(TokenizerConfig::default()) };
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        Error::Tokenizer(format!("tokenizer_config.json is not valid JSON ({e}); fix or remove the file"))
    })?;
    let obj = v
        .as_object()
        .ok_or_else(|| Error::Tokenizer("tokenizer_config.json must be a JSON object".into()))?;
    let bool_key = |k: &str| -> Result<Option<bool>> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(Error::Tokenizer(format!(
                "tokenizer_config.json: `{k}` must be true, false or null, found {other}"
            ))),
        }
    };
    let mut cfg = TokenizerConfig {
        do_lower_case: bool_key("do_lower_case")?,
        strip_accents: bool_key("strip_accents")?,
        tokenize_chinese_chars: bool_key("tokenize_chinese_chars")?,
        clean_up_tokenization_spaces: bool_key("clean_up_tokenization_spaces")?,
        ..Default::default()
    };
    for (key, _) in SPECIAL_KEYS {
        if let Some(t) = obj.get(key).and_then(token_content) {
            cfg.special.insert(key, t);
        }
    }
    // Newer exports list every added token with its matching flags.
    if let Some(Value::Object(dec)) = obj.get("added_tokens_decoder") {
        for (id, t) in dec {
            let id: u32 = id.parse().map_err(|_| {
                Error::Tokenizer(format!("tokenizer_config.json: added_tokens_decoder key `{id}` is not an id"))
            })?;
            let Some(content) = token_content(t) else {
                return Err(Error::Tokenizer(format!(
                    "tokenizer_config.json: added_tokens_decoder[{id}] has no `content`"
                )));
            };
            let flag = |k: &str, default: bool| t.get(k).and_then(Value::as_bool).unwrap_or(default);
            let special = flag("special", false);
            let tok = AddedToken::from(content, special)
                .single_word(flag("single_word", false))
                .lstrip(flag("lstrip", false))
                .rstrip(flag("rstrip", false))
                .normalized(flag("normalized", !special));
            cfg.added.push((id, tok));
        }
    }
    Ok(cfg)
}

/// A special token in a config is either a string or an AddedToken object `{"content": ...}`.
fn token_content(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

/// Parses vocab.txt the way `transformers`' `load_vocab` does: one token per line, id = line index, the line
/// ending removed (a later duplicate wins).
pub(super) fn parse_vocab(text: &str) -> Result<HashMap<String, u32>> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop(); // the file's final newline ends the last line; it does not start an empty token
    }
    if lines.is_empty() {
        return Err(Error::Tokenizer("vocab.txt is empty: it must list one token per line".into()));
    }
    if lines.len() > u32::MAX as usize {
        return Err(Error::Tokenizer("vocab.txt has more than 2^32 lines".into()));
    }
    let mut vocab = HashMap::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        vocab.insert(line.strip_suffix('\r').unwrap_or(line).to_owned(), i as u32);
    }
    Ok(vocab)
}

/// Checks what the `tokenizers` crate (0.23.2) takes on trust when it reads a `TemplateProcessing` post-processor,
/// and panics on later, while encoding: every special token a template names must be defined in `special_tokens`
/// (it indexes the map), the `single` template cannot use the second sequence `$B` (there is none), and a special
/// token needs as many `tokens` as `ids` (an encoding's vectors must agree in length). Recurses into `Sequence`.
pub(super) fn check_post_processor(pp: &Value) -> Result<()> {
    let bad = |m: String| {
        Err(Error::Tokenizer(format!(
            "tokenizer.json: the post_processor {m}; re-export the tokenizer with `tokenizer.save_pretrained()`"
        )))
    };
    match pp["type"].as_str() {
        Some("Sequence") => {
            for p in pp["processors"].as_array().into_iter().flatten() {
                check_post_processor(p)?;
            }
        }
        Some("TemplateProcessing") => {
            let empty = serde_json::Map::new();
            let specials = pp["special_tokens"].as_object().unwrap_or(&empty);
            for (key, t) in specials {
                let n = |k: &str| t[k].as_array().map_or(0, Vec::len);
                if n("ids") != n("tokens") {
                    return bad(format!("special token `{key}` has {} ids but {} tokens", n("ids"), n("tokens")));
                }
            }
            for name in ["single", "pair"] {
                for piece in pp[name].as_array().into_iter().flatten() {
                    if let Some(id) = piece["SpecialToken"]["id"].as_str() {
                        if !specials.contains_key(id) {
                            return bad(format!("template `{name}` uses the special token `{id}`, which \
                                                `special_tokens` does not define"));
                        }
                    }
                    if name == "single" && piece["Sequence"]["id"].as_str() == Some("B") {
                        return bad("template `single` uses the second sequence `$B`".into());
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Special-token names found in a tokenizer.json itself, for when no tokenizer_config.json is given.
pub(super) fn special_names_from_json(raw: &Value) -> HashMap<&'static str, String> {
    let mut out = HashMap::new();
    let pp = &raw["post_processor"];
    match pp["type"].as_str() {
        Some("BertProcessing") | Some("RobertaProcessing") => {
            if let Some(s) = pp["cls"][0].as_str() {
                out.insert("cls_token", s.to_owned());
            }
            if let Some(s) = pp["sep"][0].as_str() {
                out.insert("sep_token", s.to_owned());
            }
        }
        Some("TemplateProcessing") => {
            // single = [CLS] $A [SEP]: the first special piece opens a sequence, the last one closes it.
            let specials: Vec<&str> = pp["single"]
                .as_array()
                .map(|a| a.iter().filter_map(|p| p["SpecialToken"]["id"].as_str()).collect())
                .unwrap_or_default();
            if let (Some(first), Some(last)) = (specials.first(), specials.last()) {
                if specials.len() >= 2 {
                    out.insert("cls_token", first.to_string());
                    out.insert("sep_token", last.to_string());
                }
            }
        }
        _ => {}
    }
    if let Some(s) = raw["model"]["unk_token"].as_str() {
        out.insert("unk_token", s.to_owned());
    }
    // Unigram names its unknown piece by index.
    if let Some(s) = raw["model"]["unk_id"].as_u64().and_then(|i| raw["model"]["vocab"][i as usize][0].as_str()) {
        out.insert("unk_token", s.to_owned());
    }
    if let Some(s) = raw["padding"]["pad_token"].as_str() {
        out.insert("pad_token", s.to_owned());
    }
    // Remaining names: the special added token that looks like one (e.g. `[MASK]`, `<mask>`, `[PAD]`).
    if let Some(added) = raw["added_tokens"].as_array() {
        for (key, word) in [("mask_token", "mask"), ("pad_token", "pad"), ("unk_token", "unk")] {
            if out.contains_key(key) {
                continue;
            }
            let found = added.iter().find_map(|t| {
                let c = t["content"].as_str()?;
                (t["special"].as_bool() == Some(true) && c.to_ascii_lowercase().contains(word)).then(|| c.to_owned())
            });
            if let Some(c) = found {
                out.insert(key, c);
            }
        }
    }
    out
}

pub(super) fn resolve_special(
    inner: &tokenizers::Tokenizer,
    name: impl Fn(&'static str) -> Option<String>,
    source: &str,
) -> Result<SpecialTokens> {
    let get = |key: &'static str| -> Option<SpecialToken> {
        let token = name(key)?;
        let id = inner.token_to_id(&token)?;
        Some(SpecialToken { token, id })
    };
    let required = |key: &'static str| -> Result<SpecialToken> {
        get(key).ok_or_else(|| match name(key) {
            Some(t) => Error::Tokenizer(format!(
                "{source}: the {key} `{t}` is not in the vocabulary; fix `{key}` in tokenizer_config.json"
            )),
            None => Error::Tokenizer(format!(
                "{source}: cannot tell which token is the {key}; add `\"{key}\": \"...\"` to tokenizer_config.json"
            )),
        })
    };
    Ok(SpecialTokens {
        cls: required("cls_token")?,
        sep: required("sep_token")?,
        pad: required("pad_token")?,
        unk: required("unk_token")?,
        mask: get("mask_token"),
    })
}
