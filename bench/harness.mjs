// What the benchmark scripts share: the benchmark page (bench/page.html) served from the repository root in a
// headless Chromium, and the median.
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";
import { ARGS, CHROMIUM, ROOT } from "../tests/browser/harness.mjs";
import { ISOLATION_HEADERS, serve } from "../www/serve.mjs";

/**
 * Runs `f(page)` on bench/page.html, served from the repository root (cross-origin isolated if `isolated`), in a
 * fresh headless Chromium; closes both after, and returns what `f` returns.
 */
export async function withBenchPage({ isolated = false } = {}, f) {
  const site = await serve(ROOT, isolated ? { headers: ISOLATION_HEADERS } : undefined);
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
  try {
    const page = await browser.newPage();
    await page.goto(`${site.url}bench/page.html`);
    return await f(page);
  } finally {
    await browser.close();
    await site.close();
  }
}

// Real text (Debian's fortunes, tests/data/fortunes/), cut to the workloads' token counts in the page.
const corpus = fs.readFileSync(path.join(ROOT, "tests/data/fortunes/train.jsonl"), "utf8").trim().split("\n")
  .map((l) => JSON.parse(l).text);

/**
 * `n` texts of `tokens` tokens each (with [CLS]/[SEP]; at most, as close as whole words allow), cut from the corpus:
 * `[{ text, count }]`. Counts with bench/page.js's `tokenCounts`, so our model must be loaded in `page`.
 */
export async function makeTexts(page, n, tokens) {
  const words = corpus.join(" ").split(/\s+/);
  const count = async (a, len) => (await page.evaluate((t) => window.tokenCounts([t]), words.slice(a, a + len).join(" ")))[0];
  const out = [];
  let at = 0;
  for (let i = 0; i < n; i++) {
    // The longest run of whole words from `at` that fits: grow while it fits, then shrink until it does.
    let len = Math.max(1, Math.floor(tokens / 2));
    while ((await count(at, len + 1)) <= tokens) len += 1;
    while (len > 1 && (await count(at, len)) > tokens) len -= 1;
    out.push({ text: words.slice(at, at + len).join(" "), count: await count(at, len) });
    at = (at + len) % Math.max(1, words.length - 4 * tokens);
  }
  return out;
}

/** bench/page.js's `timeEmbed(which, texts)` in `page`: `{ ms, vectors }` of one call of library `which`. */
export function timeEmbed(page, which, texts) {
  return page.evaluate(({ which, texts }) => window.timeEmbed(which, texts), { which, texts });
}

/**
 * Untimed calls of bench/page.js's `timeEmbed` on `texts`, each of `libraries` ("ours", "theirs") in turn, for at
 * least `ms`: V8 compiles a page's hot wasm again, in the background, over its first seconds of calls
 * (transformers.js's module is 10 times ours), and one sentence's time can halve once that is done.
 */
export async function warmUp(page, libraries, texts, ms) {
  for (const t0 = performance.now(); performance.now() - t0 < ms;) {
    for (const which of libraries) {
      await timeEmbed(page, which, texts);
    }
  }
}

/**
 * Workers and threads of the multi-core configurations: `--cores` (`value`, a string or null when absent; exits
 * on anything but an integer from 2 to 8), else the cores the browser reports (`reported`), at least 2, at most 4.
 */
export function multiCore(value, reported) {
  if (value == null) return Math.min(4, Math.max(2, reported ?? 2));
  const n = Number(value);
  if (!(Number.isInteger(n) && n >= 2 && n <= 8)) {
    console.error("--cores: an integer from 2 to 8");
    process.exit(2);
  }
  return n;
}

/** The size of a file the repository server served (`p`: its URL path), 0 where there is none. */
export const fileBytes = (p) => {
  try {
    return fs.statSync(path.join(ROOT, p)).size;
  } catch {
    return 0;
  }
};

/**
 * Splits what a page fetched (URL paths, repeats counted once) into code (JS, wasm: the bench page's own script
 * too, for either library) and weights (everything else but the HTML: model files).
 */
export function downloaded(paths) {
  let code = 0, weights = 0;
  for (const p of new Set(paths)) {
    const n = fileBytes(p);
    if (/\.(m?js|wasm)$/.test(p)) code += n;
    else if (!/\.html$/.test(p)) weights += n;
  }
  return { code, weights };
}

/** The model of the side-by-side scripts (--model): all-MiniLM-L6-v2 unless a script is told otherwise. */
export const DEFAULT_MODEL = "all-MiniLM-L6-v2";

/**
 * Where each library finds model `name` under the repository root (URL paths; bench/browser.sh prepares them):
 * ours f32 the checkpoint's folder (models/NAME/ for the default and wherever scripts/fetch-models.sh put it, else
 * bench/models/NAME/, the checkpoint copied there), ours q8 the Q8_0 GGUF `bertgpu convert` made
 * (bench/models/NAME.q8_0.gguf), theirs bench/models/NAME/ with its ONNX export (bench/export_onnx.py;
 * transformers.js's localModelPath is /bench/models/).
 * `need`: the files that must exist (repository paths). Exits on a name with anything but a folder name's characters.
 */
export function benchModel(name) {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) {
    console.error(`--model: a folder name under bench/models/ (got ${JSON.stringify(name)})`);
    process.exit(2);
  }
  const folder = name === DEFAULT_MODEL || fs.existsSync(path.join(ROOT, "models", name, "model.safetensors"))
    ? `/models/${name}/` : `/bench/models/${name}/`;
  const m = { name, f32: folder, q8: `/bench/models/${name}.q8_0.gguf`, theirs: name };
  m.need = [`${folder.slice(1)}model.safetensors`, m.q8.slice(1), `bench/models/${name}/onnx/model.onnx`,
    `bench/models/${name}/onnx/model_quantized.onnx`];
  return m;
}

/** The median (of an even count, the mean of the middle two). */
export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/**
 * A training run's step times in headless Chromium: `bert[method](input, options)` (fineTune, pretrain) of the model
 * at `model` (a path under the test server's models root) on `device`, timing its "step" progress events.
 * `{ device, first, times }`: where it ran, the first step's time from the call (start included), each step's time.
 */
export async function browserSteps(model, device, method, input, options) {
  const { openPage, start } = await import("../tests/browser/harness.mjs");
  const env = await start();
  try {
    const page = await openPage(env);
    return await page.evaluate(async ({ url, device, method, input, options }) => {
      const bert = await bertgpu.Bert.load(url, { device });
      const t0 = performance.now();
      const times = [];
      await bert[method](input, { ...options, onProgress: (p) => p.type === "step" && times.push(performance.now()) });
      const out = { device: bert.device, first: times[0] - t0, times };
      bert.dispose();
      return out;
    }, { url: env.models.url + model, device, method, input, options });
  } finally {
    await env.stop();
  }
}

/** The native CLI's step times, as [`browserSteps`]: `bin args` run to the end, its stderr's step lines timed. */
export async function nativeSteps(bin, args) {
  const { spawn } = await import("node:child_process");
  const times = [];
  const t0 = performance.now();
  await new Promise((resolve, reject) => {
    const p = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
    let buf = "";
    p.stderr.on("data", (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.startsWith("{\"epoch\"") && line.includes("\"step\"")) times.push(performance.now());
      }
    });
    p.on("close", (code) => (code === 0 ? resolve() : reject(new Error(`bertgpu ${args[0]} exited with ${code}`))));
  });
  return { device: "native cpu", first: times[0] - t0, times };
}

/** Median gap between consecutive step times (ms), after the first step (which includes the start). */
export const perStep = (times) => median(times.slice(1).map((t, i) => t - times[i]));
