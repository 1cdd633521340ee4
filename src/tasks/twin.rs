//! A CPU copy of a GPU model for the calls the CPU finishes sooner, and the crossover that says which calls those
//! are: the data `crate::engine::crossover` measures, keeps on the GPU model ([`super::Model::cpu_twin`]) and routes
//! calls by.

use std::cell::Cell;
use std::fmt;

use crate::backend::cpu::CpuBackend;

use super::Model;

/// What `crate::engine::crossover::measure` found: calls of at most `max_tokens` tokens run on the CPU.
#[derive(Clone, Debug, PartialEq)]
pub struct Crossover {
    /// Calls whose sequences hold at most this many tokens in all go to the CPU; 0: none do.
    pub max_tokens: usize,
    /// What was timed: (tokens, CPU ms, GPU ms), medians; empty where the crossover was set by hand.
    pub points: Vec<(usize, f64, f64)>,
}

impl Crossover {
    /// The crossover from timed points: the longest length of the leading run where the CPU was faster (a GPU that
    /// wins at some length is not expected to lose at a longer one; if it does, the shorter answer is kept).
    pub fn from_points(points: Vec<(usize, f64, f64)>) -> Crossover {
        let max_tokens = points.iter().take_while(|(_, cpu, gpu)| cpu < gpu).last().map_or(0, |p| p.0);
        Crossover { max_tokens, points }
    }
}

impl fmt::Display for Crossover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.max_tokens {
            0 => write!(f, "every call on the GPU")?,
            n => write!(f, "calls of at most {n} tokens on the CPU, longer ones on the GPU")?,
        }
        let timed: Vec<String> =
            self.points.iter().map(|(t, cpu, gpu)| format!("{t}: CPU {cpu:.2} ms, GPU {gpu:.2} ms")).collect();
        if !timed.is_empty() {
            write!(f, " ({})", timed.join("; "))?;
        }
        // The measurement stops at the budget: where the CPU still led at its last length, longer calls stay on the
        // GPU asked for, though the CPU may win those too.
        match self.points.last() {
            Some((t, cpu, gpu)) if cpu < gpu => write!(f, "; the CPU still led at {t} tokens, the longest timed"),
            _ => Ok(()),
        }
    }
}

/// A CPU copy of a GPU model, for the calls [`Crossover`] gives to the CPU.
pub struct CpuTwin {
    pub model: Model<CpuBackend>,
    pub crossover: Crossover,
    /// Whether the last call routed by the crossover ran here.
    last_on_cpu: Cell<bool>,
}

impl CpuTwin {
    pub fn new(model: Model<CpuBackend>, crossover: Crossover) -> CpuTwin {
        CpuTwin { model, crossover, last_on_cpu: Cell::new(false) }
    }

    /// Whether the last call routed by the crossover ran on this copy.
    pub fn last_on_cpu(&self) -> bool {
        self.last_on_cpu.get()
    }

    pub(crate) fn set_last_on_cpu(&self, on_cpu: bool) {
        self.last_on_cpu.set(on_cpu);
    }
}
