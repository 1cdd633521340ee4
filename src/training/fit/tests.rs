//! The training loop's own tests, on a scripted trainee.

use super::*;
use crate::backend::cpu::CpuBackend;
use super::checkpoint::{Checkpoints, Store, TraineeState, STATE as STATE_FILE};
use super::run::split;
use crate::training::metrics::PretrainStep;
use crate::training::optim::StepOptions;
use crate::training::rng::SplitMix64;
use crate::{Error, Result};
use std::cell::Cell;

/// A trainee whose one "parameter" is the number of steps taken and whose validation loss after each epoch is
/// scripted: what the loop does with them (schedule, batches, early stopping) is what these tests check.
struct Scripted {
    steps: usize,
    val_losses: Vec<f32>,
    evaluations: Cell<usize>,
    lrs: Vec<f32>,
    batches: Vec<usize>,
    /// Every row trained on, in order: what a checkpoint must carry exactly for a resume to continue the run.
    seen: Vec<usize>,
}

impl Trainee<CpuBackend> for Scripted {
    async fn accumulate(&mut self, _: &CpuBackend, which: &[usize]) -> Result<()> {
        self.batches.push(which.len());
        self.seen.extend_from_slice(which);
        Ok(())
    }
    async fn apply(&mut self, _: &CpuBackend, opt: &StepOptions) -> Result<StepReport> {
        self.steps += 1;
        self.lrs.push(opt.learning_rate);
        // Pre-training's metrics on odd steps (NSP on every other one), to be carried through checkpoints too.
        let pretrain = (self.steps % 2 == 1).then(|| PretrainStep { mlm_loss: 2.0, mlm_accuracy: 1.0 / self.steps as f32,
            nsp_loss: (self.steps % 4 == 1).then_some(0.7), nsp_accuracy: (self.steps % 4 == 1).then_some(0.1) });
        Ok(StepReport { loss: 1.0, grad_norm: 0.0, pretrain })
    }
    async fn evaluate(&self, _: &CpuBackend, _: &[usize]) -> Result<Evaluation> {
        let epoch = self.evaluations.replace(self.evaluations.get() + 1);
        Ok(Evaluation { loss: self.val_losses[epoch], ..Default::default() })
    }
    async fn save(&self, _: &CpuBackend) -> Result<Vec<Vec<f32>>> {
        Ok(vec![vec![self.steps as f32]])
    }
    fn restore(&mut self, _: &CpuBackend, saved: &[Vec<f32>]) -> Result<()> {
        self.steps = saved[0][0] as usize;
        Ok(())
    }
    async fn state(&self, _: &CpuBackend) -> Result<TraineeState> {
        let seen = self.seen.iter().map(|&i| i as f32).collect::<Vec<_>>();
        Ok(TraineeState {
            tensors: vec![("seen".into(), vec![seen.len()], seen)],
            counters: [("steps".to_string(), self.steps as u64), ("evaluations".to_string(), self.evaluations.get() as u64)].into(),
        })
    }
    fn set_state(&mut self, _: &CpuBackend, s: TraineeState) -> Result<()> {
        self.seen = s.tensors[0].2.iter().map(|&v| v as usize).collect();
        self.steps = s.counters["steps"] as usize;
        self.evaluations.set(s.counters["evaluations"] as usize);
        Ok(())
    }
}

/// Checkpoints in memory.
#[derive(Default)]
struct MemStore(std::collections::BTreeMap<String, Vec<(String, Vec<u8>)>>);

impl Store for MemStore {
    async fn list(&mut self) -> Result<Vec<String>> {
        Ok(self.0.keys().cloned().collect())
    }
    async fn read(&mut self, name: &str, file: &str) -> Result<Vec<u8>> {
        let files = self.0.get(name).ok_or_else(|| Error::Input(format!("no {name}")))?;
        files.iter().find(|f| f.0 == file).map(|f| f.1.clone()).ok_or_else(|| Error::Input(format!("no {file}")))
    }
    async fn write(&mut self, name: &str, files: &[(&str, &[u8])]) -> Result<()> {
        self.0.insert(name.into(), files.iter().map(|(n, b)| (n.to_string(), b.to_vec())).collect());
        Ok(())
    }
    async fn remove(&mut self, name: &str) -> Result<()> {
        self.0.remove(name);
        Ok(())
    }
}

fn scripted(val_losses: &[f32]) -> Scripted {
    Scripted { steps: 0, val_losses: val_losses.to_vec(), evaluations: Cell::new(0), lrs: Vec::new(), batches: Vec::new(),
        seen: Vec::new() }
}

