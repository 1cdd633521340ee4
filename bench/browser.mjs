// bertgpu vs transformers.js (@huggingface/transformers, pinned in bench/package.json), side by side in one headless
// Chromium launch, on the same model (all-MiniLM-L6-v2 unless --model: our folder / q8_0 GGUF, their ONNX export made
// by bench/export_onnx.py), the same texts, mean pooling + normalize, runs alternating. Prints a Markdown table of
// medians, spreads and ratios. Run it through bench/browser.sh, which prepares what it needs.
//
//   node bench/browser.mjs [--reps 7] [--latency-reps 25] [--gpu-reps 3] [--cold 3] [--warmup-ms 5000]
//                          [--only cpu|webgpu] [--cores n] [--json out.json] [--model all-MiniLM-L6-v2]
//                          [--configs 1,5] [--workloads abc]
//
// --model NAME: the model both libraries run (benchModel in bench/harness.mjs says where each finds it). --configs:
// only these rows of the configuration list below (1-based, in its order: 1–4 f32 on the CPU, 5–8 8-bit, 9 WebGPU),
// --workloads: only these of (a) 1 × short, (b) 8 × 128, (c) 32 × 32 (a base-size model on 2 cores: keep runs short).
//
// --latency-reps: repetitions of workload (a) on the CPU (one sentence takes milliseconds, and its run-to-run spread
// is wide: a median of few runs moves by 2×). --cores: our workers, our threaded build's threads and their threads in
// the multi-core rows (default: navigator.hardwareConcurrency, at least 2, at most 4). The other rows run ours on one
// thread.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { ROOT, ARGS, CHROMIUM, cosine } from "../tests/browser/harness.mjs";
import { ISOLATION_HEADERS, serve } from "../www/serve.mjs";
import { benchModel, DEFAULT_MODEL, downloaded, makeTexts, median, multiCore, timeEmbed, warmUp } from "./harness.mjs";

const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : dflt;
};
const REPS = Number(arg("reps", 7));
const LATENCY_REPS = Number(arg("latency-reps", 25));
const GPU_REPS = Number(arg("gpu-reps", 3));
const COLD = Number(arg("cold", 3));
/** Per configuration, both libraries are called in turn on (a) for this long before anything is timed (warmUp). */
const WARMUP_MS = Number(arg("warmup-ms", 5000));
const ONLY = arg("only", null);
/** Workers and threads of the multi-core rows (default: the cores the browser reports, 2 to 4; multiCore). */
const CORES = arg("cores", null);
multiCore(CORES, 2); // a bad value fails here, before the browser starts
const JSON_OUT = arg("json", null);
const MODEL = benchModel(arg("model", DEFAULT_MODEL));
const CONFIGS = arg("configs", null)?.split(",").map(Number) ?? null;
const WORKLOADS = arg("workloads", "abc");
if (CONFIGS?.some((i) => !(Number.isInteger(i) && i >= 1 && i <= 9)) || !/^[abc]+$/.test(WORKLOADS)) {
  console.error("--configs: numbers from 1 to 9, comma-separated; --workloads: letters of abc");
  process.exit(2);
}
/** f32 against f32: two correct implementations of the same network differ by float rounding only. */
const MIN_AGREEMENT = 0.999;

const OURS_F32 = MODEL.f32;
const OURS_Q8 = MODEL.q8;
/** Their options' model: the folder of /bench/models/ with the ONNX export. */
const THEIRS = MODEL.theirs;

