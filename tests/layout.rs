//! The crate's layout rules (docs/ARCHITECTURE.md), checked on the source text:
//!
//! 1. A top-level module imports only modules of a lower layer (no import circles, no reaching up):
//!    `error, dtype, activation` (and the unit tests' `testutil`) ← `sentence` ← `config, tokenizer` ← `weights` ← `backend, loader` ← `model` ← `heads` ←
//!    `training` ← `tasks` ← `engine` ← `wasm, fuzzing` (and `src/bin/`, which sees only the public API).
//! 2. No file in src/ is over [`MAX_LINES`] lines.
//! 3. Inside each folder too, the files (and sub-folders) form layers: no circle of imports among them (a folder's
//!    mod.rs, which declares its files and holds what they share, is its door, not one of them).
//! 4. The JavaScript too: no file in js/ or www/ is over [`MAX_LINES`] lines, and no circle of imports among the
//!    modules of js/ or of www/.
//! 5. The CPU kernels (src/backend/cpu/, whose functions the thread pool's parallel items run) use no lock that can
//!    wait: in the threaded wasm build a contended std lock waits with `memory.atomic.wait32`, which traps on a
//!    browser's main thread (src/backend/cpu/threads.rs, "Nothing an item runs may wait").
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

/// The .rs files under `src/<rel>` (`""` for src/ itself); fewer than `at_least` means the test looks in the wrong
/// place.
fn source_files(rel: &str, at_least: usize) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(rel);
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(files.len() >= at_least, "only {} files under {}", files.len(), dir.display());
    files
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
    let long: Vec<String> = source_files("", 40)
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > MAX_LINES).then(|| format!("{} has {n} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines (split them by job):\n{}", long.join("\n"));
}

/// What may wait when contended: std's locks and one-time cells (their futex waits), sleeping and parking.
const WAITING: &[&str] = &[
    "Mutex", "RwLock", "OnceLock", "LazyLock", "OnceCell", "Condvar", "Barrier", "sync::Once", "thread::sleep",
    "park(", "lazy_static",
];

/// Files of src/backend/cpu/ whose locks only the calling thread takes, between parallel loops, never inside an
/// item: tensor.rs's lazily repacked Q8_0 weight (`linear` asks for it before it publishes the loop).
const CALLER_ONLY: &[&str] = &["tensor.rs"];

/// The waiting constructs of [`WAITING`] in `source`, comments left out: `(line, construct)`.
fn waits(source: &str) -> Vec<(usize, &'static str)> {
    let mut out = Vec::new();
    for (i, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        out.extend(WAITING.iter().filter(|w| code.contains(*w)).map(|w| (i + 1, *w)));
    }
    out
}

#[test]
fn the_wait_finder_sees_a_lock_and_not_a_comment() {
    assert_eq!(waits("static C: OnceLock<bool> = OnceLock::new();"), vec![(1, "OnceLock")]);
    assert_eq!(waits("let g = m.lock(); // a std::sync::Mutex\nstd::thread::sleep(d);"), vec![(2, "thread::sleep")]);
    assert!(waits("static C: AtomicU8 = AtomicU8::new(0); // not a OnceLock").is_empty());
}

#[test]
fn no_cpu_kernel_uses_a_lock_that_waits() {
    let found: Vec<String> = source_files("backend/cpu", 10)
        .iter()
        .filter(|f| !CALLER_ONLY.iter().any(|c| f.ends_with(c)))
        .flat_map(|f| {
            let source = std::fs::read_to_string(f).unwrap();
            waits(&source).into_iter().map(|(line, w)| format!("{}:{line}: {w}", f.display())).collect::<Vec<_>>()
        })
        .collect();
    assert!(found.is_empty(), "a lock that can wait, where the pool's items run (use an atomic):\n{}", found.join("\n"));
}

