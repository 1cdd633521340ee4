// attention.wgsl: fused multi-head self-attention, one f32 per step (any head_dim ≤ 128). The kernel, its
// bindings and its algorithm: lib/attention.wgsl. The host takes attention_vec4.wgsl (or attention_fixed.wgsl)
// where head_dim allows.

#include "lib/attention.wgsl"

alias V = f32;
alias VS = f32;
const LANES: u32 = 1u;

fn v_in(s: f32) -> f32 {
    return s;
}

fn v_out(v: f32) -> f32 {
    return v;
}

fn hsum(v: f32) -> f32 {
    return v;
}

const VMAX: u32 = DMAX;

fn head_v() -> u32 {
    return p.head_dim;
}

@compute @workgroup_size(WG)
fn attention(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    attend(gid, wid);
}
