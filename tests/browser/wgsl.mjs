// The WGSL a kernel compiles to, for browser tests that build kernels themselves: shaders/<root> with each
// `#include "lib/x.wgsl"` line replaced by that file, once per kernel, as src/backend/gpu/wgsl.rs composes it (the
// package gets its text from there; this mirror is for tests that need no pkg/). `locate(line)` gives the file and
// line a line of the text came from, so a compiler message can name them.
import fs from "node:fs";
import path from "node:path";
import { ROOT } from "./harness.mjs";

export function composeWgsl(root) {
  const lines = [];
  const from = [];
  const seen = new Set();
  const paste = (file) => {
    seen.add(file);
    const src = fs.readFileSync(path.join(ROOT, "shaders", file), "utf8").replace(/\n$/, "").split("\n");
    src.forEach((line, i) => {
      const inc = /^\s*#include\s+"([^"]+)"\s*$/.exec(line);
      if (!inc) {
        lines.push(line);
        from.push(`shaders/${file}:${i + 1}`);
      } else if (!seen.has(inc[1])) {
        paste(inc[1]);
      }
    });
  };
  paste(root);
  return { text: lines.join("\n") + "\n", locate: (line) => from[line - 1] ?? `line ${line}` };
}
