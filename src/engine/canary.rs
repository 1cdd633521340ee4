//! The canary at load: before a model is used on a GPU, its encoder runs one fixed short input there and on the CPU
//! backend, from the same weights, and the two last hidden states must agree within [`CANARY_ATOL`] +
//! [`CANARY_RTOL`]·|cpu|. WebGPU runtimes do return wrong vectors silently on some drivers (transformers.js#1728,
//! onnxruntime#26367); the unit tests of every kernel pass on the adapters we test on, not on the user's. A model
//! that disagrees is not run on that GPU: `Device::Auto` falls back to the CPU and says why
//! ([`super::Engine::device_reason`]), `Device::Gpu` refuses to load (see [`super::Engine::place`]).
//!
//! What it compares, like with like: the CPU side is [`CpuBackend::reference`] (Q8_0 weights through the
//! f32-activation GEMM, as the GPU computes them; f16 and Q4_0 are decoded to f32 in both), so the only differences
//! left are the order of f32 sums and the transcendental functions' last bits.
//!
//! What it costs, at every GPU load (it is not cached: the cost is a small part of a load, and a cache keyed by
//! adapter and model would have to hash the weights and would miss a driver update): one GPU forward of the input
//! (2 sequences, 25 tokens in all with MiniLM's vocabulary), and one CPU forward of it that uploads each layer's
//! weights just before it runs and drops them after ([`BertModel::forward_streamed`]), so no second copy of the
//! model is held, during the check or after it. tests/canary.rs prints the time: all-MiniLM-L6-v2 on lavapipe
//! ~0.3 s, nearly all of it the GPU forward on a software adapter (which `auto` never takes); the CPU side is the
//! CPU backend's forward of 25 tokens.

use crate::backend::cpu::CpuBackend;
use crate::backend::gpu::{GpuBackend, PipelineSpec, Tuning};
use crate::backend::Backend;
use crate::model::BertModel;
use crate::tasks::{Model, ReferenceOutput};
use crate::tokenizer::Batch;
use crate::weights::{HostData, Weights};
use crate::Result;

/// The fixed input: a pair (both token types) and a shorter single text, padded to one batch, so the check passes
/// through segment embeddings, the attention mask and padding as real calls do. Any vocabulary tokenizes it (a
/// word it lacks becomes `[UNK]`, which is still a fixed id).
const INPUT: [(&str, Option<&str>); 2] =
    [("The quick brown fox jumps over the lazy dog.", Some("A canary sings.")), ("Check the GPU first.", None)];

/// Absolute part of the tolerance on the last hidden state, |gpu − cpu| ≤ ATOL + RTOL·|cpu|. A healthy adapter
/// differs from the CPU by the order of its f32 sums and its exp/erf/tanh last bits: at most 4.9e-6 on lavapipe over
/// tests/canary.rs's models (every family; MiniLM in f32, f16, Q8_0, Q4_0), and the model tests bound the same error
/// by 1e-4 to 2e-4 against PyTorch. A wrong kernel moves values by far more: linears whose outputs are 0.01 off,
/// the mildest fault we test, move the hidden state by 3.0e-2 to 9.6e-2 on those models. 2e-3 leaves 400× for
/// deeper models and looser hardware arithmetic (24 layers; fast-math exp), and still catches that fault 14× over.
pub const CANARY_ATOL: f32 = 2e-3;
/// Relative part of the tolerance: BERT's hidden states carry a few outlier dimensions of magnitude 10–20, where
/// f32 rounding is proportionally larger; 1e-3 of them adds at most 0.02 there.
pub const CANARY_RTOL: f32 = 1e-3;

/// The tolerance in the f16-activation mode (`GpuBackend::set_f16_activations`), where the GPU's own rounding is
/// larger: every activation is stored as f16 (2⁻¹¹ relative), and on all-MiniLM-L6-v2 and splade-tiny the hidden
/// state moves by up to 2.3e-3 against PyTorch (tests/model_gpu.rs), on tests/canary.rs's checkpoints by 1.6e-3 to
/// 7.6e-3 against the CPU. 1.5e-2 leaves 2–9× for deeper models, and still catches the mildest fault above (3.0e-2
/// or more) 2× over.
pub const CANARY_F16_ATOL: f32 = 1.5e-2;
/// Relative part in that mode: f16 keeps 11 bits, so the outliers of magnitude 10–20 round by up to 1e-2 each.
pub const CANARY_F16_RTOL: f32 = 4e-3;

