//! CPU embedding throughput for one batch shape (a benchmark, not a test; see bench/cpu_vs_torch.sh).
//!
//! `cargo run --release --example cpu_bench -- models/all-MiniLM-L6-v2 [batch] [seq] [iters]`
//! (`WEIGHTS=model.q8_0.gguf` takes the config and weights from a GGUF file instead, the tokenizer from the folder)
//!
//! Builds a batch of `batch` texts of exactly `seq` tokens (a long text truncated by the tokenizer), then times
//! `embed_batch` (forward + mean pooling + normalisation + read-back; tokenization excluded, as on the PyTorch side)
//! and prints one JSON line.

use std::time::Instant;

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::config::BertConfig;
use bertgpu::tasks::{EmbedOptions, Model, Pooling};
use bertgpu::tokenizer::Tokenizer;
use bertgpu::weights::Weights;

const TEXT: &str = "The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly, and a \
    sentence embedding model turns every one of these words into vectors that capture meaning. ";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).map(String::as_str).unwrap_or("models/all-MiniLM-L6-v2"));
    let batch: usize = args.get(2).map_or(Ok(8), |s| s.parse())?;
    let seq: usize = args.get(3).map_or(Ok(128), |s| s.parse())?;
    let iters: usize = args.get(4).map_or(Ok(20), |s| s.parse())?;

    let tokenizer = Tokenizer::from_dir(&dir, seq)?;
    let (config, weights) = match std::env::var("WEIGHTS").ok().filter(|p| !p.is_empty()) {
        Some(path) => {
            let m = bertgpu::weights::gguf::load_gguf(&std::fs::read(path)?)?;
            (m.config, m.weights)
        }
        None => (BertConfig::from_file(dir.join("config.json"))?, Weights::from_safetensors_file(dir.join("model.safetensors"))?),
    };
    let model = Model::new(CpuBackend::new(), config, tokenizer, &weights)?;
    drop(weights);

    let texts: Vec<String> = (0..batch).map(|i| format!("{i} {}", TEXT.repeat(1 + seq / 16))).collect();
    let encoded = texts.iter().map(|t| model.tokenizer.encode(t, None)).collect::<Result<Vec<_>, _>>()?;
    let b = model.tokenizer.batch(&encoded);
    assert_eq!((b.b, b.t), (batch, seq), "every text must fill the {seq} tokens");
    let opts = EmbedOptions { pooling: Some(Pooling::Mean), normalize: Some(true), batch_size: batch, ..EmbedOptions::default() };

    for _ in 0..2 {
        pollster::block_on(model.embed_batch(&b, &opts))?; // warm-up: page in weights, spin up threads
    }
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        let v = pollster::block_on(model.embed_batch(&b, &opts))?;
        times.push(t0.elapsed().as_secs_f64());
        assert_eq!(v.len(), batch);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let median = times[times.len() / 2];
    println!(
        "{{\"impl\":\"bertgpu-cpu\",\"threads\":{},\"batch\":{batch},\"seq\":{seq},\"iters\":{iters},\"median_ms\":{:.2},\"best_ms\":{:.2},\"embeddings_per_s\":{:.1}}}",
        rayon::current_num_threads(),
        median * 1e3,
        times[0] * 1e3,
        batch as f64 / median
    );
    Ok(())
}
