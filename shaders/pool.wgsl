// pool.wgsl: mean over the real tokens of each sequence (sentence-transformers' mean pooling).
//
// Bindings (group 0):
//   0  p     uniform Params { batch = B, seq = T, hidden = H }
//   1  x     (B*T, H) Act  f32, or f16 pairs in the module's f16 variant (lib/act.wgsl)
//   2  mask  (B, T)   f32  1.0 real token, 0.0 padding
//   3  y     (B, H)   f32
//
// One invocation per output element. y = Σ_t mask·x / max(Σ_t mask, 1e-9): a sequence with no real token gives
// zeros, as `torch.clamp(mask.sum(1), min=1e-9)` does in sentence-transformers.

#include "lib/act.wgsl"

struct Params {
    batch: u32,
    seq: u32,
    hidden: u32,
    _pad: u32,
}

override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<Act>;
@group(0) @binding(2) var<storage, read> mask: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn mean_pool(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if i >= p.batch * p.hidden {
        return;
    }
    let b = i / p.hidden;
    let c = i % p.hidden;
    var s = 0.0;
    var cnt = 0.0;
    for (var t = 0u; t < p.seq; t = t + 1u) {
        let m = mask[b * p.seq + t];
        let j = (b * p.seq + t) * p.hidden + c;
        s = s + m * act_value(x[act_word(j)], j);
        cnt = cnt + m;
    }
    y[i] = s / max(cnt, 1e-9);
}
