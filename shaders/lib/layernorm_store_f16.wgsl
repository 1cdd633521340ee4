// lib/layernorm_store_f16.wgsl: lib/layernorm_store.wgsl's swap, the row as f16 pairs (lib/act_f16.wgsl). Each
// invocation writes whole words: the host picks it only for an even n, so every row starts at a whole word.

#include "lib/act.wgsl"

fn ln_store(lid: u32, r: LnRow, n: u32, out: u32, mean: f32, rstd: f32, affine: bool) {
    for (var j = lid; 2u * j < n; j = j + WG) {
        let i = 2u * j;
        var v = (vec2<f32>(ln_value(r, i), ln_value(r, i + 1u)) - mean) * rstd;
        if affine {
            v = v * vec2<f32>(gamma[i], gamma[i + 1u]) + vec2<f32>(beta[i], beta[i + 1u]);
        }
        y[(out >> 1u) + j] = pack2x16float(v);
    }
}
