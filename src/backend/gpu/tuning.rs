//! The tuning knobs of the kernels: workgroup sizes, and which matmul and attention kernels.

/// Tuning knobs, passed to the shaders as `override` constants (and so part of the pipeline key). The defaults are
/// the fastest measured on lavapipe (BENCHMARKS.md); [`GpuBackend::new`](super::GpuBackend::new) clamps them to the
/// adapter's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// The matmul for products of more than [`SMALL_ROWS`] rows.
    pub matmul: MatmulVariant,
    /// The matmul for products of at most [`SMALL_ROWS`] rows (one short sentence), where a GPU wants K split.
    pub small_matmul: MatmulVariant,
    /// attention: queries (invocations) per workgroup.
    pub attention_wg: u32,
    /// Which attention kernel, where the head allows it (the scalar one serves every other head_dim).
    pub attention: AttentionKernel,
    /// layernorm / embeddings invocations per row (power of two ≤ 256).
    pub row_wg: u32,
    /// The row kernels' workgroup sums (LayerNorm forward and backward, embeddings, the sum of squares) with
    /// subgroup operations (shaders/lib/reduce_subgroup.wgsl) rather than a tree in workgroup memory; only where the
    /// adapter has `subgroups` (natively).
    pub row_subgroups: bool,
    /// mean_pool / gather_rows invocations per workgroup.
    pub elem_wg: u32,
}

/// Products of at most this many rows run [`Tuning::small_matmul`]: a sentence of up to 64 tokens alone.
pub const SMALL_ROWS: usize = 64;

/// One matmul kernel and its workgroup (x over output columns, y over rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulVariant {
    pub kernel: MatmulKernel,
    pub wg: (u32, u32),
}

/// The tilings of shaders/lib/matmul_tile.wgsl; each computes 4 × 8 outputs per block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulKernel {
    /// `tile_4x8`: one invocation per block, straight from storage; the fastest on CPU adapters.
    #[default]
    Direct,
    /// `tile_shared`: blocks of a workgroup staged through workgroup memory (workgroup ≤ 16 × 16).
    Tiled,
    /// `tile_reduce`: one workgroup per block, K split among its invocations (a power of two ≤ 64).
    Reduce,
    /// `tile_wide`: 8 × 8 outputs per invocation, K double-buffered through workgroup memory (workgroup sides 8
    /// or 16).
    Wide,
    /// `tile_reduce` with its partial blocks added with subgroup operations (shaders/lib/block_sum_subgroup.wgsl),
    /// where the adapter has `subgroups` (natively); elsewhere [`MatmulKernel::Reduce`].
    ReduceSubgroup,
}

impl MatmulKernel {
    const NAMES: [(&'static str, MatmulKernel); 5] = [
        ("direct", MatmulKernel::Direct),
        ("tiled", MatmulKernel::Tiled),
        ("reduce", MatmulKernel::Reduce),
        ("wide", MatmulKernel::Wide),
        ("reduce_sg", MatmulKernel::ReduceSubgroup),
    ];

    fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, k)| *k == self).map_or("direct", |(n, _)| n)
    }

    /// Whether it splits K among a workgroup (for a few rows; the calibration times it on small products only).
    pub fn splits_k(self) -> bool {
        matches!(self, MatmulKernel::Reduce | MatmulKernel::ReduceSubgroup)
    }

    /// Its shader module: matmul.wgsl (f32 weights) or, `packed`, matmul_packed.wgsl, as composed for it.
    pub(crate) fn module(self, packed: bool) -> &'static str {
        match (self, packed) {
            (MatmulKernel::ReduceSubgroup, false) => "matmul_sg",
            (MatmulKernel::ReduceSubgroup, true) => "matmul_packed_sg",
            (_, false) => "matmul",
            (_, true) => "matmul_packed",
        }
    }

    /// Its entry point in matmul.wgsl (f32 weights) or, `packed`, in matmul_packed.wgsl.
    pub(crate) fn entry(self, packed: bool) -> &'static str {
        match (self, packed) {
            (MatmulKernel::Direct, false) => "matmul_vec4",
            (MatmulKernel::Tiled, false) => "matmul_vec4_tiled",
            (MatmulKernel::Reduce | MatmulKernel::ReduceSubgroup, false) => "matmul_vec4_reduce",
            (MatmulKernel::Direct, true) => "matmul_packed",
            (MatmulKernel::Tiled, true) => "matmul_packed_tiled",
            (MatmulKernel::Reduce | MatmulKernel::ReduceSubgroup, true) => "matmul_packed_reduce",
            (MatmulKernel::Wide, false) => "matmul_vec4_wide",
            (MatmulKernel::Wide, true) => "matmul_packed_wide",
        }
    }
}

