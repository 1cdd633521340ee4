//! The browser entry: a thin wasm-bindgen shim over [`crate::tasks`]; the JavaScript API is in `js/`.
//!
//! Rules of this boundary (wasm-bindgen issue 4440: JS may call again while a Rust future is suspended):
//! methods take `&self`, never `&mut self`; state that async calls share sits in `Rc` and is cloned into the futures;
//! the JS wrapper also queues calls, so two calls never run at once. Errors become rejected promises carrying a JS
//! `Error` with our message. A panic is logged by `console_error_panic_hook` and reported to the listener JS
//! registered ([`set_panic_listener`]), which rejects the call in flight (a trap inside a suspended future would
//! otherwise leave its promise pending forever) and makes the wrapper instantiate a fresh module for the next load.
//!
//! Here `load` and the tasks; beside them `train.rs` (`trainHead`, `fineTune`), `pretrain.rs` (`pretrain`),
//! `tokenizer.rs` (`trainTokenizer`, `initialModel`), `stream.rs` (the weights file as it downloads), `tune.rs`
//! (the GPU kernels' calibration) and `zero_shot.rs` (`zeroShot`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Once;

use serde::Serialize;
use wasm_bindgen::prelude::*;

use crate::backend::cpu::CpuBackend;
use crate::heads::token_classifier::Aggregation;
use crate::engine::{Device, Engine, Placement};
use crate::loader::{LoadOptions, ModelFiles, ModelSource, WeightsFile};
use crate::tasks::{EmbedOptions, Pooling};
use crate::weights::stream::Streamed;
use crate::Error;

mod pretrain;
mod shards;
mod stream;
mod tokenizer;
mod train;
mod tune;
mod vectors;
mod zero_shot;

/// The system allocator (dlmalloc on wasm32), counting the bytes allocated and not yet freed, so the soak test can
/// tell a leak from the allocator's own reuse: `WebAssembly.Memory` only ever grows, so its size alone says little.
/// Counting costs two relaxed atomic adds per allocation (wasm32 without threads: plain adds).
struct CountingAlloc;

static LIVE_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
            LIVE_BYTES.fetch_add(new_size, std::sync::atomic::Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Memory of the module, for the soak test: `{ liveBytes }` (allocated by Rust and not freed) and `{ memoryBytes }`
/// (the size of the wasm linear memory, which never shrinks). Not part of the public API.
#[wasm_bindgen(js_name = __debugHeap)]
pub fn debug_heap() -> Result<JsValue, JsError> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Heap {
        live_bytes: usize,
        memory_bytes: usize,
    }
    let heap = Heap {
        live_bytes: LIVE_BYTES.load(std::sync::atomic::Ordering::Relaxed),
        memory_bytes: core::arch::wasm32::memory_size(0) * 65536,
    };
    to_js(&heap)
}

thread_local! {
    static PANIC_LISTENER: RefCell<Option<js_sys::Function>> = const { RefCell::new(None) };
}

fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            console_error_panic_hook::hook(info);
            let message = info.to_string();
            PANIC_LISTENER.with(|l| {
                if let Ok(l) = l.try_borrow() {
                    if let Some(f) = l.as_ref() {
                        let _ = f.call1(&JsValue::NULL, &JsValue::from_str(&message));
                    }
                }
            });
        }));
    });
}

#[wasm_bindgen(start)]
fn start() {
    install_panic_hook();
}

/// Registers `f(message)`, called when Rust panics (after the message is logged to the console).
#[wasm_bindgen(js_name = setPanicListener)]
pub fn set_panic_listener(f: js_sys::Function) {
    install_panic_hook();
    PANIC_LISTENER.with(|l| *l.borrow_mut() = Some(f));
}

