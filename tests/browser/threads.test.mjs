// The threaded builds (pkg/wasm-threads/ and wasm-threads-relaxed/: a pool of Web Workers over one shared memory,
// src/backend/cpu/threads.rs): on a cross-origin isolated page Bert.load picks one (relaxed SIMD where the
// single-threaded choice is relaxed SIMD, as in this Chromium), its results equal the single-threaded build's, calls
// overlap safely, the worker entry runs it, and the last dispose() ends the pool; elsewhere the load falls back, no
// error.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { ROOT, convertGguf, withPage } from "./harness.mjs";

// Exact equality, not a tolerance: the pool splits a loop's independent items (GEMM row blocks, attention per
// (sequence, head), LayerNorm rows, the Q8_0 kernel's row blocks) between threads, and each output element is still
// reduced by one thread in the same order as on one thread, with the same kernels: the SIMD128 builds are compared
// with each other (`simd: "simd128"`), and the relaxed-SIMD ones with each other.
const TEXTS = ["a short sentence", "the cat sat on the mat and looked at the dog", "x"];
const MASKED = ["paris is the [MASK] of france.", "the [MASK] sat on the mat."];

const isolated = withPage({ isolated: true });

test("threads: an isolated page runs the SIMD128 threaded build, equal to one thread, overlapping calls, worker entry, dispose ends the pool", async () => {
  const gguf = convertGguf("all-MiniLM-L6-v2", "q8_0", "minilm-q8_0.gguf");
  const got = await isolated.page.evaluate(async ({ splade, minilm, q8, texts, masked }) => {
    const glue = await import("/pkg/wasm-threads/bertgpu.js");
    const out = { isolated: globalThis.crossOriginIsolated };
    const one = await bertgpu.Bert.load(minilm, { device: "cpu", threads: 1, simd: "simd128" });
    const two = await bertgpu.Bert.load(minilm, { device: "cpu", threads: 2, simd: "simd128" });
    out.threads = [one.threads, two.threads, one.threadsReason, two.threadsReason, two.simd];
    // [threads planned for, workers running, items the workers have run]
    out.pool = Array.from(glue.__threadsState());
    out.e1 = (await one.embed(texts)).map((v) => Array.from(v));
    out.e2 = (await two.embed(texts)).map((v) => Array.from(v));
    out.workerItems = glue.__threadsState()[2] - out.pool[2];
    const m1 = await bertgpu.Bert.load(splade, { device: "cpu", threads: 1, simd: "simd128" });
    const m2 = await bertgpu.Bert.load(splade, { device: "cpu", threads: 2, simd: "simd128" });
    out.f1 = await m1.fillMask(masked);
    out.f2 = await m2.fillMask(masked);
    const q1 = await bertgpu.Bert.load(q8, { device: "cpu", threads: 1, simd: "simd128" });
    const q2 = await bertgpu.Bert.load(q8, { device: "cpu", threads: 2, simd: "simd128" });
    out.q1 = (await q1.embed(texts)).map((v) => Array.from(v));
    out.q2 = (await q2.embed(texts)).map((v) => Array.from(v));
    q1.dispose();
    q2.dispose();
    // Overlapping calls on two models sharing the pool: each queue runs its own calls in order, and the module
    // runs one call at a time; every result must still equal its sequential reference.
    const calls = [];
    for (let i = 0; i < 6; i++) {
      calls.push(two.embed(texts[i % texts.length]).then((v) => Array.from(v)));
      calls.push(m2.fillMask(masked[i % masked.length]));
    }
    out.overlap = await Promise.all(calls);
    // The worker entry: the model in a worker, whose own pool is nested workers.
    const w = await bertgpuWorker.Bert.load(minilm, { device: "cpu", threads: 2, simd: "simd128" });
    out.workerThreads = w.threads;
    out.ew = (await Promise.all(texts.map((t) => w.embed(t)))).map((v) => Array.from(v));
    await w.dispose(); // resolves once the worker, and the pool it started, have ended
    // The wasm option: giving the threaded build alone is enough (the SIMD128 one is then run, relaxed SIMD or not);
    // giving only a single-threaded one falls back.
    const onlyThreads = await bertgpu.Bert.load(splade, { device: "cpu", threads: 2, wasm: { threads: "/pkg/wasm-threads/bertgpu_bg.wasm" } });
    const noThreads = await bertgpu.Bert.load(splade, { device: "cpu", threads: 2, wasm: "/pkg/wasm/bertgpu_bg.wasm" });
    out.given = [onlyThreads.threads, noThreads.threads, noThreads.threadsReason, onlyThreads.simd];
    onlyThreads.dispose();
    noThreads.dispose();
    out.bad = await bertgpu.Bert.load(splade, { device: "cpu", threads: 0 }).then(() => "no error", (e) => `${e.name}: ${e.message}`);
    // dispose() runs after the queued calls (frees the model, then ends the pool), and resolves once the pool's
    // workers have left: then 1 thread is planned and none runs.
    await Promise.all([one, two, m1, m2].map((m) => m.dispose()));
    out.after = Array.from(glue.__threadsState());
    out.disposedThreads = two.threads;
    return out;
  }, { splade: isolated.env.models.url + "models/splade-tiny/", minilm: isolated.env.models.url + "models/all-MiniLM-L6-v2/",
    q8: isolated.env.models.url + gguf, texts: TEXTS, masked: MASKED });

  assert.equal(got.isolated, true);
  assert.deepEqual(got.threads, [1, 2, null, null, "simd128"]);
  assert.deepEqual(got.pool.slice(0, 2), [2, 1], "a pool of 2 threads: the caller and one worker, running");
  assert.ok(got.workerItems > 0, "the worker ran items of embed's loops");
  assert.equal(got.e1.length, TEXTS.length);
  assert.ok(got.e1.every((v) => v.length === 384));
  assert.deepEqual(got.e2, got.e1, "embed on 2 threads");
  assert.equal(got.f1.length, MASKED.length);
  assert.deepEqual(got.f2, got.f1, "fillMask on 2 threads");
  assert.ok(got.q1.length === TEXTS.length && got.q1.every((v) => v.length === 384));
  assert.deepEqual(got.q2, got.q1, "Q8_0 embed on 2 threads");
  for (let i = 0; i < 6; i++) {
    assert.deepEqual(got.overlap[2 * i], got.e1[i % TEXTS.length], `overlapping embed ${i}`);
    assert.deepEqual(got.overlap[2 * i + 1], got.f1[i % MASKED.length], `overlapping fillMask ${i}`);
  }
  assert.equal(got.workerThreads, 2);
  assert.deepEqual(got.ew, got.e1, "embed from the worker entry on 2 threads");
  assert.deepEqual(got.given.slice(0, 2), [2, 1]);
  assert.match(got.given[2], /the wasm option gives no threaded build/);
  assert.equal(got.given[3], "simd128");
  assert.match(got.bad, /^TypeError: Bert\.load: threads must be an integer from 1 to 64/);
  assert.deepEqual(got.after.slice(0, 2), [1, 0], "the last dispose() ends the pool");
  assert.equal(got.disposedThreads, 1);
  isolated.page.checkErrors();
});

