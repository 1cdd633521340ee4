//! Choosing the kernels on the adapter at hand. The defaults of [`Tuning`] are the fastest on CPU adapters
//! (lavapipe, SwiftShader); a real GPU wants other tilings. The variants worth timing are listed here, and the
//! calibration times them on the model's own shapes and keeps the fastest.

use super::tuning::{split_subgroup_fits, MatmulKernel, MatmulVariant};
use super::{Activation, AttentionKernel, AttentionShape, Backend, Dtype, Gpu, GpuBackend, GpuTensor, Tuning};
use crate::config::BertConfig;
// Deterministic values in [-1, 1): what the kernels compute on does not change their speed.
use crate::testutil::rand_vec;
use crate::weights::quant::{quantize, to_f16};
use crate::weights::{HostData, HostTensor};
use crate::{Error, Result};

/// Matmul workgroup shapes of the direct kernel worth timing (the default first; 16 × 16 was the slowest on
/// lavapipe and on an H100, BENCHMARKS.md).
const DIRECT_WG: [(u32, u32); 3] = [(8, 8), (16, 4), (32, 4)];
/// Workgroup shapes of the tiled kernel (≤ 16 × 16: its staging arrays).
const TILED_WG: [(u32, u32); 4] = [(8, 8), (16, 8), (8, 16), (16, 16)];
/// Workgroups of the reduce kernel (invocations sharing one block's K: a power of two ≤ 64).
const REDUCE_WG: [(u32, u32); 3] = [(8, 8), (8, 4), (4, 4)];
/// Workgroups of the wide kernel (sides 8 or 16: how it loads a slab).
const WIDE_WG_SHAPES: [(u32, u32); 4] = [(8, 8), (16, 8), (8, 16), (16, 16)];

