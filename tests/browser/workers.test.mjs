// "bertgpu/worker" with several workers: a call over many texts is split between copies of the model, one per
// worker, and must give what one worker gives (the same kernels on the same rows; only the batches differ).
import { test } from "node:test";
import assert from "node:assert/strict";
import { HEAD_EXAMPLES, withPage } from "./harness.mjs";

// Each text's result does not depend on the other texts of its batch on the wasm CPU backend: every row is summed in
// the same order whatever the batch, and padding is masked out exactly (bad-input.test.mjs checks a text alone against
// the same text in a padded batch). So the split between workers changes nothing, bit for bit: measured, no embedding,
// classify score or fill-mask score differs. Results are compared whole (counts, labels, tokens, scores).

const ctx = withPage();

test("workers: 3 share embed (int8 codes too), embedTokens, embedSparse, fillMask and a trained head's classify, and agree with one worker", async () => {
  const got = await ctx.page.evaluate(async ({ minilm, splade, examples }) => {
    const texts = Array.from({ length: 11 }, (_, i) => `sentence number ${i} ${"and more words ".repeat(i % 4)}`);
    const one = await bertgpuWorker.Bert.load(minilm, { device: "cpu" });
    const three = await bertgpuWorker.Bert.load(minilm, { device: "cpu", workers: 3 });
    const out = { counts: [one.workers, three.workers] };
    out.e1 = (await one.embed(texts)).map((v) => Array.from(v));
    out.e3 = (await three.embed(texts)).map((v) => Array.from(v));
    out.single = Array.from(await three.embed("just one"));
    out.singleRef = Array.from(await one.embed("just one"));
    // int8 without ranges calibrates on the whole call's vectors: one worker sees them all, so 3 agree with 1.
    out.q1 = (await one.embed(texts, { precision: "int8" })).map((v) => [v.constructor.name, ...v]);
    out.q3 = (await three.embed(texts, { precision: "int8" })).map((v) => [v.constructor.name, ...v]);
    out.t1 = (await one.embedTokens(texts)).map((t) => ({ tokens: t.tokens, offsets: t.offsets, v: t.vectors.map((x) => Array.from(x)) }));
    out.t3 = (await three.embedTokens(texts)).map((t) => ({ tokens: t.tokens, offsets: t.offsets, v: t.vectors.map((x) => Array.from(x)) }));
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
    const sparse = (vs) => vs.map((v) => [Array.from(v.indices), Array.from(v.values)]);
    out.s1 = sparse(await m1.embedSparse(masked));
    out.s2 = sparse(await m2.embedSparse(masked));
    out.auto = m2.workers;
    m1.dispose();
    m2.dispose();
    const gpu = await bertgpuWorker.Bert.load(splade, { device: "webgpu", workers: 2 });
    out.gpuWorkers = gpu.workers;
    gpu.dispose();
    out.bad = await bertgpuWorker.Bert.load(splade, { workers: 0 }).then(() => "no error", (e) => `${e.name}: ${e.message}`);
    out.retired = await bertgpuWorker.Bert.load(splade, { workers: 2, parallel: "tensor" })
      .then(() => "no error", (e) => `${e.name}: ${e.message}`);
    out.unknown = await bertgpuWorker.Bert.load(splade, { workers: 2, parallel: "model" })
      .then(() => "no error", (e) => `${e.name}: ${e.message}`);
    return out;
  }, { minilm: ctx.env.models.url + "models/all-MiniLM-L6-v2/", splade: ctx.env.models.url + "models/splade-tiny/",
    examples: HEAD_EXAMPLES });

  assert.deepEqual(got.counts, [1, 3]);
  assert.equal(got.e1.length, 11);
  assert.ok(got.e1.every((v) => v.length === 384));
  assert.deepEqual(got.e3, got.e1, "embeddings split across 3 workers");
  assert.equal(got.singleRef.length, 384);
  assert.deepEqual(got.single, got.singleRef, "one text on 3 workers");
  assert.equal(got.q1.length, 11);
  assert.ok(got.q1.every((v) => v[0] === "Int8Array" && v.length === 385));
  assert.deepEqual(got.q3, got.q1, "int8 codes calibrated on the whole call, on 3 workers as on 1");
  assert.equal(got.t1.length, 11);
  assert.ok(got.t1.every((t) => t.tokens.length === t.v.length && t.v.every((x) => x.length === 384)));
  assert.deepEqual(got.t3, got.t1, "per-token vectors split across 3 workers");
  assert.equal(got.s1.length, 3);
  assert.ok(got.s1.every(([i, v]) => i.length > 0 && i.length === v.length));
  assert.deepEqual(got.s2, got.s1, "sparse vectors split across workers");
  assert.equal(got.c1.length, 11);
  assert.ok(got.c1.every((r) => r.length === 2), "two labels per text");
  assert.deepEqual(got.c3, got.c1, "classify (labels and scores) split across 3 workers");
  assert.deepEqual(got.tasks, ["classify"]);
  assert.match(got.cleared, /no sequence-classification head/);
  // Three texts, the last with two masks (an array of predictions per mask); five predictions per mask.
  assert.equal(got.f1.length, 3);
  assert.deepEqual([got.f1[0].length, got.f1[1].length, got.f1[2].length, got.f1[2][0].length], [5, 5, 2, 5]);
  assert.deepEqual(got.f2, got.f1, "fillMask (tokens, sequences and scores) split across workers");
  assert.ok(got.auto >= 1 && got.auto <= 4);
  assert.equal(got.gpuWorkers, 1, "WebGPU: one worker, whatever was asked");
  assert.match(got.bad, /^TypeError: Bert.load: workers must be "auto" or an integer from 1 to 8/);
  // The retired tensor-parallel workers are refused with what to use instead; an unknown value is refused too.
  assert.match(got.retired, /^TypeError: Bert.load: parallel: "tensor" was retired\. .*threads/);
  assert.match(got.unknown, /^TypeError: Bert.load: parallel must be "data" \(got "model"\)/);
  ctx.page.checkErrors();
});