test("threads: fineTune and pretrain on the threaded build train what one thread trains, bit for bit", async () => {
  // Real text (Debian's fortunes): 16 short quotations, 4 topics; splade-tiny (hidden 128) gives the pool's loops
  // enough rows to split. Its classifier head is new (seeded), its masked-LM head its own.
  const examples = fs.readFileSync(path.join(ROOT, "tests/data/fortunes/train.jsonl"), "utf8").trim().split("\n")
    .map((l) => JSON.parse(l)).sort((a, b) => a.text.length - b.text.length || (a.text < b.text ? -1 : 1)).slice(0, 16);
  const corpus = examples.map((e) => e.text).join("\n\n");
  const got = await isolated.page.evaluate(async ({ splade, examples, corpus }) => {
    const glue = await import("/pkg/wasm-threads/bertgpu.js");
    const sha256 = async (bytes) => Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)),
      (b) => b.toString(16).padStart(2, "0")).join("");
    const train = async (threads) => {
      const bert = await bertgpu.Bert.load(splade, { device: "cpu", threads, simd: "simd128" });
      const items = threads > 1 ? glue.__threadsState()[2] : 0; // one thread runs the single-threaded build
      const tuned = await bert.fineTune(examples, { task: "classify", epochs: 1, batchSize: 8, learningRate: 1e-3,
        seed: 4, validationSplit: 0 });
      const tunedModel = await sha256((await bert.exportModel())["model.safetensors"]);
      const bert2 = await bertgpu.Bert.load(splade, { device: "cpu", threads, simd: "simd128" });
      const initial = await sha256((await bert2.exportModel())["model.safetensors"]);
      const pre = await bert2.pretrain(corpus, { steps: 2, batchSize: 8, maxLength: 32, nsp: false, learningRate: 1e-3,
        seed: 4, validationSplit: 0 });
      const preModel = await sha256((await bert2.exportModel())["model.safetensors"]);
      const workerItems = threads > 1 ? glue.__threadsState()[2] - items : 0;
      const out = { threads: [bert.threads, bert2.threads], tuned, tunedModel, initial, pre, preModel, workerItems };
      await Promise.all([bert.dispose(), bert2.dispose()]);
      return out;
    };
    return { one: await train(1), two: await train(2) };
  }, { splade: isolated.env.models.url + "models/splade-tiny/", examples, corpus });
  assert.deepEqual(got.one.threads, [1, 1]);
  assert.deepEqual(got.two.threads, [2, 2]);
  assert.ok(got.two.workerItems > 0, "the pool's worker ran items of the training loops");
  assert.equal(got.one.tuned.steps.length, 2, "16 rows in batches of 8");
  assert.equal(got.one.pre.steps.length, 2);
  assert.deepEqual(got.two.tuned, got.one.tuned, "fineTune's report, every step's loss");
  assert.equal(got.two.tunedModel, got.one.tunedModel, "the fine-tuned model, bit for bit");
  assert.deepEqual(got.two.pre, got.one.pre, "pretrain's report, every step's losses and accuracies");
  assert.equal(got.two.preModel, got.one.preModel, "the pre-trained model, bit for bit");
  assert.notEqual(got.one.preModel, got.one.initial, "pre-training changed the weights");
  console.log(`fineTune and pretrain on 2 threads: the worker ran ${got.two.workerItems} items; the same models`);
  isolated.page.checkErrors();
});

