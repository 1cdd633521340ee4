//! Per-thread scratch memory, owned by the thread that runs the kernels (the caller, a rayon worker, or a Web
//! Worker of the threaded wasm build's pool) and lent to a kernel for one call. The pool frees it when its worker
//! ends; kernels only borrow it, so the pool needs to know none of them.

use std::cell::RefCell;

thread_local! {
    /// One growable buffer per thread: grown as a kernel needs, reused across calls.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's scratch buffer. Its length and contents are whatever the last borrower left: a kernel
/// sizes and clears it itself.
pub(crate) fn with<R>(f: impl FnOnce(&mut Vec<f32>) -> R) -> R {
    SCRATCH.with_borrow_mut(f)
}

/// Frees this thread's scratch: a pool worker of the threaded wasm build calls it before its thread ends, since
/// wasm threads run no thread-local destructors (the worker's stack and thread-local block are freed, not what they
/// point to).
#[cfg(all(target_arch = "wasm32", feature = "threads"))]
pub(crate) fn release() {
    SCRATCH.with(|s| *s.borrow_mut() = Vec::new());
}
