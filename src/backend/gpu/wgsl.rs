//! Composing WGSL: a kernel's file names the shared pieces it uses with `#include "lib/quant.wgsl"` lines (paths
//! relative to `shaders/`), and [`compose`] pastes each piece in place of its line, once per kernel (a second
//! `#include` of the same piece is dropped, so pieces may include what they use without clashing). WGSL itself has
//! no imports; module-scope declarations may come in any order, so where a piece lands does not matter.
//!
//! A piece can leave something to the kernel that includes it (an `alias`, a `const`, a function), named in the
//! piece's header: that is how one source gives several kernels (`attention_vec4` is `attention` with
//! `alias V = vec4<f32>`). This is plain text at load time: no WGSL is parsed here and nothing is renamed, so the
//! kernel the GPU compiles reads like the files, and [`Composed::locate`] maps a line of it back to the file and
//! line a person edits, which is how compiler errors name them ([`Composed::annotate`]).
//!
//! Why not naga_oil or wesl: both compose at the level of a parsed module. Done at load time that puts naga's
//! parser and WGSL writer into the wasm package (which otherwise hands WGSL text to the browser and carries no
//! naga); done at build time it hands the GPU regenerated text, whose error lines match no file. Including text is
//! all the kernels need.

/// Every WGSL file under `shaders/`: (path relative to `shaders/`, text).
const FILES: &[(&str, &str)] = &[
    ("attention.wgsl", include_str!("../../../shaders/attention.wgsl")),
    ("attention_backward.wgsl", include_str!("../../../shaders/attention_backward.wgsl")),
    ("attention_fixed.wgsl", include_str!("../../../shaders/attention_fixed.wgsl")),
    ("attention_split.wgsl", include_str!("../../../shaders/attention_split.wgsl")),
    ("attention_vec4.wgsl", include_str!("../../../shaders/attention_vec4.wgsl")),
    ("backward.wgsl", include_str!("../../../shaders/backward.wgsl")),
    ("dropout.wgsl", include_str!("../../../shaders/dropout.wgsl")),
    ("embeddings.wgsl", include_str!("../../../shaders/embeddings.wgsl")),
    ("gather.wgsl", include_str!("../../../shaders/gather.wgsl")),
    ("glu.wgsl", include_str!("../../../shaders/glu.wgsl")),
    ("layernorm.wgsl", include_str!("../../../shaders/layernorm.wgsl")),
    ("layernorm_backward.wgsl", include_str!("../../../shaders/layernorm_backward.wgsl")),
    ("matmul.wgsl", include_str!("../../../shaders/matmul.wgsl")),
    ("matmul_packed.wgsl", include_str!("../../../shaders/matmul_packed.wgsl")),
    ("pool.wgsl", include_str!("../../../shaders/pool.wgsl")),
    ("rotary.wgsl", include_str!("../../../shaders/rotary.wgsl")),
    ("train.wgsl", include_str!("../../../shaders/train.wgsl")),
    ("weight_grad.wgsl", include_str!("../../../shaders/weight_grad.wgsl")),
    ("lib/act.wgsl", include_str!("../../../shaders/lib/act.wgsl")),
    ("lib/act_f16.wgsl", include_str!("../../../shaders/lib/act_f16.wgsl")),
    ("lib/activations.wgsl", include_str!("../../../shaders/lib/activations.wgsl")),
    ("lib/block_sum.wgsl", include_str!("../../../shaders/lib/block_sum.wgsl")),
    ("lib/block_sum_subgroup.wgsl", include_str!("../../../shaders/lib/block_sum_subgroup.wgsl")),
    ("lib/attention.wgsl", include_str!("../../../shaders/lib/attention.wgsl")),
    ("lib/attention_bias.wgsl", include_str!("../../../shaders/lib/attention_bias.wgsl")),
    ("lib/attention_disentangled.wgsl", include_str!("../../../shaders/lib/attention_disentangled.wgsl")),
    ("lib/attention_lanes4.wgsl", include_str!("../../../shaders/lib/attention_lanes4.wgsl")),
    ("lib/attention_params.wgsl", include_str!("../../../shaders/lib/attention_params.wgsl")),
    ("lib/dropout.wgsl", include_str!("../../../shaders/lib/dropout.wgsl")),
    ("lib/layernorm_params.wgsl", include_str!("../../../shaders/lib/layernorm_params.wgsl")),
    ("lib/layernorm_row.wgsl", include_str!("../../../shaders/lib/layernorm_row.wgsl")),
    ("lib/layernorm_store.wgsl", include_str!("../../../shaders/lib/layernorm_store.wgsl")),
    ("lib/layernorm_store_f16.wgsl", include_str!("../../../shaders/lib/layernorm_store_f16.wgsl")),
    ("lib/matmul_store.wgsl", include_str!("../../../shaders/lib/matmul_store.wgsl")),
    ("lib/matmul_store_f16.wgsl", include_str!("../../../shaders/lib/matmul_store_f16.wgsl")),
    ("lib/matmul_tile.wgsl", include_str!("../../../shaders/lib/matmul_tile.wgsl")),
    ("lib/packed_weight.wgsl", include_str!("../../../shaders/lib/packed_weight.wgsl")),
    ("lib/quant.wgsl", include_str!("../../../shaders/lib/quant.wgsl")),
    ("lib/workgroup_2d.wgsl", include_str!("../../../shaders/lib/workgroup_2d.wgsl")),
    ("lib/reduce.wgsl", include_str!("../../../shaders/lib/reduce.wgsl")),
    ("lib/reduce_subgroup.wgsl", include_str!("../../../shaders/lib/reduce_subgroup.wgsl")),
    ("lib/split_tile.wgsl", include_str!("../../../shaders/lib/split_tile.wgsl")),
    ("lib/split_tile_subgroup.wgsl", include_str!("../../../shaders/lib/split_tile_subgroup.wgsl")),
];

