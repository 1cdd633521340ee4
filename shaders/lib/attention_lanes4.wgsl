// lib/attention_lanes4.wgsl: the vec4 element of lib/attention.wgsl (head_dim and hidden multiples of 4), for
// attention_vec4.wgsl and attention_fixed.wgsl, stored as lib/act.wgsl says (f32, or f16 pairs where swapped).

#include "lib/act.wgsl"

alias V = vec4<f32>;
const LANES: u32 = 4u;

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

alias VS = Act4;

fn v_in(s: Act4) -> vec4<f32> {
    return act4(s);
}

fn v_out(v: vec4<f32>) -> Act4 {
    return pack4(v);
}
