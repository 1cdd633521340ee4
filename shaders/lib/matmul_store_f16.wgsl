// lib/matmul_store_f16.wgsl: lib/matmul_store.wgsl's swap, y as f16 pairs (lib/act_f16.wgsl's layout). The host
// picks it only for an even N, so a row starts at a whole word, and columns c0 .. c0 + 3 (c0 a multiple of 4) are
// two whole words written by this invocation alone.

@group(0) @binding(4) var<storage, read_write> y: array<u32>;

fn y_store4(r: u32, c0: u32, v: vec4<f32>) {
    let w = (r * p.n + c0) >> 1u;
    if c0 < p.n {
        y[w] = pack2x16float(v.xy);
    }
    if c0 + 2u < p.n {
        y[w + 1u] = pack2x16float(v.zw);
    }
}
