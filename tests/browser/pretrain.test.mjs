// pretrain in the browser: continued pre-training (masked LM + next-sentence prediction) of the tiny
// BertForPreTraining checkpoint on real text, in the page on the wasm CPU backend, checked against the native CLI's
// `pretrain` with the same corpus and options (whose gradients tests/pretrain_golden.rs checks against PyTorch): the
// per-step losses and accuracies and the final weights; then the masked LM alone, bad input, stopping it (signal,
// dispose, calls meanwhile), a checkpointed stop and resume, and the worker build.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ROOT, maxWeightDiff, readSafetensors, withPage } from "./harness.mjs";

const TINY = "tests/models/tiny-pretraining/";
/** A BertForMaskedLM without the NSP head (splade-tiny, scripts/fetch-models.sh). */
const MLM_ONLY = "models/splade-tiny/";

/**
 * Real text nobody here wrote (Debian's quotations, tests/data/fortunes-large/), as tests/pretrain_cli.rs makes its
 * corpus: each quotation of two or more sentences a document, one sentence a line. The first 12: about 20 rows of
 * 32 tokens, so that 8 steps of 8 rows make 4 passes (and 4 epoch events).
 */
const DOCUMENTS = fs.readFileSync(path.join(ROOT, "tests/data/fortunes-large/train.jsonl"), "utf8").trim().split("\n")
  .map((l) => JSON.parse(l).text.split(". ").map((s) => s.trim()).filter((s) => s !== ""))
  .filter((sentences) => sentences.length >= 2).slice(0, 12).map((sentences) => sentences.join("\n"));
/** The same corpus as a plain-text file reads: a blank line between documents. */
const CORPUS = DOCUMENTS.join("\n\n") + "\n";
// A high learning rate and no warm-up, so that some masked tokens are predicted right within the 8 steps (at the
// checkpoint's random weights none is): the accuracies compared below are then not all 0.
const OPTIONS = { steps: 8, batchSize: 8, maxLength: 32, learningRate: 2e-2, warmup: 0, seed: 5, validationSplit: 0.2 };
const CLI_FLAGS = ["--steps", "8", "--batch-size", "8", "--max-length", "32", "--lr", "2e-2", "--warmup", "0",
  "--seed", "5", "--validation-split", "0.2"];

/**
 * Step losses (the total and each head's), browser against native: the same rows (the masking and pairs come from
 * one seeded SplitMix64 in both), batches and AdamW; only f32 summation orders differ (wasm's single-threaded GEMM
 * against native's SIMD), ~1e-7 relative per op. Measured worst over the 8 steps (each test logs its own): 7.4e-7
 * with NSP (at this lr of 2e-2 the roundings grow step by step), 8.6e-8 without. 3e-6 is about 4× the worst, while
 * a wrong gradient or a skipped parameter moves the loss by ~1e-2 on this model.
 */
const LOSS_RTOL = 3e-6;
/**
 * Parameters after the 8 steps, browser against native: rounding as above, carried into the weights by AdamW, whose
 * update m/√v is about ±lr where a gradient is tiny whatever its size, so a rounding-sized change of such a gradient
 * moves its weight by a fraction of lr, and later steps build on it. Measured 5.5e-5 at this lr of 2e-2 (the masked
 * LM's transform, logged; 9.7e-7 at lr 2e-3 over 6 steps); 2e-4, 1% of lr and about 4× that, bounds it while a wrong
 * or missing update moves an element by ~lr.
 */
const PARAM_ATOL = 2e-4;
/**
 * A step's loss is the f32 sum of its two heads' f32 losses (one micro-batch a step): one rounding apart, 6e-8
 * relative; 1e-6 bounds it while a missing or wrong part is off by tenths.
 */
const LOSS_SUM_RTOL = 1e-6;
/**
 * Step losses, WebGPU (SwiftShader) against the wasm CPU: besides the summation orders, the GPU's exp and erf differ
 * from the CPU's by ulps in every layer, and at this lr of 2e-2 the differences grow step by step. Measured worst
 * 5.5e-6 (logged); 3e-5 is 5.5× that. Its parameters stay within PARAM_ATOL (measured 4.8e-5).
 */
