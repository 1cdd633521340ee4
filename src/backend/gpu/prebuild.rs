//! Pipelines built before they are needed, natively on several threads at once.
//!
//! A pipeline is built the first time a dispatch needs it ([`GpuBackend::dispatch`]), one after another on the
//! recording thread. Most drivers compile the kernel then, on the thread that asks (Vulkan on NVIDIA, AMD and
//! Intel; Metal; D3D12; SwiftShader), and a calibration builds about fifty: on a fresh machine that took the first
//! calibrations on an H100 past their budget (BENCHMARKS.md). So the recording of a model's first call, or of a
//! calibration stage, first runs with its dispatches only noted ([`GpuBackend::pipelines_of`]: no GPU work), then
//! what they need is built at once ([`GpuBackend::build_pipelines`]): natively on up to as many threads as the
//! machine has cores (a `wgpu::Device` is shared between threads); in a browser on the one thread there is, which
//! is the same work as building them one at a time. (lavapipe compiles at a kernel's first dispatch instead, on
//! its own thread: building early does not move that work.)

use super::runtime::{build_pipeline, pipeline_key, Binding, Pipeline, PipelineKey};
use super::GpuBackend;
use crate::Result;

/// What a dispatch needs of its pipeline: enough to build it away from the recording.
#[derive(Clone, Debug)]
pub struct PipelineSpec {
    key: PipelineKey,
    shader: &'static str,
    entry: &'static str,
    consts: Vec<(&'static str, f64)>,
    /// Each storage binding: (index, written by the kernel).
    bindings: Vec<(u32, bool)>,
}

impl GpuBackend {
    /// In the noting mode of [`Self::pipelines_of`], notes the pipeline of a dispatch (unless it is built or noted
    /// already) and returns true: the dispatch then records nothing.
    pub(super) fn note_pipeline(&self, shader: &'static str, entry: &'static str, consts: &[(&'static str, f64)],
        bindings: &[Binding<'_>]) -> bool {
        let mut noting = self.noting.borrow_mut();
        let Some(noted) = noting.as_mut() else { return false };
        let key = pipeline_key(shader, entry, consts);
        if !self.pipelines.borrow().contains_key(&key) && !noted.iter().any(|s| s.key == key) {
            let bindings = bindings.iter().map(|&(b, _, w)| (b, w)).collect();
            noted.push(PipelineSpec { key, shader, entry, consts: consts.to_vec(), bindings });
        }
        true
    }

    /// The pipelines that `record` would build, without running it on the GPU: its dispatches are noted, not
    /// recorded, and whatever else it records (copies) is dropped unsubmitted. Work recorded before is submitted
    /// first, so none of it is lost. `record` must not read results back (nothing ran).
    pub fn pipelines_of(&self, record: impl FnOnce() -> Result<()>) -> Result<Vec<PipelineSpec>> {
        if self.pending.borrow().is_some() {
            self.submit(|_| {});
        }
        *self.noting.borrow_mut() = Some(Vec::new());
        let recorded = record();
        let noted = self.noting.borrow_mut().take().unwrap_or_default();
        drop(self.pending.borrow_mut().take());
        recorded?;
        Ok(noted)
    }

    /// Builds the pipelines of `specs` (from [`Self::pipelines_of`]; repeats are built once) that are not built yet:
    /// each module on this thread (its compiler errors name the file and line), then the pipelines, natively on up
    /// to as many threads as there are cores.
    pub fn build_pipelines(&self, specs: &[PipelineSpec]) -> Result<()> {
        let mut todo: Vec<&PipelineSpec> = Vec::new();
        for s in specs {
            if !self.pipelines.borrow().contains_key(&s.key) && !todo.iter().any(|t| t.key == s.key) {
                todo.push(s);
            }
        }
        let specs = todo;
        for s in &specs {
            self.module(s.shader)?;
        }
        let guard = self.modules.borrow();
        let (modules, device) = (&*guard, &self.gpu.device);
        let build = |s: &PipelineSpec| build_pipeline(device, &modules[s.shader], s.entry, &s.consts, &s.bindings);
        let built: Vec<Pipeline> = build_all(&specs, &build);
        drop(guard);
        self.gpu.check_errors()?;
        let mut pipelines = self.pipelines.borrow_mut();
        for (s, p) in specs.iter().zip(built) {
            pipelines.insert(s.key.clone(), std::rc::Rc::new(p));
        }
        Ok(())
    }
}

/// `build` of every spec, in order: natively on up to `available_parallelism` threads, each taking the next spec
/// not yet taken (kernels take unequal times to compile).
#[cfg(not(target_arch = "wasm32"))]
fn build_all(specs: &[&PipelineSpec], build: &(dyn Fn(&PipelineSpec) -> Pipeline + Sync)) -> Vec<Pipeline> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(specs.len());
    if threads <= 1 {
        return specs.iter().map(|s| build(s)).collect();
    }
    let next = AtomicUsize::new(0);
    let mut built: Vec<(usize, Pipeline)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(s) = specs.get(i) else { break mine };
                        mine.push((i, build(s)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a pipeline-building thread panicked")).collect()
    });
    built.sort_by_key(|(i, _)| *i);
    built.into_iter().map(|(_, p)| p).collect()
}

/// In a browser there is one thread: the pipelines are built in turn.
#[cfg(target_arch = "wasm32")]
fn build_all(specs: &[&PipelineSpec], build: &dyn Fn(&PipelineSpec) -> Pipeline) -> Vec<Pipeline> {
    specs.iter().map(|s| build(s)).collect()
}