/// Every matmul variant the calibration may choose on `gpu` (the default first), each as a [`Tuning`] that runs it
/// for every product (large and small), the other knobs at their defaults: what the calibration's matmul stages
/// start from, and what the tests run on every shape. Variants the adapter cannot run (workgroup too large, too
/// little workgroup memory) are left out.
pub fn matmul_candidates(gpu: &Gpu) -> Vec<Tuning> {
    let mut out: Vec<Tuning> = Vec::new();
    let kinds = [
        (MatmulKernel::Direct, &DIRECT_WG[..]),
        (MatmulKernel::Tiled, &TILED_WG[..]),
        (MatmulKernel::Reduce, &REDUCE_WG[..]),
        (MatmulKernel::ReduceSubgroup, &REDUCE_WG[..]),
        (MatmulKernel::Wide, &WIDE_WG_SHAPES[..]),
    ];
    for (kernel, wgs) in kinds {
        for &wg in wgs {
            let v = MatmulVariant { kernel, wg };
            let t = Tuning { matmul: v, small_matmul: v, ..Tuning::default() };
            if t.clamped(&gpu.limits, gpu.features) == t && !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// Rows of the small products the calibration times: a sentence of 16 tokens.
const SMALL_CALIBRATION_ROWS: usize = 16;

/// What the calibration times: one encoder layer's matmuls, attention and LayerNorms at `batch` sequences of `seq`
/// tokens, with the weights in `dtype` (the model's own shapes, so the choice fits the model), on activations stored
/// as the model stores them: f32, or f16 pairs in the f16-activation mode, where the `_h` kernels run and may want
/// another tiling (they move half the bytes for the same arithmetic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    pub hidden: usize,
    pub intermediate: usize,
    pub heads: usize,
    pub batch: usize,
    pub seq: usize,
    pub dtype: Dtype,
    pub f16_activations: bool,
}

impl Workload {
    /// A layer of `cfg` at 8 sequences of 128 tokens (fewer where the model is shorter): the batch (b) of the
    /// benchmarks, large enough that launch overheads do not decide. (At 4 sequences an H100's wide and tiled
    /// matmuls came out level and the choice flipped from one load to the next, while at 8 the wide one runs the
    /// forward 1.4× faster; BENCHMARKS.md, "A real GPU".)
    pub fn of_config(cfg: &BertConfig, dtype: Dtype) -> Workload {
        Workload {
            hidden: cfg.hidden_size,
            intermediate: cfg.intermediate_size,
            heads: cfg.num_attention_heads,
            batch: 8,
            seq: cfg.max_position_embeddings.clamp(2, 128),
            dtype,
            f16_activations: false,
        }
    }

    /// The text that keys a cached choice: the model's shapes, not its name, so models of one shape share it.
    /// The f16-activation mode has choices of its own (a key that says so; the f32 key is as before).
    fn key(&self) -> String {
        let act = if self.f16_activations { ", f16 activations" } else { "" };
        format!("hidden {} intermediate {} heads {} {}{act}", self.hidden, self.intermediate, self.heads, self.dtype.name())
    }
}

/// The result of [`GpuBackend::calibrate`]: the tuning chosen and what each variant took.
#[derive(Clone, Debug)]
pub struct Calibration {
    /// The fastest variant of each stage, taken in turn (large matmuls, small matmuls, attention, row kernels).
    pub tuning: Tuning,
    /// (variant, best ms of its stage's work) for every variant timed, stage by stage.
    pub timed: Vec<(Tuning, f64)>,
    /// The stages' work (one layer's kernels, and its matmuls again for one short sentence) with the default tuning
    /// and with the chosen one, in ms.
    pub default_ms: f64,
    pub chosen_ms: f64,
    /// Wall-clock ms the calibration took (pipeline compilation included).
    pub spent_ms: f64,
    /// Whether every variant was timed within the budget (otherwise the rest kept their defaults).
    pub complete: bool,
    /// How far it got: the stages done, this call's and those it resumed from ([`Progress`]).
    pub progress: Progress,
}

/// The calibration's stages: large matmuls, small matmuls, attention, row kernels.
pub const CALIBRATION_STAGES: usize = 4;

/// Where a calibration cut short by its budget stopped: the tuning it reached and how many of the
/// [`CALIBRATION_STAGES`] it finished, so the next one resumes there instead of starting over (on a new adapter the
/// driver's first compilation of every variant can outrun the budget load after load). As text (what the CLI and
/// the browser cache): the tuning alone when every stage is done, else `TUNING;stages=N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub tuning: Tuning,
    pub stages_done: usize,
}

impl Progress {
    pub fn is_complete(&self) -> bool {
        self.stages_done >= CALIBRATION_STAGES
    }

    /// Reads what [`Display`](std::fmt::Display) writes (a plain tuning is a finished calibration).
    pub fn parse(text: &str) -> std::result::Result<Progress, String> {
        match text.split_once(";stages=") {
            None => Ok(Progress { tuning: Tuning::parse(text)?, stages_done: CALIBRATION_STAGES }),
            Some((spec, n)) => {
                let stages_done = n.parse::<usize>().ok().filter(|&n| n <= CALIBRATION_STAGES)
                    .ok_or_else(|| format!("calibration progress `{text}`: stages must be 0..={CALIBRATION_STAGES}"))?;
                Ok(Progress { tuning: Tuning::parse(spec)?, stages_done })
            }
        }
    }
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_complete() {
            write!(f, "{}", self.tuning)
        } else {
            write!(f, "{};stages={}", self.tuning, self.stages_done)
        }
    }
}

impl std::fmt::Display for Calibration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({:.3} ms for a layer's stages against {:.3} with the defaults; calibrated in {:.0} ms{})",
            self.tuning,
            self.chosen_ms,
            self.default_ms,
            self.spent_ms,
            if self.complete { String::new() } else {
                format!(", budget reached after {} of {CALIBRATION_STAGES} stages", self.progress.stages_done)
            }
        )
    }
}

/// Where the choice for `gpu` and `work` is cached: the adapter (vendor, device, driver, backend), this crate's
/// version (kernels change between versions) and the workload's shapes.
pub fn cache_key(gpu: &Gpu, work: &Workload) -> String {
    let i = &gpu.info;
    format!(
        "{} {:04x}:{:04x} {} {} ({:?}) | bertgpu {} | {}",
        i.name,
        i.vendor,
        i.device,
        i.driver,
        i.driver_info,
        i.backend,
        env!("CARGO_PKG_VERSION"),
        work.key()
    )
}