const WEBGPU_LOSS_RTOL = 3e-5;


/**
 * The native CLI's pretrain of the tiny checkpoint on CORPUS (`flags`: CLI_FLAGS and more): its step lines
 * ({ step, loss, mlm_loss, mlm_accuracy, nsp_loss?, nsp_accuracy?, learning_rate }) and its weights.
 */
function nativePretrain(flags = CLI_FLAGS) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-pretrain-"));
  try {
    const data = path.join(dir, "corpus.txt");
    fs.writeFileSync(data, CORPUS);
    const out = path.join(dir, "out");
    const r = spawnSync(path.join(ROOT, "target/debug/bertgpu"), ["pretrain", "--model", path.join(ROOT, TINY),
      "--data", data, "--out", out, "--device", "cpu", ...flags], { encoding: "utf8" });
    assert.equal(r.status, 0, `bertgpu pretrain failed: ${r.stderr}`);
    const steps = r.stderr.split("\n").filter((l) => l.startsWith("{\"epoch\"")).map((l) => JSON.parse(l))
      .filter((x) => x.step != null);
    return { steps, weights: readSafetensors(fs.readFileSync(path.join(out, "model.safetensors"))) };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Each step's numbers, browser against native: losses within LOSS_RTOL, accuracies and learning rates equal. */
function compareSteps(got, want, what) {
  assert.equal(got.length, want.length, `${what}: steps`);
  let worst = 0;
  got.forEach((g, i) => {
    const w = want[i];
    for (const [k, nk] of [["loss", "loss"], ["mlmLoss", "mlm_loss"], ["nspLoss", "nsp_loss"]]) {
      if (w[nk] == null) {
        assert.equal(g[k], null, `${what}: step ${i + 1} ${k}`);
        continue;
      }
      const r = Math.abs(g[k] - w[nk]) / Math.abs(w[nk]);
      assert.ok(r <= LOSS_RTOL, `${what}: step ${i + 1} ${k} ${g[k]} vs native ${w[nk]} (relative ${r})`);
      worst = Math.max(worst, r);
    }
    // The same predictions right: the logits differ by rounding only, far from any tie at these few tokens. (The
    // CLI prints an f32 as the shortest decimal that reads back as it; the page gets the f32 itself.)
    const f32 = (x) => (x == null ? null : Math.fround(x));
    assert.equal(g.mlmAccuracy, f32(w.mlm_accuracy), `${what}: step ${i + 1} mlmAccuracy`);
    assert.equal(g.nspAccuracy, f32(w.nsp_accuracy), `${what}: step ${i + 1} nspAccuracy`);
    assert.equal(g.learningRate, f32(w.learning_rate), `${what}: step ${i + 1} learningRate`);
  });
  return worst;
}

/** Each step's metrics are in range and add up: loss = mlmLoss + nspLoss (+ 0 without NSP). */
function checkMetrics(steps, nsp) {
  for (const s of steps) {
    assert.ok(s.mlmAccuracy >= 0 && s.mlmAccuracy <= 1, `mlmAccuracy ${s.mlmAccuracy}`);
    assert.ok(Number.isFinite(s.mlmLoss) && s.mlmLoss > 0, `mlmLoss ${s.mlmLoss}`);
    if (nsp) {
      assert.ok(s.nspAccuracy >= 0 && s.nspAccuracy <= 1, `nspAccuracy ${s.nspAccuracy}`);
      assert.ok(Math.abs(s.loss - (s.mlmLoss + s.nspLoss)) <= LOSS_SUM_RTOL * s.loss, JSON.stringify(s));
    } else {
      assert.deepEqual([s.nspLoss, s.nspAccuracy], [null, null], JSON.stringify(s));
      assert.equal(s.loss, s.mlmLoss);
    }
  }
}

const ctx = withPage();

test("pretrain on the wasm CPU trains what the native CLI's pretrain trains; the model is then the pre-trained one", async () => {
  const got = await ctx.page.evaluate(async ({ url, corpus, documents, options }) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const probe = "the [MASK] is here.";
    const before = await bert.fillMask(probe);
    const events = [];
    const report = await bert.pretrain(corpus, { ...options, onProgress: (p) => events.push(p) });
    const after = await bert.fillMask(probe);
    const files = await bert.exportModel();
    const reloaded = await bertgpu.Bert.load({ config: files["config.json"], tokenizer: files["tokenizer.json"],
      weights: files["model.safetensors"] }, { device: "cpu" });
    const again = await reloaded.fillMask(probe);
    reloaded.dispose();
    bert.dispose();
    // The corpus as an array of documents: the same rows, so the same run.
    const other = await bertgpu.Bert.load(url, { device: "cpu" });
    const fromArray = await other.pretrain(documents, options);
    other.dispose();
    return { before, after, again, report, events, fromArray, names: Object.keys(files).sort(),
      config: new TextDecoder().decode(files["config.json"]), weights: Array.from(files["model.safetensors"]) };
  }, { url: ctx.env.models.url + TINY, corpus: CORPUS, documents: DOCUMENTS, options: OPTIONS });

  const steps = got.report.steps;
  assert.deepEqual(steps.map((s) => s.step), [1, 2, 3, 4, 5, 6, 7, 8]);
  assert.deepEqual(got.events.filter((e) => e.type === "step"), steps, "every step reaches onProgress as reported");
  assert.deepEqual(got.events.filter((e) => e.type === "epoch"), got.report.epochs);
  assert.equal(steps[0].totalSteps, 8);
  assert.ok(steps.some((s) => s.mlmAccuracy > 0), "some masked tokens are predicted right by the last steps");
  checkMetrics(steps, true);
  assert.ok(got.report.epochs.length >= 2, JSON.stringify(got.report.epochs));
  for (const e of got.report.epochs) {
    for (const k of ["trainLoss", "valLoss", "valAccuracy", "valNspAccuracy"]) {
      assert.ok(Number.isFinite(e[k]), `epoch ${e.epoch}: ${k} ${e[k]}`);
    }
  }
  assert.deepEqual(got.fromArray, got.report, "an array of documents is the same corpus as its text");
  // The model is the pre-trained one: its fill-mask changed, and the exported folder gives it bit for bit.
  assert.notDeepEqual(got.after, got.before);
  assert.deepEqual(got.again, got.after);
  assert.deepEqual(got.names, ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]);
  assert.deepEqual(JSON.parse(got.config).architectures, ["BertForPreTraining"]);

  const native = nativePretrain();
  const worstLoss = compareSteps(steps, native.steps, "browser CPU vs native");
  const worst = maxWeightDiff(readSafetensors(Uint8Array.from(got.weights)), native.weights);
  console.log(`wasm CPU vs native pretrain: step losses relative ${worstLoss.toExponential(2)}, parameters `
    + `${worst.diff.toExponential(2)} (${worst.name}); MLM accuracy by step ${steps.map((s) => s.mlmAccuracy.toFixed(3))}`);
  assert.ok(worst.diff <= PARAM_ATOL, `parameter ${worst.name} differs by ${worst.diff}`);
  ctx.page.checkErrors();
});

