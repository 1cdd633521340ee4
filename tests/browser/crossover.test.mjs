// The CPU or the GPU per call in the browser (src/engine/crossover.rs, Bert.load's `crossover`): on WebGPU, the load
// times the CPU against the GPU on the model at growing lengths and keeps a CPU copy for the calls the CPU wins.
// SwiftShader is a CPU adapter, so the CPU backend wins the short calls here: a short call runs on the copy and gives
// the CPU model's vector bit for bit (same module, same single-threaded backend), a call over the crossover runs on
// the GPU; after a lost GPU device the model loads again and the copy is made again; a later load (and the worker
// entry) reads the crossover from the cache. tests/models/tiny-pretraining (64 positions) on SwiftShader WebGPU.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { start, openPage } from "./harness.mjs";

const TINY = "tests/models/tiny-pretraining/";

let env;
let page;

before(async () => {
  env = await start();
  page = await openPage(env);
});

after(async () => {
  await env?.stop();
});

test("crossover: short calls run on a CPU copy with the CPU's results, long ones on the GPU", async () => {
  const got = await page.evaluate(async (url) => {
    const short = "the cat sat";
    const many = Array.from({ length: 8 }, (_, i) => `text number ${i} is long enough to need some tokens`);
    const cpu = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
    const want = Array.from(await cpu.embed(short));
    const wantMask = await cpu.fillMask("the [MASK] sat", { topK: 3 });
    cpu.dispose();
    const plain = await bertgpu.Bert.load(url, { device: "webgpu", cache: false });
    const gpuShort = Array.from(await plain.embed(short));
    plain.dispose();
    const gpu = await bertgpu.Bert.load(url, { device: "webgpu", cache: false, crossover: true });
    const out = { device: gpu.device, before: gpu.crossover, want, wantMask, gpuShort };
    out.short = Array.from(await gpu.embed(short)); // queued after the measurement
    out.crossover = gpu.crossover;
    out.shortOn = gpu.lastCallDevice;
    out.mask = await gpu.fillMask("the [MASK] sat", { topK: 3 });
    out.maskOn = gpu.lastCallDevice;
    out.many = (await gpu.embed(many)).length;
    out.manyOn = gpu.lastCallDevice;
    // A lost GPU device: the call after it loads the model again on a new device, and the CPU copy is made again.
    gpu._model.__debugLoseDevice();
    out.lost = await gpu.embed(many).then(() => "resolved", (e) => e.message);
    out.recovered = (await gpu.embed(many)).length;
    out.againShort = Array.from(await gpu.embed(short));
    out.againOn = gpu.lastCallDevice;
    gpu.dispose();
    // A second load on this adapter reads the crossover from IndexedDB instead of timing again; so does the worker
    // entry (same origin), whose getters report what the worker said with its last answer.
    const again = await bertgpu.Bert.load(url, { device: "webgpu", cache: false, crossover: true });
    out.cachedShort = Array.from(await again.embed(short));
    out.cached = [again.crossover, again.lastCallDevice];
    again.dispose();
    const w = await bertgpuWorker.Bert.load(url, { device: "webgpu", cache: false, crossover: true });
    out.workerShort = Array.from(await w.embed(short));
    out.worker = [w.crossover, w.lastCallDevice];
    await w.embed(many);
    out.worker.push(w.lastCallDevice);
    await w.dispose();
    out.bad = await bertgpu.Bert.load(url, { device: "webgpu", cache: false, crossover: "yes" }).then(() => null,
      (e) => e.message);
    const off = await bertgpu.Bert.load(url, { device: "cpu", cache: false, crossover: true });
    await off.embed(short);
    out.cpuCrossover = off.crossover;
    out.cpuOn = off.lastCallDevice;
    off.dispose();
    return out;
  }, env.models.url + TINY);
  assert.equal(got.device, "webgpu", "the model stays on the GPU");
  assert.equal(got.before, null, "measured after the load, before the first call");
  const c = got.crossover;
  assert.ok(c.maxTokens >= 4, `the CPU wins short calls on SwiftShader: ${c.text}`);
  assert.ok(c.points.length >= 1 && c.points[0][0] === 4, c.text);
  assert.equal(c.source, "measured");
  assert.match(c.text, /on the CPU/);
  assert.equal(got.shortOn, "cpu");
  assert.deepEqual(got.short, got.want, "the CPU copy gives the CPU model's vector");
  assert.notDeepEqual(got.gpuShort, got.want, "the GPU's own vector differs in its last bits (else this shows nothing)");
  assert.equal(got.maskOn, "cpu");
  assert.deepEqual(got.mask, got.wantMask);
  assert.equal(got.many, 8);
  assert.equal(got.manyOn, "webgpu", "8 texts are over the crossover (at most the model's 64 positions)");
  assert.match(got.lost, /GPU device was lost/);
  assert.equal(got.recovered, 8);
  assert.equal(got.againOn, "cpu", "the copy is made again for the model on the new device");
  assert.deepEqual(got.againShort, got.want);
  assert.deepEqual(got.cached, [{ maxTokens: c.maxTokens, points: [], text: got.cached[0].text, source: "cached" },
    "cpu"], "the second load's crossover comes from the cache");
  assert.match(got.cached[0].text, new RegExp(`at most ${c.maxTokens} tokens on the CPU`));
  assert.deepEqual(got.cachedShort, got.want);
  assert.deepEqual(got.worker, [got.cached[0], "cpu", "webgpu"], "the worker entry's getters");
  assert.deepEqual(got.workerShort, got.want);
  assert.match(got.bad, /crossover must be true or false/);
  assert.equal(got.cpuCrossover, null, "nothing to choose on the CPU");
  assert.equal(got.cpuOn, "cpu");
  console.log(`# crossover on SwiftShader: ${c.text}`);
});
