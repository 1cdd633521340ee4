// lib/matmul_tile.wgsl: y = act(x · wᵀ + bias), the linear layer with its epilogue fused: what every matmul kernel
// shares (matmul.wgsl: f32 weights; matmul_packed.wgsl: weights as raw words).
//
// Bindings (group 0) of the matmul kernels:
//   0  p     uniform Params { m, n, k }
//   1  x4    (M, K/4)  vec4<f32>  activations, row-major        (matmul_vec4, matmul_packed; K % 4 == 0)
//   2  w4    (N, K/4)  vec4<f32>  f32 weight as Hugging Face stores it: (out, in), K-contiguous (matmul_vec4)
//   3  bias  (N)       f32        read only when HAS_BIAS
//   4  y     (M, N)    f32        output, row-major
//   5  x     (M, K)    f32        scalar view of x                (matmul_scalar, any K)
//   6  wq    u32 words            the weight's raw bytes, (N, K) in dtype WDT (matmul_packed, matmul_scalar): the
//                                   layouts of lib/quant.wgsl; the host pads the buffer with a spare word for the
//                                   reads that straddle the last one.
//
// `tile_4x8` computes a 4×8 block of y per invocation with eight vec4 accumulators: per step along K it loads 4
// vec4 of x and 8 vec4 of w (12 loads) and does 32 dot products (4×4 blocks: 8 loads for 16). No workgroup
// memory: on a CPU "GPU" (lavapipe, SwiftShader) global loads are cached CPU loads and barriers are expensive, and
// the measured shared-memory tiled variant was slower (BENCHMARKS.md). Rows/columns past the edge are clamped for
// loading and masked on store, so any M, N work. Accumulation is f32 throughout.
//
// The kernel that includes this file reads its weight through:
//   fn w_row(c: u32) -> u32                             where weight row c starts, in the units w_vec takes
//   fn w_vec(row: u32, kk: u32, d: f32) -> vec4<f32>    weights k = 4·kk .. 4·kk + 3 of that row, decoded
//   fn w_scale(row: u32, kk: u32) -> f32                the scale of the block holding k = 4·kk
//   W_BLOCKED: bool (const or override)                 whether w_scale is needed: then it is called once per
//                                                       block of 32 (kk % 8 == 0) and its value passed to w_vec

#include "lib/activations.wgsl"