impl Default for MatmulVariant {
    fn default() -> Self {
        MatmulVariant { kernel: MatmulKernel::Direct, wg: (8, 8) }
    }
}

impl MatmulVariant {
    /// Clamped to the adapter: the workgroup within its limits and the kernel's own (tiled ≤ 16 × 16, reduce a
    /// power of two ≤ 64 invocations); a tiled kernel without the workgroup memory it stages through is direct.
    fn clamped(self, l: &wgpu::Limits) -> MatmulVariant {
        let mut v = self;
        let needs = match v.kernel {
            MatmulKernel::Direct => 0,
            MatmulKernel::Tiled => TILED_WORKGROUP_BYTES,
            MatmulKernel::Reduce | MatmulKernel::ReduceSubgroup => REDUCE_WORKGROUP_BYTES,
            MatmulKernel::Wide => WIDE_WORKGROUP_BYTES,
        };
        if l.max_compute_workgroup_storage_size < needs {
            v.kernel = MatmulKernel::Direct;
        }
        // (largest side, most invocations) of the kernel's own.
        let (cap, inv_cap) = match v.kernel {
            MatmulKernel::Direct => (u32::MAX, u32::MAX),
            MatmulKernel::Tiled => (MAX_TILED_WG, MAX_TILED_WG * MAX_TILED_WG),
            MatmulKernel::Reduce | MatmulKernel::ReduceSubgroup => (MAX_REDUCE_INVOCATIONS, MAX_REDUCE_INVOCATIONS),
            MatmulKernel::Wide => (WIDE_WG.1, WIDE_WG.1 * WIDE_WG.1),
        };
        let (mut wx, mut wy) = v.wg;
        wx = wx.clamp(1, l.max_compute_workgroup_size_x.min(cap));
        wy = wy.clamp(1, l.max_compute_workgroup_size_y.min(cap));
        if matches!(v.kernel, MatmulKernel::Reduce | MatmulKernel::ReduceSubgroup | MatmulKernel::Wide) {
            (wx, wy) = (prev_pow2(wx), prev_pow2(wy));
        }
        let max_inv = l.max_compute_invocations_per_workgroup.min(inv_cap);
        while wx * wy > max_inv {
            if wy >= wx { wy = (wy / 2).max(1) } else { wx = (wx / 2).max(1) }
        }
        // The wide kernel loads a slab in one or two vec4 per invocation: sides of 8 or 16, nothing smaller.
        if v.kernel == MatmulKernel::Wide && (wx < WIDE_WG.0 || wy < WIDE_WG.0) {
            return MatmulVariant::default().clamped(l);
        }
        v.wg = (wx, wy);
        v
    }

    /// The grid of a product (M rows, N columns): one workgroup per WG_X·8 × WG_Y·4 outputs, per 8 × 4 (reduce),
    /// or per WG_X·8 × WG_Y·8 (wide).
    pub(crate) fn groups(self, m: usize, n: usize) -> (u32, u32, u32) {
        let (wx, wy) = (self.wg.0 as usize, self.wg.1 as usize);
        match self.kernel {
            MatmulKernel::Reduce | MatmulKernel::ReduceSubgroup => (n.div_ceil(8) as u32, m.div_ceil(4) as u32, 1),
            MatmulKernel::Wide => (n.div_ceil(8 * wx) as u32, m.div_ceil(8 * wy) as u32, 1),
            _ => (n.div_ceil(8 * wx) as u32, m.div_ceil(4 * wy) as u32, 1),
        }
    }
}

impl std::fmt::Display for MatmulVariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}x{}", self.kernel.name(), self.wg.0, self.wg.1)
    }
}

