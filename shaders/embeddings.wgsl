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
//   7  y      (B*T, H) f32
//
// The tables keep the dtype of the model file (all-MiniLM-L6-v2 in Q8_0: word Q8_0, position and token type f16):
// dtype 0 f32, 1 f16, 2 Q8_0, 3 Q4_0, the layouts of matmul.wgsl (blocks of 32 along H, so H % 32 == 0 for Q8_0 and
// Q4_0). Each element is decoded where it is read, without `shader-f16`.
//
// One workgroup per token; same two-pass LayerNorm as layernorm.wgsl.

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

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> word: array<u32>;
@group(0) @binding(3) var<storage, read> pos: array<u32>;
@group(0) @binding(4) var<storage, read> ttype: array<u32>;
@group(0) @binding(5) var<storage, read> gamma: array<f32>;
@group(0) @binding(6) var<storage, read> beta: array<f32>;
@group(0) @binding(7) var<storage, read_write> y: array<f32>;

var<workgroup> red: array<f32, 256>;

// Element `i` of row `row` of an (rows, H) table in dtype `dt` lives in two words of its buffer: the one holding the
// block's f16 scale (x) and the one holding the value (y). Storage arrays cannot be passed to functions, so each
// table's reader (below) loads the two words these give and decodes them with `decode`.
fn elem_words(dt: u32, row: u32, i: u32) -> vec2<u32> {
    let h = p.hidden;
    switch dt {
        case 0u: { let e = row * h + i; return vec2<u32>(e, e); }
        case 1u: { let e = (row * h + i) >> 1u; return vec2<u32>(e, e); }
        case 2u: {
            let ob = (row * (h / 32u) + i / 32u) * 34u;
            return vec2<u32>(ob >> 2u, (ob + 2u + i % 32u) >> 2u);
        }
        default: {
            let ob = (row * (h / 32u) + i / 32u) * 18u;
            return vec2<u32>(ob >> 2u, (ob + 2u + i % 16u) >> 2u);
        }
    }
}

fn decode(dt: u32, row: u32, i: u32, ws: u32, wv: u32) -> f32 {
    let h = p.hidden;
    switch dt {
        case 0u: { return bitcast<f32>(wv); }
        case 1u: {
            let v = unpack2x16float(wv);
            return select(v.x, v.y, ((row * h + i) & 1u) != 0u);
        }
        case 2u: {
            let ob = (row * (h / 32u) + i / 32u) * 34u;
            let sv = unpack2x16float(ws);
            let d = select(sv.x, sv.y, (ob & 2u) != 0u);
            let byte = ob + 2u + i % 32u;
            let q = bitcast<i32>(wv << (24u - (byte & 3u) * 8u)) >> 24u;
            return f32(q) * d;
        }
        default: {
            let ob = (row * (h / 32u) + i / 32u) * 18u;
            let sv = unpack2x16float(ws);
            let d = select(sv.x, sv.y, (ob & 2u) != 0u);
            let j = i % 32u;
            let byte = ob + 2u + j % 16u;
            let q = (wv >> ((byte & 3u) * 8u + select(0u, 4u, j >= 16u))) & 0xFu;
            return (f32(q) - 8.0) * d;
        }
    }
}

fn word_at(row: u32, i: u32) -> f32 {
    let w = elem_words(WORD_DT, row, i);
    return decode(WORD_DT, row, i, word[w.x], word[w.y]);
}

fn pos_at(row: u32, i: u32) -> f32 {
    let w = elem_words(POS_DT, row, i);
    return decode(POS_DT, row, i, pos[w.x], pos[w.y]);
}

fn type_at(row: u32, i: u32) -> f32 {
    let w = elem_words(TYPE_DT, row, i);
    return decode(TYPE_DT, row, i, ttype[w.x], ttype[w.y]);
}

// The summed embedding of element i of a token (word row `id`, position `t`, type `ty`).
fn emb(id: u32, t: u32, ty: u32, i: u32) -> f32 {
    return word_at(id, i) + pos_at(t, i) + type_at(ty, i);
}

fn wg_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if lid < s {
            red[lid] = red[lid] + red[lid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(WG)
fn embeddings(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    if row >= p.rows {
        return;
    }
    let h = p.hidden;
    let id = ids[row];
    let ty = ids[p.rows + row];
    let t = row % p.seq;
    var s = 0.0;
    for (var i = lid; i < h; i = i + WG) {
        s = s + emb(id, t, ty, i);
    }
    let mean = wg_sum(lid, s) / f32(h);
    var sq = 0.0;
    for (var i = lid; i < h; i = i + WG) {
        let d = emb(id, t, ty, i) - mean;
        sq = sq + d * d;
    }
    let rstd = inverseSqrt(wg_sum(lid, sq) / f32(h) + p.eps);
    for (var i = lid; i < h; i = i + WG) {
        y[row * h + i] = (emb(id, t, ty, i) - mean) * rstd * gamma[i] + beta[i];
    }
}
