//! A buffer pool: a tensor's buffer goes back to the pool when the tensor is dropped, and the next request of the
//! same size and kind takes it again, so a repeated forward allocates nothing new.
//!
//! Ordering rule. Ops are recorded into one command encoder and run at the next submit, while `queue.write_buffer`
//! (uploads, uniforms) runs *before* that whole submission. So a buffer freed during the current recording may be
//! handed to another op's output (GPU writes stay in recording order), but never to a host write, which would land
//! before the earlier reads of that buffer. Such buffers wait in `released` until the submit.
//!
//! Freeing. A buffer the pool lets go of (an evicted free buffer, a weight whose tensor is dropped, every buffer when
//! the backend goes) is destroyed then, not merely dropped (a weight that arrived straight into device memory only
//! once nothing can adopt it again: see [`PoolBuf::adopted`]): in the browser wgpu's drop of a buffer does nothing, and
//! the GPU memory stays until the page's garbage collector happens to collect the JS object, so a bound kept by
//! dropping would bound nothing there. A buffer that the commands recorded since the last submit may still use
//! waits for that submit (`doomed`); a destroyed buffer in a submission is an error, while work already submitted
//! finishes (WebGPU and wgpu-core both keep the memory until then).
//!
//! Bound. A buffer fits only a request of its exact size, so calls of ever new shapes (training batches padded to
//! their longest row, texts of every length) would each leave a set of buffers behind, and the pool would grow until
//! every shape had been seen. So the pool holds at most [`pool_slack`] more than the most its tensors used at once
//! when a buffer was created: creating a buffer beyond that drops the free buffers that have waited longest.

use std::cell::{Cell, RefCell};
use std::any::Any;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Activations: storage, copy source (read-back) and destination (uploads).
    Storage,
    /// One op's `Params`.
    Uniform,
    /// Read-back staging.
    Staging,
}

impl Kind {
    fn usage(self) -> wgpu::BufferUsages {
        use wgpu::BufferUsages as U;
        match self {
            Kind::Storage => U::STORAGE | U::COPY_SRC | U::COPY_DST,
            Kind::Uniform => U::UNIFORM | U::COPY_DST,
            Kind::Staging => U::MAP_READ | U::COPY_DST,
        }
    }
}

type Key = (Kind, u64);

/// How much more than the peak in use (`PoolState::peak_in_use`) the pool may hold in free buffers: half of it,
/// and at least 16 MiB, so that calls alternating between two shapes of similar size (a benchmark's round robin,
/// inference between training steps) keep both sets of buffers instead of creating them again each time.
pub fn pool_slack(peak_in_use: u64) -> u64 {
    (peak_in_use / 2).max(16 << 20)
}

#[derive(Default)]
pub struct PoolState {
    /// Each free buffer with the time it was freed (`clock`), for dropping the longest-waiting first.
    free: HashMap<Key, Vec<(u64, wgpu::Buffer)>>,
    /// Freed since the last submit: reusable by GPU writes only (see the module comment).
    released: HashMap<Key, Vec<wgpu::Buffer>>,
    /// Weights dropped since the last submit, destroyed after it (the recorded commands may read them).
    doomed: Vec<wgpu::Buffer>,
    /// Whether ops have been recorded since the last submit (if not, a freed buffer is referenced by no pending
    /// work and may go straight back to `free`).
    pub recording: bool,
    /// Buffers ever created by the pool (a repeated call must not raise it).
    pub created: usize,
    pub created_bytes: u64,
    /// Bytes of the buffers alive (in use, released and free), of those in use, and the most in use when a buffer
    /// was created (what the bound is measured from: a reused buffer does not raise it).
    pub held: u64,
    pub in_use: u64,
    pub peak_in_use: u64,
    /// Buffers dropped to keep the bound.
    pub evicted: usize,
    /// Buffers destroyed: evicted, or weights let go of (see the module comment).
    pub destroyed: usize,
    clock: u64,
}

impl PoolState {
    /// Drops the longest-waiting free buffers until what the pool holds is within the bound (see the module doc).
    fn trim(&mut self) {
        let bound = self.peak_in_use + pool_slack(self.peak_in_use);
        while self.held > bound {
            let Some((&key, _)) = self.free.iter().filter(|(_, v)| !v.is_empty()).min_by_key(|(_, v)| v[0].0) else {
                return; // the rest is in use or waits for the submit
            };
            if let Some(list) = self.free.get_mut(&key) {
                // A free buffer is in no pending command (see `PoolBuf::drop`).
                list.remove(0).1.destroy();
                self.destroyed += 1;
                if list.is_empty() {
                    self.free.remove(&key);
                }
            }
            self.held -= key.1;
            self.evicted += 1;
        }
    }
}

impl Drop for PoolState {
    /// The backend is gone, and its pending commands with it: every buffer the pool holds goes now.
    fn drop(&mut self) {
        let free = self.free.drain().flat_map(|(_, v)| v.into_iter().map(|(_, b)| b));
        let released = self.released.drain().flat_map(|(_, v)| v);
        for b in free.chain(released).chain(self.doomed.drain(..)) {
            b.destroy();
        }
    }
}

pub type Pool = Rc<RefCell<PoolState>>;

/// A pooled buffer; returns itself to the pool on drop. A weight (`counter`: not pooled) is destroyed instead.
pub struct PoolBuf {
    buf: Option<wgpu::Buffer>,
    key: Key,
    pool: Option<Pool>,
    /// For a weight: the backend's count of weight bytes alive, lowered again on drop.
    counter: Option<Rc<Cell<u64>>>,
    /// For a weight that arrived straight into device memory: the handle its `Placed` copies share
    /// ([`PoolBuf::adopted`]).
    owner: Option<Arc<dyn Any + Send + Sync>>,
}

