// layernorm.wgsl: y = LayerNorm(x + residual)·gamma + beta, row-wise (the row's arithmetic: lib/layernorm_row.wgsl).
//
// Bindings (group 0):
//   0  p      uniform Params { rows, cols, eps }
//   1  x      (rows, cols) Act
//   2  res    (rows, cols) Act   read only when HAS_RES (the residual of the sub-layer)
//   3  gamma  (cols)       f32
//   4  beta   (cols)       f32
//   5  y      (rows, cols) Act
// Act is f32, or f16 pairs in the module's f16 variant (lib/act.wgsl, lib/act_f16.wgsl; src/backend/gpu/params.rs).
//
// One workgroup per row (the grid is 2-D so more than 65535 rows fit).

#include "lib/layernorm_row.wgsl"

#include "lib/layernorm_params.wgsl"

// Invocations per workgroup: a power of two ≤ 256 (the host clamps it to the adapter's limit).
override WG: u32 = 128u;
override HAS_RES: bool = false;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<Act>;
@group(0) @binding(2) var<storage, read> res: array<Act>;
@group(0) @binding(3) var<storage, read> gamma: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<Act>;

// A row is its offset in x.
alias LnRow = u32;

fn ln_value(base: u32, i: u32) -> f32 {
    let j = base + i;
    let w = act_word(j);
    if HAS_RES {
        return act_value(x[w], j) + act_value(res[w], j);
    }
    return act_value(x[w], j);
}

@compute @workgroup_size(WG)
fn layernorm(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    if row >= p.rows {
        return;
    }
    let base = row * p.cols;
    layernorm_row(lid, base, p.cols, p.eps, base);
}
