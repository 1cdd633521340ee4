//! Per-kernel GPU time: every pass recorded while profiling is on writes a timestamp before and after it; the read
//! that submits those passes resolves the timestamps and adds each pass's time to its kernel's total.

use super::GpuBackend;

/// Timestamps per query set: WebGPU's (and wgpu's) most.
const SET_QUERIES: u32 = wgpu::QUERY_SET_MAX_QUERIES;

/// Query sets for at most this many passes between two reads (a training step of bert-large records about 3,000);
/// passes beyond it are not timed.
const MAX_PASSES: usize = 32 * SET_QUERIES as usize / 2;

/// Per-pass GPU time from timestamp queries, accumulated by label (kernel name) until taken.
pub(super) struct Profiler {
    /// Made as the passes need them: pass i writes set i / (SET_QUERIES / 2).
    sets: Vec<wgpu::QuerySet>,
    labels: Vec<&'static str>,
    totals: Vec<(&'static str, f64, usize)>,
}

/// The timestamps of the passes of one submission: resolved into `resolve`, copied to `read` to be mapped.
pub(super) struct Stamps {
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
    /// Timestamps: two per pass.
    n: u64,
    labels: Vec<&'static str>,
}

impl Stamps {
    /// The buffer to map, and its size in bytes.
    pub(super) fn read_buffer(&self) -> (&wgpu::Buffer, u64) {
        (&self.read, self.n * 8)
    }
}

impl Profiler {
    fn new() -> Profiler {
        Profiler { sets: Vec::new(), labels: Vec::new(), totals: Vec::new() }
    }

    /// The timestamp writes of one more pass, labelled `entry`, while there is room for them.
    pub(super) fn pass_writes(&mut self, device: &wgpu::Device, entry: &'static str)
        -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let pass = self.labels.len();
        if pass >= MAX_PASSES {
            return None;
        }
        let per_set = SET_QUERIES as usize / 2;
        if pass / per_set == self.sets.len() {
            self.sets.push(device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("pass timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: SET_QUERIES,
            }));
        }
        self.labels.push(entry);
        let i = (pass % per_set) as u32 * 2;
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.sets[pass / per_set],
            beginning_of_pass_write_index: Some(i),
            end_of_pass_write_index: Some(i + 1),
        })
    }

    /// Buffers for the timestamps of the passes recorded since the last read, if there were any.
    pub(super) fn take_stamps(&mut self, dev: &wgpu::Device) -> Option<Stamps> {
        if self.labels.is_empty() {
            return None;
        }
        let n = self.labels.len() as u64 * 2;
        let usage = wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC;
        let resolve = dev.create_buffer(&wgpu::BufferDescriptor { label: Some("timestamps"), size: n * 8, usage, mapped_at_creation: false });
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let read = dev.create_buffer(&wgpu::BufferDescriptor { label: Some("timestamps"), size: n * 8, usage, mapped_at_creation: false });
        Some(Stamps { resolve, read, n, labels: std::mem::take(&mut self.labels) })
    }

    /// Records the resolve of `stamps` and its copy to the buffer that will be mapped.
    pub(super) fn resolve(&self, enc: &mut wgpu::CommandEncoder, stamps: &Stamps) {
        let Stamps { resolve, read, n, .. } = stamps;
        let mut left = *n;
        for (k, set) in self.sets.iter().enumerate() {
            let count = left.min(SET_QUERIES as u64);
            if count == 0 {
                break;
            }
            // Offsets in the destination must be multiples of 256 bytes: 4096 stamps are 32 KiB.
            enc.resolve_query_set(set, 0..count as u32, resolve, k as u64 * SET_QUERIES as u64 * 8);
            left -= count;
        }
        enc.copy_buffer_to_buffer(resolve, 0, read, 0, n * 8);
    }

    /// Adds the times of the mapped `stamps` (ticks of `period` ns) to the totals, and unmaps them.
    pub(super) fn add(&mut self, stamps: &Stamps, period: f64) {
        let Stamps { read, n, labels, .. } = stamps;
        if let Ok(view) = read.slice(..n * 8).get_mapped_range() {
            let stamps: &[u64] = bytemuck::cast_slice(&view);
            for (i, label) in labels.iter().enumerate() {
                let ms = stamps[2 * i + 1].saturating_sub(stamps[2 * i]) as f64 * period / 1e6;
                match self.totals.iter_mut().find(|e| e.0 == *label) {
                    Some(e) => { e.1 += ms; e.2 += 1; }
                    None => self.totals.push((label, ms, 1)),
                }
            }
        }
        read.unmap();
    }
}

impl GpuBackend {
    /// Starts timing every following pass with timestamp queries (if the adapter has them). Returns whether it did.
    pub fn enable_profiling(&self) -> bool {
        if !self.gpu.has_timestamps() {
            return false;
        }
        *self.profiler.borrow_mut() = Some(Profiler::new());
        true
    }

    /// (kernel, total ms, passes) accumulated since profiling was enabled or last taken.
    pub fn take_profile(&self) -> Vec<(&'static str, f64, usize)> {
        match self.profiler.borrow_mut().as_mut() {
            Some(p) => std::mem::take(&mut p.totals),
            None => Vec::new(),
        }
    }
}
