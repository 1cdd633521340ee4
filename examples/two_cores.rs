//! Whether two busy threads get two cores' worth of work on this machine: a fixed compute-bound loop (8 independent
//! multiply-add chains on registers: no memory traffic) timed on one thread, then on two at once, in rounds.
//! On a machine whose cores are its own, each of the two runs about as fast as one alone; on a virtual machine whose
//! two vCPUs the host sometimes runs on one physical core (SMT siblings, or shared), both slow down. Multi-core
//! speed-ups measured there (tensor-parallel workers, transformers.js's 2 threads, rayon) inherit that noise.
//!
//!   cargo run --release --example two_cores [rounds 5]
use std::hint::black_box;
use std::time::Instant;

/// Billions of multiply-adds per second of one call of the loop.
fn spin() -> f64 {
    const STEPS: u64 = 200_000_000;
    let mut acc = [1u64, 2, 3, 4, 5, 6, 7, 8];
    let m = black_box(6_364_136_223_846_793_005u64);
    let t0 = Instant::now();
    for _ in 0..STEPS {
        for a in &mut acc {
            *a = a.wrapping_mul(m).wrapping_add(1);
        }
    }
    black_box(acc);
    (STEPS * 8) as f64 / t0.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    for round in 1..=rounds {
        let alone = spin();
        let both: Vec<f64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2).map(|_| s.spawn(spin)).collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0.0)).collect()
        });
        println!(
            "round {round}: one thread {alone:.2} G/s; two at once {:.2} and {:.2} G/s ({:.2}x and {:.2}x of alone)",
            both[0],
            both[1],
            both[0] / alone,
            both[1] / alone
        );
    }
}
