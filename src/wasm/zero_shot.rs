//! `zeroShot`: zero-shot classification through an NLI checkpoint ([`crate::tasks::zero_shot`]), as transformers'
//! `zero-shot-classification` pipeline. The JS wrapper (js/index.js) checks the options' types first; the labels,
//! the template and the model are checked here before the promise, so a bad call throws at once.

use wasm_bindgen::prelude::*;

use super::{js_err, run, WasmModel};
use crate::tasks::zero_shot::{check_labels, hypothesis, ZeroShotOptions, DEFAULT_TEMPLATE};

#[wasm_bindgen]
impl WasmModel {
    /// Per text, every label with its score, best first: `[{ label, score }]`. `template` (default "This example
    /// is {}.") has `{}` where the label goes; `multiLabel` scores each label on its own (entailment against
    /// contradiction) instead of one softmax over the labels.
    #[wasm_bindgen(js_name = zeroShot)]
    pub fn zero_shot(&self, texts: Vec<String>, labels: Vec<String>, template: Option<String>, multi_label: bool)
        -> Result<js_sys::Promise, JsError> {
        let opts = ZeroShotOptions { template: template.unwrap_or_else(|| DEFAULT_TEMPLATE.to_string()), multi_label };
        check_labels(&labels).map_err(js_err)?;
        for l in &labels {
            hypothesis(&opts.template, l).map_err(js_err)?;
        }
        crate::with_model!(&*self.engine, m => m.nli_labels()).map_err(js_err)?;
        let engine = self.engine.clone();
        Ok(run(async move {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            engine.zero_shot(&refs, &labels, &opts).await
        }))
    }
}
