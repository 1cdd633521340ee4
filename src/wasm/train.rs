//! The training half of the browser entry: `trainHead` (a head on the frozen encoder) and `fineTune` (every
//! parameter, [`crate::training::job`]), with the same boundary rules as the rest of [`super`].

use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

use super::{js_err, to_js, WasmModel};
use crate::loader::ModelFiles;
use crate::tasks::{EpochProgress, TrainExample, TrainOptions};
use crate::training::fit::checkpoint::{Checkpoints, Store};
use crate::training::fit::{EpochMetrics, FitOptions, FitReport, Hooks, Progress, StepProgress};
use crate::training::job::{Examples, JobOptions, JobTask};
use crate::training::lora::{LoraOptions, LoraTargets, DEFAULT_ALPHA};
use crate::training::fit::memory::TrainingMemory;
use crate::{Error, Result};

/// `trainHead`'s options as JS gives them (the wrapper has checked their types; serde checks them again, and an
/// unknown name is an error rather than silently ignored). Unset fields take [`TrainOptions::default`].
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JsTrainOptions {
    labels: Option<Vec<String>>,
    epochs: Option<usize>,
    learning_rate: Option<f32>,
    batch_size: Option<usize>,
    weight_decay: Option<f32>,
    validation_split: Option<f32>,
    seed: Option<u64>,
    hidden: Option<usize>,
    activation: Option<String>,
    pooling: Option<String>,
    patience: Option<usize>,
}

impl JsTrainOptions {
    fn resolve(self) -> Result<TrainOptions, Error> {
        let d = TrainOptions::default();
        Ok(TrainOptions {
            labels: self.labels,
            epochs: self.epochs.unwrap_or(d.epochs),
            learning_rate: self.learning_rate.unwrap_or(d.learning_rate),
            batch_size: self.batch_size.unwrap_or(d.batch_size),
            weight_decay: self.weight_decay.unwrap_or(d.weight_decay),
            validation_split: self.validation_split.unwrap_or(d.validation_split),
            seed: self.seed.unwrap_or(d.seed),
            hidden: self.hidden,
            activation: match self.activation {
                Some(a) => a.parse::<crate::activation::Activation>()?,
                None => d.activation,
            },
            pooling: match self.pooling {
                Some(p) => p.parse()?,
                None => d.pooling,
            },
            patience: self.patience.unwrap_or(d.patience),
        })
    }
}

/// One epoch of `trainHead`, in JS's naming.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsEpoch {
    epoch: usize,
    loss: f32,
    accuracy: f32,
    val_loss: Option<f32>,
    val_accuracy: Option<f32>,
}

impl From<&EpochProgress> for JsEpoch {
    fn from(p: &EpochProgress) -> JsEpoch {
        JsEpoch { epoch: p.epoch, loss: p.loss, accuracy: p.accuracy, val_loss: p.val_loss, val_accuracy: p.val_accuracy }
    }
}

/// What `trainHead` resolves to.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsTrainReport {
    labels: Vec<String>,
    best_epoch: usize,
    history: Vec<JsEpoch>,
}

