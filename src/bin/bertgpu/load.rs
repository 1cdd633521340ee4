//! Putting a model on its device for a command: the load-time check's reason when `auto` took the CPU, and the GPU
//! kernels' tuning (tune.rs).

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::engine::{Device, Engine, Placement};

use crate::{tune, Fail, LoadedModel, ModelArgs};

/// Where and how an inference command runs its model.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct InferArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where to run: `auto` uses the GPU when an adapter exists
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    pub device: Device,
    /// How the GPU stores activations: f16 halves their memory, f32 math (inference only; bench: a row beside f32)
    #[arg(long, value_enum, default_value_t = Activations::F32)]
    pub activations: Activations,
    /// On a GPU, also keep a CPU copy of the weights for the short calls the CPU finishes sooner: the crossover is
    /// measured at load (stderr says it); costs host memory for a second copy of the weights
    #[arg(long)]
    pub crossover: bool,
}

/// [`load_engine`] for an inference command, with the CPU copy for short calls where `--crossover` asks for one
/// ([`tune::crossover`]).
pub(crate) fn load_infer(m: &LoadedModel, args: &InferArgs) -> Result<Engine, Fail> {
    let engine = load_engine(m, args.device, args.activations == Activations::F16)?;
    if args.crossover && engine.device() == "gpu" {
        let fail = |e: bertgpu::Error| Fail::Model(format!("cannot load model `{}`: {e}", m.dir.display()));
        let weights = m.model.weights().map_err(fail)?;
        if let Some(line) = tune::crossover(&engine, &weights)? {
            eprintln!("bertgpu: crossover: {line}");
        }
    }
    Ok(engine)
}

/// `--activations`: how the GPU stores activations between kernels. `f16` halves their memory and traffic, within
/// about 2e-3 of PyTorch's hidden states (BENCHMARKS.md, "f16 activations"); arithmetic stays f32. Inference only;
/// the CPU computes in f32 either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Activations {
    F32,
    F16,
}

/// Config, weights and tokenizer of the model on the requested device (stderr says why `auto` took the CPU), with
/// f16 activations on the GPU where `f16` asks (checked at load like the kernels), and the kernels tuned for the
/// mode ([`tune::apply`]); failures exit 2.
pub(crate) fn load_engine(m: &LoadedModel, device: Device, f16: bool) -> Result<Engine, Fail> {
    let fail = |e: bertgpu::Error| Fail::Model(format!("cannot load model `{}`: {e}", m.dir.display()));
    // The device first: for a GPU, a folder's weights go from the file into its memory, not through the host's.
    let tunings = tune::cached();
    let placement = pollster::block_on(Placement::pick(device)).map_err(fail)?.with_tunings(tunings.clone());
    let weights = match &placement.gpu {
        Some(gpu) => m.model.weights_to(gpu),
        None => m.model.weights(),
    }
    .map_err(fail)?;
    let (config, tokenizer) = (m.model.config.clone(), m.model.tokenizer.clone());
    let engine = pollster::block_on(Engine::place(config, tokenizer, &weights, placement, CpuBackend::new())).map_err(fail)?;
    if let Some(why) = engine.device_reason() {
        eprintln!("bertgpu: on the CPU: {why}");
    }
    // The mode first: the kernels are then calibrated (and cached) for the activations the model stores.
    if f16 && !pollster::block_on(engine.set_f16_activations(true)).map_err(fail)? {
        eprintln!("bertgpu: on the CPU, which computes in f32: --activations f16 does not apply");
    }
    if let Some((line, true)) = tune::apply(&engine, tunings)? {
        eprintln!("bertgpu: GPU kernels calibrated for this adapter: {line}");
    }
    Ok(engine)
}