/// The attention kernels (shaders/lib/attention.wgsl composed three ways).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionKernel {
    /// attention_vec4.wgsl: vec4 steps, any head_dim that is a multiple of 4.
    #[default]
    Vec4,
    /// attention_fixed.wgsl: vec4 steps with the head's length fixed, for head_dim 32 and 64 (elsewhere Vec4);
    /// its loops unroll.
    Fixed,
    /// attention.wgsl, one f32 per step, even where vec4 would do: for tests and benchmarks.
    Scalar,
    /// attention_split.wgsl: each query split over head_dim/4 invocations, keys and values staged a tile at a
    /// time in workgroup memory; head_dim a multiple of 4 up to [`SPLIT_MAX_HEAD_DIM`] (elsewhere Vec4).
    Split,
    /// The split kernel with its scores exchanged by subgroup shuffles (shaders/lib/split_tile_subgroup.wgsl),
    /// where the adapter has `subgroups` (natively) and [`split_subgroup_fits`] the head; elsewhere Split.
    SplitSubgroup,
}

/// The largest head the split attention kernel serves (`4·LMAX` in shaders/attention_split.wgsl).
pub const SPLIT_MAX_HEAD_DIM: usize = 64;

impl AttentionKernel {
    const NAMES: [(&'static str, AttentionKernel); 5] = [
        ("vec4", AttentionKernel::Vec4),
        ("fixed", AttentionKernel::Fixed),
        ("scalar", AttentionKernel::Scalar),
        ("split", AttentionKernel::Split),
        ("split_sg", AttentionKernel::SplitSubgroup),
    ];

    fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, k)| *k == self).map_or("vec4", |(n, _)| n)
    }

    /// (shader module, entry point) for a head of `head_dim`; the fixed-length modules share attention_fixed.wgsl
    /// and its entry point.
    pub(crate) fn kernel(self, head_dim: usize) -> (&'static str, &'static str) {
        match (self, head_dim) {
            (AttentionKernel::Scalar, _) => ("attention", "attention"),
            (_, d) if d % 4 != 0 => ("attention", "attention"),
            (AttentionKernel::Fixed, 32) => ("attention_d32", "attention_fixed"),
            (AttentionKernel::Fixed, 64) => ("attention_d64", "attention_fixed"),
            (AttentionKernel::Split, d) if d <= SPLIT_MAX_HEAD_DIM => ("attention_split", "attention_split"),
            (AttentionKernel::SplitSubgroup, d) if d <= SPLIT_MAX_HEAD_DIM => ("attention_split_sg", "attention_split"),
            _ => ("attention_vec4", "attention_vec4"),
        }
    }
}

/// Whether [`AttentionKernel::SplitSubgroup`] serves a head of `head_dim` on the adapter `info` describes: its
/// head_dim/4 lanes a power of two no larger than the adapter's smallest subgroup, so that a query's lanes share one
/// (shaders/lib/split_tile_subgroup.wgsl). Otherwise the split kernel runs with workgroup memory.
pub fn split_subgroup_fits(info: &wgpu::AdapterInfo, head_dim: usize) -> bool {
    let lanes = head_dim / 4;
    head_dim % 4 == 0 && lanes.is_power_of_two() && lanes <= info.subgroup_min_size as usize
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            matmul: MatmulVariant::default(),
            small_matmul: MatmulVariant::default(),
            attention_wg: 64,
            attention: AttentionKernel::Vec4,
            row_wg: 128,
            row_subgroups: false,
            elem_wg: 64,
        }
    }
}

impl Tuning {
    /// These knobs clamped to what an adapter with limits `l` and optional features `f` allows.
    pub(crate) fn clamped(self, l: &wgpu::Limits, f: wgpu::Features) -> Tuning {
        let max_inv = l.max_compute_invocations_per_workgroup;
        let cap = |v: u32| prev_pow2(v.min(256).min(max_inv).min(l.max_compute_workgroup_size_x)).max(1);
        let mut t = self;
        t.row_wg = cap(t.row_wg);
        t.row_subgroups &= f.contains(wgpu::Features::SUBGROUP);
        t.elem_wg = cap(t.elem_wg);
        t.attention_wg = cap(t.attention_wg);
        t.matmul = t.matmul.clamped(l);
        t.small_matmul = t.small_matmul.clamped(l);
        if t.attention == AttentionKernel::SplitSubgroup && !f.contains(wgpu::Features::SUBGROUP) {
            t.attention = AttentionKernel::Split;
        }
        for v in [&mut t.matmul, &mut t.small_matmul] {
            if v.kernel == MatmulKernel::ReduceSubgroup && !f.contains(wgpu::Features::SUBGROUP) {
                v.kernel = MatmulKernel::Reduce;
            }
        }
        t
    }
}