test("pretrain on WebGPU trains what the wasm CPU trains", async () => {
  const got = await ctx.page.evaluate(async ({ url, corpus, options }) => {
    const out = {};
    for (const device of ["webgpu", "cpu"]) {
      const bert = await bertgpu.Bert.load(url, { device });
      const report = await bert.pretrain(corpus, options);
      out[device] = { device: bert.device, steps: report.steps,
        weights: Array.from((await bert.exportModel())["model.safetensors"]) };
      bert.dispose();
    }
    return out;
  }, { url: ctx.env.models.url + TINY, corpus: CORPUS, options: OPTIONS });
  assert.equal(got.webgpu.device, "webgpu");
  const [gpu, cpu] = [got.webgpu.steps, got.cpu.steps];
  assert.equal(cpu.length, 8);
  assert.equal(gpu.length, cpu.length);
  let worstLoss = 0;
  gpu.forEach((g, i) => {
    for (const k of ["loss", "mlmLoss", "nspLoss"]) {
      const r = Math.abs(g[k] - cpu[i][k]) / Math.abs(cpu[i][k]);
      worstLoss = Math.max(worstLoss, r);
      assert.ok(r <= WEBGPU_LOSS_RTOL, `step ${i + 1} ${k}: WebGPU ${g[k]}, wasm CPU ${cpu[i][k]} (relative ${r})`);
    }
    assert.equal(g.mlmAccuracy, cpu[i].mlmAccuracy, `step ${i + 1} mlmAccuracy`);
    assert.equal(g.nspAccuracy, cpu[i].nspAccuracy, `step ${i + 1} nspAccuracy`);
  });
  const worst = maxWeightDiff(readSafetensors(Uint8Array.from(got.webgpu.weights)), readSafetensors(Uint8Array.from(got.cpu.weights)));
  console.log(`WebGPU vs wasm CPU pretrain: step losses relative ${worstLoss.toExponential(2)}, parameters `
    + `${worst.diff.toExponential(2)} (${worst.name})`);
  assert.ok(worst.diff <= PARAM_ATOL, `parameter ${worst.name} differs by ${worst.diff}`);
  ctx.page.checkErrors();
});

