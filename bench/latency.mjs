// One sentence, many times: bertgpu and transformers.js loaded in one cross-origin isolated page, calls in random
// order (not strictly alternating), medians overall and by which library ran just before. The (a) rows of
// bench/browser.mjs alternate ours/theirs in fixed pairs; this gives the latency comparison more runs and shows
// whether one library's call slows the other's next one. Needs what bench/browser.sh prepares. From the root:
//
//   node bench/latency.mjs [--runs 120] [--ours q8|f32] [--simd auto|relaxed|simd128] [--workers 1|2]
//                          [--parallel data|tensor] [--theirs q8|fp32] [--threads 1|2]
//
// (--parallel tensor: our workers each hold a shard of every layer and run the sentence together.)
import { median, withBenchPage } from "./harness.mjs";

const argv = process.argv.slice(2);
const arg = (name, dflt) => (argv.includes(`--${name}`) ? argv[argv.indexOf(`--${name}`) + 1] : dflt);
const RUNS = Number(arg("runs", 120));
const OURS = arg("ours", "q8");
const ours = { source: OURS === "q8" ? "/bench/models/all-MiniLM-L6-v2.q8_0.gguf" : "/models/all-MiniLM-L6-v2/",
  device: "cpu", simd: arg("simd", "auto"), workers: Number(arg("workers", 1)), parallel: arg("parallel", "data") };
const theirs = { dtype: arg("theirs", "q8"), device: "wasm", threads: Number(arg("threads", 1)) };
// A real sentence (Debian's fortunes), 15 tokens with [CLS]/[SEP].
const TEXTS = ["Anyone who has never made a mistake has never tried anything new."];

await withBenchPage({ isolated: true }, async (page) => {
  await page.waitForFunction(() => window.ready === true);
  let build = await page.evaluate((o) => window.load("ours", o), ours);
  if (OURS === "q8" && build.includes("relaxed") && ours.workers === 1) {
    // Which form of the relaxed dot product the kernel runs on this engine and CPU (src/backend/cpu/q8.rs).
    build += `, ${await page.evaluate(async () => (await import("/pkg/wasm-relaxed/bertgpu.js")).__q8DotForm())} dot`;
  }
  await page.evaluate((t) => window.load("theirs", t), theirs);
  const tokens = (await page.evaluate((t) => window.tokenCounts(t), TEXTS))[0];
  const run = async (which) => (await page.evaluate(({ which, texts }) => window.timeEmbed(which, texts),
    { which, texts: TEXTS })).ms;
  for (let i = 0; i < 3; i++) { await run("ours"); await run("theirs"); } // warm-up
  const times = { ours: { ours: [], theirs: [] }, theirs: { ours: [], theirs: [] } };
  let prev = "theirs";
  // A fixed seed (xorshift), so the order is the same in every run of the script.
  let s = 0x2545f491;
  for (let i = 0; i < RUNS; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    const which = s & 1 ? "ours" : "theirs";
    times[which][prev].push(await run(which));
    prev = which;
  }
  const all = (w) => [...times[w].ours, ...times[w].theirs];
  const line = (w) => `${median(all(w)).toFixed(1)} ms (min ${Math.min(...all(w)).toFixed(1)}; after ours `
    + `${median(times[w].ours).toFixed(1)}, after theirs ${median(times[w].theirs).toFixed(1)}; ${all(w).length} runs)`;
  console.log(`one sentence, ${tokens} tokens`);
  console.log(`bertgpu ${OURS} CPU ${build}${ours.workers > 1 ? `, ${ours.workers} workers (${ours.parallel})` : ""}: ${line("ours")}`);
  console.log(`transformers.js ${theirs.dtype} WASM ${theirs.threads} thread(s): ${line("theirs")}`);
  console.log(`ratio of medians: ${(median(all("ours")) / median(all("theirs"))).toFixed(2)}×`);
});
