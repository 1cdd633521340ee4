//! Checkpoints of a training run, and resuming from the newest intact one ([`super::fit_loop`] takes and makes
//! them).
//!
//! A checkpoint is a set of three files named `checkpoint-<step>` in a [`Store`] (a folder natively, [`DirStore`]):
//! - `state.safetensors`: the trained parameters and AdamW's moments (f32; `param.<name>`, `exp_avg.<name>`,
//!   `exp_avg_sq.<name>`), and with early stopping the best epoch's parameters (`best.<i>`);
//! - `trainer_state.json`: where the loop stands ([`LoopState`]: the step, the epoch, this epoch's row order and the
//!   PRNG's state, the report so far), the trainer's counters (AdamW's step, dropout's micro-batches), and the run's
//!   identity (its options and the fingerprints of its data and model), which a resumed run must match;
//! - `manifest.json`, written last: each file's size and SHA-256.
//!
//! A store writes a checkpoint under a temporary name and renames it once complete, so a `checkpoint-*` is either
//! whole or refused by its manifest (a file missing, truncated or altered). Resume takes the newest intact
//! checkpoint, reporting each newer one it skips and why; with checkpoints present but none intact it fails, naming
//! the damage. Everything a step depends on is in the checkpoint, so on the CPU backend a resumed run ends with
//! the same parameters, bit for bit, as one never interrupted.

use std::collections::BTreeMap;
use std::future::Future;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::report::FitReport;
use crate::weights::safetensors::{write_f32, F32Tensor};
use crate::weights::Weights;
use crate::{Error, Result};

pub const STATE: &str = "state.safetensors";
pub const TRAINER_STATE: &str = "trainer_state.json";
pub const MANIFEST: &str = "manifest.json";
const PREFIX: &str = "checkpoint-";
const FORMAT: u32 = 1;

/// Where checkpoints are kept: named sets of files.
pub trait Store {
    /// The names of the checkpoints present, in any order.
    fn list(&mut self) -> impl Future<Output = Result<Vec<String>>>;
    /// One file of a checkpoint.
    fn read(&mut self, name: &str, file: &str) -> impl Future<Output = Result<Vec<u8>>>;
    /// Writes `files` as checkpoint `name` (replacing one of that name), atomically: a failure or a crash part way
    /// leaves no checkpoint `name` in [`Self::list`].
    fn write(&mut self, name: &str, files: &[(&str, &[u8])]) -> impl Future<Output = Result<()>>;
    fn remove(&mut self, name: &str) -> impl Future<Output = Result<()>>;
}

/// A run's checkpointing: where, how often, how many kept, and whether to resume.
pub struct Checkpoints<S> {
    pub store: S,
    /// Optimiser steps between two checkpoints (one is also made at each epoch's end).
    pub every: usize,
    /// The newest this many are kept; older ones are removed once a new one is complete.
    pub keep: usize,
    /// Continue from the newest intact checkpoint (a run with none starts from the beginning).
    pub resume: bool,
    /// The run's identity: a resumed run's must equal the checkpoint's ([`identity`]).
    pub run: serde_json::Value,
}

/// The default interval, in optimiser steps: see BENCHMARKS.md ("Checkpoints") for what it costs.
pub const DEFAULT_EVERY: usize = 100;
/// The default number kept: the newest and the one before it (a fallback if the newest is damaged).
pub const DEFAULT_KEEP: usize = 2;

impl<S: Store> Checkpoints<S> {
    pub fn new(store: S) -> Checkpoints<S> {
        Checkpoints { store, every: DEFAULT_EVERY, keep: DEFAULT_KEEP, resume: false, run: serde_json::Value::Null }
    }
}

/// For runs without checkpoints: `None::<&mut Checkpoints<NoStore>>`.
pub struct NoStore;

impl Store for NoStore {
    async fn list(&mut self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
    async fn read(&mut self, name: &str, _: &str) -> Result<Vec<u8>> {
        Err(Error::Input(format!("no checkpoint store holds {name}")))
    }
    async fn write(&mut self, name: &str, _: &[(&str, &[u8])]) -> Result<()> {
        Err(Error::Input(format!("no checkpoint store to write {name} to")))
    }
    async fn remove(&mut self, _: &str) -> Result<()> {
        Ok(())
    }
}

/// What a trainer saves of itself: named f32 tensors (with their shapes) and counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraineeState {
    pub tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
    pub counters: BTreeMap<String, u64>,
}

