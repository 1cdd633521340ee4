// Shared by the bundler tests: preparing an app (its committed lock file, then the packed bertgpu tarball), and
// checking a served app in headless Chromium (Debian's, through playwright-core; the flags of tests/browser/).
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";
import { chromium } from "playwright-core";
import { CHROMIUM, ARGS } from "../browser/harness.mjs";
import { serve } from "../../www/serve.mjs";
import { ROOT, MODELS, npmCi, installTarball } from "../node/package.mjs";

export { ROOT, serve };

/** The golden texts and PyTorch's unit vectors for them (all-MiniLM-L6-v2, mean pooling). */
export const GOLDEN = JSON.parse(fs.readFileSync(path.join(ROOT, "tests/golden/model.json"), "utf8"))["all-MiniLM-L6-v2"];
const golden = GOLDEN;

// Per-value agreement of unit vectors with PyTorch's (all-MiniLM-L6-v2; f32 in another summation order): the
// largest difference measured in Chromium is 2.7e-7, as in Node (the same wasm).
export const ATOL = 1e-6;
// Per-value agreement of the two builds' unit vectors: the relaxed-SIMD build fuses the f32 GEMM's multiply-adds
// (one rounding per product instead of two; src/backend/cpu/matmul.rs), the SIMD128 build does not. Measured up to
// 1.2e-7 apart on these texts in Chromium; half of ATOL leaves room for other engines' rounding while a real defect
// (a wrong lane, a skipped block) moves values by orders of magnitude more.
export const BUILDS_ATOL = 5e-7;

/** The app folder `name` under tests/bundlers/, installed from its lock file, with the tarball installed in it. */
export function prepareApp(name) {
  const dir = path.join(ROOT, "tests/bundlers", name);
  npmCi(dir);
  installTarball(dir);
  return dir;
}

/** Runs a tool of the app (node_modules/.bin/NAME); failures carry its output. */
export function tool(dir, name, args) {
  try {
    return execFileSync(path.join(dir, "node_modules/.bin", name), args, { cwd: dir, encoding: "utf8", stdio: "pipe" });
  } catch (e) {
    throw new Error(`${name} ${args.join(" ")} failed:\n${e.stdout}\n${e.stderr}`);
  }
}

/**
 * Chromium with a fresh profile and the model server (another origin, CORS); `stop()` ends both. `extension`: the
 * folder of an unpacked extension to load.
 */
export async function startBrowser({ extension = null } = {}) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-chromium-"));
  const args = extension ? [...ARGS, `--disable-extensions-except=${extension}`, `--load-extension=${extension}`] : ARGS;
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args });
  const models = await serve(MODELS, { cors: true });
  return {
    context, models,
    async stop() {
      await context.close();
      await models.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}

/**
 * A strict Content-Security-Policy for a built app: its own scripts and workers, WebAssembly compilation
 * ('wasm-unsafe-eval'), the model server; no eval, no inline script. A violation is a console error (checkApp fails).
 */
export function strictCsp(env) {
  return {
    "content-security-policy": "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; img-src 'self' data:; "
      + `connect-src 'self' ${new URL(env.models.url).origin}; object-src 'none'; base-uri 'none'`,
  };
}

/**
 * Opens the app at `url`, which sets window.appReady and offers window.embedBoth(model, texts, simd) → { main,
 * worker, builds }; embeds the golden texts with all-MiniLM-L6-v2 on the main thread and in bertgpu/worker, with
 * each wasm build, and checks them against PyTorch's vectors and the page for console errors. Resolves to the
 * result of the "auto" build.
 */
export async function checkApp(env, url) {
  const page = await env.context.newPage();
  const errors = [];
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") errors.push(`${m.type()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => errors.push(`uncaught: ${e.message}`));
  page.on("worker", (w) => w.on?.("console", (m) => {
    if (m.type() === "error") errors.push(`worker: ${m.text()}`);
  }));
  try {
    await page.goto(url);
    await page.waitForFunction(() => window.appReady === true, null, { timeout: 30_000 }).catch(() => {
      throw new Error(`the app at ${url} did not start: ${errors.join("\n") || "no console output"}`);
    });
    const embed = (simd) => page.evaluate(({ model, texts, simd }) => window.embedBoth(model, texts, simd),
      { model: `${env.models.url}all-MiniLM-L6-v2/`, texts: golden.sentences, simd });
    // "auto" takes the relaxed build here (Chromium has relaxed SIMD); then the SIMD128 build: both .wasm files
    // must be where the app put them. Each build gives the same vectors bit for bit on the main thread and in the
    // worker, and the two builds agree within BUILDS_ATOL.
    const got = await embed("auto");
    assert.deepEqual(got.builds, ["relaxed", "relaxed"]);
    assertGolden(got.main, "main thread");
    assert.deepEqual(got.worker, got.main, "bertgpu/worker gives the main thread's vectors");
    const simd128 = await embed("simd128");
    assert.deepEqual(simd128.builds, ["simd128", "simd128"]);
    assertGolden(simd128.main, "main thread, SIMD128 build");
    assert.deepEqual(simd128.worker, simd128.main, "the SIMD128 build in bertgpu/worker");
    assertBuildsAgree(simd128.main, got.main, "the SIMD128 build against the relaxed build");
    assert.deepEqual(errors, [], "console errors or warnings in the app");
    return { ...got, simd128: simd128.main };
  } finally {
    await page.close();
  }
}

/** Checks two builds' vectors of the same texts against each other, value by value (BUILDS_ATOL). */
export function assertBuildsAgree(a, b, what) {
  assert.equal(a.length, b.length, `${what}: as many vectors`);
  a.forEach((v, i) => v.forEach((x, j) => assert.ok(Math.abs(x - b[i][j]) <= BUILDS_ATOL,
    `${what}: vector ${i}[${j}] = ${x} against ${b[i][j]}`)));
}

/** Checks vectors of the golden texts against PyTorch's, value by value (ATOL). */
export function assertGolden(vectors, what) {
  assert.equal(vectors.length, golden.sentences.length, `${what}: one vector per text`);
  vectors.forEach((v, i) => {
    assert.equal(v.length, golden.mean_normalized[i].length, `${what}: vector ${i}: length`);
    v.forEach((x, j) => assert.ok(Math.abs(x - golden.mean_normalized[i][j]) <= ATOL,
      `${what}: vector ${i}[${j}] = ${x}, PyTorch ${golden.mean_normalized[i][j]}`));
  });
}

/**
 * The golden texts' vectors from the package installed in `app`, run in this Node.js process (a folder path), and
 * the build that ran ("simd128", or "relaxed" on Node 22+).
 */
export async function nodeVectors(app) {
  const { Bert } = await import(pathToFileURL(path.join(app, "node_modules/bertgpu/index.js")).href);
  const bert = await Bert.load(path.join(MODELS, "all-MiniLM-L6-v2"));
  const vectors = (await bert.embed(GOLDEN.sentences)).map((v) => Array.from(v));
  const simd = bert.simd;
  bert.dispose();
  return { simd, vectors };
}