test("threads: where relaxed SIMD is chosen, the relaxed-SIMD threaded build runs, equal to its one-thread build", async () => {
  const gguf = convertGguf("all-MiniLM-L6-v2", "q8_0", "minilm-q8_0.gguf");
  const got = await isolated.page.evaluate(async ({ minilm, q8, texts }) => {
    const glue = await import("/pkg/wasm-threads-relaxed/bertgpu.js");
    const out = {};
    const one = await bertgpu.Bert.load(minilm, { device: "cpu", threads: 1, simd: "relaxed" });
    const two = await bertgpu.Bert.load(minilm, { device: "cpu", threads: 2 });
    out.picked = [one.simd, two.simd, two.threads, two.threadsReason];
    const before = glue.__threadsState()[2];
    out.e1 = (await one.embed(texts)).map((v) => Array.from(v));
    out.e2 = (await two.embed(texts)).map((v) => Array.from(v));
    const q1 = await bertgpu.Bert.load(q8, { device: "cpu", threads: 1, simd: "relaxed" });
    const q2 = await bertgpu.Bert.load(q8, { device: "cpu", threads: 2, simd: "relaxed" });
    out.q1 = (await q1.embed(texts)).map((v) => Array.from(v));
    out.q2 = (await q2.embed(texts)).map((v) => Array.from(v));
    out.workerItems = glue.__threadsState()[2] - before;
    // The relaxed threaded build given alone is enough.
    const given = await bertgpu.Bert.load(minilm, { device: "cpu", threads: 2,
      wasm: { threadsRelaxed: "/pkg/wasm-threads-relaxed/bertgpu_bg.wasm" } });
    out.given = [given.threads, given.simd];
    await Promise.all([one, two, q1, q2, given].map((m) => m.dispose()));
    out.after = Array.from(glue.__threadsState());
    return out;
  }, { minilm: isolated.env.models.url + "models/all-MiniLM-L6-v2/", q8: isolated.env.models.url + gguf, texts: TEXTS });

  assert.deepEqual(got.picked, ["relaxed", "relaxed", 2, null]);
  assert.ok(got.workerItems > 0, "the worker ran items of embed's loops");
  assert.deepEqual(got.e2, got.e1, "embed on 2 threads, relaxed SIMD");
  assert.ok(got.q1.length === TEXTS.length && got.q1.every((v) => v.length === 384));
  assert.deepEqual(got.q2, got.q1, "Q8_0 embed on 2 threads, relaxed SIMD (its integer kernel)");
  assert.deepEqual(got.given, [2, "relaxed"]);
  assert.deepEqual(got.after.slice(0, 2), [1, 0], "the last dispose() ends the pool");
  isolated.page.checkErrors();
});

