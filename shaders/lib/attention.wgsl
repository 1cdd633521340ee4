// lib/attention.wgsl: fused multi-head self-attention, context = softmax(q·kᵀ/√d + maskbias)·v, written once for
// attention.wgsl (one f32 per step) and attention_vec4.wgsl (a vec4<f32> per step: a quarter of the loop
// iterations and loads, for head_dim and hidden multiples of 4, i.e. every BERT).
//
// Bindings (group 0):
//   0  p     uniform Params { batch = B, seq = T, heads, head_dim = d, hidden = H = heads·d, scale = 1/√d }
//   1  qkv   (B*T, 3H) f32 (as VS)  [q | k | v], head h at columns h*d..(h+1)*d of each third
//   2  mask  (B, T)    f32          1.0 real token, 0.0 padding (padded keys get -inf); below −0.5 padding whose
//                                   query sees every key alike (`backend::UNIFORM_FILLED`, `UNIFORM_ADDED`)
//   3  out   (B*T, H)  f32 (as VS)
// (qkv and out are f16 pairs in the vec4 kernels' f16 variants: lib/attention_lanes4.wgsl reads them through
// lib/act.wgsl.)
//
// One invocation per query, one workgroup per (block of WG queries, head, sequence): grid (ceil(T/WG), heads, B).
// Each invocation streams over the keys once with the online softmax (Milakov & Gimelshein 2018, as in
// FlashAttention): running max m, running sum l, and the output accumulator rescaled by exp(m_old − m_new) when the
// max grows. No score matrix exists anywhere (not even per block in workgroup memory), any T works, and there are
// no barriers. All invocations of a workgroup read the same key and value row at the same time, so those loads are
// broadcasts. Everything is f32. A query whose keys are all padding gets l = 0 and yields zeros.
// (A variant holding a block of 4 queries' scores in workgroup memory, with tree reductions, was about 3× slower
// on lavapipe: BENCHMARKS.md.)
//
// The kernel that includes this file names the element each step reads and the head's length in them:
//   alias V = f32 or vec4<f32>;  const LANES: u32 = 1u or 4u (values in a V);  fn hsum(v: V) -> f32 (sum of lanes)
//   alias VS: how a V is stored;  fn v_in(s: VS) -> V;  fn v_out(v: V) -> VS
//   const VMAX: u32 (V in the largest head it serves);  fn head_v() -> u32 (V in this head)
// and calls attend(gid, wid) from its entry point. Results differ between the kernels only in the order of the
// four partial sums of each dot product. With head_v() a constant (attention_fixed.wgsl) the
// loops over the head have a fixed trip count: compilers unroll them and keep q and the accumulator in registers,
// where a run-time head_dim leaves those arrays in (slower) memory on GPUs such as NVIDIA's.
//
// With the override BIAS = 1 (`Backend::attention_biased`), each score gets its (query, key) offset's relative bias
// (lib/attention_bias.wgsl, binding 4) before the softmax.
//
// With the override DISENTANGLED = 1 (`Backend::attention_disentangled`: DeBERTa), each score also gets
// q_i·posK_r + k_j·posQ_r (lib/attention_disentangled.wgsl, bindings 4 and 5), in the same pass over the keys.
//
// With the override DROPOUT = 1 (training: `Backend::attention_dropout`), each probability P_ij is multiplied by
// the mask factor of element ((b·heads + h)·T + i)·T + j (0 or drop_scale) before it weighs v_j; the softmax's sum
// is over every real key as without dropout. DROPOUT = 0 (the default, every inference pipeline) compiles that
// branch away.

#include "lib/attention_params.wgsl"
#include "lib/attention_bias.wgsl"
#include "lib/attention_disentangled.wgsl"

// Queries per workgroup (the host clamps it to the adapter's invocation limit).
override WG: u32 = 64u;
const NEG: f32 = -1.0e30;  // stands for -inf before the first real key

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<VS>;
@group(0) @binding(2) var<storage, read> mask: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<VS>;

