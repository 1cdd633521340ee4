//! Checkpoints of BERT's relatives that bertgpu does not run (Megatron-BERT, XLM-RoBERTa-XL, DeBERTa, ...) carry
//! BERT's config fields and often BERT's tensor names: run as BERT they would give wrong vectors without a word.
//! Every command refuses them at load, naming the architecture, with the CLI's model-load exit status 2. (RoBERTa,
//! XLM-R, ELECTRA and ALBERT, once refused here too, run as themselves: tests/roberta.rs, tests/electra_albert.rs.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A copy of the real splade-tiny folder whose config.json says it is `model_type` (and `architectures`).
fn relabelled(model_type: &str, arch: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/splade-tiny");
    assert!(src.join("config.json").exists(), "{} is missing: run scripts/fetch-models.sh", src.display());
    let dir = std::env::temp_dir().join(format!("bertgpu-arch-{model_type}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap();
        if f.file_type().unwrap().is_file() {
            std::fs::copy(f.path(), dir.join(f.file_name())).unwrap();
        }
    }
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg["model_type"] = model_type.into();
    cfg["architectures"] = serde_json::json!([arch]);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    dir
}

#[test]
fn the_cli_refuses_other_architectures_by_name() {
    for (kind, arch) in
        [("megatron-bert", "MegatronBertForMaskedLM"), ("deberta", "DebertaForMaskedLM"), ("xlm-roberta-xl", "XLMRobertaXLForMaskedLM")]
    {
        let dir = relabelled(kind, arch);
        for (cmd, extra) in [("embed", &["--device", "cpu"][..]), ("fill-mask", &[][..])] {
            let mut child = Command::new(env!("CARGO_BIN_EXE_bertgpu"))
                .args([cmd, "--model", dir.to_str().unwrap()])
                .args(extra)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let _ = child.stdin.take().unwrap().write_all(b"The capital of France is [MASK].\n");
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{kind} {cmd}: {err}");
            assert!(out.stdout.is_empty(), "{kind} {cmd}: printed results for a model it cannot run");
            assert!(err.contains(&format!("model_type `{kind}` is not supported")), "{kind} {cmd}: {err}");
        }
        // The library's loaders (and so the browser's, which read config.json through the same parser).
        let e = bertgpu::config::BertConfig::from_file(dir.join("config.json")).unwrap_err().to_string();
        assert!(e.contains(&format!("model_type `{kind}`")), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
