// lib/layernorm_store.wgsl: how the row kernels of lib/layernorm_row.wgsl write a row of y, f32 (the default).
// lib/layernorm_store_f16.wgsl is its swap for f16 outputs. The kernel declares `y: array<Act>` (lib/act.wgsl).

#include "lib/act.wgsl"

// Writes row r (n values) at y[out ..]: (v − mean)·rstd, then ·gamma + beta where `affine`.
fn ln_store(lid: u32, r: LnRow, n: u32, out: u32, mean: f32, rstd: f32, affine: bool) {
    for (var i = lid; i < n; i = i + WG) {
        var v = (ln_value(r, i) - mean) * rstd;
        if affine {
            v = v * gamma[i] + beta[i];
        }
        y[out + i] = v;
    }
}