/// Runs with checkpoints; `stop_after` steps, the hooks fail (a process killed between two steps: an error that
/// is not a stop, so no checkpoint is taken for it).
fn run_checkpointed(opts: &FitOptions, val_losses: &[f32], c: &mut Checkpoints<MemStore>, stop_after: Option<usize>)
    -> (Scripted, Result<FitReport>) {
    run_until(opts, val_losses, c, stop_after, || Error::Input("killed".into()))
}

fn run_until(opts: &FitOptions, val_losses: &[f32], c: &mut Checkpoints<MemStore>, stop_after: Option<usize>,
    error: impl Fn() -> Error) -> (Scripted, Result<FitReport>) {
    let mut t = scripted(val_losses);
    let mut steps = 0;
    let mut hooks = |p: Progress<'_>| -> Result<()> {
        if let Progress::Step(_) = p {
            steps += 1;
            if Some(steps) == stop_after {
                return Err(error());
            }
        }
        Ok(())
    };
    struct H<F>(F);
    impl<F: FnMut(Progress<'_>) -> Result<()>> Hooks for H<F> {
        fn progress(&mut self, p: Progress<'_>) -> Result<()> {
            (self.0)(p)
        }
    }
    let r = pollster::block_on(fit_loop(&CpuBackend::new(), &mut t, 40, None, opts, &mut H(&mut hooks), Some(c)));
    (t, r)
}

#[test]
fn a_resumed_run_continues_exactly_where_it_stopped() {
    // 40 rows, 4 validate, 36 train in steps of 4: 9 steps an epoch, 27 in all; early stopping on.
    let opts = FitOptions { epochs: 3, batch_size: 4, patience: Some(5), ..FitOptions::default() };
    let losses = [0.5, 0.4, 0.6];
    let mut whole = Checkpoints::new(MemStore::default());
    whole.every = 4;
    let (want, r) = run_checkpointed(&opts, &losses, &mut whole, None);
    let want_report = r.unwrap();
    // Killed after each possible step (mid-epoch, just after a checkpoint, at an epoch's end), then resumed.
    for kill in 1..27 {
        let mut c = Checkpoints::new(MemStore::default());
        c.every = 4;
        let (_, r) = run_checkpointed(&opts, &losses, &mut c, Some(kill));
        assert!(r.is_err(), "kill at {kill}");
        c.resume = true;
        let (got, r) = run_checkpointed(&opts, &losses, &mut c, None);
        let report = r.unwrap();
        assert_eq!(got.seen, want.seen, "kill at {kill}: the rows trained on");
        assert_eq!(got.steps, want.steps, "kill at {kill}");
        assert_eq!(report, want_report, "kill at {kill}");
        assert_eq!(got.lrs[..], want.lrs[want.lrs.len() - got.lrs.len()..], "kill at {kill}: the schedule");
        assert!(c.store.0.len() <= 2, "keep 2: {:?}", c.store.0.keys());
    }
}

#[test]
fn a_stop_asked_for_saves_a_checkpoint_there() {
    let opts = FitOptions { epochs: 3, batch_size: 4, ..FitOptions::default() };
    let mut whole = Checkpoints::new(MemStore::default());
    whole.every = 100;
    let (want, r) = run_checkpointed(&opts, &[1.0; 3], &mut whole, None);
    let want_report = r.unwrap();
    for stop in [1, 5, 9, 13] {
        let mut c = Checkpoints::new(MemStore::default());
        c.every = 100; // only epoch ends, and the stop
        let e = run_until(&opts, &[1.0; 3], &mut c, Some(stop), || Error::Stopped("asked".into())).1.unwrap_err();
        let name = format!("checkpoint-{stop}");
        assert!(e.to_string().contains(&format!("saved as {name} after step {stop}")), "{e}");
        assert!(c.store.0.contains_key(&name), "{:?}", c.store.0.keys());
        c.resume = true;
        let (got, r) = run_checkpointed(&opts, &[1.0; 3], &mut c, None);
        assert_eq!(r.unwrap(), want_report, "stopped at {stop}");
        assert_eq!(got.seen, want.seen, "stopped at {stop}");
    }
}

