// What WebGPU costs the browser's processes on SwiftShader (issue 29): each case in a fresh headless Chromium, the
// Pss of each kind of process (bench/pss.mjs) 2 s after the case, and after a forced collection, minus the page
// before it. Cases:
//   device            a WebGPU device alone (the adapter's limits, as our load asks)
//   buffers:HOW       ten 4 MiB storage buffers: HOW = none (created only), write (one writeBuffer each), write1m (in
//                     1 MiB writes), wait (each write followed by onSubmittedWorkDone), mapped (mapped at creation)
//   ours:DEVICE:SRC   our Bert.load (cache off) of SRC on DEVICE; also counts the compute pipelines it creates
// --trace prints the GPU process's Pss every 20 ms, with the moments pipelines are created. From the repository root,
// with pkg/ built and the 8-bit GGUF made (bench/browser.sh's preparation):
//
//   node bench/gpu_process.mjs device buffers:none buffers:write buffers:write1m buffers:wait buffers:mapped \
//     ours:webgpu:/bench/models/all-MiniLM-L6-v2.q8_0.gguf [--trace]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { ROOT, ARGS, CHROMIUM } from "../tests/browser/harness.mjs";
import { ISOLATION_HEADERS, serve } from "../www/serve.mjs";
import { forgetKinds, sample } from "./pss.mjs";

const MIB = 1024 * 1024;
const TRACE = process.argv.includes("--trace");
const CASES = process.argv.slice(2).filter((a) => a !== "--trace");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** `b` minus `a`, MiB, for the total and each kind of process that moved by half a MiB or more. */
const delta = (a, b) => {
  const out = [`total ${((b.total - a.total) / MIB).toFixed(1)}`];
  for (const k of new Set([...Object.keys(a.byKind), ...Object.keys(b.byKind)])) {
    const d = ((b.byKind[k] ?? 0) - (a.byKind[k] ?? 0)) / MIB;
    if (Math.abs(d) >= 0.5) out.push(`${k} ${d.toFixed(1)}`);
  }
  return out.join(", ");
};

/** In the page: a device with the adapter's buffer limits, as src/backend/gpu asks for one. */
async function device() {
  const a = await navigator.gpu.requestAdapter();
  const { maxStorageBufferBindingSize, maxBufferSize } = a.limits;
  return a.requestDevice({ requiredLimits: { maxStorageBufferBindingSize, maxBufferSize } });
}

const site = await serve(ROOT, { headers: ISOLATION_HEADERS });
for (const what of CASES) {
  forgetKinds();
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-gpu-process-"));
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS });
  try {
    const page = await context.newPage();
    await page.goto(`${site.url}bench/page.html`);
    await page.waitForFunction(() => window.ready === true, null, { timeout: 30_000 });
    const cdp = await context.newCDPSession(page);
    await page.evaluate(() => {
      window.pipelines = 0;
      const p = GPUDevice.prototype;
      for (const f of ["createComputePipeline", "createComputePipelineAsync"]) {
        const original = p[f];
        p[f] = function (...args) {
          window.pipelines += 1;
          console.log(`pipeline ${Date.now()}`);
          return original.apply(this, args);
        };
      }
    });
    await sleep(2000);
    const base = sample();
    const trace = [];
    page.on("console", (m) => m.text().startsWith("pipeline ") && trace.push([Number(m.text().slice(9)), "pipeline"]));
    const timer = setInterval(() => {
      const s = sample();
      trace.push([s.t, (((s.byKind["gpu-process"] ?? 0) - (base.byKind["gpu-process"] ?? 0)) / MIB).toFixed(1)]);
    }, 20);
    const [kind, a, b] = what.split(":");
    if (kind === "device") {
      await page.evaluate(`(${device})().then((d) => { window.device = d; })`);
    } else if (kind === "buffers") {
      await page.evaluate(`(async (device, how) => {
        const d = window.device = await device();
        const src = new Uint8Array(4 << 20).fill(1);
        window.buffers = [];
        for (let i = 0; i < 10; i++) {
          const b = d.createBuffer({ size: src.length, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
            mappedAtCreation: how === "mapped" });
          if (how === "mapped") {
            new Uint8Array(b.getMappedRange()).set(src);
            b.unmap();
          }
          if (how === "write" || how === "wait") d.queue.writeBuffer(b, 0, src);
          if (how === "write1m") for (let o = 0; o < src.length; o += 1 << 20) d.queue.writeBuffer(b, o, src, o, 1 << 20);
          if (how === "wait") await d.queue.onSubmittedWorkDone();
          window.buffers.push(b);
        }
        await d.queue.onSubmittedWorkDone();
      })(${device}, ${JSON.stringify(a)})`);
    } else if (kind === "ours") {
      await page.evaluate((o) => window.load("ours", o), { source: b, device: a, cache: false });
    } else {
      throw new Error(`unknown case ${what}`);
    }
    await sleep(2000);
    const after = sample();
    clearInterval(timer);
    await cdp.send("HeapProfiler.collectGarbage");
    await sleep(1000);
    const collected = sample();
    const pipelines = await page.evaluate(() => window.pipelines);
    console.log(`${what} (${pipelines} compute pipelines): ${delta(base, after)}; after a collection: ${delta(base, collected)}`);
    if (TRACE) {
      let last = null;
      for (const [t, v] of trace.sort((x, y) => x[0] - y[0])) {
        if (v !== last) console.log(`  ${t - trace[0][0]} ms: ${v === "pipeline" ? "a pipeline created" : `gpu-process ${v} MiB`}`);
        last = v;
      }
    }
  } finally {
    await context.close();
  }
}
await site.close();
