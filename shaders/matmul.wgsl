// matmul.wgsl: y = act(x · wᵀ + bias), the linear layer with its epilogue fused.
//
// Bindings (group 0):
//   0  p     uniform Params { m, n, k }
//   1  x4    (M, K/4)  vec4<f32>  activations, row-major        (entries matmul_vec4 / matmul_packed, K % 4 == 0)
//   2  w4    (N, K/4)  vec4<f32>  f32 weight as Hugging Face stores it: (out, in), K-contiguous (matmul_vec4)
//   3  bias  (N)       f32        read only when HAS_BIAS
//   4  y     (M, N)    f32        output, row-major
//   5  x     (M, K)    f32        scalar view of x                (entry matmul_scalar, any K)
//   6  wq    u32 words            the weight's raw bytes, (N, K) in dtype WDT (matmul_packed, matmul_scalar):
//                                   WDT 0 f32 (one word per value), 1 f16 (two per word, low half first),
//                                   2 Q8_0, 3 Q4_0: llama.cpp's blocks of 32 values along K, back to back, row after
//                                   row (block (c, b) of column c starts at byte (c·K/32 + b)·BYTES). Q8_0: f16 scale
//                                   d, 32 × i8 q, value q·d (34 bytes). Q4_0: f16 scale d, 16 bytes whose low nibbles
//                                   are values 0..15 and high nibbles 16..31, value (q − 8)·d (18 bytes). 34 and 18
//                                   are not multiples of 4, so half the blocks start mid-word; the host pads the
//                                   buffer with a spare word for the reads that straddle the last one.
//
// Weights are decoded in registers, never expanded in memory, and without `shader-f16`: f16 through
// `unpack2x16float`, bytes and nibbles through shifts. Accumulation is f32 throughout.
// Each invocation computes a 4×8 block of y with eight vec4 accumulators: per step along K it loads 4 vec4 of x
// and 8 vec4 of w (12 loads) and does 32 dot products (4×4 blocks: 8 loads for 16). No workgroup
// memory: on a CPU "GPU" (lavapipe, SwiftShader) global loads are cached CPU loads and barriers are expensive, and
// the measured shared-memory tiled variant was slower (BENCHMARKS.md). Rows/columns past the edge are clamped for
// loading and masked on store, so any M, N work.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

// Workgroup shape (tuning knobs; the host clamps WG_X·WG_Y to the adapter's invocation limit).
override WG_X: u32 = 8u;
override WG_Y: u32 = 8u;
// Epilogue variant: 0 none, 1 GELU (erf), 2 GELU (tanh form), 3 ReLU, 4 tanh.
override ACT: u32 = 0u;
override HAS_BIAS: bool = false;
// Weight dtype of matmul_packed / matmul_scalar: 0 f32, 1 f16, 2 Q8_0, 3 Q4_0.
override WDT: u32 = 0u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> w4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> x: array<f32>;
@group(0) @binding(6) var<storage, read> wq: array<u32>;

// erf by Abramowitz & Stegun 7.1.26: |error| ≤ 1.5e-7 for all x, well under f32 GELU tolerances.
fn erf_as(v: f32) -> f32 {
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let r = 1.0 - poly * exp(-a * a);
    return select(r, -r, v < 0.0);
}

// tanh through exp, clamped so exp never overflows (|tanh(15)| rounds to 1 in f32 anyway).
fn tanh_safe(v: f32) -> f32 {
    let c = clamp(v, -15.0, 15.0);
    let e = exp(2.0 * c);
    return (e - 1.0) / (e + 1.0);
}