/// Whether to calibrate on `gpu` without being asked: not on a CPU adapter (lavapipe, SwiftShader), where the
/// defaults are the fastest measured (BENCHMARKS.md) and one layer of a large model takes a second or more, so the
/// calibration would cost more than it could save; `auto` runs on the CPU there anyway.
pub fn worth_calibrating(gpu: &Gpu) -> bool {
    gpu.info.device_type != wgpu::DeviceType::Cpu
}

/// Rounds each variant is timed (the best counts: noise only ever adds time).
const ROUNDS: usize = 3;
/// Each timing repeats the stage's work until the default variant takes about this long, so the submission's own
/// cost (tens of µs) does not decide between kernels that take a few µs.
const TARGET_MS: f64 = 2.0;
const MAX_REPEATS: usize = 64;

/// The knobs one stage of the calibration chooses.
#[derive(Clone, Copy)]
enum Knob {
    Matmul,
    SmallMatmul,
    Attention,
    Row,
}

impl Knob {
    /// `best` with this stage's knobs taken from `v`.
    fn take(self, best: Tuning, v: Tuning) -> Tuning {
        let mut t = best;
        match self {
            Knob::Matmul => t.matmul = v.matmul,
            Knob::SmallMatmul => t.small_matmul = v.small_matmul,
            Knob::Attention => (t.attention_wg, t.attention) = (v.attention_wg, v.attention),
            Knob::Row => (t.row_wg, t.row_subgroups) = (v.row_wg, v.row_subgroups),
        }
        t
    }
}

/// One stage of the calibration: its knob, the variants of it, and the work that exercises it.
type Stage<'a> = (Knob, Vec<Tuning>, Box<dyn Fn() -> Result<()> + 'a>);

impl GpuBackend {
    /// Times the kernel variants this adapter can run on `work` and returns the fastest; the backend's own tuning
    /// is left as it was (switching is the caller's: `Engine::set_tuning` checks the choice first). Four stages,
    /// each starting from the best of the one before: the matmul variants on the layer's four linears, again on
    /// the same linears for one sentence of 16 tokens (the choice for products of at most [`super::SMALL_ROWS`]
    /// rows), the attention variants on its attention, the row-kernel widths on its LayerNorm. The default is
    /// always timed and kept unless another variant is faster, so the choice is never slower than the default on
    /// what was timed. Once `budget_ms` is spent it stops at the next variant (pipeline compilation counts), except
    /// that the first stage it runs always finishes, so every call makes progress: the knobs not timed keep their
    /// defaults, [`Calibration::complete`] is false, and [`Calibration::progress`] is where a later call resumes.
    pub async fn calibrate(&self, work: &Workload, budget_ms: f64) -> Result<Calibration> {
        self.calibrate_from(work, budget_ms, None).await
    }

    /// [`Self::calibrate`] resuming from `from` (an earlier call's [`Calibration::progress`]): its stages are not
    /// timed again and the rest start from its tuning.
    pub async fn calibrate_from(&self, work: &Workload, budget_ms: f64, from: Option<Progress>) -> Result<Calibration> {
        let initial = self.tuning();
        let result = self.time_variants(work, budget_ms, from).await;
        self.set_tuning(initial);
        result
    }

