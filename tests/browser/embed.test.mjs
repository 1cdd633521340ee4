// `embed` in headless Chromium against the PyTorch goldens (tests/golden/model.json, made by tests/golden/model.py):
// all-MiniLM-L6-v2 on the wasm CPU backend, and splade-tiny on SwiftShader WebGPU (about 50x slower than native, so
// short inputs only). Run: scripts/build-wasm.sh && node --test tests/browser/
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { assertAllClose, convertGguf, cosine, openPage, readJson, withPage } from "./harness.mjs";

/*
 * Max |ours − PyTorch| per value. The goldens are PyTorch f32 outputs written to 7 significant digits (rounding
 * ≤ 3e-7 on the largest hidden value, 6.2); ours sum in other orders. Measured with this file (every run gives the
 * same numbers; they are printed at its end), each bound about 3× the largest measured:
 */
/** wasm CPU, L2-normalised vectors (values ≤ 0.3): measured 2.7e-7 (MiniLM). */
const CPU_NORMALIZED_ATOL = 1e-6;
/** wasm CPU, unnormalised mean-pooled vectors and [CLS] rows (values ≤ 6.2): measured 1.8e-6 (MiniLM mean), 1.3e-6
 * (MiniLM [CLS]), 1.6e-6 (splade-tiny mean, from safetensors and from GGUF alike). */
const CPU_HIDDEN_ATOL = 5e-6;
/**
 * WebGPU, unnormalised mean-pooled vectors and [CLS] rows of splade-tiny (values ≤ 3.9): measured on SwiftShader
 * 1.0e-6 (mean) and 2.2e-6 ([CLS]). 1e-5 is 4.5× that: WGSL leaves the rounding of exp, tanh and fused multiply-adds
 * to the implementation, so a hardware adapter's values may move a little more than SwiftShader's. A wrong kernel
 * moves them by orders of magnitude more (one golden value moved by 0.0125 fails).
 */
const WEBGPU_HIDDEN_ATOL = 1e-5;
/**
 * WebGPU with `activations: "f16"`: every activation rounded to f16 between kernels. Natively the hidden states of
 * splade-tiny move by up to 2.3e-3 against PyTorch (tests/model_gpu.rs); here the mean-pooled vectors measured
 * 1.2e-3 on SwiftShader (logged), and 6e-3, the native test's bound, is 4.9× that. Cosine per sentence: measured
 * 1 − cos 6.8e-8 here (1e-7 natively on lavapipe); 1 − 5e-7 allows 7× SwiftShader's.
 */
const WEBGPU_F16_ATOL = 6e-3;
const WEBGPU_F16_MIN_COSINE = 0.9999995;

const golden = readJson("tests/golden/model.json");
const ctx = withPage();

/** The largest difference seen per kind of comparison, reported once the file's tests are done. */
const measured = {};
function close(got, want, atol, kind, what) {
  const d = assertAllClose(got, want, atol, what);
  measured[kind] = Math.max(measured[kind] ?? 0, d);
}
after(() => console.log(`# max |ours − PyTorch| per value: ${JSON.stringify(measured)}`));

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
    close(got.normalized[i], g.mean_normalized[i], CPU_NORMALIZED_ATOL, "cpu minilm normalized", `normalized[${i}]`);
    close(got.mean[i], g.mean[i], CPU_HIDDEN_ATOL, "cpu minilm mean", `mean[${i}]`);
  });
  clsRows("all-MiniLM-L6-v2").forEach((want, i) => close(got.cls[i], want, CPU_HIDDEN_ATOL, "cpu minilm cls", `cls[${i}]`));
  close(got.single, g.mean_normalized[1], CPU_NORMALIZED_ATOL, "cpu minilm normalized", "single text");
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
  // The same wasm build and kernels in a worker, and a padded batch instead of one text per call: on the CPU backend
  // padding is masked out exactly (measured: no value differs), so the vectors are the main thread's bit for bit.
  assert.deepEqual(got.inWorker, got.sequential);
  assert.ok(got.workerType);
  g.sentences.forEach((s, i) => {
    close(got.sequential[i], g.mean[i], CPU_HIDDEN_ATOL, "cpu splade mean", `main[${i}]`);
    close(got.inWorker[i], g.mean[i], CPU_HIDDEN_ATOL, "cpu splade mean", `worker[${i}]`);
  });
  ctx.page.checkErrors();
});