/// The threaded build's pool (src/backend/cpu/threads.rs), driven by js/threads.js: opens a pool generation of
/// `threads` threads (the caller included) and returns its number, for the workers to run.
#[cfg(feature = "threads")]
#[wasm_bindgen(js_name = __threadsBegin)]
pub fn threads_begin(threads: usize) -> u32 {
    crate::backend::cpu::threads::begin(threads)
}

/// A worker's whole life in the pool (js/threads-worker.js): returns when `generation` ends.
#[cfg(feature = "threads")]
#[wasm_bindgen(js_name = __threadsRun)]
pub fn threads_run(generation: u32) {
    crate::backend::cpu::threads::worker(generation)
}

/// Ends the pool's current generation: the loops run on the caller alone until the next `__threadsBegin`.
#[cfg(feature = "threads")]
#[wasm_bindgen(js_name = __threadsEnd)]
pub fn threads_end() {
    crate::backend::cpu::threads::end()
}

/// A worker trapped: a loop waiting for its item panics instead of waiting forever.
#[cfg(feature = "threads")]
#[wasm_bindgen(js_name = __threadsLost)]
pub fn threads_lost() {
    crate::backend::cpu::threads::lost()
}

/// This module and its shared memory, for the pool's workers to instantiate the same module over.
#[cfg(feature = "threads")]
#[wasm_bindgen(js_name = __threadsModule)]
pub fn threads_module() -> JsValue {
    wasm_bindgen::module()
}

/// See `__threadsModule`.
#[cfg(feature = "threads")]
#[wasm_bindgen(js_name = __threadsMemory)]
pub fn threads_memory() -> JsValue {
    wasm_bindgen::memory()
}

/// `[threads planned for, workers running, items the workers have run]`, for tests.
#[cfg(feature = "threads")]
#[wasm_bindgen(js_name = __threadsState)]
pub fn threads_state() -> Vec<u32> {
    use crate::backend::cpu::threads;
    vec![threads::threads() as u32, threads::running() as u32, threads::worker_items() as u32]
}

/// The crate version, for bug reports.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Panics on purpose, so the browser tests can check that a panic becomes a rejected promise and the next load
/// still works. Not part of the public API.
#[wasm_bindgen(js_name = __debugPanic)]
pub fn debug_panic() {
    panic!("deliberate panic (__debugPanic)");
}

/// Fails an allocation as running out of memory does (Rust aborts: a trap, not a panic, so the panic hook never runs),
/// after suspending once, so that the trap comes from wasm-bindgen's task queue as a long call's later steps would:
/// for tests/browser/package.test.mjs, which checks that the call rejects and the next load starts afresh. Not part of
/// the public API.
#[wasm_bindgen(js_name = __debugOutOfMemoryAfterAwait)]
pub async fn debug_out_of_memory_after_await() {
    let _ = wasm_bindgen_futures::JsFuture::from(js_sys::Promise::resolve(&JsValue::NULL)).await;
    std::alloc::handle_alloc_error(std::alloc::Layout::new::<[u64; 8]>());
}

/// `x (M, K) · Wᵀ` on the CPU backend for a Q8_0 weight `W (N, K)` given as its blocks: the integer kernel of this
/// build (SIMD128 or relaxed SIMD), for tests/browser/q8-kernel.test.mjs. Not part of the public API.
#[wasm_bindgen(js_name = __debugLinearQ8)]
pub fn debug_linear_q8(x: &[f32], w: &[u8], m: usize, n: usize, k: usize) -> Result<Vec<f32>, JsError> {
    use crate::backend::{cpu::CpuBackend, Activation, Backend};
    let cpu = CpuBackend::new();
    let wt = crate::weights::HostTensor { shape: vec![n, k], data: crate::weights::HostData::Q8_0(w.to_vec()) };
    let y = cpu.linear(&cpu.input(x, m, k).map_err(js_err)?, &cpu.upload(&wt).map_err(js_err)?, None, Activation::None)
        .map_err(js_err)?;
    Ok(y.to_vec())
}

