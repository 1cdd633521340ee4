// The uniform of the LayerNorm kernels, forward (layernorm.wgsl) and backward (layernorm_backward.wgsl):
// `LayerNormParams` in src/backend/gpu/params.rs.

struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    _pad: u32,
}
