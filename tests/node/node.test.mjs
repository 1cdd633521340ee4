// The npm package in Node.js, as a user runs it: the packed tarball (`npm pack` of pkg/, or $BERTGPU_PKG) installed
// into a new project, and scripts there that `import { Bert } from "bertgpu"`. The CPU backend (the same wasm as in
// browsers, read from the package's own files) must give PyTorch's vectors (tests/golden/model.json, made by
// tests/golden/model.py) for all-MiniLM-L6-v2 loaded from a folder path, a relative path, a file: URL, an http URL,
// bytes and a .gguf path (converted by the CLI: `cargo build` first), and downloads kept in a cacheDir.
// Run: node --test tests/node/
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { serve } from "../../www/serve.mjs";
import { ROOT, MODELS, consumerProject } from "./package.mjs";

// Per-value agreement with PyTorch's vectors (f32, another summation order): the largest difference measured here
// is 2.7e-7 for unit vectors and 1.8e-6 for unnormalised mean-pooled ones (values up to ~0.6 in size).
const ATOL_NORMALIZED = 1e-6;
const ATOL_MEAN = 1e-5;

const MINILM = path.join(MODELS, "all-MiniLM-L6-v2");
const golden = JSON.parse(fs.readFileSync(path.join(ROOT, "tests/golden/model.json"), "utf8"))["all-MiniLM-L6-v2"];
const run = promisify(execFile);

let consumer;
let gguf;
let cli;
before(() => {
  consumer = consumerProject();
  // The CLI's `convert` (f32: the same numbers as the safetensors, so the same tolerances).
  cli = ["release", "debug"].map((p) => path.join(ROOT, "target", p, "bertgpu")).find((p) => fs.existsSync(p));
  if (!cli) throw new Error("target/debug/bertgpu is missing: run `cargo build` first");
  gguf = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-gguf-")), "all-MiniLM-L6-v2.gguf");
  execFileSync(cli, ["convert", "--model", MINILM, "--dtype", "f32", "--out", gguf], { stdio: "pipe" });
});
after(() => {
  if (gguf) fs.rmSync(path.dirname(gguf), { recursive: true, force: true });
});

/**
 * Runs an ES module in the consumer project (`node --input-type=module -e`), so that "bertgpu" resolves as it
 * would for its own code; `args` arrive as process.argv[1...]. Resolves to the JSON its last stdout line holds.
 */
async function inConsumer(code, ...args) {
  let out;
  try {
    out = await run(process.execPath, ["--input-type=module", "-e", code, ...args], { cwd: consumer, timeout: 120_000 });
  } catch (e) {
    throw new Error(`the consumer script failed:\n${e.stdout}\n${e.stderr}`);
  }
  return JSON.parse(out.stdout.trim().split("\n").pop());
}

/** The embedding script: loads `SOURCE` (an expression over `arg`, process.argv[1]) and embeds the golden texts. */
const embedScript = (source, options = "{}") => `
  import { Bert } from "bertgpu";
  import fs from "node:fs/promises";
  const arg = process.argv[1];
  const sentences = JSON.parse(process.argv[2]);
  const events = []; // progress events, for options that collect them
  const bert = await Bert.load(${source}, ${options});
  const normalized = (await bert.embed(sentences)).map((v) => Array.from(v));
  const mean = (await bert.embed(sentences, { normalize: false })).map((v) => Array.from(v));
  console.log(JSON.stringify({ device: bert.device, deviceReason: bert.deviceReason, simd: bert.simd, normalized, mean,
    events }));
  bert.dispose();
`;

function assertGolden(got, what) {
  assert.equal(got.device, "cpu", `${what}: device`);
  for (const [kind, want, atol] of [["normalized", golden.mean_normalized, ATOL_NORMALIZED], ["mean", golden.mean, ATOL_MEAN]]) {
    assert.equal(got[kind].length, want.length, `${what}: ${kind}: one vector per text`);
    got[kind].forEach((v, i) => {
      assert.equal(v.length, want[i].length, `${what}: ${kind}[${i}]: length`);
      v.forEach((x, j) => {
        assert.ok(Math.abs(x - want[i][j]) <= atol, `${what}: ${kind}[${i}][${j}] = ${x}, PyTorch ${want[i][j]}`);
      });
    });
  }
}

