// embeddings.wgsl: y[b*T+t] = LayerNorm(word[ids] + position[t] + token_type[type_ids])·gamma + beta.
//
// Bindings (group 0):
//   0  p      uniform Params { rows = B*T, seq = T, hidden = H, eps }
//   1  ids    (2, B*T)  u32   row 0: token ids, row 1: token type ids (validated on the host)
//   2  word   (vocab, H) f32
//   3  pos    (max_position_embeddings, H) f32   position ids are 0..T in every sequence (right padding)
//   4  ttype  (type_vocab_size, H) f32
//   5  gamma  (H) f32
//   6  beta   (H) f32
//   7  y      (B*T, H) f32
//
// One workgroup per token; same two-pass LayerNorm as layernorm.wgsl.

struct Params {
    rows: u32,
    seq: u32,
    hidden: u32,
    eps: f32,
}

override WG: u32 = 128u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> word: array<f32>;
@group(0) @binding(3) var<storage, read> pos: array<f32>;
@group(0) @binding(4) var<storage, read> ttype: array<f32>;
@group(0) @binding(5) var<storage, read> gamma: array<f32>;
@group(0) @binding(6) var<storage, read> beta: array<f32>;
@group(0) @binding(7) var<storage, read_write> y: array<f32>;

var<workgroup> red: array<f32, 256>;

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
    let wb = ids[row] * h;
    let tb = ids[p.rows + row] * h;
    let pb = (row % p.seq) * h;
    var s = 0.0;
    for (var i = lid; i < h; i = i + WG) {
        s = s + word[wb + i] + pos[pb + i] + ttype[tb + i];
    }
    let mean = wg_sum(lid, s) / f32(h);
    var sq = 0.0;
    for (var i = lid; i < h; i = i + WG) {
        let d = word[wb + i] + pos[pb + i] + ttype[tb + i] - mean;
        sq = sq + d * d;
    }
    let rstd = inverseSqrt(wg_sum(lid, sq) / f32(h) + p.eps);
    for (var i = lid; i < h; i = i + WG) {
        let v = word[wb + i] + pos[pb + i] + ttype[tb + i];
        y[row * h + i] = (v - mean) * rstd * gamma[i] + beta[i];
    }
}
