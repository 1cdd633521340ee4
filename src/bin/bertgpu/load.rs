//! Putting a model on its device for a command: the load-time check's reason when `auto` took the CPU, and the GPU
//! kernels' tuning (tune.rs).

use bertgpu::engine::{Device, Engine};

use crate::{tune, Fail, LoadedModel};

/// Config, weights and tokenizer of the model on the requested device (stderr says why `auto` took the CPU); failures exit 2.
pub(crate) fn load_engine(m: &LoadedModel, device: Device) -> Result<Engine, Fail> {
    let fail = |e: bertgpu::Error| Fail::Model(format!("cannot load model `{}`: {e}", m.dir.display()));
    let weights = m.model.weights().map_err(fail)?;
    let (config, tokenizer) = (m.model.config.clone(), m.model.tokenizer.clone());
    let engine = pollster::block_on(Engine::from_parts(config, tokenizer, &weights, device)).map_err(fail)?;
    if let Some(why) = engine.device_reason() {
        eprintln!("bertgpu: on the CPU: {why}");
    }
    if let Some((line, true)) = tune::apply(&engine)? {
        eprintln!("bertgpu: GPU kernels calibrated for this adapter: {line}");
    }
    Ok(engine)
}
