// Soak in the browser: thousands of sequential embed calls with flat memory, and 100 overlapping calls (20 on
// WebGPU) that all resolve to the sequential results. tests/models/tiny-pretraining, on the wasm CPU backend and on SwiftShader WebGPU.
//
// Memory is read through debug exports: the bytes Rust has allocated and not freed (a counting global allocator in
// src/wasm/: exact, so a leak of even one small allocation per call shows), the size of the wasm memory (which
// only grows), and on WebGPU the buffers the pool created. Each is read after a warm-up, then after the run.
//
// CI runs the counts below; a long run: BERTGPU_SOAK_CPU=100000 BERTGPU_SOAK_GPU=1000 node --test tests/browser/soak.test.mjs
// (measured: 100,000 CPU calls in 54 s and 1,000 WebGPU calls in 78 s, every count exactly flat).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { assertAllClose, start, openPage } from "./harness.mjs";

const TINY = "tests/models/tiny-pretraining/";
/** A call count from the environment: a positive integer, or the default; anything else stops the run (a count of 0 or
 * "abc" would turn the soak into a test that runs nothing and passes). */
function calls(name, fallback) {
  const raw = process.env[name];
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${name}=${JSON.stringify(raw)}: give a positive integer`);
  return n;
}
const CPU_CALLS = calls("BERTGPU_SOAK_CPU", 10_000);
const GPU_CALLS = calls("BERTGPU_SOAK_GPU", 50);
const WARMUP = 50;
const OVERLAPPING = 100;
/** SwiftShader runs a call ~100x slower than the wasm CPU backend: the WebGPU overlap check takes 20 calls. */
const GPU_OVERLAPPING = 20;
/**
 * Max |overlapped − sequential| per value of a normalised vector on WebGPU, where half the overlapping calls are
 * padded to a partner's length. Measured on SwiftShader: 0 (the padding is masked out exactly). 1e-6 (~8 f32 steps
 * at 1) admits another adapter's rounding of the masked sums, and fails a padding that leaks into a vector.
 */
const GPU_OVERLAP_ATOL = 1e-6;

let env;
let page;

before(async () => {
  env = await start();
  page = await openPage(env);
});

after(async () => {
  await env?.stop();
});

/** Runs the soak on `device` in the page: returns memory before/after, timings and the overlap check's vectors. */
function soak(device, calls, OVERLAPPING) {
  return page.evaluate(async ({ url, device, calls, WARMUP, OVERLAPPING }) => {
    const bert = await bertgpu.Bert.load(url, { device, cache: false });
    const heap = () => bert._rt.glue.__debugHeap();
    const gpu = () => bert._model.__debugGpuBuffers() ?? null;
    // Texts of 7 lengths (different batch shapes, different allocation sizes), cycling; the number in them keeps
    // the same count of tokens, so the shapes a warm-up sees are all the shapes there are.
    const text = (i) => `call ${i % 10}: ${"the quick brown fox ".repeat(1 + (i % 7))}`;
    // OVERLAPPING calls at once (the wrapper queues them), half of them batched with a shorter text, against the texts
    // embedded one after another.
    const texts = Array.from({ length: OVERLAPPING }, (_, i) => text(i * 13));
    const overlap = async () => (await Promise.all(texts.map((t, i) => (i % 2
      ? bert.embed(t)
      : bert.embed([t, "padding partner"]).then((vs) => vs[0]))))).map((v) => Array.from(v));
    // Warm-up: every shape once, so buffers a backend keeps for reuse (the GPU pool, scratch capacity) exist; and
    // the measurement itself once (its first call allocates wasm-bindgen's cache of the result's field names).
    heap();
    gpu();
    await overlap();
    for (let i = 0; i < WARMUP; i++) await bert.embed(text(i));
    const before = { heap: heap(), gpu: gpu() };
    const t0 = performance.now();
    let finite = true;
    for (let i = 0; i < calls; i++) {
      const v = await bert.embed(text(i));
      if (i % 97 === 0) finite &&= v.every(Number.isFinite);
    }
    const ms = performance.now() - t0;
    const afterRun = { heap: heap(), gpu: gpu() };
    const sequential = [];
    for (const t of texts) sequential.push(Array.from(await bert.embed(t)));
    const overlapped = await overlap();
    const afterOverlap = { heap: heap(), gpu: gpu() };
    bert.dispose();
    return { before, afterRun, afterOverlap, ms, finite, sequential, overlapped };
  }, { url: env.models.url + TINY, device, calls, WARMUP, OVERLAPPING });
}

function report(device, calls, got, overlapping) {
  const kb = (b) => (b / 1024).toFixed(1);
  console.log(`# soak ${device}: ${calls} sequential embed calls in ${(got.ms / 1000).toFixed(1)} s `
    + `(${(got.ms / calls).toFixed(2)} ms/call); live Rust heap ${kb(got.before.heap.liveBytes)} KiB → `
    + `${kb(got.afterRun.heap.liveBytes)} KiB → ${kb(got.afterOverlap.heap.liveBytes)} KiB after ${overlapping} `
    + `overlapping; wasm memory ${kb(got.before.heap.memoryBytes)} KiB → ${kb(got.afterRun.heap.memoryBytes)} KiB`
    + (got.before.gpu ? `; GPU pool buffers ${got.before.gpu[0]} (${kb(got.before.gpu[1])} KiB) → ${got.afterRun.gpu[0]} `
      + `(${kb(got.afterRun.gpu[1])} KiB)` : ""));
}