/// One CPU matmul alone, for bench/kernel.mjs: the backend's `linear` (`x (M, K) · Wᵀ`) `reps` times with W `(N, K)`
/// in `dtype` ("q8_0": the integer kernel; "f32": the f32 GEMM), cycling through `copies` distinct weights
/// (pseudo-random, so that `copies` sets how much memory they span: a whole model's layers do not stay in the cache,
/// one matrix does). Returns the milliseconds per call, after one untimed pass over the weights (the caches, and
/// the engine's code, warm). Only with the `bench-exports` feature; not part of the public API.
#[cfg(feature = "bench-exports")]
#[wasm_bindgen(js_name = __debugBenchLinear)]
pub fn debug_bench_linear(dtype: &str, m: usize, n: usize, k: usize, copies: usize, reps: usize) -> Result<f64, JsError> {
    use crate::backend::{Activation, Backend};
    use crate::weights::quant::{Q8_0_BLOCK_BYTES, QK};
    use crate::weights::{HostData, HostTensor};
    if m == 0 || n == 0 || k == 0 || k % QK != 0 || copies == 0 || m * k > 1 << 24 || n * k * copies > 1 << 25 {
        return Err(JsError::new("__debugBenchLinear: M, N, copies > 0, K a multiple of 32, sizes bounded"));
    }
    let mut state = 0x2545_f491_u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let mut random = || match dtype {
        "q8_0" => {
            let mut bytes = vec![0u8; n * k / QK * Q8_0_BLOCK_BYTES];
            for block in bytes.chunks_exact_mut(Q8_0_BLOCK_BYTES) {
                block[..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
                block[2..].iter_mut().for_each(|q| *q = (next() >> 24) as u8);
            }
            Ok(HostData::Q8_0(bytes))
        }
        "f32" => Ok(HostData::F32((0..n * k).map(|_| (next() >> 8) as f32 / (1 << 24) as f32 - 0.5).collect())),
        other => Err(JsError::new(&format!("__debugBenchLinear: dtype \"q8_0\" or \"f32\", not {other:?}"))),
    };
    let cpu = CpuBackend::new();
    let weights = (0..copies)
        .map(|_| cpu.upload(&HostTensor { shape: vec![n, k], data: random()? }).map_err(js_err))
        .collect::<Result<Vec<_>, JsError>>()?;
    let x: Vec<f32> = (0..m * k).map(|i| (i % 251) as f32 / 125.0 - 1.0).collect();
    let x = cpu.input(&x, m, k).map_err(js_err)?;
    let run = |reps: usize| -> Result<(), JsError> {
        for w in weights.iter().cycle().take(reps) {
            cpu.linear(&x, w, None, Activation::None).map_err(js_err)?;
        }
        Ok(())
    };
    run(copies)?;
    let t0 = js_sys::Date::now();
    run(reps.max(1))?;
    Ok((js_sys::Date::now() - t0) / reps.max(1) as f64)
}

/// Which form of the relaxed-SIMD Q8_0 kernel's dot product runs: "fused" or "split" (module docs of
/// `backend::cpu::q8`), or "simd128" in the SIMD128 build. `force`: "fused" / "split" fixes it, "auto" returns to
/// the engine's (`q8::fused_dot`), `undefined` only reads it. For tests/browser/q8-kernel.test.mjs. Not
/// part of the public API.
#[wasm_bindgen(js_name = __q8DotForm)]
pub fn q8_dot_form(force: Option<String>) -> Result<String, JsError> {
    use crate::backend::cpu::q8;
    match force.as_deref() {
        None => {}
        Some("fused") => q8::force_fused_dot(Some(true)),
        Some("split") => q8::force_fused_dot(Some(false)),
        Some("auto") => q8::force_fused_dot(None),
        Some(other) => return Err(JsError::new(&format!("__q8DotForm: \"fused\", \"split\" or \"auto\", not {other:?}"))),
    }
    Ok(if !cfg!(feature = "relaxed-simd") { "simd128" } else if q8::fused_dot() { "fused" } else { "split" }.into())
}

/// A `crate::Error` as a JS `Error` with our message (which says how to fix the problem).
pub(crate) fn js_err(e: Error) -> JsError {
    JsError::new(&e.to_string())
}


/// A file in JS memory (a `Uint8Array`), read in pieces: each piece is copied straight to where it goes in wasm
/// memory ([`crate::weights::bytes::ByteSource`]).
pub(super) struct JsBytes(pub(super) js_sys::Uint8Array);

impl crate::weights::bytes::ByteSource for JsBytes {
    fn byte_len(&self) -> usize {
        self.0.length() as usize
    }
    fn read(&self, at: usize, out: &mut [u8]) {
        self.0.subarray(at as u32, (at + out.len()) as u32).copy_to(out);
    }
}

/// A loaded model. JS owns it through the `Bert` wrapper (js/index.js), which frees it on `dispose()`.
/// The engine sits in an `Rc`: async methods clone it into their futures, which outlive the `&self` borrow.
#[wasm_bindgen]
pub struct WasmModel {
    engine: Rc<Engine>,
}

/// `tokenize`'s result, with the field names of the Hugging Face tokenizers.
#[derive(Serialize)]
struct Tokenized {
    input_ids: Vec<u32>,
    token_type_ids: Vec<u32>,
    tokens: Vec<String>,
    /// Whether tokens were cut to fit the model's `max_position_embeddings` (`embed` and the tasks cut the same way).
    truncated: bool,
}

/// Plain objects (not `Map`s) for `Option::None` → `null` and structs → objects.
pub(crate) fn to_js<T: Serialize>(v: &T) -> Result<JsValue, JsError> {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible()).map_err(|e| JsError::new(&e.to_string()))
}

