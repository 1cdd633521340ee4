// attention_fixed.wgsl: attention_vec4.wgsl with the head's length a constant, HEAD_V vec4, so its loops unroll and
// q and the accumulator stay in registers (lib/attention.wgsl). One source, several modules: the host writes
// `const HEAD_V` before this file for each head it serves (src/backend/gpu/params.rs, VARIANTS: attention_d32 for
// head_dim 32, all-MiniLM-L6-v2's; attention_d64 for head_dim 64, most of the BERT family's).

#include "lib/attention.wgsl"
#include "lib/attention_lanes4.wgsl"

const VMAX: u32 = HEAD_V;

fn head_v() -> u32 {
    return HEAD_V;
}

@compute @workgroup_size(WG)
fn attention_fixed(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    attend(gid, wid);
}
