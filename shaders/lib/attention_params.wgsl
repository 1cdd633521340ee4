// The uniform of the attention kernels, forward (lib/attention.wgsl) and backward (attention_backward.wgsl):
// `AttentionParams` in src/backend/gpu/params.rs. head_dim ≤ DMAX (the host checks).

#include "lib/dropout.wgsl"

struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
    hidden: u32,
    scale: f32,
    // Dropout on the probabilities (read only by the pipelines made with DROPOUT = 1): lib/dropout.wgsl.
    drop_threshold: u32,
    drop_key: u32,
    drop_scale: f32,
    // Rows of DeBERTa's projected relative table (attention_backward.wgsl with DISENTANGLED = 1 only).
    pos_rows: u32,
    _pad1: u32,
    _pad2: u32,
}

// 1: dropout on the probabilities (training, `Backend::attention_dropout` and its backward); 0: none (inference,
// and the default, so the inference pipelines compile exactly the kernel without it).
override DROPOUT: u32 = 0u;

const DMAX: u32 = 128u;  // largest head_dim supported (host checks)
