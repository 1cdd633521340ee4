#![no_main]
// Arbitrary text and pairs through every task on the tiny checkpoints (CPU): see bertgpu::fuzzing::inference.
use bertgpu::fuzzing::{inference, InferenceModels};

thread_local! {
    // Loaded once per process: libFuzzer calls the target from one thread.
    static MODELS: InferenceModels = {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/models");
        InferenceModels::load(&dir).unwrap_or_else(|e| panic!("cannot load {}: {e}", dir.display()))
    };
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| MODELS.with(|m| inference(m, data)));
