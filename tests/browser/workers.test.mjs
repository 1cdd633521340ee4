// "bertgpu/worker" with several workers: a call over many texts is split between copies of the model, one per
// worker, and must give what one worker gives (the same kernels on the same rows; only the batches differ).
import { test } from "node:test";
import assert from "node:assert/strict";
import { HEAD_EXAMPLES, withPage } from "./harness.mjs";

/**
 * Each text's embedding does not depend on the other texts of its batch (per-row GEMMs, masked attention): the
 * split changes only the padding, so results agree to float rounding of the padded-length reductions.
 */
const ATOL = 1e-6;

const ctx = withPage();

test("workers: 3 share embed, fillMask and a trained head's classify, and agree with one worker", async () => {
  const got = await ctx.page.evaluate(async ({ minilm, splade, examples }) => {
    const texts = Array.from({ length: 11 }, (_, i) => `sentence number ${i} ${"and more words ".repeat(i % 4)}`);
    const one = await bertgpuWorker.Bert.load(minilm, { device: "cpu" });
    const three = await bertgpuWorker.Bert.load(minilm, { device: "cpu", workers: 3 });
    const out = { counts: [one.workers, three.workers] };
    out.e1 = (await one.embed(texts)).map((v) => Array.from(v));
    out.e3 = (await three.embed(texts)).map((v) => Array.from(v));
    out.single = Array.from(await three.embed("just one"));
    out.singleRef = Array.from(await one.embed("just one"));
    const opts = { epochs: 5, validationSplit: 0, seed: 1 };
    await one.trainHead(examples, opts);
    await three.trainHead(examples, opts);
    out.c1 = await one.classify(texts);
    out.c3 = await three.classify(texts);
    out.tasks = three.tasks;
    await three.clearHead();
    out.cleared = await three.classify(texts).then(() => "no error", (e) => e.message);
    one.dispose();
    three.dispose();
    const m1 = await bertgpuWorker.Bert.load(splade, { device: "cpu" });
    const m2 = await bertgpuWorker.Bert.load(splade, { device: "cpu", workers: "auto" });
    const masked = ["paris is the [MASK] of france.", "the [MASK] sat on the mat.", "i like [MASK] and [MASK]."];
    out.f1 = await m1.fillMask(masked);
    out.f2 = await m2.fillMask(masked);
    out.auto = m2.workers;
    m1.dispose();
    m2.dispose();
    const gpu = await bertgpuWorker.Bert.load(splade, { device: "webgpu", workers: 2 });
    out.gpuWorkers = gpu.workers;
    gpu.dispose();
    out.bad = await bertgpuWorker.Bert.load(splade, { workers: 0 }).then(() => "no error", (e) => `${e.name}: ${e.message}`);
    out.notIsolated = await bertgpuWorker.Bert.load(splade, { workers: 2, parallel: "tensor" })
      .then(() => "no error", (e) => `${e.name}: ${e.message}`);
    return out;
  }, { minilm: ctx.env.models.url + "models/all-MiniLM-L6-v2/", splade: ctx.env.models.url + "models/splade-tiny/",
    examples: HEAD_EXAMPLES });

  assert.deepEqual(got.counts, [1, 3]);
  assert.equal(got.e3.length, 11);
  got.e3.forEach((v, i) => v.forEach((x, j) => assert.ok(Math.abs(x - got.e1[i][j]) <= ATOL, `text ${i} dim ${j}`)));
  got.single.forEach((x, j) => assert.ok(Math.abs(x - got.singleRef[j]) <= ATOL));
  assert.equal(got.c3.length, 11);
  got.c3.forEach((r, i) => {
    assert.deepEqual(r.map((x) => x.label), got.c1[i].map((x) => x.label), `ranking ${i}`);
    r.forEach((x, j) => assert.ok(Math.abs(x.score - got.c1[i][j].score) <= ATOL));
  });
  assert.deepEqual(got.tasks, ["classify"]);
  assert.match(got.cleared, /no sequence-classification head/);
  assert.deepEqual(got.f2.map((r) => JSON.stringify(r.map?.((m) => m.token_str ?? m.map((x) => x.token_str)))),
    got.f1.map((r) => JSON.stringify(r.map?.((m) => m.token_str ?? m.map((x) => x.token_str)))));
  assert.ok(got.auto >= 1 && got.auto <= 4);
  assert.equal(got.gpuWorkers, 1, "WebGPU: one worker, whatever was asked");
  assert.match(got.bad, /^TypeError: Bert.load: workers must be "auto" or an integer from 1 to 8/);
  // This page is not cross-origin isolated: no SharedArrayBuffer for the shards (tensor-parallel.test.mjs is).
  assert.match(got.notIsolated, /^TypeError: Bert.load: parallel: "tensor" needs a cross-origin isolated page/);
  ctx.page.checkErrors();
});