fn attend(gid: vec3<u32>, wid: vec3<u32>) {
    let T = p.seq;
    let dv = head_v();            // V per head
    let Hv = p.hidden / LANES;    // V per row of q, k or v
    let stride = 3u * Hv;
    let b = wid.z;
    let h = wid.y;
    let t = gid.x;
    // Lanes past the end compute a copy of the last query (same loads, no divergence) and do not store.
    let qrow = b * T + min(t, T - 1u);
    var q: array<V, VMAX>;    // (d) the query, pre-scaled by 1/√d
    var acc: array<V, VMAX>;  // (d) Σ exp(s_j − m)·v_j
    for (var c = 0u; c < dv; c = c + 1u) {
        q[c] = v_in(qkv[qrow * stride + h * dv + c]) * p.scale;
        acc[c] = V(0.0);
    }
    var m = NEG;
    var l = 0.0;
    let brow = bias_row(h, min(t, T - 1u));
    for (var j = 0u; j < T; j = j + 1u) {
        if mask[b * T + j] < 0.5 {
            continue;
        }
        let kb = (b * T + j) * stride + Hv + h * dv;
        var sv = V(0.0);
        for (var c = 0u; c < dv; c = c + 1u) {
            sv = sv + q[c] * v_in(qkv[kb + c]);
        }
        var s = hsum(sv) + score_bias(brow, j);
        if DISENTANGLED != 0u {
            // c2p = q·posK (q pre-scaled) and p2c = k·posQ, scaled here: one more pass over the head.
            let pb = disentangled_base(h, min(t, T - 1u), j);
            var c2p = V(0.0);
            var p2c = V(0.0);
            for (var c = 0u; c < dv; c = c + 1u) {
                c2p = c2p + q[c] * disentangled_pos[pb + Hv + c];
                p2c = p2c + v_in(qkv[kb + c]) * disentangled_pos[pb + c];
            }
            s = s + hsum(c2p) + hsum(p2c) * p.scale;
        }
        if s > m {
            // exp(NEG − s) underflows to 0 on the first real key: nothing accumulated yet is kept.
            let a = exp(m - s);
            l = l * a;
            for (var c = 0u; c < dv; c = c + 1u) {
                acc[c] = acc[c] * a;
            }
            m = s;
        }
        let e = exp(s - m);
        l = l + e;
        // Dropout (DROPOUT = 1 only): the probability e/l is dropped or scaled where it meets v; l keeps every key.
        var w = e;
        if DROPOUT != 0u {
            let i = ((b * p.heads + h) * T + t) * T + j;
            w = select(0.0, e * p.drop_scale, dropout_keeps(p.drop_key, p.drop_threshold, i));
        }
        let vb = kb + Hv;
        for (var c = 0u; c < dv; c = c + 1u) {
            acc[c] = acc[c] + w * v_in(qkv[vb + c]);
        }
    }
    // A query the mask marks as masked whole (below −0.5: `backend::UNIFORM_FILLED`, `UNIFORM_ADDED`; as a key it is
    // padding): every key alike, padding included, its context the mean of every value (dropped as above).
    if mask[qrow] < -0.5 {
        l = f32(T);
        for (var c = 0u; c < dv; c = c + 1u) {
            acc[c] = V(0.0);
        }
        for (var j = 0u; j < T; j = j + 1u) {
            var w = 1.0;
            if DROPOUT != 0u {
                w = select(0.0, p.drop_scale, dropout_keeps(p.drop_key, p.drop_threshold, ((b * p.heads + h) * T + t) * T + j));
            }
            let vb = (b * T + j) * stride + 2u * Hv + h * dv;
            for (var c = 0u; c < dv; c = c + 1u) {
                acc[c] = acc[c] + w * v_in(qkv[vb + c]);
            }
        }
    }
    if t < T {
        let ob = (b * T + t) * Hv + h * dv;
        for (var c = 0u; c < dv; c = c + 1u) {
            out[ob + c] = v_out(select(V(0.0), acc[c] / l, l > 0.0));
        }
    }
}