    async fn time_variants(&self, work: &Workload, budget_ms: f64, from: Option<Progress>) -> Result<Calibration> {
        let start = now_ms();
        let (h, i, m) = (work.hidden, work.intermediate, work.batch * work.seq);
        if h == 0 || i == 0 || m == 0 || work.heads == 0 || h % work.heads != 0 {
            return Err(Error::Input(format!("calibration workload {work:?}: sizes must be positive, hidden a multiple of heads")));
        }
        let weight = |rows: usize, cols: usize, seed: u64| -> Result<GpuTensor> {
            let t = HostTensor { shape: vec![rows, cols], data: HostData::F32(rand_vec(rows * cols, seed)) };
            let t = match work.dtype {
                Dtype::F32 => t,
                Dtype::F16 => to_f16(&t)?,
                q => quantize(&t, q)?,
            };
            self.upload(&t)
        };
        let (w_qkv, w_o, w_i, w_o2) = (weight(3 * h, h, 1)?, weight(h, h, 2)?, weight(i, h, 3)?, weight(h, i, 4)?);
        let bias = |n: usize, seed: u64| self.input(&rand_vec(n, seed), 1, n);
        let (b_qkv, b_h, b_i) = (bias(3 * h, 5)?, bias(h, 6)?, bias(i, 7)?);
        // Activations as the model stores them (an odd width stays f32 in the f16 mode, as the model's do).
        let act = |rows: usize, cols: usize, seed: u64| -> Result<GpuTensor> {
            let data = rand_vec(rows * cols, seed);
            if work.f16_activations && cols % 2 == 0 { self.input_f16(&data, rows, cols) } else { self.input(&data, rows, cols) }
        };
        let x = act(m, h, 8)?;
        let x_i = act(m, i, 9)?;
        let qkv = act(m, 3 * h, 10)?;
        let mask = self.input(&vec![1.0; m], work.batch, work.seq)?;
        let shape = AttentionShape { batch: work.batch, seq: work.seq, heads: work.heads, head_dim: h / work.heads };

        let small = SMALL_CALIBRATION_ROWS.min(m);
        let (xs, xs_i) = (act(small, h, 11)?, act(small, i, 12)?);
        let layer_linears = |x: &GpuTensor, x_i: &GpuTensor| -> Result<()> {
            self.linear(x, &w_qkv, Some(&b_qkv), Activation::None)?;
            self.linear(x, &w_o, Some(&b_h), Activation::None)?;
            self.linear(x, &w_i, Some(&b_i), Activation::Gelu)?;
            self.linear(x_i, &w_o2, Some(&b_h), Activation::None)?;
            Ok(())
        };
        let matmuls = || layer_linears(&x, &x_i);
        let small_matmuls = || layer_linears(&xs, &xs_i);
        let all = matmul_candidates(&self.gpu);
        let large: Vec<Tuning> = all.iter().copied().filter(|t| !t.matmul.kernel.splits_k()).collect();
        let attention = || -> Result<()> { self.attention(&qkv, &mask, shape).map(drop) };
        let norms = || -> Result<()> { self.layernorm(&x, Some(&x), &b_h, &b_h, 1e-12).map(drop) };
        let stages: Vec<Stage> = vec![
            (Knob::Matmul, large, Box::new(matmuls)),
            (Knob::SmallMatmul, all, Box::new(small_matmuls)),
            (Knob::Attention, attention_candidates(&self.gpu, shape.head_dim), Box::new(attention)),
            (Knob::Row, row_candidates(&self.gpu), Box::new(norms)),
        ];

        let mut best = from.map_or(Tuning::default(), |p| p.tuning).clamped(&self.gpu.limits, self.gpu.features);
        let mut stages_done = from.map_or(0, |p| p.stages_done.min(stages.len()));
        let (mut timed, mut default_ms, mut chosen_ms, mut complete) = (Vec::new(), 0.0, 0.0, true);
        for (knob, variants, run) in stages.iter().skip(stages_done) {
            // The first stage of this call finishes whatever the budget: each call makes progress.
            let first = timed.is_empty();
            let merged: Vec<Tuning> = variants.iter().map(|v| knob.take(best, *v)).collect();
            // Natively the stage's pipelines are built at once, on several threads (prebuild.rs): built one at a time
            // as each variant first ran, they took the first calibrations on a fresh machine past their budget.
            #[cfg(not(target_arch = "wasm32"))]
            if first || now_ms() - start <= budget_ms {
                let mut specs = Vec::new();
                for t in &merged {
                    self.set_tuning(*t);
                    specs.extend(self.pipelines_of(run.as_ref())?);
                }
                self.build_pipelines(&specs)?;
            }
            let repeats = {
                self.set_tuning(merged[0]);
                run()?; // builds the default's pipelines where they are not built (in a browser), untimed
                let t0 = now_ms();
                run()?;
                self.flush().await?;
                ((TARGET_MS / (now_ms() - t0).max(1e-3)).ceil() as usize).clamp(1, MAX_REPEATS)
            };
            let mut ms = vec![f64::INFINITY; merged.len()];
            'rounds: for round in 0..ROUNDS {
                for (k, t) in merged.iter().enumerate() {
                    // Past the budget, stop: what was not timed keeps the defaults (the default itself is always
                    // timed once, so a stage always has a time to compare with).
                    if !first && (round, k) != (0, 0) && now_ms() - start > budget_ms {
                        complete = false;
                        break 'rounds;
                    }
                    self.set_tuning(*t);
                    if round == 0 {
                        run()?; // builds this variant's pipelines where they are not built (in a browser), untimed
                        self.flush().await?;
                    }
                    let t0 = now_ms();
                    for _ in 0..repeats {
                        run()?;
                    }
                    self.flush().await?;
                    ms[k] = ms[k].min((now_ms() - t0) / repeats as f64);
                }
            }
            let k = (0..merged.len()).min_by(|&a, &b| ms[a].total_cmp(&ms[b])).unwrap_or(0);
            best = merged[k];
            default_ms += ms[0];
            chosen_ms += ms[k];
            timed.extend(merged.iter().copied().zip(ms.iter().copied()).filter(|(_, ms)| ms.is_finite()));
            if !complete {
                break;
            }
            stages_done += 1;
        }
        self.gpu.check_errors()?;
        let progress = Progress { tuning: best, stages_done };
        let complete = progress.is_complete();
        Ok(Calibration { tuning: best, timed, default_ms, chosen_ms, spent_ms: now_ms() - start, complete, progress })
    }
}

