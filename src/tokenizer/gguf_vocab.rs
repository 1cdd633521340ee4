//! The vocabulary forms a BERT GGUF carries: llama.cpp's `tokenizer.ggml.*` arrays (WordPiece in its "phantom
//! space" form) ↔ a Hugging Face `tokenizer.json`, both ways.

use std::collections::HashSet;

use crate::{Error, Result};

/// llama.cpp token types (`gguf.TokenType`).
pub(crate) const TOKEN_NORMAL: i32 = 1;
pub(crate) const TOKEN_CONTROL: i32 = 3;
/// The word-start marker of llama.cpp's BERT vocabulary ("phantom space").
const PHANTOM: char = '\u{2581}';

/// WordPiece vocabulary → llama.cpp's form (`convert_hf_to_gguf.py` `BertModel.set_vocab`): special tokens as
/// they are, `##piece` → `piece`, a word start `w` → `▁w`.
pub fn to_phantom_vocab(vocab: &[String], special: &HashSet<usize>) -> (Vec<String>, Vec<i32>) {
    vocab
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if special.contains(&i) {
                (t.clone(), TOKEN_CONTROL)
            } else if let Some(p) = t.strip_prefix("##") {
                (p.to_string(), TOKEN_NORMAL)
            } else {
                (format!("{PHANTOM}{t}"), TOKEN_NORMAL)
            }
        })
        .unzip()
}

/// llama.cpp's BERT vocabulary → WordPiece (the inverse of [`to_phantom_vocab`]). Control tokens (or, without
/// token types, bracketed tokens like `[CLS]`) are kept as they are.
pub fn from_phantom_vocab(tokens: &[String], types: Option<&[i32]>) -> Vec<String> {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let control = match types {
                Some(ty) => ty.get(i) == Some(&TOKEN_CONTROL),
                None => BERT_SPECIALS.contains(&t.as_str()),
            };
            if control {
                t.clone()
            } else if let Some(w) = t.strip_prefix(PHANTOM) {
                w.to_string()
            } else {
                format!("##{t}")
            }
        })
        .collect()
}

/// BERT's special tokens, for vocabularies that do not mark them (`vocab.txt`, llama.cpp files without token types).
const BERT_SPECIALS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

pub(crate) fn standard_specials(vocab: &[String]) -> HashSet<usize> {
    vocab.iter().enumerate().filter(|(_, t)| BERT_SPECIALS.contains(&t.as_str())).map(|(i, _)| i).collect()
}

/// The model type of a `tokenizer.json` (`WordPiece`, `BPE`, `Unigram`, ...).
pub(crate) fn tokenizer_model_type(json: &serde_json::Value) -> Option<&str> {
    json.get("model").and_then(|m| m.get("type")).and_then(|t| t.as_str())
}