/// Where the loop stands: enough to continue exactly as the uninterrupted run would have.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoopState {
    /// The epoch to run (1-based; past the last when the run was complete).
    pub epoch: usize,
    /// Its optimiser steps already done.
    pub in_epoch: usize,
    /// The training rows in order: this epoch's when `shuffled`, else the last epoch's, to be shuffled next.
    pub order: Vec<usize>,
    pub shuffled: bool,
    /// The PRNG's state (after `order` was made).
    pub rng: u64,
    /// This epoch's step losses so far.
    pub losses: Vec<f32>,
    pub report: FitReport,
    /// The lowest validation loss and its epoch (early stopping); its parameters are `best.<i>` in the state file.
    pub best: Option<(f32, usize)>,
}

#[derive(Serialize, Deserialize)]
struct TrainerFile {
    format: u32,
    step: usize,
    #[serde(rename = "loop")]
    position: LoopState,
    counters: BTreeMap<String, u64>,
    run: serde_json::Value,
}

/// What a resume gives back to the loop.
pub struct Restored {
    pub name: String,
    pub position: LoopState,
    pub trainee: TraineeState,
    pub best: Option<Vec<Vec<f32>>>,
    /// The newer checkpoints skipped as damaged, with why.
    pub skipped: Vec<(String, String)>,
}

/// A checkpoint's name for the number of optimiser steps done.
pub fn name(step: usize) -> String {
    format!("{PREFIX}{step}")
}

fn step_of(name: &str) -> Option<usize> {
    name.strip_prefix(PREFIX)?.parse().ok()
}

/// Bytes as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of `bytes`, in hex.
pub fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The fingerprint of a model's weights: every tensor's name, shape, dtype and bytes, in name order.
pub fn weights_fingerprint(w: &Weights) -> String {
    let mut h = Sha256::new();
    for name in w.names() {
        let Some(t) = w.stored(name) else { continue };
        h.update(name.as_bytes());
        h.update(format!("{:?}{}", t.shape, t.data.dtype().name()).as_bytes());
        match &t.data {
            crate::weights::HostData::F32(v) => h.update(bytemuck::cast_slice::<f32, u8>(v)),
            crate::weights::HostData::F16(v) => h.update(bytemuck::cast_slice::<u16, u8>(v)),
            crate::weights::HostData::Q8_0(v) | crate::weights::HostData::Q4_0(v) => h.update(v),
            crate::weights::HostData::Placed(p) => h.update(p.hash.to_le_bytes()),
        }
    }
    hex(&h.finalize())
}

/// Saves a checkpoint after `step` optimiser steps, then removes all but the newest `keep`; returns its name and
/// size in bytes.
pub async fn save<S: Store>(c: &mut Checkpoints<S>, step: usize, position: &LoopState, trainee: &TraineeState,
    best: Option<&[Vec<f32>]>) -> Result<(String, usize)> {
    let best_names: Vec<String> = (0..best.map_or(0, <[_]>::len)).map(|i| format!("best.{i}")).collect();
    let mut tensors: Vec<F32Tensor<'_>> = trainee
        .tensors
        .iter()
        .map(|(n, shape, v)| F32Tensor { name: n.clone(), shape: shape.clone(), values: v })
        .collect();
    for (n, v) in best_names.iter().zip(best.unwrap_or(&[])) {
        tensors.push(F32Tensor { name: n.clone(), shape: vec![v.len()], values: v });
    }
    let state = write_f32(&tensors, &BTreeMap::new())?;
    let trainer = serde_json::to_vec_pretty(&TrainerFile {
        format: FORMAT,
        step,
        position: position.clone(),
        counters: trainee.counters.clone(),
        run: c.run.clone(),
    })?;
    let manifest = serde_json::to_vec_pretty(&serde_json::json!({
        "format": FORMAT,
        "step": step,
        "files": {
            STATE: { "bytes": state.len(), "sha256": sha256(&state) },
            TRAINER_STATE: { "bytes": trainer.len(), "sha256": sha256(&trainer) },
        },
    }))?;
    let name = name(step);
    let bytes = state.len() + trainer.len() + manifest.len();
    c.store.write(&name, &[(STATE, &state), (TRAINER_STATE, &trainer), (MANIFEST, &manifest)]).await?;
    let mut older: Vec<(usize, String)> =
        c.store.list().await?.into_iter().filter_map(|n| step_of(&n).map(|s| (s, n))).filter(|(s, _)| *s < step).collect();
    older.sort_unstable();
    let drop = (older.len() + 1).saturating_sub(c.keep.max(1));
    for (_, n) in older.into_iter().take(drop) {
        c.store.remove(&n).await?;
    }
    Ok((name, bytes))
}

