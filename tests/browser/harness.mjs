// Shared set-up of the browser tests: Debian's Chromium through playwright-core (never a downloaded browser),
// headless with SwiftShader WebGPU, a fresh profile per launch, and pages that fail the test on any console error.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { before, after } from "node:test";
import { execFileSync } from "node:child_process";
import { chromium } from "playwright-core";
import { serve } from "./server.mjs";
import { ISOLATION_HEADERS } from "../../www/serve.mjs";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

export const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
// ENVIRONMENT.md: --enable-unsafe-webgpu is what gives headless Chromium a (SwiftShader) WebGPU adapter.
export const ARGS = [
  "--headless", "--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync",
  "--no-first-run", "--disable-quic", "--disable-dev-shm-usage", "--enable-unsafe-webgpu",
];

/**
 * Starts the site server (the repo root: pkg/ and tests/browser/page.html; cross-origin isolated if `isolated`),
 * the model server (models/ and tests/models/, another origin, CORS) and Chromium with a fresh profile.
 */
export async function start({ isolated = false } = {}) {
  if (!fs.existsSync(path.join(ROOT, "pkg/wasm/bertgpu_bg.wasm"))) {
    throw new Error("pkg/ is missing: run scripts/build-wasm.sh first");
  }
  const site = await serve(ROOT, isolated ? { headers: ISOLATION_HEADERS } : undefined);
  const models = await serve(ROOT, { cors: true });
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM, headless: true, args: ARGS,
  });
  return {
    site, models, context,
    async stop() {
      await context.close();
      await site.close();
      await models.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}

/**
 * Opens the test page. `page.errors` collects console errors and uncaught exceptions (page and its workers);
 * `checkErrors(allowed)` throws unless every one matches `allowed` (a RegExp, for tests that provoke one).
 */
/**
 * Whether a console message is the browser's note of an optional file the loader asked for and the server does not
 * have: sentence-transformers' files beside a model (js/loader.js SENTENCE_FILES), absent from most folders.
 */
function absentOptional(m) {
  const url = m.location()?.url ?? "";
  return /status of 404/.test(m.text())
    && /\/(modules\.json|sentence_bert_config\.json|config_sentence_transformers\.json)$/.test(url);
}

export async function openPage(env) {
  const page = await env.context.newPage();
  const errors = [];
  page.on("console", (m) => {
    if (m.type() === "error" && !absentOptional(m)) errors.push(m.text());
  });
  page.on("pageerror", (e) => errors.push(`uncaught: ${e.message}`));
  page.on("worker", (w) => {
    w.on?.("console", (m) => {
      if (m.type() === "error" && !absentOptional(m)) errors.push(`worker: ${m.text()}`);
    });
  });
  await page.goto(`${env.site.url}tests/browser/page.html`);
  await page.waitForFunction(() => window.ready === true || window.loadError, null, { timeout: 30_000 });
  const loadError = await page.evaluate(() => window.loadError);
  if (loadError) throw new Error(`test page failed to start: ${loadError}`);
  page.errors = errors;
  watchStalls(page);
  // Checks (and forgets) the errors since the last check: each test calls it at its end.
  page.checkErrors = (allowed) => {
    const bad = errors.filter((e) => !(allowed && allowed.test(e)));
    errors.length = 0;
    if (bad.length) throw new Error(`console errors in the page:\n${bad.join("\n")}`);
  };
  return page;
}

/**
 * How long one `page.evaluate` may run (the slowest, a calibration, takes about 100 s on a 2-core machine) before
 * the harness reports what the page and its workers are doing and ends the browser.
 */
const STALL_MS = 300_000;

/**
 * Ends an evaluate that runs past STALL_MS: prints whether the page's main thread and each worker still answer,
 * the threaded builds' pool states and the CPU use of the machine's busiest processes, then closes the browser, so
 * that the stalled test fails with that report and the file's later tests fail at once instead of waiting too.
 */
function watchStalls(page) {
  const evaluate = page.evaluate.bind(page);
  const answer = (target, fn) => Promise.race([target.evaluate(fn).catch((e) => `error: ${e.message}`),
    new Promise((r) => setTimeout(() => r("no answer within 5 s"), 5_000).unref())]);
  page.evaluate = (fn, arg) => {
    const timer = setTimeout(async () => {
      const lines = [`# page.evaluate has run for ${STALL_MS / 1000} s; what the page is doing:`];
      lines.push(`#   main thread: ${JSON.stringify(await answer(page, async () => {
        const state = async (p) => {
          try {
            return Array.from((await import(p)).__threadsState()); // [threads planned, workers running, items]
          } catch {
            return "not started";
          }
        };
        return { pools: { threads: await state("/pkg/wasm-threads/bertgpu.js"),
          threadsRelaxed: await state("/pkg/wasm-threads-relaxed/bertgpu.js") } };
      }))}`);
      for (const w of page.workers()) lines.push(`#   worker ${w.url()}: ${JSON.stringify(await answer(w, () => "answers"))}`);
      try {
        lines.push(execFileSync("ps", ["-eo", "pid,pcpu,stat,time,args", "--sort=-pcpu"]).toString()
          .split("\n").slice(0, 12).map((l) => `#   ${l.slice(0, 160)}`).join("\n"));
      } catch {
        // no ps: the rest is still worth printing
      }
      lines.push("#   closing the browser");
      console.log(lines.join("\n"));
      await page.context().close().catch(() => {});
    }, STALL_MS);
    timer.unref();
    return evaluate(fn, arg).finally(() => clearTimeout(timer));
  };
}

/**
 * The set-up most test files share: servers, Chromium and the test page started before the file's tests and
 * stopped after them. Returns `{ env, page }`, filled in once `before` has run. `options`: as `start`'s.
 */
export function withPage(options) {
  const ctx = { env: null, page: null };
  before(async () => {
    ctx.env = await start(options);
    ctx.page = await openPage(ctx.env);
  });
  after(async () => {
    await ctx.env?.stop();
  });
  return ctx;
}

/** Four labelled texts, two classes: enough to train a head in a few epochs, for tests that compare two models. */
export const HEAD_EXAMPLES = [
  { text: "the cake was sweet", label: "food" }, { text: "bread and butter", label: "food" },
  { text: "the compiler crashed", label: "computers" }, { text: "a bug in the kernel", label: "computers" },
];

export function cosine(a, b) {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / Math.sqrt(aa * bb);
}

/**
 * Asserts |got[i] − want[i]| ≤ atol at every index (after checking that the lengths agree and are not zero, so that
 * an empty result cannot pass) and returns the largest difference, for the test to report what it measured. A NaN
 * anywhere fails. The message names the worst index and both values.
 */
export function assertAllClose(got, want, atol, what) {
  assert.equal(got?.length, want.length, `${what}: length`);
  assert.ok(want.length > 0, `${what}: nothing to compare`);
  let worst = { diff: -1, i: -1 };
  for (let i = 0; i < want.length; i++) {
    const diff = Math.abs(got[i] - want[i]);
    if (Number.isNaN(diff)) {
      worst = { diff, i };
      break;
    }
    if (diff > worst.diff) worst = { diff, i };
  }
  assert.ok(worst.diff <= atol, `${what}: |got − want| = ${worst.diff} at [${worst.i}] (got ${got[worst.i]}, `
    + `want ${want[worst.i]}) > ${atol}`);
  return worst.diff;
}

/** safetensors bytes → { name: Float32Array } (f32 only, as exportModel writes). */
export function readSafetensors(bytes) {
  const buf = Buffer.from(bytes);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8"));
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    assert.equal(t.dtype, "F32", name);
    const [a, b] = t.data_offsets;
    const data = buf.subarray(8 + n + a, 8 + n + b);
    out[name] = new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  }
  return out;
}

