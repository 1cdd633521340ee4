// gather.wgsl: y[i] = x[rows[i]] (the [CLS] rows b*T, or the [MASK] rows), and `widen`, f16 activations to f32.
//
// Bindings (group 0):
//   0  p     uniform Params { out_rows, cols }
//   1  rows  (out_rows) u32   validated on the host (< rows of x)
//   2  x     (M, cols)  u32   words of the rows: f32 values, or pairs of f16 ones (cols counts words)
//   3  y     (out_rows, cols) u32
//
// gather_rows copies words as they are, so one kernel serves f32 rows and rows of f16 pairs (an even number of
// values a row). One invocation per output word.
//
// widen: y[i] = value i of x as f32, x holding f16 pairs (lib/act_f16.wgsl's layout), i < out_rows (cols unused):
// how an op with no f16 variant reads an activation of the f16 mode. One invocation per value.

struct Params {
    out_rows: u32,
    cols: u32,
    _pad0: u32,
    _pad1: u32,
}

override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> rows: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>;

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

@compute @workgroup_size(WG)
fn widen(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if i >= p.out_rows {
        return;
    }
    y[i] = bitcast<u32>(unpack2x16float(x[i >> 1u])[i & 1u]);
}
