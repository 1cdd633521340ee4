//! The tuning knobs of the kernels: workgroup sizes, and which attention kernel.

/// Tuning knobs, passed to the shaders as `override` constants (and so part of the pipeline key). The defaults are
/// the fastest measured on lavapipe (BENCHMARKS.md); [`GpuBackend::new`](super::GpuBackend::new) clamps them to the
/// adapter's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// matmul workgroup (x over output columns, y over rows); each invocation computes 4×8 outputs.
    pub matmul_wg: (u32, u32),
    /// attention: queries (invocations) per workgroup.
    pub attention_wg: u32,
    /// layernorm / embeddings invocations per row (power of two ≤ 256).
    pub row_wg: u32,
    /// mean_pool / gather_rows invocations per workgroup.
    pub elem_wg: u32,
    /// Always the scalar attention kernel (attention.wgsl), even where head_dim allows attention_vec4.wgsl: for
    /// tests and benchmarks of the two.
    pub scalar_attention: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning { matmul_wg: (8, 8), attention_wg: 64, row_wg: 128, elem_wg: 64, scalar_attention: false }
    }
}

impl Tuning {
    /// These knobs clamped to what an adapter with limits `l` allows.
    pub(super) fn clamped(self, l: &wgpu::Limits) -> Tuning {
        let max_inv = l.max_compute_invocations_per_workgroup;
        let cap = |v: u32| prev_pow2(v.min(256).min(max_inv).min(l.max_compute_workgroup_size_x)).max(1);
        let mut t = self;
        t.row_wg = cap(t.row_wg);
        t.elem_wg = cap(t.elem_wg);
        t.attention_wg = cap(t.attention_wg);
        let (mut wx, mut wy) = t.matmul_wg;
        wx = wx.clamp(1, l.max_compute_workgroup_size_x);
        wy = wy.clamp(1, l.max_compute_workgroup_size_y);
        while wx * wy > max_inv {
            if wy >= wx { wy = (wy / 2).max(1) } else { wx = (wx / 2).max(1) }
        }
        t.matmul_wg = (wx, wy);
        t
    }
}

fn prev_pow2(v: u32) -> u32 {
    if v == 0 { 0 } else { 1 << (31 - v.leading_zeros()) }
}
