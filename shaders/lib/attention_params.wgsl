// The uniform of the attention kernels, forward (lib/attention.wgsl) and backward (attention_backward.wgsl):
// `AttentionParams` in src/backend/gpu/params.rs. head_dim ≤ DMAX (the host checks).

struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
    hidden: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

const DMAX: u32 = 128u;  // largest head_dim supported (host checks)
