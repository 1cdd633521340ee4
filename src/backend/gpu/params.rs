//! The uniform `Params` struct of every shader, twinned in Rust. `FIELDS` lists (name, byte offset, type) so a test
//! can check each twin against the WGSL declaration (parsed with naga): same fields, same order, same offsets.

macro_rules! params {
    ($(#[$doc:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name { $(pub $field: $ty),* }

        impl $name {
            /// (field name, byte offset, WGSL scalar type) in declaration order.
            pub const FIELDS: &'static [(&'static str, usize, &'static str)] =
                &[$((stringify!($field), std::mem::offset_of!($name, $field), stringify!($ty))),*];
        }
    };
}

params!(
    /// `shaders/matmul.wgsl`, `shaders/matmul_packed.wgsl`: y (m, n) = act(x (m, k) · w (n, k)ᵀ + bias).
    MatmulParams { m: u32, n: u32, k: u32, _pad: u32 }
);
params!(
    /// `shaders/attention.wgsl`, `shaders/attention_vec4.wgsl`, `shaders/attention_split.wgsl`,
    /// `shaders/attention_backward.wgsl`.
    AttentionParams {
        batch: u32, seq: u32, heads: u32, head_dim: u32, hidden: u32, scale: f32,
        drop_threshold: u32, drop_key: u32, drop_scale: f32, pos_rows: u32, _pad1: u32, _pad2: u32,
    }
);
params!(
    /// `shaders/layernorm.wgsl`, `shaders/layernorm_backward.wgsl`.
    LayerNormParams { rows: u32, cols: u32, eps: f32, part_rows: u32 }
);
params!(
    /// `shaders/embeddings.wgsl`.
    EmbeddingsParams { rows: u32, seq: u32, hidden: u32, eps: f32 }
);
params!(
    /// `shaders/pool.wgsl`.
    PoolParams { batch: u32, seq: u32, hidden: u32, mode: u32 }
);
params!(
    /// `shaders/gather.wgsl`.
    GatherParams { out_rows: u32, cols: u32, _pad0: u32, _pad1: u32 }
);

params!(
    /// `shaders/train.wgsl` (one struct for its four entry points; see the shader's header for which fields each
    /// reads).
    TrainParams {
        m: u32, n: u32, k: u32, flags: u32,
        lr: f32, wd: f32, beta1: f32, beta2: f32, eps: f32, bc1: f32, bc2_sqrt: f32, grad_scale: f32,
        max_norm: f32, _pad0: u32, _pad1: u32, _pad2: u32,
    }
);
params!(
    /// `shaders/backward.wgsl` (one struct for its entry points; see the shader's header for which fields each
    /// reads).
    BackwardParams { rows: u32, cols: u32, len: u32, code: u32 }
);
params!(
    /// `shaders/dropout.wgsl`.
    DropoutParams { len: u32, threshold: u32, key: u32, scale: f32 }
);
params!(
    /// `shaders/rotary.wgsl`.
    RotaryParams { rows: u32, seq: u32, heads: u32, head_dim: u32 }
);
params!(
    /// `shaders/glu.wgsl`.
    GluParams { rows: u32, cols: u32, code: u32, _pad: u32 }
);

/// Every shader module but the f16-activation variants ([`modules`] adds them): (name, its file under `shaders/`,
/// its Params twin's size and fields). The WGSL the GPU compiles is the file with its `#include`s resolved
/// ([`super::wgsl::compose`]).
pub const SHADERS: &[(&str, &str, usize, &[(&str, usize, &str)])] = &[
    ("matmul", "matmul.wgsl", std::mem::size_of::<MatmulParams>(), MatmulParams::FIELDS),
    ("matmul_packed", "matmul_packed.wgsl", std::mem::size_of::<MatmulParams>(), MatmulParams::FIELDS),
    ("matmul_sg", "matmul.wgsl", std::mem::size_of::<MatmulParams>(), MatmulParams::FIELDS),
    ("matmul_packed_sg", "matmul_packed.wgsl", std::mem::size_of::<MatmulParams>(), MatmulParams::FIELDS),
    ("attention", "attention.wgsl", std::mem::size_of::<AttentionParams>(), AttentionParams::FIELDS),
    ("attention_vec4", "attention_vec4.wgsl", std::mem::size_of::<AttentionParams>(), AttentionParams::FIELDS),
    ("attention_d32", "attention_fixed.wgsl", std::mem::size_of::<AttentionParams>(), AttentionParams::FIELDS),
    ("attention_d64", "attention_fixed.wgsl", std::mem::size_of::<AttentionParams>(), AttentionParams::FIELDS),
    ("attention_split", "attention_split.wgsl", std::mem::size_of::<AttentionParams>(), AttentionParams::FIELDS),
    ("attention_split_sg", "attention_split.wgsl", std::mem::size_of::<AttentionParams>(), AttentionParams::FIELDS),
    ("layernorm", "layernorm.wgsl", std::mem::size_of::<LayerNormParams>(), LayerNormParams::FIELDS),
    ("layernorm_sg", "layernorm.wgsl", std::mem::size_of::<LayerNormParams>(), LayerNormParams::FIELDS),
    ("embeddings", "embeddings.wgsl", std::mem::size_of::<EmbeddingsParams>(), EmbeddingsParams::FIELDS),
    ("embeddings_sg", "embeddings.wgsl", std::mem::size_of::<EmbeddingsParams>(), EmbeddingsParams::FIELDS),
    ("pool", "pool.wgsl", std::mem::size_of::<PoolParams>(), PoolParams::FIELDS),
    ("gather", "gather.wgsl", std::mem::size_of::<GatherParams>(), GatherParams::FIELDS),
    ("train", "train.wgsl", std::mem::size_of::<TrainParams>(), TrainParams::FIELDS),
    ("backward", "backward.wgsl", std::mem::size_of::<BackwardParams>(), BackwardParams::FIELDS),
    ("backward_sg", "backward.wgsl", std::mem::size_of::<BackwardParams>(), BackwardParams::FIELDS),
    ("layernorm_backward", "layernorm_backward.wgsl", std::mem::size_of::<LayerNormParams>(), LayerNormParams::FIELDS),
    ("layernorm_backward_sg", "layernorm_backward.wgsl", std::mem::size_of::<LayerNormParams>(), LayerNormParams::FIELDS),
    ("attention_backward", "attention_backward.wgsl", std::mem::size_of::<AttentionParams>(), AttentionParams::FIELDS),
    ("dropout", "dropout.wgsl", std::mem::size_of::<DropoutParams>(), DropoutParams::FIELDS),
    ("rotary", "rotary.wgsl", std::mem::size_of::<RotaryParams>(), RotaryParams::FIELDS),
    ("glu", "glu.wgsl", std::mem::size_of::<GluParams>(), GluParams::FIELDS),
    ("weight_grad", "weight_grad.wgsl", std::mem::size_of::<MatmulParams>(), MatmulParams::FIELDS),
];

/// Modules made from one file with constants written before it, or with some of its pieces swapped for others:
/// (name, the constants, (piece, instead) swaps, the features the adapter needs). Their file (SHADERS) names what
/// it leaves to them. The f16-activation variants are not listed: [`source`] makes each from its base module here
/// and the `HALF` / `HALF_IN` pieces.
pub const VARIANTS: &[(&str, &str, &[(&str, &str)], wgpu::Features)] = &[
    ("attention_d32", "const HEAD_V: u32 = 8u;  // head_dim 32, in vec4", &[], wgpu::Features::empty()),
    ("attention_d64", "const HEAD_V: u32 = 16u;  // head_dim 64, in vec4", &[], wgpu::Features::empty()),
    ("matmul_sg", "", SUBGROUP_BLOCKS, wgpu::Features::SUBGROUP),
    ("matmul_packed_sg", "", SUBGROUP_BLOCKS, wgpu::Features::SUBGROUP),
    ("layernorm_sg", "", SUBGROUP_SUMS, wgpu::Features::SUBGROUP),
    ("embeddings_sg", "", SUBGROUP_SUMS, wgpu::Features::SUBGROUP),
    ("backward_sg", "", SUBGROUP_SUMS, wgpu::Features::SUBGROUP),
    ("layernorm_backward_sg", "", SUBGROUP_SUMS, wgpu::Features::SUBGROUP),
    ("attention_split_sg", "", SUBGROUP_SCORES, wgpu::Features::SUBGROUP),
];

/// The f16-activation mode ([`super::GpuBackend::set_f16_activations`]): each module that reads activations, its
/// variant reading and writing them as f16 pairs (`_h`), and its variant reading f16 and writing f32 (`_hx`: a
/// matmul whose N is odd, the pooled mean); "" where there is none. A module not listed here reads f32 alone: the
/// host widens an f16 input for it first.
pub const HALF_MODULES: &[(&str, &str, &str)] = &[
    ("matmul", "matmul_h", "matmul_hx"),
    ("matmul_packed", "matmul_packed_h", "matmul_packed_hx"),
    ("matmul_sg", "matmul_sg_h", "matmul_sg_hx"),
    ("matmul_packed_sg", "matmul_packed_sg_h", "matmul_packed_sg_hx"),
    ("attention_vec4", "attention_vec4_h", ""),
    ("attention_d32", "attention_d32_h", ""),
    ("attention_d64", "attention_d64_h", ""),
    ("attention_split", "attention_split_h", ""),
    ("attention_split_sg", "attention_split_sg_h", ""),
    ("layernorm", "layernorm_h", ""),
    ("layernorm_sg", "layernorm_sg_h", ""),
    ("embeddings", "embeddings_h", ""),
    ("embeddings_sg", "embeddings_sg_h", ""),
    ("pool", "", "pool_hx"),
];

/// Module `name`'s f16-activation variant: reading f16 and writing f16 (`out_f16`) or f32; `None` where it has none.
pub fn half_module(name: &str, out_f16: bool) -> Option<&'static str> {
    let &(_, h, hx) = HALF_MODULES.iter().find(|m| m.0 == name)?;
    let v = if out_f16 { h } else { hx };
    (!v.is_empty()).then_some(v)
}