fn parse_device(device: &str) -> Result<Device, JsError> {
    match device {
        "cpu" => Ok(Device::Cpu),
        "webgpu" => Ok(Device::Gpu),
        "auto" => Ok(Device::Auto),
        other => Err(JsError::new(&format!("device must be \"webgpu\", \"auto\" or \"cpu\" (got \"{other}\")"))),
    }
}

/// Loads `source` on `device` ([`Engine::place`]: on the GPU only if it passes the load-time check). The files are
/// checked before a device is asked for. `inject_fault` (`Bert.load`'s test-only `_injectFault`) makes the GPU's
/// linears return wrong values ([`crate::backend::gpu::GpuBackend::inject_fault`]), for the tests of that check.
async fn load_engine(source: ModelSource<'_>, device: &str, cpu: CpuBackend, inject_fault: Option<bool>,
    placement: Option<Placement>, tunings: JsValue) -> Result<Engine, JsError> {
    parse_device(device)?;
    let m = crate::loader::load(source, &LoadOptions::default()).map_err(js_err)?;
    place(m, device, cpu, inject_fault, placement, tunings).await
}

/// `load`'s `tunings`: the kernels' choices js/tuning.js cached in IndexedDB (`{ key: text }`, or `undefined`),
/// for [`Placement::tunings`].
fn tunings_of(tunings: JsValue) -> Result<BTreeMap<String, String>, JsError> {
    if tunings.is_undefined() || tunings.is_null() {
        return Ok(BTreeMap::new());
    }
    serde_wasm_bindgen::from_value(tunings)
        .map_err(|e| JsError::new(&format!("load: tunings must map cache keys to tuning texts ({e})")))
}

