// attention_vec4.wgsl: attention.wgsl with every head_dim loop on vec4<f32> (q, k, v, the accumulator, the output),
// for head_dim and hidden multiples of 4 (every BERT: d = 32, 64). Same algorithm, same bindings, same results up to
// the order of the four partial sums in each dot product; a quarter of the loop iterations and loads. The host
// picks it when the shapes allow (src/backend/gpu/mod.rs, `attention`); attention.wgsl serves the rest.
//
// Bindings (group 0):
//   0  p     uniform Params { batch = B, seq = T, heads, head_dim = d, hidden = H = heads·d, scale = 1/√d }
//   1  qkv   (B*T, 3H) f32 as vec4s
//   2  mask  (B, T)    f32   1.0 real token, 0.0 padding (padded keys get -inf)
//   3  out   (B*T, H)  f32 as vec4s

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

override WG: u32 = 64u;
const DMAX4: u32 = 32u;    // largest head_dim / 4 supported (head_dim ≤ 128, as attention.wgsl)
const NEG: f32 = -1.0e30;  // stands for -inf before the first real key

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> mask: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn attention_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let T = p.seq;
    let d4 = p.head_dim / 4u;
    let H4 = p.hidden / 4u;
    let stride4 = 3u * H4;
    let b = wid.z;
    let h = wid.y;
    let t = gid.x;
    // Lanes past the end compute a copy of the last query (same loads, no divergence) and do not store.
    let qrow = b * T + min(t, T - 1u);
    var q: array<vec4<f32>, DMAX4>;    // the query, pre-scaled by 1/√d
    var acc: array<vec4<f32>, DMAX4>;  // Σ exp(s_j − m)·v_j
    for (var c = 0u; c < d4; c = c + 1u) {
        q[c] = qkv[qrow * stride4 + h * d4 + c] * p.scale;
        acc[c] = vec4<f32>(0.0);
    }
    var m = NEG;
    var l = 0.0;
    for (var j = 0u; j < T; j = j + 1u) {
        if mask[b * T + j] < 0.5 {
            continue;
        }
        let kb = (b * T + j) * stride4 + H4 + h * d4;
        var sv = vec4<f32>(0.0);
        for (var c = 0u; c < d4; c = c + 1u) {
            sv = sv + q[c] * qkv[kb + c];
        }
        let s = (sv.x + sv.y) + (sv.z + sv.w);
        if s > m {
            // exp(NEG − s) underflows to 0 on the first real key: nothing accumulated yet is kept.
            let a = exp(m - s);
            l = l * a;
            for (var c = 0u; c < d4; c = c + 1u) {
                acc[c] = acc[c] * a;
            }
            m = s;
        }
        let e = exp(s - m);
        l = l + e;
        let vb = kb + H4;
        for (var c = 0u; c < d4; c = c + 1u) {
            acc[c] = acc[c] + e * qkv[vb + c];
        }
    }
    if t < T {
        let ob = (b * T + t) * H4 + h * d4;
        for (var c = 0u; c < d4; c = c + 1u) {
            out[ob + c] = select(vec4<f32>(0.0), acc[c] / l, l > 0.0);
        }
    }
}