test("pretrain with nsp: false trains the masked LM alone, as the CLI's --no-nsp", async () => {
  const got = await ctx.page.evaluate(async ({ url, corpus, options }) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const report = await bert.pretrain(corpus, { ...options, nsp: false });
    bert.dispose();
    return report;
  }, { url: ctx.env.models.url + TINY, corpus: CORPUS, options: OPTIONS });
  checkMetrics(got.steps, false);
  assert.ok(got.epochs.every((e) => e.valNspAccuracy === undefined), JSON.stringify(got.epochs));
  const worstLoss = compareSteps(got.steps, nativePretrain([...CLI_FLAGS, "--no-nsp"]).steps, "--no-nsp: browser CPU vs native");
  console.log(`--no-nsp, wasm CPU vs native pretrain: step losses relative ${worstLoss.toExponential(2)}`);
  ctx.page.checkErrors();
});

test("pretrain stops on its signal and on dispose, refuses calls meanwhile and bad input; the model stays as it was", async () => {
  const got = await ctx.page.evaluate(async ({ url, mlmOnly, classifier, corpus, documents, options }) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const probe = "the [MASK] is here.";
    const before = await bert.fillMask(probe);
    const caught = async (p) => {
      try {
        await p;
        return "resolved";
      } catch (e) {
        return `${e.name}: ${e.message}`;
      }
    };
    // Aborted after the second step; a fillMask asked for meanwhile is refused at once.
    const controller = new AbortController();
    let during = null;
    const aborted = await caught(bert.pretrain(corpus, { ...options, steps: 500, signal: controller.signal,
      onProgress: (p) => {
        if (p.type === "step" && p.step === 2) {
          during = caught(bert.fillMask(probe));
          controller.abort();
        }
      } }));
    const afterAbort = await bert.fillMask(probe);
    const cases = {
      empty: ["", {}],
      blank: ["\n\n  \n", {}],
      noDocuments: [[], {}],
      emptyDocument: [[documents[0], " \n"], {}],
      oneDocument: [documents[0], options],
      oneSentenceEach: [["one sentence.", "another one.", "and a third."], options],
      notText: [[{ text: "a" }], {}],
      number: [42, {}],
      unknown: [corpus, { epochs: 3 }],
      mlmProbability: [corpus, { ...options, mlmProbability: 1.5 }],
      shortSeqProb: [corpus, { ...options, shortSeqProb: -0.1 }],
      maxLength: [corpus, { ...options, maxLength: 65 }],
      tooShort: [corpus, { ...options, maxLength: 4 }],
      steps: [corpus, { ...options, steps: 0 }],
      stepsType: [corpus, { steps: 2.5 }],
      nspType: [corpus, { nsp: "yes" }],
      lr: [corpus, { ...options, learningRate: -1 }],
      diverges: [corpus, { ...options, learningRate: 1e30 }],
      preAborted: [corpus, { ...options, signal: AbortSignal.abort() }],
      resumeAlone: [corpus, { ...options, resume: true }],
    };
    const bad = {};
    for (const [k, [c, o]] of Object.entries(cases)) bad[k] = await caught(bert.pretrain(c, o));
    const afterBad = await bert.fillMask(probe);
    // dispose() during pre-training stops it.
    const other = await bertgpu.Bert.load(url, { device: "cpu" });
    const disposed = await caught(other.pretrain(corpus, { ...options, steps: 500,
      onProgress: (p) => p.type === "step" && other.dispose() }));
    // Checkpoints without the heads: a classifier (no masked-LM head), and a BertForMaskedLM asked for NSP.
    const cls = await bertgpu.Bert.load(classifier, { device: "cpu" });
    const noMlm = await caught(cls.pretrain(corpus, options));
    cls.dispose();
    const mlm = await bertgpu.Bert.load(mlmOnly, { device: "cpu" });
    const noNsp = await caught(mlm.pretrain(corpus, options));
    mlm.dispose();
    bert.dispose();
    return { before, aborted, during: await during, afterAbort, bad, afterBad, disposed, noMlm, noNsp };
  }, { url: ctx.env.models.url + TINY, mlmOnly: ctx.env.models.url + MLM_ONLY,
    classifier: ctx.env.models.url + "tests/models/tiny-classifier/", corpus: CORPUS, documents: DOCUMENTS,
    options: OPTIONS });
  assert.match(got.aborted, /^AbortError/);
  assert.match(got.during, /fillMask: this model is pre-training; wait for pretrain to finish, or stop it/);
  assert.deepEqual(got.afterAbort, got.before, "an aborted pre-training leaves the model as it was");
  const want = {
    empty: /the corpus has no text; give documents/,
    blank: /the corpus has no text/,
    noDocuments: /the corpus has no documents/,
    emptyDocument: /corpus\[1\] has no text: remove it or give it text/,
    oneDocument: /next-sentence prediction needs at least 2 documents.*or turn NSP off/,
    oneSentenceEach: /documents of at least 2 sentences/,
    notText: /TypeError: pretrain: corpus must be a string .* or an array of document strings/,
    number: /TypeError: pretrain: corpus must be a string/,
    unknown: /TypeError: pretrain: unknown option "epochs"/,
    mlmProbability: /mlm_probability 1.5 is not in \(0, 1\]/,
    shortSeqProb: /short_seq_prob -0.1 is not in \[0, 1\]/,
    maxLength: /maxLength 65 is beyond the model's 64 positions: give at most 64/,
    tooShort: /max_length 4 leaves no room/,
    steps: /max steps must be at least 1/,
    stepsType: /TypeError: pretrain: steps must be a non-negative integer/,
    nspType: /TypeError: pretrain: nsp must be true or false/,
    lr: /learning rate must be a positive number/,
    diverges: /is not finite.*lower the learning rate/,
    preAborted: /^AbortError/,
    resumeAlone: /TypeError: pretrain: resume continues from a checkpoint/,
  };
  for (const [k, re] of Object.entries(want)) assert.match(got.bad[k], re, k);
  assert.deepEqual(got.afterBad, got.before, "failed calls leave the model as it was");
  assert.match(got.disposed, /pretrain: the model was disposed during pre-training/);
  assert.match(got.noMlm, /no masked-LM head \(`cls\.predictions\.transform\.dense\.weight`\)/);
  assert.match(got.noNsp, /no next-sentence head \(cls\.seq_relationship\).*nsp: false/);
  ctx.page.checkErrors();
});