/// sentence-transformers' files as the loader fetched them: `[[path, Uint8Array], ...]`, or `undefined` for none.
fn sentence_files(files: JsValue) -> Result<Vec<(String, Vec<u8>)>, JsError> {
    if files.is_undefined() || files.is_null() {
        return Ok(Vec::new());
    }
    let list: js_sys::Array = files.dyn_into().map_err(|_| JsError::new("sentence files must be [[path, bytes], ...]"))?;
    list.iter()
        .map(|entry| {
            let pair: js_sys::Array = entry.dyn_into().map_err(|_| JsError::new("a sentence file must be [path, bytes]"))?;
            let name = pair.get(0).as_string().ok_or_else(|| JsError::new("a sentence file's path must be a string"))?;
            let bytes: js_sys::Uint8Array =
                pair.get(1).dyn_into().map_err(|_| JsError::new(&format!("{name}: its bytes must be a Uint8Array")))?;
            Ok((name, bytes.to_vec()))
        })
        .collect()
}

/// `WasmModel.load`'s `weights` (a `Uint8Array` of model.safetensors or pytorch_model.bin, a finished safetensors
/// `WeightStream`, or a sharded checkpoint's files) as the loader reads them, and the device a stream placed them on.
pub(super) fn weights_file(weights: JsValue) -> Result<(WeightsFile, Option<Placement>), JsError> {
    if let Some(joined) = shards::sharded_weights(&weights)? {
        return Ok((WeightsFile::Read(joined), None));
    }
    Ok(match weights.dyn_into::<js_sys::Uint8Array>() {
        // The weights stay in JS memory and are read a tensor at a time: never the whole file in wasm memory.
        Ok(bytes) => (WeightsFile::Bytes(Box::new(JsBytes(bytes))), None),
        Err(other) => match stream::WeightStream::take(other)? {
            (Streamed::Safetensors(w), placement) => (WeightsFile::Read(w), placement),
            (Streamed::Gguf(_), _) => return Err(JsError::new("load: the weights stream holds a .gguf: use loadGguf")),
        },
    })
}

/// [`load_engine`]'s second half: the checked model on `device`, or on the `placement` its weights streamed to.
async fn place(m: crate::loader::LoadedModel, device: &str, cpu: CpuBackend, inject_fault: Option<bool>,
    placement: Option<Placement>, tunings: JsValue) -> Result<Engine, JsError> {
    let device = parse_device(device)?;
    let tunings = tunings_of(tunings)?;
    let weights = m.weights().map_err(js_err)?;
    let placement = match placement {
        Some(p) if p.device == device => p,
        Some(_) => return Err(JsError::new("the weights were streamed for another device than the load asks for")),
        None => Placement::pick(device).await.map_err(js_err)?,
    }
    .with_tunings(tunings);
    if let (Some(true), Some(gpu)) = (inject_fault, &placement.gpu) {
        gpu.inject_fault(true);
    }
    Engine::place(m.config, m.tokenizer, &weights, placement, cpu).await.map_err(js_err)
}

#[wasm_bindgen]
impl WasmModel {
    /// Loads a model from the bytes of its files: config.json, then tokenizer.json or vocab.txt (with
    /// tokenizer_config.json when present), and model.safetensors (a `Uint8Array`, left in JS memory and read a
    /// tensor at a time, or a finished `WeightStream` that read it as it downloaded);
    /// and a LoRA adapter to fold in (peft's adapter_config.json and adapter_model.safetensors), if given. `device` is "webgpu", "cpu", or "auto" (the JS
    /// wrapper passes "auto" once it has seen a hardware adapter: the GPU, or the CPU if the GPU fails the load-time
    /// check). `inject_fault`: for tests only (see [`load_engine`]). `tunings`: the GPU kernels' choices cached by
    /// earlier loads, `{ key: text }` (js/tuning.js), of which the one for this adapter and model shape is checked
    /// and run from the start ([`Placement::tunings`]); `undefined`: the defaults.
    #[allow(clippy::too_many_arguments)]
    pub async fn load(
        config: Vec<u8>,
        tokenizer: Option<Vec<u8>>,
        vocab: Option<Vec<u8>>,
        tokenizer_config: Option<Vec<u8>>,
        weights: JsValue,
        adapter_config: Option<Vec<u8>>,
        adapter_weights: Option<Vec<u8>>,
        sentence: JsValue,
        device: String,
        inject_fault: Option<bool>,
        tunings: JsValue,
    ) -> Result<WasmModel, JsError> {
        let cpu = CpuBackend::new();
        let adapter = adapter_config.zip(adapter_weights);
        let (weights, placement) = weights_file(weights)?;
        let sentence = sentence_files(sentence)?;
        let files = ModelFiles { config, tokenizer, vocab, tokenizer_config, weights, adapter, sentence };
        let engine = load_engine(ModelSource::Files(files), &device, cpu, inject_fault, placement, tunings).await?;
        Ok(WasmModel { engine: Rc::new(engine) })
    }

