//! A loaded model on the device picked at run time: [`Engine`] is an enum over [`Model`] on each backend, and
//! every task dispatches to the generic [`Model`] method. The CLI (`src/bin/`) and the wasm shim (`src/wasm/`)
//! are thin layers over this module. Where a model goes is decided in two steps, kept apart so tests can pass their
//! own GPU: [`Placement::pick`] acquires the GPU a [`Device`] asks for, [`Engine::place`] puts the model on it,
//! after the load-time check of [`canary`]. [`crossover`] measures, per model, which calls the CPU finishes sooner.

pub mod canary;
pub mod crossover;

use std::collections::BTreeMap;

use crossover::{most_tokens, routed};

use crate::backend::cpu::CpuBackend;
use crate::backend::gpu::{calibration, Calibration, Gpu, GpuBackend, Progress, Tuning, Workload};
use crate::backend::Backend;
use crate::config::BertConfig;
use crate::loader::{self, LoadOptions, ModelFiles, ModelSource};
use crate::heads::classifier::LabelScore;
use crate::heads::discriminator::ReplacedToken;
use crate::heads::masked_lm::{FillMaskPrediction, NextSentence};
use crate::heads::qa::Answer;
use crate::heads::token_classifier::{Aggregation, TokenEntity};
use crate::tasks::pipelines::RankedDocument;
use crate::tasks::vectors::{SparseOptions, SparseVector, TokenOptions, TokenVectors};
use crate::tasks::{EmbedOptions, Model};
use crate::tokenizer::{Encoded, Tokenizer};
use crate::training::fit::checkpoint::{Checkpoints, Store};
use crate::training::fit::Hooks;
use crate::training::job::{self, Examples, FineTuned, JobOptions};
use crate::training::{EpochProgress, TrainExample, TrainOptions, TrainReport};
use crate::weights::Weights;
use crate::{Error, Result};

/// Which backend to run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
pub enum Device {
    /// The GPU when a hardware adapter exists, else the CPU (a software adapter such as lavapipe or SwiftShader
    /// is slower than the CPU backend on the same cores).
    #[default]
    Auto,
    /// The GPU (WebGPU in the browser; Vulkan, Metal or DX12 natively), any adapter
    #[cfg_attr(not(target_arch = "wasm32"), value(alias = "webgpu"))]
    Gpu,
    /// The CPU backend, on every core
    Cpu,
}

impl std::str::FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Device> {
        match s {
            "auto" => Ok(Device::Auto),
            "gpu" | "webgpu" => Ok(Device::Gpu),
            "cpu" => Ok(Device::Cpu),
            other => Err(Error::Input(format!("unknown device `{other}`; use auto, gpu or cpu"))),
        }
    }
}

/// A loaded model on the backend picked at run time. Every task dispatches to the generic [`Model`] method.
pub enum Engine {
    Cpu(Model<CpuBackend>),
    Gpu(Model<GpuBackend>),
}

/// Runs `$body` with `$m` bound to the `Model<_>` inside an [`Engine`], whatever its backend.
#[macro_export]
macro_rules! with_model {
    ($engine:expr, $m:ident => $body:expr) => {
        match $engine {
            $crate::engine::Engine::Cpu($m) => $body,
            $crate::engine::Engine::Gpu($m) => $body,
        }
    };
}

impl Engine {
    /// Loads and checks a model ([`crate::loader`]) and puts it on `device`.
    pub async fn load(source: ModelSource<'_>, opts: &LoadOptions, device: Device) -> Result<Engine> {
        Self::load_on(source, opts, device, CpuBackend::new()).await
    }

