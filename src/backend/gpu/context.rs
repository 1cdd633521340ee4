//! Getting a device, kept apart from using it: [`Gpu::new`] is async (the only way on the web);
//! [`Gpu::new_blocking`] wraps it with `pollster` for native callers and tests.

use std::sync::{Arc, Mutex};

use crate::{Error, Result};

/// An adapter's device and queue, with the limits and features it was created with.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    /// The limits the device was created with: the adapter's own, so nothing is left on the table.
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    /// What the adapter can do below WebGPU's baseline; the kernels need `SHADER_F16_IN_F32` (`unpack2x16float`, core
    /// WGSL, present everywhere but GL ES and llvmpipe builds without f16).
    pub downlevel: wgpu::DownlevelFlags,
    /// Validation / out-of-memory errors raised by wgpu since the last check (wgpu reports them out of band;
    /// the default handler would panic).
    pub(crate) errors: Arc<Mutex<Vec<String>>>,
    /// Why the device was lost, once wgpu says so (`destroy()`, a driver reset, the browser's GPU process gone).
    /// A lost device never comes back: its buffers are gone, so the model must be loaded again on a new device.
    lost: Arc<Mutex<Option<String>>>,
}

/// What a device is asked for where its adapter has it: `TIMESTAMP_QUERY` (per-kernel timing) and `SUBGROUP` (the
/// variants with subgroup sums that the calibration times: [`super::Tuning::row_subgroups`],
/// [`super::MatmulKernel::ReduceSubgroup`]).
pub const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY.union(wgpu::Features::SUBGROUP);

impl Gpu {
    /// The first adapter wgpu finds (high-performance preference), with its full limits. Optional features are
    /// requested only when the adapter has them (`OPTIONAL_FEATURES`); nothing requires them.
    pub async fn new() -> Result<Gpu> {
        let instance = wgpu::Instance::default();
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| {
                Error::Gpu(format!(
                    "no GPU adapter ({e}). Natively install a Vulkan driver (on Debian: \
                     `apt-get install mesa-vulkan-drivers` gives the CPU adapter lavapipe); in a browser enable WebGPU; \
                     or use the CPU backend (`--device cpu`)"
                ))
            })?;
        Gpu::from_adapter(adapter).await
    }

    /// Creates the device of a given adapter.
    pub async fn from_adapter(adapter: wgpu::Adapter) -> Result<Gpu> {
        let info = adapter.get_info();
        let limits = adapter.limits();
        let downlevel = adapter.get_downlevel_capabilities().flags;
        let features = adapter.features() & OPTIONAL_FEATURES;
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("bertgpu"),
                required_features: features,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| Error::Gpu(format!("adapter `{}` refused a device: {e}", info.name)))?;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(one_line(&e));
            }
        }));
        let lost = Arc::new(Mutex::new(None));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            if let Ok(mut l) = flag.lock() {
                *l = Some(if message.is_empty() { format!("{reason:?}") } else { format!("{reason:?}: {message}") });
            }
        });
        Ok(Gpu { device, queue, info, limits, features, downlevel, errors, lost })
    }

    /// [`Gpu::new`], blocking (native only: a browser must never block).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking() -> Result<Gpu> {
        pollster::block_on(Gpu::new())
    }

    /// Whether per-pass timestamps can be recorded.
    pub fn has_timestamps(&self) -> bool {
        self.features.contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    /// Why the device was lost, if it was (see [`Gpu::lost_error`]).
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().ok().and_then(|l| l.clone())
    }

    /// The error every call gets once the device is lost.
    pub(crate) fn lost_error(&self) -> Option<Error> {
        self.lost().map(|why| {
            Error::Gpu(format!(
                "the GPU device was lost ({why}); its buffers are gone: load the model again (in the browser \
                 the next call does that by itself)"
            ))
        })
    }

    /// Takes the errors wgpu reported since the last call, as one `Error::Gpu` (a lost device first: after a loss
    /// wgpu reports nothing else).
    pub(crate) fn check_errors(&self) -> Result<()> {
        if let Some(e) = self.lost_error() {
            return Err(e);
        }
        let mut v = self.errors.lock().map_err(|_| Error::Gpu("error log poisoned".into()))?;
        if v.is_empty() {
            return Ok(());
        }
        // The first is the cause; what follows in the same call is its consequence (an invalid bind group makes its
        // pass, its encoder and its submission invalid in turn).
        let msg = match v.len() {
            1 => v[0].clone(),
            n => format!("{} (and {} more error{} after it)", v[0], n - 1, if n == 2 { "" } else { "s" }),
        };
        v.clear();
        Err(Error::Gpu(msg))
    }
}

/// The most of wgpu's description that one error's line keeps.
const DETAIL_CHARS: usize = 600;

/// wgpu's error as one line that says what failed and what to do. wgpu's own text is a report over several lines
/// ("Validation Error", "Caused by:", then each cause indented on a line of its own): its lines are joined by ": ",
/// the headings dropped, and cut at [`DETAIL_CHARS`].
pub(crate) fn one_line(e: &wgpu::Error) -> String {
    match e {
        wgpu::Error::OutOfMemory { .. } => "the GPU ran out of memory: send fewer or shorter texts at once (a smaller \
            batch), use a quantized model (`bertgpu convert --dtype q8_0`), or the CPU backend (device cpu)"
            .into(),
        wgpu::Error::Validation { description, .. } => format!(
            "the GPU refused a command ({}); this is a bug in bertgpu: please report it with the model's config.json \
             (the CPU backend, device cpu, runs the model meanwhile)",
            detail(description)
        ),
        wgpu::Error::Internal { description, .. } => format!(
            "the GPU driver failed a command ({}); update the graphics driver, or use the CPU backend (device cpu)",
            detail(description)
        ),
    }
}

/// A multi-line description as one line (see [`one_line`]).
fn detail(description: &str) -> String {
    let lines = description.lines().map(str::trim).filter(|l| {
        !l.is_empty() && !matches!(*l, "Caused by:" | "Validation Error" | "Internal Error" | "Out of Memory")
    });
    let joined = lines.collect::<Vec<_>>().join(": ");
    match joined.char_indices().nth(DETAIL_CHARS) {
        Some((at, _)) => format!("{}…", &joined[..at]),
        None => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_validation_report_becomes_one_line() {
        let description = "Validation Error\n\nCaused by:\n  In Device::create_bind_group, label = 'matmul_vec4'\n    \
                           Buffer with 'weight' label has been destroyed\n";
        let e = wgpu::Error::Validation { source: description.into(), description: description.into() };
        let line = one_line(&e);
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with("the GPU refused a command (In Device::create_bind_group, label = 'matmul_vec4': Buffer \
                              with 'weight' label has been destroyed); this is a bug in bertgpu"),
            "{line}"
        );
        let long = "x".repeat(5 * DETAIL_CHARS);
        assert_eq!(detail(&long).chars().count(), DETAIL_CHARS + 1);
    }
}