/// Reads and checks one checkpoint against its manifest: `Err` says which file is missing or damaged.
async fn read_checked<S: Store>(store: &mut S, name: &str) -> Result<(Vec<u8>, Vec<u8>)> {
    let damaged = |why: String| Error::Input(format!("checkpoint {name}: {why}"));
    let manifest = store.read(name, MANIFEST).await.map_err(|e| damaged(format!("{MANIFEST}: {e}")))?;
    let manifest: serde_json::Value =
        serde_json::from_slice(&manifest).map_err(|e| damaged(format!("{MANIFEST} is not valid JSON: {e}")))?;
    if manifest["format"] != FORMAT {
        return Err(damaged(format!("{MANIFEST} is of format {}, this build reads {FORMAT}", manifest["format"])));
    }
    let mut out = Vec::new();
    for file in [STATE, TRAINER_STATE] {
        let entry = &manifest["files"][file];
        let bytes = store.read(name, file).await.map_err(|e| damaged(format!("{file}: {e}")))?;
        if entry["bytes"].as_u64() != Some(bytes.len() as u64) {
            return Err(damaged(format!("{file} has {} bytes, the manifest says {}", bytes.len(), entry["bytes"])));
        }
        if entry["sha256"].as_str() != Some(sha256(&bytes).as_str()) {
            return Err(damaged(format!("{file} does not match its SHA-256 in the manifest")));
        }
        out.push(bytes);
    }
    let trainer = out.pop().expect("two files");
    Ok((out.pop().expect("two files"), trainer))
}

/// The newest intact checkpoint, checked against this run's identity; `None` when the store has none at all.
pub async fn resume<S: Store>(c: &mut Checkpoints<S>) -> Result<Option<Restored>> {
    let mut names: Vec<(usize, String)> = c.store.list().await?.into_iter().filter_map(|n| step_of(&n).map(|s| (s, n))).collect();
    names.sort_unstable_by(|a, b| b.cmp(a));
    let mut skipped = Vec::new();
    for (_, name) in names {
        let (state, trainer) = match read_checked(&mut c.store, &name).await {
            Ok(files) => files,
            Err(e) => {
                skipped.push((name, e.to_string()));
                continue;
            }
        };
        let t: TrainerFile = serde_json::from_slice(&trainer)
            .map_err(|e| Error::Input(format!("checkpoint {name}: {TRAINER_STATE} does not parse: {e}")))?;
        check_same_run(&name, &t.run, &c.run)?;
        let st = safetensors::SafeTensors::deserialize(&state)
            .map_err(|e| Error::Input(format!("checkpoint {name}: {STATE}: {e}")))?;
        let mut trainee = TraineeState { tensors: Vec::new(), counters: t.counters };
        let mut best = BTreeMap::new();
        for (n, view) in st.tensors() {
            if view.dtype() != safetensors::Dtype::F32 {
                return Err(Error::Input(format!("checkpoint {name}: {n} is not f32")));
            }
            let values: Vec<f32> = bytemuck::pod_collect_to_vec(view.data());
            match n.strip_prefix("best.").and_then(|i| i.parse::<usize>().ok()) {
                Some(i) => {
                    best.insert(i, values);
                }
                None => trainee.tensors.push((n, view.shape().to_vec(), values)),
            }
        }
        trainee.tensors.sort_by(|a, b| a.0.cmp(&b.0));
        let best = t.position.best.map(|_| best.into_values().collect());
        return Ok(Some(Restored { name, position: t.position, trainee, best, skipped }));
    }
    match skipped.first() {
        None => Ok(None),
        Some(_) => Err(Error::Input(format!(
            "no intact checkpoint to resume from: {}",
            skipped.iter().map(|(_, why)| why.as_str()).collect::<Vec<_>>().join("; ")
        ))),
    }
}