    /// [`Self::load`], with the backend to use if the CPU is chosen (e.g. the reference twin of the GPU kernels).
    pub async fn load_on(source: ModelSource<'_>, opts: &LoadOptions, device: Device, cpu: CpuBackend)
        -> Result<Engine> {
        let m = loader::load(source, opts)?;
        let placement = Placement::pick(device).await?;
        // For the GPU, a folder's weights go from the file to its memory without a host copy.
        let weights = match &placement.gpu {
            Some(gpu) => m.weights_to(gpu)?,
            None => m.weights()?,
        };
        Self::place(m.config, m.tokenizer, &weights, placement, cpu).await
    }

    /// Loads a Hugging Face-style folder: `config.json`, the tokenizer files, `model.safetensors`.
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn from_dir(dir: impl AsRef<std::path::Path>, device: Device) -> Result<Engine> {
        Self::load(ModelSource::Path(dir.as_ref()), &LoadOptions::default(), device).await
    }

    /// Loads a BERT `.gguf` from its bytes (ours, or llama.cpp's `bert` files): see [`crate::weights::gguf`].
    pub async fn from_gguf(bytes: &[u8], device: Device) -> Result<Engine> {
        Self::load(ModelSource::Gguf(&bytes), &LoadOptions::default(), device).await
    }

    /// Puts the encoder on the requested device.
    pub async fn from_parts(config: BertConfig, tokenizer: Tokenizer, weights: &Weights, device: Device) -> Result<Engine> {
        Self::from_parts_on(config, tokenizer, weights, device, CpuBackend::new()).await
    }

    /// [`Self::from_parts`], with the backend to use if the CPU is chosen (a GPU model is always whole).
    pub async fn from_parts_on(config: BertConfig, tokenizer: Tokenizer, weights: &Weights, device: Device,
        cpu: CpuBackend) -> Result<Engine> {
        Self::place(config, tokenizer, weights, Placement::pick(device).await?, cpu).await
    }

    /// Puts the model on `placement`'s GPU when it has one, else on `cpu`. On the GPU the kernels are those an
    /// earlier load chose for this adapter and model shape ([`Placement::tunings`], the calibration's cache), else
    /// the defaults; the pipelines of a first call are built at once ([`canary::prebuild`]: natively on several
    /// threads), then the load-time check runs ([`canary::compare_each`]: the encoder's output on a fixed input
    /// against the CPU backend's from the same weights, under each matmul the kernels use). A cached choice that
    /// fails the check is dropped for the defaults, checked in turn. A GPU that disagrees beyond the tolerance is
    /// not used:
    /// - asked for `Device::Auto`: the model goes on the CPU, and [`Self::device_reason`] says which adapter
    ///   disagreed, by how much and where. The caller asked for whatever works; the CPU gives right answers.
    /// - asked for `Device::Gpu`: the load fails with that reason. Whoever insists on the GPU (a benchmark, a test
    ///   of the GPU, an app sized for its speed) must not get the CPU unnoticed, nor wrong numbers: as with no
    ///   adapter at all, the error says so and how to go on (`auto` or `cpu`). Never silently wrong, never
    ///   silently elsewhere.
    pub async fn place(config: BertConfig, tokenizer: Tokenizer, weights: &Weights, placement: Placement,
        cpu: CpuBackend) -> Result<Engine> {
        let Placement { device, gpu, reason, tunings } = placement;
        let Some(gpu) = gpu else {
            let mut model = Model::new(cpu, config, tokenizer, weights)?;
            model.device_reason = reason;
            return Ok(Engine::Cpu(model));
        };
        // (Logged: the check reads back what each module took, where the weights went straight to the GPU.)
        let weights = &weights.logging();
        let mut model = Model::new(gpu, config, tokenizer, weights)?;
        // Set before the check, not after it by `set_tuning`: a returning load builds and checks only the kernels
        // it will run (BENCHMARKS.md, "A returning load checks only the kernels it runs").
        let defaults = model.backend.tuning();
        let key = calibration::cache_key(model.backend.gpu(), &workload_of(&model));
        let cached = tunings.get(&key).and_then(|text| Progress::parse(text).ok()).map(|p| p.tuning);
        let kernels = model.backend.set_tuning(cached.unwrap_or(defaults));
        let checks = canary::covering(kernels);
        let built = canary::prebuild(&model, &checks);
        let reference = canary::reference(&model, weights).await?;
        let mut failed = match built {
            Ok(()) => canary::compare_each(&model, &reference, &checks).await,
            Err(e) => Err(e),
        };
        if kernels != defaults && !matches!(failed, Ok(None)) {
            // A cached choice that fails the check, or that this device cannot even build or run: the cache key
            // names the driver, so this is rare. The defaults run, checked as at any load, and the caller's
            // calibration (which finds its choice not in effect) chooses again.
            model.backend.set_tuning(defaults);
            let checks = canary::covering(defaults);
            canary::prebuild(&model, &checks)?;
            failed = canary::compare_each(&model, &reference, &checks).await;
        }
        let Some((_, canary)) = failed? else {
            model.canary = Some(reference);
            return Ok(Engine::Gpu(model));
        };
        if device == Device::Gpu {
            return Err(Error::Gpu(format!(
                "{canary}: this GPU computes wrong values for this model (a driver or compiler fault); update the \
                 graphics driver, or use device auto (falls back to the CPU by itself) or cpu"
            )));
        }
        // Weights in GPU memory come back to the host (checked against what the file had); then the GPU's buffers
        // go before the CPU copy of the weights is made.
        let host = if weights.any_placed() {
            let names: Vec<String> = weights.names().into_iter().map(String::from).collect();
            canary::read_back(&model.backend, weights, &names).await?
        } else {
            weights.clone()
        };
        let Model { config, tokenizer, .. } = model;
        let mut model = Model::new(cpu, config, tokenizer, &host)?;
        model.device_reason = Some(format!("{canary}; running on the CPU instead"));
        Ok(Engine::Cpu(model))
    }

    /// What the GPU kernels' calibration times for this model: one encoder layer in its own shapes and weight
    /// dtype ([`Workload::of_config`]), on activations stored as the model now stores them (f32 or f16: each mode
    /// has its own choice and cache key); `None` on the CPU.
    pub fn tuning_workload(&self) -> Option<Workload> {
        match self {
            Engine::Gpu(m) => Some(workload_of(m)),
            Engine::Cpu(_) => None,
        }
    }

    /// Where the tuning chosen for this model on this adapter is cached ([`calibration::cache_key`]); `None` on the CPU.
    pub fn tuning_key(&self) -> Option<String> {
        match (self, self.tuning_workload()) {
            (Engine::Gpu(m), Some(w)) => Some(calibration::cache_key(m.backend.gpu(), &w)),
            _ => None,
        }
    }

    /// Whether a load should calibrate the GPU kernels ([`calibration::worth_calibrating`]): false on the CPU and on CPU
    /// adapters.
    pub fn worth_calibrating(&self) -> bool {
        matches!(self, Engine::Gpu(m) if calibration::worth_calibrating(m.backend.gpu()))
    }

    /// Whether the GPU kernels in effect are `t` (as the adapter clamps it): where a load found `t` cached for this
    /// adapter and model shape ([`Placement::tunings`]), it checked them and runs them, and nobody need set them
    /// again. False on the CPU.
    pub fn runs_tuning(&self, t: Tuning) -> bool {
        matches!(self, Engine::Gpu(m) if m.backend.tuning() == m.backend.clamp(t))
    }

    /// The GPU kernels' tuning in effect; `None` on the CPU.
    pub fn tuning(&self) -> Option<Tuning> {
        match self {
            Engine::Gpu(m) => Some(m.backend.tuning()),
            Engine::Cpu(_) => None,
        }
    }

    /// Switches the GPU kernels to `t` (clamped to the adapter) and checks them with the load-time check
    /// ([`canary::compare_each`] under [`canary::covering`]: each matmul variant they use). If any disagrees with
    /// the CPU, the kernels go back to what they were and the error names the disagreement. Returns the tuning in
    /// effect; `None` on the CPU.
    pub async fn set_tuning(&self, t: Tuning) -> Result<Option<Tuning>> {
        let Engine::Gpu(m) = self else { return Ok(None) };
        let before = m.backend.tuning();
        let t = m.backend.set_tuning(t);
        let checks = canary::covering(t);
        let outcome = match (canary::prebuild(m, &checks), &m.canary) {
            (Ok(()), Some(reference)) => canary::compare_each(m, reference, &checks).await,
            (Ok(()), None) => Ok(None),
            (Err(e), _) => Err(e),
        };
        match outcome {
            Ok(None) => Ok(Some(t)),
            Ok(Some((check, why))) => {
                m.backend.set_tuning(before);
                Err(Error::Gpu(format!("the GPU kernels {check} fail the load-time check ({why}); kept {before}")))
            }
            Err(e) => {
                m.backend.set_tuning(before);
                Err(Error::Gpu(format!("the GPU kernels {t} fail the load-time check ({e}); kept {before}")))
            }
        }
    }

    /// Turns the GPU's f16-activation mode on or off ([`GpuBackend::set_f16_activations`]: activations stored as
    /// f16 between kernels, arithmetic in f32; inference only) and checks it with the load-time check ([`canary`],
    /// to the mode's own tolerance); if the check fails, the mode stays as it was and the error says why. Returns
    /// whether the mode is on: always false on the CPU, which computes in f32.
    pub async fn set_f16_activations(&self, on: bool) -> Result<bool> {
        let Engine::Gpu(m) = self else { return Ok(false) };
        let before = m.backend.f16_activations();
        m.backend.set_f16_activations(on);
        if let Some(why) = recheck(m).await {
            m.backend.set_f16_activations(before);
            return Err(Error::Gpu(format!("f16 activations fail the load-time check ({why}); kept f32")));
        }
        Ok(on)
    }

    /// Whether the GPU runs with f16 activations ([`Self::set_f16_activations`]).
    pub fn f16_activations(&self) -> bool {
        matches!(self, Engine::Gpu(m) if m.backend.f16_activations())
    }

    /// Fails, naming `what`, where the GPU runs with f16 activations: training is checked against PyTorch in f32.
    pub fn expect_f32_activations(&self, what: &str) -> Result<()> {
        match self {
            Engine::Gpu(m) => m.backend.expect_f32_activations(what),
            Engine::Cpu(_) => Ok(()),
        }
    }

    /// Times the GPU kernels' variants on this model's shapes within about `budget_ms` and switches to the fastest
    /// ([`GpuBackend::calibrate`]) once it passes the load-time check ([`Self::set_tuning`]; one that fails is an
    /// error and the kernels stay as they were); `None` on the CPU.
    pub async fn calibrate(&self, budget_ms: f64) -> Result<Option<Calibration>> {
        self.calibrate_from(budget_ms, None).await
    }

    /// [`Self::calibrate`] resuming where an earlier one cut short by its budget stopped
    /// ([`Calibration::progress`], as the caller cached it).
    pub async fn calibrate_from(&self, budget_ms: f64, from: Option<Progress>) -> Result<Option<Calibration>> {
        let (Engine::Gpu(m), Some(work)) = (self, self.tuning_workload()) else { return Ok(None) };
        let c = m.backend.calibrate_from(&work, budget_ms, from).await?;
        self.set_tuning(c.tuning).await?;
        Ok(Some(c))
    }

    /// `"cpu"` or `"gpu"`.
    pub fn device(&self) -> &'static str {
        with_model!(self, m => m.backend.name())
    }