test("embed on WebGPU equals PyTorch: splade-tiny, short texts; auto takes WebGPU on a hardware adapter, the CPU on a fallback one", async () => {
  const g = golden["splade-tiny"];
  // SwiftShader runs WebGPU on the CPU ~50x slower than native: the short sentences only.
  const idx = g.sentences.map((s, i) => [s, i]).filter(([s]) => s.length < 50).map(([, i]) => i);
  assert.ok(idx.length >= 3);
  const got = await ctx.page.evaluate(async ({ url, sentences }) => {
    // The adapter the package asks for (js/index.js), to know what "auto" must pick.
    const adapter = await navigator.gpu?.requestAdapter({ powerPreference: "high-performance" });
    if (!adapter) return { adapter: false };
    const fallback = adapter.info?.isFallbackAdapter ?? adapter.isFallbackAdapter;
    const auto = await bertgpu.Bert.load(url);
    const autoDevice = auto.device;
    auto.dispose();
    const bert = await bertgpu.Bert.load(url, { device: "webgpu" });
    const toArrays = (vs) => vs.map((v) => Array.from(v));
    const out = {
      adapter: true, fallback, autoDevice, device: bert.device,
      mean: toArrays(await bert.embed(sentences, { normalize: false })),
      cls: toArrays(await bert.embed(sentences, { pooling: "cls", normalize: false })),
      // one at a time: batches of 1 (no padding) must agree with the padded batch
      single: Array.from(await bert.embed(sentences[0], { normalize: false })),
      tokens: (await bert.tokenize(sentences[0])).tokens,
    };
    bert.dispose();
    return out;
  }, { url: ctx.env.models.url + "models/splade-tiny/", sentences: idx.map((i) => g.sentences[i]) });
  assert.ok(got.adapter, "no WebGPU adapter: Chromium needs --enable-unsafe-webgpu (tests/browser/harness.mjs)");
  assert.equal(typeof got.fallback, "boolean", "the adapter says whether it is a fallback adapter");
  // A software adapter (SwiftShader here) runs WebGPU tens of times slower than the wasm CPU backend: "auto" takes
  // the CPU there, and WebGPU on a hardware adapter.
  assert.equal(got.autoDevice, got.fallback ? "cpu" : "webgpu", `auto on a ${got.fallback ? "fallback" : "hardware"} adapter`);
  assert.equal(got.device, "webgpu");
  const cls = clsRows("splade-tiny");
  idx.forEach((i, k) => {
    close(got.mean[k], g.mean[i], WEBGPU_HIDDEN_ATOL, "webgpu splade mean", `webgpu mean[${i}]`);
    close(got.cls[k], cls[i], WEBGPU_HIDDEN_ATOL, "webgpu splade cls", `webgpu cls[${i}]`);
  });
  close(got.single, g.mean[idx[0]], WEBGPU_HIDDEN_ATOL, "webgpu splade mean", "webgpu single");
  assert.equal(got.tokens[0], "[CLS]");
  ctx.page.checkErrors();
});

