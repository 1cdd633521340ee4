//! Training that survives: `bertgpu fine-tune --checkpoint-dir` killed with SIGKILL at many points (during steps and
//! while a checkpoint is being written), resumed with `--resume` until it finishes, ends with the same model, bit for
//! bit, as the run never interrupted (CPU backend, dropout on, so the dropout masks' counter is part of the state);
//! a damaged newest checkpoint is skipped for the one before it, and a resume with other options is refused.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

mod common;


fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("bertgpu-checkpoint-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

use common::cats_and_cars as data;

/// 24 rows, 4 validate, 20 train in batches of 4: 5 steps an epoch, 60 in all; a checkpoint every 2 steps and at
/// each epoch's end, so that most kills land next to one being written.
fn args(data: &Path, out: &Path, ckpt: &Path, extra: &[&str]) -> Vec<String> {
    let model = root().join("tests/models/tiny-classifier");
    let mut a: Vec<String> = ["fine-tune", "--task", "classify", "--model", model.to_str().unwrap(), "--data",
        data.to_str().unwrap(), "--out", out.to_str().unwrap(), "--lr", "2e-3", "--batch-size", "4",
        "--validation-split", "0.2", "--seed", "7", "--checkpoint-dir", ckpt.to_str().unwrap()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    for (flag, default) in [("--epochs", "12"), ("--device", "cpu"), ("--checkpoint-every", "2")] {
        if !extra.contains(&flag) {
            a.extend([flag.to_string(), default.to_string()]);
        }
    }
    a
}

/// Runs to the end; returns (exit code, stdout, stderr).
fn run(args: &[String]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_bertgpu")).args(args).env("XDG_RUNTIME_DIR", "/tmp").output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
}

/// Starts the run and SIGKILLs it once it has printed `lines` progress lines (steps, epochs, checkpoints), the kill
/// landing wherever the process then is. Returns whether it was killed (false: it finished first).
fn run_and_kill(args: &[String], lines: usize) -> bool {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bertgpu"))
        .args(args)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = 0;
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        if line.unwrap().starts_with('{') {
            seen += 1;
            if seen == lines {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                return true;
            }
        }
    }
    child.wait().unwrap();
    false
}

/// The step a resumed run went on from (its "resumed" line), checked to be past the start, and its step lines: one for
/// each step left of `total`, the first the one after the checkpoint's. A `--resume` that silently started over, or
/// redid steps, fails here even when it ends with the same model.
fn resumed_steps(stderr: &str, total: u64) -> u64 {
    let lines: Vec<Value> = stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let resumed: Vec<u64> = lines
        .iter()
        .filter(|v| v["checkpoint"] == "resumed")
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert_eq!(resumed.len(), 1, "one resume: {stderr}");
    let from = resumed[0];
    assert!(from > 0 && from < total, "resumed at step {from} of {total}: {stderr}");
    let steps: Vec<u64> = lines
        .iter()
        .filter(|v| v.get("loss").is_some() && v.get("total_steps").is_some())
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps.len() as u64, total - from, "only the steps after {from}: {stderr}");
    assert_eq!(steps, (from + 1..=total).collect::<Vec<_>>(), "{stderr}");
    from
}

fn report(stdout: &str) -> Value {
    let mut v: Value = serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    v.as_object_mut().unwrap().remove("out");
    v
}