/// Attention variants: queries per workgroup, and the kernel with the head's length fixed against the one that
/// reads it (the default first). The scalar kernel is not timed where a vec4 one applies: it was 2× slower on every
/// adapter measured (BENCHMARKS.md), and it is the only kernel where none applies.
fn attention_candidates(gpu: &Gpu, head_dim: usize) -> Vec<Tuning> {
    let d = Tuning::default();
    let mut out = vec![d];
    let mut kernels = vec![AttentionKernel::Vec4];
    for k in [AttentionKernel::Fixed, AttentionKernel::Split] {
        if k.kernel(head_dim) != AttentionKernel::Vec4.kernel(head_dim) {
            kernels.push(k);
        }
    }
    // (Clamped to Split where the adapter has no subgroups, and so left out below.)
    if kernels.contains(&AttentionKernel::Split) && split_subgroup_fits(&gpu.info, head_dim) {
        kernels.push(AttentionKernel::SplitSubgroup);
    }
    for attention in kernels {
        for wg in [32, 64, 128, 256] {
            let t = Tuning { attention_wg: wg, attention, ..d };
            if t.clamped(&gpu.limits, gpu.features) == t && !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// Every row-kernel variant the calibration may choose on `gpu` (the default first): LayerNorm widths (invocations
/// per row), each with its sums in a tree and, where the adapter has subgroups, with subgroup sums. What the tests
/// run the row kernels with.
pub fn row_candidates(gpu: &Gpu) -> Vec<Tuning> {
    let d = Tuning::default();
    let mut out = vec![d];
    for row_subgroups in [false, true] {
        for wg in [32, 64, 128, 256] {
            let t = Tuning { row_wg: wg, row_subgroups, ..d };
            if t.clamped(&gpu.limits, gpu.features) == t && !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// Milliseconds on a monotonic clock.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn now_ms() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1e3
}

/// Milliseconds from `performance.now()` (window or worker), or `Date.now()` where there is none.
#[cfg(target_arch = "wasm32")]
pub(crate) fn now_ms() -> f64 {
    use wasm_bindgen::JsCast;
    let perf = js_sys::Reflect::get(&js_sys::global(), &"performance".into()).ok();
    perf.and_then(|p| {
        let now = js_sys::Reflect::get(&p, &"now".into()).ok()?.dyn_into::<js_sys::Function>().ok()?;
        now.call0(&p).ok()?.as_f64()
    })
    .unwrap_or_else(js_sys::Date::now)
}
