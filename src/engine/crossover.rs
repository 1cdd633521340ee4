//! The CPU or the GPU per call: a GPU call costs a roughly fixed time to record, submit and read back whatever its
//! size, so a short call (a sentence of a few tokens) can finish sooner on the CPU backend while a batch runs faster
//! on the GPU. [`measure`] times both on the model's own shapes (one sequence of growing length, each length on each
//! backend in turn) and finds the longest call the CPU wins; [`Engine::add_cpu_twin`] keeps a CPU copy of the model
//! for calls up to there, and only where the CPU wins any.
//!
//! The copy is a second set of the weights in host memory (issue 29 counts the bytes), so it is asked for
//! (`bertgpu ... --crossover`), not made by default. Which backend runs a call changes its speed, never its
//! correctness: both run the same model, and the GPU passed the load-time check against the CPU.

use std::rc::Rc;

use crate::backend::cpu::CpuBackend;
use crate::backend::gpu::{calibration::now_ms, GpuBackend};
pub use crate::tasks::twin::{CpuTwin, Crossover};
use crate::tasks::{EmbedOptions, Model};
use crate::tokenizer::Encoded;
use crate::weights::Weights;
use crate::Result;

use super::Engine;

/// The lengths [`measure`] times, in tokens ([CLS]/[SEP] included), up to the model's longest.
pub const LENGTHS: [usize; 8] = [4, 8, 16, 32, 64, 128, 256, 512];

/// Timed runs of each backend at each length (after one untimed run); the median is compared.
const REPS: usize = 3;

/// `e` cut to its first `len - 1` tokens and its last (the closing `[SEP]`), every per-token field alike: an input of
/// exactly `len` tokens (`len` from 1 to `e.len()`).
pub fn of_length(e: &Encoded, len: usize) -> Encoded {
    fn cut<T: Clone>(v: &[T], len: usize) -> Vec<T> {
        let mut out = v[..len - 1].to_vec();
        out.extend(v.last().cloned());
        out
    }
    Encoded {
        ids: cut(&e.ids, len),
        type_ids: cut(&e.type_ids, len),
        tokens: cut(&e.tokens, len),
        offsets: cut(&e.offsets, len),
        special_tokens_mask: cut(&e.special_tokens_mask, len),
        sequence_ids: cut(&e.sequence_ids, len),
        word_ids: cut(&e.word_ids, len),
        ..e.clone()
    }
}

/// Times embedding one sequence of each of [`LENGTHS`] (up to the tokenizer's longest) on `gpu` and `cpu`, shortest
/// first, until the GPU has been faster at two lengths in a row or `budget_ms` is spent (one length at least).
pub async fn measure(gpu: &Model<GpuBackend>, cpu: &Model<CpuBackend>, budget_ms: f64) -> Result<Crossover> {
    let longest = gpu.tokenizer.encode(&"the ".repeat(gpu.tokenizer.max_length()), None)?;
    let opts = EmbedOptions::default();
    let t0 = now_ms();
    let (mut points, mut gpu_ahead) = (Vec::new(), 0);
    for len in LENGTHS.into_iter().filter(|&l| l <= longest.len()) {
        let input = [of_length(&longest, len)];
        gpu.embed_encoded(&input, &opts).await?;
        cpu.embed_encoded(&input, &opts).await?;
        let (mut on_cpu, mut on_gpu) = (Vec::new(), Vec::new());
        for _ in 0..REPS {
            let t = now_ms();
            cpu.embed_encoded(&input, &opts).await?;
            on_cpu.push(now_ms() - t);
            let t = now_ms();
            gpu.embed_encoded(&input, &opts).await?;
            on_gpu.push(now_ms() - t);
        }
        let (c, g) = (median(on_cpu), median(on_gpu));
        points.push((len, c, g));
        gpu_ahead = if g <= c { gpu_ahead + 1 } else { 0 };
        if gpu_ahead == 2 || now_ms() - t0 > budget_ms {
            break;
        }
    }
    Ok(Crossover::from_points(points))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// An upper bound on the tokens of texts (and pairs): a token spans at least one byte of its text, plus the special
/// tokens. Only the choice of backend uses it, which changes the speed of a call, never its result.
pub fn most_tokens<'a>(inputs: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> usize {
    inputs.into_iter().map(|(a, b)| a.len() + b.map_or(2, |b| b.len() + 4)).sum()
}