test("threads: a model WebGPU runs starts no pool; a CPU model on the same runtime does, so does auto falling back, and so does the crossover's CPU copy", async () => {
  const got = await isolated.page.evaluate(async ({ splade }) => {
    const glue = await import("/pkg/wasm-threads-relaxed/bertgpu.js");
    // [threads planned, workers running] once a started worker has entered its loop (it says it is ready just before).
    const settled = async () => {
      const t0 = performance.now();
      while (glue.__threadsState()[1] < glue.__threadsState()[0] - 1 && performance.now() - t0 < 10_000) {
        await new Promise((r) => setTimeout(r, 20));
      }
      return Array.from(glue.__threadsState()).slice(0, 2);
    };
    const gpu = await bertgpu.Bert.load(splade, { device: "webgpu", threads: 2 });
    const out = { gpu: [gpu.device, gpu.threads, gpu.simd], withGpu: Array.from(glue.__threadsState()).slice(0, 2) };
    out.gpuVector = Array.from(await gpu.embed("a short sentence"));
    const cpu = await bertgpu.Bert.load(splade, { device: "cpu", threads: 2 });
    out.cpu = [cpu.device, cpu.threads];
    out.withCpu = await settled();
    gpu.dispose();
    await cpu.embed("a short sentence"); // the GPU model's dispose must not end the CPU model's pool
    out.afterGpuDisposed = [cpu.threads, ...await settled()];
    await cpu.dispose();
    out.after = Array.from(glue.__threadsState()).slice(0, 2);
    // "auto" on a hardware adapter knows its device only once the model is built: SwiftShader passed off as hardware,
    // and a GPU that fails the load-time check (`_injectFault`), so the model falls back to the CPU after the load,
    // and the pool starts then.
    const requestAdapter = navigator.gpu.requestAdapter.bind(navigator.gpu);
    navigator.gpu.requestAdapter = async (o) => {
      const a = await requestAdapter(o);
      if (a) Object.defineProperty(a, "info", { value: { ...a.info, isFallbackAdapter: false, description: a.info?.description } });
      return a;
    };
    try {
      const auto = await bertgpu.Bert.load(splade, { threads: 2, cache: false, _injectFault: true });
      out.auto = [auto.device, auto.threads, await settled()];
      await auto.dispose();
    } finally {
      navigator.gpu.requestAdapter = requestAdapter;
    }
    // `crossover: true`: the GPU model's CPU copy is timed and run on the pool (SwiftShader: the CPU wins short
    // calls), which its dispose ends.
    const items = glue.__threadsState()[2];
    const twin = await bertgpu.Bert.load(splade, { device: "webgpu", threads: 2, cache: false, crossover: true });
    await twin.embed("a short sentence");
    out.twin = [twin.device, twin.threads, twin.lastCallDevice, twin.crossover.maxTokens > 0,
      glue.__threadsState()[0], glue.__threadsState()[2] > items];
    await twin.dispose();
    out.twinAfter = Array.from(glue.__threadsState()).slice(0, 2);
    return out;
  }, { splade: isolated.env.models.url + "models/splade-tiny/" });

  assert.deepEqual(got.gpu, ["webgpu", 1, "relaxed"]);
  assert.deepEqual(got.withGpu, [1, 0], "no pool for a GPU model");
  assert.equal(got.gpuVector.length, 128);
  assert.deepEqual(got.cpu, ["cpu", 2]);
  assert.deepEqual(got.withCpu, [2, 1], "a CPU model starts the pool");
  assert.deepEqual(got.afterGpuDisposed, [2, 2, 1], "the GPU model's dispose leaves the pool to the CPU model");
  assert.deepEqual(got.after, [1, 0], "the CPU model's dispose ends it");
  assert.deepEqual(got.auto, ["cpu", 2, [2, 1]], "auto fell back to the CPU after the load, and started the pool then");
  assert.deepEqual(got.twin, ["webgpu", 2, "cpu", true, 2, true], "the crossover's CPU copy runs on the pool");
  assert.deepEqual(got.twinAfter, [1, 0], "and its dispose ends the pool");
  isolated.page.checkErrors();
});

