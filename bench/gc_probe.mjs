// What a load leaves for the collector (issue 29): loads our model in bench/page.html in a fresh headless Chromium,
// then prints the renderer's Pss and the DevTools protocol's `Runtime.getHeapUsage` (the JS heap, ArrayBuffer
// backing stores, Blink's own heap), forces a full collection (`HeapProfiler.collectGarbage`) and prints them again.
// What the collection frees beyond those heaps is native memory that only a collection releases. `warm` reloads the
// page after a first load, so its figures include what the first page left. After bench/browser.sh's preparation,
// from the repository root:
//
//   node bench/gc_probe.mjs [device webgpu|cpu] [cache off|on|warm] [onProgress on|off] [source]
//   node bench/gc_probe.mjs compile streaming|bytes     # only the module compiled, as it streams or from its bytes
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { ROOT, ARGS, CHROMIUM } from "../tests/browser/harness.mjs";
import { ISOLATION_HEADERS, serve } from "../www/serve.mjs";

const [device = "webgpu", cacheArg = "off", progress = "on", src = "/bench/models/all-MiniLM-L6-v2.q8_0.gguf"] =
  process.argv.slice(2);
const site = await serve(ROOT, { headers: ISOLATION_HEADERS });
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "gcprobe-"));
const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS });
const page = await context.newPage();
await page.goto(`${site.url}bench/page.html`);
await page.waitForFunction(() => window.ready === true, null, { timeout: 30_000 });
const cdp = await context.newCDPSession(page);
const MIB = 1024 * 1024;
const rendererPss = () => {
  let t = 0;
  for (const pid of fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8");
      if (!cmd.includes("--type=renderer") || !cmd.includes(profile)) continue;
      const text = fs.readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
      t += Number(text.match(/^Pss:\s+(\d+) kB/m)[1]) * 1024;
    } catch {
      // exited, or not ours
    }
  }
  return t;
};
const usage = async (what) => {
  const u = await cdp.send("Runtime.getHeapUsage");
  const mib = (b) => ((b ?? NaN) / MIB).toFixed(1);
  console.log(`${what}: renderer Pss ${mib(rendererPss())} MiB; JS heap used ${mib(u.usedSize)}, backing stores `
    + `${mib(u.backingStorageSize)}, embedder heap ${mib(u.embedderHeapUsedSize)}`);
};
await cdp.send("HeapProfiler.collectGarbage");
await usage("before load");
const cache = cacheArg !== "off";
if (device === "compile") {
  // Only the relaxed build's module compiled, as a stream or from its bytes (no model): `compile streaming|bytes`.
  await page.evaluate(async (how) => {
    const url = "/pkg/wasm-relaxed/bertgpu_bg.wasm";
    window.kept = how === "streaming" ? await WebAssembly.compileStreaming(fetch(url))
      : await WebAssembly.compile(await (await fetch(url)).arrayBuffer());
  }, cacheArg);
} else if (cacheArg === "warm") {
  // A returning user: one load fills the cache, and the page is loaded again.
  await page.evaluate(async (o) => { await window.load("ours", o); }, { source: src, device, cache: true, progress: true });
  await page.evaluate(() => location.reload());
  await page.waitForFunction(() => window.ready === true, null, { timeout: 30_000 });
}
if (device !== "compile") {
  await page.evaluate(async (o) => { await window.load("ours", o); }, { source: src, device, cache, progress: progress === "on" });
}
await new Promise((r) => setTimeout(r, 1000));
await usage("loaded");
await cdp.send("HeapProfiler.collectGarbage");
await new Promise((r) => setTimeout(r, 500));
await usage("after GC");
await context.close();
await site.close();
fs.rmSync(profile, { recursive: true, force: true });
