// The CPU backend's Q8_0 kernel alone (src/backend/cpu/q8.rs, `linear_q8`), in headless Chromium: GMAC/s (millions of
// multiply-adds per ms) on all-MiniLM-L6-v2's matrix shapes, for one sentence (15 rows) and a block of a batch (128
// rows). Each shape runs over 1 weight matrix (it stays in the cache between calls) and over 20 distinct ones (about
// a whole model's worth of memory, as in a forward); best of 3 rounds of about half a second each, the builds
// alternating. From the repository root, after scripts/build-wasm.sh:
//
//   node bench/kernel.mjs [package dir pkg] [builds relaxed,simd128]
import { withBenchPage } from "./harness.mjs";

const [dir = "pkg", builds = "relaxed,simd128"] = process.argv.slice(2);
const SHAPES = [[15, 1152, 384], [15, 384, 384], [15, 1536, 384], [15, 384, 1536], [128, 1536, 384]];
await withBenchPage({}, async (page) => {
  const rows = await page.evaluate(async ({ dir, builds, shapes }) => {
    const mods = [];
    for (const b of builds) {
      const m = await import(`/${dir}/${b === "relaxed" ? "wasm-relaxed" : "wasm"}/bertgpu.js`);
      await m.default();
      mods.push(m);
    }
    const out = [];
    for (const [m, n, k] of shapes) {
      for (const copies of [1, 20]) {
        const reps = Math.max(copies, Math.round(1.5e10 / (m * n * k)));
        const best = mods.map(() => Infinity);
        for (let round = 0; round < 3; round++) {
          for (const [i, mod] of mods.entries()) {
            const t0 = performance.now();
            mod.__debugBenchLinearQ8(m, n, k, copies, reps);
            best[i] = Math.min(best[i], (performance.now() - t0) / reps);
          }
        }
        out.push([`${m} × ${n} × ${k}`, copies, ...best.map((ms) => (m * n * k / ms / 1e6).toFixed(1))]);
      }
    }
    return out;
  }, { dir, builds: builds.split(","), shapes: SHAPES });
  console.log(`| M × N × K | weight matrices | ${builds.split(",").map((b) => `${b} GMAC/s`).join(" | ")} |`);
  console.log(`|---|---|${builds.split(",").map(() => "---|").join("")}`);
  for (const r of rows) console.log(`| ${r.join(" | ")} |`);
});
