//! Tensor parallelism on the CPU backend: a model split into shards (each on its own thread here, as each sits in
//! its own Web Worker in the browser) gives what the whole model gives, on real checkpoints in f32 and Q8_0, and a
//! split the model does not allow is a clear error.

use std::path::PathBuf;
use std::sync::{Arc, Barrier, Mutex};

use bertgpu::backend::cpu::CpuBackend;
use bertgpu::backend::{Shard, ShardLink};
use bertgpu::config::BertConfig;
use bertgpu::engine::{Device, Engine};
use bertgpu::tasks::{EmbedOptions, Pooling};
use bertgpu::tokenizer::Tokenizer;
use bertgpu::dtype::Dtype;
use bertgpu::weights::quant::quantize;
use bertgpu::weights::Weights;

/// Max |split − whole| on normalized embeddings. The split changes only the order of additions: each projection
/// back to the hidden size is summed per shard, then across shards (in f32, magnitudes ≲ 10 after 6 layers: a few
/// ulps of 1e-6 each, through LayerNorm's rescaling).
const SPLIT_ATOL: f32 = 2e-5;

/// The shards of one model in one process: each `gather` posts its part, waits for all, copies them out.
struct Local {
    shard: Shard,
    hub: Arc<(Barrier, Mutex<Vec<Vec<f32>>>)>,
}

impl ShardLink for Local {
    fn shard(&self) -> Shard {
        self.shard
    }
    fn gather(&self, mine: &[f32], all: &mut [f32]) -> bertgpu::Result<()> {
        let (barrier, parts) = &*self.hub;
        parts.lock().unwrap()[self.shard.rank] = mine.to_vec();
        barrier.wait();
        for (part, out) in parts.lock().unwrap().iter().zip(all.chunks_mut(mine.len().max(1))) {
            out.copy_from_slice(part);
        }
        barrier.wait(); // nobody posts the next part before everyone has read this one
        Ok(())
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Config, tokenizer and weights of `models/<name>`, every 2-D encoder weight quantized to Q8_0 if `q8`.
fn parts(name: &str, q8: bool) -> (BertConfig, Tokenizer, Weights) {
    let dir = root().join("models").join(name);
    let cfg = BertConfig::from_file(dir.join("config.json")).unwrap();
    let tok = Tokenizer::from_dir(&dir, cfg.max_position_embeddings).unwrap();
    let w = Weights::from_safetensors_file(dir.join("model.safetensors")).unwrap();
    if !q8 {
        return (cfg, tok, w);
    }
    let mut quantized = Weights::new();
    for name in w.names() {
        let t = w.stored(name).unwrap();
        let t = if name.contains("encoder.") && t.shape.len() == 2 { quantize(t, Dtype::Q8_0).unwrap() } else { t.clone() };
        quantized.insert(name, t);
    }
    (cfg, tok, quantized)
}

/// Embeds `texts` with the model split `count` ways (one thread per shard); every shard's result.
fn embed_split(name: &str, q8: bool, count: usize, texts: &[&str]) -> Vec<bertgpu::Result<Vec<Vec<f32>>>> {
    let hub = Arc::new((Barrier::new(count), Mutex::new(vec![Vec::new(); count])));
    let threads: Vec<_> = (0..count)
        .map(|rank| {
            let hub = hub.clone();
            let texts: Vec<String> = texts.iter().map(|s| s.to_string()).collect();
            let name = name.to_string();
            std::thread::spawn(move || {
                let (cfg, tok, w) = parts(&name, q8);
                let cpu = CpuBackend::sharded(Arc::new(Local { shard: Shard { rank, count }, hub }))?;
                let engine = pollster::block_on(Engine::from_parts_on(cfg, tok, &w, Device::Cpu, cpu))?;
                let texts: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
                pollster::block_on(engine.embed(&texts, &options()))
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn options() -> EmbedOptions {
    EmbedOptions { pooling: Pooling::Mean, normalize: true, batch_size: 4 }
}

fn embed_whole(name: &str, q8: bool, texts: &[&str]) -> Vec<Vec<f32>> {
    let (cfg, tok, w) = parts(name, q8);
    let engine = pollster::block_on(Engine::from_parts(cfg, tok, &w, Device::Cpu)).unwrap();
    pollster::block_on(engine.embed(texts, &options())).unwrap()
}

const TEXTS: [&str; 5] = [
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog, and then it runs off into the forest to find its friends.",
    "Tensor parallelism splits every layer.",
    "Short.",
    "Each shard holds half of the attention heads and half of the feed-forward units of every layer.",
];

fn check(name: &str, q8: bool, count: usize) {
    let whole = embed_whole(name, q8, &TEXTS);
    let split = embed_split(name, q8, count, &TEXTS);
    assert_eq!(split.len(), count, "{name}: one result per shard");
    let first = split[0].as_ref().unwrap();
    assert_eq!(first.len(), TEXTS.len(), "{name} q8={q8} {count} shards: one embedding per text");
    assert_eq!(whole.len(), TEXTS.len(), "{name} q8={q8} whole model: one embedding per text");
    for (rank, s) in split.iter().enumerate() {
        // Every shard computes the same values bit for bit: the sums are added in rank order on every one.
        assert_eq!(s.as_ref().unwrap(), first, "{name} q8={q8}: shard {rank} of {count} differs from shard 0");
    }
    for (i, (a, b)) in first.iter().zip(&whole).enumerate() {
        assert_eq!(a.len(), b.len(), "{name} q8={q8} text {i}: embedding sizes");
        let err = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(err <= SPLIT_ATOL, "{name} q8={q8} {count} shards, text {i}: max |split − whole| = {err}");
    }
}

#[test]
fn minilm_split_in_two_matches_the_whole_model() {
    check("all-MiniLM-L6-v2", false, 2);
}

#[test]
fn minilm_q8_0_split_in_two_and_three_matches_the_whole_model() {
    // 384 / 3 = 128 columns: whole blocks of 32, so MiniLM splits three ways too.
    check("all-MiniLM-L6-v2", true, 2);
    check("all-MiniLM-L6-v2", true, 3);
}

#[test]
fn a_split_the_model_cannot_take_is_a_clear_error() {
    // MiniLM's 12 heads do not divide by 5.
    for r in embed_split("all-MiniLM-L6-v2", false, 5, &TEXTS[..1]) {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("cannot be split across 5 workers") && e.contains("12 attention heads"), "{e}");
    }
    let bad = CpuBackend::sharded(Arc::new(Local {
        shard: Shard { rank: 2, count: 2 },
        hub: Arc::new((Barrier::new(1), Mutex::new(Vec::new()))),
    }));
    assert!(bad.unwrap_err().to_string().contains("rank must be below"));
}