/// A module's path from the crate root: `src/training/fit/tests.rs` → `training::fit::tests`, `src/weights/gguf/mod.rs`
/// → `weights::gguf`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_str().unwrap().to_string()).collect();
    let last = parts.pop().unwrap();
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// Every path a file's code names from `crate::`, `super::` or `self::`, resolved to a path from the crate root, with
/// `{a, b::c}` groups expanded (over several lines too). Comments are skipped. `super::` inside a file's inline
/// `mod tests` resolves as if it were in the file itself: the tests' `use super::*` then names the file's own parent,
/// which names no sibling and adds no edge.
fn resolved_paths(source: &str, module: &[String]) -> Vec<Vec<String>> {
    let code: String = source
        .lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let start = ["crate::", "super::", "self::"].iter().find(|p| rest.starts_with(**p));
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        let Some(start) = start.filter(|_| boundary) else {
            i += rest.chars().next().unwrap().len_utf8();
            continue;
        };
        // The path's text: identifiers, `::`, and brace groups (balanced), up to the first other character.
        let mut end = i;
        let mut depth = 0;
        for (j, c) in code[i..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                c if depth > 0 || c.is_alphanumeric() || c == '_' || c == ':' || c == '$' => {}
                _ => {
                    end = i + j;
                    break;
                }
            }
            end = i + j + c.len_utf8();
        }
        for path in expand(&code[i..end]) {
            let mut segs: Vec<&str> = path.split("::").map(str::trim).filter(|s| !s.is_empty()).collect();
            let mut base: Vec<String> = match *start {
                "crate::" => {
                    segs.remove(0);
                    Vec::new()
                }
                _ => module.to_vec(),
            };
            while let Some(&s) = segs.first() {
                match s {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                segs.remove(0);
            }
            base.extend(segs.iter().map(|s| s.to_string()));
            out.push(base);
        }
        i = end.max(i + start.len());
    }
    out
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else { return vec![path.to_string()] };
    let prefix = &path[..open];
    let inner = path[open + 1..].trim_end();
    let inner = inner.strip_suffix('}').unwrap_or(inner);
    let (mut items, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    items.push(cur);
    items
        .into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .flat_map(|s| expand(&format!("{prefix}{s}")))
        .collect()
}

/// The import graph inside each folder of src/: for folder `a/b`, an edge `x → y` where code in `a/b/x.rs` (or under
/// `a/b/x/`) names `crate::a::b::y` (or the same through `super::`), `y` being a file or folder of `a/b`. The folder's
/// own mod.rs is its door, not a node: it declares the files and holds what they share.
fn folder_graphs(src: &Path) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graphs: std::collections::BTreeMap<String, std::collections::BTreeMap<String, BTreeSet<String>>> =
        Default::default();
    // The nodes of each folder: its files (but mod.rs) and sub-folders.
    let mut nodes: std::collections::BTreeMap<Vec<String>, BTreeSet<String>> = Default::default();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap();
        let m = module_path(rel);
        if m.first().is_some_and(|s| s == "bin") {
            continue;
        }
        for depth in 1..m.len() {
            nodes.entry(m[..depth].to_vec()).or_default().insert(m[depth].clone());
        }
    }
    for f in &files {
        let rel = f.strip_prefix(src).unwrap();
        let m = module_path(rel);
        if m.is_empty() || m[0] == "bin" || m[0] == "lib" {
            continue;
        }
        for target in resolved_paths(&std::fs::read_to_string(f).unwrap(), &m) {
            // The deepest folder both lie in, below the crate root (the top level is the layers' test).
            let common = m.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == 0 || common >= m.len() || common >= target.len() {
                continue;
            }
            let folder = m[..common].to_vec();
            let (from, to) = (&m[common], &target[common]);
            if nodes.get(&folder).is_some_and(|n| n.contains(to)) {
                graphs.entry(folder.join("/")).or_default().entry(from.clone()).or_default().insert(to.clone());
            }
        }
    }
    graphs
}

/// The circles of a graph: its strongly connected components of more than one node (Tarjan's algorithm), each
/// sorted.
fn circles(graph: &std::collections::BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let names: BTreeSet<&String> = graph.keys().chain(graph.values().flatten()).collect();
    let names: Vec<&String> = names.into_iter().collect();
    let at = |n: &String| names.iter().position(|m| *m == n).unwrap();
    let edges: Vec<Vec<usize>> =
        names.iter().map(|n| graph.get(*n).map(|t| t.iter().map(at).collect()).unwrap_or_default()).collect();
    struct State {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(v: usize, e: &[Vec<usize>], s: &mut State) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on[v] = true;
        for &w in &e[v] {
            match s.index[w] {
                None => {
                    visit(w, e, s);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(i) if s.on[w] => s.low[v] = s.low[v].min(i),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut c = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on[w] = false;
                c.push(w);
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                s.out.push(c);
            }
        }
    }
    let n = names.len();
    let mut s = State { index: vec![None; n], low: vec![0; n], on: vec![false; n], stack: Vec::new(), next: 0, out: Vec::new() };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(v, &edges, &mut s);
        }
    }
    let mut out: Vec<Vec<String>> =
        s.out.into_iter().map(|c| {
            let mut c: Vec<String> = c.into_iter().map(|i| names[i].clone()).collect();
            c.sort();
            c
        }).collect();
    out.sort();
    out
}

