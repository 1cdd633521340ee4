//! bertgpu: BERT on the GPU (WGSL through `wgpu`) and on the CPU, natively and in the browser.
//!
//! Data flow of one call: text → [`tokenizer`] (`Encoding`s) → [`tokenizer::Batch`] →
//! `model::Bert::forward(backend, &batch)` → hidden states on the device → a task head → read back only
//! what the task needs → post-processing on the CPU → output structs ([`tasks`]).

// The threaded wasm build's pool waits with `memory.atomic.wait32`, still unstable; that build already needs
// RUSTC_BOOTSTRAP=1 for `-Z build-std` (src/backend/cpu/threads.rs).
#![cfg_attr(all(target_arch = "wasm32", feature = "threads"), feature(stdarch_wasm_atomic_wait))]

pub mod activation;
pub mod backend;
pub mod config;
pub mod dtype;
pub mod engine;
pub mod error;
pub mod heads;
pub mod loader;
pub mod model;
pub mod sentence;
pub mod tasks;
pub mod training;
pub mod tokenizer;
pub mod weights;

/// Deterministic data and comparisons shared by the unit tests of every layer and the integration tests.
#[doc(hidden)]
pub mod testutil;

/// Entry points shared by the fuzz targets (`fuzz/`) and `tests/fuzz_corpus.rs`.
#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
pub mod fuzzing;

#[cfg(target_arch = "wasm32")]
pub mod wasm;

pub use error::{Error, Result};
