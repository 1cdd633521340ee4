// A checkpoint saved in shards, and CamemBERT, in the browser: tests/models/tiny-camembert-sharded (the tiny
// CamembertForMaskedLM of tests/golden/camembert.py saved by save_pretrained(max_shard_size=20KB) in six shards)
// loaded from its folder URL (the loader fetches model.safetensors.index.json, then each shard) gives transformers'
// mean-pooled vectors and fill-mask's best token (tests/golden/camembert.json) on the wasm CPU backend and on WebGPU; a copy missing a shard is
// refused naming it, and the page loads the next model as before. The native twin is tests/camembert.rs.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { readJson, withPage, ROOT } from "./harness.mjs";

/**
 * Max |ours − transformers| per value of the unnormalised mean-pooled vectors: tests/camembert.rs measures 8.3e-7
 * natively (CPU and lavapipe); measured here 9.5e-7 (wasm CPU and WebGPU on SwiftShader, printed): 5e-6 is ~5×.
 */
const ATOL = 5e-6;

const golden = readJson("tests/golden/camembert.json").camembert;
const ctx = withPage();

/** A copy of the sharded folder under target/browser-test/ (served with the repository) without one shard. */
function withoutShard(shard) {
  const rel = "target/browser-test/camembert-sharded-missing/";
  const dir = path.join(ROOT, rel);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  const src = path.join(ROOT, "tests/models/tiny-camembert-sharded");
  for (const f of fs.readdirSync(src)) if (f !== shard) fs.copyFileSync(path.join(src, f), path.join(dir, f));
  return rel;
}

test("a sharded CamemBERT folder URL gives transformers' vectors on the CPU and WebGPU; a missing shard is named", async () => {
  const url = ctx.env.models.url + "tests/models/tiny-camembert-sharded/";
  const broken = ctx.env.models.url + withoutShard("model-00004-of-00006.safetensors");
  const texts = golden.embeddings.map((e) => e.text);
  // fill-mask's best prediction on the golden texts with one mask (the near-ties of random weights are further down).
  const single = golden.fill_mask.filter((c) => c.mask_rows.length === 1);
  assert.ok(single.length > 0);
  const got = await ctx.page.evaluate(async ({ url, broken, texts, masks }) => {
    const out = {};
    for (const device of ["cpu", "webgpu"]) {
      const bert = await bertgpu.Bert.load(url, { device, cache: false });
      out[device] = { device: bert.device, mean: Array.from(await bert.embed(texts, { pooling: "mean",
        normalize: false }), (v) => Array.from(v)), fill: await Promise.all(masks.map((t) => bert.fillMask(t))) };
      bert.dispose();
    }
    try {
      await bertgpu.Bert.load(broken, { device: "cpu", cache: false });
      out.missing = "loaded";
    } catch (e) {
      out.missing = e.message;
    }
    const again = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
    out.after = Array.from((await again.embed(texts.slice(0, 1), { pooling: "mean", normalize: false }))[0]);
    again.dispose();
    return out;
  }, { url, broken, texts, masks: single.map((c) => c.text) });
  let max = 0;
  for (const device of ["cpu", "webgpu"]) {
    assert.equal(got[device].device, device);
    assert.equal(got[device].mean.length, texts.length, `${device}: one vector per text`);
    got[device].mean.forEach((v, i) => {
      const want = golden.embeddings[i].mean;
      assert.equal(v.length, want.length);
      v.forEach((x, j) => {
        const d = Math.abs(x - want[j]);
        assert.ok(d <= ATOL, `${device}: text ${i}[${j}]: ours ${x}, transformers ${want[j]}`);
        max = Math.max(max, d);
      });
    });
  }
  for (const device of ["cpu", "webgpu"]) {
    assert.equal(got[device].fill.length, single.length, `${device}: one answer per text`);
    got[device].fill.forEach((preds, i) => {
      const best = single[i].predictions[0][0];
      assert.equal(preds[0].token, best.token, `${device}: ${single[i].text}`);
      assert.equal(preds[0].sequence, best.sequence, `${device}: ${single[i].text}`);
    });
  }
  console.log(`measured max |ours - transformers| (sharded CamemBERT, CPU and WebGPU): ${max.toExponential(2)}`);
  assert.match(got.missing, /model-00004-of-00006\.safetensors/);
  assert.equal(got.after.length, golden.embeddings[0].mean.length, "the page loads the next model");
});