/// A stop asked while the hooks hear of an epoch's checkpoint (Ctrl-C during the epoch's last step, noticed when
/// the checkpoint is reported) says where the run stopped, as a stop between steps does, and resumes from there.
#[test]
fn a_stop_heard_with_an_epochs_checkpoint_names_it() {
    let opts = FitOptions { epochs: 3, batch_size: 4, ..FitOptions::default() };
    let mut whole = Checkpoints::new(MemStore::default());
    whole.every = 100;
    let (want, r) = run_checkpointed(&opts, &[1.0; 3], &mut whole, None);
    let want_report = r.unwrap();
    let mut c = Checkpoints::new(MemStore::default());
    c.every = 100; // epoch ends only: 9 steps an epoch
    let mut t = scripted(&[1.0; 3]);
    struct StopAtCheckpoint;
    impl Hooks for StopAtCheckpoint {
        fn progress(&mut self, p: Progress<'_>) -> Result<()> {
            match p {
                Progress::Checkpoint(_) => Err(Error::Stopped("asked".into())),
                _ => Ok(()),
            }
        }
    }
    let r = pollster::block_on(fit_loop(&CpuBackend::new(), &mut t, 40, None, &opts, &mut StopAtCheckpoint, Some(&mut c)));
    let e = r.unwrap_err().to_string();
    assert!(e.contains("asked; saved as checkpoint-9 after step 9: resume"), "{e}");
    c.resume = true;
    let (got, r) = run_checkpointed(&opts, &[1.0; 3], &mut c, None);
    assert_eq!(r.unwrap(), want_report);
    assert_eq!(got.seen, want.seen);
}

#[test]
fn a_damaged_checkpoint_is_never_resumed_from() {
    let opts = FitOptions { epochs: 2, batch_size: 4, ..FitOptions::default() };
    let mut c = Checkpoints::new(MemStore::default());
    c.every = 3;
    c.keep = 3;
    let _ = run_checkpointed(&opts, &[1.0; 2], &mut c, Some(8)).1.unwrap_err();
    let names: Vec<String> = c.store.0.keys().cloned().collect();
    assert_eq!(names, ["checkpoint-3", "checkpoint-6"], "{names:?}");
    // Alter one byte of the newest's state: resume falls back to checkpoint-3, saying why.
    let newest = c.store.0.get_mut("checkpoint-6").unwrap();
    newest[0].1[100] ^= 1;
    c.resume = true;
    let mut events = Vec::new();
    let mut t = scripted(&[1.0; 2]);
    let r = pollster::block_on(fit_loop(&CpuBackend::new(), &mut t, 40, None, &opts, &mut |p: Progress<'_>| {
        if let Progress::Checkpoint(e) = p {
            events.push(e.clone());
        }
    }, Some(&mut c)));
    r.unwrap();
    assert_eq!(events[0].checkpoint, "skipped");
    assert!(events[0].reason.as_deref().unwrap().contains("SHA-256"), "{events:?}");
    assert_eq!((events[1].checkpoint, events[1].step), ("resumed", 3));
    // Every checkpoint damaged (a missing file): a clear error, no training.
    let mut c = Checkpoints::new(MemStore::default());
    c.every = 3;
    let _ = run_checkpointed(&opts, &[1.0; 2], &mut c, Some(4)).1.unwrap_err();
    for files in c.store.0.values_mut() {
        files.retain(|f| f.0 != STATE_FILE);
    }
    c.resume = true;
    let e = run_checkpointed(&opts, &[1.0; 2], &mut c, None).1.unwrap_err().to_string();
    assert!(e.contains("no intact checkpoint") && e.contains("state.safetensors"), "{e}");
    // Another run's checkpoint (other options) is refused, naming the difference.
    let mut c = Checkpoints::new(MemStore::default());
    c.every = 3;
    c.run = serde_json::json!({ "learning_rate": 1e-4, "data": "x" });
    let _ = run_checkpointed(&opts, &[1.0; 2], &mut c, Some(4)).1.unwrap_err();
    c.run = serde_json::json!({ "learning_rate": 5e-5, "data": "x" });
    c.resume = true;
    let e = run_checkpointed(&opts, &[1.0; 2], &mut c, None).1.unwrap_err().to_string();
    assert!(e.contains("learning_rate: 0.0001 in the checkpoint, 0.00005 now"), "{e}");
}

fn run(opts: &FitOptions, val_losses: &[f32], rows: usize) -> (Scripted, Result<FitReport>) {
    let mut t = scripted(val_losses);
    let r = pollster::block_on(fit_loop(&CpuBackend::new(), &mut t, rows, None, opts, &mut |_: Progress<'_>| {},
        None::<&mut Checkpoints<MemStore>>));
    (t, r)
}

