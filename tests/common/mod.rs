//! Helpers shared by the integration tests: the GPU under test, reproducible data, and the tolerance check.
#![allow(dead_code)] // each test binary uses a subset

use bertgpu::backend::gpu::{GpuBackend, GpuTensor};
use bertgpu::backend::Backend;
use bertgpu::tokenizer::Batch;
use bertgpu::weights::{HostData, HostTensor};

/// The GPU backend on the machine's adapter, or `None` (with a SKIPPED line) only when there is no adapter at all:
/// any other failure is a test failure. CI installs lavapipe, so nothing is skipped there.
pub fn gpu() -> Option<GpuBackend> {
    match GpuBackend::new_blocking() {
        Ok(g) => Some(g),
        Err(e) if e.to_string().contains("no GPU adapter") => {
            eprintln!("SKIPPED on the GPU: {e}");
            None
        }
        Err(e) => panic!("a GPU adapter exists but the backend failed: {e}"),
    }
}

/// Deterministic values in [-1, 1) (xorshift), so failures reproduce.
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Asserts `|got − want| ≤ atol + rtol·|want|` everywhere (NaN fails), naming the worst index; returns the largest
/// absolute error.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    let mut worst = (0usize, 0.0f32);
    let mut max_err = 0.0f32;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        let ratio = if err.is_nan() { f32::INFINITY } else { err / (atol + rtol * w.abs()) };
        if ratio > worst.1 {
            worst = (i, ratio);
        }
        if err > max_err {
            max_err = err;
        }
    }
    let i = worst.0;
    assert!(
        worst.1 <= 1.0,
        "{what}: worst index {i}: got {} vs ref {} (|err| {} > atol {atol} + rtol {rtol}·|ref|)",
        got[i],
        want[i],
        (got[i] - want[i]).abs()
    );
    max_err
}

/// A JSON array of numbers (a golden vector) as f32.
pub fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().expect("a JSON array").iter().map(|x| x.as_f64().expect("a number") as f32).collect()
}

/// Cosine similarity, accumulated in f64.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// An f32 host tensor of `shape`.
pub fn host(shape: &[usize], data: Vec<f32>) -> HostTensor {
    HostTensor { shape: shape.to_vec(), data: HostData::F32(data) }
}

/// Runs what the GPU recorded and reads one tensor back.
pub fn read(g: &GpuBackend, t: &GpuTensor) -> Vec<f32> {
    pollster::block_on(g.read(t)).expect("gpu read")
}

/// A padded batch: sequence i has lens[i] real tokens (0 = all padding), right padding to t; type ids switch
/// halfway.
pub fn batch(lens: &[usize], t: usize, vocab: u32, seed: u64) -> Batch {
    let b = lens.len();
    let ids = rand_vec(b * t, seed);
    let mut out = Batch { b, t, ..Default::default() };
    for (i, &len) in lens.iter().enumerate() {
        for j in 0..t {
            let real = j < len;
            out.input_ids.push(if real { ((ids[i * t + j] + 1.0) * 0.5 * vocab as f32) as u32 % vocab } else { 0 });
            out.token_type_ids.push(u32::from(real && j >= len / 2));
            out.attention_mask.push(u32::from(real));
        }
    }
    out
}
