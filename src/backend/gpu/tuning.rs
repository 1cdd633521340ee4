//! The tuning knobs of the kernels: workgroup sizes, and which attention kernel.

/// Tuning knobs, passed to the shaders as `override` constants (and so part of the pipeline key). The defaults are
/// the fastest measured on lavapipe (BENCHMARKS.md); [`GpuBackend::new`](super::GpuBackend::new) clamps them to the
/// adapter's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// matmul workgroup (x over output columns, y over rows); each invocation computes 4×8 outputs.
    pub matmul_wg: (u32, u32),
    /// The matmul staged through workgroup memory (`tile_shared` in shaders/lib/matmul_tile.wgsl) instead of
    /// loading straight from storage (`tile_4x8`): faster on real GPUs, slower on CPU adapters. Needs
    /// `matmul_wg` ≤ 16 × 16 (clamped so).
    pub matmul_tiled: bool,
    /// attention: queries (invocations) per workgroup.
    pub attention_wg: u32,
    /// Which attention kernel, where the head allows it (the scalar one serves every other head_dim).
    pub attention: AttentionKernel,
    /// layernorm / embeddings invocations per row (power of two ≤ 256).
    pub row_wg: u32,
    /// mean_pool / gather_rows invocations per workgroup.
    pub elem_wg: u32,
}

/// The attention kernels (shaders/lib/attention.wgsl composed three ways).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionKernel {
    /// attention_vec4.wgsl: vec4 steps, any head_dim that is a multiple of 4.
    #[default]
    Vec4,
    /// attention_d32.wgsl / attention_d64.wgsl: vec4 steps with the head's length fixed, for head_dim 32 and 64
    /// (elsewhere Vec4); their loops unroll.
    Fixed,
    /// attention.wgsl, one f32 per step, even where vec4 would do: for tests and benchmarks.
    Scalar,
}

impl AttentionKernel {
    const NAMES: [(&'static str, AttentionKernel); 3] =
        [("vec4", AttentionKernel::Vec4), ("fixed", AttentionKernel::Fixed), ("scalar", AttentionKernel::Scalar)];

    fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, k)| *k == self).map_or("vec4", |(n, _)| n)
    }

    /// (shader and entry point) for a head of `head_dim`.
    pub(crate) fn shader(self, head_dim: usize) -> &'static str {
        match (self, head_dim) {
            (AttentionKernel::Scalar, _) => "attention",
            (_, d) if d % 4 != 0 => "attention",
            (AttentionKernel::Fixed, 32) => "attention_d32",
            (AttentionKernel::Fixed, 64) => "attention_d64",
            _ => "attention_vec4",
        }
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            matmul_wg: (8, 8),
            matmul_tiled: false,
            attention_wg: 64,
            attention: AttentionKernel::Vec4,
            row_wg: 128,
            elem_wg: 64,
        }
    }
}

impl Tuning {
    /// These knobs clamped to what an adapter with limits `l` allows.
    pub(crate) fn clamped(self, l: &wgpu::Limits) -> Tuning {
        let max_inv = l.max_compute_invocations_per_workgroup;
        let cap = |v: u32| prev_pow2(v.min(256).min(max_inv).min(l.max_compute_workgroup_size_x)).max(1);
        let mut t = self;
        t.row_wg = cap(t.row_wg);
        t.elem_wg = cap(t.elem_wg);
        t.attention_wg = cap(t.attention_wg);
        let (mut wx, mut wy) = t.matmul_wg;
        if l.max_compute_workgroup_storage_size < TILED_WORKGROUP_BYTES {
            t.matmul_tiled = false;
        }
        let tile_cap = if t.matmul_tiled { MAX_TILED_WG } else { u32::MAX };
        wx = wx.clamp(1, l.max_compute_workgroup_size_x.min(tile_cap));
        wy = wy.clamp(1, l.max_compute_workgroup_size_y.min(tile_cap));
        while wx * wy > max_inv {
            if wy >= wx { wy = (wy / 2).max(1) } else { wx = (wx / 2).max(1) }
        }
        t.matmul_wg = (wx, wy);
        t
    }
}

