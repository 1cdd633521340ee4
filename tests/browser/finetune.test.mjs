// fineTune / exportModel in the browser: the whole encoder and a new head trained in the page, on the wasm CPU
// backend and on WebGPU (SwiftShader here), checked against the native CLI's `fine-tune` on the same data and options
// (whose gradients and AdamW steps tests/finetune_golden.rs checks against PyTorch), the exported folder loaded back;
// then stopping it (AbortSignal, dispose), calls made meanwhile, and bad input, none of which may change the model.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ROOT, maxWeightDiff, readSafetensors, withPage } from "./harness.mjs";

const TINY = "tests/models/tiny-classifier/";

/**
 * Real text nobody here wrote (Debian's fortunes, tests/data/fortunes/): the 24 shortest quotations of the training
 * split, 4 topics. The tiny checkpoint's own head has other labels (negative, neutral, positive), so a new head is
 * initialised from the seed.
 */
const jsonl = (name) => fs.readFileSync(path.join(ROOT, "tests/data/fortunes", name), "utf8")
  .trim().split("\n").map((l) => JSON.parse(l));
const EXAMPLES = jsonl("train.jsonl").sort((a, b) => a.text.length - b.text.length || (a.text < b.text ? -1 : 1))
  .slice(0, 24);
const OPTIONS = { task: "classify", epochs: 2, batchSize: 8, learningRate: 1e-3, seed: 7, validationSplit: 0.25 };
const CLI_FLAGS = ["--task", "classify", "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--seed", "7",
  "--validation-split", "0.25"];

/**
 * Step losses of the browser's training against the native CLI's (and WebGPU's against the wasm CPU's): the same
 * rows, batches, initial head and AdamW; only f32 summation orders differ (wasm's single-threaded GEMM, the
 * GPU's tiles, native's SIMD), ~1e-7 relative per op. Measured worst over the 6 steps (each test logs its own):
 * 5.9e-7 wasm CPU vs native, 1.0e-7 WebGPU (SwiftShader) vs wasm CPU, 2.5e-7 LoRA wasm CPU vs native. 3e-6 is
 * about 5× the worst, while a wrong gradient or a skipped parameter moves the loss by ~1e-2 on this model.
 */
const LOSS_RTOL = 3e-6;
/**
 * Parameters after the 6 steps, browser against native (but see harness.mjs NO_GRADIENT): measured worst 4.0e-7
 * (a LoRA adapter's B; full fine-tuning 3.3e-7 on the wasm CPU, 2.8e-7 WebGPU vs wasm CPU; each test logs its own);
 * 2e-6 is 5× that, while a wrong update moves an element by ~lr = 1e-3.
 */
const PARAM_ATOL = 2e-6;

/**
 * Scores of the fine-tuned model exported as a Q8_0 GGUF against the f32 model's. Q8_0 rounds each weight to 1/254
 * of its block's largest; the tiny checkpoint (hidden 32, weights drawn with std 0.3, so blocks with large outliers)
 * is far more sensitive than a real one: measured 3.5e-2. 6e-2 bounds that while failing a GGUF whose tensors are
 * mismatched or unscaled (scores off by tenths); the f32 GGUF, compared exactly, checks the export itself.
 */
const Q8_SCORE_ATOL = 6e-2;


function assertLossesClose(got, want, what) {
  assert.equal(got.length, want.length, `${what}: steps`);
  let worst = 0;
  for (let i = 0; i < want.length; i++) {
    const r = Math.abs(got[i] - want[i]) / Math.abs(want[i]);
    assert.ok(r <= LOSS_RTOL, `${what}: step ${i + 1} loss ${got[i]} vs ${want[i]} (relative ${r})`);
    worst = Math.max(worst, r);
  }
  return worst;
}

/**
 * The native CLI's fine-tune of the tiny checkpoint on EXAMPLES (`flags`: CLI_FLAGS and more): its step losses and
 * its weights (model.safetensors, or a LoRA adapter's adapter_model.safetensors).
 */