impl Engine {
    /// On the GPU: makes a CPU copy of the model from `weights` (the same weights the GPU holds, in host memory),
    /// measures the crossover within `budget_ms` ([`measure`]), and keeps the copy for calls up to it, only if the
    /// CPU wins any. Returns what was measured; `None` on the CPU, where there is nothing to choose.
    pub async fn add_cpu_twin(&self, weights: &Weights, budget_ms: f64) -> Result<Option<Crossover>> {
        let Engine::Gpu(m) = self else { return Ok(None) };
        m.cpu_twin.replace(None);
        let cpu = Model::new(CpuBackend::new(), m.config.clone(), m.tokenizer.clone(), weights)?;
        let crossover = measure(m, &cpu, budget_ms).await?;
        keep_twin(m, cpu, crossover.clone());
        Ok(Some(crossover))
    }

    /// [`Self::add_cpu_twin`] with a crossover given rather than measured (one measured earlier on this adapter, or
    /// a test's). `max_tokens` 0 drops the copy.
    pub fn set_cpu_twin(&self, weights: &Weights, crossover: Crossover) -> Result<()> {
        let Engine::Gpu(m) = self else { return Ok(()) };
        m.cpu_twin.replace(None);
        if crossover.max_tokens > 0 {
            keep_twin(m, Model::new(CpuBackend::new(), m.config.clone(), m.tokenizer.clone(), weights)?, crossover);
        }
        Ok(())
    }

    /// The CPU copy and its crossover, if one takes short calls.
    fn twin(&self) -> Option<Rc<CpuTwin>> {
        match self {
            Engine::Gpu(m) => m.cpu_twin.borrow().clone(),
            Engine::Cpu(_) => None,
        }
    }

    /// The crossover in use, where a CPU copy takes short calls.
    pub fn crossover(&self) -> Option<Crossover> {
        self.twin().map(|t| t.crossover.clone())
    }

    /// Where the last call ran: "cpu" or "gpu". It differs from [`Self::device`] only where a CPU copy takes short
    /// calls.
    pub fn last_call_device(&self) -> &'static str {
        match (self, self.twin()) {
            (Engine::Gpu(_), Some(t)) if t.last_on_cpu() => "cpu",
            (Engine::Gpu(_), _) => "gpu",
            (Engine::Cpu(_), _) => "cpu",
        }
    }

    /// The CPU copy, if there is one and a call of at most `tokens` tokens goes to it; remembers where the call went.
    pub(crate) fn twin_for(&self, tokens: usize) -> Option<Rc<CpuTwin>> {
        let twin = self.twin()?;
        let on_cpu = tokens <= twin.crossover.max_tokens;
        twin.set_last_on_cpu(on_cpu);
        on_cpu.then_some(twin)
    }

}

/// Keeps `cpu` as `m`'s copy for short calls, where `crossover` gives it any.
fn keep_twin(m: &Model<GpuBackend>, cpu: Model<CpuBackend>, crossover: Crossover) {
    if crossover.max_tokens > 0 {
        m.cpu_twin.replace(Some(Rc::new(CpuTwin::new(cpu, crossover))));
    }
}

/// Runs `$body` with `$m` bound to the CPU copy where a call of at most `$tokens` tokens goes to it
/// ([`Engine::twin_for`]), else to the engine's model ([`crate::with_model`]).
macro_rules! routed {
    ($engine:expr, $tokens:expr, $m:ident => $body:expr) => {
        match $engine.twin_for($tokens) {
            Some(twin) => {
                let $m = &twin.model;
                $body
            }
            None => $crate::with_model!($engine, $m => $body),
        }
    };
}
pub(crate) use routed;
