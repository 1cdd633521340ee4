//! BERT's tensor names in GGUF: llama.cpp's for the encoder, Hugging Face's (canonical) for the task heads and for
//! the tensors llama.cpp has no name for (MPNet's relative bias, DeBERTa's relative table and its LayerNorm).

/// The Hugging Face name without the `bert.` prefix and with legacy `LayerNorm.gamma/beta` spelled
/// `weight/bias` (the form `convert_hf_to_gguf.py` normalizes to before mapping).
pub fn canonical_hf_name(name: &str) -> String {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    if let Some(stem) = name.strip_suffix(".gamma") {
        format!("{stem}.weight")
    } else if let Some(stem) = name.strip_suffix(".beta") {
        format!("{stem}.bias")
    } else {
        name.to_string()
    }
}

/// Encoder modules: Hugging Face path → llama.cpp path (within one layer for the `encoder.layer.N.` ones).
const EMBEDDING_NAMES: [(&str, &str); 4] = [
    ("embeddings.word_embeddings", "token_embd"),
    ("embeddings.position_embeddings", "position_embd"),
    ("embeddings.token_type_embeddings", "token_types"),
    ("embeddings.LayerNorm", "token_embd_norm"),
];
/// The BERT-side names of the rotary families' packed and gated projections ([`crate::weights::rotary`]) take
/// llama.cpp's `nomic-bert` names (`attn_qkv` `[q; k; v]` rows, `ffn_up` = `fc11`, `ffn_gate` = `fc12`); GTE's packed
/// `[up; gate]` rows, which llama.cpp has no tensor for, are bertgpu's `ffn_up_gate`. `ffn_up` reads back as
/// `intermediate.dense` except in a `nomic-bert` file ([`gguf_to_hf_name_in`]).
const LAYER_NAMES: [(&str, &str); 12] = [
    ("attention.self.query", "attn_q"),
    ("attention.self.key", "attn_k"),
    ("attention.self.value", "attn_v"),
    ("attention.self.qkv", "attn_qkv"),
    ("attention.output.dense", "attn_output"),
    ("attention.output.LayerNorm", "attn_output_norm"),
    ("intermediate.dense", "ffn_up"),
    ("intermediate.up", "ffn_up"),
    ("intermediate.gate", "ffn_gate"),
    ("intermediate.up_gate", "ffn_up_gate"),
    ("output.dense", "ffn_down"),
    ("output.LayerNorm", "layer_output_norm"),
];

/// A Hugging Face tensor name → its name in a BERT GGUF: llama.cpp's for the encoder, the (canonical) Hugging
/// Face name for everything else (task heads).
pub fn hf_to_gguf_name(hf: &str) -> String {
    let name = canonical_hf_name(hf);
    let Some((module, param)) = name.rsplit_once('.') else { return name };
    if let Some((_, g)) = EMBEDDING_NAMES.iter().find(|(h, _)| *h == module) {
        return format!("{g}.{param}");
    }
    if let Some(rest) = module.strip_prefix("encoder.layer.") {
        if let Some((n, sub)) = rest.split_once('.') {
            if n.parse::<usize>().is_ok() {
                if let Some((_, g)) = LAYER_NAMES.iter().find(|(h, _)| *h == sub) {
                    return format!("blk.{n}.{g}.{param}");
                }
            }
        }
    }
    name
}

/// A BERT GGUF tensor name → the Hugging Face name (inverse of [`hf_to_gguf_name`]); unknown names pass through.
pub fn gguf_to_hf_name(g: &str) -> String {
    gguf_to_hf_name_in("bert", g)
}

/// [`gguf_to_hf_name`] in a file of the GGUF architecture `arch` (`general.architecture`): NomicBERT's `ffn_up` is
/// the gated block's `intermediate.up` (its `fc11`), BERT's the plain `intermediate.dense`.
pub fn gguf_to_hf_name_in(arch: &str, g: &str) -> String {
    let hf = gguf_to_hf_name_bert(g);
    match hf.strip_suffix(".weight").or_else(|| hf.strip_suffix(".bias")) {
        Some(stem) if arch == super::families::ARCH_NOMIC && stem.ends_with(".intermediate.dense") => {
            hf.replacen(".intermediate.dense.", ".intermediate.up.", 1)
        }
        _ => hf,
    }
}

fn gguf_to_hf_name_bert(g: &str) -> String {
    let Some((module, param)) = g.rsplit_once('.') else { return g.to_string() };
    if let Some((h, _)) = EMBEDDING_NAMES.iter().find(|(_, n)| *n == module) {
        return format!("{h}.{param}");
    }
    if let Some(rest) = module.strip_prefix("blk.") {
        if let Some((n, sub)) = rest.split_once('.') {
            if n.parse::<usize>().is_ok() {
                if let Some((h, _)) = LAYER_NAMES.iter().find(|(_, l)| *l == sub) {
                    return format!("encoder.layer.{n}.{h}.{param}");
                }
            }
        }
    }
    g.to_string()
}

