// Two builds of the package side by side: both loaded in one headless Chromium page, the same texts embedded by
// each in alternating order, medians printed. For measuring one change (build the old package into another folder
// first, e.g. `cp -a pkg pkg-old` before the change). Run from the repository root:
//
//   node bench/ab.mjs <dir A> <dir B> <model source> <texts> <tokens> [reps 7] [simd A] [simd B] [cold]
//   node bench/ab.mjs pkg-old pkg /bench/models/all-MiniLM-L6-v2.q8_0.gguf 8 128 9 relaxed relaxed
//
// The directories are package folders under the repository root (pkg/ layout); the source is a URL path the
// repository server serves (a model folder or a .gguf); simd is "relaxed" / "simd128" (default "auto"). "cold" reads
// 64 MiB of other memory before each run, so that the weights come from DRAM, not from the cache (as after a pause,
// or after another program ran). THREADS=n in the environment: a cross-origin isolated page, and both load with
// `threads: n` (the threaded builds). GAP_MS=t: a pause of t ms before each call, so that a pool's workers have
// gone idle (stopped polling: src/backend/cpu/threads.rs) before the other build's call starts.
import { withBenchPage } from "./harness.mjs";

const THREADS = process.env.THREADS ? Number(process.env.THREADS) : undefined;
const GAP_MS = Number(process.env.GAP_MS ?? 0);

const [dirA, dirB, source, texts, tokens, reps = "7", simdA = "auto", simdB = "auto", cold = ""] = process.argv.slice(2);
if (!dirA || !dirB || !source || !texts || !tokens) {
  console.error("usage: node bench/ab.mjs <dir A> <dir B> <model source> <texts> <tokens> [reps] [simd A] [simd B]");
  process.exit(2);
}
await withBenchPage({ isolated: THREADS !== undefined }, async (page) => {
  const r = await page.evaluate(async ({ dirs, source, n, tokens, reps, simds, cold, threads, gap }) => {
    const flush = new Float64Array(8 << 20).fill(1);
    let sink = 0;
    const berts = [];
    for (const [i, dir] of dirs.entries()) {
      const { Bert } = await import(`/${dir}/index.js`);
      berts.push(await Bert.load(source, { device: "cpu", cache: false, simd: simds[i], threads }));
    }
    const texts = window.repeatedTexts(n, tokens);
    const times = [[], []];
    for (let rep = 0; rep <= reps; rep++) {
      for (const j of rep % 2 ? [0, 1] : [1, 0]) {
        if (cold) for (let i = 0; i < flush.length; i += 8) sink += flush[i];
        if (gap) await new Promise((resolve) => setTimeout(resolve, gap));
        const t0 = performance.now();
        await berts[j].embed(texts);
        if (rep > 0) times[j].push(performance.now() - t0); // rep 0 warms up
      }
    }
    const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
    if (sink < 0) throw new Error("unreachable"); // keeps the flush loop
    return times.map(median);
  }, { dirs: [dirA, dirB], source, n: Number(texts), tokens: Number(tokens), reps: Number(reps), simds: [simdA, simdB],
    cold: cold === "cold", threads: THREADS, gap: GAP_MS });
  console.log(`${THREADS ? `${THREADS} threads: ` : ""}${cold === "cold" ? "cold cache: " : ""}${dirA} (${simdA}): ${r[0].toFixed(1)} ms, ${dirB} (${simdB}): ${r[1].toFixed(1)} ms, B/A ${(r[1] / r[0]).toFixed(3)}`);
});
