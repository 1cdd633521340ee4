// `embed` in headless Chromium against the PyTorch goldens (tests/golden/model.json, made by tests/golden/model.py):
// all-MiniLM-L6-v2 on the wasm CPU backend, and splade-tiny on SwiftShader WebGPU (about 50x slower than native, so
// short inputs only). Run: scripts/build-wasm.sh && node --test tests/browser/
import { test } from "node:test";
import assert from "node:assert/strict";
import { convertGguf, cosine, readJson, withPage } from "./harness.mjs";

// The parity criterion for pooled vectors: f32 on another backend and another summation order than PyTorch.
const MIN_COSINE = 0.9999;
// Unnormalised vectors must also agree in length (cosine alone ignores scale).
const NORM_RTOL = 1e-3;

const golden = readJson("tests/golden/model.json");
const ctx = withPage();

function norm(v) {
  return Math.sqrt(v.reduce((s, x) => s + x * x, 0));
}

function assertClose(got, want, what) {
  assert.equal(got.length, want.length, `${what}: length`);
  const c = cosine(got, want);
  assert.ok(c >= MIN_COSINE, `${what}: cosine ${c} < ${MIN_COSINE}`);
  const rel = Math.abs(norm(got) - norm(want)) / norm(want);
  assert.ok(rel <= NORM_RTOL, `${what}: norm ${norm(got)} vs ${norm(want)}`);
}

/** Rows of the golden hidden state at token 0 ([CLS]) per sentence. */
function clsRows(model) {
  return golden[model].sentences.map((_, s) => golden[model].rows.find((r) => r.sentence === s && r.token === 0).values);
}

test("embed on the CPU (wasm) equals PyTorch: all-MiniLM-L6-v2, mean+normalize, mean, cls", async () => {
  const g = golden["all-MiniLM-L6-v2"];
  const got = await ctx.page.evaluate(async ({ url, sentences }) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const toArrays = (vs) => vs.map((v) => Array.from(v));
    const out = {
      device: bert.device,
      isF32: (await bert.embed(sentences[0])) instanceof Float32Array,
      normalized: toArrays(await bert.embed(sentences)),
      // batchSize 2: three forward passes, padded differently, must not change any vector
      mean: toArrays(await bert.embed(sentences, { normalize: false, batchSize: 2 })),
      cls: toArrays(await bert.embed(sentences, { pooling: "cls", normalize: false })),
      single: Array.from(await bert.embed(sentences[1])),
      empty: await bert.embed([]),
    };
    bert.dispose();
    return out;
  }, { url: ctx.env.models.url + "models/all-MiniLM-L6-v2/", sentences: g.sentences });
  assert.equal(got.device, "cpu");
  assert.ok(got.isF32);
  g.sentences.forEach((s, i) => {
    assertClose(got.normalized[i], g.mean_normalized[i], `normalized[${i}]`);
    assertClose(got.mean[i], g.mean[i], `mean[${i}]`);
  });
  clsRows("all-MiniLM-L6-v2").forEach((want, i) => assertClose(got.cls[i], want, `cls[${i}]`));
  assertClose(got.single, g.mean_normalized[1], "single text");
  assert.deepEqual(got.empty, []);
  ctx.page.checkErrors();
});

test("embed in the worker entry equals the main thread, and overlapping calls give sequential results", async () => {
  const g = golden["splade-tiny"];
  const got = await ctx.page.evaluate(async ({ url, sentences }) => {
    const main = await bertgpu.Bert.load(url, { device: "cpu" });
    const sequential = [];
    for (const s of sentences) sequential.push(Array.from(await main.embed(s, { normalize: false })));
    const overlapped = (await Promise.all(sentences.map((s) => main.embed(s, { normalize: false })))).map((v) => Array.from(v));
    const worker = await bertgpuWorker.Bert.load(url, { device: "cpu" });
    const inWorker = (await worker.embed(sentences, { normalize: false })).map((v) => Array.from(v));
    const workerType = (await worker.embed(sentences[0])) instanceof Float32Array;
    main.dispose();
    worker.dispose();
    return { sequential, overlapped, inWorker, workerType };
  }, { url: ctx.env.models.url + "models/splade-tiny/", sentences: g.sentences });
  assert.deepEqual(got.overlapped, got.sequential);
  assert.ok(got.workerType);
  g.sentences.forEach((s, i) => {
    assertClose(got.sequential[i], g.mean[i], `main[${i}]`);
    assertClose(got.inWorker[i], g.mean[i], `worker[${i}]`);
  });
  ctx.page.checkErrors();
});