/// Activations read as f16 pairs (lib/act_f16.wgsl), written as f32.
const HALF_IN: &[(&str, &str)] = &[("lib/act.wgsl", "lib/act_f16.wgsl")];
/// Activations read and written as f16 pairs.
const HALF: &[(&str, &str)] = &[
    ("lib/act.wgsl", "lib/act_f16.wgsl"),
    ("lib/matmul_store.wgsl", "lib/matmul_store_f16.wgsl"),
    ("lib/layernorm_store.wgsl", "lib/layernorm_store_f16.wgsl"),
];
/// The row kernels' workgroup sums made with subgroup operations ([`super::Tuning::row_subgroups`]).
const SUBGROUP_SUMS: &[(&str, &str)] = &[("lib/reduce.wgsl", "lib/reduce_subgroup.wgsl")];
/// The K-split matmul's sum of partial blocks made with subgroup operations ([`super::MatmulKernel::ReduceSubgroup`]).
const SUBGROUP_BLOCKS: &[(&str, &str)] = &[("lib/block_sum.wgsl", "lib/block_sum_subgroup.wgsl")];

/// The split attention's scores exchanged with subgroup shuffles ([`super::AttentionKernel::SplitSubgroup`]).
const SUBGROUP_SCORES: &[(&str, &str)] = &[("lib/split_tile.wgsl", "lib/split_tile_subgroup.wgsl")];