    /// Why the model is on the CPU although the GPU was considered (`Device::Auto`): no adapter, a software adapter,
    /// or an adapter that failed the load-time check ([`Self::place`]). `None` on the GPU, and when the CPU was
    /// asked for.
    pub fn device_reason(&self) -> Option<&str> {
        with_model!(self, m => m.device_reason.as_deref())
    }

    pub fn config(&self) -> &BertConfig {
        with_model!(self, m => &m.config)
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        with_model!(self, m => &m.tokenizer)
    }

    /// See [`Model::embed`]: the texts tokenized, then [`Self::embed_encoded`], which counts the call's tokens where a
    /// CPU copy takes short calls ([`crossover`]).
    pub async fn embed(&self, texts: &[&str], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let encoded = with_model!(self, m => m.encode_for_embedding(texts, opts))?;
        self.embed_encoded(&encoded, opts).await
    }

    /// See [`Model::check_embed_options`].
    pub fn check_embed_options(&self, opts: &EmbedOptions) -> Result<()> {
        with_model!(self, m => m.check_embed_options(opts))
    }

    /// See [`Model::prompt_text`].
    pub fn prompt_text(&self, opts: &EmbedOptions) -> Result<Option<String>> {
        with_model!(self, m => m.prompt_text(opts))
    }

