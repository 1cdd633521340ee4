// lib/act.wgsl: how kernels read and write activations stored as f32, one value a word (the default).
// lib/act_f16.wgsl is its swap for the f16-activation mode (`GpuBackend::set_f16_activations`): the same names,
// two f16 values a word. A kernel declares its activation bindings with these types and goes through these
// functions, so one source serves both.
//
//   alias Act                          an element of an activation array, scalar view
//   alias Act4                         four consecutive values as stored (vec4 views)
//   fn act_word(i: u32) -> u32         the element that holds value i
//   fn act_value(w: Act, i: u32) -> f32    value i, from that element
//   fn act4(v: Act4) -> vec4<f32>      four values, decoded
//   fn pack4(v: vec4<f32>) -> Act4     four values, encoded

alias Act = f32;
alias Act4 = vec4<f32>;

fn act_word(i: u32) -> u32 {
    return i;
}

fn act_value(w: f32, i: u32) -> f32 {
    return w;
}

fn act4(v: vec4<f32>) -> vec4<f32> {
    return v;
}

fn pack4(v: vec4<f32>) -> vec4<f32> {
    return v;
}
