// lib/act_f16.wgsl: lib/act.wgsl's swap for the f16-activation mode. Activations are f16, two a word, value 2j in
// the low half of word j (what `pack2x16float` makes, and how an f16 weight is stored); arithmetic stays f32.
// `pack2x16float` / `unpack2x16float` are core WGSL, so this needs no `shader-f16` feature. A value beyond f16's
// range (|v| > 65504) is not representable: the load-time check (src/engine/canary.rs) compares the mode's output
// with the CPU's and refuses a model where that happens.

alias Act = u32;
alias Act4 = vec2<u32>;

fn act_word(i: u32) -> u32 {
    return i >> 1u;
}

fn act_value(w: u32, i: u32) -> f32 {
    return unpack2x16float(w)[i & 1u];
}

fn act4(v: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y));
}

fn pack4(v: vec4<f32>) -> vec2<u32> {
    return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
}