#[wasm_bindgen]
impl WasmModel {
    /// Trains a classification head on the frozen encoder (see `Model::train_head`); it becomes the head `classify`
    /// uses. `texts[i]` has label `labels[i]`; `on_progress(epoch)` is called after every epoch. Resolves to
    /// `{ labels, bestEpoch, history }`.
    #[wasm_bindgen(js_name = trainHead)]
    pub fn train_head(&self, texts: Vec<String>, labels: Vec<String>, options: JsValue,
        on_progress: Option<js_sys::Function>) -> Result<js_sys::Promise, JsError> {
        if texts.len() != labels.len() {
            return Err(JsError::new(&format!("{} texts but {} labels", texts.len(), labels.len())));
        }
        let opts: JsTrainOptions = if options.is_undefined() || options.is_null() {
            JsTrainOptions::default()
        } else {
            serde_wasm_bindgen::from_value(options)
                .map_err(|e| JsError::new(&format!("trainHead: bad options: {e}")))?
        };
        let opts = opts.resolve().map_err(js_err)?;
        let examples: Vec<TrainExample> =
            texts.into_iter().zip(labels).map(|(text, label)| TrainExample { text, label }).collect();
        let engine = self.engine.clone();
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let report = engine
                .train_head(&examples, &opts, |p| {
                    if let (Some(f), Ok(v)) = (on_progress.as_ref(), to_js(&JsEpoch::from(p))) {
                        // An exception in the user's callback must not abort training: it is reported, not thrown.
                        if let Err(e) = f.call1(&JsValue::NULL, &v) {
                            web_sys::console::warn_2(&"trainHead: onProgress threw".into(), &e);
                        }
                    }
                })
                .await
                .map_err(|e| JsValue::from(js_err(e)))?;
            let out = JsTrainReport {
                labels: report.labels,
                best_epoch: report.best_epoch,
                history: report.history.iter().map(JsEpoch::from).collect(),
            };
            Ok(to_js(&out).map_err(JsValue::from)?)
        }))
    }

    /// The live head as safetensors bytes (`classifier.weight`, `classifier.bias`, labels in the metadata).
    #[wasm_bindgen(js_name = exportHead)]
    pub fn export_head(&self) -> Result<Vec<u8>, JsError> {
        self.engine.export_head().map_err(js_err)
    }

    /// Makes a head file from `exportHead` (or the CLI's `train-head`) the live head; returns its labels.
    #[wasm_bindgen(js_name = loadHead)]
    pub fn load_head(&self, bytes: &[u8]) -> Result<Vec<String>, JsError> {
        self.engine.load_head(bytes).map_err(js_err)?;
        Ok(self.engine.head_labels().unwrap_or_default())
    }

    /// The tasks this model can run besides `embed` and `tokenize` ("fillMask", "nextSentence", "classify",
    /// "tokenClassify", "answer"): the heads its checkpoint carries, plus "classify" once a head is trained.
    #[wasm_bindgen(getter)]
    pub fn tasks(&self) -> Vec<String> {
        self.engine.available_tasks().into_iter().map(String::from).collect()
    }

    /// The live head's labels, or `undefined` when no trained head is live.
    #[wasm_bindgen(getter, js_name = headLabels)]
    pub fn head_labels(&self) -> Option<Vec<String>> {
        self.engine.head_labels()
    }

    /// Drops the live trained head.
    #[wasm_bindgen(js_name = clearHead)]
    pub fn clear_head(&self) {
        self.engine.clear_head()
    }
}


/// `fineTune`'s options as JS gives them (the wrapper has taken `onProgress` and `signal` and checked the types);
/// unset fields take [`FitOptions::default`] (the BERT paper's recipe).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JsFineTuneOptions {
    task: Option<String>,
    epochs: Option<usize>,
    learning_rate: Option<f32>,
    batch_size: Option<usize>,
    accumulate: Option<usize>,
    /// "all", or the number of top layers trained with the head (0: the head alone).
    layers: Option<serde_json::Value>,
    warmup: Option<f32>,
    weight_decay: Option<f32>,
    validation_split: Option<f32>,
    seed: Option<u64>,
    doc_stride: Option<usize>,
    /// The checkpoint's dropout probabilities (default true), or none.
    dropout: Option<bool>,
    /// Early stopping: epochs without a lower validation loss before stopping at the best epoch.
    patience: Option<usize>,
    /// LoRA adapters on a frozen encoder instead of every parameter.
    lora: Option<JsLora>,
}

/// `fineTune`'s `lora: { r, alpha, targets }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsLora {
    r: usize,
    alpha: Option<f32>,
    /// "qv" (query and value, peft's default; ModernBERT's packed `Wqkv`), "all" (every linear of each layer) or
    /// "all-projection" (and ALBERT's or ELECTRA's embeddings' projection).
    targets: Option<String>,
}

