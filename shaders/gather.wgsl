// gather.wgsl: y[i] = x[rows[i]] (the [CLS] rows b*T, or the [MASK] rows).
//
// Bindings (group 0):
//   0  p     uniform Params { out_rows, cols }
//   1  rows  (out_rows) u32   validated on the host (< rows of x)
//   2  x     (M, cols)  f32
//   3  y     (out_rows, cols) f32
//
// One invocation per output element.

struct Params {
    out_rows: u32,
    cols: u32,
    _pad0: u32,
    _pad1: u32,
}

override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> rows: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn gather_rows(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if i >= p.out_rows * p.cols {
        return;
    }
    let r = i / p.cols;
    let c = i % p.cols;
    y[i] = x[rows[r] * p.cols + c];
}