#[test]
fn the_folder_parser_resolves_relative_paths() {
    let m: Vec<String> = ["training", "fit", "run"].iter().map(|s| s.to_string()).collect();
    let src = "use super::{checkpoint::Store, report::{self, Report}};\n\
               use super::super::optim::AdamW; // super::ignored\n\
               let x = crate::training::rng::SplitMix64::new(1);\n\
               use crate::{backend::Backend,\n    training::loss};\n";
    let found: Vec<String> = resolved_paths(src, &m).into_iter().map(|p| p.join("::")).collect();
    assert_eq!(
        found,
        [
            "training::fit::checkpoint::Store",
            "training::fit::report::self",
            "training::fit::report::Report",
            "training::optim::AdamW",
            "training::rng::SplitMix64::new",
            "backend::Backend",
            "training::loss",
        ]
    );
}

#[test]
fn no_folder_has_an_import_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graphs = folder_graphs(&src);
    assert!(graphs.len() >= 5, "only {} folders have imports between their files: is the parser right?", graphs.len());
    let found: Vec<String> = graphs
        .iter()
        .flat_map(|(folder, g)| circles(g).into_iter().map(move |c| format!("{folder}: {}", c.join(", "))))
        .collect();
    assert!(
        found.is_empty(),
        "import circles inside a folder (docs/ARCHITECTURE.md: a folder's files form layers too; move what both \
         ends need into a lower file):\n{}",
        found.join("\n")
    );
}

/// The JavaScript package (js/) and the demo page (www/): the same line limit as src/, every file (code, types,
/// HTML, CSS, notes).
#[test]
fn no_js_or_www_file_is_over_the_line_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let mut long = Vec::new();
    for dir in ["js", "www"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = entry.unwrap().path();
            if !p.is_file() {
                continue;
            }
            checked += 1;
            let n = std::fs::read_to_string(&p).unwrap().lines().count();
            if n > MAX_LINES {
                long.push(format!("{} has {n} lines", p.display()));
            }
        }
    }
    assert!(checked >= 20, "only {checked} files in js/ and www/: is this where they are?");
    assert!(long.is_empty(), "files over {MAX_LINES} lines (split them by job):\n{}", long.join("\n"));
}

/// The sibling modules a JavaScript file imports or re-exports (`from "./name.js"`, `import "./name.js"`), by
/// name; comments skipped (`//` lines and `/* */` blocks), and paths into sub-folders (the wasm glue) left out.
fn js_imports(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_block = false;
    for line in source.lines() {
        let t = line.trim_start();
        if in_block || t.starts_with("/*") {
            in_block = !t.contains("*/");
            continue;
        }
        if t.starts_with("//") || t.starts_with('*') {
            continue;
        }
        for key in ["from \"./", "import \"./"] {
            let mut rest = line;
            while let Some(i) = rest.find(key) {
                rest = &rest[i + key.len()..];
                if let Some(end) = rest.find('"') {
                    let name = &rest[..end];
                    if let Some(stem) = name.strip_suffix(".js").filter(|s| !s.contains('/')) {
                        out.insert(stem.to_string());
                    }
                }
            }
        }
    }
    out
}

#[test]
fn the_js_parser_sees_what_a_module_imports() {
    let src = "// import { x } from \"./commented.js\";\n\
               import { a, b } from \"./builds.js\";\n\
               import {\n  c,\n} from \"./options.js\";\n\
               export { d } from \"./text.js\";\n\
               import * as glue from \"./wasm/bertgpu.js\";\n\
               /** see import \"./doc.js\" */\n\
               const u = new URL(\"./worker-main.js\", import.meta.url);\n";
    let found: Vec<String> = js_imports(src).into_iter().collect();
    assert_eq!(found, ["builds", "options", "text"]);
}

/// js/ and www/: no circle of imports among a folder's modules (a circle's modules run in an order that depends on
/// which one a page imports first).
#[test]
fn no_js_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (dir, least) in [("js", 10), ("www", 5)] {
        let mut graph = std::collections::BTreeMap::new();
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "js") {
                let name = p.file_stem().unwrap().to_str().unwrap().to_string();
                graph.insert(name, js_imports(&std::fs::read_to_string(&p).unwrap()));
            }
        }
        let edges: usize = graph.values().map(|t| t.len()).sum();
        assert!(edges >= least, "only {edges} imports between the files of {dir}/: is the parser right?");
        let found = circles(&graph);
        assert!(
            found.is_empty(),
            "import circles in {dir}/ (move what both ends need into a file of their own):\n{}",
            found.iter().map(|c| c.join(", ")).collect::<Vec<_>>().join("\n")
        );
    }
}
