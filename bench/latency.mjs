// One sentence, many times. By default bertgpu and transformers.js are loaded in one cross-origin isolated page and
// called in random order (not strictly alternating), after 5 s of untimed calls (--warmup-ms); medians overall and
// by which library ran just before. The (a) rows of bench/browser.mjs alternate ours/theirs in fixed pairs; this
// gives the latency comparison more runs and shows whether one library's call slows the other's next one. Needs what
// bench/browser.sh prepares. From the root:
//
//   node bench/latency.mjs [--runs 120] [--ours q8|f32] [--simd auto|relaxed|simd128] [--workers 1|2]
//                          [--theirs q8|fp32] [--threads 1|2] [--warmup-ms 5000] [--model all-MiniLM-L6-v2]
//   node bench/latency.mjs --alone 4 [--runs 120] [--ours q8|f32] [--theirs q8|fp32] [--cores n] [--warmup-ms 5000]
//                          [--model all-MiniLM-L6-v2]
//
// --model NAME: the model both libraries run (default all-MiniLM-L6-v2; benchModel in bench/harness.mjs says where
// each finds it; `bench/browser.sh --prepare-only --model all-mpnet-base-v2` makes the files of all-mpnet-base-v2).
//
// --alone N: instead, N rounds over the configurations (ours and theirs on 1 and 2 threads, ours on the threaded
// build; with more cores, also on --cores of each, by default the cores the browser reports, up to 4), each in a
// fresh page with that library only (untimed calls for 5 s, then runs / 2N timed), so that no library's threads or
// workers share the cores with another's; then each library's fastest configuration. (--workers and --threads do
// not apply.)
import fs from "node:fs";
import path from "node:path";
import { ROOT } from "../tests/browser/harness.mjs";
import { benchModel, DEFAULT_MODEL, median, multiCore, timeEmbed, warmUp, withBenchPage } from "./harness.mjs";

const argv = process.argv.slice(2);
const arg = (name, dflt) => (argv.includes(`--${name}`) ? argv[argv.indexOf(`--${name}`) + 1] : dflt);
const RUNS = Number(arg("runs", 120));
const OURS = arg("ours", "q8");
const MODEL = benchModel(arg("model", DEFAULT_MODEL));
for (const need of MODEL.need) {
  if (!fs.existsSync(path.join(ROOT, need))) {
    throw new Error(`${need} is missing: run bench/browser.sh --prepare-only --model ${MODEL.name}`);
  }
}
const ours = { source: OURS === "q8" ? MODEL.q8 : MODEL.f32, device: "cpu", simd: arg("simd", "auto"),
  workers: Number(arg("workers", 1)) };
const theirs = { model: MODEL.theirs, dtype: arg("theirs", "q8"), device: "wasm", threads: Number(arg("threads", 1)) };
// A real sentence (Debian's fortunes), 15 tokens with [CLS]/[SEP].
const TEXTS = ["Anyone who has never made a mistake has never tried anything new."];

const ALONE = Number(arg("alone", 0));
/** --alone: also this many workers and threads (default: the cores the browser reports, 2 to 4; multiCore). */
const CORES = arg("cores", null);
multiCore(CORES, 2); // a bad value fails here, before the browser starts
/** Untimed calls (per fresh page in --alone) for at least this long (warmUp in bench/harness.mjs says why). */
const WARMUP_MS = Number(arg("warmup-ms", 5000));

await withBenchPage({ isolated: true }, async (page) => {
  await page.waitForFunction(() => window.ready === true);
  if (ALONE > 0) return alone(page);
  let build = await page.evaluate((o) => window.load("ours", o), ours);
  const dot = OURS === "q8" ? await page.evaluate(() => window.q8DotForm()) : null;
  if (dot) build += `, ${dot} dot`;
  await page.evaluate((t) => window.load("theirs", t), theirs);
  const tokens = (await page.evaluate((t) => window.tokenCounts(t), TEXTS))[0];
  const run = async (which) => (await timeEmbed(page, which, TEXTS)).ms;
  await warmUp(page, ["ours", "theirs"], TEXTS, WARMUP_MS);
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
  console.log(`${MODEL.name}, one sentence, ${tokens} tokens`);
  console.log(`bertgpu ${OURS} CPU ${build}${ours.workers > 1 ? `, ${ours.workers} workers` : ""}: ${line("ours")}`);
  console.log(`transformers.js ${theirs.dtype} WASM ${theirs.threads} thread(s): ${line("theirs")}`);
  console.log(`ratio of medians: ${(median(all("ours")) / median(all("theirs"))).toFixed(2)}×`);
});

/**
 * The --alone protocol: each configuration in its own fresh page with one library only, rounds rotating which goes
 * first: ours and theirs with 1 and 2 (and --cores) threads (ours: the threaded build). Ends with each library's fastest configuration (the issue's latency target compares those).
 */
async function alone(first) {
  const cores = multiCore(CORES, await first.evaluate(() => navigator.hardwareConcurrency));
  const counts = [...new Set([2, cores])];
  const configs = [
    { which: "ours", name: "1 thread", o: { ...ours, workers: 1 } },
    ...counts.map((n) => ({ which: "ours", name: `${n} threads`, o: { ...ours, workers: 1, threads: n } })),
    { which: "theirs", name: "1 thread", o: { ...theirs, threads: 1 } },
    ...counts.map((n) => ({ which: "theirs", name: `${n} threads`, o: { ...theirs, threads: n } })),
  ].map((c) => ({ ...c, times: [] }));
  let tokens;
  for (let round = 0; round < ALONE; round++) {
    for (let j = 0; j < configs.length; j++) {
      const c = configs[(j + round) % configs.length];
      console.error(`round ${round + 1}: ${c.which}, ${c.name}`); // progress, on stderr
      const p = await first.context().browser().newPage();
      p.on("pageerror", (e) => console.error(`${c.which}, ${c.name}: an uncaught error in the page: ${e}`));
      await p.goto(first.url());
      await p.waitForFunction(() => window.ready === true);
      c.build = await p.evaluate(({ which, o }) => window.load(which, o), c);
      // The kernel's dot-product form (the workers run the same one): on the instance in the page.
      const dot = OURS === "q8" && c.which === "ours" ? await p.evaluate(() => window.q8DotForm()) : null;
      if (dot) c.build += `, ${dot} dot`;
      tokens ??= (await p.evaluate((t) => window.tokenCounts(t), TEXTS))[0];
      await warmUp(p, [c.which], TEXTS, WARMUP_MS);
      for (let i = 0; i < Math.ceil(RUNS / 2 / ALONE); i++) c.times.push((await timeEmbed(p, c.which, TEXTS)).ms);
      await p.close();
    }
  }
  console.log(`${MODEL.name}, one sentence, ${tokens} tokens, each configuration alone in its page (${ALONE} rounds)`);
  for (const c of configs) {
    c.median = median(c.times);
    const lib = c.which === "ours" ? `bertgpu ${OURS} CPU ${c.build}` : `transformers.js ${theirs.dtype} WASM`;
    console.log(`${lib}, ${c.name}: ${c.median.toFixed(1)} ms (min ${Math.min(...c.times).toFixed(1)}; ${c.times.length} runs)`);
  }
  const best = (w) => configs.filter((c) => c.which === w).reduce((a, b) => (b.median < a.median ? b : a));
  const [o, t] = [best("ours"), best("theirs")];
  console.log(`fastest: bertgpu ${o.name} ${o.median.toFixed(1)} ms, transformers.js ${t.name} ${t.median.toFixed(1)} ms: `
    + `${(o.median / t.median).toFixed(2)}×`);
}
