// attention_vec4.wgsl: lib/attention.wgsl with every head_dim loop on vec4<f32> (q, k, v, the accumulator, the
// output), for head_dim and hidden multiples of 4 (every BERT: d = 32, 64). The host picks it when the shapes allow
// (src/backend/gpu/attention.rs); attention.wgsl serves the rest.

#include "lib/attention.wgsl"
#include "lib/attention_lanes4.wgsl"

const VMAX: u32 = DMAX / 4u;

fn head_v() -> u32 {
    return p.head_dim / 4u;
}

@compute @workgroup_size(WG)
fn attention_vec4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    attend(gid, wid);
}