impl JsFineTuneOptions {
    fn resolve(self) -> Result<JobOptions> {
        let task: JobTask = self.task.as_deref().unwrap_or("classify").parse()?;
        let d = FitOptions::default();
        let layers = match self.layers {
            None => None,
            Some(serde_json::Value::String(s)) if s == "all" => None,
            Some(serde_json::Value::Number(n)) if n.as_u64().is_some() => n.as_u64().map(|k| k as usize),
            Some(other) => {
                return Err(Error::Input(format!("layers must be \"all\" or a number of top layers (got {other})")))
            }
        };
        let mut opts = JobOptions::new(task);
        opts.layers = layers;
        opts.lora = match self.lora {
            None => None,
            Some(l) => Some(LoraOptions {
                alpha: l.alpha.unwrap_or(DEFAULT_ALPHA),
                targets: match l.targets.as_deref() {
                    None | Some("qv") => LoraTargets::Qv,
                    Some("all") => LoraTargets::All,
                    Some("all-projection") => LoraTargets::AllProjection,
                    Some(other) => {
                        return Err(Error::Input(format!(
                            "lora.targets must be \"qv\", \"all\" or \"all-projection\" (got \"{other}\")"
                        )))
                    }
                },
                ..LoraOptions::new(l.r)
            }),
        };
        opts.doc_stride = self.doc_stride.unwrap_or(opts.doc_stride);
        opts.fit = FitOptions {
            epochs: self.epochs.unwrap_or(d.epochs),
            learning_rate: self.learning_rate.unwrap_or(d.learning_rate),
            batch_size: self.batch_size.unwrap_or(d.batch_size),
            accumulate: self.accumulate.unwrap_or(d.accumulate),
            warmup: self.warmup.unwrap_or(d.warmup),
            weight_decay: self.weight_decay.unwrap_or(d.weight_decay),
            validation_split: self.validation_split.unwrap_or(d.validation_split),
            seed: self.seed.unwrap_or(d.seed),
            dropout: self.dropout.unwrap_or(d.dropout),
            patience: self.patience,
            ..d
        };
        Ok(opts)
    }
}

/// One step or one epoch of `fineTune` or `pretrain`, in JS's naming: `{ type: "step", epoch, step, totalSteps,
/// loss, learningRate }` or `{ type: "epoch", epoch, trainLoss, valLoss, valAccuracy }`, plus `valF1` ("ner", "qa")
/// and `valExactMatch` ("qa"); `pretrain`'s steps also `mlmLoss, mlmAccuracy, nspLoss, nspAccuracy` (the NSP pair
/// null without NSP), its epochs `valNspAccuracy` (with NSP; `valAccuracy` is the masked LM's).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(super) enum JsProgress {
    #[serde(rename_all = "camelCase")]
    Step {
        epoch: usize,
        step: usize,
        total_steps: usize,
        loss: f32,
        #[serde(skip_serializing_if = "Option::is_none")]
        mlm_loss: Option<f32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mlm_accuracy: Option<f32>,
        /// `Some(None)`: pre-training without NSP, `null` in JS; `None`: not pre-training, absent.
        #[serde(skip_serializing_if = "Option::is_none")]
        nsp_loss: Option<Option<f32>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        nsp_accuracy: Option<Option<f32>>,
        learning_rate: f32,
    },
    #[serde(rename_all = "camelCase")]
    Epoch {
        epoch: usize,
        train_loss: f32,
        val_loss: Option<f32>,
        val_accuracy: Option<f32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        val_f1: Option<f32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        val_exact_match: Option<f32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        val_nsp_accuracy: Option<f32>,
    },
    /// `{ type: "memory", parameters, gradients, optimizer, activations, update, total }`: bytes (see
    /// `training::fit::memory::TrainingMemory`), before the first step.
    #[serde(rename_all = "camelCase")]
    Memory {
        #[serde(flatten)]
        parts: TrainingMemory,
        total: u64,
    },
    /// `{ type: "checkpoint", checkpoint: "saved" | "resumed" | "skipped", name, step, reason? }`.
    Checkpoint {
        checkpoint: &'static str,
        name: String,
        step: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        bytes: Option<usize>,
    },
}

