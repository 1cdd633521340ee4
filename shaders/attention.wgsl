// attention.wgsl: fused multi-head self-attention, context = softmax(q·kᵀ/√d + maskbias)·v.
//
// Bindings (group 0):
//   0  p     uniform Params { batch = B, seq = T, heads, head_dim = d, hidden = H = heads·d, scale = 1/√d }
//   1  qkv   (B*T, 3H) f32   [q | k | v], head h at columns h*d..(h+1)*d of each third
//   2  mask  (B, T)    f32   1.0 real token, 0.0 padding (padded keys get -inf)
//   3  out   (B*T, H)  f32
//
// One workgroup per (block of QB queries, head, sequence): grid (ceil(T/QB), heads, B). Keys are processed in
// chunks of CH; a chunk's QB×CH scores live in workgroup memory only (never a T×T matrix in global memory). For
// T ≤ CH there is one chunk and this is the plain softmax; for longer sequences the chunks are combined with the
// online softmax (Milakov & Gimelshein 2018; FlashAttention): running max m, running sum l, and the output
// accumulator rescaled by exp(m_old − m_new) whenever the max grows. Everything is f32.
// A query whose keys are all padding gets l = 0 and yields zeros.

struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
    hidden: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

// Invocations per workgroup: a power of two, 32 ≤ WG ≤ 256 (the host clamps it to the adapter's limit).
override WG: u32 = 128u;
const QB: u32 = 4u;        // queries per workgroup: each key row loaded is reused QB times
const CH: u32 = 512u;      // keys per chunk kept in workgroup memory
const DMAX: u32 = 128u;    // largest head_dim supported (host checks)
const MAXWG: u32 = 256u;
const ROUT: u32 = 16u;     // QB*DMAX / 32: outputs one invocation may own at the smallest WG
const NEG: f32 = -1.0e30;  // stands for -inf; exp(NEG - m) underflows to exactly 0

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> mask: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

var<workgroup> q_s: array<f32, 512>;    // (QB, DMAX) queries of the block, pre-scaled by 1/√d
var<workgroup> s_s: array<f32, 2048>;   // (QB, CH) scores, then probabilities, of one key chunk
var<workgroup> red: array<f32, 1024>;   // (QB, MAXWG) partial maxima / sums
var<workgroup> m_s: array<f32, 4>;      // (QB) running max
var<workgroup> l_s: array<f32, 4>;      // (QB) running sum of exp
var<workgroup> a_s: array<f32, 4>;      // (QB) rescale factor of this chunk

// Tree reduction of red[qi*MAXWG + 0..WG] for the QB queries at once; `is_max` picks max or sum.
fn reduce(lid: u32, is_max: bool) {
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if lid < s {
            for (var qi = 0u; qi < QB; qi = qi + 1u) {
                let a = red[qi * MAXWG + lid];
                let b = red[qi * MAXWG + lid + s];
                red[qi * MAXWG + lid] = select(a + b, max(a, b), is_max);
            }
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(WG)
fn attention(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let T = p.seq;
    let d = p.head_dim;
    let H = p.hidden;
    let stride = 3u * H;
    let b = wid.z;
    let h = wid.y;
    let q0 = wid.x * QB;
    let row0 = b * T;
    let nout = QB * d;
    let nr = (nout + WG - 1u) / WG;  // outputs this invocation owns: ≤ ROUT

    for (var i = lid; i < nout; i = i + WG) {
        let qi = i / d;
        let c = i % d;
        let t = min(q0 + qi, T - 1u);
        q_s[qi * DMAX + c] = qkv[(row0 + t) * stride + h * d + c] * p.scale;
    }
    if lid < QB {
        m_s[lid] = NEG;
        l_s[lid] = 0.0;
    }
    var o: array<f32, ROUT>;
    for (var r = 0u; r < ROUT; r = r + 1u) {
        o[r] = 0.0;
    }
    workgroupBarrier();

    for (var c0 = 0u; c0 < T; c0 = c0 + CH) {
        let n = min(CH, T - c0);
        // Scores of this chunk, and each invocation's partial max per query.
        var pm = vec4<f32>(NEG);
        for (var j = lid; j < n; j = j + WG) {
            let key = c0 + j;
            let kb = (row0 + key) * stride + H + h * d;
            var s = vec4<f32>(0.0);
            for (var c = 0u; c < d; c = c + 1u) {
                let kv = qkv[kb + c];
                s = s + kv * vec4<f32>(q_s[c], q_s[DMAX + c], q_s[2u * DMAX + c], q_s[3u * DMAX + c]);
            }
            if mask[row0 + key] < 0.5 {
                s = vec4<f32>(NEG);
            }
            s_s[j] = s.x;
            s_s[CH + j] = s.y;
            s_s[2u * CH + j] = s.z;
            s_s[3u * CH + j] = s.w;
            pm = max(pm, s);
        }
        for (var qi = 0u; qi < QB; qi = qi + 1u) {
            red[qi * MAXWG + lid] = pm[qi];
        }
        reduce(lid, true);
        if lid < QB {
            let m_old = m_s[lid];
            let m_new = max(m_old, red[lid * MAXWG]);
            a_s[lid] = exp(m_old - m_new);
            m_s[lid] = m_new;
        }
        workgroupBarrier();
        // Probabilities (unnormalised) and partial sums. Masked keys (NEG) become exactly 0, also when every key
        // so far is masked (m = NEG): the test on s, not on exp, keeps exp(NEG − NEG) = 1 out.
        var ps = vec4<f32>(0.0);
        for (var j = lid; j < n; j = j + WG) {
            for (var qi = 0u; qi < QB; qi = qi + 1u) {
                let s = s_s[qi * CH + j];
                let e = select(exp(s - m_s[qi]), 0.0, s <= 0.5 * NEG);
                s_s[qi * CH + j] = e;
                ps[qi] = ps[qi] + e;
            }
        }
        for (var qi = 0u; qi < QB; qi = qi + 1u) {
            red[qi * MAXWG + lid] = ps[qi];
        }
        reduce(lid, false);
        // o = o·alpha + P·V for the outputs (query qi, column c) this invocation owns.
        for (var r = 0u; r < nr; r = r + 1u) {
            let i = lid + r * WG;
            if i < nout {
                let qi = i / d;
                let c = i % d;
                let vb = row0 * stride + 2u * H + h * d + c;
                var acc = 0.0;
                for (var j = 0u; j < n; j = j + 1u) {
                    acc = acc + s_s[qi * CH + j] * qkv[vb + (c0 + j) * stride];
                }
                o[r] = o[r] * a_s[qi] + acc;
            }
        }
        workgroupBarrier();
        if lid < QB {
            l_s[lid] = l_s[lid] * a_s[lid] + red[lid * MAXWG];
        }
        workgroupBarrier();
    }

    for (var r = 0u; r < nr; r = r + 1u) {
        let i = lid + r * WG;
        if i < nout {
            let qi = i / d;
            let c = i % d;
            let t = q0 + qi;
            if t < T {
                let l = l_s[qi];
                out[(row0 + t) * H + h * d + c] = select(0.0, o[r] / l, l > 0.0);
            }
        }
    }
}