function nativeFineTune(flags = CLI_FLAGS) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-finetune-"));
  try {
    const data = path.join(dir, "data.jsonl");
    fs.writeFileSync(data, EXAMPLES.map((e) => JSON.stringify(e)).join("\n") + "\n");
    const out = path.join(dir, "out");
    const r = spawnSync(path.join(ROOT, "target/debug/bertgpu"), ["fine-tune", "--model", path.join(ROOT, TINY),
      "--data", data, "--out", out, "--device", "cpu", ...flags], { encoding: "utf8" });
    assert.equal(r.status, 0, `bertgpu fine-tune failed: ${r.stderr}`);
    // stderr: a JSON line per step ({ step, loss, ... }) and per epoch.
    const losses = r.stderr.split("\n").filter((l) => l.startsWith("{\"epoch\"")).map((l) => JSON.parse(l))
      .filter((x) => x.step != null).map((x) => x.loss);
    const adapter = fs.existsSync(path.join(out, "adapter_model.safetensors"));
    const weights = readSafetensors(fs.readFileSync(path.join(out, adapter ? "adapter_model.safetensors" : "model.safetensors")));
    const config = JSON.parse(fs.readFileSync(path.join(out, adapter ? "adapter_config.json" : "config.json"), "utf8"));
    return { weights, config, losses };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const ctx = withPage();

test("fineTune on the wasm CPU trains what the native CLI trains; exportModel loads back", async () => {
  const got = await ctx.page.evaluate(async ({ url, examples, options }) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const texts = examples.map((e) => e.text);
    const before = await bert.classify(texts);
    const events = [];
    const report = await bert.fineTune(examples, { ...options, onProgress: (p) => events.push(p) });
    const after = await bert.classify(texts);
    const files = await bert.exportModel();
    const reloaded = await bertgpu.Bert.load({ config: files["config.json"], tokenizer: files["tokenizer.json"],
      weights: files["model.safetensors"] }, { device: "cpu" });
    const again = await reloaded.classify(texts);
    reloaded.dispose();
    // As one GGUF: f32 (the same numbers), and quantized again to Q8_0; each loaded back.
    const viaGguf = async (dtype) => {
      const gguf = (await bert.exportModel({ format: "gguf", dtype }))["model.gguf"];
      const m = await bertgpu.Bert.load({ gguf }, { device: "cpu" });
      const out = await m.classify(texts);
      m.dispose();
      return { out, bytes: gguf.length };
    };
    const f32Gguf = await viaGguf("f32");
    const q8 = await viaGguf("q8_0");
    const quantized = q8.out;
    const gguf = { length: q8.bytes };
    bert.dispose();
    const plain = (u8) => Array.from(u8);
    return { before, after, again, quantized, f32Gguf: f32Gguf.out, ggufBytes: gguf.length, report, events, names: Object.keys(files).sort(),
      config: new TextDecoder().decode(files["config.json"]), weights: plain(files["model.safetensors"]) };
  }, { url: ctx.env.models.url + TINY, examples: EXAMPLES, options: OPTIONS });

  const labels = [...new Set(EXAMPLES.map((e) => e.label))];
  assert.deepEqual(got.report.labels, labels, "a new head for the data's labels, in order of first appearance");
  assert.deepEqual(got.names, ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]);
  const config = JSON.parse(got.config);
  assert.deepEqual(config.architectures, ["BertForSequenceClassification"]);
  assert.deepEqual(Object.values(config.id2label), labels);
  // 18 training rows in batches of 8: 3 steps an epoch, 2 epochs; one epoch event each, with validation.
  assert.deepEqual(got.events.filter((e) => e.type === "step").map((e) => e.step), [1, 2, 3, 4, 5, 6]);
  // First, what the run holds besides the model (tests/training_memory.rs measures the statement natively): the
  // trained copy of the parameters, as much again for the gradients (every parameter trains), twice for AdamW.
  const [memory] = got.events;
  assert.equal(memory.type, "memory", JSON.stringify(got.events.slice(0, 2)));
  assert.ok(memory.parameters > 0 && memory.gradients === memory.parameters && memory.optimizer === 2 * memory.parameters
    && memory.activations > 0, JSON.stringify(memory));
  assert.equal(memory.total, memory.parameters + memory.gradients + memory.optimizer
    + Math.max(memory.activations, memory.update) + 2 ** 20);
  assert.deepEqual(got.events.filter((e) => e.type === "step"), got.report.steps);
  assert.deepEqual(got.events.filter((e) => e.type === "epoch"), got.report.epochs);
  for (const e of got.report.epochs) {
    for (const k of ["trainLoss", "valLoss", "valAccuracy"]) assert.ok(Number.isFinite(e[k]), `${k} ${e[k]}`);
  }
  assert.equal(got.report.steps[0].totalSteps, 6);
  // The model is the fine-tuned one now: the new labels, and the exported folder gives the same scores bit for bit.
  assert.deepEqual(got.before[0].map((s) => s.label).sort(), ["negative", "neutral", "positive"]);
  assert.deepEqual(got.after[0].map((s) => s.label).sort(), [...labels].sort());
  assert.deepEqual(got.again, got.after);
  assert.deepEqual(got.f32Gguf, got.after, "the f32 GGUF is the fine-tuned model exactly");
  // The Q8_0 GGUF: the same labels, scores within Q8_0's rounding of the weights.
  let worstQ8 = 0;
  got.quantized.forEach((scores, i) => {
    const want = Object.fromEntries(got.after[i].map((s) => [s.label, s.score]));
    for (const s of scores) worstQ8 = Math.max(worstQ8, Math.abs(s.score - want[s.label]));
  });
  console.log(`Q8_0 GGUF export: scores within ${worstQ8.toExponential(2)} of the f32 model's (${got.ggufBytes} bytes)`);
  assert.ok(worstQ8 <= Q8_SCORE_ATOL, `Q8_0 scores differ by ${worstQ8}`);

  const native = nativeFineTune();
  assert.deepEqual(native.config.id2label, config.id2label);
  const worstLoss = assertLossesClose(got.report.steps.map((s) => s.loss), native.losses, "browser CPU vs native");
  const worst = maxWeightDiff(readSafetensors(Uint8Array.from(got.weights)), native.weights);
  console.log(`wasm CPU vs native fine-tune: step losses relative ${worstLoss.toExponential(2)}, parameters `
    + `${worst.diff.toExponential(2)} (${worst.name})`);
  assert.ok(worst.diff <= PARAM_ATOL, `parameter ${worst.name} differs by ${worst.diff}`);
  ctx.page.checkErrors();
});