impl From<&StepProgress> for JsProgress {
    fn from(s: &StepProgress) -> JsProgress {
        let p = s.pretrain;
        JsProgress::Step {
            epoch: s.epoch,
            step: s.step,
            total_steps: s.total_steps,
            loss: s.loss,
            mlm_loss: p.map(|p| p.mlm_loss),
            mlm_accuracy: p.map(|p| p.mlm_accuracy),
            nsp_loss: p.map(|p| p.nsp_loss),
            nsp_accuracy: p.map(|p| p.nsp_accuracy),
            learning_rate: s.learning_rate,
        }
    }
}

impl From<&EpochMetrics> for JsProgress {
    fn from(e: &EpochMetrics) -> JsProgress {
        JsProgress::Epoch {
            epoch: e.epoch,
            train_loss: e.train_loss,
            val_loss: e.val_loss,
            val_accuracy: e.val_accuracy,
            val_f1: e.val_f1,
            val_exact_match: e.val_exact_match,
            val_nsp_accuracy: e.val_nsp_accuracy,
        }
    }
}

/// What `fineTune`'s call into the module resolves to: the report, and (set as `Uint8Array`s beside it) the new
/// folder's `config` (config.json) and `weights` (model.safetensors), which the wrapper loads as the model's new self,
/// and after LoRA peft's `adapterConfig` and `adapterWeights`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsFineTuned {
    labels: Option<Vec<String>>,
    steps: Vec<JsProgress>,
    epochs: Vec<JsProgress>,
    best_epoch: usize,
}

/// The wrapper's `{ onProgress(p), shouldStop() → bool, pause() → Promise }`, for the call `method` ("fineTune",
/// "pretrain").
pub(super) struct JsHooks {
    pub(super) hooks: JsValue,
    pub(super) method: &'static str,
}

impl JsHooks {
    fn call(&self, name: &str, arg: Option<&JsValue>) -> Result<JsValue> {
        let f: js_sys::Function = js_sys::Reflect::get(&self.hooks, &JsValue::from_str(name))
            .ok()
            .and_then(|f| f.dyn_into().ok())
            .ok_or_else(|| Error::Input(format!("{}: hooks.{name} is not a function", self.method)))?;
        let out = match arg {
            Some(a) => f.call1(&JsValue::NULL, a),
            None => f.call0(&JsValue::NULL),
        };
        out.map_err(|e| Error::Input(format!("{}: hooks.{name} threw: {e:?}", self.method)))
    }

    fn check_stop(&self) -> Result<()> {
        match self.call("shouldStop", None)?.as_string() {
            Some(why) => Err(Error::Stopped(why)),
            None => Ok(()),
        }
    }
}

impl Hooks for JsHooks {
    fn progress(&mut self, p: Progress<'_>) -> Result<()> {
        let v = match p {
            Progress::Step(s) => to_js(&JsProgress::from(s)),
            Progress::Epoch(e) => to_js(&JsProgress::from(e)),
            Progress::Checkpoint(c) => to_js(&JsProgress::Checkpoint {
                checkpoint: c.checkpoint,
                name: c.name.clone(),
                step: c.step,
                reason: c.reason.clone(),
                bytes: c.bytes,
            }),
            Progress::Memory(m) => to_js(&JsProgress::Memory { parts: *m, total: m.total() }),
        };
        if let Ok(v) = v {
            self.call("onProgress", Some(&v))?;
        }
        self.check_stop()
    }