    /// See [`Model::embedding_tokenizer`].
    pub fn embedding_tokenizer(&self) -> &Tokenizer {
        with_model!(self, m => m.embedding_tokenizer())
    }

    /// See [`Model::prompts`].
    pub fn prompts(&self) -> std::collections::BTreeMap<String, String> {
        with_model!(self, m => m.prompts())
    }

    /// See [`Model::prompt_named`].
    pub fn prompt_named(&self, name: Option<&str>) -> Result<Option<String>> {
        with_model!(self, m => m.prompt_named(name))
    }

    /// See [`Model::check_sparse`].
    pub fn check_sparse(&self, opts: &SparseOptions) -> Result<bool> {
        with_model!(self, m => m.check_sparse(opts))
    }

    /// See [`Model::embed_sparse`].
    pub async fn embed_sparse(&self, texts: &[&str], opts: &SparseOptions) -> Result<Vec<SparseVector>> {
        with_model!(self, m => m.embed_sparse(texts, opts).await)
    }

    /// See [`Model::embed_tokens`].
    pub async fn embed_tokens(&self, texts: &[&str], opts: &TokenOptions) -> Result<Vec<TokenVectors>> {
        with_model!(self, m => m.embed_tokens(texts, opts).await)
    }

    /// See [`Model::train_head`].
    pub async fn train_head(&self, examples: &[TrainExample], opts: &TrainOptions,
        on_progress: impl FnMut(&EpochProgress)) -> Result<TrainReport> {
        self.expect_f32_activations("training a head")?;
        with_model!(self, m => m.train_head(examples, opts, on_progress).await)
    }