test("fineTune on WebGPU trains what the wasm CPU trains", async () => {
  const got = await ctx.page.evaluate(async ({ url, examples, options }) => {
    const out = {};
    for (const device of ["webgpu", "cpu"]) {
      const bert = await bertgpu.Bert.load(url, { device });
      const report = await bert.fineTune(examples, options);
      const files = await bert.exportModel();
      out[device] = { device: bert.device, losses: report.steps.map((s) => s.loss), weights: Array.from(files["model.safetensors"]) };
      bert.dispose();
    }
    return out;
  }, { url: ctx.env.models.url + TINY, examples: EXAMPLES, options: OPTIONS });
  assert.equal(got.webgpu.device, "webgpu");
  const worstLoss = assertLossesClose(got.webgpu.losses, got.cpu.losses, "WebGPU vs wasm CPU");
  const worst = maxWeightDiff(readSafetensors(Uint8Array.from(got.webgpu.weights)), readSafetensors(Uint8Array.from(got.cpu.weights)));
  console.log(`WebGPU vs wasm CPU fine-tune: step losses relative ${worstLoss.toExponential(2)}, parameters `
    + `${worst.diff.toExponential(2)} (${worst.name})`);
  assert.ok(worst.diff <= PARAM_ATOL, `parameter ${worst.name} differs by ${worst.diff}`);
  ctx.page.checkErrors();
});