async function main() {
  for (const need of ["pkg/wasm/bertgpu_bg.wasm", "bench/node_modules/@huggingface/transformers/package.json",
    ...MODEL.need]) {
    if (!fs.existsSync(path.join(ROOT, need))) throw new Error(`${need} is missing: run bench/browser.sh --model ${MODEL.name}`);
  }
  // Cross-origin isolated, so both libraries may use wasm threads.
  const site = await serve(ROOT, { headers: ISOLATION_HEADERS });
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-bench-"));
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS });
  const results = { model: MODEL.name, rows: [], cold: [], agreement: [], env: {} };
  try {
    const open = async () => {
      const page = await context.newPage();
      page.on("console", (m) => { if (m.type() === "error") console.error(`page: ${m.text()}`); });
      await page.goto(`${site.url}bench/page.html`);
      await page.waitForFunction(() => window.ready === true, null, { timeout: 30_000 });
      return page;
    };
    const page = await open();
    results.env = await page.evaluate(async () => {
      const a = await navigator.gpu?.requestAdapter();
      return { userAgent: navigator.userAgent, isolated: crossOriginIsolated, cores: navigator.hardwareConcurrency,
        adapter: a ? `${a.info.vendor} ${a.info.architecture} ${a.info.description}`.trim() : null,
        fallback: a ? a.info.isFallbackAdapter : null };
    });
    console.error(`environment: ${JSON.stringify(results.env)}`);

    // Our tokenizer for the workloads' token counts (the GGUF: a quarter of the f32 weights to fetch).
    await page.evaluate((s) => window.load("ours", { source: s, device: "cpu" }), OURS_Q8);
    results.env.q8Dot = await page.evaluate(() => window.q8DotForm());
    const short = await makeTexts(page, 1, 12);
    const workloads = [
      { name: "(a) 1 × short", latency: true, texts: short },
      { name: "(b) 8 × 128", texts: (await makeTexts(page, 8, 128)) },
      { name: "(c) 32 × 32", texts: (await makeTexts(page, 32, 32)) },
    ].filter((w) => WORKLOADS.includes(w.name[1]));
    for (const w of workloads) {
      w.tokens = w.texts.map((t) => t.count);
      w.texts = w.texts.map((t) => t.text);
      console.error(`${w.name}: tokens ${Math.min(...w.tokens)}–${Math.max(...w.tokens)}`);
    }

    // The multi-core rows use every core the browser reports, up to 4 (--cores): our workers or threads, theirs.
    const n = multiCore(CORES, results.env.cores);
    const f32 = { source: OURS_F32, device: "cpu" }, q8 = { source: OURS_Q8, device: "cpu" };
    const configs = [
      { device: "cpu", dtype: "f32", ours: f32, theirs: { dtype: "fp32", device: "wasm", threads: 1 }, label: "CPU (ours) vs WASM 1 thread (theirs)" },
      { device: "cpu", dtype: "f32", ours: f32, theirs: { dtype: "fp32", device: "wasm", threads: n }, label: `CPU (ours) vs WASM ${n} threads (theirs)` },
      { device: "cpu", dtype: "f32", ours: { ...f32, threads: n }, theirs: { dtype: "fp32", device: "wasm", threads: n }, label: `CPU ${n} threads, threaded build (ours) vs WASM ${n} threads (theirs)` },
      { device: "cpu", dtype: "f32", ours: { ...f32, workers: n }, theirs: { dtype: "fp32", device: "wasm", threads: n }, label: `CPU ${n} workers (ours) vs WASM ${n} threads (theirs)` },
      { device: "cpu", dtype: "8-bit", ours: q8, theirs: { dtype: "q8", device: "wasm", threads: 1 }, label: "CPU q8_0, relaxed-SIMD build (ours) vs WASM q8 1 thread (theirs)" },
      { device: "cpu", dtype: "8-bit", ours: { ...q8, simd: "simd128" }, theirs: { dtype: "q8", device: "wasm", threads: 1 }, label: "CPU q8_0, SIMD128 build (ours) vs WASM q8 1 thread (theirs)" },
      { device: "cpu", dtype: "8-bit", ours: { ...q8, threads: n }, theirs: { dtype: "q8", device: "wasm", threads: n }, label: `CPU q8_0 ${n} threads, threaded build (ours) vs WASM q8 ${n} threads (theirs)` },
      { device: "cpu", dtype: "8-bit", ours: { ...q8, workers: n }, theirs: { dtype: "q8", device: "wasm", threads: n }, label: `CPU q8_0 ${n} workers, relaxed-SIMD build (ours) vs WASM q8 ${n} threads (theirs)` },
      { device: "webgpu", dtype: "f32", ours: { source: OURS_F32, device: "webgpu" }, theirs: { dtype: "fp32", device: "webgpu" }, label: "WebGPU (both)" },
    ].map((c, i) => ({ ...c, n: i + 1, theirs: { ...c.theirs, model: THEIRS } }))
      .filter((c) => (!ONLY || c.device === ONLY) && (!CONFIGS || CONFIGS.includes(c.n)));

    for (const c of configs) {
      const p = await open();
      await p.evaluate(({ o, t }) => Promise.all([window.load("ours", o)]).then(() => window.load("theirs", t)),
        { o: c.ours, t: c.theirs });
      await warmUp(p, ["ours", "theirs"], [short[0].text], WARMUP_MS); // (a)'s text, whichever workloads run
      for (const w of workloads) {
        const reps = c.device === "webgpu" ? GPU_REPS : w.latency ? LATENCY_REPS : REPS;
        const times = { ours: [], theirs: [] };
        let agree = null;
        // One warm-up each (pipelines, allocations), then alternate so background load hits both alike.
        for (let r = 0; r <= reps; r++) {
          for (const which of r % 2 ? ["theirs", "ours"] : ["ours", "theirs"]) {
            const { ms, vectors } = await timeEmbed(p, which, w.texts);
            if (r > 0) times[which].push(ms);
            if (r === 0) (agree ??= {})[which] = vectors;
          }
        }
        const cos = Math.min(...agree.ours.map((v, i) => cosine(v, agree.theirs[i])));
        const row = { config: c.label, device: c.device, dtype: c.dtype, workload: w.name,
          ours: median(times.ours), theirs: median(times.theirs),
          oursSpread: [Math.min(...times.ours), Math.max(...times.ours)],
          theirsSpread: [Math.min(...times.theirs), Math.max(...times.theirs)], minCosine: cos, reps };
        row.speedup = row.theirs / row.ours;
        results.rows.push(row);
        console.error(`${c.label} ${w.name}: ours ${row.ours.toFixed(1)} ms, theirs ${row.theirs.toFixed(1)} ms, `
          + `×${row.speedup.toFixed(2)}, cos ${cos.toFixed(5)}`);
        if (c.dtype === "f32" && cos < MIN_AGREEMENT) {
          throw new Error(`${c.label} ${w.name}: the two disagree (min cosine ${cos} < ${MIN_AGREEMENT})`);
        }
      }
      await p.close();
    }

    // Cold start: a fresh page, nothing cached (cache: false / useBrowserCache: false, the server says no-store),
    // import + load + first result; what the page fetched is the download.
    if ((!ONLY || ONLY === "cpu") && COLD > 0) {
      const colds = [
        { which: "ours", label: "bertgpu f32 (CPU)", opts: { source: OURS_F32, device: "cpu" } },
        { which: "theirs", label: "transformers.js fp32 (WASM)", opts: { model: THEIRS, dtype: "fp32", device: "wasm", threads: 2 } },
        { which: "ours", label: `bertgpu f32 (CPU, threaded build, ${n} threads)`, opts: { source: OURS_F32, device: "cpu", threads: n } },
        { which: "ours", label: "bertgpu q8_0 (CPU)", opts: { source: OURS_Q8, device: "cpu" } },
        { which: "theirs", label: "transformers.js q8 (WASM)", opts: { model: THEIRS, dtype: "q8", device: "wasm", threads: 2 } },
      ];
      const times = colds.map(() => []);
      let bytes = colds.map(() => null);
      for (let r = 0; r < COLD; r++) {
        for (const [i, c] of colds.entries()) {
          site.requests.length = 0;
          const p = await open();
          const { ms } = await p.evaluate(({ which, opts }) => window.coldStart(which, opts), c);
          times[i].push(ms);
          bytes[i] = downloaded(site.requests);
          await p.close();
        }
      }
      results.cold = colds.map((c, i) => ({ label: c.label, ms: median(times[i]), spread: [Math.min(...times[i]),
        Math.max(...times[i])], ...bytes[i] }));
      for (const c of results.cold) console.error(`cold ${c.label}: ${c.ms.toFixed(0)} ms, code ${c.code}, weights ${c.weights}`);
    }
  } finally {
    await context.close();
    await site.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  if (JSON_OUT) fs.writeFileSync(JSON_OUT, JSON.stringify(results, null, 2));
  console.log(table(results));
}

