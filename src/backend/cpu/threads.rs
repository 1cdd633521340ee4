//! The thread pool of the threaded wasm build (`threads` feature, pkg/wasm-threads/): Web Workers that run this
//! module over the page's one shared memory, and a fork-join `for` over them.
//!
//! Why not rayon (as natively) through the `wasm-bindgen-rayon` crate: a browser's main thread may not block
//! (`memory.atomic.wait` traps there), so rayon's caller would spin on a core while the pool works, and its global
//! pool can be built once per module, never ended. Here the caller takes items like any worker and only spins for
//! the last ones still running elsewhere, and the pool ends and starts again (`Bert` `dispose()`, a new `threads`).
//!
//! Protocol. [`begin`] opens a pool generation and sets the thread count the parallel loops plan for; the JS side
//! (js/threads.js) then starts `count - 1` workers, each of which calls [`worker`] with that generation and waits
//! there (polling `EPOCH` for a moment, then `memory.atomic.wait32` on it) until a job is published or the
//! generation ends ([`end`]). [`par_for`] publishes one job (a borrowed closure and an item counter), wakes the
//! workers, takes items itself until none is left, waits until every item is done and no worker still holds the
//! job, and only then returns (so the closure's borrows outlive every use). A job published while another runs (a
//! nested loop, or a loop inside a worker's item) runs on its own thread instead: the pool runs one job at a time.
//!
//! Nothing an item runs may wait. The caller is usually the page's main thread, where `memory.atomic.wait32` traps;
//! a std lock or one-time cell (`Mutex`, `OnceLock`, ...) that a worker holds makes its other taker wait there. The
//! trap leaves this loop's job published (`BUSY` set) and the call's promise unsettled: the page hangs with no error
//! (it did, on the first sentence of some fresh pages, when the Q8_0 kernel's dot-product form was a `OnceLock`).
//! So the kernels keep such state in atomics; tests/layout.rs checks that src/backend/cpu/ has no waiting lock.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering::SeqCst};

use core::arch::wasm32::{memory_atomic_notify, memory_atomic_wait32};

/// One parallel loop: `f(i)` for every `i < n`.
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    n: usize,
    /// The next item to take.
    next: AtomicUsize,
    /// Items finished.
    done: AtomicUsize,
}

/// The job being run, or null.
static JOB: AtomicPtr<Job> = AtomicPtr::new(std::ptr::null_mut());
/// Bumped at each published job and at [`end`]: what idle workers wait on.
static EPOCH: AtomicI32 = AtomicI32::new(0);
/// Workers that may hold a pointer read from `JOB` (incremented before reading it).
static HOLDERS: AtomicUsize = AtomicUsize::new(0);
/// Set while a job is published: a second one runs on its caller's thread.
static BUSY: AtomicBool = AtomicBool::new(false);
/// The current pool generation; a worker of an older one returns.
static GENERATION: AtomicU32 = AtomicU32::new(0);
/// The threads (workers and the caller) the parallel loops plan for: 1 with no pool.
static THREADS: AtomicUsize = AtomicUsize::new(1);
/// Workers inside [`worker`] now.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Items the workers (not the callers) have run since the module started: for tests, that the pool does work.
static WORKER_ITEMS: AtomicUsize = AtomicUsize::new(0);
/// Set when a worker trapped (a Rust panic aborts its thread): the item it held never finishes, so the caller
/// panics too instead of waiting forever.
static LOST: AtomicBool = AtomicBool::new(false);

/// How many times an idle worker reads `EPOCH` before it sleeps: about 0.1–0.3 ms (an atomic load a nanosecond
/// or two). Long enough to bridge the serial steps between two parallel loops of one forward, short enough that a
/// pool between calls soon stops using its cores.
const SPINS: u32 = 1 << 17;

fn wake_all() {
    // SAFETY: notify only reads the address, which is a live static.
    unsafe { memory_atomic_notify(EPOCH.as_ptr() as *mut i32, u32::MAX) };
}

/// Starts pool generation `threads` (≥ 1, counting the caller); returns its number for the workers.
pub fn begin(threads: usize) -> u32 {
    end();
    LOST.store(false, SeqCst);
    THREADS.store(threads.max(1), SeqCst);
    GENERATION.load(SeqCst)
}

