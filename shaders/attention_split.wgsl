// attention_split.wgsl: the fused attention of lib/attention.wgsl (same bindings, uniform and result, the same
// online softmax, dropout included) with each query split over head_dim/4 invocations, for real GPUs. There, one
// invocation per query leaves a layer's attention B·heads·T invocations, each walking every key in a serial chain:
// too few to hide the latency of its loads (an H100 ran BERT-base's attention at a third of the encoder's time,
// BENCHMARKS.md). Here a query's dv = head_dim/4 invocations ("lanes") each own one vec4 of the head, and the
// workgroup walks the keys a tile of dv keys at a time through workgroup memory:
//   1. the tile's keys and values are staged, each read from storage once per workgroup, not once per query;
//   2. lane c scores key c of the tile against its query (all of q, from workgroup memory);
//   3. every lane gets its query's dv scores, updates the running max and sum once per tile, and adds the tile's
//      weighted values to its own vec4 of the output (lib/split_tile.wgsl: the scores through workgroup memory,
//      three barriers a tile; lib/split_tile_subgroup.wgsl: through subgroup shuffles, two).
// No arrays per invocation (a query's state is m, l and one vec4), so nothing spills.
// head_dim a multiple of 4 and at most 4·LMAX (the host checks; other heads run attention_vec4.wgsl); WG ≥ dv.
// Invocations past the workgroup's last whole query (WG not a multiple of dv) only help stage.
//
// With BIAS = 1, each score gets its relative bias (lib/attention_bias.wgsl) as lane c computes it; with
// DISENTANGLED = 1 (DeBERTa), its c2p and p2c terms (lib/attention_disentangled.wgsl: the same gathers of the
// projected relative rows and the same sums as lib/attention.wgsl), lane c reading the rows of its own key's offset.
// Grid: (ceil(T / (WG / dv)), heads, B); `WG` invocations per workgroup (the tuning's attention width).

#include "lib/act.wgsl"
#include "lib/attention_params.wgsl"
#include "lib/attention_bias.wgsl"
#include "lib/attention_disentangled.wgsl"

override WG: u32 = 256u;
const NEG: f32 = -1.0e30;  // stands for -inf before the first real key
const LMAX: u32 = 16u;     // largest head in vec4 (head_dim 64)
const WG_MAX: u32 = 256u;  // largest workgroup (the host clamps the width to it)

// lib/attention_disentangled.wgsl's contract: the projected relative table read a vec4 at a time (f32: the host
// widens an f16 one).
alias V = vec4<f32>;
const LANES: u32 = 4u;
fn head_v() -> u32 {
    return p.head_dim / 4u;
}

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

@group(0) @binding(0) var<uniform> p: Params;
// qkv and out as lib/act.wgsl stores them: f32, or f16 pairs in this module's f16 variant.
@group(0) @binding(1) var<storage, read> qkv: array<Act4>;
@group(0) @binding(2) var<storage, read> mask: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<Act4>;

var<workgroup> qs: array<vec4<f32>, WG_MAX>;               // queries, pre-scaled: qs[qi · dv + c]
var<workgroup> ks: array<vec4<f32>, LMAX * (LMAX + 1u)>;   // keys of the tile: ks[j · (dv + 1) + c] (padded rows:
                                                           // lanes scoring different keys hit different banks)
var<workgroup> vs: array<vec4<f32>, LMAX * LMAX>;          // values of the tile: vs[j · dv + c]
var<workgroup> km: array<f32, LMAX>;                       // the tile's keys: 1.0 real, 0.0 padding or past T

// The running softmax of this invocation's query, which each of its lanes keeps: the largest score so far (m), the
// sum of exp(score − m) over its keys (l), and the lane's vec4 of the weighted sum of values (acc).
var<private> m: f32;
var<private> l: f32;
var<private> acc: vec4<f32>;
// This invocation's head and query (clamped to T − 1): where its relative bias or disentangled rows are.
var<private> head: u32;
var<private> query: u32;

