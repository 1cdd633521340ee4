// attention_d32.wgsl: attention_vec4.wgsl for head_dim 32 exactly (all-MiniLM-L6-v2 and -L12, 384 wide with 12 heads): the head's length is a
// constant, so its loops unroll and q and the accumulator stay in registers (lib/attention.wgsl).

#include "lib/attention.wgsl"
#include "lib/attention_lanes4.wgsl"

const VMAX: u32 = 8u;

fn head_v() -> u32 {
    return 8u;
}

@compute @workgroup_size(WG)
fn attention_d32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    attend(gid, wid);
}