impl PoolBuf {
    /// A weight's buffer, outside the free lists, counted in `counter` while it lives; `pool` only says when it may
    /// be destroyed.
    pub fn weight(buf: wgpu::Buffer, counter: Rc<Cell<u64>>, pool: &Pool) -> PoolBuf {
        let key = (Kind::Storage, buf.size());
        counter.set(counter.get() + buf.size());
        PoolBuf { buf: Some(buf), key, pool: Some(pool.clone()), counter: Some(counter), owner: None }
    }

    /// [`PoolBuf::weight`] for the buffer of a placed weight (`owner`: the handle that its `Placed` copies in the
    /// host's `Weights` share). Dropped while another holder of `owner` remains (the weights being loaded: a head
    /// whose load fails after taking it, or one loaded only to see whether the checkpoint has it), the buffer is
    /// not destroyed, since the next tensor made of that `Placed` adopts the same buffer; dropped as the last
    /// holder, it is destroyed as any weight is. (Destroying it in the first case is what broke token
    /// classification on streamed weights: the sequence classifier, loaded first from the same `classifier.*`,
    /// failed on the missing pooler and took the buffer with it.)
    pub fn adopted(buf: wgpu::Buffer, owner: Arc<dyn Any + Send + Sync>, counter: Rc<Cell<u64>>, pool: &Pool)
        -> PoolBuf {
        let mut b = PoolBuf::weight(buf, counter, pool);
        b.owner = Some(owner);
        b
    }

    /// Destroys the buffer instead of giving it back to the pool: for a read-back's staging copy after a failed
    /// submission or map, which may be left mapped or with its map pending, so that the next read-back taking it
    /// from the pool would fail in turn (one error would break every later call).
    pub fn discard(mut self) {
        let Some(buf) = self.buf.take() else { return };
        if let Some(Ok(mut p)) = self.pool.as_ref().map(|pool| pool.try_borrow_mut()) {
            p.in_use -= self.key.1;
            p.held -= self.key.1;
            p.destroyed += 1;
        }
        buf.destroy();
    }

    pub fn buffer(&self) -> &wgpu::Buffer {
        self.buf.as_ref().expect("a PoolBuf holds its buffer until dropped")
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        if let Some(c) = &self.counter {
            c.set(c.get().saturating_sub(self.key.1));
            let Some(buf) = self.buf.take() else { return };
            if self.owner.take().is_some_and(|o| Arc::strong_count(&o) > 1) {
                return; // still placed in weights that may adopt it again (see `PoolBuf::adopted`)
            }
            match self.pool.as_ref().map(|pool| pool.try_borrow_mut()) {
                Some(Ok(mut p)) if p.recording => p.doomed.push(buf),
                Some(Ok(mut p)) => {
                    buf.destroy();
                    p.destroyed += 1;
                }
                // (The pool is borrowed only inside its own functions, which drop no weight: left to wgpu's drop.)
                _ => {}
            }
            return;
        }
        if let (Some(pool), Some(buf)) = (&self.pool, self.buf.take()) {
            if let Ok(mut p) = pool.try_borrow_mut() {
                // A staging buffer is dropped unmapped after its read completed: no pending work can touch it.
                // So is any buffer freed while nothing is recorded.
                p.in_use -= self.key.1;
                if self.key.0 == Kind::Staging || !p.recording {
                    p.clock += 1;
                    let at = p.clock;
                    p.free.entry(self.key).or_default().push((at, buf));
                } else {
                    p.released.entry(self.key).or_default().push(buf);
                }
            }
        }
    }
}

/// Sizes are rounded up to 16 bytes (vec4 views) and at least 16 (no zero-sized bindings).
pub fn round_size(bytes: u64) -> u64 {
    bytes.max(16).div_ceil(16) * 16
}

/// A buffer of `bytes` (rounded) of `kind`. `host_write`: the caller will `queue.write_buffer` into it.
pub fn take(pool: &Pool, device: &wgpu::Device, kind: Kind, bytes: u64, host_write: bool) -> PoolBuf {
    let size = round_size(bytes);
    let key = (kind, size);
    let mut p = pool.borrow_mut();
    let reused = p.free.get_mut(&key).and_then(Vec::pop).map(|(_, b)| b).or_else(|| {
        if host_write || kind == Kind::Staging {
            None
        } else {
            p.released.get_mut(&key).and_then(Vec::pop)
        }
    });
    let buf = match reused {
        Some(b) => b,
        None => {
            p.created += 1;
            p.created_bytes += size;
            p.held += size;
            p.peak_in_use = p.peak_in_use.max(p.in_use + size);
            p.trim();
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(match kind {
                    Kind::Storage => "tensor",
                    Kind::Uniform => "params",
                    Kind::Staging => "staging",
                }),
                size,
                usage: kind.usage(),
                mapped_at_creation: false,
            })
        }
    };
    p.in_use += size;
    PoolBuf { buf: Some(buf), key, pool: Some(pool.clone()), counter: None, owner: None }
}

/// After a submit every released buffer may serve any request again, and the weights dropped before it go.
pub fn after_submit(pool: &Pool) {
    let mut p = pool.borrow_mut();
    p.recording = false;
    let doomed = std::mem::take(&mut p.doomed);
    p.destroyed += doomed.len();
    for b in doomed {
        b.destroy();
    }
    let released = std::mem::take(&mut p.released);
    for (key, bufs) in released {
        p.clock += 1;
        let at = p.clock;
        p.free.entry(key).or_default().extend(bufs.into_iter().map(|b| (at, b)));
    }
    p.trim();
}
