// pytorch_model.bin in the page (js/loader.js, src/weights/torch_bin.rs in the wasm module): a folder whose weights
// are only tests/models/tiny-classifier-bin's pytorch_model.bin (tests/golden/torch_bin.py: tiny-classifier's
// tensors written by torch.save) loads after model.safetensors answers 404, gives the vectors and scores of the same
// model's model.safetensors, and loads again from the Cache API without asking the network for it; a pytorch_model.bin
// whose pickle calls os.system is refused by name, and the model already loaded goes on working in the same page.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { start, openPage, ROOT } from "./harness.mjs";

const BIN = "tests/models/tiny-classifier-bin/";
const ST = "tests/models/tiny-classifier/";
const FIXTURES = "target/browser-test/torch-bin/";
const TEXT = "the cat sat on the mat.";

let env;
let page;

before(async () => {
  fs.rmSync(path.join(ROOT, FIXTURES), { recursive: true, force: true });
  const hostile = path.join(ROOT, FIXTURES, "hostile");
  fs.mkdirSync(hostile, { recursive: true });
  for (const f of fs.readdirSync(path.join(ROOT, BIN))) fs.copyFileSync(path.join(ROOT, BIN, f), path.join(hostile, f));
  fs.copyFileSync(path.join(ROOT, "tests/data/torch_bin/hostile/os_system.bin"), path.join(hostile, "pytorch_model.bin"));
  env = await start();
  page = await openPage(env);
  await page.evaluate((text) => {
    window.run = async (url, options) => {
      const bert = await bertgpu.Bert.load(url, { device: "cpu", ...options });
      try {
        return { v: Array.from(await bert.embed(text)), scores: await bert.classify(text) };
      } finally {
        bert.dispose();
      }
    };
  }, TEXT);
});

after(async () => {
  await env?.stop();
  fs.rmSync(path.join(ROOT, FIXTURES), { recursive: true, force: true });
});

/** The model server's requests made by `fn` (paths). */
async function requestsOf(fn) {
  env.models.requests.length = 0;
  const out = await fn();
  return { out, requests: [...env.models.requests] };
}

test("a pytorch_model.bin folder loads in the page, then from the cache; a hostile one is refused, the page goes on", async () => {
  const url = env.models.url;
  await page.evaluate(() => bertgpu.clearCache());
  const st = await page.evaluate((u) => run(u, { cache: false }), url + ST);
  const first = await requestsOf(() => page.evaluate((u) => run(u, { cache: true }), url + BIN));
  assert.deepEqual(first.out, st, "the same tensors as model.safetensors: the same vector and scores");
  const asked = first.requests.map((r) => r.slice(`/${BIN}`.length));
  assert.ok(asked.indexOf("model.safetensors") >= 0 && asked.indexOf("model.safetensors") < asked.indexOf("pytorch_model.bin"),
    `model.safetensors is asked for first: ${asked.join(", ")}`);
  const cached = await requestsOf(() => page.evaluate((u) => run(u, { cache: true }), url + BIN));
  assert.deepEqual(cached.out, st, "from the cache");
  assert.deepEqual(cached.requests, [], "nothing asked of the network: the .bin and model.safetensors' absence are cached");

  const got = await page.evaluate(async ({ bin, hostile, text }) => {
    const kept = await bertgpu.Bert.load(bin, { device: "cpu", cache: false });
    const before = Array.from(await kept.embed(text));
    let error = "loaded";
    try {
      (await bertgpu.Bert.load(hostile, { device: "cpu", cache: false })).dispose();
    } catch (e) {
      error = e.message;
    }
    const after = Array.from(await kept.embed(text));
    kept.dispose();
    await bertgpu.clearCache();
    return { error, same: JSON.stringify(before) === JSON.stringify(after) };
  }, { bin: url + BIN, hostile: url + FIXTURES + "hostile/", text: TEXT });
  assert.match(got.error, /pytorch_model\.bin: its pickle names `os\.system`, which is not part of a PyTorch state dict: refused/);
  assert.ok(got.same, "the model loaded before goes on giving the same vector");
  assert.deepEqual(await page.evaluate((u) => run(u, { cache: false }), url + BIN), st, "and a new load works");
});
