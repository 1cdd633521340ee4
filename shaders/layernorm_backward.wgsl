// layernorm_backward.wgsl: back through y = (x − mean)·rstd·gamma + beta, row-wise over cols (biased variance, as
// layernorm.wgsl). With x̂ = (x − mean)·rstd and g = dy ⊙ gamma:
//   dx = rstd·(g − mean(g) − x̂·mean(g ⊙ x̂)),   dgamma = Σ_rows dy ⊙ x̂,   dbeta = Σ_rows dy
// (the CPU twin: src/backend/cpu/norm.rs `layernorm_backward`).
//
// Bindings (group 0), by entry point:
//   0  p       uniform Params { rows, cols, eps }
//   ln_backward_dx:   1 dy (rows, cols), 2 x (rows, cols), 3 gamma (cols); 4 dx (rows, cols), 5 stats (rows, 2)
//   ln_param_grads:   1 dy, 2 x, 5 stats (read); 6 dgamma (parts, cols), 7 dbeta (parts, cols)
//
// ln_backward_dx: one workgroup per row (a 2-D grid, linearised), four workgroup sums (lib/reduce.wgsl): the mean,
// the variance (two passes, as lib/layernorm_row.wgsl), mean(g) and mean(g ⊙ x̂); it leaves each row's (mean,
// rstd) in stats. ln_param_grads: one invocation per column of each part of part_rows rows, down its rows in order,
// x̂ recomputed from stats; the host sums the parts (backward.wgsl col_sum) where there are several.

#include "lib/reduce.wgsl"

#include "lib/layernorm_params.wgsl"

// Invocations per workgroup: a power of two ≤ 256.
override WG: u32 = 128u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> gamma: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> stats: array<f32>;
@group(0) @binding(6) var<storage, read_write> dgamma: array<f32>;
@group(0) @binding(7) var<storage, read_write> dbeta: array<f32>;

@compute @workgroup_size(WG)
fn ln_backward_dx(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    if row >= p.rows {
        return;
    }
    let n = p.cols;
    let base = row * n;
    var s = 0.0;
    for (var i = lid; i < n; i += WG) {
        s += x[base + i];
    }
    let mean = wg_sum(lid, s) / f32(n);
    var sq = 0.0;
    for (var i = lid; i < n; i += WG) {
        let d = x[base + i] - mean;
        sq += d * d;
    }
    let rstd = 1.0 / sqrt(wg_sum(lid, sq) / f32(n) + p.eps);
    var sg = 0.0;
    var sgx = 0.0;
    for (var i = lid; i < n; i += WG) {
        let g = dy[base + i] * gamma[i];
        sg += g;
        sgx += g * ((x[base + i] - mean) * rstd);
    }
    let mg = wg_sum(lid, sg) / f32(n);
    let mgx = wg_sum(lid, sgx) / f32(n);
    for (var i = lid; i < n; i += WG) {
        let xhat = (x[base + i] - mean) * rstd;
        dx[base + i] = rstd * (dy[base + i] * gamma[i] - mg - xhat * mgx);
    }
    if lid == 0u {
        stats[2u * row] = mean;
        stats[2u * row + 1u] = rstd;
    }
}

@compute @workgroup_size(WG)
fn ln_param_grads(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    let q = i / p.cols;
    let j = i % p.cols;
    let r0 = q * p.part_rows;
    // Part 0 always writes (zeros where there are no rows); the grid's rounding past the last part writes nothing.
    if q > 0u && r0 >= p.rows {
        return;
    }
    let r1 = min(r0 + p.part_rows, p.rows);
    var dg = 0.0;
    var db = 0.0;
    for (var r = r0; r < r1; r++) {
        let d = dy[r * p.cols + j];
        dg += d * ((x[r * p.cols + j] - stats[2u * r]) * stats[2u * r + 1u]);
        db += d;
    }
    dgamma[i] = dg;
    dbeta[i] = db;
}
