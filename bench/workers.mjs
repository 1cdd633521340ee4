// The cost of the worker entry on one short sentence, without another library in the page: bertgpu's main-thread
// entry, its worker entry with 1 and with 2 workers, loaded side by side in one headless Chromium page, each timed on
// the same sentence in turn (5 warm-up rounds, then `reps`), medians printed. From the repository root, after
// scripts/build-wasm.sh:
//
//   node bench/workers.mjs [model source /models/all-MiniLM-L6-v2] [reps 35]
import { chromium } from "playwright-core";
import { ARGS, CHROMIUM, ROOT } from "../tests/browser/harness.mjs";
import { serve } from "../www/serve.mjs";

const [source = "/models/all-MiniLM-L6-v2", reps = "35"] = process.argv.slice(2);
const site = await serve(ROOT);
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
try {
  const page = await browser.newPage();
  await page.goto(`${site.url}bench/page.html`);
  const r = await page.evaluate(async ({ source, reps }) => {
    const main = (await import("/pkg/index.js")).Bert;
    const worker = (await import("/pkg/worker.js")).Bert;
    const models = {
      "main thread": await main.load(source, { device: "cpu", cache: true }),
      "worker entry, 1 worker": await worker.load(source, { device: "cpu", cache: true, workers: 1 }),
      "worker entry, 2 workers": await worker.load(source, { device: "cpu", cache: true, workers: 2 }),
    };
    const text = ["The quick brown fox jumps over the lazy dog again."];
    const times = Object.fromEntries(Object.keys(models).map((k) => [k, []]));
    for (let i = 0; i < 5 + reps; i++) {
      for (const [name, m] of Object.entries(models)) {
        const t0 = performance.now();
        await m.embed(text);
        if (i >= 5) times[name].push(performance.now() - t0);
      }
    }
    const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
    return Object.entries(times).map(([name, xs]) => `${name}: ${median(xs).toFixed(1)} ms`);
  }, { source, reps: Number(reps) });
  console.log(r.join("\n"));
} finally {
  await browser.close();
  await site.close();
}
