//! The GPU kernels' calibration, from JS: js/index.js calibrates after `Bert.load` on WebGPU (or takes the choice it
//! cached in IndexedDB for this adapter and model shape) and says what it chose in `bert.tuning`.

use serde::Serialize;
use wasm_bindgen::prelude::*;

use super::{js_err, to_js, weights_file, JsBytes, WasmModel};
use crate::backend::gpu::{Progress, Tuning};
use crate::engine::crossover::Crossover;
use crate::loader::{LoadOptions, ModelFiles, ModelSource};

/// [`crate::backend::gpu::Calibration`] for JS: every variant timed and the choice, tunings as text.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CalibrationJs {
    tuning: String,
    default_ms: f64,
    chosen_ms: f64,
    spent_ms: f64,
    complete: bool,
    /// Where a calibration cut short stopped, as text: what the next load resumes from (the tuning alone when
    /// complete).
    progress: String,
    timed: Vec<(String, f64)>,
}

/// [`crate::engine::crossover::Crossover`] for JS, with its text.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CrossoverJs {
    max_tokens: usize,
    /// `[tokens, CPU ms, GPU ms]`, medians.
    points: Vec<(usize, f64, f64)>,
    text: String,
}

#[wasm_bindgen]
impl WasmModel {
    /// The key under which this model's tuning is cached for this adapter (adapter, driver, bertgpu version, model
    /// shape); `undefined` on the CPU.
    #[wasm_bindgen(getter, js_name = tuningKey)]
    pub fn tuning_key(&self) -> Option<String> {
        self.engine.tuning_key()
    }

    /// The GPU kernels' tuning in effect, as text (`matmul=tiled:16x16,...`); `undefined` on the CPU.
    #[wasm_bindgen(getter)]
    pub fn tuning(&self) -> Option<String> {
        self.engine.tuning().map(|t| t.to_string())
    }

    /// Whether a load should calibrate: false on the CPU and on CPU adapters (SwiftShader), where the defaults are
    /// the fastest.
    #[wasm_bindgen(getter, js_name = worthCalibrating)]
    pub fn worth_calibrating(&self) -> bool {
        self.engine.worth_calibrating()
    }

    /// Whether the GPU kernels in effect are the tuning `spec` (text as `tuning` gives it): a load given the choice
    /// cached for this adapter and model shape checked it and runs it ([`crate::engine::Engine::runs_tuning`]).
    /// False on the CPU and for a malformed spec.
    #[wasm_bindgen(js_name = runsTuning)]
    pub fn runs_tuning(&self, spec: String) -> bool {
        Tuning::parse(&spec).is_ok_and(|t| self.engine.runs_tuning(t))
    }