/// A resumed run must be the run that made the checkpoint: the same options, data and model. Names the first
/// difference.
fn check_same_run(name: &str, saved: &serde_json::Value, now: &serde_json::Value) -> Result<()> {
    if saved == now {
        return Ok(());
    }
    let (empty, mut keys) = (serde_json::Map::new(), std::collections::BTreeSet::new());
    let (a, b) = (saved.as_object().unwrap_or(&empty), now.as_object().unwrap_or(&empty));
    keys.extend(a.keys().chain(b.keys()));
    let diff: Vec<String> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k}: {} in the checkpoint, {} now", show(a.get(k)), show(b.get(k))))
        .collect();
    Err(Error::Input(format!(
        "checkpoint {name} was made by another run ({}); resume with the first run's options, data and model, or \
         start afresh in another checkpoint folder",
        diff.join("; ")
    )))
}

fn show(v: Option<&serde_json::Value>) -> String {
    match v {
        None => "absent".into(),
        Some(serde_json::Value::Object(o)) => {
            let flat: Vec<String> = o.iter().map(|(k, v)| format!("{k} {v}")).collect();
            format!("{{{}}}", flat.join(", "))
        }
        Some(v) => v.to_string(),
    }
}

/// A folder of checkpoints, each a sub-folder written under a temporary name and renamed when complete (files
/// synced before the rename, the folder after it).
#[cfg(not(target_arch = "wasm32"))]
pub struct DirStore {
    dir: std::path::PathBuf,
}

#[cfg(not(target_arch = "wasm32"))]
impl DirStore {
    /// Opens (creating) `dir`, removing what a crash left half-written there.
    pub fn open(dir: impl Into<std::path::PathBuf>) -> Result<DirStore> {
        let dir = dir.into();
        let io = |e: std::io::Error| Error::Input(format!("checkpoint folder `{}`: {e}", dir.display()));
        std::fs::create_dir_all(&dir).map_err(io)?;
        for entry in std::fs::read_dir(&dir).map_err(io)?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(".tmp-") {
                std::fs::remove_dir_all(entry.path()).map_err(io)?;
            }
        }
        Ok(DirStore { dir })
    }

    fn io(&self, what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
        let what = what.to_string();
        move |e| Error::Input(format!("checkpoint folder `{}`: {what}: {e}", self.dir.display()))
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Store for DirStore {
    async fn list(&mut self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(self.io("listing"))?.flatten() {
            let n = entry.file_name().to_string_lossy().into_owned();
            if n.starts_with(PREFIX) && entry.path().is_dir() {
                out.push(n);
            }
        }
        Ok(out)
    }

    async fn read(&mut self, name: &str, file: &str) -> Result<Vec<u8>> {
        std::fs::read(self.dir.join(name).join(file)).map_err(self.io(&format!("{name}/{file}")))
    }

    async fn write(&mut self, name: &str, files: &[(&str, &[u8])]) -> Result<()> {
        use std::io::Write;
        let tmp = self.dir.join(format!(".tmp-{name}"));
        let io = self.io(name);
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(&io)?;
        }
        std::fs::create_dir(&tmp).map_err(&io)?;
        for (file, bytes) in files {
            let mut f = std::fs::File::create(tmp.join(file)).map_err(&io)?;
            f.write_all(bytes).map_err(&io)?;
            f.sync_all().map_err(&io)?;
        }
        let dest = self.dir.join(name);
        if dest.exists() {
            std::fs::remove_dir_all(&dest).map_err(&io)?;
        }
        std::fs::rename(&tmp, &dest).map_err(&io)?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(&io)
    }

    async fn remove(&mut self, name: &str) -> Result<()> {
        std::fs::remove_dir_all(self.dir.join(name)).map_err(self.io(&format!("removing {name}")))
    }
}