const SENTENCES = JSON.stringify(golden.sentences);

test("a folder path (absolute) gives PyTorch's vectors, on the CPU backend", async () => {
  const got = await inConsumer(embedScript("arg"), MINILM, SENTENCES);
  assertGolden(got, "absolute path");
  // device "auto" (the default) says why it took the CPU; "cpu" asked for has nothing to explain.
  assert.equal(got.deviceReason, "Node.js has no WebGPU");
  const cpu = await inConsumer(embedScript("arg", '{ device: "cpu" }'), MINILM, SENTENCES);
  assert.equal(cpu.deviceReason, null);
});

test("a relative path (./ or ../), against the working directory", async () => {
  const rel = path.relative(consumer, MINILM);
  assert.match(rel, /^\.\.\//);
  assertGolden(await inConsumer(embedScript("arg"), rel, SENTENCES), "relative path");
});

test("a file: URL, as a string and as a URL object", async () => {
  const url = pathToFileURL(MINILM).href;
  assertGolden(await inConsumer(embedScript("arg"), url, SENTENCES), "file: URL string");
  assertGolden(await inConsumer(embedScript("new URL(arg)"), url, SENTENCES), "URL object");
});

test("bytes read by the caller ({ config, tokenizer, weights })", async () => {
  const source = `{ config: await fs.readFile(arg + "/config.json"), tokenizer: await fs.readFile(arg + "/tokenizer.json"),
    weights: await fs.readFile(arg + "/model.safetensors") }`;
  assertGolden(await inConsumer(embedScript(source), MINILM, SENTENCES), "bytes");
});

test("a .gguf file path (converted by the CLI)", async () => {
  assertGolden(await inConsumer(embedScript("arg"), gguf, SENTENCES), ".gguf path");
});

test("an http URL, downloaded with Node's fetch (no Cache API in Node)", async () => {
  const server = await serve(MODELS);
  try {
    const got = await inConsumer(embedScript("arg", "{ onProgress: (p) => p.file }"), `${server.url}all-MiniLM-L6-v2/`, SENTENCES);
    assertGolden(got, "http URL");
    assert.ok(server.requests.includes("/all-MiniLM-L6-v2/model.safetensors"));
  } finally {
    await server.close();
  }
});

test("cacheDir keeps downloads on disk: the second load works with the server stopped", async () => {
  const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-cache-"));
  const server = await serve(MODELS);
  const url = `${server.url}all-MiniLM-L6-v2/`;
  const options = "{ cacheDir: process.argv[3], onProgress: (p) => events.push(p) }";
  try {
    const first = await inConsumer(embedScript("arg", options), url, SENTENCES, cacheDir);
    assert.ok(first.events.every((e) => !e.cached));
    await server.close();
    const second = await inConsumer(embedScript("arg", options), url, SENTENCES, cacheDir);
    assertGolden(second, "from cacheDir");
    const files = new Set(second.events.map((e) => e.file));
    // sentence-transformers' files of the folder too (its Pooling module's config; its Normalize has none).
    assert.deepEqual([...files].sort(), ["1_Pooling/config.json", "config.json", "config_sentence_transformers.json",
      "model.safetensors", "modules.json", "sentence_bert_config.json", "tokenizer.json", "tokenizer_config.json"]);
    assert.ok(second.events.every((e) => e.cached), "every file came from cacheDir");
    // Without cacheDir Node keeps nothing: the same load now fails.
    await assert.rejects(inConsumer(embedScript("arg"), url, SENTENCES), /could not download/);
  } finally {
    await server.close();
    fs.rmSync(cacheDir, { recursive: true, force: true });
  }
});

test("the wasm handed over by the caller: its bytes, or a compiled WebAssembly.Module", async () => {
  // The package's own file, read as the user of a bundle or an extension would read theirs.
  const wasm = path.join(consumer, "node_modules/bertgpu/wasm/bertgpu_bg.wasm");
  const bytes = await inConsumer(embedScript("arg", "{ wasm: await fs.readFile(process.argv[3]) }"), MINILM, SENTENCES, wasm);
  assertGolden(bytes, "wasm bytes");
  assert.equal(bytes.simd, "simd128", "one wasm value is the SIMD128 build");
  const module = await inConsumer(embedScript("arg",
    "{ wasm: { simd128: await WebAssembly.compile(await fs.readFile(process.argv[3])) }, simd: \"simd128\" }"),
  MINILM, SENTENCES, wasm);
  assertGolden(module, "WebAssembly.Module");
});

test("bad sources and options give clear errors", async () => {
  const got = await inConsumer(`
    import { Bert } from "bertgpu";
    const errors = {};
    const attempt = async (name, fn) => { try { await fn(); errors[name] = "no error"; } catch (e) { errors[name] = e.message; } };
    const [model, dir] = [process.argv[1], process.argv[2]];
    // The wasm first: a build started once (by a load that worked) serves later loads, which ignore \`wasm\`.
    await attempt("wasmType", () => Bert.load(model, { wasm: 42 }));
    await attempt("wasmMissing", () => Bert.load(model, { wasm: dir + "/none.wasm" }));
    await attempt("wasmBuild", () => Bert.load(model, { wasm: { simd128: dir + "/none.wasm" }, simd: "relaxed" }));
    await attempt("missing", () => Bert.load(dir + "/no-such-model"));
    await attempt("file", () => Bert.load(model + "/model.safetensors"));
    await attempt("noConfig", () => Bert.load(dir));
    await attempt("webgpu", () => Bert.load(model, { device: "webgpu" }));
    await attempt("cacheDir", () => Bert.load(model, { cacheDir: 7 }));
    const worker = await import("bertgpu/worker");
    await attempt("worker", () => worker.Bert.load(model));
    console.log(JSON.stringify(errors));
  `, MINILM, consumer);
  assert.match(got.missing, /there is no folder .*no-such-model/);
  assert.match(got.file, /model\.safetensors is a file, not a folder; give the folder that holds config\.json/);
  assert.match(got.noConfig, /config\.json does not exist; is config\.json in that folder\?/);
  assert.match(got.webgpu, /Node\.js has no WebGPU; use device: "cpu" or "auto"/);
  assert.match(got.cacheDir, /cacheDir must be the path of a folder/);
  assert.match(got.wasmType, /wasm must be a URL \(string or URL\), the module's bytes/);
  assert.match(got.wasmMissing, /cannot read the wasm module .*none\.wasm/);
  // The relaxed build is not in Node 20's V8 (it needs a flag there); on Node 22+ the object lacks it.
  assert.match(got.wasmBuild, /relaxed SIMD|gives no relaxed build/);
  assert.match(got.worker, /no Web Workers .*import \{ Bert \} from "bertgpu" instead/);
});

test("a bare name read as a repo id says how to load the local folder of that name instead", async () => {
  const got = await inConsumer(`
    import { Bert } from "bertgpu";
    process.chdir(process.argv[1]);
    try { await Bert.load("all-MiniLM-L6-v2", { cache: false }); console.log(JSON.stringify("no error")); }
    catch (e) { console.log(JSON.stringify(e.message)); }
  `, MODELS);
  assert.match(got, /huggingface\.co.*write "\.\/all-MiniLM-L6-v2"/s);
});

// The wasm CPU backend against the native one, step for step, from the same seed (the same rows, dropout masks and
// AdamW updates; only the summation order of the kernels differs): the worst of the 6 steps measured 4.1e-7 relative
// (`node --test --test-name-pattern="fineTune in Node" tests/node/` prints it); about 5× that.
const LOSS_VS_CLI_RTOL = 2e-6;

test("fineTune in Node.js: a token classifier trained from a folder path, its exported folder written and loaded back", async () => {
  const examples = [
    { tokens: ["Alice", "lives", "in", "Paris"], tags: ["B-PER", "O", "O", "B-LOC"] },
    { tokens: ["Bob", "visited", "Berlin", "today"], tags: ["B-PER", "O", "B-LOC", "O"] },
    { tokens: ["Paris", "is", "big"], tags: ["B-LOC", "O", "O"] },
    { tokens: ["Carol", "met", "Bob"], tags: ["B-PER", "O", "B-PER"] },
  ];
  const got = await inConsumer(`
    import { Bert } from "bertgpu";
    import fs from "node:fs/promises";
    import os from "node:os";
    import path from "node:path";
    const bert = await Bert.load(process.argv[1]);
    const examples = JSON.parse(process.argv[2]);
    const steps = [];
    const report = await bert.fineTune(examples, { task: "ner", epochs: 3, batchSize: 2, learningRate: 1e-3,
      validationSplit: 0.25, onProgress: (p) => p.type === "step" && steps.push(p.loss) });
    const tuned = await bert.tokenClassify("Alice visited Berlin");
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), "bertgpu-tuned-"));
    for (const [name, bytes] of Object.entries(await bert.exportModel())) await fs.writeFile(path.join(dir, name), bytes);
    const back = await Bert.load(dir);
    const reloaded = await back.tokenClassify("Alice visited Berlin");
    const config = JSON.parse(await fs.readFile(path.join(dir, "config.json"), "utf8"));
    await fs.rm(dir, { recursive: true });
    console.log(JSON.stringify({ report, steps, tuned, reloaded, architectures: config.architectures }));
  `, path.join(ROOT, "tests/models/tiny-ner"), JSON.stringify(examples));
  // 3 training examples in batches of 2: 2 steps an epoch, 3 epochs.
  assert.equal(got.steps.length, 6);
  assert.ok(got.steps.every(Number.isFinite));
  assert.deepEqual(got.report.steps.map((s) => s.loss), got.steps);
  // The CLI's fine-tune with the same options and seed (both default to seed 0 and dropout on) takes the same steps:
  // a zeroed gradient, another shuffle or another schedule in either would part them by far more.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-node-vs-cli-"));
  try {
    const data = path.join(dir, "ner.jsonl");
    fs.writeFileSync(data, examples.map((e) => `${JSON.stringify(e)}\n`).join(""));
    const { stderr } = await run(cli, ["fine-tune", "--task", "ner", "--model", path.join(ROOT, "tests/models/tiny-ner"),
      "--data", data, "--out", path.join(dir, "out"), "--epochs", "3", "--batch-size", "2", "--lr", "1e-3",
      "--validation-split", "0.25", "--seed", "0", "--device", "cpu"], { timeout: 120_000 });
    const native = stderr.split("\n").filter((l) => l.startsWith("{") && l.includes('"step"')).map((l) => JSON.parse(l).loss);
    assert.equal(native.length, got.steps.length, stderr);
    let worst = 0;
    got.steps.forEach((loss, i) => {
      const rel = Math.abs(loss - native[i]) / Math.abs(native[i]);
      worst = Math.max(worst, rel);
      assert.ok(rel <= LOSS_VS_CLI_RTOL, `step ${i + 1}: Node ${loss}, the CLI ${native[i]}`);
    });
    console.log(`fineTune in Node against the CLI: worst step-loss difference ${worst.toExponential(2)} (relative)`);
    assert.ok(native[0] - native[5] > 100 * LOSS_VS_CLI_RTOL * native[0], "training moved the loss far beyond the bound");
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  assert.equal(got.report.epochs.length, 3);
  assert.deepEqual(got.architectures, ["BertForTokenClassification"]);
  assert.ok(got.tuned.length > 0, "the tuned model tags tokens");
  assert.deepEqual(got.reloaded, got.tuned, "the exported folder is the fine-tuned model");
});

// Node against the CLI for these runs, step for step (as LOSS_VS_CLI_RTOL's): measured worst 1.05e-6 relative
// (DistilBERT, whose pre_classifier's ReLU and 6 steps at lr 2e-3 carry the roundings further), 9.2e-7 (RoBERTa with
// LoRA), and 1.9e-8 / 5.7e-8 / 1.1e-6 / 1.9e-7 (RoBERTa / ALBERT / MPNet / JinaBERT) for the pre-training runs below;
// 5e-6 is about 5× the worst, while a wrong gradient or another row order parts the losses by 1e-3 or more.
const FAMILY_LOSS_VS_CLI_RTOL = 5e-6;

// BERT's relatives train in Node as the CLI trains them (tests/finetune_families.rs holds the native side to PyTorch):
// DistilBERT in full and RoBERTa with LoRA, step for step against `bertgpu fine-tune` with the same options and seed,
// each exported as its own family's class (the adapter under RoBERTa's module names) and loaded back.
test("fineTune in Node.js trains DistilBERT and RoBERTa (LoRA) as the CLI does, exported as each family's own class", async () => {
  const examples = [];
  for (let i = 0; i < 6; i++) {
    examples.push({ text: `the cat ${i} sat on the mat`, label: "animal" });
    examples.push({ text: `my car ${i} drove down the road`, label: "vehicle" });
  }
  const cases = [
    { dir: "tiny-distilbert-classifier", arch: "DistilBertForSequenceClassification", lora: null, cli: [] },
    { dir: "tiny-roberta-classifier", arch: "RobertaForSequenceClassification", lora: { r: 2 }, cli: ["--lora", "2", "--merge"] },
  ];
  for (const c of cases) {
    const got = await inConsumer(`
      import { Bert } from "bertgpu";
      import fs from "node:fs/promises";
      import os from "node:os";
      import path from "node:path";
      const bert = await Bert.load(process.argv[1]);
      const examples = JSON.parse(process.argv[2]);
      const lora = JSON.parse(process.argv[3]);
      const steps = [];
      await bert.fineTune(examples, { task: "classify", epochs: 2, batchSize: 4, learningRate: 2e-3, validationSplit: 0,
        ...(lora ? { lora } : {}), onProgress: (p) => p.type === "step" && steps.push(p.loss) });
      const text = ["the cat 9 sat on the mat", "my car 9 drove down the road"];
      const tuned = await bert.classify(text);
      const files = await bert.exportModel();
      const config = JSON.parse(new TextDecoder().decode(files["config.json"]));
      const dir = await fs.mkdtemp(path.join(os.tmpdir(), "bertgpu-tuned-"));
      for (const [name, bytes] of Object.entries(files)) await fs.writeFile(path.join(dir, name), bytes);
      const back = await Bert.load(dir);
      const reloaded = await back.classify(text);
      await fs.rm(dir, { recursive: true });
      let adapter = null;
      if (lora) {
        const a = await bert.exportModel({ format: "adapter" });
        const bytes = a["adapter_model.safetensors"];
        const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
        const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
        adapter = { config: JSON.parse(new TextDecoder().decode(a["adapter_config.json"])),
          tensors: Object.keys(header).filter((k) => k !== "__metadata__") };
      }
      console.log(JSON.stringify({ steps, tuned, reloaded, architectures: config.architectures, adapter }));
    `, path.join(ROOT, "tests/models", c.dir), JSON.stringify(examples), JSON.stringify(c.lora));
    assert.equal(got.steps.length, 6, c.dir); // 12 examples in batches of 4, 2 epochs
    assert.ok(got.steps.every(Number.isFinite), c.dir);
    assert.deepEqual(got.architectures, [c.arch], c.dir);
    assert.deepEqual(got.reloaded, got.tuned, `${c.dir}: the exported folder is the fine-tuned model`);
    if (c.lora) {
      // LoRA's A and B on RoBERTa's query and value of each layer, and the trained head (RoBERTa's own
      // classifier.dense / classifier.out_proj), all under peft's base_model.model.
      const lora = got.adapter.tensors.filter((k) => k.includes(".lora_"));
      assert.equal(lora.length, 2 * 2 * 2, `${c.dir}: ${got.adapter.tensors}`); // 2 layers × query, value × A, B
      for (const k of lora) {
        assert.match(k, /^base_model\.model\.roberta\.encoder\.layer\.\d+\.attention\.self\.(query|value)\.lora_[AB]\.weight$/, `${c.dir}: ${k}`);
      }
      for (const k of got.adapter.tensors.filter((k) => !k.includes(".lora_"))) {
        assert.match(k, /^base_model\.model\.classifier\.(dense|out_proj)\.(weight|bias)$/, `${c.dir}: ${k}`);
      }
    }
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-node-family-"));
    try {
      const data = path.join(dir, "train.jsonl");
      fs.writeFileSync(data, examples.map((e) => `${JSON.stringify(e)}\n`).join(""));
      const { stderr } = await run(cli, ["fine-tune", "--task", "classify", "--model", path.join(ROOT, "tests/models", c.dir),
        "--data", data, "--out", path.join(dir, "out"), "--epochs", "2", "--batch-size", "4", "--lr", "2e-3",
        "--validation-split", "0", "--seed", "0", "--device", "cpu", ...c.cli], { timeout: 120_000 });
      const native = stderr.split("\n").filter((l) => l.startsWith("{") && l.includes('"step"')).map((l) => JSON.parse(l).loss);
      assert.equal(native.length, got.steps.length, stderr);
      let worst = 0;
      got.steps.forEach((loss, i) => {
        const rel = Math.abs(loss - native[i]) / Math.abs(native[i]);
        worst = Math.max(worst, rel);
        assert.ok(rel <= FAMILY_LOSS_VS_CLI_RTOL, `${c.dir} step ${i + 1}: Node ${loss}, the CLI ${native[i]}`);
      });
      console.log(`${c.dir}: fineTune in Node against the CLI: worst step-loss difference ${worst.toExponential(2)} (relative)`);
      assert.ok(Math.abs(native[0] - native[5]) > 100 * FAMILY_LOSS_VS_CLI_RTOL * native[0], `${c.dir}: training moved the loss`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
});

// Continued pre-training of BERT's relatives in Node (tests/pretrain_families.rs holds the native side to PyTorch):
// RoBERTa, ALBERT, MPNet and JinaBERT with their own masked-LM heads, the masked LM alone, step for step against `bertgpu
// pretrain` with the same corpus, options and seed (RoBERTa's with its dynamic masking), and the folder the family's
// own ...ForMaskedLM.
test("pretrain in Node.js continues RoBERTa, ALBERT, MPNet and JinaBERT with their own masked-LM head as the CLI does", async () => {
  const documents = fs.readFileSync(path.join(ROOT, "tests/data/fortunes-large/train.jsonl"), "utf8").trim().split("\n")
    .map((l) => JSON.parse(l).text.split(". ").map((s) => s.trim()).filter((s) => s !== ""))
    .filter((sentences) => sentences.length >= 2).slice(0, 12).map((sentences) => sentences.join("\n"));
  const corpus = documents.join("\n\n") + "\n";
  for (const [dir, arch] of [["tiny-roberta-mlm", "RobertaForMaskedLM"], ["tiny-albert-mlm", "AlbertForMaskedLM"],
    ["tiny-mpnet-mlm", "MPNetForMaskedLM"], ["tiny-jina-mlm", "JinaBertForMaskedLM"]]) {
    const dynamic = dir.includes("roberta");
    const got = await inConsumer(`
      import { Bert } from "bertgpu";
      const bert = await Bert.load(process.argv[1]);
      const steps = [];
      await bert.pretrain(process.argv[2], { steps: 6, batchSize: 4, maxLength: 32, learningRate: 2e-3, warmup: 0,
        seed: 3, validationSplit: 0, dynamicMasking: process.argv[3] === "dynamic",
        onProgress: (p) => p.type === "step" && steps.push(p) });
      const files = await bert.exportModel();
      const config = JSON.parse(new TextDecoder().decode(files["config.json"]));
      console.log(JSON.stringify({ steps, architectures: config.architectures }));
    `, path.join(ROOT, "tests/models", dir), corpus, dynamic ? "dynamic" : "static");
    assert.deepEqual(got.architectures, [arch], dir);
    assert.equal(got.steps.length, 6, dir);
    for (const s of got.steps) {
      assert.equal(s.nspLoss, null, `${dir}: the masked LM alone`);
      assert.equal(s.loss, s.mlmLoss, dir);
    }
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-node-pretrain-"));
    try {
      const data = path.join(tmp, "corpus.txt");
      fs.writeFileSync(data, corpus);
      const { stderr } = await run(cli, ["pretrain", "--model", path.join(ROOT, "tests/models", dir), "--data", data,
        "--out", path.join(tmp, "out"), "--steps", "6", "--batch-size", "4", "--max-length", "32", "--lr", "2e-3",
        "--warmup", "0", "--seed", "3", "--validation-split", "0", "--device", "cpu",
        ...(dynamic ? ["--dynamic-masking"] : [])], { timeout: 120_000 });
      const native = stderr.split("\n").filter((l) => l.startsWith("{") && l.includes('"step"')).map((l) => JSON.parse(l).loss);
      assert.equal(native.length, got.steps.length, stderr);
      let worst = 0;
      got.steps.forEach((s, i) => {
        const rel = Math.abs(s.loss - native[i]) / Math.abs(native[i]);
        worst = Math.max(worst, rel);
        assert.ok(rel <= FAMILY_LOSS_VS_CLI_RTOL, `${dir} step ${i + 1}: Node ${s.loss}, the CLI ${native[i]}`);
      });
      console.log(`${dir}: pretrain in Node against the CLI: worst step-loss difference ${worst.toExponential(2)} (relative)`);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  }
});

// Question answering trains on DeBERTa and ModernBERT as on BERT (their padded positions, which QA's loss reads, as
// transformers computes them: tests/finetune_families.rs), and the exported folder is their *ForQuestionAnswering.
test("fineTune trains question answering on DeBERTa and ModernBERT", async () => {
  const got = await inConsumer(`
    import { Bert } from "bertgpu";
    const out = [];
    const squad = [{ question: "who came?", context: "john and paul came.", answers: { text: ["john"], answer_start: [0] } },
      { question: "what is it?", context: "it is a cat.", answers: { text: ["cat"], answer_start: [8] } }];
    for (const dir of ["tiny-deberta-qa", "tiny-modernbert-qa"]) {
      const bert = await Bert.load(process.argv[1] + "/" + dir);
      const steps = [];
      await bert.fineTune(squad, { task: "qa", epochs: 1, docStride: 16, batchSize: 2, validationSplit: 0,
        onProgress: (p) => p.type === "step" && steps.push(p.loss) });
      const config = JSON.parse(new TextDecoder().decode((await bert.exportModel())["config.json"]));
      out.push({ dir, steps, architectures: config.architectures });
      bert.dispose();
    }
    console.log(JSON.stringify(out));
  `, path.join(ROOT, "tests/models"));
  assert.deepEqual(got.map((r) => r.architectures), [["DebertaV2ForQuestionAnswering"], ["ModernBertForQuestionAnswering"]]);
  got.forEach((r) => assert.ok(r.steps.length === 1 && r.steps.every(Number.isFinite), `${r.dir}: ${r.steps}`));
});

// What still cannot train is refused by name before any work: pre-training an ELECTRA discriminator (its
// replaced-token detection needs a generator beside it; a generator pre-trains).
test("fineTune and pretrain refuse what cannot train yet, naming it, and leave the model as it was", async () => {
  const got = await inConsumer(`
    import { Bert } from "bertgpu";
    const out = [];
    for (const [dir, call] of [["tiny-electra-discriminator", (b) => b.pretrain("one sentence.\\nanother one.\\n\\na second document.\\nwith two lines.", { steps: 1 })]]) {
      const bert = await Bert.load(process.argv[1] + "/" + dir);
      const weights = async () => Buffer.from((await bert.exportModel())["model.safetensors"]);
      const before = await weights();
      try {
        await call(bert);
        out.push({ dir, error: null });
      } catch (e) {
        out.push({ dir, error: String(e.message ?? e), same: (await weights()).equals(before) });
      }
      bert.dispose();
    }
    console.log(JSON.stringify(out));
  `, path.join(ROOT, "tests/models"));
  assert.equal(got.length, 1);
  const why = ["ELECTRA discriminator (ElectraForPreTraining) is not supported"];
  got.forEach((r, i) => {
    assert.ok(r.error && r.error.includes(why[i]), `${r.dir}: ${r.error}`);
    assert.equal(r.same, true, `${r.dir}: the model is left as it was`);
  });
});
