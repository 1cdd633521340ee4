// pool.wgsl: a reduction over the kept tokens of each sequence, by sentence-transformers' pooling modes.
//
// Bindings (group 0):
//   0  p     uniform Params { batch = B, seq = T, hidden = H, mode } (mode: src/backend/mod.rs TokenPool)
//   1  x     (B*T, H) Act  f32, or f16 pairs in the module's f16 variant (lib/act.wgsl)
//   2  mask  (B, T)   f32  1.0 real token, 0.0 padding
//   3  y     (B, H)   f32
//
// One invocation per output element, n = max(Σ_t w, 1e-9) as `torch.clamp(..., min=1e-9)` in sentence-transformers
// (a sequence with no kept token gives zeros), w = mask (mask·(t+1) for the weighted mean):
//   mode 0 (mean)          y = Σ_t w·x / n
//   mode 1 (max)           y = max over the kept t of x (-inf where none is kept)
//   mode 2 (mean_sqrt_len) y = Σ_t w·x / √n
//   mode 3 (weightedmean)  y = Σ_t w·x / n
// The CPU twin, src/backend/cpu/pool.rs, sums in the same order.

#include "lib/act.wgsl"

struct Params {
    batch: u32,
    seq: u32,
    hidden: u32,
    mode: u32,
}

override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<Act>;
@group(0) @binding(2) var<storage, read> mask: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn pool_tokens(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if i >= p.batch * p.hidden {
        return;
    }
    let b = i / p.hidden;
    let c = i % p.hidden;
    var s = 0.0;
    if p.mode == 1u {
        // -inf, as `masked_fill(-inf)` leaves a sequence with no kept token. Made from a uniform so that it is not
        // a constant expression: WGSL refuses an infinite constant (Tint: "value -inf cannot be represented").
        s = bitcast<f32>(0xff800000u | (p.mode & 0u));
    }
    var cnt = 0.0;
    for (var t = 0u; t < p.seq; t = t + 1u) {
        let m = mask[b * p.seq + t];
        if m == 0.0 {
            continue;
        }
        let j = (b * p.seq + t) * p.hidden + c;
        let v = act_value(x[act_word(j)], j);
        var w = m;
        if p.mode == 3u {
            w = m * f32(t + 1u);
        }
        cnt = cnt + w;
        if p.mode == 1u {
            s = max(s, v);
        } else {
            s = s + w * v;
        }
    }
    let n = max(cnt, 1e-9);
    if p.mode == 0u || p.mode == 3u {
        s = s / n;
    } else if p.mode == 2u {
        s = s / sqrt(n);
    }
    y[i] = s;
}
