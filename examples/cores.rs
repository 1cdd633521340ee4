//! Do this machine's cores slow each other down, or data pass slowly between them? (A measurement for
//! BENCHMARKS.md, issue 20, not a test.)
//!
//! `cargo run --release --example cores`
//!
//! Times one thread alone, then two at once, on the same work: arithmetic in registers, sums over a buffer that fits
//! in one core's L2 (512 KiB), in the shared L3 (12 MiB), and over one that does not (64 MiB, from memory). Prints
//! each thread's time and the ratio of the two threads' mean to the one's: 1.00 where the cores do not share what
//! the work needs (SMT siblings would share the arithmetic units), above 1 where they do. Then times one thread
//! reading a buffer that it has just written, and one that the other thread has just written ([`handover`]).

use std::hint::black_box;
use std::time::Instant;

fn arithmetic() -> f32 {
    let mut a = [1.0f32, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7];
    for _ in 0..200_000_000u64 {
        for x in a.iter_mut() {
            *x = *x * 0.999_999 + 0.000_001;
        }
    }
    a.iter().sum()
}

/// `v`'s sum as eight independent sums (one SIMD register's lanes), so that a core reads as fast as its caches
/// deliver.
fn sum8(v: &[f32]) -> f32 {
    let mut s = [0.0f32; 8];
    for c in black_box(v).chunks_exact(8) {
        for (a, &x) in s.iter_mut().zip(c) {
            *a += x;
        }
    }
    s.iter().sum()
}

fn sums(bytes: usize, passes: usize) -> f32 {
    let buf = vec![1.0f32; bytes / 4];
    (0..passes).map(|_| sum8(&buf)).sum()
}

fn work(kind: &str) -> f32 {
    match kind {
        "arithmetic" => arithmetic(),
        "L2 (512 KiB)" => sums(512 << 10, 12000),
        "L3 (12 MiB)" => sums(12 << 20, 400),
        _ => sums(64 << 20, 40),
    }
}

/// Seconds each of `n` threads took, all started at once.
fn run(n: usize, kind: &'static str) -> Vec<f64> {
    let threads: Vec<_> = (0..n)
        .map(|_| {
            std::thread::spawn(move || {
                let t = Instant::now();
                black_box(work(kind));
                t.elapsed().as_secs_f64()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().expect("a timing thread panicked")).collect()
}

/// Nanoseconds thread 0 takes to sum `bytes` just written by itself, and just written by the other thread (the
/// lines then move from that core's cache), as a parallel loop reads the output of the loop before: medians of
/// `ROUNDS` rounds.
fn handover(bytes: usize) -> (u128, u128) {
    use std::sync::{Arc, Barrier};
    const ROUNDS: usize = 4000;
    struct Shared(std::cell::UnsafeCell<Vec<f32>>);
    // The two threads take turns (a barrier between writing and reading), never touching the buffer at once.
    unsafe impl Sync for Shared {}
    let buf = Arc::new(Shared(std::cell::UnsafeCell::new(vec![0.0f32; bytes / 4])));
    let barrier = Arc::new(Barrier::new(2));
    let other = {
        let (buf, barrier) = (buf.clone(), barrier.clone());
        std::thread::spawn(move || {
            for r in 0..ROUNDS {
                if r % 2 == 1 {
                    unsafe { (*buf.0.get()).iter_mut().for_each(|x| *x = r as f32) };
                }
                barrier.wait(); // written
                barrier.wait(); // read
            }
        })
    };
    let (mut same, mut moved) = (Vec::new(), Vec::new());
    for r in 0..ROUNDS {
        if r % 2 == 0 {
            unsafe { (*buf.0.get()).iter_mut().for_each(|x| *x = r as f32) };
        }
        barrier.wait();
        let t = Instant::now();
        black_box(sum8(unsafe { &*buf.0.get() }));
        let ns = t.elapsed().as_nanos();
        if r % 2 == 0 { same.push(ns) } else { moved.push(ns) }
        barrier.wait();
    }
    other.join().expect("the writing thread panicked");
    let median = |v: &mut Vec<u128>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    (median(&mut same), median(&mut moved))
}

fn main() {
    for kb in [18, 72] {
        let (same, moved) = handover(kb << 10);
        println!(
            "reading {kb} KiB just written: by this core {same} ns, by the other core {moved} ns ({:.1}x)",
            moved as f64 / same as f64
        );
    }
    for kind in ["arithmetic", "L2 (512 KiB)", "L3 (12 MiB)", "memory (64 MiB)"] {
        for _ in 0..2 {
            let one = run(1, kind)[0];
            let two = run(2, kind);
            let ratio = (two[0] + two[1]) / 2.0 / one;
            println!("{kind}: 1 thread {one:.3} s; 2 threads {:.3} and {:.3} s; ratio {ratio:.2}", two[0], two[1]);
        }
    }
}