test("fineTune stops on its signal and on dispose, refuses calls meanwhile and bad input; the model stays as it was", async () => {
  const got = await ctx.page.evaluate(async ({ url, gguf, examples, options }) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const texts = examples.map((e) => e.text);
    const before = await bert.classify(texts);
    const caught = async (p) => {
      try {
        await p;
        return "resolved";
      } catch (e) {
        return `${e.name}: ${e.message}`;
      }
    };
    // Aborted after the first step; a classify asked for meanwhile is refused at once.
    const controller = new AbortController();
    let during = null;
    const aborted = await caught(bert.fineTune(examples, { ...options, epochs: 50, signal: controller.signal,
      onProgress: (p) => {
        if (p.type === "step" && p.step === 1) {
          during = caught(bert.classify(texts));
          controller.abort();
        }
      } }));
    const afterAbort = await bert.classify(texts);
    const bad = {};
    const cases = {
      task: [examples, { task: "summarize" }],
      notArray: [{ text: "a", label: "b" }, {}],
      oneClass: [examples.map((e) => ({ ...e, label: "x" })), {}],
      wrongShape: [[{ tokens: ["a"], tags: ["O"] }], { task: "classify" }],
      layers: [examples, { layers: 9 }],
      layersType: [examples, { layers: "top" }],
      dropoutType: [examples, { dropout: "no" }],
      unknown: [examples, { epoch: 3 }],
      lr: [examples, { learningRate: -1 }],
      diverges: [examples, { ...options, learningRate: 1e30 }],
      preAborted: [examples, { signal: AbortSignal.abort() }],
    };
    for (const [k, [ex, o]] of Object.entries(cases)) bad[k] = await caught(bert.fineTune(ex, o));
    const afterBad = await bert.classify(texts);
    // dispose() during fine-tuning stops it.
    const other = await bertgpu.Bert.load(url, { device: "cpu" });
    const disposed = await caught(other.fineTune(examples, { ...options, epochs: 50,
      onProgress: (p) => p.type === "step" && other.dispose() }));
    const fromGguf = await bertgpu.Bert.load(gguf, { device: "cpu" });
    const ggufError = await caught(fromGguf.fineTune(examples, options));
    fromGguf.dispose();
    bert.dispose();
    return { before, aborted, during: await during, afterAbort, bad, afterBad, disposed, ggufError };
  }, { url: ctx.env.models.url + TINY, gguf: ctx.env.models.url + "tests/golden/llamacpp_tiny_bert.gguf",
    examples: EXAMPLES, options: OPTIONS });
  assert.match(got.aborted, /^AbortError/);
  assert.match(got.during, /classify: this model is fine-tuning; wait for fineTune to finish, or stop it/);
  assert.deepEqual(got.afterAbort, got.before, "an aborted fine-tuning leaves the model as it was");
  const want = {
    task: /TypeError: fineTune: task must be one of "classify", "pair", "ner", "qa", "embed"/,
    notArray: /TypeError: fineTune: examples must be an array/,
    oneClass: /a classifier needs at least 2 labels/,
    wrongShape: /examples\[0\] is not an example of task "classify": missing field `text`/,
    layers: /top 9 layers of a 2-layer model/,
    layersType: /TypeError: fineTune: layers must be "all" or a number of top layers/,
    dropoutType: /TypeError: fineTune: dropout must be true or false/,
    unknown: /TypeError: fineTune: unknown option "epoch"/,
    lr: /learning rate must be a positive number/,
    diverges: /the loss \(NaN\) or the gradient norm \(NaN\) is not finite.*lower the learning rate/,
    preAborted: /^AbortError/,
  };
  for (const [k, re] of Object.entries(want)) assert.match(got.bad[k], re, k);
  assert.deepEqual(got.afterBad, got.before, "failed calls leave the model as it was");
  assert.match(got.disposed, /fineTune: the model was disposed during fine-tuning/);
  assert.match(got.ggufError, /fineTune: this model was loaded from a \.gguf/);
  ctx.page.checkErrors();
});

test("bertgpu/worker: fineTune in a worker (progress and signal across), every worker then runs the tuned model", async () => {
  const got = await ctx.page.evaluate(async ({ url, examples, options }) => {
    const texts = examples.map((e) => e.text);
    const main = await bertgpu.Bert.load(url, { device: "cpu" });
    await main.fineTune(examples, options);
    const want = await main.classify(texts);
    main.dispose();
    const w = await bertgpuWorker.Bert.load(url, { device: "cpu", workers: 2 });
    const events = [];
    const report = await w.fineTune(examples, { ...options, onProgress: (p) => events.push(p) });
    const both = await w.classify(texts); // split between the two workers
    const controller = new AbortController();
    let aborted;
    try {
      await w.fineTune(examples, { ...options, epochs: 50, signal: controller.signal,
        onProgress: (p) => p.type === "step" && controller.abort() });
      aborted = "resolved";
    } catch (e) {
      aborted = e.name;
    }
    const afterAbort = await w.classify(texts);
    const files = await w.exportModel();
    w.dispose();
    return { want, both, events: events.length, steps: report.steps.length, aborted, afterAbort,
      names: Object.keys(files).sort() };
  }, { url: ctx.env.models.url + TINY, examples: EXAMPLES, options: OPTIONS });
  assert.equal(got.steps, 6);
  assert.equal(got.events, 1 + 6 + 2, "the memory statement, every step and epoch reach the page");
  assert.deepEqual(got.both, got.want, "both workers run the model the first one tuned (the same as the page's)");
  assert.equal(got.aborted, "AbortError");
  assert.deepEqual(got.afterAbort, got.want, "an aborted fine-tuning in a worker leaves the model as it was");
  assert.deepEqual(got.names, ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]);
  ctx.page.checkErrors();
});

