// What a page downloads to start bertgpu, without the competitor's set-up (bench/browser.mjs measures both, after
// bench/browser.sh): each configuration cold in a fresh page of one headless Chromium (cross-origin isolated, so the
// threaded build can run; nothing cached: `cache: false`, the server says no-store), import + load + first result,
// the bytes of every file the page fetched from the server's log, split as bench/browser.mjs splits them
// (`downloaded`: code is every .js and .wasm, the bench page's own script included, as in the competitor's figure).
// From the repository root, after scripts/build-wasm.sh (and bench/browser.sh's GGUF for the 8-bit row):
//
//   node bench/download.mjs [--cold 3] [--theirs-code 28255360]
//
// --theirs-code: transformers.js's code bytes for the ratio: 28,255,360 is what bench/browser.mjs measured for
// @huggingface/transformers 4.3.1 (bench/package.json pins it) with its threaded wasm backend.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { ARGS, CHROMIUM, ROOT } from "../tests/browser/harness.mjs";
import { ISOLATION_HEADERS, serve } from "../www/serve.mjs";
import { downloaded, fileBytes, median } from "./harness.mjs";

const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : dflt;
};
const COLD = Number(arg("cold", 3));
const THEIRS_CODE = Number(arg("theirs-code", 28_255_360));

const CONFIGS = [
  { label: "f32, 1 thread", opts: { source: "/models/all-MiniLM-L6-v2/", device: "cpu" } },
  { label: "f32, threaded build, 2 threads", opts: { source: "/models/all-MiniLM-L6-v2/", device: "cpu", threads: 2 } },
  { label: "q8_0, 1 thread", opts: { source: "/bench/models/all-MiniLM-L6-v2.q8_0.gguf", device: "cpu" } },
].filter((c) => fs.existsSync(path.join(ROOT, c.opts.source)));

const site = await serve(ROOT, { headers: ISOLATION_HEADERS });
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-download-"));
const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS });
try {
  const rows = [];
  for (const c of CONFIGS) {
    const times = [];
    let fetched = [];
    for (let r = 0; r < COLD; r++) {
      site.requests.length = 0;
      const page = await context.newPage();
      await page.goto(`${site.url}bench/page.html`);
      await page.waitForFunction(() => window.ready === true, null, { timeout: 30_000 });
      const { ms } = await page.evaluate((opts) => window.coldStart("ours", opts), c.opts);
      times.push(ms);
      fetched = [...site.requests];
      await page.close();
    }
    const codeBytes = downloaded(fetched).code;
    const wasm = [...new Set(fetched)].filter((p) => p.endsWith(".wasm"));
    rows.push({ label: c.label, ms: median(times), codeBytes, wasm,
      jsBytes: codeBytes - wasm.reduce((s, p) => s + fileBytes(p), 0) });
  }
  console.log("| cold start, nothing cached | ms (median) | code bytes (of it JS) | ÷ transformers.js's code | the .wasm |");
  console.log("|---|---|---|---|---|");
  for (const r of rows) {
    console.log(`| ${r.label} | ${r.ms.toFixed(0)} | ${r.codeBytes.toLocaleString("en")} (${r.jsBytes.toLocaleString("en")}) `
      + `| ${(r.codeBytes / THEIRS_CODE).toFixed(3)}× | ${r.wasm.join(", ")} |`);
  }
} finally {
  await context.close();
  await site.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
