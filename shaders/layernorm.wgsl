// layernorm.wgsl: y = LayerNorm(x + residual)·gamma + beta, row-wise, biased variance (as PyTorch).
//
// Bindings (group 0):
//   0  p      uniform Params { rows, cols, eps }
//   1  x      (rows, cols) f32
//   2  res    (rows, cols) f32   read only when HAS_RES (the residual of the sub-layer)
//   3  gamma  (cols)       f32
//   4  beta   (cols)       f32
//   5  y      (rows, cols) f32
//
// One workgroup per row (the grid is 2-D so more than 65535 rows fit). Two passes over the row (mean, then the
// mean of squared deviations) rather than E[x²]−E[x]²: no cancellation, and the row stays in cache.

struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    _pad: u32,
}

// Invocations per workgroup: a power of two ≤ 256 (the host clamps it to the adapter's limit).
override WG: u32 = 128u;
override HAS_RES: bool = false;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> res: array<f32>;
@group(0) @binding(3) var<storage, read> gamma: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

var<workgroup> red: array<f32, 256>;

fn value(i: u32) -> f32 {
    if HAS_RES {
        return x[i] + res[i];
    }
    return x[i];
}

// Sum of `v` over the workgroup (tree reduction; WG is a power of two).
fn wg_sum(lid: u32, v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if lid < s {
            red[lid] = red[lid] + red[lid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(WG)
fn layernorm(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    if row >= p.rows {
        return;
    }
    let base = row * p.cols;
    let n = f32(p.cols);
    var s = 0.0;
    for (var i = lid; i < p.cols; i = i + WG) {
        s = s + value(base + i);
    }
    let mean = wg_sum(lid, s) / n;
    var sq = 0.0;
    for (var i = lid; i < p.cols; i = i + WG) {
        let d = value(base + i) - mean;
        sq = sq + d * d;
    }
    let rstd = inverseSqrt(wg_sum(lid, sq) / n + p.eps);
    for (var i = lid; i < p.cols; i = i + WG) {
        y[base + i] = (value(base + i) - mean) * rstd * gamma[i] + beta[i];
    }
}
