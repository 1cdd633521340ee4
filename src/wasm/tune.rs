//! The GPU kernels' calibration, from JS: js/index.js calibrates after `Bert.load` on WebGPU (or takes the choice it
//! cached in IndexedDB for this adapter and model shape) and says what it chose in `bert.tuning`.

use serde::Serialize;
use wasm_bindgen::prelude::*;

use super::{js_err, to_js, WasmModel};
use crate::backend::gpu::{Progress, Tuning};

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
}