function table(res) {
  const f = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
  const lines = [
    `${res.model}, Chromium: ${res.env.userAgent?.match(/Chrome\/[\d.]+/)?.[0]}, ${res.env.cores} cores, WebGPU adapter: `
      + `${res.env.adapter ?? "none"}${res.env.fallback ? " (fallback adapter)" : ""}, cross-origin isolated: ${res.env.isolated}`
      + `, Q8_0 kernel's relaxed dot product: ${res.env.q8Dot ?? "not run (no relaxed SIMD)"}`,
    "",
    "| backends | workload | bertgpu ms (min–max) | transformers.js ms (min–max) | speed-up | min cosine |",
    "|---|---|---|---|---|---|",
  ];
  for (const r of res.rows) {
    lines.push(`| ${r.config} | ${r.workload} | ${f(r.ours)} (${f(r.oursSpread[0])}–${f(r.oursSpread[1])}) | `
      + `${f(r.theirs)} (${f(r.theirsSpread[0])}–${f(r.theirsSpread[1])}) | ${r.speedup.toFixed(2)}× | ${r.minCosine.toFixed(5)} |`);
  }
  // The latency target compares each library's fastest configuration on (a).
  const latency = res.rows.filter((r) => r.workload.startsWith("(a)"));
  if (latency.length) {
    const best = (key) => latency.reduce((a, r) => (r[key] < a[key] ? r : a));
    const [o, t] = [best("ours"), best("theirs")];
    const side = (config, i) => (config.split(" vs ")[i] ?? config).replace(/ \((ours|theirs)\)/, "");
    lines.push("", `(a) latency, each library's fastest configuration: bertgpu ${f(o.ours)} ms (${side(o.config, 0)}), `
      + `transformers.js ${f(t.theirs)} ms (${side(t.config, 1)}): ${(o.ours / t.theirs).toFixed(2)}×`);
  }
  if (res.cold.length) {
    lines.push("", "| cold start (import + load + first result, nothing cached) | ms (min–max) | code bytes | weight bytes |",
      "|---|---|---|---|");
    for (const c of res.cold) {
      lines.push(`| ${c.label} | ${f(c.ms)} (${f(c.spread[0])}–${f(c.spread[1])}) | ${c.code.toLocaleString("en")} | `
        + `${c.weights.toLocaleString("en")} |`);
    }
  }
  return lines.join("\n");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
