// attention_d64.wgsl: attention_vec4.wgsl for head_dim 64 exactly (BERT-tiny to -large, most of the family): the head's length is a
// constant, so its loops unroll and q and the accumulator stay in registers (lib/attention.wgsl).

#include "lib/attention.wgsl"
#include "lib/attention_lanes4.wgsl"

const VMAX: u32 = 16u;

fn head_v() -> u32 {
    return 16u;
}

@compute @workgroup_size(WG)
fn attention_d64(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    attend(gid, wid);
}
