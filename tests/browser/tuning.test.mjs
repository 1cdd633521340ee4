// The GPU kernels' calibration in the browser (src/backend/gpu/tune.rs, js/tuning.js). After Bert.load on WebGPU
// the wrapper applies the choice cached for the adapter and model shape, or calibrates; SwiftShader is a CPU
// adapter, where the defaults are the fastest, so `bert.tuning` says "default" and why. `bert.calibrate()` times
// every variant anyway and switches to the fastest once it passes the load-time check; the embeddings then still
// equal the CPU's; the worker build proxies calibrate(). tests/models/tiny-pretraining on SwiftShader WebGPU.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { start, openPage } from "./harness.mjs";

const TINY = "tests/models/tiny-pretraining/";
/// The GPU kernels' f32 sums in another order than the CPU's, on a 2-layer model (normalized vectors). Measured worst
/// on SwiftShader: 1.0e-7, default and calibrated kernels (printed as `worst |webgpu − cpu|`); 1e-6 is 9.6× that.
const EMBED_ATOL = 1e-6;

/** max |a − b| over two vectors of the same, non-zero length (an empty or short one fails, never passes). */
function worstDiff(a, b, what) {
  assert.ok(a.length > 0, `${what}: an empty vector`);
  assert.equal(a.length, b.length, `${what}: lengths`);
  return Math.max(...a.map((x, j) => Math.abs(x - b[j])));
}

let env;
let page;

before(async () => {
  env = await start();
  page = await openPage(env);
});

after(async () => {
  await env?.stop();
});

test("bert.tuning says which kernels run; bert.calibrate() times the variants and keeps the results right", async () => {
  const got = await page.evaluate(async (url) => {
    const texts = ["the calibration must not change the answers", "short one"];
    const gpu = await bertgpu.Bert.load(url, { device: "webgpu", cache: false });
    const before = await gpu.embed(texts); // queued after the load's own tuning step
    const atLoad = gpu.tuning;
    const c = await gpu.calibrate({ budgetMs: 60000 });
    const after = await gpu.embed(texts);
    const out = { atLoad, c, now: gpu.tuning, before: before.map((v) => Array.from(v)), after: after.map((v) => Array.from(v)) };
    out.bad = await gpu.calibrate({ budgetMs: -1 }).then(() => null, (e) => e.message);
    gpu.dispose();
    const w = await bertgpuWorker.Bert.load(url, { device: "webgpu", cache: false });
    out.workerBefore = w.tuning;
    out.worker = await w.calibrate({ budgetMs: 60000 });
    out.workerAfter = w.tuning;
    w.dispose();
    const cpu = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
    out.cpuTuning = cpu.tuning;
    out.cpu = (await cpu.embed(texts)).map((v) => Array.from(v));
    cpu.dispose();
    return out;
  }, env.models.url + TINY);
  assert.equal(got.atLoad.source, "default");
  assert.match(got.atLoad.why, /CPU adapter/);
  assert.match(got.atLoad.tuning, /^matmul=direct:8x8,small=direct:8x8,attention=vec4:64,/);
  assert.equal(got.c.source, "calibrated");
  assert.equal(got.c.complete, true);
  assert.ok(got.c.timed.length >= 10, `every variant is timed: ${got.c.timed.length}`);
  assert.equal(got.c.timed[0][0], got.atLoad.tuning, "the default is timed first");
  assert.ok(got.c.timed.some(([t]) => t === got.c.tuning), "the choice is one of the variants timed");
  assert.ok(got.c.chosenMs <= got.c.defaultMs, `${got.c.chosenMs} > ${got.c.defaultMs}`);
  assert.deepEqual(got.now, got.c);
  assert.equal(got.cpuTuning, null);
  assert.equal(got.workerBefore, null, "a worker knows its kernels once calibrate() reports them");
  assert.equal(got.worker.source, "calibrated");
  assert.deepEqual(got.workerAfter, got.worker);
  assert.match(got.bad, /budgetMs must be a positive number/);
  let worstAll = 0;
  for (const run of [got.before, got.after]) {
    assert.equal(run.length, got.cpu.length, "one vector per text");
    for (const [i, v] of run.entries()) {
      const worst = worstDiff(v, got.cpu[i], `text ${i}`);
      assert.ok(worst <= EMBED_ATOL, `text ${i}: |webgpu − cpu| = ${worst}`);
      worstAll = Math.max(worstAll, worst);
    }
  }
  console.log(`# worst |webgpu − cpu| ${worstAll.toExponential(2)} (EMBED_ATOL ${EMBED_ATOL})`);
  console.log(`# calibrated on SwiftShader: ${got.c.tuning} (${got.c.chosenMs.toFixed(2)} ms vs ${got.c.defaultMs.toFixed(2)}, ${got.c.spentMs.toFixed(0)} ms)`);
});

test("a load runs the kernels an earlier load cached for the adapter and model shape, checked from the start", async () => {
  const got = await page.evaluate(async (url) => {
    const texts = ["the cached kernels give the same answers", "short one"];
    // Two matmuls unlike the defaults and each other, so that the load's check runs both (SwiftShader caches
    // nothing by itself: a CPU adapter is never calibrated unasked).
    const spec = "matmul=direct:16x8,small=direct:8x16,attention=vec4:128,row=64,elem=128";
    const first = await bertgpu.Bert.load(url, { device: "webgpu", cache: false });
    const key = first._model.tuningKey;
    await first.dispose();
    const db = await new Promise((resolve, reject) => {
      const r = indexedDB.open("bertgpu-tuning", 1);
      r.onupgradeneeded = () => r.result.createObjectStore("choices");
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    const put = (value) => new Promise((resolve, reject) => {
      const t = db.transaction("choices", "readwrite");
      if (value === undefined) t.objectStore("choices").delete(key);
      else t.objectStore("choices").put(value, key);
      t.oncomplete = resolve;
      t.onerror = () => reject(t.error);
    });
    const out = { spec };
    try {
      await put(spec);
      const gpu = await bertgpu.Bert.load(url, { device: "webgpu", cache: false });
      out.vectors = (await gpu.embed(texts)).map((v) => Array.from(v));
      out.cached = gpu.tuning;
      out.runs = gpu._model.runsTuning(spec);
      await gpu.dispose();
      // An entry this version cannot read is passed over: the defaults run.
      await put("matmul=bogus:1x1");
      const bad = await bertgpu.Bert.load(url, { device: "webgpu", cache: false });
      await bad.embed(texts);
      out.bad = bad.tuning;
      await bad.dispose();
    } finally {
      await put(undefined);
      db.close();
    }
    const cpu = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
    out.cpu = (await cpu.embed(texts)).map((v) => Array.from(v));
    await cpu.dispose();
    return out;
  }, env.models.url + TINY);
  assert.deepEqual(got.cached, { tuning: got.spec, source: "cached" });
  assert.equal(got.runs, true);
  assert.equal(got.bad.source, "default");
  assert.match(got.bad.tuning, /^matmul=direct:8x8,small=direct:8x8,attention=vec4:64,/);
  assert.equal(got.vectors.length, got.cpu.length, "one vector per text");
  for (const [i, v] of got.vectors.entries()) {
    const worst = worstDiff(v, got.cpu[i], `text ${i}`);
    assert.ok(worst <= EMBED_ATOL, `text ${i}: |webgpu − cpu| = ${worst}`);
    console.log(`# worst |webgpu − cpu| text ${i}: ${worst.toExponential(2)}`);
  }
});
