// What writing a download into the Cache API costs the page (issue 29), with nothing else of ours: each way in a
// fresh headless Chromium, a weights file fetched from the local server and copied into one array as it arrives (as
// the module copies it into wasm memory), while it goes into the Cache API; the peak Pss of all the browser's
// processes (bench/pss.mjs, every 50 ms) and the Pss 1.5 s after, minus the page before. Ways:
//   native      cache.put(url, response), then the cached copy read back through one reused buffer (BYOB)
//   stream      the download read chunk by chunk and fed to cache.put as a stream of ours (4 MiB queued at most)
//   clone       cache.put(url, response.clone()), the other branch read through one reused buffer
//   parts-N     read through one reused buffer, copied into one N MiB buffer, each full one put as an entry of its
//               own (js/loader.js `cacheParts`, N = 4), one put in flight
// From the repository root (the 8-bit GGUF made by bench/browser.sh's preparation):
//
//   node bench/cache_write.mjs native stream clone parts-4 [--file bench/models/all-MiniLM-L6-v2.q8_0.gguf]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { ROOT, ARGS, CHROMIUM } from "../tests/browser/harness.mjs";
import { ISOLATION_HEADERS, serve } from "../www/serve.mjs";
import { forgetKinds, sample } from "./pss.mjs";

const MIB = 1024 * 1024;
const argv = process.argv.slice(2);
const at = argv.indexOf("--file");
const FILE = at >= 0 ? argv.splice(at, 2)[1] : "bench/models/all-MiniLM-L6-v2.q8_0.gguf";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const site = await serve(ROOT, { headers: ISOLATION_HEADERS });
const url = `${site.url}${FILE}`;
for (const how of argv) {
  forgetKinds();
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-cache-write-"));
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS });
  try {
    const page = await context.newPage();
    await page.goto(`${site.url}bench/page.html`);
    await sleep(2000);
    const base = sample().total;
    let peak = base;
    const timer = setInterval(() => {
      peak = Math.max(peak, sample().total);
    }, 50);
    const t0 = Date.now();
    const stored = await page.evaluate(async ({ url, how, size }) => {
      const cache = await caches.open("cache-write");
      const module = new Uint8Array(size); // stands for wasm memory, which the bytes are copied into
      let at = 0;
      const take = (bytes) => {
        module.set(bytes, at);
        at += bytes.byteLength;
      };
      /** Every chunk of `body` read into one reused buffer, handed to `f`. */
      const readByob = async (body, f) => {
        const reader = body.getReader({ mode: "byob" });
        let buffer = new ArrayBuffer(256 << 10);
        for (;;) {
          const { done, value } = await reader.read(new Uint8Array(buffer));
          if (done) return;
          await f(value);
          buffer = value.buffer;
        }
      };
      const response = await fetch(url);
      if (how === "native") {
        await cache.put(url, response);
        await readByob((await cache.match(url)).body, take);
        return "1 entry";
      }
      if (how === "clone") {
        const put = cache.put(url, response.clone());
        await readByob(response.body, take);
        await put;
        return "1 entry";
      }
      if (how === "stream") {
        let ctl, wake;
        const body = new ReadableStream({ start: (c) => { ctl = c; }, pull: () => wake?.() },
          new ByteLengthQueuingStrategy({ highWaterMark: 4 << 20 }));
        const put = cache.put(url, new Response(body));
        const reader = response.body.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          take(value);
          ctl.enqueue(value);
          while (ctl.desiredSize <= 0) await new Promise((r) => { wake = r; });
        }
        ctl.close();
        await put;
        return "1 entry";
      }
      const PART = Number(how.split("-")[1]) << 20;
      const part = new Uint8Array(PART);
      let fill = 0, count = 0, inflight = null;
      const flush = async () => {
        await inflight;
        inflight = cache.put(`${url}?part=${count++}`, new Response(part.subarray(0, fill)));
        fill = 0;
      };
      await readByob(response.body, async (value) => {
        take(value);
        for (let i = 0; i < value.byteLength;) {
          const n = Math.min(value.byteLength - i, PART - fill);
          part.set(value.subarray(i, i + n), fill);
          fill += n;
          i += n;
          if (fill === PART) await flush();
        }
      });
      if (fill) await flush();
      await inflight;
      return `${count} entries`;
    }, { url, how, size: fs.statSync(path.join(ROOT, FILE)).size });
    const ms = Date.now() - t0;
    await sleep(1500);
    clearInterval(timer);
    const end = sample().total;
    console.log(`${how} (${stored}, ${ms} ms): peak ${((peak - base) / MIB).toFixed(1)} MiB, 1.5 s after `
      + `${((end - base) / MIB).toFixed(1)} MiB`);
  } finally {
    await context.close();
  }
}
await site.close();