/// The outcome of the check: the value where the GPU was furthest from the CPU, relative to the tolerance there.
#[derive(Clone, Debug, PartialEq)]
pub struct Canary {
    /// The adapter's name, backend and driver, as wgpu reports them.
    pub adapter: String,
    /// |gpu − cpu| at the worst value (infinite when the GPU returned NaN or an infinity).
    pub err: f32,
    /// The tolerance there, [`CANARY_ATOL`] + [`CANARY_RTOL`]·|cpu| (in the f16-activation mode, the `F16` pair).
    pub tol: f32,
    /// Where: the sequence of [`INPUT`], the token in it, the hidden unit.
    pub sequence: usize,
    pub token: usize,
    pub unit: usize,
    pub gpu: f32,
    pub cpu: f32,
    /// Values compared (the real tokens' hidden states).
    pub compared: usize,
}

impl Canary {
    /// Whether the GPU agrees with the CPU everywhere within the tolerance.
    pub fn passed(&self) -> bool {
        self.err <= self.tol
    }
}

impl std::fmt::Display for Canary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = if self.passed() { "agrees with" } else { "disagrees with" };
        write!(
            f,
            "the GPU adapter {} {verb} the CPU backend on the load-time check: |gpu − cpu| = {:.3e} (tolerance \
             {:.3e}) at sequence {}, token {}, hidden unit {} (gpu {}, cpu {})",
            self.adapter, self.err, self.tol, self.sequence, self.token, self.unit, self.gpu, self.cpu
        )
    }
}

/// `` `name` (backend, driver …) ``, for messages. Browsers may withhold the name (WebGPU's `description`; Chromium
/// gives none): then it says so.
pub fn adapter_name(gpu: &GpuBackend) -> String {
    let i = &gpu.gpu().info;
    let name = if i.name.is_empty() { "(unnamed by the browser)".to_string() } else { format!("`{}`", i.name) };
    let driver = [i.driver.as_str(), i.driver_info.as_str()].iter().filter(|s| !s.is_empty()).copied()
        .collect::<Vec<_>>().join(" ");
    if driver.is_empty() {
        format!("{name} ({:?})", i.backend)
    } else {
        format!("{name} ({:?}, driver {driver})", i.backend)
    }
}

/// The CPU's side of the check: the fixed input and the CPU backend's last hidden state for it, from `weights`
/// (streamed: see the module documentation). A GPU model keeps it to check its kernels again when they change.
///
/// Weights that went straight to GPU memory ([`crate::weights::Placed`]) are read back a module at a time, and
/// each is checked to be the bytes the file had ([`GpuBackend::host_copy`]); `weights` must then be the logging
/// set the GPU model was loaded from ([`Weights::logging`]), which says which tensors each module took.
pub async fn reference(model: &Model<GpuBackend>, weights: &Weights) -> Result<ReferenceOutput> {
    let encoded = INPUT.iter().map(|(a, b)| model.tokenizer.encode(a, *b)).collect::<Result<Vec<_>>>()?;
    let batch = model.tokenizer.batch(&encoded);
    let cpu = CpuBackend::reference();
    let gpu = &model.backend;
    // The input's own rows of the word embeddings are all the CPU needs of them: the table it is given holds those
    // rows, in the order of `ids`, and the input asks for row i of it where it had token ids[i]. (The padding id is
    // only compared with the input's ids: it becomes its row, or a row none has.)
    let mut ids: Vec<u32> = batch.input_ids.clone();
    ids.sort_unstable();
    ids.dedup();
    let row = |id: u32| ids.binary_search(&id).unwrap_or(ids.len()) as u32;
    let small = Batch { input_ids: batch.input_ids.iter().map(|&id| row(id)).collect(), ..batch.clone() };
    let mut config = model.config.clone();
    config.vocab_size = ids.len();
    config.pad_token_id = row(model.config.pad_token_id as u32) as _;
    let rows: Vec<usize> = ids.iter().map(|&id| id as usize).collect();
    let host = async |w: &Weights, module: &str| {
        let mut names = w.found_under(module);
        let mut w = w.clone();
        if module == "embeddings" {
            let table = w.stored_name("embeddings.word_embeddings.weight")?.ok_or_else(|| {
                crate::Error::Weights("tensor `embeddings.word_embeddings.weight` is missing from the weights".into())
            })?;
            let t = w.stored(&table).ok_or_else(|| crate::Error::Weights(format!("no tensor `{table}`")))?;
            let gathered = gpu.host_rows(t, &rows).await?;
            w = w.replaced(&table, gathered);
            names.retain(|n| *n != table);
        }
        read_back(gpu, &w, &names).await
    };
    let out = BertModel::forward_streamed(weights, &config, &cpu, &small, host).await?; // (B*T, H)
    let hidden = cpu.read(&out).await?;
    Ok(ReferenceOutput { batch, hidden })
}

/// `w` with the tensors stored under `names` that are in `gpu`'s memory read back to the host.
pub async fn read_back(gpu: &GpuBackend, w: &Weights, names: &[String]) -> Result<Weights> {
    let mut out = w.clone();
    for name in names {
        if let Some(t) = w.stored(name).filter(|t| matches!(t.data, HostData::Placed(_))) {
            out = out.replaced(name, gpu.host_copy(t).await?);
        }
    }
    Ok(out)
}

