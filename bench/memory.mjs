// Memory of bertgpu against transformers.js (issue 29), each library alone in a fresh headless Chromium: the
// proportional set size (Pss, /proc/PID/smaps_rollup) of all the browser's processes, sampled every 100 ms; the peak
// during `Bert.load` (their `pipeline`) + 3 calls each of 1 × 12, 8 × 128 and 32 × 32 tokens, minus the same page
// before loading. Rows: wasm f32, wasm 8-bit (our q8_0 GGUF / their int8 ONNX, as bench/browser.mjs pairs them), WebGPU
// (SwiftShader) f32 and 8-bit. Prints a Markdown table, the Pss of each kind of process at the peak and at the
// marks (files fetched, load done, calls done), and what our page reports of itself (wasm memory, GPU buffers).
// Run it through bench/browser.sh's preparation (the ONNX export, the GGUF, bench/node_modules), then:
//
//   node bench/memory.mjs [--rows wasm-f32,wasm-8bit,webgpu-f32,webgpu-8bit] [--libs ours,theirs]
//                         [--cache on|off|warm] [--progress on|off] [--growth N] [--growth-rows wasm-f32,...]
//                         [--gpu-calls 3] [--interval-ms 100] [--threads 1] [--workers 1] [--json out.json]
//
// --cache: each library's default is on (the downloads go to the Cache API: what a new user gets); off measures
// without that copy; warm measures a returning user's load, from the Cache API (a page of the same browser loaded
// the model once and was closed before the measured page opened). --growth N: after the peak run, N more calls of
// 1 × 12 tokens in the same page; reports the peak over calls 1–100 against the peak over the last 100 (the issue's
// "no growth": 10,000 calls within 2%). Only on --growth-rows (default: the wasm rows; the WebGPU rows are slow on
// SwiftShader, theirs 2 s a sentence). --progress off: our page calls `Bert.load` without an onProgress (the plain
// call, as a page that shows no progress bar makes it; a first load then lets the browser write the weights into the
// cache itself); on (the default) passes one, which also marks when each file is fetched. --threads N: our CPU rows
// load the threaded build with N threads (the page is cross-origin isolated; 1, the default, loads a
// single-threaded build); --workers N: N copies of our model, one in each of N workers (their wasm stays at 1 thread).
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { ROOT, ARGS, CHROMIUM } from "../tests/browser/harness.mjs";
import { ISOLATION_HEADERS, serve } from "../www/serve.mjs";
import { makeTexts } from "./harness.mjs";
import { forgetKinds, sample } from "./pss.mjs";

const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : dflt;
};
const ROWS = arg("rows", "wasm-f32,wasm-8bit,webgpu-f32,webgpu-8bit").split(",");
const LIBS = arg("libs", "ours,theirs").split(",");
const CACHE = arg("cache", "on");
/** Whether our page passes `onProgress` to `Bert.load` (off: the plain call, which caches the weights without a copy). */
const PROGRESS = arg("progress", "on");
const GROWTH = Number(arg("growth", 0));
const GROWTH_ROWS = arg("growth-rows", "wasm-f32,wasm-8bit").split(",");
const INTERVAL_MS = Number(arg("interval-ms", 100));
/** Calls of each workload: 3; on the WebGPU rows --gpu-calls (SwiftShader: transformers.js takes about a minute a call). */
const GPU_CALLS = Number(arg("gpu-calls", 3));
const JSON_OUT = arg("json", null);
/** Our CPU rows' threads (the threaded build) and workers (copies of the model). */
const THREADS = Number(arg("threads", 1));
const WORKERS = Number(arg("workers", 1));
if (!["on", "off", "warm"].includes(CACHE) || !["on", "off"].includes(PROGRESS) || !(GROWTH >= 0)
  || !(INTERVAL_MS > 0) || !(GPU_CALLS >= 1) || !(THREADS >= 1) || !(WORKERS >= 1)) {
  console.error("usage: node bench/memory.mjs [--rows ...] [--libs ours,theirs] [--cache on|off|warm] "
    + "[--progress on|off] [--growth N] [--growth-rows ...] [--gpu-calls 3] [--interval-ms 100] [--threads 1] "
    + "[--workers 1] [--json out.json]");
  process.exit(2);
}

