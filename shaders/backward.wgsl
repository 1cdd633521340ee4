// backward.wgsl: the elementwise ops, reductions and scatter-adds of fine-tuning the encoder (their CPU twins are in
// src/backend/cpu/train.rs and norm.rs; the math in src/backend/mod.rs, "Backward ops").
//
// Bindings (group 0), by entry point:
//   0  p       uniform Params (all)
//   add:         1 a (len) f32, 2 b (len) f32, 3 y (len) f32                    y = a + b
//   activation:  1 a (len) f32, 3 y (len) f32                                    y = act(a), act = p.code
//   col_sum:     1 a (rows, cols) f32, 3 y (parts, cols) f32                     y_qj = Σ a_rj over part q's rows
//   transpose_pad: 1 a (rows, cols) f32, 3 y (cols or rows, len) f32             y = aᵀ or a, zero-padded
//   sum_reduce:  1 a (len) f32, 3 y (rows + one per workgroup) f32               y_(rows+g) = Σ a (or a²), chunk g
//   gather_sum:  1 a (src rows, cols) f32, 4 csr (rows + 1 + count) u32, 3 y (rows, cols) f32
//
// Params by entry point: add, activation (len; code = activation code of lib/activations.wgsl); col_sum (rows,
// cols, len = rows per part); transpose_pad (rows, cols of a; len = y's row length; code = 1 to transpose);
// sum_reduce (len, cols = values per workgroup, code = 1 to square each value first, rows = where in y its sums
// start); gather_sum (rows = output rows, cols).
//
// No f32 atomics exist in WGSL, so every output element is owned by one invocation: the scatter-adds (the
// embedding tables' gradients, back through gather_rows) are gathers over a CSR list the host builds, output row
// r summing the source rows csr[rows + 1 + k] for k in csr[r]..csr[r + 1], in increasing source order (the order in
// which the CPU adds them). Sizes are all in Params; the grid is 2-D (linearised) so any length fits.

#include "lib/activations.wgsl"
#include "lib/reduce.wgsl"

struct Params {
    rows: u32,
    cols: u32,
    len: u32,
    code: u32,
}

// Invocations per workgroup (sum_reduce: a power of two ≤ 256, for lib/reduce.wgsl).
override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> csr: array<u32>;

fn index(lid: u32, wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn add(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
       @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(lid, wid, nwg);
    if i >= p.len {
        return;
    }
    y[i] = a[i] + b[i];
}

@compute @workgroup_size(WG)
fn activation(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(lid, wid, nwg);
    if i >= p.len {
        return;
    }
    y[i] = activate(p.code, a[i]);
}

// One invocation per column of one part: y (parts, cols), part q summing rows q·len .. min((q+1)·len, rows) in
// order. The host runs it once (len = rows: one part, every row in order) or twice (parts of rows, then the
// parts), so that a tall matrix is summed by rows/len times the invocations.
@compute @workgroup_size(WG)
fn col_sum(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(lid, wid, nwg);
    let q = i / p.cols;
    let j = i % p.cols;
    let r0 = q * p.len;
    // Part 0 always writes (zeros where there are no rows); the grid's rounding past the last part writes nothing.
    if q > 0u && r0 >= p.rows {
        return;
    }
    let r1 = min(r0 + p.len, p.rows);
    var acc = 0.0;
    for (var r = r0; r < r1; r++) {
        acc += a[r * p.cols + j];
    }
    y[i] = acc;
}

// y (cols, len) = aᵀ, or (rows, len) = a, with a (rows, cols) and the columns past a's own zero (len ≥ the
// width): a block of 16 × 16 of y per workgroup, staged through workgroup memory so that both the reads and the
// writes are along rows. code = 1: transpose. The training matmul's operands, made K-contiguous and padded to a
// multiple of 4 for the forward's matmul kernels.
var<workgroup> tile: array<f32, 272>;  // 16 × 17: a column's values fall in different banks

@compute @workgroup_size(16, 16)
fn transpose_pad(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = p.code == 1u;
    // The block of a that this block of y comes from: rows ar.., columns ac...
    let ar = select(wid.y, wid.x, t) * 16u;
    let ac = select(wid.x, wid.y, t) * 16u;
    let r = ar + lid.y;
    let c = ac + lid.x;
    var v = 0.0;
    if r < p.rows && c < p.cols {
        v = a[r * p.cols + c];
    }
    tile[lid.y * 17u + lid.x] = v;
    workgroupBarrier();
    let out_rows = select(p.rows, p.cols, t);
    let i = wid.y * 16u + lid.y;
    let j = wid.x * 16u + lid.x;
    if i < out_rows && j < p.len {
        y[i * p.len + j] = select(tile[lid.y * 17u + lid.x], tile[lid.x * 17u + lid.y], t);
    }
}

// Workgroup g sums (the squares of) a[g·cols .. min((g+1)·cols, len)] into y[rows + g]: each invocation a strided
// part, then the workgroup's tree. The host runs it twice for a long tensor (squares into one partial per
// workgroup, then the partials in one workgroup), once for a short one; for many tensors, once per tensor into its
// own part of one buffer of partials, then once over that buffer.
@compute @workgroup_size(WG)
fn sum_reduce(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = wid.y * nwg.x + wid.x;
    let start = g * p.cols;
    let end = min(start + p.cols, p.len);
    var acc = 0.0;
    for (var i = start + lid; i < end; i += WG) {
        let v = a[i];
        acc += select(v, v * v, p.code == 1u);
    }
    // Every invocation of the workgroup reaches the barriers. Workgroups past the end (a 2-D grid rounds up) write
    // nothing; workgroup 0 always writes (0 for an empty tensor).
    let total = wg_sum(lid, acc);
    if lid == 0u && (g == 0u || start < p.len) {
        y[p.rows + g] = total;
    }
}

// One invocation per output element (r, j): Σ over r's CSR list of a[src, j], in list order.
@compute @workgroup_size(WG)
fn gather_sum(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(lid, wid, nwg);
    if i >= p.rows * p.cols {
        return;
    }
    let r = i / p.cols;
    let j = i % p.cols;
    let list = p.rows + 1u;
    var acc = 0.0;
    for (var k = csr[r]; k < csr[r + 1u]; k++) {
        acc += a[csr[list + k] * p.cols + j];
    }
    y[i] = acc;
}
