// lib/matmul_tile.wgsl: y = act(x · wᵀ + bias), the linear layer with its epilogue fused: what every matmul kernel
// shares (matmul.wgsl: f32 weights; matmul_packed.wgsl: weights as raw words).
//
// Bindings (group 0) of the matmul kernels:
//   0  p     uniform Params { m, n, k }
//   1  x4    (M, K/4)  Act4       activations, row-major        (matmul_vec4, matmul_packed; K % 4 == 0): f32,
//                                   or f16 pairs in the modules' f16 variants (lib/act.wgsl, lib/act_f16.wgsl)
//   2  w4    (N, K/4)  vec4<f32>  f32 weight as Hugging Face stores it: (out, in), K-contiguous (matmul_vec4)
//   3  bias  (N)       f32        read only when HAS_BIAS
//   4  y     (M, N)    f32        output, row-major (lib/matmul_store.wgsl; f16 pairs where that is swapped)
//   5  x     (M, K)    f32        scalar view of x                (matmul_scalar, any K)
//   6  wq    u32 words            the weight's raw bytes, (N, K) in dtype WDT (matmul_packed, matmul_scalar): the
//                                   layouts of lib/quant.wgsl; the host pads the buffer with a spare word for the
//                                   reads that straddle the last one.
//
// Two tilings, the same 4 rows × 8 columns of y per invocation, the same grid (WG_X · 8 columns by WG_Y · 4 rows per
// workgroup), so the host switches between them by entry point alone:
// - `tile_4x8` (direct): eight vec4 accumulators; per step along K it loads 4 vec4 of x and 8 vec4 of w (12 loads)
//   straight from storage and does 32 dot products. No workgroup memory: on a CPU "GPU" (lavapipe, SwiftShader)
//   global loads are cached CPU loads and barriers are expensive, so this is the fastest there (BENCHMARKS.md).
// - `tile_shared` (tiled): the workgroup stages its (4·WG_Y) × 16 slice of x and (8·WG_X) × 16 slice of w in
//   workgroup memory, K-major, then each invocation reads one vec4 of x and two of w per k (3 loads for 32 FMAs).
//   Each value leaves storage once per workgroup instead of once per invocation: what a real GPU needs. WG_X and
//   WG_Y ≤ 16 (the staging arrays' size).
// - `tile_reduce` (reduce): for a few rows (one short sentence: M ≈ 12), where the grids above have too few
//   invocations to fill a GPU and each walks all of K alone. One workgroup per 4×8 block of y, its WG_X·WG_Y (a
//   power of two ≤ 64) invocations taking every (WG_X·WG_Y)-th step along K and summing their partial blocks in a
//   tree in workgroup memory. Grid: one workgroup per block.
// - `tile_wide` (wide): 8 rows × 8 columns per invocation (a block of (8·WG_Y) × (8·WG_X), WG_X and WG_Y 8 or 16),
//   K in slabs of 8 double-buffered in workgroup memory: per k, 4 vec4 reads feed 64 FMAs (tiled: 3 for 32), and
//   each slab's global loads are issued before the slab in hand is multiplied and stored after it, so their
//   latency hides behind the arithmetic; one barrier per slab. Grid: one workgroup per block.
// Rows/columns past the edge are clamped (direct, reduce) or zero-filled (tiled, wide) for loading and masked on store,
// so any M, N work. Accumulation is f32 throughout. The adapter's calibration picks the tiling, one for many rows
// and one for few (src/backend/gpu/calibration.rs).
//
// The kernel that includes this file reads its weight through:
//   fn w_row(c: u32) -> u32                             where weight row c starts, in the units w_vec takes
//   fn w_vec(row: u32, kk: u32, d: f32) -> vec4<f32>    weights k = 4·kk .. 4·kk + 3 of that row, decoded
//   fn w_scale(row: u32, kk: u32) -> f32                the scale of the block holding k = 4·kk
//   W_BLOCKED: bool (const or override)                 whether w_scale is needed: then it is called once per
//                                                       block of 32 (kk % 8 == 0) where one invocation walks all
//                                                       of K, each step otherwise, and its value passed to w_vec