    /// Fine-tunes a copy of this engine's model, given as the `files` it was loaded from, on this engine's backend
    /// ([`job::run`]). This engine is not changed: load the result ([`FineTuned`]'s config and weights, with the
    /// same tokenizer files) to use it.
    /// With `checkpoints`, the run is saved as it goes and can resume ([`crate::training::fit::checkpoint`]).
    pub async fn fine_tune<S: Store>(&self, files: ModelFiles, opts: &JobOptions, examples: &Examples,
        hooks: &mut impl Hooks, mut checkpoints: Option<&mut Checkpoints<S>>) -> Result<FineTuned> {
        self.expect_f32_activations("fine-tuning")?;
        let original: serde_json::Value = serde_json::from_slice(&files.config)?;
        let m = loader::load(ModelSource::Files(files), &LoadOptions::default())?;
        if m.config.hidden_size != self.config().hidden_size || m.config.num_hidden_layers != self.config().num_hidden_layers {
            return Err(Error::Input("the files to fine-tune are not this model's".into()));
        }
        let prepared = job::prepare(&m.config, &m.tokenizer, opts.task, examples, opts.doc_stride)?;
        let weights = m.weights()?;
        with_model!(self, e => job::run(&e.backend, &m.config, &m.tokenizer, &weights, &original, opts, &prepared, hooks,
            checkpoints.as_deref_mut()).await)
    }

    /// [`Self::fine_tune`] of a model loaded from a `.gguf` (`g`, read): LoRA only (`opts.lora`), its weights kept as
    /// the file stores them (Q8_0, f16, ...; [`crate::training::finetune::FineTuner::new_with`]). Returns the
    /// result and the file's `tokenizer.json` and `tokenizer_config.json` (if any), the folder's tokenizer.
    pub async fn fine_tune_gguf<S: Store>(&self, g: crate::weights::gguf::BertGguf, opts: &JobOptions,
        examples: &Examples, hooks: &mut impl Hooks, mut checkpoints: Option<&mut Checkpoints<S>>)
        -> Result<(FineTuned, String, Option<String>)> {
        self.expect_f32_activations("fine-tuning")?;
        if opts.lora.is_none() {
            return Err(Error::Input(
                "fineTune: a model loaded from a .gguf trains LoRA adapters only, its weights kept as stored: pass `lora` \
                 (e.g. { r: 8 })"
                    .into(),
            ));
        }
        let original: serde_json::Value = serde_json::from_str(&g.config_json)?;
        let (tokenizer, tokenizer_config) = (g.tokenizer_json.clone(), g.tokenizer_config_json.clone());
        let m = loader::load(ModelSource::ReadGguf(Box::new(g)), &LoadOptions::default())?;
        if m.config.hidden_size != self.config().hidden_size || m.config.num_hidden_layers != self.config().num_hidden_layers {
            return Err(Error::Input("the files to fine-tune are not this model's".into()));
        }
        let prepared = job::prepare(&m.config, &m.tokenizer, opts.task, examples, opts.doc_stride)?;
        let weights = m.weights()?;
        let done = with_model!(self, e => job::run(&e.backend, &m.config, &m.tokenizer, &weights, &original, opts, &prepared,
            hooks, checkpoints.as_deref_mut()).await)?;
        Ok((done, tokenizer, tokenizer_config))
    }

