// glu.wgsl: the gated feed-forward's product, y = up ⊙ act(gate) for x (R, 2I) holding [up | gate] per row. The CPU
// twin: src/backend/cpu/rotary.rs `glu`; the math: `Backend::glu` in src/backend/mod.rs.
//
// Bindings (group 0):
//   0  p  uniform Params { rows = R, cols = I, code = activation code of lib/activations.wgsl }
//   1  x  (R, 2I) f32
//   3  y  (R, I) f32
//
// One invocation per element of y over a 2-D grid (linearised) so any size fits.

#include "lib/activations.wgsl"

struct Params {
    rows: u32,
    cols: u32,
    code: u32,
    _pad: u32,
}

override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn glu(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
       @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if i >= p.rows * p.cols {
        return;
    }
    let r = i / p.cols;
    let c = i % p.cols;
    let up = x[r * 2u * p.cols + c];
    y[i] = up * activate(p.code, x[r * 2u * p.cols + p.cols + c]);
}