/// A kernel's WGSL with its pieces pasted in, and where each of its lines came from.
#[derive(Debug)]
pub struct Composed {
    pub text: String,
    /// Runs of lines copied from one file: (first line of `text`, file, first line in the file, line count), lines
    /// counted from 1.
    runs: Vec<(usize, &'static str, usize, usize)>,
    lines: usize,
}

/// `shaders/<root>` with its `#include`s resolved (from the files this crate embeds).
pub fn compose(root: &str) -> Result<Composed, String> {
    compose_from(root, FILES)
}

/// [`compose`] with `prelude` (constants the file leaves to its variants, e.g. `const HEAD_V: u32 = 8u;`) before
/// the file's text; compiler errors in it name `label`.
pub fn compose_variant(root: &str, label: &'static str, prelude: &'static str) -> Result<Composed, String> {
    compose_swapped(root, label, prelude, &[])
}

/// [`compose_variant`] with pieces swapped: for each `(piece, instead)`, an `#include` of `piece` pastes `instead`
/// (e.g. lib/reduce_subgroup.wgsl for lib/reduce.wgsl: the same functions, made otherwise).
pub fn compose_swapped(root: &str, label: &'static str, prelude: &'static str, swaps: &[(&str, &str)])
    -> Result<Composed, String> {
    compose_in(root, FILES, label, prelude, swaps)
}

fn compose_in(root: &str, files: &[(&'static str, &'static str)], label: &'static str, prelude: &'static str,
    swaps: &[(&str, &str)]) -> Result<Composed, String> {
    let &(path, src) = files.iter().find(|f| f.0 == root).ok_or_else(|| format!("no shader file shaders/{root}"))?;
    let mut out = Composed { text: String::new(), runs: Vec::new(), lines: 0 };
    let lines: Vec<&str> = prelude.lines().collect();
    out.copy(label, &lines, 0, lines.len());
    paste(path, src, files, swaps, &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// [`compose`] over another set of (path, text) files: tests use it with files of their own.
pub fn compose_from(root: &str, files: &[(&'static str, &'static str)]) -> Result<Composed, String> {
    compose_in(root, files, "", "", &[])
}

fn paste(path: &'static str, src: &'static str, files: &[(&'static str, &'static str)], swaps: &[(&str, &str)],
    seen: &mut Vec<&'static str>, out: &mut Composed) -> Result<(), String> {
    seen.push(path);
    let lines: Vec<&str> = src.lines().collect();
    let mut from = 0; // first line (0-based) of `src` not yet copied
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim().strip_prefix("#include") else { continue };
        let name = rest.trim().strip_prefix('"').and_then(|r| r.strip_suffix('"')).ok_or_else(|| {
            format!("shaders/{path}:{}: write `#include \"lib/piece.wgsl\"` (a path under shaders/, in quotes)", i + 1)
        })?;
        out.copy(path, &lines, from, i);
        from = i + 1;
        let name = swaps.iter().find(|s| s.0 == name).map_or(name, |s| s.1);
        if seen.contains(&name) {
            continue;
        }
        let &(inc, text) = files.iter().find(|f| f.0 == name).ok_or_else(|| {
            format!("shaders/{path}:{}: #include \"{name}\": there is no such file under shaders/", i + 1)
        })?;
        paste(inc, text, files, swaps, seen, out)?;
    }
    out.copy(path, &lines, from, lines.len());
    Ok(())
}

impl Composed {
    /// Appends `lines[from..to]` of `path`.
    fn copy(&mut self, path: &'static str, lines: &[&str], from: usize, to: usize) {
        if to <= from {
            return;
        }
        for line in &lines[from..to] {
            self.text.push_str(line);
            self.text.push('\n');
        }
        self.runs.push((self.lines + 1, path, from + 1, to - from));
        self.lines += to - from;
    }

    /// The file under `shaders/` and the line in it that line `line` (from 1) of [`Composed::text`] came from.
    pub fn locate(&self, line: usize) -> Option<(&'static str, usize)> {
        let &(first, path, file_line, _) = self.runs.iter().rev().find(|r| r.0 <= line && line < r.0 + r.3)?;
        Some((path, file_line + (line - first)))
    }

    /// [`Composed::annotate`] on the message of a GPU error about the module labelled `label`.
    pub(crate) fn annotate_error(&self, e: crate::Error, label: &str) -> crate::Error {
        match e {
            crate::Error::Gpu(msg) => crate::Error::Gpu(self.annotate(&msg, &[label])),
            e => e,
        }
    }

    /// A compiler's message about [`Composed::text`] with each `LINE:COL` it cites rewritten as
    /// `shaders/FILE:LINE:COL` of the file that line came from. naga cites `wgsl:L:C` (parsing) or `LABEL:L:C`
    /// (validation, where LABEL is the module's label), Chromium's Tint `:L:C`; `labels` lists the names it may
    /// use for this text.
    pub fn annotate(&self, msg: &str, labels: &[&str]) -> String {
        let mut out = String::with_capacity(msg.len());
        let mut rest = msg;
        while let Some(at) = rest.find(':') {
            let (head, tail) = rest.split_at(at);
            // The name right before the colon: back to white space or the start.
            let name_at = head.rfind(|c: char| c.is_whitespace()).map_or(0, |i| i + 1);
            let name = &head[name_at..];
            let cited = name.is_empty() || name == "wgsl" || labels.contains(&name);
            if cited {
                let found = line_col(&tail[1..]).and_then(|(line, col, len)| Some((self.locate(line)?, col, len)));
                if let Some(((path, l), col, len)) = found {
                    out.push_str(&head[..name_at]);
                    out.push_str(&format!("shaders/{path}:{l}:{col}"));
                    rest = &tail[1 + len..];
                    continue;
                }
            }
            out.push_str(head);
            out.push(':');
            rest = &tail[1..];
        }
        out.push_str(rest);
        out
    }
}

/// `LINE:COL` at the start of `s`: (line, column, bytes taken).
fn line_col(s: &str) -> Option<(usize, usize, usize)> {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let a = digits(s);
    if a == 0 || s.as_bytes().get(a) != Some(&b':') {
        return None;
    }
    let b = digits(&s[a + 1..]);
    if b == 0 {
        return None;
    }
    Some((s[..a].parse().ok()?, s[a + 1..a + 1 + b].parse().ok()?, a + 1 + b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAKE: &[(&str, &str)] = &[
        ("k.wgsl", "// kernel\n#include \"lib/a.wgsl\"\nfn k() {}\n#include \"lib/b.wgsl\"\n// end"),
        ("lib/a.wgsl", "#include \"lib/b.wgsl\"\nfn a() {}"),
        ("lib/b.wgsl", "fn b() -> u32 {\n    return 1.0;\n}"),
        ("lib/c.wgsl", "fn b() -> u32 { return 2u; }"),
        ("bad.wgsl", "fn k() {}\n#include \"lib/none.wgsl\""),
        ("unquoted.wgsl", "#include lib/a.wgsl"),
    ];

    #[test]
    fn pastes_each_piece_once_and_knows_where_each_line_came_from() {
        let c = compose_from("k.wgsl", FAKE).unwrap();
        assert_eq!(c.text, "// kernel\nfn b() -> u32 {\n    return 1.0;\n}\nfn a() {}\nfn k() {}\n// end\n");
        let want = [("k.wgsl", 1), ("lib/b.wgsl", 1), ("lib/b.wgsl", 2), ("lib/b.wgsl", 3), ("lib/a.wgsl", 2),
            ("k.wgsl", 3), ("k.wgsl", 5)];
        assert_eq!(c.text.lines().count(), want.len());
        for (i, w) in want.iter().enumerate() {
            assert_eq!(c.locate(i + 1), Some(*w), "line {}", i + 1);
        }
        assert_eq!(c.locate(0), None);
        assert_eq!(c.locate(want.len() + 1), None);
    }

    /// A swapped piece is pasted wherever the one it replaces is included, once, and its lines locate to it.
    #[test]
    fn a_swapped_piece_replaces_every_include_of_the_other() {
        let c = compose_in("k.wgsl", FAKE, "", "", &[("lib/b.wgsl", "lib/c.wgsl")]).unwrap();
        assert_eq!(c.text, "// kernel\nfn b() -> u32 { return 2u; }\nfn a() {}\nfn k() {}\n// end\n");
        assert_eq!(c.locate(2), Some(("lib/c.wgsl", 1)));
        assert_eq!(c.locate(3), Some(("lib/a.wgsl", 2)));
        let sg = compose_swapped("layernorm.wgsl", "v", "", &[("lib/reduce.wgsl", "lib/reduce_subgroup.wgsl")]).unwrap();
        assert!(sg.text.contains("subgroupAdd") && !compose("layernorm.wgsl").unwrap().text.contains("subgroupAdd"));
    }

    #[test]
    fn a_variant_writes_its_constants_first_and_they_locate_to_their_table() {
        let c = compose_variant("attention_fixed.wgsl", "params.rs VARIANTS", "const HEAD_V: u32 = 8u;").unwrap();
        assert!(c.text.starts_with("const HEAD_V: u32 = 8u;\n// attention_fixed.wgsl"), "{}", &c.text[..80]);
        assert_eq!(c.locate(1), Some(("params.rs VARIANTS", 1)));
        assert_eq!(c.locate(2), Some(("attention_fixed.wgsl", 1)));
        assert_eq!(compose("attention_fixed.wgsl").unwrap().text, c.text["const HEAD_V: u32 = 8u;\n".len()..]);
    }

    #[test]
    fn a_bad_include_names_the_file_and_line() {
        assert_eq!(compose_from("bad.wgsl", FAKE).unwrap_err(),
            "shaders/bad.wgsl:2: #include \"lib/none.wgsl\": there is no such file under shaders/");
        assert!(compose_from("unquoted.wgsl", FAKE).unwrap_err().starts_with("shaders/unquoted.wgsl:1: write"));
        assert_eq!(compose_from("none.wgsl", FAKE).unwrap_err(), "no shader file shaders/none.wgsl");
    }

    /// A compiler error in a piece names the piece and the line in it, not the line of the composed text: naga
    /// (what wgpu runs natively) and Chromium's Tint message format.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn compiler_errors_name_the_file_a_person_edits() {
        use wgpu::naga;
        let c = compose_from("k.wgsl", FAKE).unwrap();
        // A type error: naga's front end or its validator reports it, depending on the version.
        let raw = match naga::front::wgsl::parse_str(&c.text) {
            Err(e) => e.emit_to_string(&c.text),
            Ok(m) => naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty())
                .validate(&m)
                .unwrap_err()
                .emit_to_string_with_path(&c.text, "k"),
        };
        assert!(raw.contains("wgsl:3:") || raw.contains("k:3:"), "naga's message changed form: {raw}");
        let msg = c.annotate(&raw, &["k"]);
        assert!(msg.contains("shaders/lib/b.wgsl:2:"), "{msg}");
        assert!(!msg.contains(":3:"), "{msg}");
        let tint = ":3:12 error: return statement type must match its function return type\n - While validating x";
        assert_eq!(c.annotate(tint, &[]),
            "shaders/lib/b.wgsl:2:12 error: return statement type must match its function return type\n - While validating x");
        // Other colons and numbers are left alone.
        assert_eq!(c.annotate("at 12:30: wgsl: no", &[]), "at 12:30: wgsl: no");
    }

    /// `FILES` holds every file under shaders/ as it is on disk, so a new piece cannot be forgotten.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn every_shader_file_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
        let mut on_disk = Vec::new();
        for dir in [root.clone(), root.join("lib")] {
            for e in std::fs::read_dir(&dir).unwrap() {
                let path = e.unwrap().path();
                if path.extension().is_some_and(|x| x == "wgsl") {
                    let rel = path.strip_prefix(&root).unwrap().to_str().unwrap().replace('\\', "/");
                    let embedded = FILES.iter().find(|f| f.0 == rel).map(|f| f.1);
                    assert_eq!(embedded, Some(std::fs::read_to_string(&path).unwrap().as_str()), "{rel}");
                    on_disk.push(rel);
                }
            }
        }
        assert_eq!(on_disk.len(), FILES.len(), "shaders/ has {on_disk:?}");
    }
}