    /// See [`Model::export_head`].
    pub fn export_head(&self) -> Result<Vec<u8>> {
        with_model!(self, m => m.export_head())
    }

    /// See [`Model::load_head`].
    pub fn load_head(&self, bytes: &[u8]) -> Result<()> {
        with_model!(self, m => m.load_head(bytes))
    }

    /// See [`Model::head_labels`].
    pub fn head_labels(&self) -> Option<Vec<String>> {
        with_model!(self, m => m.head_labels())
    }

    /// See [`Model::clear_head`].
    pub fn clear_head(&self) {
        with_model!(self, m => m.clear_head())
    }

    /// See [`Model::classify_with_head`].
    pub async fn classify_with_head(&self, encoded: &[Encoded], top_k: Option<usize>) -> Result<Vec<Vec<LabelScore>>> {
        with_model!(self, m => m.classify_with_head(encoded, top_k).await)
    }

    /// See [`Model::embed_encoded`].
    pub async fn embed_encoded(&self, encoded: &[Encoded], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        routed!(self, encoded.iter().map(Encoded::len).sum(), m => m.embed_encoded(encoded, opts).await)
    }
}

/// The same tasks on whichever backend the engine holds; where a CPU copy takes short calls ([`crossover`]), on it
/// when the call's texts are short enough ([`crossover::most_tokens`] bounds their tokens).
impl Engine {
    /// See [`Model::available_tasks`].
    pub fn available_tasks(&self) -> Vec<&'static str> {
        with_model!(self, m => m.available_tasks())
    }

    /// See [`Model::fill_mask`].
    pub async fn fill_mask(&self, texts: &[&str], top_k: usize) -> Result<Vec<Vec<Vec<FillMaskPrediction>>>> {
        routed!(self, most_tokens(texts.iter().map(|t| (*t, None))), m => m.fill_mask(texts, top_k).await)
    }
    /// See [`Model::next_sentence`].
    pub async fn next_sentence(&self, pairs: &[(&str, &str)]) -> Result<Vec<NextSentence>> {
        routed!(self, most_tokens(pairs.iter().map(|(a, b)| (*a, Some(*b)))), m => m.next_sentence(pairs).await)
    }
    /// See [`Model::classify`].
    pub async fn classify(&self, inputs: &[(&str, Option<&str>)], top_k: Option<usize>) -> Result<Vec<Vec<LabelScore>>> {
        routed!(self, most_tokens(inputs.iter().copied()), m => m.classify(inputs, top_k).await)
    }
    /// See [`Model::rerank`].
    pub async fn rerank(&self, query: &str, documents: &[&str], top_k: Option<usize>) -> Result<Vec<RankedDocument>> {
        let tokens = most_tokens(documents.iter().map(|d| (query, Some(*d))));
        routed!(self, tokens, m => m.rerank(query, documents, top_k).await)
    }
    /// See [`Model::token_classify`].
    pub async fn token_classify(&self, inputs: &[(&str, Option<&str>)], aggregation: Aggregation)
        -> Result<Vec<Vec<TokenEntity>>> {
        routed!(self, most_tokens(inputs.iter().copied()), m => m.token_classify(inputs, aggregation).await)
    }
    /// See [`Model::answer`].
    pub async fn answer(&self, question: &str, context: &str) -> Result<Answer> {
        routed!(self, most_tokens([(question, Some(context))]), m => m.answer(question, context).await)
    }
    /// See [`Model::zero_shot`]: routed by the tokens of every (text, hypothesis) pair the call makes.
    pub async fn zero_shot<S: AsRef<str>>(&self, texts: &[&str], labels: &[S], opts: &crate::tasks::zero_shot::ZeroShotOptions)
        -> Result<Vec<Vec<LabelScore>>> {
        let hypothesis: usize = labels.iter().map(|l| l.as_ref().len() + opts.template.len() + 4).sum();
        let tokens = texts.iter().map(|t| t.len() * labels.len()).sum::<usize>() + hypothesis * texts.len();
        routed!(self, tokens, m => m.zero_shot(texts, labels, opts).await)
    }
    /// See [`Model::replaced_tokens`].
    pub async fn replaced_tokens(&self, inputs: &[(&str, Option<&str>)]) -> Result<Vec<Vec<ReplacedToken>>> {
        routed!(self, most_tokens(inputs.iter().copied()), m => m.replaced_tokens(inputs).await)
    }
}