    /// Loads a BERT `.gguf` (ours or llama.cpp's): config, tokenizer and weights all come from the one file (a
    /// `Uint8Array`, or a finished `WeightStream` that read it as it downloaded). `tunings`: as [`Self::load`]'s.
    #[wasm_bindgen(js_name = loadGguf)]
    pub async fn load_gguf(bytes: JsValue, device: String, inject_fault: Option<bool>, tunings: JsValue)
        -> Result<WasmModel, JsError> {
        let cpu = CpuBackend::new();
        parse_device(&device)?;
        let (m, placement) = match bytes.dyn_into::<js_sys::Uint8Array>() {
            // The file stays in JS memory: its header, then each tensor, is copied straight to where it goes.
            Ok(bytes) => (crate::loader::load(ModelSource::Gguf(&JsBytes(bytes)), &LoadOptions::default()), None),
            Err(other) => match stream::WeightStream::take(other)? {
                (Streamed::Gguf(read), placement) => {
                    (crate::loader::load(ModelSource::ReadGguf(read), &LoadOptions::default()), placement)
                }
                (Streamed::Safetensors(_), _) => {
                    return Err(JsError::new("loadGguf: the weights stream holds a safetensors file"))
                }
            },
        };
        let engine = place(m.map_err(js_err)?, &device, cpu, inject_fault, placement, tunings).await?;
        Ok(WasmModel { engine: Rc::new(engine) })
    }

    /// "webgpu" or "cpu".
    #[wasm_bindgen(getter)]
    pub fn device(&self) -> String {
        match self.engine.device() {
            "gpu" => "webgpu".into(),
            other => other.into(),
        }
    }

    /// Why the model is on the CPU although "auto" considered the GPU: the adapter failed the load-time check
    /// ([`Engine::device_reason`]). `undefined` otherwise (the JS wrapper adds its own reasons for not trying).
    #[wasm_bindgen(getter, js_name = deviceReason)]
    pub fn device_reason(&self) -> Option<String> {
        self.engine.device_reason().map(str::to_string)
    }

    /// Why the GPU device under this model was lost (`undefined` while it works, and on the CPU). A lost device
    /// never comes back: the JS wrapper then loads the model again on a new device.
    #[wasm_bindgen(getter, js_name = deviceLost)]
    pub fn device_lost(&self) -> Option<String> {
        match &*self.engine {
            Engine::Gpu(m) => m.backend.gpu().lost(),
            Engine::Cpu(_) => None,
        }
    }

    /// Destroys the model's GPU device (WebGPU `GPUDevice.destroy()`), as a driver reset would lose it, so the
    /// browser tests can check what the next calls do. Returns false on the CPU. Not part of the public API.
    #[wasm_bindgen(js_name = __debugLoseDevice)]
    pub fn debug_lose_device(&self) -> bool {
        match &*self.engine {
            Engine::Gpu(m) => {
                m.backend.gpu().device.destroy();
                true
            }
            Engine::Cpu(_) => false,
        }
    }

