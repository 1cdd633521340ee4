// "bertgpu/worker" with parallel: "tensor": every worker holds a shard of every layer (its attention heads and
// feed-forward units) and all of them run each call, exchanging partial sums through a SharedArrayBuffer on a
// cross-origin isolated page. Each call must give what the whole model in one worker gives.
import { test } from "node:test";
import assert from "node:assert/strict";
import { assertAllClose, convertGguf, HEAD_EXAMPLES, withPage } from "./harness.mjs";

/**
 * Max |tensor-parallel − one worker| per value (normalized embeddings, probabilities). Only the order of additions
 * differs: each projection back to the hidden size is summed per shard, then across shards, in f32; the Q8_0
 * kernel's integers are the same (the shards cut x at its blocks of 32). Measured here: 1.2e-7 (f32 embeddings),
 * 5.2e-8 (Q8_0 embeddings), 8.9e-8 (fill-mask scores), 3.0e-8 (classify scores); 1e-6 is 8× the largest.
 */
const SPLIT_ATOL = 1e-6;

const ctx = withPage({ isolated: true });

const close = (a, b, what) => assertAllClose(a, b, SPLIT_ATOL, what);

test("parallel: \"tensor\" on 2 workers: embed (f32 and Q8_0), fillMask and a trained head agree with one worker", async () => {
  const gguf = convertGguf("all-MiniLM-L6-v2", "q8_0", "minilm-q8_0.gguf");
  const got = await ctx.page.evaluate(async ({ minilm, q8, splade, examples }) => {
    const { Bert } = bertgpuWorker;
    const texts = ["A man is playing a guitar.", "Shards of a model, one per worker.", "Short."];
    const out = { isolated: crossOriginIsolated };
    for (const [name, source] of [["f32", minilm], ["q8", q8]]) {
      const one = await Bert.load(source, { device: "cpu" });
      const two = await Bert.load(source, { device: "cpu", workers: 2, parallel: "tensor" });
      out[name] = {
        mode: [two.workers, two.parallel, one.parallel],
        one: (await one.embed(texts)).map((v) => Array.from(v)),
        two: (await two.embed(texts)).map((v) => Array.from(v)),
        single: [Array.from(await one.embed("just one")), Array.from(await two.embed("just one"))],
      };
      if (name === "f32") {
        const opts = { epochs: 3, validationSplit: 0, seed: 1 };
        await one.trainHead(examples, opts);
        await two.trainHead(examples, opts);
        out.c1 = await one.classify(texts);
        out.c2 = await two.classify(texts);
      }
      one.dispose();
      two.dispose();
    }
    const m1 = await Bert.load(splade, { device: "cpu" });
    const m2 = await Bert.load(splade, { device: "cpu", workers: 2, parallel: "tensor" });
    const masked = ["paris is the [MASK] of france.", "the [MASK] sat on the mat."];
    out.f1 = await m1.fillMask(masked);
    out.f2 = await m2.fillMask(masked);
    // Bad input fails on every shard alike, before any exchange: the model goes on working.
    out.badInput = await m2.fillMask("no mask token here").then(() => "no error", (e) => e.message);
    out.after = await m2.fillMask(masked);
    m1.dispose();
    m2.dispose();
    // MiniLM's 12 heads do not split 5 ways; "parallel" takes two values.
    out.five = await Bert.load(minilm, { device: "cpu", workers: 5, parallel: "tensor" }).then(() => "no error", (e) => e.message);
    out.badMode = await Bert.load(minilm, { workers: 2, parallel: "pipeline" }).then(() => "no error", (e) => `${e.name}: ${e.message}`);
    return out;
  }, {
    minilm: ctx.env.models.url + "models/all-MiniLM-L6-v2/",
    q8: ctx.env.models.url + gguf,
    splade: ctx.env.models.url + "models/splade-tiny/",
    examples: HEAD_EXAMPLES,
  });

  assert.equal(got.isolated, true);
  for (const name of ["f32", "q8"]) {
    assert.deepEqual(got[name].mode, [2, "tensor", "data"]);
    assert.equal(got[name].one.length, 3);
    got[name].two.forEach((v, i) => close(v, got[name].one[i], `${name} text ${i}`));
    close(got[name].single[1], got[name].single[0], `${name} single`);
  }
  assert.equal(got.c2.length, 3);
  got.c2.forEach((r, i) => {
    assert.deepEqual(r.map((x) => x.label), got.c1[i].map((x) => x.label), `ranking ${i}`);
    close(r.map((x) => x.score), got.c1[i].map((x) => x.score), `classify ${i}`);
  });
  assert.equal(got.f2.length, 2);
  got.f2.forEach((r, i) => {
    assert.deepEqual(r.map((m) => m.token_str), got.f1[i].map((m) => m.token_str), `fillMask ${i}`);
    close(r.map((m) => m.score), got.f1[i].map((m) => m.score), `fillMask scores ${i}`);
  });
  // src/heads/masked_lm.rs mask_positions' message, from every shard alike.
  assert.match(got.badInput, /^invalid input: no mask token in "no mask token here": put `\[MASK\]` where a word should be predicted/);
  assert.deepEqual(got.after, got.f2, "fillMask after a rejected call");
  assert.match(got.five, /cannot be split across 5 workers/);
  assert.match(got.badMode, /^TypeError: Bert.load: parallel must be "data" or "tensor"/);
  ctx.page.checkErrors();
});