fn epilogue(v: f32, col: u32) -> f32 {
    var z = v;
    if HAS_BIAS {
        z = z + bias[col];
    }
    switch ACT {
        case 1u: { z = 0.5 * z * (1.0 + erf_as(z * 0.70710678118654752)); }
        case 2u: { z = 0.5 * z * (1.0 + tanh_safe(0.79788456080286536 * (z + 0.044715 * z * z * z))); }
        case 3u: { z = max(z, 0.0); }
        case 4u: { z = tanh_safe(z); }
        default: {}
    }
    return z;
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

@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_vec4(@builtin(global_invocation_id) gid: vec3<u32>) {
    // 4 rows × 8 columns per invocation: per step along K, 4 + 8 vec4 loads feed 32 dot products.
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
    let wc0 = min(c0, p.n - 1u) * k4;
    let wc1 = min(c0 + 1u, p.n - 1u) * k4;
    let wc2 = min(c0 + 2u, p.n - 1u) * k4;
    let wc3 = min(c0 + 3u, p.n - 1u) * k4;
    let wc4 = min(c0 + 4u, p.n - 1u) * k4;
    let wc5 = min(c0 + 5u, p.n - 1u) * k4;
    let wc6 = min(c0 + 6u, p.n - 1u) * k4;
    let wc7 = min(c0 + 7u, p.n - 1u) * k4;
    var acc0 = vec4<f32>(0.0);  // row r0, columns c0..c0+4
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    var bcc0 = vec4<f32>(0.0);  // row r0, columns c0+4..c0+8
    var bcc1 = vec4<f32>(0.0);
    var bcc2 = vec4<f32>(0.0);
    var bcc3 = vec4<f32>(0.0);
    for (var kk = 0u; kk < k4; kk = kk + 1u) {
        let a0 = x4[xr0 + kk];
        let a1 = x4[xr1 + kk];
        let a2 = x4[xr2 + kk];
        let a3 = x4[xr3 + kk];
        let b0 = w4[wc0 + kk];
        let b1 = w4[wc1 + kk];
        let b2 = w4[wc2 + kk];
        let b3 = w4[wc3 + kk];
        let b4 = w4[wc4 + kk];
        let b5 = w4[wc5 + kk];
        let b6 = w4[wc6 + kk];
        let b7 = w4[wc7 + kk];
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

// ---- Packed weights (f16, Q8_0, Q4_0) ----

// The f16 at byte offset `o` (even) of wq.
fn half_at(o: u32) -> f32 {
    let v = unpack2x16float(wq[o >> 2u]);
    return select(v.x, v.y, (o & 2u) != 0u);
}

// The 4 bytes at byte offset `o` (even) of wq, as one little-endian word: the word itself when `o` is 4-aligned,
// else the high half of one word and the low half of the next. (w << 1) << (31 − sh) is w << 16 for sh = 16 and 0
// for sh = 0 without a shift by 32 (which WGSL takes modulo 32).
fn word_at(o: u32) -> u32 {
    let i = o >> 2u;
    let sh = (o & 2u) * 8u;
    return (wq[i] >> sh) | ((wq[i + 1u] << 1u) << (31u - sh));
}

// Four signed bytes of a word, lowest first.
fn i8x4(u: u32) -> vec4<f32> {
    let v = bitcast<vec4<i32>>(vec4<u32>(u << 24u, u << 16u, u << 8u, u)) >> vec4<u32>(24u);
    return vec4<f32>(v);
}

// Bytes per block: 34 (Q8_0), 18 (Q4_0).
fn block_bytes() -> u32 {
    return select(18u, 34u, WDT == 2u);
}

// Byte offset (Q8_0/Q4_0) or word index (f16) where weight row `c` starts.
fn row_base(c: u32) -> u32 {
    if WDT == 1u {
        return c * (p.k / 2u);
    }
    return c * (p.k / 32u) * block_bytes();
}

// Weights k = 4·kk .. 4·kk + 3 of the row starting at `base`, decoded; `d` is the scale of the block holding them.
//   f16:  words base + 2kk and base + 2kk + 1, two halves each.
//   Q8_0: block kk/8, values 4i..4i+3 (i = kk % 8): bytes 2 + 4i.. of the block.
//   Q4_0: block kk/8; values 4i..4i+3 are the low nibbles of bytes 2 + 4i.. for i < 4, the high nibbles of
//         bytes 2 + 4(i − 4).. for i ≥ 4.
fn wvec(base: u32, kk: u32, d: f32) -> vec4<f32> {
    switch WDT {
        case 1u: {
            let i = base + 2u * kk;
            return vec4<f32>(unpack2x16float(wq[i]), unpack2x16float(wq[i + 1u]));
        }
        case 2u: {
            let u = word_at(base + (kk >> 3u) * 34u + 2u + 4u * (kk & 7u));
            return i8x4(u) * d;
        }
        default: {
            let u = word_at(base + (kk >> 3u) * 18u + 2u + 4u * (kk & 3u));
            let s = select(0u, 4u, (kk & 4u) != 0u);
            let q = (vec4<u32>(u, u >> 8u, u >> 16u, u >> 24u) >> vec4<u32>(s)) & vec4<u32>(0xFu);
            return (vec4<f32>(q) - 8.0) * d;
        }
    }
}

// The scale of the block holding weight k = 4·kk of the row starting at `base` (unused for f16).
fn wscale(base: u32, kk: u32) -> f32 {
    if WDT == 1u {
        return 1.0;
    }
    return half_at(base + (kk >> 3u) * block_bytes());
}

// matmul_vec4 with the weight read from packed storage (WDT 1, 2, 3): the same 4×8 outputs per invocation and the
// same x loads; each w vec4 is decoded from one or two words instead of loaded. Block scales are reloaded once per
// block (every 8 steps of 4), a uniform branch. The host guarantees K % 4 == 0 (f16) or K % 32 == 0 (Q8_0, Q4_0).
@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_packed(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c0 = gid.x * 8u;
    let r0 = gid.y * 4u;
    if c0 >= p.n || r0 >= p.m {
        return;
    }
    let k4 = p.k / 4u;
    let xr0 = min(r0, p.m - 1u) * k4;
    let xr1 = min(r0 + 1u, p.m - 1u) * k4;
    let xr2 = min(r0 + 2u, p.m - 1u) * k4;
    let xr3 = min(r0 + 3u, p.m - 1u) * k4;
    let wc0 = row_base(min(c0, p.n - 1u));
    let wc1 = row_base(min(c0 + 1u, p.n - 1u));
    let wc2 = row_base(min(c0 + 2u, p.n - 1u));
    let wc3 = row_base(min(c0 + 3u, p.n - 1u));
    let wc4 = row_base(min(c0 + 4u, p.n - 1u));
    let wc5 = row_base(min(c0 + 5u, p.n - 1u));
    let wc6 = row_base(min(c0 + 6u, p.n - 1u));
    let wc7 = row_base(min(c0 + 7u, p.n - 1u));
    var acc0 = vec4<f32>(0.0);  // row r0, columns c0..c0+4
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    var bcc0 = vec4<f32>(0.0);  // row r0, columns c0+4..c0+8
    var bcc1 = vec4<f32>(0.0);
    var bcc2 = vec4<f32>(0.0);
    var bcc3 = vec4<f32>(0.0);
    var d0 = 1.0;  // block scales of columns c0..c0+8
    var d1 = 1.0;
    var d2 = 1.0;
    var d3 = 1.0;
    var d4 = 1.0;
    var d5 = 1.0;
    var d6 = 1.0;
    var d7 = 1.0;
    for (var kk = 0u; kk < k4; kk = kk + 1u) {
        if WDT >= 2u && (kk & 7u) == 0u {
            d0 = wscale(wc0, kk);
            d1 = wscale(wc1, kk);
            d2 = wscale(wc2, kk);
            d3 = wscale(wc3, kk);
            d4 = wscale(wc4, kk);
            d5 = wscale(wc5, kk);
            d6 = wscale(wc6, kk);
            d7 = wscale(wc7, kk);
        }
        let a0 = x4[xr0 + kk];
        let a1 = x4[xr1 + kk];
        let a2 = x4[xr2 + kk];
        let a3 = x4[xr3 + kk];
        let b0 = wvec(wc0, kk, d0);
        let b1 = wvec(wc1, kk, d1);
        let b2 = wvec(wc2, kk, d2);
        let b3 = wvec(wc3, kk, d3);
        let b4 = wvec(wc4, kk, d4);
        let b5 = wvec(wc5, kk, d5);
        let b6 = wvec(wc6, kk, d6);
        let b7 = wvec(wc7, kk, d7);
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

// Element `i` of an f32 (WDT 0) or f16 (WDT 1) weight, for matmul_scalar.
fn w_at(i: u32) -> f32 {
    if WDT == 1u {
        let v = unpack2x16float(wq[i >> 1u]);
        return select(v.x, v.y, (i & 1u) != 0u);
    }
    return bitcast<f32>(wq[i]);
}

// 4×4 blocking with scalar loads, for K not a multiple of 4 (no BERT checkpoint has one; kept for generality), with
// an f32 or f16 weight (quantized rows are whole blocks of 32, so they always take matmul_packed).
@compute @workgroup_size(WG_X, WG_Y, 1)
fn matmul_scalar(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c0 = gid.x * 4u;
    let r0 = gid.y * 4u;
    if c0 >= p.n || r0 >= p.m {
        return;
    }
    let k = p.k;
    let xr0 = min(r0, p.m - 1u) * k;
    let xr1 = min(r0 + 1u, p.m - 1u) * k;
    let xr2 = min(r0 + 2u, p.m - 1u) * k;
    let xr3 = min(r0 + 3u, p.m - 1u) * k;
    let wc0 = min(c0, p.n - 1u) * k;
    let wc1 = min(c0 + 1u, p.n - 1u) * k;
    let wc2 = min(c0 + 2u, p.n - 1u) * k;
    let wc3 = min(c0 + 3u, p.n - 1u) * k;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var kk = 0u; kk < k; kk = kk + 1u) {
        let b = vec4<f32>(w_at(wc0 + kk), w_at(wc1 + kk), w_at(wc2 + kk), w_at(wc3 + kk));
        acc0 = acc0 + x[xr0 + kk] * b;
        acc1 = acc1 + x[xr1 + kk] * b;
        acc2 = acc2 + x[xr2 + kk] * b;
        acc3 = acc3 + x[xr3 + kk] * b;
    }
    store_row(r0, c0, acc0);
    store_row(r0 + 1u, c0, acc1);
    store_row(r0 + 2u, c0, acc2);
    store_row(r0 + 3u, c0, acc3);
}
