// GPU faults in the browser: a lost WebGPU device (GPUDevice.destroy() through the debug export __debugLoseDevice,
// as a driver reset or a crashed GPU process would lose it) must reject the call with a clear error, never hang or
// panic; the call after it loads the model again on a new device (with its trained head), and Bert.load works again.
// tests/models/tiny-pretraining on SwiftShader WebGPU.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { start, openPage } from "./harness.mjs";

const TINY = "tests/models/tiny-pretraining/";
/** A call on a lost device must settle well within this (a hang is the failure this guards against). */
const SETTLE_MS = 20_000;
/**
 * The reloaded model runs the same kernels on the same weights on a new device of the same adapter: the same vectors
 * and scores bit for bit are expected (measured on SwiftShader: identical); 1e-6 leaves room for an adapter whose
 * kernels do not round the same way twice, without hiding a wrong load (which moves values by far more).
 */
const ATOL = 1e-6;

let env;
let page;

before(async () => {
  env = await start();
  page = await openPage(env);
  await page.evaluate(() => {
    window.attempt = async (fn) => {
      try {
        return { value: await fn() };
      } catch (e) {
        return { error: e?.message ?? String(e) };
      }
    };
    window.settles = (p, ms) => Promise.race([p,
      new Promise((_, reject) => setTimeout(() => reject(new Error(`hung: not settled after ${ms} ms`)), ms))]);
  });
});

after(async () => {
  await env?.stop();
});

function maxDiff(a, b) {
  assert.equal(a.length, b.length);
  return Math.max(...a.map((x, i) => Math.abs(x - b[i])));
}

const LOST = /^embed: the GPU device was lost \(Destroyed.*\); the next call loads the model again on a new device$/;

test("a lost device: the call rejects saying so, the next call loads the model again (with its head)", async () => {
  const got = await page.evaluate(async ({ url, SETTLE_MS }) => {
    const texts = ["a lost device", "comes back on a new one"];
    const bert = await bertgpu.Bert.load(url, { device: "webgpu", cache: false });
    const out = { device: bert.device };
    out.before = (await bert.embed(texts)).map((v) => Array.from(v));
    // A trained head lives on the device too: it must come back with the model.
    await bert.trainHead([{ text: "good day", label: "pos" }, { text: "bad day", label: "neg" }], { epochs: 3 });
    out.scoresBefore = await bert.classify("a good day");
    out.labelsBefore = bert.headLabels;
    out.destroyed = bert._model.__debugLoseDevice();
    out.failed = await attempt(() => settles(bert.embed(texts), SETTLE_MS));
    out.reason = bert._model.deviceLost ?? null;
    out.tokenizeStillWorks = (await bert.tokenize("a")).tokens.length === 3;
    out.after = await attempt(async () => (await settles(bert.embed(texts), SETTLE_MS)).map((v) => Array.from(v)));
    out.reasonAfter = bert._model.deviceLost ?? null;
    out.scoresAfter = await bert.classify("a good day");
    out.headLabels = bert.headLabels;

    // Lost while a call is in flight: that call settles (rejected, or resolved if it finished first), the next works.
    const inFlight = bert.embed(Array(64).fill("a longer text, so that the forward pass takes a while to run"));
    setTimeout(() => bert._model.__debugLoseDevice(), 0);
    out.inFlight = await attempt(async () => (await settles(inFlight, SETTLE_MS)).length);
    out.afterInFlight = await attempt(async () => Array.from(await settles(bert.embed(texts[0]), SETTLE_MS)));
    bert.dispose();

    // Bert.load works again after a loss (a new device).
    const again = await bertgpu.Bert.load(url, { device: "webgpu", cache: false });
    out.reloaded = (await again.embed(texts)).map((v) => Array.from(v));
    again.dispose();
    const cpu = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
    out.cpuHook = cpu._model.__debugLoseDevice();
    cpu.dispose();
    return out;
  }, { url: env.models.url + TINY, SETTLE_MS });
  assert.equal(got.device, "webgpu");
  assert.equal(got.destroyed, true);
  assert.ok(got.failed.error, `the call after the loss resolved: ${JSON.stringify(got.failed.value)?.slice(0, 80)}`);
  assert.match(got.failed.error, LOST);
  assert.match(got.reason, /^Destroyed/);
  assert.ok(got.tokenizeStillWorks, "tokenize needs no device");
  assert.ok(got.after.value, `the call after the rejected one failed: ${got.after.error}`);
  assert.equal(got.reasonAfter, null, "a new device");
  got.before.forEach((v, i) => assert.ok(maxDiff(v, got.after.value[i]) <= ATOL, `vector ${i} after recovery`));
  assert.equal(got.labelsBefore.length, 2);
  assert.deepEqual(got.headLabels, got.labelsBefore);
  got.scoresBefore.forEach((s, i) => {
    assert.equal(got.scoresAfter[i].label, s.label);
    assert.ok(Math.abs(got.scoresAfter[i].score - s.score) <= ATOL, "the trained head came back");
  });
  if (got.inFlight.error) assert.match(got.inFlight.error, LOST);
  else assert.equal(got.inFlight.value, 64);
  assert.ok(got.afterInFlight.value, `after an in-flight loss: ${got.afterInFlight.error}`);
  assert.ok(maxDiff(got.afterInFlight.value, got.before[0]) <= ATOL);
  got.before.forEach((v, i) => assert.ok(maxDiff(v, got.reloaded[i]) <= ATOL, `Bert.load again: vector ${i}`));
  assert.equal(got.cpuHook, false, "the CPU backend has no device to lose");
  // Chromium logs WebGPU's own complaints about work submitted to a destroyed device.
  console.log("# console:", JSON.stringify(page.errors));
  page.checkErrors(/destroyed|lost|Device is lost|Instance dropped|WebGPU/i);
  console.log(`# lost device: rejected with "${got.failed.error}"; in flight: ${got.inFlight.error ?? "resolved first"}`);
});
