// glu.wgsl: the gated feed-forward's product, y = up ⊙ act(gate) for x (R, 2I) holding [up | gate] per row, and its
// backward, dx = [dy ⊙ act(gate) | dy ⊙ up ⊙ act'(gate)] (R, 2I). The CPU twins: src/backend/cpu/rotary.rs `glu`,
// `glu_backward`; the math: `Backend::glu`, `Backend::glu_backward` in src/backend/mod.rs.
//
// Bindings (group 0):
//   0  p   uniform Params { rows = R, cols = I, code = activation code of lib/activations.wgsl }
//   1  x   (R, 2I) f32
//   2  dy  (R, I) f32 (glu_backward)
//   3  y   (R, I) f32 (glu); dx (R, 2I) f32 (glu_backward)
//
// One invocation per element of y (glu) or of dy (glu_backward: both of its dx elements) over a 2-D grid
// (linearised) so any size fits.

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
@group(0) @binding(2) var<storage, read> dy: array<f32>;
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

@compute @workgroup_size(WG)
fn glu_backward(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if i >= p.rows * p.cols {
        return;
    }
    let r = i / p.cols;
    let c = i % p.cols;
    let up = x[r * 2u * p.cols + c];
    let gate = x[r * 2u * p.cols + p.cols + c];
    let g = dy[i];
    y[r * 2u * p.cols + c] = g * activate(p.code, gate);
    y[r * 2u * p.cols + p.cols + c] = g * up * activate_grad(p.code, gate);
}
