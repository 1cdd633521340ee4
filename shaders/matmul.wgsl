// matmul.wgsl: y = act(x · wᵀ + bias) with an f32 weight read as vec4 (entries matmul_vec4,
// matmul_vec4_tiled, matmul_vec4_reduce and matmul_vec4_wide; K % 4 == 0, every BERT).
// Bindings, tiling and epilogue: lib/matmul_tile.wgsl. Weights in other dtypes, or K not a multiple of 4:
// matmul_packed.wgsl.

#include "lib/matmul_tile.wgsl"

@group(0) @binding(2) var<storage, read> w4: array<vec4<f32>>;

const W_BLOCKED: bool = false;

fn w_row(c: u32) -> u32 {
    return c * (p.k / 4u);
}

fn w_vec(row: u32, kk: u32, d: f32) -> vec4<f32> {
    return w4[row + kk];
}

fn w_scale(row: u32, kk: u32) -> f32 {
    return 1.0;
}

@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_vec4(@builtin(global_invocation_id) gid: vec3<u32>) {
    tile_4x8(gid);
}

// The same product staged through workgroup memory (tile_shared): for real GPUs.
@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_vec4_tiled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    tile_shared(wid, lid);
}

// The same product for a few rows, each block's steps along K shared by a workgroup (tile_reduce).
@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_vec4_reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    tile_reduce(wid, lid);
}

// The same product, 8 × 8 outputs per invocation, K double-buffered through workgroup memory (tile_wide).
@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_vec4_wide(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    tile_wide(wid, lid);
}