    async fn pause(&mut self) -> Result<()> {
        let p: js_sys::Promise = self
            .call("pause", None)?
            .dyn_into()
            .map_err(|_| Error::Input(format!("{}: hooks.pause must return a promise", self.method)))?;
        let _ = wasm_bindgen_futures::JsFuture::from(p).await;
        self.check_stop()
    }
}

/// The page's checkpoint store (js/checkpoints.js: a folder of the Origin Private File System): `{ list(), read(name,
/// file), write(name, files), remove(name) }`, each returning a promise; `write` gets `{ file: Uint8Array }` in the
/// order to write them (the manifest last) and makes the checkpoint visible to `list` only once it is complete.
pub(super) struct JsStore {
    store: JsValue,
}

impl JsStore {
    async fn call(&self, name: &str, args: &[JsValue]) -> Result<JsValue> {
        let f: js_sys::Function = js_sys::Reflect::get(&self.store, &JsValue::from_str(name))
            .ok()
            .and_then(|f| f.dyn_into().ok())
            .ok_or_else(|| Error::Input(format!("checkpoint store: {name} is not a function")))?;
        let args: js_sys::Array = args.iter().collect();
        let promise: js_sys::Promise = f
            .apply(&self.store, &args)
            .and_then(|p| p.dyn_into().map_err(|_| JsValue::from_str("did not return a promise")))
            .map_err(|e| Error::Input(format!("checkpoint store: {name}: {}", describe(&e))))?;
        wasm_bindgen_futures::JsFuture::from(promise)
            .await
            .map_err(|e| Error::Input(format!("checkpoint store: {name}: {}", describe(&e))))
    }
}

/// An exception's message (`QuotaExceededError: ...`), or its debug form.
fn describe(e: &JsValue) -> String {
    match e.dyn_ref::<js_sys::Error>() {
        Some(err) => format!("{}: {}", String::from(err.name()), String::from(err.message())),
        None => format!("{e:?}"),
    }
}

impl Store for JsStore {
    async fn list(&mut self) -> Result<Vec<String>> {
        let v = self.call("list", &[]).await?;
        serde_wasm_bindgen::from_value(v).map_err(|e| Error::Input(format!("checkpoint store: list: {e}")))
    }

    async fn read(&mut self, name: &str, file: &str) -> Result<Vec<u8>> {
        let v = self.call("read", &[JsValue::from_str(name), JsValue::from_str(file)]).await?;
        Ok(js_sys::Uint8Array::new(&v).to_vec())
    }

    async fn write(&mut self, name: &str, files: &[(&str, &[u8])]) -> Result<()> {
        let list = js_sys::Array::new();
        for (file, bytes) in files {
            list.push(&js_sys::Array::of2(&JsValue::from_str(file), &js_sys::Uint8Array::from(*bytes)));
        }
        self.call("write", &[JsValue::from_str(name), list.into()]).await.map(|_| ())
    }

    async fn remove(&mut self, name: &str) -> Result<()> {
        self.call("remove", &[JsValue::from_str(name)]).await.map(|_| ())
    }
}

/// `fineTune`'s (and `pretrain`'s) checkpointing as the wrapper passes it: the store, and `every`, `keep`, `resume`.
pub(super) fn checkpoints(v: JsValue) -> Result<Option<Checkpoints<JsStore>>> {
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    let get = |k: &str| js_sys::Reflect::get(&v, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED);
    let mut c = Checkpoints::new(JsStore { store: get("store") });
    if let Some(n) = get("every").as_f64() {
        c.every = n as usize;
    }
    if let Some(n) = get("keep").as_f64() {
        c.keep = n as usize;
    }
    c.resume = get("resume").as_bool().unwrap_or(false);
    Ok(Some(c))
}