#[test]
fn killed_runs_resume_to_the_uninterrupted_model_bit_for_bit() {
    let dir = tmp("kill");
    let data = data(&dir);
    let (out, ckpt) = (dir.join("whole"), dir.join("whole-ckpt"));
    let (code, stdout, stderr) = run(&args(&data, &out, &ckpt, &[]));
    assert_eq!(code, Some(0), "{stderr}");
    let want_model = std::fs::read(out.join("model.safetensors")).unwrap();
    let want_report = report(&stdout);
    assert_eq!(want_report["epochs"].as_array().unwrap().len(), 12);
    // Checkpoints every 2 steps and at epoch ends, keep 2 (the default).
    let kept: Vec<String> = std::fs::read_dir(&ckpt).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(kept.len(), 2, "{kept:?}");

    // Killed again and again at different points, each time resumed, until it finishes.
    let (out, ckpt) = (dir.join("killed"), dir.join("killed-ckpt"));
    let resume = args(&data, &out, &ckpt, &["--resume"]);
    let mut kills = 0;
    for lines in [3, 7, 1, 12, 5, 20, 9, 2, 16] {
        kills += run_and_kill(&resume, lines) as usize;
    }
    assert!(kills >= 5, "only {kills} kills landed before the run finished");
    let (code, stdout, stderr) = run(&resume);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains(r#""checkpoint":"resumed""#), "the last run resumed: {stderr}");
    resumed_steps(&stderr, 60);
    assert_eq!(report(&stdout), want_report, "the report (every epoch's metrics)");
    let got = std::fs::read(out.join("model.safetensors")).unwrap();
    assert!(got == want_model, "the resumed run's model differs from the uninterrupted run's");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_newest_checkpoint_falls_back_and_other_options_are_refused() {
    let dir = tmp("damage");
    let data = data(&dir);
    let (out, ckpt) = (dir.join("whole"), dir.join("whole-ckpt"));
    let (code, _, stderr) = run(&args(&data, &out, &ckpt, &[]));
    assert_eq!(code, Some(0), "{stderr}");
    let want_model = std::fs::read(out.join("model.safetensors")).unwrap();

    // Stop part way (after 25 progress lines), keeping 3 checkpoints.
    let (out, ckpt) = (dir.join("damaged"), dir.join("damaged-ckpt"));
    assert!(run_and_kill(&args(&data, &out, &ckpt, &["--keep", "3"]), 25));
    let mut names: Vec<(usize, String)> = std::fs::read_dir(&ckpt)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|n| n.strip_prefix("checkpoint-").and_then(|s| s.parse().ok()).map(|s| (s, n)))
        .collect();
    names.sort();
    assert!(names.len() >= 2, "{names:?}");
    // Truncate the newest's state: it is skipped, by name, and the run still ends with the uninterrupted model.
    let newest = ckpt.join(&names.last().unwrap().1).join("state.safetensors");
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
    // Resuming with another weight decay is refused, naming it, and trains nothing.
    let (code, _, stderr) = run(&args(&data, &out, &ckpt, &["--keep", "3", "--resume", "--weight-decay", "0.02"]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("weight_decay: 0.01 in the checkpoint, 0.02 now"), "{stderr}");
    assert!(!out.exists(), "a refused resume wrote a model");
    let (code, _, stderr) = run(&args(&data, &out, &ckpt, &["--keep", "3", "--resume"]));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains(r#""checkpoint":"skipped""#) && stderr.contains(&names.last().unwrap().1), "{stderr}");
    let from = resumed_steps(&stderr, 60);
    assert_eq!(from, names[names.len() - 2].0 as u64, "went on from the checkpoint before the damaged one");
    assert!(std::fs::read(out.join("model.safetensors")).unwrap() == want_model, "fell back, then trained to the same model");

    // Every checkpoint damaged: a clear error naming the file, and no model.
    let (out, ckpt) = (dir.join("all-damaged"), dir.join("all-damaged-ckpt"));
    assert!(run_and_kill(&args(&data, &out, &ckpt, &[]), 15));
    for e in std::fs::read_dir(&ckpt).unwrap() {
        let _ = std::fs::remove_file(e.unwrap().path().join("trainer_state.json"));
    }
    let (code, _, stderr) = run(&args(&data, &out, &ckpt, &["--resume"]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no intact checkpoint") && stderr.contains("trainer_state.json"), "{stderr}");
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The GPU backend resumes to the uninterrupted GPU run's model too: its kernels sum in a fixed order (no float
/// atomics), so a run is deterministic on one adapter and the comparison is exact there as well.
#[test]
fn killed_runs_resume_on_the_gpu() {
    if common::gpu().is_none() {
        return;
    }
    let dir = tmp("gpu");
    let data = data(&dir);
    let gpu = ["--device", "gpu", "--epochs", "3"];
    let (out, ckpt) = (dir.join("whole"), dir.join("whole-ckpt"));
    let (code, stdout, stderr) = run(&args(&data, &out, &ckpt, &gpu));
    assert_eq!(code, Some(0), "{stderr}");
    let want_model = std::fs::read(out.join("model.safetensors")).unwrap();
    let (out, ckpt) = (dir.join("killed"), dir.join("killed-ckpt"));
    let resume = args(&data, &out, &ckpt, &[&gpu[..], &["--resume"]].concat());
    assert!(run_and_kill(&resume, 9), "the run finished before the kill");
    let (code, stdout2, stderr) = run(&resume);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains(r#""checkpoint":"resumed""#), "{stderr}");
    resumed_steps(&stderr, 15); // 5 steps an epoch, 3 epochs
    assert_eq!(report(&stdout2), report(&stdout));
    assert!(std::fs::read(out.join("model.safetensors")).unwrap() == want_model, "the GPU's resumed model differs");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C (SIGINT) is a stop asked for: the run stops after the step in progress and saves a checkpoint there,
/// whatever the interval, and --resume goes on from it to the uninterrupted run's model.
#[test]
fn ctrl_c_saves_a_checkpoint_where_it_stops() {
    let dir = tmp("sigint");
    let data = data(&dir);
    let (out, ckpt) = (dir.join("whole"), dir.join("whole-ckpt"));
    // An interval longer than the run: the only checkpoints are the epochs' ends and the one Ctrl-C asks for.
    let (code, stdout, stderr) = run(&args(&data, &out, &ckpt, &["--checkpoint-every", "1000"]));
    assert_eq!(code, Some(0), "{stderr}");
    let want_model = std::fs::read(out.join("model.safetensors")).unwrap();
    let (out, ckpt) = (dir.join("stopped"), dir.join("stopped-ckpt"));
    let a = args(&data, &out, &ckpt, &["--checkpoint-every", "1000"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_bertgpu"))
        .args(&a)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .env("BERTGPU_HOLD_AFTER_STEP", "7") // waits for the signal after step 7: the stop cannot fall later
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    let mut steps = 0;
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.contains(r#""step":"#) && !line.contains("checkpoint") {
            steps += 1;
            if steps == 7 {
                let ok = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
                assert!(ok.success());
            }
        }
        err.push_str(&line);
        err.push('\n');
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("interrupted (Ctrl-C); saved as checkpoint-"), "{err}");
    assert!(!out.exists(), "a stopped run writes no model");
    let (code, stdout2, stderr) = run(&args(&data, &out, &ckpt, &["--checkpoint-every", "1000", "--resume"]));
    assert_eq!(code, Some(0), "{stderr}");
    // Stopped after step 7, where the run waited for the signal.
    let from = resumed_steps(&stderr, 60);
    assert_eq!(from, 7, "resumed at another step");
    assert_eq!(report(&stdout2), report(&stdout));
    assert!(std::fs::read(out.join("model.safetensors")).unwrap() == want_model, "resumed after Ctrl-C: another model");
    let _ = std::fs::remove_dir_all(&dir);
}