/**
 * Flat memory: after the warm-up every allocation of a call is freed by its end, so the live bytes return to the
 * same count exactly; the wasm memory does not grow; the GPU pool reuses its buffers (none created). Overlapping
 * calls take the same path (queued), so they too must leave the count where it was.
 */
function assertFlat(got) {
  assert.equal(got.afterRun.heap.liveBytes, got.before.heap.liveBytes, "live Rust heap bytes after the run");
  assert.equal(got.afterOverlap.heap.liveBytes, got.before.heap.liveBytes, "live Rust heap bytes after the overlap");
  assert.equal(got.afterRun.heap.memoryBytes, got.before.heap.memoryBytes, "wasm memory grew");
  if (got.before.gpu) {
    assert.deepEqual(got.afterRun.gpu, got.before.gpu, "GPU buffers [created, bytes, weight bytes]");
    assert.deepEqual(got.afterOverlap.gpu, got.before.gpu, "GPU buffers after the overlap");
  }
}

test(`soak on the CPU: ${CPU_CALLS} sequential embed calls with flat memory; ${OVERLAPPING} overlapping calls`, async () => {
  const got = await soak("cpu", CPU_CALLS, OVERLAPPING);
  report("cpu", CPU_CALLS, got, OVERLAPPING);
  assert.ok(got.finite);
  assertFlat(got);
  // Queued calls run one at a time, in order: each vector is the sequential one bit for bit (a text batched with a
  // shorter partner is padded, and padding is masked out exactly on the CPU backend).
  assert.deepEqual(got.overlapped, got.sequential);
  page.checkErrors();
});

test(`soak on WebGPU: ${GPU_CALLS} sequential embed calls with flat memory and GPU buffers; ${GPU_OVERLAPPING} overlapping`, async () => {
  const got = await soak("webgpu", GPU_CALLS, GPU_OVERLAPPING);
  report("webgpu", GPU_CALLS, got, GPU_OVERLAPPING);
  assert.ok(got.finite);
  assertFlat(got);
  assert.equal(got.overlapped.length, GPU_OVERLAPPING);
  got.overlapped.forEach((v, i) => assertAllClose(v, got.sequential[i], GPU_OVERLAP_ATOL, `overlapped call ${i}`));
  page.checkErrors();
});