test("embed on WebGPU (SwiftShader) equals PyTorch: splade-tiny, short texts; auto takes the CPU on a fallback adapter", async () => {
  const g = golden["splade-tiny"];
  // SwiftShader runs WebGPU on the CPU ~50x slower than native: the short sentences only.
  const idx = g.sentences.map((s, i) => [s, i]).filter(([s]) => s.length < 50).map(([, i]) => i);
  assert.ok(idx.length >= 3);
  const got = await ctx.page.evaluate(async ({ url, sentences }) => {
    const adapter = await navigator.gpu.requestAdapter();
    const fallback = adapter.info?.isFallbackAdapter ?? adapter.isFallbackAdapter;
    const auto = await bertgpu.Bert.load(url);
    const autoDevice = auto.device;
    auto.dispose();
    const bert = await bertgpu.Bert.load(url, { device: "webgpu" });
    const toArrays = (vs) => vs.map((v) => Array.from(v));
    const out = {
      fallback, autoDevice, device: bert.device,
      mean: toArrays(await bert.embed(sentences, { normalize: false })),
      cls: toArrays(await bert.embed(sentences, { pooling: "cls", normalize: false })),
      // one at a time: batches of 1 (no padding) must agree with the padded batch
      single: Array.from(await bert.embed(sentences[0], { normalize: false })),
      tokens: (await bert.tokenize(sentences[0])).tokens,
    };
    bert.dispose();
    return out;
  }, { url: ctx.env.models.url + "models/splade-tiny/", sentences: idx.map((i) => g.sentences[i]) });
  assert.equal(got.fallback, true, "the test machine's adapter is SwiftShader");
  assert.equal(got.autoDevice, "cpu");
  assert.equal(got.device, "webgpu");
  const cls = clsRows("splade-tiny");
  idx.forEach((i, k) => {
    assertClose(got.mean[k], g.mean[i], `webgpu mean[${i}]`);
    assertClose(got.cls[k], cls[i], `webgpu cls[${i}]`);
  });
  assertClose(got.single, g.mean[idx[0]], "webgpu single");
  assert.equal(got.tokens[0], "[CLS]");
  ctx.page.checkErrors();
});

test("a .gguf URL loads: splade-tiny converted to GGUF (f32) embeds as PyTorch on the CPU and WebGPU", async () => {
  const gguf = convertGguf("splade-tiny", "f32", "splade-tiny-f32.gguf");
  const g = golden["splade-tiny"];
  const idx = g.sentences.map((s, i) => [s, i]).filter(([s]) => s.length < 50).map(([, i]) => i);
  const got = await ctx.page.evaluate(async ({ url, sentences }) => {
    const files = [];
    const out = {};
    for (const device of ["cpu", "webgpu"]) {
      const bert = await bertgpu.Bert.load(url, { device, onProgress: (p) => files.push(p.file) });
      out[device] = (await bert.embed(sentences, { normalize: false })).map((v) => Array.from(v));
      out.tokens = (await bert.tokenize(sentences[0])).tokens;
      bert.dispose();
    }
    out.files = [...new Set(files)];
    return out;
  }, { url: ctx.env.models.url + gguf, sentences: idx.map((i) => g.sentences[i]) });
  assert.deepEqual(got.files, ["splade-tiny-f32.gguf"]);
  assert.equal(got.tokens[0], "[CLS]");
  idx.forEach((i, k) => {
    assertClose(got.cpu[k], g.mean[i], `gguf cpu mean[${i}]`);
    assertClose(got.webgpu[k], g.mean[i], `gguf webgpu mean[${i}]`);
  });
  ctx.page.checkErrors();
});