    /// GPU buffers of this model, for the soak test: `[created by the pool, their bytes, weight bytes]` (a repeated
    /// call must not raise them), or `undefined` on the CPU. Not part of the public API.
    #[wasm_bindgen(js_name = __debugGpuBuffers)]
    pub fn debug_gpu_buffers(&self) -> Option<Vec<f64>> {
        match &*self.engine {
            Engine::Gpu(m) => {
                let (n, bytes) = m.backend.pool_stats();
                Some(vec![n as f64, bytes as f64, m.backend.weight_bytes() as f64])
            }
            Engine::Cpu(_) => None,
        }
    }

    /// The model's prompts by name (`config_sentence_transformers.json`): `{ name: text }`, empty where it has none.
    #[wasm_bindgen(getter)]
    pub fn prompts(&self) -> Result<JsValue, JsError> {
        let map: js_sys::Object = js_sys::Object::new();
        for (name, text) in self.engine.prompts() {
            js_sys::Reflect::set(&map, &name.into(), &text.into()).map_err(|_| JsError::new("prompts"))?;
        }
        Ok(map.into())
    }

    /// sentence-transformers' description of the model as its files give it (`{ modules, max_seq_length, prompts,
    /// default_prompt_name }`), or `null` where it has none: what `embed` does with no options.
    #[wasm_bindgen(getter, js_name = sentenceTransformers)]
    pub fn sentence_transformers(&self) -> Result<JsValue, JsError> {
        let ser = serde_wasm_bindgen::Serializer::json_compatible();
        use serde::Serialize;
        self.engine.config().sentence.serialize(&ser).map_err(|e| JsError::new(&e.to_string()))
    }

    /// Width of one embedding.
    #[wasm_bindgen(getter, js_name = hiddenSize)]
    pub fn hidden_size(&self) -> usize {
        self.engine.config().hidden_size
    }

    /// Tokenizes a text or a pair: `{ input_ids, token_type_ids, tokens }`, with `[CLS]`/`[SEP]`, no padding.
    pub fn tokenize(&self, text: &str, pair: Option<String>) -> Result<JsValue, JsError> {
        let e = self.engine.tokenizer().encode(text, pair.as_deref()).map_err(js_err)?;
        let out = Tokenized { input_ids: e.ids, token_type_ids: e.type_ids, tokens: e.tokens, truncated: e.truncated };
        serde_wasm_bindgen::to_value(&out).map_err(|e| JsError::new(&e.to_string()))
    }