    /// Switches the GPU kernels to the tuning `spec` (text as `tuning` gives it) once they pass the load-time
    /// check; resolves to the tuning in effect (`null` on the CPU). A malformed spec, or kernels that fail the
    /// check (then the kernels stay as they were), reject naming why.
    #[wasm_bindgen(js_name = setTuning)]
    pub fn set_tuning(&self, spec: String) -> js_sys::Promise {
        let engine = self.engine.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let t = Tuning::parse(&spec).map_err(|e| JsValue::from(JsError::new(&e)))?;
            let t = engine.set_tuning(t).await.map_err(|e| JsValue::from(js_err(e)))?;
            Ok(t.map_or(JsValue::NULL, |t| t.to_string().into()))
        })
    }

    /// Turns the GPU's f16-activation mode on or off once it passes the load-time check
    /// ([`crate::engine::Engine::set_f16_activations`]); resolves to whether it is on (false on the CPU). A check
    /// that fails rejects naming why, and the mode stays as it was.
    #[wasm_bindgen(js_name = setF16Activations)]
    pub fn set_f16_activations(&self, on: bool) -> js_sys::Promise {
        let engine = self.engine.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let on = engine.set_f16_activations(on).await.map_err(|e| JsValue::from(js_err(e)))?;
            Ok(on.into())
        })
    }

    /// Whether the GPU stores activations as f16 ([`Self::set_f16_activations`]).
    #[wasm_bindgen(getter, js_name = f16Activations)]
    pub fn f16_activations(&self) -> bool {
        self.engine.f16_activations()
    }

    /// Calibrates within about `budget_ms`, resuming from `resume` (an earlier result's `progress`) when given, and
    /// switches to the choice once it passes the load-time check: resolves to `{ tuning, defaultMs, chosenMs,
    /// spentMs, complete, progress, timed: [[tuning, ms], ...] }`, or `null` on the CPU.
    pub fn calibrate(&self, budget_ms: f64, resume: Option<String>) -> js_sys::Promise {
        let engine = self.engine.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let from = resume.map(|r| Progress::parse(&r)).transpose().map_err(|e| JsValue::from(JsError::new(&e)))?;
            let Some(c) = engine.calibrate_from(budget_ms, from).await.map_err(|e| JsValue::from(js_err(e)))? else {
                return Ok(JsValue::NULL);
            };
            let out = CalibrationJs {
                tuning: c.tuning.to_string(),
                default_ms: c.default_ms,
                chosen_ms: c.chosen_ms,
                spent_ms: c.spent_ms,
                complete: c.complete,
                progress: c.progress.to_string(),
                timed: c.timed.iter().map(|(t, ms)| (t.to_string(), *ms)).collect(),
            };
            Ok(to_js(&out)?)
        })
    }

    /// A CPU copy of this GPU model for the short calls the CPU finishes sooner ([`crate::engine::crossover`]), made
    /// from the model's files again (as `load` takes them, the weights from a `WeightStream` made without a device),
    /// with the crossover measured within `budget_ms`, or given (`known`: a `maxTokens` measured on an earlier load
    /// on this adapter). Resolves to `{ maxTokens, points: [[tokens, cpuMs, gpuMs], ...], text }` (no points where
    /// it was given), or `null` on the CPU; the copy is kept only where the CPU wins at some length (`maxTokens` > 0).
    #[wasm_bindgen(js_name = addCpuTwin)]
    #[allow(clippy::too_many_arguments)]
    pub fn add_cpu_twin(&self, config: Vec<u8>, tokenizer: Option<Vec<u8>>, vocab: Option<Vec<u8>>,
        tokenizer_config: Option<Vec<u8>>, weights: JsValue, adapter_config: Option<Vec<u8>>,
        adapter_weights: Option<Vec<u8>>, budget_ms: f64, known: Option<f64>) -> Result<js_sys::Promise, JsError> {
        let (weights, placement) = weights_file(weights)?;
        if placement.is_some_and(|p| p.gpu.is_some()) {
            return Err(JsError::new("addCpuTwin: the weights were streamed to a GPU; the CPU copy reads them itself"));
        }
        let adapter = adapter_config.zip(adapter_weights);
        let files = ModelFiles { config, tokenizer, vocab, tokenizer_config, weights, adapter, sentence: Vec::new() };
        Ok(self.twin_from(crate::loader::load(ModelSource::Files(files), &LoadOptions::default()), budget_ms, known))
    }

    /// [`Self::add_cpu_twin`] for a model loaded from a `.gguf` (its bytes, as `loadGguf` takes them).
    #[wasm_bindgen(js_name = addCpuTwinGguf)]
    pub fn add_cpu_twin_gguf(&self, bytes: js_sys::Uint8Array, budget_ms: f64, known: Option<f64>) -> js_sys::Promise {
        let m = crate::loader::load(ModelSource::Gguf(&JsBytes(bytes)), &LoadOptions::default());
        self.twin_from(m, budget_ms, known)
    }

    /// Where the last call ran: "webgpu" or "cpu" (differs from `device` only where a CPU copy takes short calls).
    #[wasm_bindgen(getter, js_name = lastCallDevice)]
    pub fn last_call_device(&self) -> String {
        match self.engine.last_call_device() {
            "gpu" => "webgpu".into(),
            other => other.into(),
        }
    }
}

impl WasmModel {
    /// The CPU copy from the loaded files `m`, and the crossover measured with it or `known` ([`Self::add_cpu_twin`]).
    fn twin_from(&self, m: crate::Result<crate::loader::LoadedModel>, budget_ms: f64, known: Option<f64>)
        -> js_sys::Promise {
        let engine = self.engine.clone();
        let weights = m.and_then(|m| m.weights());
        wasm_bindgen_futures::future_to_promise(async move {
            let weights = weights.map_err(|e| JsValue::from(js_err(e)))?;
            let fail = |e| JsValue::from(js_err(e));
            let c = match known {
                // Nothing to choose on the CPU.
                _ if engine.tuning_key().is_none() => None,
                // (A JS number; `as` saturates: a negative or NaN count is 0, every call on the GPU.)
                Some(n) => {
                    let c = Crossover { max_tokens: n as usize, points: vec![] };
                    engine.set_cpu_twin(&weights, c.clone()).map_err(fail)?;
                    Some(c)
                }
                None => engine.add_cpu_twin(&weights, budget_ms).await.map_err(fail)?,
            };
            let Some(c) = c else { return Ok(JsValue::NULL) };
            Ok(to_js(&CrossoverJs { max_tokens: c.max_tokens, text: c.to_string(), points: c.points })?)
        })
    }
}