/// The vocabulary (by id, added tokens included) and special-token ids of a `tokenizer.json`: WordPiece (BERT,
/// DistilBERT), byte-level BPE (RoBERTa) or Unigram (XLM-R).
pub(crate) fn vocab_from_tokenizer_json(json: &serde_json::Value) -> Result<(Vec<String>, HashSet<usize>)> {
    let bad = |m: &str| {
        Error::Tokenizer(format!("tokenizer.json: {m}; bertgpu reads WordPiece, BPE and Unigram tokenizers"))
    };
    let model = json.get("model").ok_or_else(|| bad("no `model`"))?;
    let mut by_id: Vec<(usize, String)> = Vec::new();
    match tokenizer_model_type(json) {
        Some("WordPiece" | "BPE") => {
            let map = model.get("vocab").and_then(|v| v.as_object()).ok_or_else(|| bad("no `model.vocab` object"))?;
            for (tok, id) in map {
                let id = id.as_u64().ok_or_else(|| bad(&format!("token `{tok}` has id {id}, not an integer")))?;
                by_id.push((id as usize, tok.clone()));
            }
        }
        Some("Unigram") => {
            let list = model.get("vocab").and_then(|v| v.as_array()).ok_or_else(|| bad("no `model.vocab` list"))?;
            for (id, piece) in list.iter().enumerate() {
                let tok = piece.get(0).and_then(|t| t.as_str()).ok_or_else(|| bad("a Unigram piece is not [token, score]"))?;
                by_id.push((id, tok.to_string()));
            }
        }
        Some(other) => return Err(bad(&format!("the model is {other}"))),
        None => return Err(bad("the model has no `type`")),
    }
    let mut special = HashSet::new();
    for t in json.get("added_tokens").and_then(|a| a.as_array()).into_iter().flatten() {
        let (Some(id), Some(content)) = (t.get("id").and_then(|i| i.as_u64()), t.get("content").and_then(|c| c.as_str()))
        else {
            continue;
        };
        let id = id as usize;
        // An added token may repeat a model token (same id) or extend the vocabulary past it (RoBERTa's `<mask>`).
        match by_id.iter().find(|(i, _)| *i == id) {
            Some((_, tok)) if tok != content => {
                return Err(bad(&format!("added token `{content}` has id {id}, which the model gives to `{tok}`")))
            }
            Some(_) => {}
            None => by_id.push((id, content.to_string())),
        }
        if t.get("special").and_then(|s| s.as_bool()) == Some(true) {
            special.insert(id);
        }
    }
    let n = by_id.len();
    let mut vocab = vec![None; n];
    for (id, tok) in by_id {
        let slot = vocab
            .get_mut(id)
            .ok_or_else(|| bad(&format!("token `{tok}` has id {id}, outside 0..{n}: ids must be dense")))?;
        if slot.is_some() {
            return Err(bad(&format!("two tokens share the id {id}")));
        }
        *slot = Some(tok);
    }
    let vocab = vocab.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| bad("two tokens share an id"))?;
    Ok((vocab, special))
}

/// A BERT WordPiece `tokenizer.json` equivalent to `transformers`' `BertTokenizerFast` for this vocabulary, for
/// GGUF files that carry only `tokenizer.ggml.tokens` (llama.cpp's). Lower-casing is inferred from the vocabulary:
/// an uncased vocabulary has no ASCII capitals outside its special tokens (it may hold symbols such as `ℝ`, which
/// Unicode counts as upper case), a cased one has thousands.
pub fn wordpiece_tokenizer_json(vocab: &[String], special: &HashSet<usize>) -> Result<String> {
    let id_of = |t: &str| vocab.iter().position(|v| v == t);
    let need = |t: &str| {
        id_of(t).ok_or_else(|| Error::Tokenizer(format!("the GGUF vocabulary has no `{t}` token; it is not a BERT vocabulary")))
    };
    let (cls, sep) = (need("[CLS]")?, need("[SEP]")?);
    need("[UNK]")?;
    let lowercase = !vocab
        .iter()
        .enumerate()
        .any(|(i, t)| !special.contains(&i) && !(t.starts_with('[') && t.ends_with(']')) && t.chars().any(|c| c.is_ascii_uppercase()));
    let added: Vec<serde_json::Value> = vocab
        .iter()
        .enumerate()
        .filter(|(i, _)| special.contains(i))
        .map(|(i, t)| {
            serde_json::json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                               "normalized": false, "special": true})
        })
        .collect();
    let vocab_map: serde_json::Map<String, serde_json::Value> =
        vocab.iter().enumerate().map(|(i, t)| (t.clone(), serde_json::Value::from(i))).collect();
    let tok = |id: &str, type_id: u32| serde_json::json!({"SpecialToken": {"id": id, "type_id": type_id}});
    let seq = |id: &str, type_id: u32| serde_json::json!({"Sequence": {"id": id, "type_id": type_id}});
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": lowercase},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [tok("[CLS]", 0), seq("A", 0), tok("[SEP]", 0)],
            "pair": [tok("[CLS]", 0), seq("A", 0), tok("[SEP]", 0), seq("B", 1), tok("[SEP]", 1)],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]}
            }
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab_map}
    });
    Ok(json.to_string())
}