#[test]
fn schedules_warm_up_then_decay_or_stay() {
    // 40 rows, 10 validate: 30 train in micro-batches of 4, 2 to a step → 4 steps an epoch (the last of 6 rows).
    let base = FitOptions { epochs: 2, learning_rate: 1.0, batch_size: 4, accumulate: 2, warmup: 0.25,
        validation_split: 0.25, ..FitOptions::default() };
    let (t, r) = run(&base, &[1.0; 2], 40);
    let r = r.unwrap();
    assert_eq!(t.batches, [4, 4, 4, 4, 4, 4, 4, 2].repeat(2));
    // 8 steps, 2 warm: 0, 1/2, then (8 − s)/6 for s = 2..7.
    let want = [0.0, 0.5, 1.0, 5.0 / 6.0, 4.0 / 6.0, 0.5, 2.0 / 6.0, 1.0 / 6.0];
    assert!(t.lrs.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6), "{:?}", t.lrs);
    assert_eq!((r.steps.len(), r.epochs.len(), r.best_epoch), (8, 2, 2));
    let (t, _) = run(&FitOptions { schedule: Schedule::Constant, ..base }, &[1.0; 2], 40);
    assert_eq!(t.lrs, [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    // max_steps 6: epochs as needed (2, the second cut short after 2 steps), the schedule ending at step 6 (warm-up
    // ⌈0.25·6⌉ = 2 steps).
    let (t, r) = run(&FitOptions { max_steps: Some(6), epochs: 1, ..base }, &[1.0; 2], 40);
    let want = [0.0, 0.5, 1.0, 0.75, 0.5, 0.25];
    assert!(t.lrs.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6) && t.lrs.len() == 6, "{:?}", t.lrs);
    assert_eq!(r.unwrap().epochs.len(), 2);
}

#[test]
fn early_stopping_ends_with_the_best_epochs_parameters() {
    let opts = FitOptions { epochs: 10, batch_size: 10, patience: Some(2), ..FitOptions::default() };
    // 20 rows, 2 validate, 18 train: 2 steps an epoch. Best at epoch 2; epochs 3 and 4 are no better → stop.
    let (t, r) = run(&opts, &[0.9, 0.5, 0.6, 0.5, 0.1], 20);
    let r = r.unwrap();
    assert_eq!((r.epochs.len(), r.best_epoch), (4, 2));
    assert_eq!(t.steps, 4, "the parameters after epoch 2 (4 steps) are restored");
    // Without patience every epoch runs and the last is kept.
    let (t, r) = run(&FitOptions { epochs: 5, patience: None, ..opts }, &[0.9, 0.5, 0.6, 0.5, 0.1], 20);
    assert_eq!((r.unwrap().best_epoch, t.steps), (5, 10));
    // Patience with nothing to validate on is refused, not ignored.
    let e = run(&FitOptions { validation_split: 0.0, ..opts }, &[0.0; 10], 20).1.unwrap_err();
    assert!(e.to_string().contains("validation split"), "{e}");
}

#[test]
fn an_examples_rows_stay_on_one_side_of_the_split() {
    // 10 examples; example 3 has five rows (a long QA context), the others one each.
    let groups: Vec<usize> = [0, 1, 2, 3, 3, 3, 3, 3, 4, 5, 6, 7, 8, 9].to_vec();
    for seed in 0..20 {
        let opts = FitOptions { validation_split: 0.3, seed, ..FitOptions::default() };
        let (val, train) = split(groups.len(), Some(&groups), &opts, &mut SplitMix64::new(seed)).unwrap();
        assert_eq!(val.len() + train.len(), groups.len());
        let held: std::collections::HashSet<usize> = val.iter().map(|&i| groups[i]).collect();
        assert_eq!(held.len(), 3, "⌈0.3 · 10⌉ examples validate (seed {seed})");
        assert!(train.iter().all(|&i| !held.contains(&groups[i])), "seed {seed}: an example on both sides");
    }
    let (val, train) = split(4, None, &FitOptions { validation_split: 0.5, ..FitOptions::default() },
        &mut SplitMix64::new(0)).unwrap();
    assert_eq!((val.len(), train.len()), (2, 2));
    assert!(split(3, Some(&[0, 0]), &FitOptions::default(), &mut SplitMix64::new(0)).is_err());
}

#[test]
fn hooks_see_each_micro_batch_before_it_is_trained() {
    struct Seen(Vec<usize>, usize);
    impl Hooks for Seen {
        fn progress(&mut self, _: Progress<'_>) -> Result<()> {
            Ok(())
        }
        fn batch(&mut self, _epoch: usize, rows: &[usize]) -> Result<()> {
            self.0.extend_from_slice(rows);
            self.1 += 1;
            Ok(())
        }
    }
    let opts = FitOptions { epochs: 2, batch_size: 4, accumulate: 2, validation_split: 0.25, ..FitOptions::default() };
    let (mut t, mut seen) = (scripted(&[1.0; 2]), Seen(Vec::new(), 0));
    let r = pollster::block_on(fit_loop(&CpuBackend::new(), &mut t, 40, None, &opts, &mut seen,
        None::<&mut Checkpoints<MemStore>>));
    r.unwrap();
    // The rows accumulated, in order, one call per micro-batch (8 an epoch: 7 of 4 rows and one of 2).
    assert_eq!((seen.0.len(), seen.1), (60, 16));
    assert_eq!(seen.0, t.seen);
}