test("pretrain's checkpoints: a stop by signal saves one, resume ends with the uninterrupted run's model", async () => {
  const got = await ctx.page.evaluate(async ({ url, corpus, options }) => {
    const sha = async (bert) => {
      const digest = await crypto.subtle.digest("SHA-256", (await bert.exportModel())["model.safetensors"]);
      return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
    };
    const run = async (name, { onStep, ...extra }) => {
      const bert = await bertgpu.Bert.load(url, { device: "cpu" });
      const events = [];
      let result;
      try {
        result = await bert.pretrain(corpus, { ...options, checkpoint: { name, every: 2 }, ...extra,
          onProgress: (p) => {
            events.push(p);
            onStep?.(p);
          } });
      } catch (e) {
        result = `${e.name}: ${e.message}`;
      }
      const digest = typeof result === "string" ? null : await sha(bert);
      bert.dispose();
      return { result, events, digest };
    };
    const whole = await run("pretrain-whole", {});
    const controller = new AbortController();
    const stopped = await run("pretrain-stopped", { signal: controller.signal,
      onStep: (p) => p.type === "step" && p.step === 3 && controller.abort() });
    const listed = await bertgpu.Bert.checkpoints();
    const resumed = await run("pretrain-stopped", { resume: true });
    for (const name of ["pretrain-whole", "pretrain-stopped"]) await bertgpu.Bert.deleteCheckpoint(name);
    return { whole, stopped, listed, resumed };
  }, { url: ctx.env.models.url + TINY, corpus: CORPUS, options: OPTIONS });
  assert.match(got.stopped.result, /^AbortError/);
  const mine = got.listed.find((c) => c.name === "pretrain-stopped");
  assert.ok(mine && mine.step === 3 && mine.totalSteps === 8, JSON.stringify(got.listed));
  const from = got.resumed.events.find((e) => e.type === "checkpoint" && e.checkpoint === "resumed");
  assert.equal(from?.step, 3, JSON.stringify(got.resumed.events.slice(0, 2)));
  assert.deepEqual(got.resumed.result, got.whole.result, "the report, every step's metrics and every epoch's");
  assert.equal(got.resumed.digest, got.whole.digest, "the resumed model is the uninterrupted run's, bit for bit");
  ctx.page.checkErrors();
});

