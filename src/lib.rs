//! bertgpu: BERT on the GPU (WGSL through `wgpu`) and on the CPU, natively and in the browser.
//!
//! Data flow of one call: text → [`tokenizer`] (`Encoding`s) → [`tokenizer::Batch`] →
//! `model::Bert::forward(backend, &batch)` → hidden states on the device → a task head → read back only
//! what the task needs → post-processing on the CPU → output structs ([`tasks`]).

pub mod backend;
pub mod config;
pub mod error;
pub mod heads;
pub mod model;
pub mod tasks;
pub mod tokenizer;
pub mod weights;

#[cfg(target_arch = "wasm32")]
pub mod wasm;

pub use error::{Error, Result};