// The score of this invocation's query (qs row qi) and the tile's key c, key j (< T) of the sequence: q·k (q
// pre-scaled) plus the relative bias (BIAS = 1) or DeBERTa's c2p + p2c (DISENTANGLED = 1), summed as
// lib/attention.wgsl sums them. The terms' dot products share q·k's pass over the head (each of the three sums in
// the same order as there), so q and k are read once.
fn tile_score(qi: u32, c: u32, dv: u32, j: u32) -> f32 {
    var pb = 0u;
    if DISENTANGLED != 0u {
        pb = disentangled_base(head, query, j);
    }
    let Hv = p.hidden / 4u;
    var sv = vec4<f32>(0.0);
    var c2p = vec4<f32>(0.0);  // q·posK (q pre-scaled)
    var p2c = vec4<f32>(0.0);  // k·posQ, scaled below
    for (var cc = 0u; cc < dv; cc = cc + 1u) {
        let q = qs[qi * dv + cc];
        let k = ks[c * (dv + 1u) + cc];
        sv = sv + q * k;
        if DISENTANGLED != 0u {
            c2p = c2p + q * disentangled_pos[pb + Hv + cc];
            p2c = p2c + k * disentangled_pos[pb + cc];
        }
    }
    var s = hsum(sv) + score_bias(bias_row(head, query), j);
    if DISENTANGLED != 0u {
        s = s + hsum(c2p) + hsum(p2c) * p.scale;
    }
    return s;
}

// `split_tile`: lane c scores key c of the tile, and the query's lanes fold the tile into (m, l, acc). Through
// workgroup memory here; the `_sg` module swaps in lib/split_tile_subgroup.wgsl (src/backend/gpu/params.rs).
#include "lib/split_tile.wgsl"

@compute @workgroup_size(WG)
fn attention_split(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let T = p.seq;
    let dv = p.head_dim / 4u;
    let Hv = p.hidden / 4u;
    let stride = 3u * Hv;
    let b = wid.z;
    let h = wid.y;
    let qw = WG / dv;       // queries per workgroup
    let qi = t / dv;        // this invocation's query in the workgroup
    let c = t % dv;         // its lane: vec4 c of the head, key c of each tile
    let owns = qi < qw;
    let i = wid.x * qw + qi;
    if owns {
        // Queries past T compute a copy of the last one and do not store.
        let qrow = b * T + min(i, T - 1u);
        qs[qi * dv + c] = act4(qkv[qrow * stride + h * dv + c]) * p.scale;
    }
    m = NEG;
    l = 0.0;
    acc = vec4<f32>(0.0);
    let drop_row = ((b * p.heads + h) * T + i) * T;  // the dropout index of (query i, key 0)
    head = h;
    query = min(i, T - 1u);
    let tiles = (T + dv - 1u) / dv;
    for (var tile = 0u; tile < tiles; tile = tile + 1u) {
        let j0 = tile * dv;
        // The last tile's reads are done (and, before the first, the queries are written).
        workgroupBarrier();
        for (var e = t; e < dv * dv; e = e + WG) {
            let j = e / dv;
            let cc = e % dv;
            let kb = (b * T + min(j0 + j, T - 1u)) * stride + Hv + h * dv + cc;
            ks[j * (dv + 1u) + cc] = act4(qkv[kb]);
            vs[j * dv + cc] = act4(qkv[kb + Hv]);
        }
        if t < dv {
            km[t] = select(0.0, mask[b * T + min(j0 + t, T - 1u)], j0 + t < T);
        }
        workgroupBarrier();
        split_tile(qi, c, dv, owns, j0, drop_row);
    }
    // A query the mask marks as masked whole (lib/attention.wgsl): the mean of every value, each lane its vec4.
    if owns && i < T && mask[b * T + i] < -0.5 {
        l = f32(T);
        acc = vec4<f32>(0.0);
        for (var j = 0u; j < T; j = j + 1u) {
            var w = 1.0;
            if DROPOUT != 0u {
                w = select(0.0, p.drop_scale, dropout_keeps(p.drop_key, p.drop_threshold, drop_row + j));
            }
            acc = acc + w * act4(qkv[(b * T + j) * stride + 2u * Hv + h * dv + c]);
        }
    }
    if owns && i < T {
        out[(b * T + i) * Hv + h * dv + c] = pack4(select(vec4<f32>(0.0), acc / l, l > 0.0));
    }
}