/// Workgroup memory of the tiled matmul: x_tile (256 vec4) and w_tile (512 vec4).
const TILED_WORKGROUP_BYTES: u32 = (256 + 512) * 16;

/// The largest matmul workgroup side the tiled kernel's staging arrays hold (x_tile, w_tile in
/// shaders/lib/matmul_tile.wgsl).
pub const MAX_TILED_WG: u32 = 16;

fn prev_pow2(v: u32) -> u32 {
    if v == 0 { 0 } else { 1 << (31 - v.leading_zeros()) }
}

/// `matmul=tiled:16x16,attention=fixed:64,row=128,elem=64`: how `bench`, the calibration's cache and `BERTGPU_TUNING`
/// write a tuning ([`Tuning::parse`] reads it back).
impl std::fmt::Display for Tuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (wx, wy) = self.matmul_wg;
        write!(
            f,
            "matmul={}:{wx}x{wy},attention={}:{},row={},elem={}",
            if self.matmul_tiled { "tiled" } else { "direct" },
            self.attention.name(),
            self.attention_wg,
            self.row_wg,
            self.elem_wg
        )
    }
}

impl Tuning {
    /// Reads what [`Display`](std::fmt::Display) writes; a knob left out keeps its default. An unknown key or a
    /// malformed value is an error naming it.
    pub fn parse(spec: &str) -> Result<Tuning, String> {
        let mut t = Tuning::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| format!("tuning `{part}`: write key=value"))?;
            let num = |v: &str| v.parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| format!("tuning `{part}`: `{v}` is not a positive number"));
            let kind_size = |kinds: &[&str]| -> Result<(usize, &str), String> {
                let (kind, size) = value.split_once(':').ok_or_else(|| format!("tuning `{part}`: write {key}={}:SIZE", kinds.join("|")))?;
                let i = kinds.iter().position(|k| *k == kind).ok_or_else(|| format!("tuning `{part}`: `{kind}` is not one of {}", kinds.join(", ")))?;
                Ok((i, size))
            };
            match key {
                "matmul" => {
                    let (i, size) = kind_size(&["direct", "tiled"])?;
                    let (x, y) = size.split_once('x').ok_or_else(|| format!("tuning `{part}`: write the workgroup as XxY"))?;
                    t.matmul_tiled = i == 1;
                    t.matmul_wg = (num(x)?, num(y)?);
                }
                "attention" => {
                    let names = AttentionKernel::NAMES.map(|(n, _)| n);
                    let (i, size) = kind_size(&names)?;
                    t.attention = AttentionKernel::NAMES[i].1;
                    t.attention_wg = num(size)?;
                }
                "row" => t.row_wg = num(value)?,
                "elem" => t.elem_wg = num(value)?,
                other => return Err(format!("tuning `{part}`: unknown knob `{other}` (matmul, attention, row, elem)")),
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::{AttentionKernel, Tuning};

    #[test]
    fn a_tuning_reads_back_what_it_writes() {
        let t = Tuning { matmul_wg: (16, 8), matmul_tiled: true, attention_wg: 32, attention: AttentionKernel::Fixed, row_wg: 256, elem_wg: 64 };
        assert_eq!(t.to_string(), "matmul=tiled:16x8,attention=fixed:32,row=256,elem=64");
        assert_eq!(Tuning::parse(&t.to_string()), Ok(t));
        assert_eq!(Tuning::parse(""), Ok(Tuning::default()));
        assert_eq!(Tuning::parse("row=64").unwrap(), Tuning { row_wg: 64, ..Tuning::default() });
        for bad in ["matmul=tiled", "matmul=fast:8x8", "matmul=tiled:8", "row=0", "row=x", "speed=1", "row"] {
            assert!(Tuning::parse(bad).is_err(), "{bad} should be refused");
        }
    }
}