const MIB = 1024 * 1024;
const OURS_F32 = "/models/all-MiniLM-L6-v2/";
const OURS_Q8 = "/bench/models/all-MiniLM-L6-v2.q8_0.gguf";
const FILES = {
  f32: { ours: "models/all-MiniLM-L6-v2/model.safetensors", theirs: "bench/models/all-MiniLM-L6-v2/onnx/model.onnx" },
  "8bit": { ours: OURS_Q8.slice(1), theirs: "bench/models/all-MiniLM-L6-v2/onnx/model_quantized.onnx" },
};
const size = (p) => fs.statSync(path.join(ROOT, p)).size;

/** The rows: what each library loads. Their wasm runs 1 thread, as the first rows of bench/browser.mjs. */
const cache = CACHE !== "off";
const progress = PROGRESS === "on";
const ROW_DEFS = {
  "wasm-f32": { label: "wasm, f32", weights: "f32",
    ours: { source: OURS_F32, device: "cpu", cache, progress, threads: THREADS, workers: WORKERS },
    theirs: { dtype: "fp32", device: "wasm", threads: 1, cache } },
  "wasm-8bit": { label: "wasm, 8-bit", weights: "8bit",
    ours: { source: OURS_Q8, device: "cpu", cache, progress, threads: THREADS, workers: WORKERS },
    theirs: { dtype: "q8", device: "wasm", threads: 1, cache } },
  "webgpu-f32": { label: "WebGPU (SwiftShader), f32", weights: "f32",
    ours: { source: OURS_F32, device: "webgpu", cache, progress },
    theirs: { dtype: "fp32", device: "webgpu", cache } },
  "webgpu-8bit": { label: "WebGPU (SwiftShader), 8-bit", weights: "8bit",
    ours: { source: OURS_Q8, device: "webgpu", cache, progress },
    theirs: { dtype: "q8", device: "webgpu", cache } },
};
for (const r of ROWS) if (!ROW_DEFS[r]) throw new Error(`--rows: unknown row ${r} (${Object.keys(ROW_DEFS).join(", ")})`);

