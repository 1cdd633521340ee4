// The canary at load in the browser (src/engine/canary.rs): a model put on WebGPU runs a fixed input there and on
// the CPU backend and must agree. A healthy adapter passes (`deviceReason` null); with the GPU's linears made wrong
// (Bert.load's test-only `_injectFault`, as a miscompiled kernel would be) device "webgpu" rejects the load, naming
// the adapter and the disagreement. "auto" on this machine's SwiftShader (a fallback adapter) takes the CPU without
// trying and says so; the native tests (tests/canary.rs) cover "auto" falling back after a failed check.
// tests/models/tiny-pretraining on SwiftShader WebGPU.
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

test("the load-time check: a healthy WebGPU passes, a wrong kernel is refused, auto says why it took the CPU", async () => {
  const got = await page.evaluate(async (url) => {
    const attempt = async (fn) => {
      try {
        return { value: await fn() };
      } catch (e) {
        return { error: e?.message ?? String(e) };
      }
    };
    const out = {};
    const healthy = await bertgpu.Bert.load(url, { device: "webgpu", cache: false });
    out.healthy = { device: healthy.device, reason: healthy.deviceReason };
    healthy.dispose();
    out.faulty = await attempt(async () => {
      const m = await bertgpu.Bert.load(url, { device: "webgpu", cache: false, _injectFault: true });
      const device = m.device;
      m.dispose();
      return device;
    });
    const auto = await bertgpu.Bert.load(url, { cache: false });
    out.auto = { device: auto.device, reason: auto.deviceReason };
    auto.dispose();
    const cpu = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
    out.cpu = { device: cpu.device, reason: cpu.deviceReason };
    cpu.dispose();
    const inWorker = await bertgpuWorker.Bert.load(url, { cache: false });
    out.worker = { device: inWorker.device, reason: inWorker.deviceReason };
    inWorker.dispose();
    return out;
  }, env.models.url + TINY);
  assert.deepEqual(got.healthy, { device: "webgpu", reason: null });
  assert.ok(got.faulty.error, `a faulty GPU was accepted: ${got.faulty.value}`);
  assert.match(got.faulty.error, /the GPU adapter .* disagrees with the CPU backend on the load-time check: \|gpu − cpu\| = .* \(tolerance .*\)/);
  assert.match(got.faulty.error, /use device auto .* or cpu/);
  assert.equal(got.auto.device, "cpu");
  assert.match(got.auto.reason, /software fallback adapter/);
  assert.deepEqual(got.cpu, { device: "cpu", reason: null });
  assert.deepEqual(got.worker, got.auto, "the worker says what the main thread says");
  console.log(`# faulty webgpu: ${got.faulty.error}\n# auto: ${got.auto.reason}`);
});