test("fineTune with LoRA: the adapters the native CLI trains, peft's files, the model holds them merged, and Bert.load takes the adapter beside its base", async () => {
  const lora = { r: 4, alpha: 8, targets: "qv" };
  const got = await ctx.page.evaluate(async ({ url, examples, options, lora }) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const texts = examples.map((e) => e.text);
    const report = await bert.fineTune(examples, { ...options, learningRate: 1e-2, lora });
    const after = await bert.classify(texts);
    const adapter = await bert.exportModel({ format: "adapter" });
    const folder = await bert.exportModel();
    bert.dispose();
    // The adapter loaded beside its base model: the same classifier (its labels from the adapter's metadata).
    const beside = await bertgpu.Bert.load(url, { device: "cpu", adapter: { config: adapter["adapter_config.json"],
      weights: adapter["adapter_model.safetensors"] } });
    const besideOut = await beside.classify(texts);
    beside.dispose();
    const plain = (u8) => Array.from(u8);
    return { losses: report.steps.map((s) => s.loss), after, besideOut, adapterConfig: new TextDecoder().decode(adapter["adapter_config.json"]),
      adapterWeights: plain(adapter["adapter_model.safetensors"]), merged: plain(folder["model.safetensors"]) };
  }, { url: ctx.env.models.url + TINY, examples: EXAMPLES, options: OPTIONS, lora });
  const flags = [...CLI_FLAGS.map((f) => (f === "1e-3" ? "1e-2" : f)), "--lora", "4", "--lora-alpha", "8"];
  const adapter = nativeFineTune(flags);
  const merged = nativeFineTune([...flags, "--merge"]);
  const config = JSON.parse(got.adapterConfig);
  assert.equal(config.peft_type, "LORA");
  assert.equal(config.r, 4);
  assert.deepEqual([...config.target_modules].sort(), ["query", "value"]);
  const worstLora = assertLossesClose(got.losses, adapter.losses, "LoRA: browser CPU vs native");
  console.log(`LoRA, wasm CPU vs native: step losses relative ${worstLora.toExponential(2)}`);
  const a = maxWeightDiff(readSafetensors(Uint8Array.from(got.adapterWeights)), adapter.weights);
  const m = maxWeightDiff(readSafetensors(Uint8Array.from(got.merged)), merged.weights);
  console.log(`LoRA, wasm CPU vs native: adapter ${a.diff.toExponential(2)} (${a.name}), merged ${m.diff.toExponential(2)} (${m.name})`);
  assert.ok(a.diff <= PARAM_ATOL && m.diff <= PARAM_ATOL, `adapter ${a.diff}, merged ${m.diff}`);
  // Bert.load(base, { adapter }) folds W + s·B·A in at load (f32, another summation order than the training's
  // merge): the scores of the model that trained it, to f32 rounding (1e-5 bounds it; a wrong merge moves tenths).
  got.besideOut.forEach((scores, i) => {
    assert.deepEqual(scores.map((x) => x.label), got.after[i].map((x) => x.label), "the same labels, in the same order");
    scores.forEach((x, j) => assert.ok(Math.abs(x.score - got.after[i][j].score) <= 1e-5, `${x.score} vs ${got.after[i][j].score}`));
  });
  ctx.page.checkErrors();
});

test("fineTune with LoRA on WebGPU trains the adapters the wasm CPU trains", async () => {
  const lora = { r: 4, alpha: 8, targets: "qv" };
  const got = await ctx.page.evaluate(async ({ url, examples, options, lora }) => {
    const out = {};
    for (const device of ["webgpu", "cpu"]) {
      const bert = await bertgpu.Bert.load(url, { device });
      const report = await bert.fineTune(examples, { ...options, learningRate: 1e-2, lora });
      const adapter = await bert.exportModel({ format: "adapter" });
      out[device] = { device: bert.device, losses: report.steps.map((s) => s.loss),
        weights: Array.from(adapter["adapter_model.safetensors"]) };
      bert.dispose();
    }
    return out;
  }, { url: ctx.env.models.url + TINY, examples: EXAMPLES, options: OPTIONS, lora });
  assert.equal(got.webgpu.device, "webgpu");
  assert.equal(got.cpu.losses.length, 6, "18 rows in batches of 8, 2 epochs");
  const worstLoss = assertLossesClose(got.webgpu.losses, got.cpu.losses, "LoRA: WebGPU vs wasm CPU");
  const worst = maxWeightDiff(readSafetensors(Uint8Array.from(got.webgpu.weights)), readSafetensors(Uint8Array.from(got.cpu.weights)));
  console.log(`LoRA, WebGPU vs wasm CPU: step losses relative ${worstLoss.toExponential(2)}, adapter `
    + `${worst.diff.toExponential(2)} (${worst.name})`);
  assert.ok(worst.diff <= PARAM_ATOL, `adapter ${worst.name} differs by ${worst.diff}`);
  ctx.page.checkErrors();
});