/// The pipelines that the check's forward on `model`, and a pooling of its output either way (mean, `[CLS]`),
/// need with the kernels its backend has now and has not built yet ([`GpuBackend::pipelines_of`]): those of a
/// first call of a short input.
pub fn pipelines(model: &Model<GpuBackend>) -> Result<Vec<PipelineSpec>> {
    let encoded = INPUT.iter().map(|(a, b)| model.tokenizer.encode(a, *b)).collect::<Result<Vec<_>>>()?;
    let batch = model.tokenizer.batch(&encoded);
    let be = &model.backend;
    be.pipelines_of(|| {
        let mask = be.mask(&batch)?;
        let hidden = model.bert.forward_with_mask(be, &batch, &mask)?;
        be.mean_pool(&hidden, &mask, batch.b, batch.t)?;
        be.gather_rows(&hidden, &[0])?;
        Ok(())
    })
}

/// The kernels the check runs to cover the tuning `t` (as the backend clamps it): `t` as it is, where the check's
/// sentence-sized input takes the small-product matmul, and, where the large-product matmul differs, `t` with the
/// small one replaced by it, so that both matmuls run.
pub fn covering(t: Tuning) -> Vec<Tuning> {
    let large = Tuning { small_matmul: t.matmul, ..t };
    if large == t { vec![t] } else { vec![t, large] }
}

/// Builds at once the [`pipelines`] of the check under each of `checks` ([`GpuBackend::build_pipelines`]: natively
/// on several threads), before the check runs them one after another. The backend's tuning is left as it was.
pub fn prebuild(model: &Model<GpuBackend>, checks: &[Tuning]) -> Result<()> {
    let be = &model.backend;
    let now = be.tuning();
    let mut specs = Vec::new();
    let mut noted = Ok(());
    for &t in checks {
        be.set_tuning(t);
        match pipelines(model) {
            Ok(s) => specs.extend(s),
            Err(e) => {
                noted = Err(e);
                break;
            }
        }
    }
    be.set_tuning(now);
    noted?;
    be.build_pipelines(&specs)
}

/// Runs the check on `model` (on the GPU), whose weights were `weights`. Errors are the GPU's (a lost
/// device) or the tokenizer's, not a disagreement: that is the returned [`Canary`]'s [`Canary::passed`].
pub async fn check(model: &Model<GpuBackend>, weights: &Weights) -> Result<Canary> {
    compare(model, &reference(model, weights).await?).await
}

/// [`compare`] under each of `checks` in turn: the first that disagrees with the CPU, and its tuning; `None` when
/// all agree. The backend's tuning is left as it was.
pub async fn compare_each(model: &Model<GpuBackend>, reference: &ReferenceOutput, checks: &[Tuning])
    -> Result<Option<(Tuning, Canary)>> {
    let be = &model.backend;
    let now = be.tuning();
    let mut outcome = Ok(None);
    for &t in checks {
        be.set_tuning(t);
        match compare(model, reference).await {
            Ok(c) if c.passed() => {}
            Ok(c) => {
                outcome = Ok(Some((t, c)));
                break;
            }
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    be.set_tuning(now);
    outcome
}

/// The GPU's output on the fixed input against `reference`, with the kernels `model`'s backend has now.
pub async fn compare(model: &Model<GpuBackend>, reference: &ReferenceOutput) -> Result<Canary> {
    let ReferenceOutput { batch, hidden: want } = reference;
    let gpu = &model.backend;
    let hidden = model.bert.forward(gpu, batch)?; // (B*T, H)
    let got = gpu.read(&hidden).await?;
    let h = model.config.hidden_size;
    let (atol, rtol) =
        if gpu.f16_activations() { (CANARY_F16_ATOL, CANARY_F16_RTOL) } else { (CANARY_ATOL, CANARY_RTOL) };
    let mut worst = Canary {
        adapter: adapter_name(gpu),
        err: 0.0,
        tol: atol,
        sequence: 0,
        token: 0,
        unit: 0,
        gpu: 0.0,
        cpu: 0.0,
        compared: 0,
    };
    let mut worst_ratio = -1.0f32;
    for (row, (g, c)) in got.chunks_exact(h).zip(want.chunks_exact(h)).enumerate() {
        if batch.attention_mask[row] == 0 {
            continue; // padding: no real token attends to it
        }
        for (unit, (&g, &c)) in g.iter().zip(c).enumerate() {
            let tol = atol + rtol * c.abs();
            let err = if g.is_finite() { (g - c).abs() } else { f32::INFINITY };
            let ratio = err / tol;
            if ratio > worst_ratio {
                worst_ratio = ratio;
                let (sequence, token) = (row / batch.t, row % batch.t);
                worst = Canary { err, tol, sequence, token, unit, gpu: g, cpu: c, ..worst };
            }
            worst.compared += 1;
        }
    }
    Ok(worst)
}
