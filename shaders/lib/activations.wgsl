// lib/activations.wgsl: the activations of BERT checkpoints and their derivatives, in f32.
//
// Codes (`Activation::shader_code` in src/activation.rs): 0 none, 1 GELU (erf, the
// exact one), 2 GELU (tanh approximation), 3 ReLU, 4 tanh, 5 SiLU. A kernel passes the code as an override constant (matmul's
// epilogue) or a uniform (train.wgsl's act_grad); with a constant the switch folds away.

// erf by Abramowitz & Stegun 7.1.26: |error| ≤ 1.5e-7 for all x, well under f32 GELU tolerances.
fn erf_as(v: f32) -> f32 {
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let r = 1.0 - poly * exp(-a * a);
    return select(r, -r, v < 0.0);
}

// tanh through exp, clamped so exp never overflows (|tanh(15)| rounds to 1 in f32 anyway).
fn tanh_safe(v: f32) -> f32 {
    let c = clamp(v, -15.0, 15.0);
    let e = exp(2.0 * c);
    return (e - 1.0) / (e + 1.0);
}

// √(2/π), the tanh-GELU's scale.
const GELU_TANH_C: f32 = 0.79788456080286536;

// act(z) for activation `code`.
fn activate(code: u32, z: f32) -> f32 {
    switch code {
        case 1u: { return 0.5 * z * (1.0 + erf_as(z * 0.70710678118654752)); }
        case 2u: { return 0.5 * z * (1.0 + tanh_safe(GELU_TANH_C * (z + 0.044715 * z * z * z))); }
        case 3u: { return max(z, 0.0); }
        case 4u: { return tanh_safe(z); }
        // x·σ(x); for z < −88 exp(−z) is +inf and the quotient −0, as torch gives.
        case 5u: { return z / (1.0 + exp(-z)); }
        default: { return z; }
    }
}

// act'(x) for activation `code`: the derivatives of cpu/train.rs `activation_derivative`.
fn activate_grad(code: u32, x: f32) -> f32 {
    switch code {
        // Φ(x) + x·φ(x)
        case 1u: { return 0.5 * (1.0 + erf_as(x * 0.70710678118654752)) + x * 0.3989422804014327 * exp(-0.5 * x * x); }
        case 2u: {
            let t = tanh_safe(GELU_TANH_C * (x + 0.044715 * x * x * x));
            return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_TANH_C * (1.0 + 3.0 * 0.044715 * x * x);
        }
        case 3u: { return select(0.0, 1.0, x > 0.0); }
        case 4u: { let t = tanh_safe(x); return 1.0 - t * t; }
        case 5u: { let s = 1.0 / (1.0 + exp(-x)); return s * (1.0 + x * (1.0 - s)); }
        default: { return 1.0; }
    }
}
