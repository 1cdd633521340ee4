// lib/layernorm_row.wgsl: one workgroup normalises one row, y = (v − mean)·rstd·gamma + beta, biased variance (as
// PyTorch). Two passes over the row (mean, then the mean of squared deviations) rather than E[x²]−E[x]²: no
// cancellation, and the row stays in cache. Each pass sums over the workgroup (lib/reduce.wgsl).
//
// The kernel that includes this file declares:
//   override WG: u32                  invocations per workgroup, a power of two ≤ 256
//   gamma, beta: array<f32> (n)       storage, read
//   y: array<Act>                     storage, read_write (lib/act.wgsl: f32, or f16 pairs where swapped)
//   alias LnRow = ...;                what identifies a row to ln_value (an offset, a token)
//   fn ln_value(r: LnRow, i: u32) -> f32   element i of row r, before normalisation (read three times)

#include "lib/reduce.wgsl"
#include "lib/layernorm_store.wgsl"

// Normalises row `r` (n values) into y[out .. out + n]; every invocation of the workgroup calls it.
fn layernorm_row(lid: u32, r: LnRow, n: u32, eps: f32, out: u32) {
    var s = 0.0;
    for (var i = lid; i < n; i = i + WG) {
        s = s + ln_value(r, i);
    }
    let mean = wg_sum(lid, s) / f32(n);
    var sq = 0.0;
    for (var i = lid; i < n; i = i + WG) {
        let d = ln_value(r, i) - mean;
        sq = sq + d * d;
    }
    let rstd = inverseSqrt(wg_sum(lid, sq) / f32(n) + eps);
    ln_store(lid, r, n, out, mean, rstd, true);
}
