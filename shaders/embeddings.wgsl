// embeddings.wgsl: y[b*T+t] = LayerNorm(word[ids] + position[t] + token_type[type_ids])·gamma + beta.
//
// Bindings (group 0):
//   0  p      uniform Params { rows = B*T, seq = T, hidden = H, eps }
//   1  ids    (2, B*T)  u32   row 0: token ids, row 1: token type ids (validated on the host)
//   2  word   (vocab, H)                      u32 words of a table in dtype WORD_DT
//   3  pos    (max_position_embeddings, H)    u32 words, dtype POS_DT; position ids are 0..T in every sequence
//   4  ttype  (type_vocab_size, H)            u32 words, dtype TYPE_DT
//   5  gamma  (H) f32
//   6  beta   (H) f32
//   7  y      (B*T, H) Act   f32, or f16 pairs in the module's f16 variant (lib/act.wgsl)
//
// The tables keep the dtype of the model file (all-MiniLM-L6-v2 in Q8_0: word Q8_0, position and token type f16):
// the dtype codes and layouts of lib/quant.wgsl (blocks of 32 along H, so H % 32 == 0 for Q8_0 and Q4_0). Each
// element is decoded where it is read, without `shader-f16`.
//
// One workgroup per token, normalised as layernorm.wgsl normalises a row (lib/layernorm_row.wgsl). With NORMALIZE
// false the kernel writes the sum itself, the LayerNorm's input that the backward needs (`embeddings_sum`; gamma
// and beta are then not read).

#include "lib/layernorm_row.wgsl"
#include "lib/quant.wgsl"

struct Params {
    rows: u32,
    seq: u32,
    hidden: u32,
    eps: f32,
}

override WG: u32 = 128u;
// Table dtypes: 0 f32, 1 f16, 2 Q8_0, 3 Q4_0.
override WORD_DT: u32 = 0u;
override POS_DT: u32 = 0u;
override TYPE_DT: u32 = 0u;
override NORMALIZE: bool = true;
// False for the rotary families: no position table (pos is then a placeholder, never read).
override POSITIONS: bool = true;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> word: array<u32>;
@group(0) @binding(3) var<storage, read> pos: array<u32>;
@group(0) @binding(4) var<storage, read> ttype: array<u32>;
@group(0) @binding(5) var<storage, read> gamma: array<f32>;
@group(0) @binding(6) var<storage, read> beta: array<f32>;
@group(0) @binding(7) var<storage, read_write> y: array<Act>;

// Element `i` of row `row` of each table (lib/quant.wgsl names the two words to load; storage arrays cannot be
// passed to functions, so each table has its reader).
fn word_at(row: u32, i: u32) -> f32 {
    let w = elem_words(WORD_DT, p.hidden, row, i);
    return elem_decode(WORD_DT, p.hidden, row, i, word[w.x], word[w.y]);
}

fn pos_at(row: u32, i: u32) -> f32 {
    let w = elem_words(POS_DT, p.hidden, row, i);
    return elem_decode(POS_DT, p.hidden, row, i, pos[w.x], pos[w.y]);
}

fn type_at(row: u32, i: u32) -> f32 {
    let w = elem_words(TYPE_DT, p.hidden, row, i);
    return elem_decode(TYPE_DT, p.hidden, row, i, ttype[w.x], ttype[w.y]);
}

// A row to normalise is a token: word row `id`, position `t`, type `ty`.
struct Token {
    id: u32,
    t: u32,
    ty: u32,
}
alias LnRow = Token;

// The summed embedding of element i of a token.
fn ln_value(tok: Token, i: u32) -> f32 {
    var pos_v = 0.0;
    if POSITIONS {
        pos_v = pos_at(tok.t, i);
    }
    return word_at(tok.id, i) + pos_v + type_at(tok.ty, i);
}

@compute @workgroup_size(WG)
fn embeddings(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    if row >= p.rows {
        return;
    }
    let tok = Token(ids[row], row % p.seq, ids[p.rows + row]);
    if NORMALIZE {
        layernorm_row(lid, tok, p.hidden, p.eps, row * p.hidden);
    } else {
        ln_store(lid, tok, p.hidden, row * p.hidden, 0.0, 1.0, false);
    }
}