/** Samples every INTERVAL_MS until stopped: `{ samples, stop() }`. */
function sampler() {
  const samples = [sample()];
  const timer = setInterval(() => samples.push(sample()), INTERVAL_MS);
  return { samples, stop: () => clearInterval(timer) };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const peakOf = (samples) => samples.reduce((a, s) => (s.total > a.total ? s : a), samples[0]);
/** The last sample at or before time `t` (the first one if none). */
const at = (samples, t) => samples.filter((s) => s.t <= t).at(-1) ?? samples[0];

// --- one run: a library alone in a fresh browser -----------------------------------------------------------------

async function run(site, row, which, workloads) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-memory-"));
  forgetKinds();
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS });
  try {
    if (CACHE === "warm") {
      // A returning user: this browser's Cache API already holds the files (each library's own cache).
      const first = await context.newPage();
      await first.goto(`${site.url}bench/page.html`);
      await first.waitForFunction(() => window.ready === true, null, { timeout: 30_000 });
      await first.evaluate(({ which, opts }) => window.load(which, opts), { which, opts: ROW_DEFS[row][which] });
      await first.close();
    }
    const page = await context.newPage();
    page.on("console", (m) => { if (m.type() === "error") console.error(`page: ${m.text()}`); });
    page.on("pageerror", (e) => console.error(`page: uncaught ${e.message}`));
    await page.goto(`${site.url}bench/page.html`);
    await page.waitForFunction(() => window.ready === true, null, { timeout: 30_000 });
    // The page before loading: settled for 2 s, then the median of 1 s of samples.
    await sleep(2000);
    const before = [];
    for (let i = 0; i < 10; i++, await sleep(INTERVAL_MS)) before.push(sample());
    const baseline = median(before.map((s) => s.total));
    const baselineAnon = median(before.map((s) => s.anon));
    const baselineByKind = before.at(-1).byKind;

    const s = sampler();
    const t0 = Date.now();
    const opts = ROW_DEFS[row][which];
    const calls = opts.device === "webgpu" ? GPU_CALLS : 3;
    const inPage = await page.evaluate(async ({ which, opts, workloads, calls }) => {
      const mark = (what) => window.marks.push({ what, t: Date.now() });
      mark("load start");
      await window.load(which, opts);
      mark("loaded");
      const afterLoad = await window.memoryInfo();
      for (const w of workloads) {
        for (let i = 0; i < calls; i++) await window.embed(which, w.texts);
        mark(`${calls} × ${w.name}`);
      }
      return { marks: window.marks, afterLoad, afterCalls: await window.memoryInfo() };
    }, { which, opts, workloads, calls });
    await sleep(500); // what the last call left, once it settles
    const peakRun = { samples: s.samples.slice(), t1: Date.now() };

    let growth = null;
    if (GROWTH > 0 && GROWTH_ROWS.includes(row)) {
      // What the page reads of itself (JS heap, wasm memory, GPU buffers) at call 100 and at the end, to tell a
      // growth in the page from one in the GPU process.
      const marks = await page.evaluate(async ({ which, texts, n }) => {
        const out = [];
        for (let i = 1; i <= n; i++) {
          await window.embed(which, texts);
          if (i === 100 || i === n - 100 || i === n) out.push({ i, t: Date.now(), info: await window.memoryInfo() });
        }
        return out;
      }, { which, texts: workloads[0].texts, n: GROWTH });
      await sleep(500);
      const t100 = marks.find((m) => m.i === 100).t, tLast100 = marks.find((m) => m.i === GROWTH - 100)?.t ?? t100;
      const tEnd = marks.at(-1).t;
      const win = (a, b) => s.samples.filter((x) => x.t > a && x.t <= b);
      const first = peakOf(win(peakRun.t1, t100)), last = peakOf(win(tLast100, tEnd + 500));
      growth = { calls: GROWTH, first100: first.total - baseline, last100: last.total - baseline,
        ratio: (last.total - baseline) / (first.total - baseline), firstByKind: first.byKind, lastByKind: last.byKind,
        info100: marks.find((m) => m.i === 100).info, endInfo: marks.at(-1).info };
    }
    s.stop();

    const samples = peakRun.samples;
    const peak = peakOf(samples);
    const marks = inPage.marks.filter((m) => m.t >= t0 - 1000).map((m) => {
      const x = at(samples, m.t);
      return { what: m.what, ms: m.t - t0, total: x.total - baseline, byKind: x.byKind };
    });
    return { row, which, calls, baseline, baselineByKind, peak: peak.total - baseline,
      peakAnon: Math.max(...samples.map((x) => x.anon)) - baselineAnon, peakAt: peak.t - t0, peakByKind: peak.byKind,
      samples: samples.length, seconds: (peakRun.t1 - t0) / 1000, marks, afterLoad: inPage.afterLoad,
      afterCalls: inPage.afterCalls, growth,
      series: samples.map((x) => [x.t - t0, Math.round((x.total - baseline) / 1024)]) };
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

// --- the texts: counted with our tokenizer in a browser of their own, before any measured run ----------------------

async function texts(site) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-memory-"));
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS });
  try {
    const page = await context.newPage();
    await page.goto(`${site.url}bench/page.html`);
    await page.waitForFunction(() => window.ready === true, null, { timeout: 30_000 });
    await page.evaluate((s) => window.load("ours", { source: s, device: "cpu" }), OURS_F32);
    const out = [];
    for (const [name, n, tokens] of [["1 × 12", 1, 12], ["8 × 128", 8, 128], ["32 × 32", 32, 32]]) {
      const t = await makeTexts(page, n, tokens);
      out.push({ name, texts: t.map((x) => x.text), tokens: t.map((x) => x.count) });
      console.error(`${name}: tokens ${Math.min(...out.at(-1).tokens)}–${Math.max(...out.at(-1).tokens)}`);
    }
    return out;
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

// --- the report ------------------------------------------------------------------------------------------------------

const mib = (b) => (b == null ? "–" : (b / MIB).toFixed(1));

function report(results, env) {
  const lines = [`\`node bench/memory.mjs ${argv.join(" ")}\`; ${env}`, "",
    "| device / weights | file (ours) | transformers.js | bertgpu | bertgpu ÷ file | target 1.5 × file + 48 | bertgpu ÷ transformers.js | without file-backed pages: theirs / ours |",
    "|---|---|---|---|---|---|---|---|"];
  for (const row of ROWS) {
    const def = ROW_DEFS[row];
    const file = size(FILES[def.weights].ours);
    const get = (w) => results.find((r) => r.row === row && r.which === w);
    const ours = get("ours"), theirs = get("theirs");
    const target = 1.5 * file + 48 * MIB;
    lines.push(`| ${def.label} | ${mib(file)} MiB | ${theirs ? `${mib(theirs.peak)} MiB` : "–"} | `
      + `${ours ? `${mib(ours.peak)} MiB` : "–"} | ${ours ? `${(ours.peak / file).toFixed(1)}×` : "–"} | `
      + `${mib(target)} MiB${ours ? (ours.peak <= target ? " (met)" : " (**not met**)") : ""} | `
      + `${ours && theirs ? `${(ours.peak / theirs.peak).toFixed(2)}×${ours.peak <= 0.5 * theirs.peak ? " (met)" : " (**not met**)"}` : "–"} | `
      + `${mib(theirs?.peakAnon)} / ${mib(ours?.peakAnon)} MiB |`);
  }
  lines.push("", "Pss of each kind of process at the peak, minus the same kind before loading (MiB):", "");
  const allKinds = [...new Set(results.flatMap((r) => Object.keys(r.peakByKind)))].sort();
  lines.push(`| run | peak at (s) | ${allKinds.join(" | ")} |`, `|---|---|${allKinds.map(() => "---").join("|")}|`);
  for (const r of results) {
    lines.push(`| ${ROW_DEFS[r.row].label}, ${r.which} | ${(r.peakAt / 1000).toFixed(1)} | `
      + `${allKinds.map((k) => mib((r.peakByKind[k] ?? 0) - (r.baselineByKind[k] ?? 0))).join(" | ")} |`);
  }
  lines.push("", "Pss minus the baseline at the page's marks (MiB; renderer / gpu-process in brackets):", "");
  for (const r of results) {
    const d = (m, k) => mib((m.byKind[k] ?? 0) - (r.baselineByKind[k] ?? 0));
    lines.push(`- ${ROW_DEFS[r.row].label}, ${r.which}: ${r.marks.map((m) => `${m.what} @${(m.ms / 1000).toFixed(1)} s `
      + `${mib(m.total)} (${d(m, "renderer")} / ${d(m, "gpu-process")})`).join("; ")}`);
  }
  lines.push("", "What our page reports of itself (MiB): wasm memory size (its high-water mark) and the bytes Rust holds,"
    + " after the load and after the calls; GPU buffers (weights, activation pool); the origin's storage (Cache API):", "");
  for (const r of results.filter((x) => x.which === "ours")) {
    const a = r.afterLoad, c = r.afterCalls;
    lines.push(`- ${ROW_DEFS[r.row].label}: wasm memory ${mib(a.wasm?.memoryBytes)} → ${mib(c.wasm?.memoryBytes)}, `
      + `live ${mib(a.wasm?.liveBytes)} → ${mib(c.wasm?.liveBytes)}; GPU weights ${mib(c.gpu?.weightBytes)}, pool `
      + `${mib(a.gpu?.poolBytes)} → ${mib(c.gpu?.poolBytes)} (${c.gpu?.poolBuffers ?? "–"} buffers); storage `
      + `${mib(c.storage)}; JS heap ${mib(c.jsHeap)}; modules ${c.modules.map((m) => `${m.name} ${mib(m.bytes)}`).join(", ")}`);
  }
  for (const r of results.filter((x) => x.which === "theirs")) {
    lines.push(`- (transformers.js) ${ROW_DEFS[r.row].label}: storage ${mib(r.afterCalls.storage)}; JS heap `
      + `${mib(r.afterCalls.jsHeap)}; modules ${r.afterCalls.modules.map((m) => `${m.name} ${mib(m.bytes)}`).join(", ")}`);
  }
  const grown = results.filter((r) => r.growth);
  if (grown.length) {
    lines.push("", `No growth: ${GROWTH} calls of 1 × 12 tokens after the peak run; the peak over calls 1–100 against `
      + "the peak over the last 100, both minus the page before loading:", "",
      "| run | calls 1–100 | last 100 | end ÷ start | grew ≤ 2% |", "|---|---|---|---|---|");
    for (const r of grown) {
      const g = r.growth;
      lines.push(`| ${ROW_DEFS[r.row].label}, ${r.which} | ${mib(g.first100)} MiB | ${mib(g.last100)} MiB | `
        + `${g.ratio.toFixed(3)} | ${g.ratio <= 1.02 ? "yes" : "**no**"} |`);
    }
    lines.push("", "Where it grew: each kind of process at the two windows' peaks (MiB), and what the page reads of "
      + "itself at call 100 and at the end (JS heap; wasm memory's size; GPU pool and weight buffers):", "");
    for (const r of grown) {
      const g = r.growth;
      const byKind = Object.keys({ ...g.firstByKind, ...g.lastByKind }).sort()
        .map((k) => `${k} ${mib(g.firstByKind[k] ?? 0)} → ${mib(g.lastByKind[k] ?? 0)}`).join(", ");
      const info = (i) => `JS heap ${mib(i.jsHeap ?? 0)}, wasm ${mib(i.wasm?.memoryBytes ?? 0)} `
        + `(live ${mib(i.wasm?.liveBytes ?? 0)})`
        + (i.gpu ? `, GPU pool ${i.gpu.poolBuffers} buffers ${mib(i.gpu.poolBytes)}` : "");
      lines.push(`- ${ROW_DEFS[r.row].label}, ${r.which}: ${byKind}; page at call 100: ${info(g.info100)}; `
        + `at the end: ${info(g.endInfo)}`);
    }
  }
  return lines.join("\n");
}

async function main() {
  // What the rows and libraries asked for need (ours alone needs no transformers.js nor ONNX export).
  const needs = new Set(["pkg/wasm/bertgpu_bg.wasm"]);
  for (const row of ROWS) {
    for (const which of LIBS) {
      needs.add(FILES[ROW_DEFS[row].weights][which]);
      if (which === "theirs") needs.add("bench/node_modules/@huggingface/transformers/package.json");
    }
  }
  for (const need of needs) {
    if (!fs.existsSync(path.join(ROOT, need))) throw new Error(`${need} is missing: run bench/browser.sh once`);
  }
  // Cross-origin isolated, as bench/browser.mjs (their wasm could use threads; here it runs 1).
  const site = await serve(ROOT, { headers: ISOLATION_HEADERS });
  const results = [];
  const started = new Date();
  try {
    const workloads = await texts(site);
    for (const row of ROWS) {
      for (const which of LIBS) {
        const r = await run(site, row, which, workloads);
        results.push(r);
        if (JSON_OUT) fs.writeFileSync(JSON_OUT, JSON.stringify({ results }, null, 1)); // so far
        console.error(`${ROW_DEFS[row].label}, ${which}: peak ${mib(r.peak)} MiB at ${(r.peakAt / 1000).toFixed(1)} s `
          + `(baseline ${mib(r.baseline)} MiB, ${r.samples} samples over ${r.seconds.toFixed(0)} s)`
          + (r.growth ? `; growth ${mib(r.growth.first100)} → ${mib(r.growth.last100)} MiB` : ""));
      }
    }
  } finally {
    await site.close();
  }
  const env = `${started.toISOString().slice(0, 16)} UTC, ${os.cpus().length} cores (${os.cpus()[0]?.model}), `
    + `${os.loadavg()[0].toFixed(1)} load average at the end, Chromium ${CHROMIUM}, cache ${CACHE}, progress ${PROGRESS}`;
  if (JSON_OUT) fs.writeFileSync(JSON_OUT, JSON.stringify({ env, results }, null, 1));
  console.log(report(results, env));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