test("a WebGPU load writes the weights into GPU memory as they download: wasm memory never holds them", async () => {
  // A fresh page: its module's memory has held nothing yet, and never shrinks, so its size after the load is the
  // most the load ever put there. all-MiniLM-L6-v2's f32 weights are 86.7 MiB.
  const page = await openPage(ctx.env);
  try {
    const got = await page.evaluate(async ({ url }) => {
      if (!await navigator.gpu?.requestAdapter()) return null;
      const bert = await bertgpu.Bert.load(url, { device: "webgpu", cache: false });
      const heap = bert._rt.glue.__debugHeap();
      const v = Array.from(await bert.embed("placed on the GPU as it arrived"));
      const cpu = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
      const w = Array.from(await cpu.embed("placed on the GPU as it arrived"));
      bert.dispose();
      cpu.dispose();
      return { heap, v, w };
    }, { url: ctx.env.models.url + "models/all-MiniLM-L6-v2/" });
    assert.ok(got, "no WebGPU adapter: Chromium needs --enable-unsafe-webgpu (tests/browser/harness.mjs)");
    const file = 90_868_376; // bytes of all-MiniLM-L6-v2's model.safetensors
    assert.ok(got.heap.memoryBytes < file / 2,
      `wasm memory grew to ${(got.heap.memoryBytes / 2 ** 20).toFixed(1)} MiB in a WebGPU load of an 86.7 MiB file`);
    assert.ok(cosine(got.v, got.w) > 0.9999, `WebGPU and the CPU disagree: cosine ${cosine(got.v, got.w)}`);
    page.checkErrors();
  } finally {
    await page.close();
  }
});

test("activations \"f16\" on WebGPU: within f16's rounding of PyTorch, from the main thread and a worker; refused for training; the CPU stays f32", async () => {
  const g = golden["splade-tiny"];
  const idx = g.sentences.map((s, i) => [s, i]).filter(([s]) => s.length < 50).map(([, i]) => i);
  const got = await ctx.page.evaluate(async ({ url, sentences }) => {
    const toArrays = (vs) => vs.map((v) => Array.from(v));
    const bert = await bertgpu.Bert.load(url, { device: "webgpu", activations: "f16" });
    const out = { device: bert.device, activations: bert.activations, mean: toArrays(await bert.embed(sentences, { normalize: false })) };
    out.train = await bert.trainHead([{ text: "a", label: "x" }, { text: "b", label: "y" }], { epochs: 1 })
      .then(() => "trained", (e) => e.message);
    bert.dispose();
    const inWorker = await bertgpuWorker.Bert.load(url, { device: "webgpu", activations: "f16" });
    out.worker = { activations: inWorker.activations, mean: toArrays(await inWorker.embed(sentences, { normalize: false })) };
    inWorker.dispose();
    const cpu = await bertgpu.Bert.load(url, { device: "cpu", activations: "f16" });
    out.cpu = cpu.activations;
    cpu.dispose();
    out.bad = await bertgpu.Bert.load(url, { activations: "f8" }).then(() => "loaded", (e) => `${e.name}: ${e.message}`);
    return out;
  }, { url: ctx.env.models.url + "models/splade-tiny/", sentences: idx.map((i) => g.sentences[i]) });
  assert.equal(got.device, "webgpu");
  assert.equal(got.activations, "f16");
  assert.equal(got.worker.activations, "f16");
  for (const [who, mean] of [["main thread", got.mean], ["worker", got.worker.mean]]) {
    idx.forEach((i, k) => {
      close(mean[k], g.mean[i], WEBGPU_F16_ATOL, "webgpu f16 splade mean", `${who} f16 mean[${i}]`);
      const c = cosine(mean[k], g.mean[i]);
      measured["webgpu f16 splade 1 − cosine"] = Math.max(measured["webgpu f16 splade 1 − cosine"] ?? 0, 1 - c);
      assert.ok(c >= WEBGPU_F16_MIN_COSINE, `${who} sentence ${i}: cosine ${c} to PyTorch < ${WEBGPU_F16_MIN_COSINE}`);
    });
  }
  assert.match(got.train, /f16 activations.*inference only/);
  assert.equal(got.cpu, "f32", "the CPU computes in f32");
  assert.match(got.bad, /TypeError: Bert.load: activations must be "f32" or "f16"/);
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
    close(got.cpu[k], g.mean[i], CPU_HIDDEN_ATOL, "gguf cpu splade mean", `gguf cpu mean[${i}]`);
    close(got.webgpu[k], g.mean[i], WEBGPU_HIDDEN_ATOL, "gguf webgpu splade mean", `gguf webgpu mean[${i}]`);
  });
  ctx.page.checkErrors();
});