/// What the GPU kernels' calibration times for `m`: one encoder layer in its own shapes and weight dtype, on
/// activations stored as the model now stores them ([`Engine::tuning_workload`]).
fn workload_of(m: &Model<GpuBackend>) -> Workload {
    let dtype = m.bert.encoder.layers.first().map_or(crate::backend::Dtype::F32, |l| l.matmul_dtype(&m.backend));
    Workload { f16_activations: m.backend.f16_activations(), ..Workload::of_config(&m.config, dtype) }
}

/// The load-time check ([`canary::compare`]) on the kernels `m`'s backend runs now: `None` where they pass (or the
/// model has no reference to check against), else why not. Changed kernels and modes are checked here before use.
async fn recheck(m: &Model<GpuBackend>) -> Option<String> {
    let reference = m.canary.as_ref()?;
    match canary::compare(m, reference).await {
        Ok(c) if c.passed() => None,
        Ok(c) => Some(c.to_string()),
        Err(e) => Some(e.to_string()),
    }
}

/// The GPU backend `device` asks for, or `None` for the CPU. `Gpu` insists on any adapter (its errors are returned).
/// `Auto` takes the GPU when there is a hardware adapter and the backend accepts its limits, else the CPU: a software
/// adapter (`DeviceType::Cpu`: Mesa lavapipe, SwiftShader) runs the same kernels on the same cores as the CPU backend,
/// several times slower (BENCHMARKS.md: MiniLM 8 × 128 on lavapipe takes ~7× the CPU backend's time), as the browser
/// package does on a fallback adapter. Inference and fine-tuning pick their backend here.
pub async fn gpu_for(device: Device) -> Result<Option<GpuBackend>> {
    Ok(Placement::pick(device).await?.gpu)
}

/// Where [`Engine::place`] puts a model: the device asked for, the GPU acquired for it, and why there is none when
/// `Auto` considered one.
pub struct Placement {
    pub device: Device,
    pub gpu: Option<GpuBackend>,
    /// Why `Auto` took the CPU (becomes [`Engine::device_reason`]); `None` when it found a GPU or the CPU was asked for.
    pub reason: Option<String>,
    /// The kernels' choices that earlier loads cached ([`Engine::tuning_key`] → [`Progress`] text, as the CLI's
    /// tuning.json and the browser's IndexedDB keep them): the one for this adapter and model shape, if any, is what
    /// [`Engine::place`] checks and runs. Empty: the defaults.
    pub tunings: BTreeMap<String, String>,
}

impl Placement {
    /// Acquires the GPU `device` asks for, as [`gpu_for`] describes.
    pub async fn pick(device: Device) -> Result<Placement> {
        let (gpu, reason) = match device {
            Device::Cpu => (None, None),
            Device::Gpu => (Some(GpuBackend::new(Gpu::new().await?)?), None),
            Device::Auto => match Gpu::new().await {
                Ok(gpu) if gpu.info.device_type == wgpu::DeviceType::Cpu => (None, Some(format!(
                    "the GPU adapter `{}` is a software renderer running on the CPU, slower than the CPU backend",
                    gpu.info.name
                ))),
                Ok(gpu) => match GpuBackend::new(gpu) {
                    Ok(g) => (Some(g), None),
                    Err(e) => (None, Some(format!("the GPU cannot run the kernels ({e})"))),
                },
                Err(e) => (None, Some(format!("no usable GPU ({e})"))),
            },
        };
        Ok(Placement { device, gpu, reason, tunings: BTreeMap::new() })
    }

    /// `device` on `gpu` (one the caller made, e.g. a test's): [`Engine::place`] checks it and, for `Auto`, may
    /// still choose the CPU.
    pub fn on(device: Device, gpu: GpuBackend) -> Placement {
        Placement { device, gpu: Some(gpu), reason: None, tunings: BTreeMap::new() }
    }

    /// This placement with the kernels' cached choices `tunings` ([`Placement::tunings`]).
    pub fn with_tunings(self, tunings: BTreeMap<String, String>) -> Placement {
        Placement { tunings, ..self }
    }
}
