// Scaling of the threaded build: the same model on 1 thread (the single-threaded SIMD128 build) and on n threads
// (the threaded build), both loaded in one cross-origin isolated page, their calls alternating so that the machine's
// drift hits both alike; medians. Workloads as bench/browser.mjs's: (a) 1 × 12 tokens, (b) 8 × 128, (c) 32 × 32.
// From the repository root, after bench/browser.sh has prepared pkg/ and the GGUF:
//
//   node bench/threads.mjs [--cores n] [--reps 9] [--model f32|q8]
//
// Prints, per workload, the two medians, the speed-up and the scaling efficiency (speed-up / n; the target
// is ≥ 0.8).
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

await withBenchPage({ isolated: true }, async (page) => {
  const cores = await page.evaluate(() => navigator.hardwareConcurrency);
  const n = multiCore(arg("cores", null), cores);
  await page.evaluate((s) => window.load("ours", { source: s, device: "cpu" }), SOURCE); // for makeTexts' counts
  const workloads = [["(a) 1 × short", 1, 12], ["(b) 8 × 128", 8, 128], ["(c) 32 × 32", 32, 32]];
  const texts = [];
  for (const [, count, tokens] of workloads) texts.push((await makeTexts(page, count, tokens)).map((t) => t.text));
  const out = await page.evaluate(async ({ source, n, texts, reps }) => {
    const { Bert } = await import("/pkg/index.js");
    const one = await Bert.load(source, { device: "cpu", threads: 1, simd: "simd128", cache: false });
    const many = await Bert.load(source, { device: "cpu", threads: n, cache: false });
    if (many.threads !== n) throw new Error(`the threaded build did not start: ${many.threadsReason}`);
    const time = async (bert, t) => {
      const t0 = performance.now();
      await bert.embed(t, { batchSize: t.length });
      return performance.now() - t0;
    };
    // Warm-up: V8 tiers the hot wasm up over the first seconds of calls.
    for (const t0 = performance.now(); performance.now() - t0 < 3000;) {
      await time(one, texts[0]);
      await time(many, texts[0]);
    }
    const rows = [];
    for (const t of texts) {
      const ms = { one: [], many: [] };
      const r = t.length === 1 ? reps * 3 : reps;
      for (let i = 0; i <= r; i++) {
        for (const which of i % 2 ? ["many", "one"] : ["one", "many"]) {
          const dt = await time(which === "one" ? one : many, t);
          if (i > 0) ms[which].push(dt);
        }
      }
      rows.push(ms);
    }
    return { rows, userAgent: navigator.userAgent };
  }, { source: SOURCE, n, texts, reps: REPS });
  console.log(`Chromium ${out.userAgent.match(/Chrome\/[\d.]+/)?.[0]}, ${cores} cores, model ${MODEL}, ${n} threads`);
  console.log("");
  console.log(`| workload | 1 thread ms (min–max) | ${n} threads ms (min–max) | speed-up | efficiency (speed-up / ${n}) |`);
  console.log("|---|---|---|---|---|");
  for (const [i, [name]] of workloads.entries()) {
    const { one, many } = out.rows[i];
    const [a, b] = [median(one), median(many)];
    const f = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
    console.log(`| ${name} | ${f(a)} (${f(Math.min(...one))}–${f(Math.max(...one))}) | ${f(b)} `
      + `(${f(Math.min(...many))}–${f(Math.max(...many))}) | ${(a / b).toFixed(2)}× | ${(a / b / n).toFixed(2)} |`);
  }
});