/**
 * The key projection's bias has a gradient of exactly 0 (it adds q·b_k to every score of a row, which the softmax
 * ignores), so what it gets is rounding noise of either sign, which AdamW's m/√v turns into steps of ±lr: it differs
 * between any two implementations (PyTorch's included) and is not compared.
 */
export const NO_GRADIENT = /attention\.self\.key\.bias$/;

/** The largest |a − b| over the tensors of two weight sets (`readSafetensors`'s), but NO_GRADIENT's; and where. */
export function maxWeightDiff(a, b) {
  assert.deepEqual(Object.keys(a).sort(), Object.keys(b).sort(), "the same tensors");
  let worst = { diff: 0, name: "" };
  for (const name of Object.keys(a).filter((n) => !NO_GRADIENT.test(n))) {
    assert.equal(a[name].length, b[name].length, name);
    for (let i = 0; i < a[name].length; i++) {
      const d = Math.abs(a[name][i] - b[name][i]);
      if (!(d <= worst.diff)) worst = { diff: d, name };
    }
  }
  return worst;
}

export function readJson(rel) {
  return JSON.parse(fs.readFileSync(path.join(ROOT, rel), "utf8"));
}

/**
 * Converts `models/<model>` to a GGUF of `dtype` with the CLI's `convert` (cargo test, run before the browser
 * tests, builds target/debug/bertgpu); returns its path under the repository, target/browser-test/<name>.
 */
export function convertGguf(model, dtype, name) {
  const cli = path.join(ROOT, "target/debug/bertgpu");
  if (!fs.existsSync(cli)) throw new Error("target/debug/bertgpu is missing: run `cargo build` first");
  const dir = path.join(ROOT, "target/browser-test");
  fs.mkdirSync(dir, { recursive: true });
  execFileSync(cli, ["convert", "--model", path.join(ROOT, "models", model), "--dtype", dtype,
    "--out", path.join(dir, name)], { stdio: "pipe" });
  return `target/browser-test/${name}`;
}
