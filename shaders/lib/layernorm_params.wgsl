// The uniform of the LayerNorm kernels, forward (layernorm.wgsl) and backward (layernorm_backward.wgsl):
// `LayerNormParams` in src/backend/gpu/params.rs.

struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    // ln_param_grads: rows per part (layernorm_backward.wgsl); unused elsewhere.
    part_rows: u32,
}
