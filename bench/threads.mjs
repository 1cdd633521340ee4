// Scaling of the threaded build: the same model on 1 thread (the single-threaded SIMD128 build) and on n threads
// (the threaded build), and optionally on 1 thread of the relaxed-SIMD build (`--with relaxed`) and on n
// data-parallel workers (`--with workers`: `bertgpu/worker`'s n copies, each on the single-threaded build the
// browser prefers: relaxed SIMD in Chromium), and on n threads of the threaded build inside one worker
// (`--with worker-threads`: `bertgpu/worker`, workers: 1, threads: n; a worker, not the page's main thread, calls
// the pool), all
// loaded in one cross-origin isolated page, their calls taken in turn (the order rotating each round) so that the
// machine's drift hits all alike; medians. Workloads as bench/browser.mjs's: (a) 1 × 12 tokens, (b) 8 × 128,
// (c) 32 × 32. From the repository root, after bench/browser.sh has prepared pkg/ and the GGUF:
//
//   node bench/threads.mjs [--cores n] [--reps 9] [--model f32|q8] [--with relaxed,workers,worker-threads]
//
// Prints, per workload, each configuration's median, the speed-up over 1 thread and the scaling efficiency
// (speed-up / n; the issue's target is ≥ 0.8).
import { makeTexts, median, multiCore, withBenchPage } from "./harness.mjs";

const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : dflt;
};
const REPS = Number(arg("reps", 9));
const MODEL = arg("model", "f32");
if (!["f32", "q8"].includes(MODEL)) {
  console.error("--model: f32 or q8");
  process.exit(2);
}
const SOURCE = MODEL === "f32" ? "/models/all-MiniLM-L6-v2/" : "/bench/models/all-MiniLM-L6-v2.q8_0.gguf";
const WITH = arg("with", "").split(",").filter(Boolean);
if (WITH.some((w) => !["relaxed", "workers", "worker-threads"].includes(w))) {
  console.error("--with: relaxed, workers and/or worker-threads");
  process.exit(2);
}

await withBenchPage({ isolated: true }, async (page) => {
  const cores = await page.evaluate(() => navigator.hardwareConcurrency);
  const n = multiCore(arg("cores", null), cores);
  await page.evaluate((s) => window.load("ours", { source: s, device: "cpu" }), SOURCE); // for makeTexts' counts
  const workloads = [["(a) 1 × short", 1, 12], ["(b) 8 × 128", 8, 128], ["(c) 32 × 32", 32, 32]];
  const texts = [];
  for (const [, count, tokens] of workloads) texts.push((await makeTexts(page, count, tokens)).map((t) => t.text));
  const out = await page.evaluate(async ({ source, n, texts, reps, extra }) => {
    const { Bert } = await import("/pkg/index.js");
    const configs = [["1 thread", await Bert.load(source, { device: "cpu", threads: 1, simd: "simd128", cache: false })]];
    const many = await Bert.load(source, { device: "cpu", threads: n, cache: false });
    if (many.threads !== n) throw new Error(`the threaded build did not start: ${many.threadsReason}`);
    configs.push([`${n} threads`, many]);
    if (extra.includes("relaxed")) {
      configs.push(["1 thread, relaxed SIMD", await Bert.load(source, { device: "cpu", threads: 1, simd: "relaxed", cache: false })]);
    }
    if (extra.includes("workers")) {
      const { Bert: Workers } = await import("/pkg/worker.js");
      configs.push([`${n} workers`, await Workers.load(source, { device: "cpu", workers: n, cache: true })]);
    }
    if (extra.includes("worker-threads")) {
      const { Bert: Workers } = await import("/pkg/worker.js");
      const inWorker = await Workers.load(source, { device: "cpu", threads: n, cache: false });
      if (inWorker.threads !== n) throw new Error(`the worker's threaded build did not start: ${inWorker.threadsReason}`);
      configs.push([`${n} threads in a worker`, inWorker]);
    }
    const time = async (bert, t) => {
      const t0 = performance.now();
      await bert.embed(t, { batchSize: t.length });
      return performance.now() - t0;
    };
    // Warm-up: V8 tiers the hot wasm up over the first seconds of calls.
    for (const t0 = performance.now(); performance.now() - t0 < 3000;) {
      for (const [, bert] of configs) await time(bert, texts[0]);
    }
    const rows = [];
    for (const t of texts) {
      const ms = configs.map(() => []);
      const r = t.length === 1 ? reps * 3 : reps;
      for (let i = 0; i <= r; i++) {
        for (let j = 0; j < configs.length; j++) {
          const k = (i + j) % configs.length;
          const dt = await time(configs[k][1], t);
          if (i > 0) ms[k].push(dt);
        }
      }
      rows.push(ms);
    }
    return { names: configs.map(([name]) => name), rows, userAgent: navigator.userAgent };
  }, { source: SOURCE, n, texts, reps: REPS, extra: WITH });
  console.log(`Chromium ${out.userAgent.match(/Chrome\/[\d.]+/)?.[0]}, ${cores} cores, model ${MODEL}, ${n} threads`);
  console.log("");
  const others = out.names.slice(1);
  console.log(`| workload | 1 thread ms (min–max) | ${others.map((o) => `${o} ms (min–max) | speed-up | efficiency`).join(" | ")} |`);
  console.log(`|---|---|${others.map(() => "---|---|---|").join("")}`);
  const f = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
  const cell = (v) => `${f(median(v))} (${f(Math.min(...v))}–${f(Math.max(...v))})`;
  for (const [i, [name]] of workloads.entries()) {
    const [one, ...rest] = out.rows[i];
    const a = median(one);
    const cols = rest.map((v) => `${cell(v)} | ${(a / median(v)).toFixed(2)}× | ${(a / median(v) / n).toFixed(2)}`);
    console.log(`| ${name} | ${cell(one)} | ${cols.join(" | ")} |`);
  }
});