pub(super) fn report(r: &FitReport) -> (Vec<JsProgress>, Vec<JsProgress>) {
    (r.steps.iter().map(JsProgress::from).collect(), r.epochs.iter().map(JsProgress::from).collect())
}

#[wasm_bindgen]
impl WasmModel {
    /// Fine-tunes a copy of this model, given as the files it was loaded from, on its backend (see
    /// `training::job`): `examples` an array of the task's objects, `options` [`JsFineTuneOptions`], `hooks`
    /// [`JsHooks`] (`shouldStop` returns a reason string to stop, or undefined), `checkpoint` null or `{ store, every,
    /// keep, resume }` (see [`JsStore`]). This model is not changed; resolves
    /// to `{ labels, steps, epochs, config, weights }`, the new model's config.json and model.safetensors.
    #[wasm_bindgen(js_name = fineTune)]
    #[allow(clippy::too_many_arguments)]
    pub fn fine_tune(&self, config: Vec<u8>, tokenizer: Option<Vec<u8>>, vocab: Option<Vec<u8>>,
        tokenizer_config: Option<Vec<u8>>, weights: JsValue, adapter_config: Option<Vec<u8>>,
        adapter_weights: Option<Vec<u8>>, examples: JsValue, options: JsValue, hooks: JsValue, checkpoint: JsValue)
        -> Result<js_sys::Promise, JsError> {
        let opts: JsFineTuneOptions = if options.is_undefined() || options.is_null() {
            JsFineTuneOptions::default()
        } else {
            serde_wasm_bindgen::from_value(options).map_err(|e| JsError::new(&format!("fineTune: bad options: {e}")))?
        };
        let opts = opts.resolve().map_err(js_err)?;
        let examples = Examples::deserialize(opts.task, serde_wasm_bindgen::Deserializer::from(examples)).map_err(js_err)?;
        let adapter = adapter_config.zip(adapter_weights);
        let files = ModelFiles { config, tokenizer, vocab, tokenizer_config, weights: super::weights_file(weights)?.0, adapter, sentence: Vec::new() };
        let engine = self.engine.clone();
        let mut hooks = JsHooks { hooks, method: "fineTune" };
        let mut checkpoints = checkpoints(checkpoint).map_err(js_err)?;
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let done = engine
                .fine_tune(files, &opts, &examples, &mut hooks, checkpoints.as_mut())
                .await
                .map_err(|e| JsValue::from(js_err(e)))?;
            let (steps, epochs) = report(&done.report);
            let out = to_js(&JsFineTuned { labels: done.labels, steps, epochs, best_epoch: done.report.best_epoch }).map_err(JsValue::from)?;
            let mut files = vec![("config", done.config_json.as_bytes()), ("weights", &done.safetensors[..])];
            if let Some((config, weights)) = &done.adapter {
                files.extend([("adapterConfig", config.as_bytes()), ("adapterWeights", &weights[..])]);
            }
            for (key, bytes) in files {
                js_sys::Reflect::set(&out, &JsValue::from_str(key), &js_sys::Uint8Array::from(bytes))?;
            }
            Ok(out)
        }))
    }
}

