// lib/attention_lanes4.wgsl: the vec4 element of lib/attention.wgsl (head_dim and hidden multiples of 4), for
// attention_vec4.wgsl and attention_fixed.wgsl.

alias V = vec4<f32>;
const LANES: u32 = 4u;

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}