const plain = withPage();

test("threads: a page that is not cross-origin isolated falls back to one thread, with no error", async () => {
  const got = await plain.page.evaluate(async ({ splade, texts }) => {
    const bert = await bertgpu.Bert.load(splade, { device: "cpu", threads: 4 });
    const ref = await bertgpu.Bert.load(splade, { device: "cpu", threads: 1 });
    const out = { isolated: globalThis.crossOriginIsolated, threads: bert.threads, reason: bert.threadsReason,
      refReason: ref.threadsReason, simd: bert.simd };
    out.e = (await bert.embed(texts)).map((v) => Array.from(v));
    out.ref = (await ref.embed(texts)).map((v) => Array.from(v));
    bert.dispose();
    ref.dispose();
    return out;
  }, { splade: plain.env.models.url + "models/splade-tiny/", texts: TEXTS });

  assert.equal(got.isolated, false);
  assert.equal(got.threads, 1);
  assert.match(got.reason, /not cross-origin isolated/);
  assert.equal(got.refReason, null, "threads: 1 asks for no threads: no reason to give");
  assert.notEqual(got.simd, undefined);
  assert.deepEqual(got.e, got.ref);
  plain.page.checkErrors();
});

// Flat memory on the threaded build, as soak.test.mjs checks the others: the live Rust heap bytes (a counting
// allocator, exact) and the wasm memory after a warm-up, then after the run, must be equal; and ending and starting
// the pool again (each worker's stack, thread-locals and scratch) must leave the count where it was.
const SOAK_CALLS = 2_000;
const SOAK_WARMUP = 50;
const POOL_CYCLES = 4;

test("threads: memory stays flat over a soak of calls and over pool restarts", async () => {
  const got = await isolated.page.evaluate(async ({ url, calls, WARMUP, CYCLES }) => {
    const glue = await import("/pkg/wasm-threads-relaxed/bertgpu.js"); // the threaded build this Chromium picks
    const text = (i) => `call ${i % 10}: ${"the quick brown fox ".repeat(1 + (i % 7))}`;
    const cycle = async () => {
      const bert = await bertgpu.Bert.load(url, { device: "cpu", cache: false, threads: 2 });
      for (let i = 0; i < 7; i++) await bert.embed(text(i));
      await bert.dispose(); // ends the pool once the queued calls are done, and its workers have left
      return glue.__debugHeap();
    };
    const cycles = [];
    for (let c = 0; c < CYCLES; c++) cycles.push(await cycle());
    const bert = await bertgpu.Bert.load(url, { device: "cpu", cache: false, threads: 2 });
    for (let i = 0; i < WARMUP; i++) await bert.embed(text(i));
    const before = glue.__debugHeap();
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) await bert.embed(text(i));
    const ms = performance.now() - t0;
    const after = glue.__debugHeap();
    const threads = bert.threads;
    bert.dispose();
    return { cycles, before, after, ms, threads };
  }, { url: isolated.env.models.url + "tests/models/tiny-pretraining/", calls: SOAK_CALLS, WARMUP: SOAK_WARMUP,
    CYCLES: POOL_CYCLES });

  const kb = (b) => (b / 1024).toFixed(1);
  console.log(`# threads soak: ${SOAK_CALLS} calls on ${got.threads} threads in ${(got.ms / 1000).toFixed(1)} s; live heap `
    + `${kb(got.before.liveBytes)} → ${kb(got.after.liveBytes)} KiB; after each pool cycle `
    + `${got.cycles.map((c) => kb(c.liveBytes)).join(", ")} KiB`);
  assert.equal(got.threads, 2);
  assert.equal(got.after.liveBytes, got.before.liveBytes, "live Rust heap bytes after the run");
  assert.equal(got.after.memoryBytes, got.before.memoryBytes, "wasm memory grew");
  // The first cycle may leave what lives as long as the module (caches filled once); from the second on, flat.
  for (let c = 2; c < POOL_CYCLES; c++) {
    assert.equal(got.cycles[c].liveBytes, got.cycles[1].liveBytes, `live heap bytes after pool cycle ${c + 1}`);
  }
  isolated.page.checkErrors();
});
