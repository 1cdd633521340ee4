// lib/matmul_store.wgsl: the matmul kernels' output y (M, N), f32 (the default). lib/matmul_store_f16.wgsl is its
// swap for f16 outputs.

@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// Row r, columns c0 .. c0 + 3 of y, those < N.
fn y_store4(r: u32, c0: u32, v: vec4<f32>) {
    for (var j = 0u; j < 4u; j = j + 1u) {
        if c0 + j < p.n {
            y[r * p.n + c0 + j] = v[j];
        }
    }
}