test("bertgpu/worker: pretrain in a worker (progress and signal across), every worker then runs the pre-trained model", async () => {
  const got = await ctx.page.evaluate(async ({ url, corpus, options }) => {
    const probe = ["the [MASK] is here.", "a [MASK] of bread."];
    const main = await bertgpu.Bert.load(url, { device: "cpu" });
    const wantReport = await main.pretrain(corpus, options);
    const want = await main.fillMask(probe);
    main.dispose();
    const w = await bertgpuWorker.Bert.load(url, { device: "cpu", workers: 2 });
    const before = await w.fillMask(probe);
    const controller = new AbortController();
    let aborted;
    try {
      await w.pretrain(corpus, { ...options, steps: 500, signal: controller.signal,
        onProgress: (p) => p.type === "step" && controller.abort() });
      aborted = "resolved";
    } catch (e) {
      aborted = e.name;
    }
    const afterAbort = await w.fillMask(probe);
    const events = [];
    const report = await w.pretrain(corpus, { ...options, onProgress: (p) => events.push(p) });
    const both = await w.fillMask(probe); // split between the two workers
    const files = await w.exportModel();
    w.dispose();
    return { wantReport, want, before, aborted, afterAbort, report, events, both, names: Object.keys(files).sort() };
  }, { url: ctx.env.models.url + TINY, corpus: CORPUS, options: OPTIONS });
  assert.equal(got.aborted, "AbortError");
  assert.deepEqual(got.afterAbort, got.before, "an aborted pre-training in a worker leaves the model as it was");
  assert.deepEqual(got.report, got.wantReport, "the same run as in the page");
  assert.equal(got.events.filter((e) => e.type === "step").length, 8, "every step reaches the page");
  assert.deepEqual(got.both, got.want, "both workers run the model the first one pre-trained (the same as the page's)");
  assert.deepEqual(got.names, ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]);
  ctx.page.checkErrors();
});