#[wasm_bindgen]
impl WasmModel {
    /// [`Self::fine_tune`] of a model loaded from a `.gguf` (its bytes): LoRA only, the base's weights kept as the
    /// file stores them (Q8_0, f16) while the adapters and the head train ([`crate::engine::Engine::fine_tune_gguf`]).
    /// Resolves as `fineTune` does, with the file's `tokenizer` (tokenizer.json) and `tokenizerConfig` besides.
    #[wasm_bindgen(js_name = fineTuneGguf)]
    pub fn fine_tune_gguf(&self, gguf: JsValue, examples: JsValue, options: JsValue, hooks: JsValue,
        checkpoint: JsValue) -> Result<js_sys::Promise, JsError> {
        let opts: JsFineTuneOptions = if options.is_undefined() || options.is_null() {
            JsFineTuneOptions::default()
        } else {
            serde_wasm_bindgen::from_value(options).map_err(|e| JsError::new(&format!("fineTune: bad options: {e}")))?
        };
        let opts = opts.resolve().map_err(js_err)?;
        let examples = Examples::deserialize(opts.task, serde_wasm_bindgen::Deserializer::from(examples)).map_err(js_err)?;
        let engine = self.engine.clone();
        let mut hooks = JsHooks { hooks, method: "fineTune" };
        let mut checkpoints = checkpoints(checkpoint).map_err(js_err)?;
        // The file's bytes, or a finished WeightStream that read it as it downloaded.
        let read = match gguf.dyn_into::<js_sys::Uint8Array>() {
            Ok(bytes) => crate::weights::gguf::bert::read_bert(&super::JsBytes(bytes)).map_err(js_err)?,
            Err(other) => match super::stream::WeightStream::take(other)? {
                (crate::weights::stream::Streamed::Gguf(read), _) => *read,
                _ => return Err(JsError::new("fineTune: the weights stream holds a safetensors file, not a .gguf")),
            },
        };
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let (done, tokenizer, tokenizer_config) = engine
                .fine_tune_gguf(read, &opts, &examples, &mut hooks, checkpoints.as_mut())
                .await
                .map_err(|e| JsValue::from(js_err(e)))?;
            let (steps, epochs) = report(&done.report);
            let out = to_js(&JsFineTuned { labels: done.labels, steps, epochs, best_epoch: done.report.best_epoch }).map_err(JsValue::from)?;
            let mut files = vec![("config", done.config_json.as_bytes()), ("weights", &done.safetensors[..]),
                ("tokenizer", tokenizer.as_bytes())];
            if let Some(t) = &tokenizer_config {
                files.push(("tokenizerConfig", t.as_bytes()));
            }
            if let Some((config, weights)) = &done.adapter {
                files.extend([("adapterConfig", config.as_bytes()), ("adapterWeights", &weights[..])]);
            }
            for (key, bytes) in files {
                js_sys::Reflect::set(&out, &JsValue::from_str(key), &js_sys::Uint8Array::from(bytes))?;
            }
            Ok(out)
        }))
    }
}

/// A Hugging Face folder's files (as `exportModel` gives them) → the bytes of one `.gguf` with its weights in `dtype`
/// ("f32", "f16", "q8_0", "q4_0"; see `weights::gguf::convert`): how `exportModel({ format: "gguf" })` exports a
/// fine-tuned model quantized again.
#[wasm_bindgen(js_name = toGguf)]
pub fn to_gguf(config: Vec<u8>, tokenizer: Option<Vec<u8>>, vocab: Option<Vec<u8>>, tokenizer_config: Option<Vec<u8>>,
    weights: JsValue, dtype: &str) -> Result<Vec<u8>, JsError> {
    use crate::weights::gguf::convert::{convert_files, FolderFiles, WeightsBytes};
    let dtype: crate::dtype::Dtype = dtype.parse().map_err(js_err)?;
    let sharded = super::shards::shard_bytes(&weights)?;
    let one = match &sharded {
        Some(_) => Vec::new(),
        None => weights
            .dyn_into::<js_sys::Uint8Array>()
            .map_err(|_| JsError::new("toGguf: the weights must be a file's bytes or a sharded checkpoint's files"))?
            .to_vec(),
    };
    let files = FolderFiles {
        name: "bert",
        config: &config,
        tokenizer: tokenizer.as_deref(),
        vocab: vocab.as_deref(),
        tokenizer_config: tokenizer_config.as_deref(),
        sentence: &[],
        weights: match &sharded {
            Some((index, file, shards)) => WeightsBytes::Sharded { index, file: *file, shards },
            None => WeightsBytes::One(&one),
        },
    };
    convert_files(&files, dtype).map(|(bytes, _)| bytes).map_err(js_err)
}
