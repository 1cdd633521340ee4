// dropout.wgsl: y = x ⊙ M · scale elementwise (training forwards, and the same call back through them), M the mask
// of lib/dropout.wgsl over x's row-major element indices. The CPU twin: src/backend/cpu/train.rs `dropout`; the
// math: `Dropout` in src/backend/mod.rs.
//
// Bindings (group 0):
//   0  p  uniform Params { len, threshold = round(p·2³²), key, scale = 1/(1 − p) }
//   1  x  (len) f32
//   3  y  (len) f32
//
// One invocation per element over a 2-D grid (linearised) so any length fits.

#include "lib/dropout.wgsl"

struct Params {
    len: u32,
    threshold: u32,
    key: u32,
    scale: f32,
}

override WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn dropout(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if i >= p.len {
        return;
    }
    y[i] = select(0.0, x[i] * p.scale, dropout_keeps(p.key, p.threshold, i));
}
