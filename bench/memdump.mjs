// Where each process's memory is, by allocator (issue 29): Chromium's own memory-infra dumps (the figures of
// chrome://tracing's memory view) of a fresh headless Chromium before our model loads, right after, and after a
// forced full collection. Partition_alloc is where V8's ArrayBuffer backing stores live, v8 its heaps, malloc the
// rest of the process's own allocations, shared_memory what it maps to talk to the other processes. Sizes in MiB,
// allocators of 0.5 MiB or more. After bench/browser.sh's preparation, from the repository root:
//
//   node bench/memdump.mjs [device webgpu|cpu] [source] [cache on|off]
import { chromium } from "playwright-core";
import { ROOT, ARGS, CHROMIUM } from "../tests/browser/harness.mjs";
import { ISOLATION_HEADERS, serve } from "../www/serve.mjs";

const [device = "webgpu", src = "/bench/models/all-MiniLM-L6-v2.q8_0.gguf", cacheArg = "on"] = process.argv.slice(2);
const site = await serve(ROOT, { headers: ISOLATION_HEADERS });
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
const context = await browser.newContext();
const page = await context.newPage();
await page.goto(`${site.url}bench/page.html`);
await page.waitForFunction(() => window.ready === true, null, { timeout: 30_000 });
const browserCdp = await browser.newBrowserCDPSession();
const pageCdp = await context.newCDPSession(page);
const MIB = 1024 * 1024;

/** One memory dump of every process, printed as a line per process: its allocators, largest first. */
async function dump(what) {
  const events = [];
  const collect = (e) => events.push(...e.value);
  browserCdp.on("Tracing.dataCollected", collect);
  await browserCdp.send("Tracing.start", { traceConfig: { includedCategories: ["disabled-by-default-memory-infra"],
    memoryDumpConfig: { triggers: [] } } });
  await browserCdp.send("Tracing.requestMemoryDump", { deterministic: false, levelOfDetail: "detailed" });
  const complete = new Promise((resolve) => browserCdp.once("Tracing.tracingComplete", resolve));
  await browserCdp.send("Tracing.end");
  await complete;
  browserCdp.off("Tracing.dataCollected", collect);
  const names = {};
  for (const e of events) if (e.ph === "M" && e.name === "process_name") names[e.pid] = e.args.name;
  console.log(`--- ${what}`);
  for (const e of events) {
    const allocators = e.ph === "v" ? e.args?.dumps?.allocators : null;
    if (!allocators) continue;
    const top = {};
    for (const [name, node] of Object.entries(allocators)) {
      // The top level of each allocator; shared memory is listed a segment at a time, one level down.
      const depth = name.split("/").length;
      if (!node.attrs?.size || !(depth === 1 || (depth === 2 && name.startsWith("shared_memory/")))) continue;
      const key = depth === 1 ? name : "shared_memory";
      if (depth === 1 && key === "shared_memory") continue;
      top[key] = (top[key] ?? 0) + parseInt(node.attrs.size.value, 16);
    }
    const line = Object.entries(top).filter(([, size]) => size >= 0.5 * MIB).sort((a, b) => b[1] - a[1])
      .map(([name, size]) => `${name} ${(size / MIB).toFixed(1)}`).join(", ");
    console.log(`${names[e.pid] ?? e.pid}: ${line}`);
  }
}

await dump("before load");
await page.evaluate(async (o) => { await window.load("ours", o); }, { source: src, device, cache: cacheArg === "on" });
await dump("loaded");
await pageCdp.send("HeapProfiler.collectGarbage");
await new Promise((resolve) => setTimeout(resolve, 500));
await dump("after a full collection");
await browser.close();
await site.close();
