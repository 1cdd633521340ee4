//! The crate's layout rules (docs/ARCHITECTURE.md), checked on the source text:
//!
//! 1. A top-level module imports only modules of a lower layer (no import circles, no reaching up):
//!    `error, dtype, activation` (and the unit tests' `testutil`) ← `sentence` ← `config, tokenizer` ← `weights` ← `backend, loader` ← `model` ← `heads` ←
//!    `training` ← `tasks` ← `engine` ← `wasm, fuzzing` (and `src/bin/`, which sees only the public API).
//! 2. No file in src/ is over [`MAX_LINES`] lines.
//!
//! A new top-level module must be given a layer here (and a line in docs/ARCHITECTURE.md), or this test fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Top-level modules, lowest layer first. A module may use any module of a lower layer, none of its own layer
/// (other than itself) or above.
const LAYERS: &[&[&str]] = &[
    &["error", "dtype", "activation", "testutil"],
    &["sentence"],
    &["config", "tokenizer"],
    &["weights"],
    &["backend", "loader"],
    &["model"],
    &["heads"],
    &["training"],
    &["tasks"],
    &["engine"],
    &["wasm", "fuzzing"],
];

/// Past this a file holds more than one job: split it by job (docs/ARCHITECTURE.md).
const MAX_LINES: usize = 700;

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The top-level modules a file's code names through `crate::` / `$crate::` paths, `use crate::{a, b::c}` groups
/// included. Comments are skipped (`//` to the end of the line; doc comments are comments).
fn crate_modules(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in source.lines() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            // `crate::` as a path start, not the end of another identifier (e.g. `mycrate::`).
            let before = rest[..i].chars().next_back();
            rest = &rest[i + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a::x, b, c::{y, z}}`: the first segment of each top-level item of the group.
                let mut depth = 0;
                let mut items = vec![String::new()];
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => items.push(String::new()),
                        c => items.last_mut().unwrap().push(c),
                    }
                }
                for item in items {
                    let name: String =
                        item.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() {
                        out.insert(name);
                    }
                }
            } else {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        }
    }
    out
}

/// Names that `crate::` may reach that are items of lib.rs, not modules (re-exports of the error type, macros).
const ROOT_ITEMS: &[&str] = &["Error", "Result", "with_model"];

#[test]
fn the_parser_sees_what_a_module_imports() {
    // The checks below are only as good as this parser: it must find every form the crate uses.
    let src = "use crate::backend::Backend;\n\
               use crate::{config::BertConfig, heads::{self, Pooling}, Error};\n\
               let x = crate::weights::Weights::load(); // crate::ignored in a comment\n\
               $crate::engine::Engine::Cpu(m) => m,\n\
               let y = mycrate::not_ours;\n";
    let found: Vec<String> = crate_modules(src).into_iter().collect();
    assert_eq!(found, ["Error", "backend", "config", "engine", "heads", "weights"]);
}

#[test]
fn no_module_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut checked = 0;
    let mut problems = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_str().unwrap();
        // lib.rs is the root that declares every module; src/bin/ is another crate (public API only).
        if first == "lib.rs" || first == "bin" {
            continue;
        }
        let module = first.trim_end_matches(".rs");
        let Some(own) = layer(module) else {
            problems.push(format!("{}: module `{module}` has no layer in tests/layout.rs LAYERS", rel.display()));
            continue;
        };
        checked += 1;
        for used in crate_modules(&std::fs::read_to_string(f).unwrap()) {
            if used == module || ROOT_ITEMS.contains(&used.as_str()) {
                continue;
            }
            match layer(&used) {
                Some(l) if l < own => {}
                Some(_) => problems.push(format!(
                    "{}: `{module}` (layer {own}) uses `crate::{used}` (layer {}): a module may only use lower layers",
                    rel.display(),
                    layer(&used).unwrap()
                )),
                None => problems.push(format!("{}: uses `crate::{used}`, which has no layer", rel.display())),
            }
        }
    }
    // Every layer's modules exist, so the table cannot drift from the tree unnoticed.
    for m in LAYERS.iter().flat_map(|l| l.iter()) {
        assert!(src.join(format!("{m}.rs")).exists() || src.join(m).is_dir(), "LAYERS names `{m}`, which is not in src/");
    }
    assert!(checked >= 40, "only {checked} files were checked: is src/ where this test looks?");
    assert!(problems.is_empty(), "layout rule broken:\n{}", problems.join("\n"));
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() >= 40, "only {} files under src/", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > MAX_LINES).then(|| format!("{} has {n} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines (split them by job):\n{}", long.join("\n"));
}