    /// Embeds `texts` in one call (the wrapper chunks long lists): resolves to a `Float32Array` of `(n, width)`,
    /// row-major. `pooling` is one of [`Pooling`]'s names; each option left `undefined` is the model's own
    /// (sentence-transformers' files), and for a model without those files mean pooling and, as JavaScript's
    /// `embed` always did, normalised vectors.
    pub fn embed(&self, texts: Vec<String>, pooling: Option<String>, normalize: Option<bool>, prompt: Option<String>,
        dimensions: Option<u32>) -> Result<js_sys::Promise, JsError> {
        let pooling: Option<Pooling> = pooling.map(|p| p.parse()).transpose().map_err(js_err)?;
        let normalize = normalize.or_else(|| self.engine.config().sentence.is_none().then_some(true));
        let opts = EmbedOptions {
            pooling,
            normalize,
            prompt,
            dimensions: dimensions.map(|d| d as usize),
            batch_size: texts.len().max(1),
        };
        self.engine.check_embed_options(&opts).map_err(js_err)?;
        let engine = self.engine.clone();
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = engine.embed(&refs, &opts).await.map_err(|e| JsValue::from(js_err(e)))?;
            let flat: Vec<f32> = vectors.concat(); // (n, H)
            Ok(js_sys::Float32Array::from(flat.as_slice()).into())
        }))
    }

    /// Fill-mask for a batch of texts: per text, per mask, the `top_k` predictions best first
    /// (`[{ score, token, token_str, sequence }]`).
    #[wasm_bindgen(js_name = fillMask)]
    pub fn fill_mask(&self, texts: Vec<String>, top_k: usize) -> js_sys::Promise {
        let engine = self.engine.clone();
        run(async move {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            engine.fill_mask(&refs, top_k).await
        })
    }

    /// Sequence classification of texts or pairs (`pairs[i]` undefined or a string): `[{ label, score }]` per input.
    /// `top_k` 0 means all labels.
    pub fn classify(&self, texts: Vec<String>, pairs: Vec<JsValue>, top_k: usize) -> js_sys::Promise {
        let engine = self.engine.clone();
        run(async move {
            let pairs: Vec<Option<String>> = pairs.iter().map(|p| p.as_string()).collect();
            let inputs: Vec<(&str, Option<&str>)> =
                texts.iter().zip(&pairs).map(|(t, p)| (t.as_str(), p.as_deref())).collect();
            engine.classify(&inputs, (top_k > 0).then_some(top_k)).await
        })
    }

    /// Reranks `documents` for `query` with a cross-encoder: `[{ index, score }]` best first (score: the relevance
    /// logit). `top_k` 0 means all.
    pub fn rerank(&self, query: String, documents: Vec<String>, top_k: usize) -> js_sys::Promise {
        let engine = self.engine.clone();
        run(async move {
            let refs: Vec<&str> = documents.iter().map(String::as_str).collect();
            engine.rerank(&query, &refs, (top_k > 0).then_some(top_k)).await
        })
    }

    /// `[{ is_next }]`: the probability that `b[i]` follows `a[i]`.
    #[wasm_bindgen(js_name = nextSentence)]
    pub fn next_sentence(&self, a: Vec<String>, b: Vec<String>) -> js_sys::Promise {
        let engine = self.engine.clone();
        run(async move {
            let pairs: Vec<(&str, &str)> = a.iter().zip(&b).map(|(a, b)| (a.as_str(), b.as_str())).collect();
            engine.next_sentence(&pairs).await
        })
    }

    /// Token classification (NER) per text; `aggregation` "none" or "simple". Offsets are characters.
    #[wasm_bindgen(js_name = tokenClassify)]
    pub fn token_classify(&self, texts: Vec<String>, aggregation: &str) -> Result<js_sys::Promise, JsError> {
        let aggregation: Aggregation = aggregation.parse().map_err(js_err)?;
        let engine = self.engine.clone();
        Ok(run(async move {
            let inputs: Vec<(&str, Option<&str>)> = texts.iter().map(|t| (t.as_str(), None)).collect();
            engine.token_classify(&inputs, aggregation).await
        }))
    }

    /// ELECTRA's replaced-token detection per text: `[{ index, token, start, end, score }]` for every token but the
    /// special ones, `score` the probability that it was replaced; offsets are characters.
    #[wasm_bindgen(js_name = replacedTokens)]
    pub fn replaced_tokens(&self, texts: Vec<String>) -> js_sys::Promise {
        let engine = self.engine.clone();
        run(async move {
            let inputs: Vec<(&str, Option<&str>)> = texts.iter().map(|t| (t.as_str(), None)).collect();
            engine.replaced_tokens(&inputs).await
        })
    }

    /// Extractive QA: `{ answer, score, start, end }`, character offsets into `context`.
    pub fn answer(&self, question: String, context: String) -> js_sys::Promise {
        let engine = self.engine.clone();
        run(async move { engine.answer(&question, &context).await })
    }
}

/// A task's future as a promise of its serialized output (structs become plain objects), errors as JS `Error`s.
fn run<T, F>(fut: F) -> js_sys::Promise
where
    T: Serialize,
    F: std::future::Future<Output = Result<T, Error>> + 'static,
{
    wasm_bindgen_futures::future_to_promise(async move {
        let out = fut.await.map_err(|e| JsValue::from(js_err(e)))?;
        serde_wasm_bindgen::to_value(&out).map_err(|e| JsValue::from(JsError::new(&e.to_string())))
    })
}
