// weight_grad.wgsl: a linear's weight read in its stored dtype outside the forward's matmul (LoRA over a quantized
// base keeps the frozen weights quantized on the device):
//   matmul_w  y = dy · W: the input gradient through a frozen linear. dy (M, N) f32, W (N, K) as Hugging Face stores
//             it (out, in), y (M, K) f32. 4 rows × 4 columns of y per invocation, N walked in order (f32 sums).
//   dequant   y = W in f32 (N, K): a weight read back (its values exactly as the kernels decode them).
// W is the raw words of dtype WDT (0 f32, 1 f16, 2 Q8_0, 3 Q4_0; lib/quant.wgsl's layouts, decoded by
// lib/packed_weight.wgsl as matmul_packed.wgsl decodes them); the host guarantees K % 4 == 0 (K % 32 == 0 for Q8_0
// and Q4_0) and pads the buffer with a spare word (upload_weight), so each group of 4 values along K is decoded from
// one or two words.
//
// Bindings (group 0): 0 p uniform Params { m, n, k } (dequant: n rows of W, k); 1 dy (M, N) f32 (matmul_w);
// 2 wq u32 words; 3 y f32.

#include "lib/packed_weight.wgsl"

struct Params {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

override WDT: u32 = 0u;
override WG_X: u32 = 8u;
override WG_Y: u32 = 8u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read> wq: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

// W[r, k0 .. k0 + 3], k0 a multiple of 4, decoded: f32 read as it is, the others as the forward's matmul decodes
// them (lib/packed_weight.wgsl).
fn w4(r: u32, k0: u32) -> vec4<f32> {
    if WDT == 0u {
        let i = r * p.k + k0;
        return bitcast<vec4<f32>>(vec4<u32>(wq[i], wq[i + 1u], wq[i + 2u], wq[i + 3u]));
    }
    let row = w_row(r);
    let kk = k0 >> 2u;
    if WDT == 1u {
        return w_vec(row, kk, 0.0);
    }
    return w_vec(row, kk, w_scale(row, kk));
}

fn store4(r: u32, k0: u32, v: vec4<f32>) {
    if r < p.m {
        let i = r * p.k + k0;
        y[i] = v.x;
        y[i + 1u] = v.y;
        y[i + 2u] = v.z;
        y[i + 3u] = v.w;
    }
}

@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_w(@builtin(global_invocation_id) gid: vec3<u32>) {
    let k0 = gid.x * 4u;
    let r0 = gid.y * 4u;
    if k0 >= p.k || r0 >= p.m {
        return;
    }
    let n = p.n;
    let d0 = r0 * n;
    let d1 = min(r0 + 1u, p.m - 1u) * n;
    let d2 = min(r0 + 2u, p.m - 1u) * n;
    let d3 = min(r0 + 3u, p.m - 1u) * n;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var c = 0u; c < n; c = c + 1u) {
        let w = w4(c, k0);
        acc0 = acc0 + dy[d0 + c] * w;
        acc1 = acc1 + dy[d1 + c] * w;
        acc2 = acc2 + dy[d2 + c] * w;
        acc3 = acc3 + dy[d3 + c] * w;
    }
    store4(r0, k0, acc0);
    store4(r0 + 1u, k0, acc1);
    store4(r0 + 2u, k0, acc2);
    store4(r0 + 3u, k0, acc3);
}

@compute @workgroup_size(WG_X, WG_Y, 1)
fn dequant(@builtin(global_invocation_id) gid: vec3<u32>) {
    let k0 = gid.x * 4u;
    let r = gid.y;
    if k0 >= p.k || r >= p.n {
        return;
    }
    let v = w4(r, k0);
    let i = r * p.k + k0;
    y[i] = v.x;
    y[i + 1u] = v.y;
    y[i + 2u] = v.z;
    y[i + 3u] = v.w;
}
