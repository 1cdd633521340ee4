//! The CPU `linear` alone on one sentence's shapes: f32 weights against Q8_0 (a benchmark, not a test).
//!
//! `cargo run --release --example linear_bench -- [rows] [iters]` (RAYON_NUM_THREADS picks the threads)
//!
//! MiniLM-L6's four products per layer (QKV 384→1152, attention output 384→384, intermediate 384→1536 with GELU,
//! output 1536→384) on `rows` rows of x (15: bench/cli_latency.py's sentence), each timed alone (median of
//! `iters`), and the sum over the six layers: the share of a one-sentence forward that the products take. Beside
//! them, the time to decode the Q8_0 W alone (4 rows at a time, on one thread): the part the f32 product lacks.

use std::time::Instant;

use bertgpu::backend::cpu::matmul::{linear, linear_packed};
use bertgpu::backend::Activation;
use bertgpu::dtype::Dtype;
use bertgpu::testutil::rand_vec;
use bertgpu::weights::quant::{quantize, RowView};
use bertgpu::weights::HostTensor;

/// Values in [-0.1, 0.1): the op tests' reproducible data, scaled.
fn values(n: usize, seed: u64) -> Vec<f32> {
    rand_vec(n, seed).into_iter().map(|v| v * 0.1).collect()
}

fn median_us(iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters / 4 + 1 {
        f();
    }
    let mut t: Vec<f64> = (0..iters)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let m: usize = args.get(1).map_or(Ok(15), |s| s.parse())?;
    let iters: usize = args.get(2).map_or(Ok(400), |s| s.parse())?;
    let shapes = [("qkv", 384, 1152, Activation::None), ("attn_out", 384, 384, Activation::None),
        ("inter", 384, 1536, Activation::Gelu), ("out", 1536, 384, Activation::None)];
    let (mut f32_total, mut q8_total) = (0.0, 0.0);
    println!("{m} rows, {} threads, median of {iters} (µs)", rayon::current_num_threads());
    for (i, &(name, k, n, act)) in shapes.iter().enumerate() {
        let x = values(m * k, 1 + i as u64);
        let w = HostTensor::f32(vec![n, k], values(n * k, 10 + i as u64))?;
        let b = values(n, 20 + i as u64);
        let q = quantize(&w, Dtype::Q8_0)?;
        let view = RowView::new(&q)?;
        let wf = w.to_f32()?;
        let mut out = vec![0f32; m * n];
        let f = median_us(iters, || linear(&x, m, k, &wf, n, Some(&b), act, &mut out));
        let qt = median_us(iters, || linear_packed(&x, m, k, &view, Some(&b), act, &mut out));
        let mut strip = vec![0f32; 4 * k];
        let dt = median_us(iters, || (0..n).step_by(4).for_each(|r| view.rows_into(r, &mut strip)));
        println!("{name:>8} {k:>4}→{n:<4}  f32 {f:7.1}  q8_0 {qt:7.1}  ({:.2}×; decoding W alone {dt:6.1})", qt / f);
        f32_total += f;
        q8_total += qt;
    }
    println!("6 layers: f32 {:.2} ms, q8_0 {:.2} ms", 6.0 * f32_total / 1e3, 6.0 * q8_total / 1e3);
    Ok(())
}
