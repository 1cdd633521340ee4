// matmul_packed.wgsl: y = act(x · wᵀ + bias) with the weight read from its raw words (binding 6, dtype WDT; the
// layouts of lib/quant.wgsl), decoded in registers, never expanded in memory, and without `shader-f16`.
// Bindings, tiling and epilogue: lib/matmul_tile.wgsl; the weight's decoding (w_row, w_vec, w_scale):
// lib/packed_weight.wgsl, shared with weight_grad.wgsl.
//   matmul_packed  f16, Q8_0, Q4_0 (WDT 1, 2, 3): the 4×8 tile of matmul_vec4 with each w vec4 decoded from one or
//                  two words instead of loaded. The host guarantees K % 4 == 0 (f16) or K % 32 == 0 (Q8_0, Q4_0).
//   matmul_packed_tiled, matmul_packed_reduce  the same, staged through workgroup memory, or for a few rows
//                  (lib/matmul_tile.wgsl's tile_shared, tile_reduce).
//   matmul_scalar  f32 or f16 (WDT 0, 1), any K: 4×4 blocking with scalar loads.

#include "lib/matmul_tile.wgsl"
#include "lib/packed_weight.wgsl"

// Weight dtype: 0 f32, 1 f16, 2 Q8_0, 3 Q4_0.
override WDT: u32 = 0u;
// Q8_0 and Q4_0 have a scale per block of 32; it is reloaded once per block.
override W_BLOCKED: bool = WDT >= 2u;

@group(0) @binding(5) var<storage, read> x: array<f32>;
@group(0) @binding(6) var<storage, read> wq: array<u32>;

@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_packed(@builtin(global_invocation_id) gid: vec3<u32>) {
    tile_4x8(gid);
}

// The same product staged through workgroup memory (tile_shared): for real GPUs.
@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_packed_tiled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    tile_shared(wid, lid);
}

// The same product for a few rows, each block's steps along K shared by a workgroup (tile_reduce).
@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_packed_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    tile_reduce(wid, lid);
}

// The same product, 8 × 8 outputs per invocation, K double-buffered through workgroup memory (tile_wide).
@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_packed_wide(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    tile_wide(wid, lid);
}

// Element `i` of an f32 (WDT 0) or f16 (WDT 1) weight, for matmul_scalar.
fn w_at(i: u32) -> f32 {
    if WDT == 1u {
        return half_in(wq[i >> 1u], i * 2u);
    }
    return bitcast<f32>(wq[i]);
}

// 4×4 blocking with scalar loads, for K not a multiple of 4 (no BERT checkpoint has one; kept for generality), with
// an f32 or f16 weight (quantized rows are whole blocks of 32, so they always take matmul_packed).
@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_scalar(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c0 = gid.x * 4u;
    let r0 = gid.y * 4u;
    if c0 >= p.n || r0 >= p.m {
        return;
    }
    let k = p.k;
    let xr0 = min(r0, p.m - 1u) * k;
    let xr1 = min(r0 + 1u, p.m - 1u) * k;
    let xr2 = min(r0 + 2u, p.m - 1u) * k;
    let xr3 = min(r0 + 3u, p.m - 1u) * k;
    let wc0 = min(c0, p.n - 1u) * k;
    let wc1 = min(c0 + 1u, p.n - 1u) * k;
    let wc2 = min(c0 + 2u, p.n - 1u) * k;
    let wc3 = min(c0 + 3u, p.n - 1u) * k;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var kk = 0u; kk < k; kk = kk + 1u) {
        let b = vec4<f32>(w_at(wc0 + kk), w_at(wc1 + kk), w_at(wc2 + kk), w_at(wc3 + kk));
        acc0 = acc0 + x[xr0 + kk] * b;
        acc1 = acc1 + x[xr1 + kk] * b;
        acc2 = acc2 + x[xr2 + kk] * b;
        acc3 = acc3 + x[xr3 + kk] * b;
    }
    store_row(r0, c0, acc0);
    store_row(r0 + 1u, c0, acc1);
    store_row(r0 + 2u, c0, acc2);
    store_row(r0 + 3u, c0, acc3);
}