/// Ends the current generation: its workers return from [`worker`] (at once if idle, else after their item), and
/// the loops run on the caller alone.
pub fn end() {
    THREADS.store(1, SeqCst);
    GENERATION.fetch_add(1, SeqCst);
    EPOCH.fetch_add(1, SeqCst);
    wake_all();
}

/// The threads the parallel loops plan for (the caller included).
pub fn threads() -> usize {
    THREADS.load(SeqCst)
}

/// Workers of any generation still inside [`worker`].
pub fn running() -> usize {
    RUNNING.load(SeqCst)
}

/// Items the workers have run since the module started.
pub fn worker_items() -> usize {
    WORKER_ITEMS.load(SeqCst)
}

/// A worker trapped: see `LOST`.
pub fn lost() {
    LOST.store(true, SeqCst);
    wake_all();
}

/// A worker's life: helps with each published job until `generation` ends. Only for a Web Worker: the wait traps
/// on a browser's main thread.
pub fn worker(generation: u32) {
    RUNNING.fetch_add(1, SeqCst);
    loop {
        let epoch = EPOCH.load(SeqCst);
        if GENERATION.load(SeqCst) != generation {
            break;
        }
        HOLDERS.fetch_add(1, SeqCst);
        let job = JOB.load(SeqCst);
        if !job.is_null() {
            // SAFETY: the caller keeps `*job` alive until HOLDERS is back to zero (see `par_for`).
            let items = help(unsafe { &*job });
            WORKER_ITEMS.fetch_add(items, SeqCst);
        }
        HOLDERS.fetch_sub(1, SeqCst);
        // Poll before sleeping: a forward's next loop follows within microseconds (a LayerNorm, a residual add),
        // and a worker woken from `memory.atomic.wait` arrives tens of microseconds late, after the caller has
        // taken the items itself.
        let mut spins = 0;
        while spins < SPINS && EPOCH.load(SeqCst) == epoch {
            core::hint::spin_loop();
            spins += 1;
        }
        // Returns at once if EPOCH moved since it was read (a job published meanwhile): no wake-up is lost.
        // SAFETY: EPOCH is a live static; the wait is valid in a worker.
        unsafe { memory_atomic_wait32(EPOCH.as_ptr(), epoch, -1) };
    }
    super::scratch::release();
    RUNNING.fetch_sub(1, SeqCst);
}

/// Runs items of `job` until none is left; returns how many it ran.
fn help(job: &Job) -> usize {
    let mut items = 0;
    loop {
        let i = job.next.fetch_add(1, SeqCst);
        if i >= job.n {
            return items;
        }
        items += 1;
        // SAFETY: `f` outlives the job (see `par_for`).
        unsafe { (*job.f)(i) };
        job.done.fetch_add(1, SeqCst);
    }
}

/// `f(i)` for `i in 0..n`, on the pool's threads and the caller's.
pub fn par_for(n: usize, f: &(dyn Fn(usize) + Sync)) {
    if n <= 1 || THREADS.load(SeqCst) <= 1 || BUSY.swap(true, SeqCst) {
        (0..n).for_each(f);
        return;
    }
    // SAFETY (lifetime): the pointer is erased to 'static only while this call runs; it is unpublished and no
    // worker holds it when this function returns.
    let f: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(f) };
    let job = Job { f, n, next: AtomicUsize::new(0), done: AtomicUsize::new(0) };
    JOB.store(&job as *const Job as *mut Job, SeqCst);
    EPOCH.fetch_add(1, SeqCst);
    wake_all();
    help(&job);
    while job.done.load(SeqCst) < n {
        if LOST.load(SeqCst) {
            JOB.store(std::ptr::null_mut(), SeqCst);
            panic!("a worker of the thread pool stopped in the middle of a parallel loop");
        }
        core::hint::spin_loop();
    }
    JOB.store(std::ptr::null_mut(), SeqCst);
    // A worker that read the pointer before it was cleared may still be between reading it and finding no item.
    while HOLDERS.load(SeqCst) != 0 {
        core::hint::spin_loop();
    }
    BUSY.store(false, SeqCst);
}