struct Params {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

// Workgroup shape (tuning knobs; the host clamps WG_X·WG_Y to the adapter's invocation limit).
override WG_X: u32 = 8u;
override WG_Y: u32 = 8u;
// Epilogue: the activation code of lib/activations.wgsl, and whether a bias is added first.
override ACT: u32 = 0u;
override HAS_BIAS: bool = false;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

fn epilogue(v: f32, col: u32) -> f32 {
    var z = v;
    if HAS_BIAS {
        z = z + bias[col];
    }
    return activate(ACT, z);
}

fn store_row(r: u32, c0: u32, acc: vec4<f32>) {
    if r >= p.m {
        return;
    }
    for (var j = 0u; j < 4u; j = j + 1u) {
        let c = c0 + j;
        if c < p.n {
            y[r * p.n + c] = epilogue(acc[j], c);
        }
    }
}

// 4 rows × 8 columns of y for invocation `gid`: per step along K, 4 + 8 vec4 loads feed 32 dot products.
fn tile_4x8(gid: vec3<u32>) {
    let c0 = gid.x * 8u;
    let r0 = gid.y * 4u;
    if c0 >= p.n || r0 >= p.m {
        return;
    }
    let k4 = p.k / 4u;
    // Clamped row/column indices: out-of-range lanes load valid memory and are dropped at the store.
    let xr0 = min(r0, p.m - 1u) * k4;
    let xr1 = min(r0 + 1u, p.m - 1u) * k4;
    let xr2 = min(r0 + 2u, p.m - 1u) * k4;
    let xr3 = min(r0 + 3u, p.m - 1u) * k4;
    let wc0 = w_row(min(c0, p.n - 1u));
    let wc1 = w_row(min(c0 + 1u, p.n - 1u));
    let wc2 = w_row(min(c0 + 2u, p.n - 1u));
    let wc3 = w_row(min(c0 + 3u, p.n - 1u));
    let wc4 = w_row(min(c0 + 4u, p.n - 1u));
    let wc5 = w_row(min(c0 + 5u, p.n - 1u));
    let wc6 = w_row(min(c0 + 6u, p.n - 1u));
    let wc7 = w_row(min(c0 + 7u, p.n - 1u));
    var acc0 = vec4<f32>(0.0);  // row r0, columns c0..c0+4
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    var bcc0 = vec4<f32>(0.0);  // row r0, columns c0+4..c0+8
    var bcc1 = vec4<f32>(0.0);
    var bcc2 = vec4<f32>(0.0);
    var bcc3 = vec4<f32>(0.0);
    var d0 = 1.0;  // block scales of columns c0..c0+8 (W_BLOCKED)
    var d1 = 1.0;
    var d2 = 1.0;
    var d3 = 1.0;
    var d4 = 1.0;
    var d5 = 1.0;
    var d6 = 1.0;
    var d7 = 1.0;
    for (var kk = 0u; kk < k4; kk = kk + 1u) {
        // A uniform branch, once per block of 32 values (every 8 steps of 4).
        if W_BLOCKED && (kk & 7u) == 0u {
            d0 = w_scale(wc0, kk);
            d1 = w_scale(wc1, kk);
            d2 = w_scale(wc2, kk);
            d3 = w_scale(wc3, kk);
            d4 = w_scale(wc4, kk);
            d5 = w_scale(wc5, kk);
            d6 = w_scale(wc6, kk);
            d7 = w_scale(wc7, kk);
        }
        let a0 = x4[xr0 + kk];
        let a1 = x4[xr1 + kk];
        let a2 = x4[xr2 + kk];
        let a3 = x4[xr3 + kk];
        let b0 = w_vec(wc0, kk, d0);
        let b1 = w_vec(wc1, kk, d1);
        let b2 = w_vec(wc2, kk, d2);
        let b3 = w_vec(wc3, kk, d3);
        let b4 = w_vec(wc4, kk, d4);
        let b5 = w_vec(wc5, kk, d5);
        let b6 = w_vec(wc6, kk, d6);
        let b7 = w_vec(wc7, kk, d7);
        acc0 = acc0 + vec4<f32>(dot(a0, b0), dot(a0, b1), dot(a0, b2), dot(a0, b3));
        acc1 = acc1 + vec4<f32>(dot(a1, b0), dot(a1, b1), dot(a1, b2), dot(a1, b3));
        acc2 = acc2 + vec4<f32>(dot(a2, b0), dot(a2, b1), dot(a2, b2), dot(a2, b3));
        acc3 = acc3 + vec4<f32>(dot(a3, b0), dot(a3, b1), dot(a3, b2), dot(a3, b3));
        bcc0 = bcc0 + vec4<f32>(dot(a0, b4), dot(a0, b5), dot(a0, b6), dot(a0, b7));
        bcc1 = bcc1 + vec4<f32>(dot(a1, b4), dot(a1, b5), dot(a1, b6), dot(a1, b7));
        bcc2 = bcc2 + vec4<f32>(dot(a2, b4), dot(a2, b5), dot(a2, b6), dot(a2, b7));
        bcc3 = bcc3 + vec4<f32>(dot(a3, b4), dot(a3, b5), dot(a3, b6), dot(a3, b7));
    }
    store_row(r0, c0, acc0);
    store_row(r0 + 1u, c0, acc1);
    store_row(r0 + 2u, c0, acc2);
    store_row(r0 + 3u, c0, acc3);
    store_row(r0, c0 + 4u, bcc0);
    store_row(r0 + 1u, c0 + 4u, bcc1);
    store_row(r0 + 2u, c0 + 4u, bcc2);
    store_row(r0 + 3u, c0 + 4u, bcc3);
}