/// The module of shader `name` that the tuning picks: `name` itself, or its `_sg` variant where the row kernels'
/// sums use subgroups (every module that includes lib/reduce.wgsl has one).
pub fn row_module(name: &'static str, subgroups: bool) -> &'static str {
    if !subgroups {
        return name;
    }
    match name {
        "layernorm" => "layernorm_sg",
        "embeddings" => "embeddings_sg",
        "backward" => "backward_sg",
        "layernorm_backward" => "layernorm_backward_sg",
        other => other,
    }
}

/// The module `name` is made from: itself, or for an f16-activation variant (`HALF_MODULES`) its base module and
/// the pieces that read (and write) f16.
fn made_from(name: &str) -> (&str, &'static [(&'static str, &'static str)]) {
    match HALF_MODULES.iter().find(|m| m.1 == name || m.2 == name) {
        Some(m) => (m.0, if m.1 == name { HALF } else { HALF_IN }),
        None => (name, &[]),
    }
}

/// Every shader module: [`SHADERS`]' rows, then each f16-activation variant with its base module's file and Params.
pub fn modules() -> impl Iterator<Item = (&'static str, &'static str, usize, &'static [(&'static str, usize, &'static str)])> {
    let halves = HALF_MODULES.iter().flat_map(|&(base, h, hx)| {
        let &(_, file, size, fields) = SHADERS.iter().find(|s| s.0 == base).expect("HALF_MODULES names SHADERS' modules");
        [h, hx].into_iter().filter(|v| !v.is_empty()).map(move |v| (v, file, size, fields))
    });
    SHADERS.iter().copied().chain(halves)
}

/// The optional features module `name` needs of the adapter (none for every module the default tuning runs).
pub fn features(name: &str) -> wgpu::Features {
    let (base, _) = made_from(name);
    VARIANTS.iter().find(|v| v.0 == base).map_or(wgpu::Features::empty(), |v| v.3)
}

/// The WGSL of shader module `name`, composed: its file, with its variant's constants and swaps (`VARIANTS`), and
/// for an f16-activation variant the f16 pieces as well.
pub fn source(name: &str) -> Result<super::wgsl::Composed, String> {
    let (base, half) = made_from(name);
    let file = SHADERS.iter().find(|s| s.0 == base).map(|s| s.1).ok_or_else(|| format!("no shader named {name}"))?;
    let (prelude, swaps) = VARIANTS.iter().find(|v| v.0 == base).map_or(("", &[][..]), |v| (v.1, v.2));
    let swaps: Vec<(&str, &str)> = swaps.iter().chain(half).copied().collect();
    if prelude.is_empty() && swaps.is_empty() {
        return super::wgsl::compose(file);
    }
    super::wgsl::compose_swapped(file, "../src/backend/gpu/params.rs (VARIANTS)", prelude, &swaps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each f16-activation variant is its base module (constants and swaps included) with the f16 pieces: `_h`
    /// reads and writes f16 pairs, `_hx` reads them and writes f32 (checked on the matmuls' store), and both keep
    /// the base's subgroup pieces, constants and features.
    #[test]
    fn half_variants_are_their_base_with_f16_pieces() {
        for &(base, h, hx) in HALF_MODULES {
            let b = source(base).unwrap().text;
            assert!(b.contains("alias Act = f32;"), "{base} reads f32");
            for (v, writes_f16) in [(h, true), (hx, false)] {
                if v.is_empty() {
                    continue;
                }
                let t = source(v).unwrap().text;
                assert!(t.contains("alias Act = u32;"), "{v} reads f16 pairs");
                let store = if base.starts_with("matmul") { "y[w] = pack2x16float" } else { "" };
                if !store.is_empty() {
                    assert_eq!(t.contains(store), writes_f16, "{v} writes f16 pairs: {writes_f16}");
                }
                assert_eq!(t.contains("subgroupAdd"), b.contains("subgroupAdd"), "{v} keeps {base}'s sums");
                assert_eq!(t.contains("const HEAD_V"), b.contains("const HEAD_V"), "{v} keeps {base}'s constants");
                assert_eq!(features(v), features(base), "{v}");
                assert!(modules().any(|m| m.0 == v), "{v} is listed");
            }
        }
        assert_eq!(modules().count(), SHADERS.len() + 18);
    }
}