#include "lib/act.wgsl"
#include "lib/activations.wgsl"
#include "lib/block_sum.wgsl"
#include "lib/matmul_store.wgsl"
#include "lib/workgroup_2d.wgsl"

struct Params {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

// Epilogue: the activation code of lib/activations.wgsl, and whether a bias is added first.
override ACT: u32 = 0u;
override HAS_BIAS: bool = false;
// A deliberately wrong result (every output + 0.01): only for the tests of the load-time canary, which must catch a
// kernel that a driver miscompiles (GpuBackend::inject_fault).
override FAULT: bool = false;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x4: array<Act4>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;

fn epilogue(v: f32, col: u32) -> f32 {
    var z = v;
    if HAS_BIAS {
        z = z + bias[col];
    }
    if FAULT {
        z = z + 0.01;
    }
    return activate(ACT, z);
}

fn store_row(r: u32, c0: u32, acc: vec4<f32>) {
    if r >= p.m {
        return;
    }
    var v = acc;
    for (var j = 0u; j < 4u; j = j + 1u) {
        v[j] = epilogue(acc[j], min(c0 + j, p.n - 1u));
    }
    y_store4(r, c0, v);
}

// A 4×8 block of y: rows r0.., columns c0.. (acc: columns c0..c0+4 of each row, bcc: c0+4..c0+8).
struct Block {
    acc: array<vec4<f32>, 4>,
    bcc: array<vec4<f32>, 4>,
}

// Block (r0, c0) summed over the steps kk = first, first + step, … < K/4: per step, 4 + 8 vec4 loads feed 32 dot
// products.
fn partial_4x8(r0: u32, c0: u32, first: u32, step: u32) -> Block {
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
    var d0 = 1.0;  // block scales of columns c0..c0+8 (W_BLOCKED: Q8_0, Q4_0) at k = 4·kk
    var d1 = 1.0;
    var d2 = 1.0;
    var d3 = 1.0;
    var d4 = 1.0;
    var d5 = 1.0;
    var d6 = 1.0;
    var d7 = 1.0;
    for (var kk = first; kk < k4; kk = kk + step) {
        // Reloaded at each block of 32 (every 8 steps of 4) when this invocation walks all of K, else every step.
        if W_BLOCKED && (step != 1u || (kk & 7u) == 0u) {
            d0 = w_scale(wc0, kk);
            d1 = w_scale(wc1, kk);
            d2 = w_scale(wc2, kk);
            d3 = w_scale(wc3, kk);
            d4 = w_scale(wc4, kk);
            d5 = w_scale(wc5, kk);
            d6 = w_scale(wc6, kk);
            d7 = w_scale(wc7, kk);
        }
        let a0 = act4(x4[xr0 + kk]);
        let a1 = act4(x4[xr1 + kk]);
        let a2 = act4(x4[xr2 + kk]);
        let a3 = act4(x4[xr3 + kk]);
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
    return Block(array(acc0, acc1, acc2, acc3), array(bcc0, bcc1, bcc2, bcc3));
}

fn store_block(r0: u32, c0: u32, blk: Block) {
    for (var i = 0u; i < 4u; i = i + 1u) {
        store_row(r0 + i, c0, blk.acc[i]);
        store_row(r0 + i, c0 + 4u, blk.bcc[i]);
    }
}

// 4 rows × 8 columns of y for invocation `gid`, over all of K.
fn tile_4x8(gid: vec3<u32>) {
    let c0 = gid.x * 8u;
    let r0 = gid.y * 4u;
    if c0 >= p.n || r0 >= p.m {
        return;
    }
    store_block(r0, c0, partial_4x8(r0, c0, 0u, 1u));
}

// The 4×8 block `wid` of y, its steps along K shared by the workgroup's invocations (WG_X·WG_Y, a power of two
// ≤ 64: the host clamps it), their partial blocks added (lib/block_sum.wgsl: in a tree in w_tile, or with subgroup
// operations), then stored by the first 8 invocations (one vec4 of the block each).
fn tile_reduce(wid: vec3<u32>, lid: vec3<u32>) {
    let threads = WG_X * WG_Y;
    let t = lid.y * WG_X + lid.x;
    let r0 = wid.y * 4u;
    let c0 = wid.x * 8u;
    let v = block_sum(t, threads, partial_4x8(r0, c0, t, threads));
    if t < 8u {
        store_row(r0 + (t & 3u), c0 + 4u * (t >> 2u), v);
    }
}

// K values per step of `tile_shared` (4 vec4), and its staging arrays: x_tile[kk · 16 + g] holds rows 4g..4g+3 of
// the workgroup's x slice at k = kk; w_tile[kk · 32 + g] columns 4g..4g+3 of its w slice. Columns g = lx and
// g = WG_X + lx of an invocation are consecutive across the warp, so the reads below do not conflict.
const TILE_K: u32 = 16u;
var<workgroup> x_tile: array<vec4<f32>, 256>;
var<workgroup> w_tile: array<vec4<f32>, 512>;

// Rows 4·ly.. and columns 4·lx.., 4·(WG_X + lx).. of the workgroup's (4·WG_Y) × (8·WG_X) block of y.
fn tile_shared(wid: vec3<u32>, lid: vec3<u32>) {
    let row0 = wid.y * 4u * WG_Y;
    let col0 = wid.x * 8u * WG_X;
    let t = lid.y * WG_X + lid.x;
    let threads = WG_X * WG_Y;
    let k4 = p.k / 4u;
    var acc0 = vec4<f32>(0.0);  // row 4·ly, columns 4·lx..
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    var bcc0 = vec4<f32>(0.0);  // row 4·ly, columns 4·(WG_X + lx)..
    var bcc1 = vec4<f32>(0.0);
    var bcc2 = vec4<f32>(0.0);
    var bcc3 = vec4<f32>(0.0);
    for (var s = 0u; s < k4; s = s + TILE_K / 4u) {
        // Stage x: 4·WG_Y rows × 4 vec4, transposed to K-major.
        for (var i = t; i < 16u * WG_Y; i = i + threads) {
            let r = i >> 2u;
            let kq = s + (i & 3u);
            var v = vec4<f32>(0.0);
            if row0 + r < p.m && kq < k4 {
                v = act4(x4[(row0 + r) * k4 + kq]);
            }
            let g = (i & 3u) * 64u + (r >> 2u);
            let c = r & 3u;
            x_tile[g][c] = v.x;
            x_tile[g + 16u][c] = v.y;
            x_tile[g + 32u][c] = v.z;
            x_tile[g + 48u][c] = v.w;
        }
        // Stage w: 8·WG_X weight rows (output columns) × 4 vec4, decoded, transposed to K-major.
        for (var i = t; i < 32u * WG_X; i = i + threads) {
            let n = i >> 2u;
            let kq = s + (i & 3u);
            var v = vec4<f32>(0.0);
            if col0 + n < p.n && kq < k4 {
                let row = w_row(col0 + n);
                var d = 1.0;
                if W_BLOCKED {
                    d = w_scale(row, kq);
                }
                v = w_vec(row, kq, d);
            }
            let g = (i & 3u) * 128u + (n >> 2u);
            let c = n & 3u;
            w_tile[g][c] = v.x;
            w_tile[g + 32u][c] = v.y;
            w_tile[g + 64u][c] = v.z;
            w_tile[g + 96u][c] = v.w;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TILE_K; kk = kk + 1u) {
            let a = x_tile[kk * 16u + lid.y];
            let b0 = w_tile[kk * 32u + lid.x];
            let b1 = w_tile[kk * 32u + WG_X + lid.x];
            acc0 = acc0 + a.x * b0;
            acc1 = acc1 + a.y * b0;
            acc2 = acc2 + a.z * b0;
            acc3 = acc3 + a.w * b0;
            bcc0 = bcc0 + a.x * b1;
            bcc1 = bcc1 + a.y * b1;
            bcc2 = bcc2 + a.z * b1;
            bcc3 = bcc3 + a.w * b1;
        }
        workgroupBarrier();
    }
    let r = row0 + 4u * lid.y;
    let c = col0 + 4u * lid.x;
    let c1 = c + 4u * WG_X;
    store_row(r, c, acc0);
    store_row(r + 1u, c, acc1);
    store_row(r + 2u, c, acc2);
    store_row(r + 3u, c, acc3);
    store_row(r, c1, bcc0);
    store_row(r + 1u, c1, bcc1);
    store_row(r + 2u, c1, bcc2);
    store_row(r + 3u, c1, bcc3);
}

// Slab depth of `tile_wide` (K values, 2 vec4), and its staging: x's two buffers, then w's. wst[WIDE_X + b · 256 +
// k · 32 + g] holds rows 4g..4g+3 of the block's x at k of the slab in buffer b; wst[WIDE_W + …] likewise columns
// 4g..4g+3 of its w. 16 KiB: WebGPU's default limit.
const WIDE_K: u32 = 8u;
const WIDE_X: u32 = 0u;
const WIDE_W: u32 = 512u;
var<workgroup> wst: array<vec4<f32>, 1024>;

// The i-th vec4 of slab `s` of x: row i / 2 of the block, vec4 2s + i % 2 along K (zero past the edges).
fn wide_x(row0: u32, s: u32, i: u32) -> vec4<f32> {
    let r = row0 + (i >> 1u);
    let kq = 2u * s + (i & 1u);
    let k4 = p.k / 4u;
    if r < p.m && kq < k4 {
        return act4(x4[r * k4 + kq]);
    }
    return vec4<f32>(0.0);
}

// ... and of w, decoded: output column i / 2 of the block.
fn wide_w(col0: u32, s: u32, i: u32) -> vec4<f32> {
    let n = col0 + (i >> 1u);
    let kq = 2u * s + (i & 1u);
    if n < p.n && kq < p.k / 4u {
        let row = w_row(n);
        var d = 1.0;
        if W_BLOCKED {
            d = w_scale(row, kq);
        }
        return w_vec(row, kq, d);
    }
    return vec4<f32>(0.0);
}

// Writes the i-th vec4 of a slab (as wide_x / wide_w load it) into buffer `b` of x's staging (at = WIDE_X) or w's
// (WIDE_W), K-major.
fn wide_put(at: u32, b: u32, i: u32, v: vec4<f32>) {
    let g = at + b * 256u + (i & 1u) * 128u + (i >> 3u);
    let c = (i >> 1u) & 3u;
    wst[g][c] = v.x;
    wst[g + 32u][c] = v.y;
    wst[g + 64u][c] = v.z;
    wst[g + 96u][c] = v.w;
}

fn wide_store(r: u32, c: u32, c1: u32, a: vec4<f32>, b: vec4<f32>) {
    store_row(r, c, a);
    store_row(r, c1, b);
}

// Rows 4·ly.. and 4·(WG_Y + ly).., columns 4·lx.. and 4·(WG_X + lx).. of the workgroup's (8·WG_Y) × (8·WG_X)
// block of y. A slab holds 16·WG_Y vec4 of x and 16·WG_X of w: 16 / WG_X and 16 / WG_Y (1 or 2) per invocation.
fn tile_wide(wid: vec3<u32>, lid: vec3<u32>) {
    let row0 = wid.y * 8u * WG_Y;
    let col0 = wid.x * 8u * WG_X;
    let t = lid.y * WG_X + lid.x;
    let threads = WG_X * WG_Y;
    let nx = 16u * WG_Y;  // vec4 of x in a slab
    let nw = 16u * WG_X;
    let slabs = (p.k / 4u + 1u) / 2u;
    // The first slab, into buffer 0.
    for (var i = t; i < nx; i = i + threads) {
        wide_put(WIDE_X, 0u, i, wide_x(row0, 0u, i));
    }
    for (var i = t; i < nw; i = i + threads) {
        wide_put(WIDE_W, 0u, i, wide_w(col0, 0u, i));
    }
    workgroupBarrier();
    // Accumulators: a{i}{j}: row 4·ly + i (j = 0: columns 4·lx.., j = 1: columns 4·(WG_X + lx)..); c{i}{j}: row
    // 4·(WG_Y + ly) + i.
    var a00 = vec4<f32>(0.0); var a01 = vec4<f32>(0.0); var a10 = vec4<f32>(0.0); var a11 = vec4<f32>(0.0);
    var a20 = vec4<f32>(0.0); var a21 = vec4<f32>(0.0); var a30 = vec4<f32>(0.0); var a31 = vec4<f32>(0.0);
    var c00 = vec4<f32>(0.0); var c01 = vec4<f32>(0.0); var c10 = vec4<f32>(0.0); var c11 = vec4<f32>(0.0);
    var c20 = vec4<f32>(0.0); var c21 = vec4<f32>(0.0); var c30 = vec4<f32>(0.0); var c31 = vec4<f32>(0.0);
    let i1 = t + threads;  // an invocation's second vec4 of a slab, where the slab has two per invocation
    for (var s = 0u; s < slabs; s = s + 1u) {
        let cur = (s & 1u) * 256u;
        // The next slab's loads, issued now and written to the other buffer after this slab's products.
        let more = s + 1u < slabs;
        var px0 = vec4<f32>(0.0); var px1 = vec4<f32>(0.0); var pw0 = vec4<f32>(0.0); var pw1 = vec4<f32>(0.0);
        if more {
            px0 = wide_x(row0, s + 1u, t);
            pw0 = wide_w(col0, s + 1u, t);
            if i1 < nx {
                px1 = wide_x(row0, s + 1u, i1);
            }
            if i1 < nw {
                pw1 = wide_w(col0, s + 1u, i1);
            }
        }
        for (var kk = 0u; kk < WIDE_K; kk = kk + 1u) {
            let x0 = wst[WIDE_X + cur + kk * 32u + lid.y];
            let x1 = wst[WIDE_X + cur + kk * 32u + WG_Y + lid.y];
            let w0 = wst[WIDE_W + cur + kk * 32u + lid.x];
            let w1 = wst[WIDE_W + cur + kk * 32u + WG_X + lid.x];
            a00 = a00 + x0.x * w0; a01 = a01 + x0.x * w1;
            a10 = a10 + x0.y * w0; a11 = a11 + x0.y * w1;
            a20 = a20 + x0.z * w0; a21 = a21 + x0.z * w1;
            a30 = a30 + x0.w * w0; a31 = a31 + x0.w * w1;
            c00 = c00 + x1.x * w0; c01 = c01 + x1.x * w1;
            c10 = c10 + x1.y * w0; c11 = c11 + x1.y * w1;
            c20 = c20 + x1.z * w0; c21 = c21 + x1.z * w1;
            c30 = c30 + x1.w * w0; c31 = c31 + x1.w * w1;
        }
        if more {
            let nxt = 1u - (s & 1u);
            wide_put(WIDE_X, nxt, t, px0);
            wide_put(WIDE_W, nxt, t, pw0);
            if i1 < nx {
                wide_put(WIDE_X, nxt, i1, px1);
            }
            if i1 < nw {
                wide_put(WIDE_W, nxt, i1, pw1);
            }
        }
        // One barrier a slab: the next slab's buffer is complete, and this one's reads are done before the slab
        // after rewrites it.
        workgroupBarrier();
    }
    let r = row0 + 4u * lid.y;
    let r1 = row0 + 4u * (WG_Y + lid.y);
    let c = col0 + 4u * lid.x;
    let c1 = col0 + 4u * (WG_X + lid.x);
    wide_store(r, c, c1, a00, a01);
    wide_store(r + 1u, c, c1, a10, a11);
    wide_store(r + 2u, c, c1, a20, a21);
    wide_store(r + 3u, c, c1, a30, a31);
    wide_store(r1, c, c1, c00, c01);
    wide_store(r1 + 1u, c, c1, c10, c11);
    wide_store(r1 + 2u, c, c1, c20, c21);
    wide_store(r1 + 3u, c, c1, c30, c31);
}
