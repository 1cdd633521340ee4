//! What training holds besides the model, measured: every allocation of this test binary counted (a global
//! allocator that keeps the bytes live and their high-water mark), a real checkpoint (all-MiniLM-L6-v2) fine-tuned
//! on the CPU backend (the code the browser's wasm build runs), and the peak of a training step compared with
//! `FineTuner::memory`'s statement of it: the statement must hold (never below what was used) and be tight.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::config::BertConfig;
use bertgpu::tokenizer::Batch;
use bertgpu::training::finetune::{FineTuneTask, FineTuner, Targets};
use bertgpu::training::optim::StepOptions;
use bertgpu::training::fit::memory::TrainingMemory;
use bertgpu::weights::Weights;

mod common;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                let now = LIVE.fetch_add(new - l.size(), Ordering::Relaxed) + (new - l.size());
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes live now, and the peak since the last call (reset to now).
fn mark() -> (usize, usize) {
    let live = LIVE.load(Ordering::SeqCst);
    (live, PEAK.swap(live, Ordering::SeqCst))
}

const MIB: f64 = 1048576.0;

/// The allocator counts every thread's allocations: the tests of this binary take turns, so that one's tensors are
/// never counted in another's peaks.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How far above the measured peak the statement may be: it counts the backward's temporaries as if all were alive
/// at once and the masked LM's rows at their most; measured 0.2–10% above on these shapes.
const STATED_OVER_AT_MOST: f64 = 0.15;

/// A sequence classifier fine-tuned on micro-batches of `b` × `t` (its top `top` layers only, if given): the peaks
/// above the memory before the fine-tuner was made, over the second step's backward and its update, and the
/// statement.
fn measure(cfg: &BertConfig, weights: &Weights, b: usize, t: usize, top: Option<usize>) -> (usize, usize, TrainingMemory) {
    let be = CpuBackend::new();
    let batch = Batch { input_ids: (0..b * t).map(|i| 1000 + (i as u32 * 7919) % 20000).collect(),
        token_type_ids: vec![0; b * t], attention_mask: vec![1; b * t], b, t };
    let labels: Vec<u32> = (0..b as u32).map(|i| i % 2).collect();
    let (before, _) = mark();
    let mut tr = FineTuner::new(&be, cfg, weights, FineTuneTask::Sequence, Some(2), 0).unwrap();
    tr.set_top_layers(top).unwrap();
    let opt = StepOptions::default();
    // The first step makes AdamW's moments; the second is a step as every later one.
    pollster::block_on(tr.step(&be, &batch, &Targets::Sequence(&labels), &opt)).unwrap();
    mark();
    pollster::block_on(tr.accumulate(&be, &batch, &Targets::Sequence(&labels))).unwrap();
    let (_, backward) = mark();
    pollster::block_on(tr.apply(&be, &opt)).unwrap();
    let (_, update) = mark();
    (backward - before, update - before, tr.memory(b, t))
}

#[test]
fn a_steps_memory_is_what_the_fine_tuner_states() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    let weights = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    for (b, t, top) in [(2usize, 16usize, None), (8, 64, None), (16, 128, None), (16, 128, Some(2))] {
        let (backward, update, m) = measure(&cfg, &weights, b, t, top);
        let measured = backward.max(update) as f64;
        let stated = m.total() as f64;
        eprintln!("{b}×{t}, top {top:?}: measured {:.1} MiB (backward {:.1}, update {:.1}); stated {m}",
            measured / MIB, backward as f64 / MIB, update as f64 / MIB);
        assert!(stated >= measured, "{b}×{t}: stated {stated} < measured {measured}");
        assert!(stated <= measured * (1.0 + STATED_OVER_AT_MOST), "{b}×{t}: stated {stated}, measured {measured}");
        // Each phase against its own part: the backward (parameters, moments, gradients and the activations) and the
        // update (the same without activations, plus a parameter's new value and moments).
        let base = m.parameters + m.optimizer + m.gradients;
        let (b_stated, u_stated) = ((base + m.activations) as f64, (base + m.update) as f64);
        assert!(b_stated + MIB >= backward as f64 && b_stated <= backward as f64 * (1.0 + STATED_OVER_AT_MOST),
            "{b}×{t} backward: stated {b_stated}, measured {backward}");
        assert!(u_stated + MIB >= update as f64 && u_stated <= update as f64 * (1.0 + STATED_OVER_AT_MOST),
            "{b}×{t} update: stated {u_stated}, measured {update}");
    }
}

/// On the GPU the tensors live in the backend's buffer pool, which keeps freed buffers for the next tensor of their
/// size, within a bound (src/backend/gpu/buffers.rs): what it holds is the device memory training takes. Batches
/// padded to their longest row (as fit pads them) come in many lengths; without the bound each length left its own
/// buffers behind (830 MiB after the 7 lengths here, growing with each new one).
#[test]
fn the_gpu_pool_stays_within_the_statement() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(g) = common::gpu() else { return };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    let weights = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    let mut tr = FineTuner::new(&g, &cfg, &weights, FineTuneTask::Sequence, Some(2), 0).unwrap();
    let b = 8;
    let mut most = 0;
    for t in [16usize, 24, 32, 40, 48, 56, 64, 16, 64] {
        let batch = Batch { input_ids: (0..b * t).map(|i| 1000 + (i as u32 * 7919) % 20000).collect(),
            token_type_ids: vec![0; b * t], attention_mask: vec![1; b * t], b, t };
        let labels: Vec<u32> = (0..b as u32).map(|i| i % 2).collect();
        pollster::block_on(tr.step(&g, &batch, &Targets::Sequence(&labels), &StepOptions::default())).unwrap();
        let (held, peak, evicted) = g.pool_memory();
        most = most.max(held);
        eprintln!("after {b}×{t}: the pool holds {:.1} MiB (most in use at once {:.1}, {evicted} buffers dropped)",
            held as f64 / MIB, peak as f64 / MIB);
    }
    // The tensors in use at once are the statement's (the parameters are pool buffers here); the pool may hold half
    // as much again in free buffers.
    let stated = tr.memory(b, 64).total();
    let (_, peak, _) = g.pool_memory();
    eprintln!("stated at {b}×64: {}; the pool held at most {:.1} MiB", tr.memory(b, 64), most as f64 / MIB);
    assert!(peak <= stated, "most in use at once {peak} > stated {stated}");
    assert!(most as f64 <= 1.5 * stated as f64 + 16.0 * MIB, "the pool held {most}, stated {stated}");
}