/// Workgroup memory of the tiled matmul: x_tile (256 vec4) and w_tile (512 vec4).
const TILED_WORKGROUP_BYTES: u32 = (256 + 512) * 16;
/// ... and of the reduce kernel: w_tile.
const REDUCE_WORKGROUP_BYTES: u32 = 512 * 16;
/// ... and of the wide kernel: xs and ws, two slabs each.
const WIDE_WORKGROUP_BYTES: u32 = (512 + 512) * 16;
/// The wide kernel's workgroup sides: (smallest, largest).
pub const WIDE_WG: (u32, u32) = (8, 16);

/// The largest matmul workgroup side the tiled kernel's staging arrays hold (x_tile, w_tile in
/// shaders/lib/matmul_tile.wgsl).
pub const MAX_TILED_WG: u32 = 16;
/// The reduce kernel's largest workgroup: its partial blocks (8 vec4 each) fill w_tile (512 vec4).
pub const MAX_REDUCE_INVOCATIONS: u32 = 64;

fn prev_pow2(v: u32) -> u32 {
    if v == 0 { 0 } else { 1 << (31 - v.leading_zeros()) }
}

/// `matmul=tiled:16x16,small=reduce:8x8,attention=fixed:64,row=128,elem=64` (`row=sg:128`: with subgroup sums): how `bench`, the calibration's cache
/// and `BERTGPU_TUNING` write a tuning ([`Tuning::parse`] reads it back).
impl std::fmt::Display for Tuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "matmul={},small={},attention={}:{},row={}{},elem={}",
            self.matmul,
            self.small_matmul,
            self.attention.name(),
            self.attention_wg,
            if self.row_subgroups { "sg:" } else { "" },
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
                "matmul" | "small" => {
                    let names = MatmulKernel::NAMES.map(|(n, _)| n);
                    let (i, size) = kind_size(&names)?;
                    let (x, y) = size.split_once('x').ok_or_else(|| format!("tuning `{part}`: write the workgroup as XxY"))?;
                    let v = MatmulVariant { kernel: MatmulKernel::NAMES[i].1, wg: (num(x)?, num(y)?) };
                    if key == "matmul" { t.matmul = v } else { t.small_matmul = v }
                }
                "attention" => {
                    let names = AttentionKernel::NAMES.map(|(n, _)| n);
                    let (i, size) = kind_size(&names)?;
                    t.attention = AttentionKernel::NAMES[i].1;
                    t.attention_wg = num(size)?;
                }
                "row" => match value.strip_prefix("sg:") {
                    Some(n) => (t.row_subgroups, t.row_wg) = (true, num(n)?),
                    None => (t.row_subgroups, t.row_wg) = (false, num(value)?),
                },
                "elem" => t.elem_wg = num(value)?,
                other => return Err(format!("tuning `{part}`: unknown knob `{other}` (matmul, small, attention, row, elem)")),
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::{AttentionKernel, MatmulKernel, MatmulVariant, Tuning};

    #[test]
    fn a_tuning_reads_back_what_it_writes() {
        let t = Tuning {
            matmul: MatmulVariant { kernel: MatmulKernel::Tiled, wg: (16, 8) },
            small_matmul: MatmulVariant { kernel: MatmulKernel::Reduce, wg: (8, 4) },
            attention_wg: 32,
            attention: AttentionKernel::Fixed,
            row_wg: 256,
            row_subgroups: false,
            elem_wg: 64,
        };
        assert_eq!(t.to_string(), "matmul=tiled:16x8,small=reduce:8x4,attention=fixed:32,row=256,elem=64");
        assert_eq!(Tuning::parse(&t.to_string()), Ok(t));
        let sg = Tuning { row_subgroups: true, ..t };
        assert!(sg.to_string().contains(",row=sg:256,"), "{sg}");
        assert_eq!(Tuning::parse(&sg.to_string()), Ok(sg));
        assert_eq!(Tuning::parse(""), Ok(Tuning::default()));
        assert_eq!(Tuning::parse("row=64").unwrap(), Tuning { row_wg: 64, ..Tuning::default() });
        for bad in ["matmul=tiled", "matmul=fast:8x8", "matmul=tiled:8", "row=0", "row=x", "speed=1", "row", "row=sg:", "row=sg:0"] {
            assert!(Tuning::parse(bad).is_err(), "{bad} should be refused");
        }
    }
}
