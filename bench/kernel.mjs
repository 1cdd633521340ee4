// The CPU backend's matmul alone (its `linear`, through a debug export of the wasm module), in headless Chromium:
// Q8_0 weights (the integer kernel, src/backend/cpu/q8.rs) or f32 (the f32 GEMM, matmul.rs; the same code in both
// builds). GMAC/s (10^9 multiply-adds per second) on all-MiniLM-L6-v2's matrix shapes, for one sentence (15 rows)
// and a block of a batch (128 rows), each over 1 weight matrix (it stays in the cache between calls) and over 20
// distinct ones (a whole model's worth of memory, as in a forward); best of 3 rounds of about half a second each,
// the builds alternating. From the repository root (the debug export is only in the --bench build):
//
//   scripts/build-wasm.sh --bench
//   node bench/kernel.mjs [package dir pkg-bench] [builds relaxed,simd128] [dtype q8_0|f32]
import { withBenchPage } from "./harness.mjs";

const [dir = "pkg-bench", builds = "relaxed,simd128", dtype = "q8_0"] = process.argv.slice(2);
const SHAPES = [[15, 1152, 384], [15, 384, 384], [15, 1536, 384], [15, 384, 1536], [128, 1536, 384]];
await withBenchPage({}, async (page) => {
  const rows = await page.evaluate(async ({ dir, builds, shapes, dtype }) => {
    const mods = [];
    for (const b of builds) {
      const m = await import(`/${dir}/${b === "relaxed" ? "wasm-relaxed" : "wasm"}/bertgpu.js`);
      await m.default();
      mods.push(m);
    }
    const out = [];
    for (const [m, n, k] of shapes) {
      for (const copies of [1, 20]) {
        const reps = Math.max(copies, Math.round((dtype === "f32" ? 5e9 : 1.5e10) / (m * n * k)));
        const best = mods.map(() => Infinity);
        for (let round = 0; round < 3; round++) {
          for (const [i, mod] of mods.entries()) {
            best[i] = Math.min(best[i], mod.__debugBenchLinear(dtype, m, n, k, copies, reps));
          }
        }
        out.push([`${m} × ${n} × ${k}`, copies, ...best.map((ms) => (m * n * k / ms / 1e6).toFixed(1))]);
      }
    }
    return out;
  }, { dir, builds: builds.split(","), shapes: SHAPES, dtype });
  console.log(`| M × N × K (${dtype}) | weight matrices | ${builds.split(",").map((b) => `${b} GMAC/s`).join(" | ")} |`);
  console.log(`|---|---|${builds.split(",").map(() => "---|").join("")}`);
  for (const r of rows) console.log(`| ${r.join(" | ")} |`);
});
