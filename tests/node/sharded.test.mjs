// A checkpoint saved in shards (model.safetensors.index.json and the files its weight_map names), and CamemBERT, in
// Node.js through the packed package: tests/models/tiny-camembert-sharded (tests/golden/camembert.py: the tiny
// CamembertForMaskedLM saved by save_pretrained(max_shard_size=20KB) in six shards) loaded from its folder path and
// over http gives transformers' mean-pooled vectors (tests/golden/camembert.json); a shard the folder lacks, a shard
// whose bytes fail their sha256 pin and a tensor in two shards are each refused by name, and so is a folder whose
// only pytorch_model.bin is no checkpoint (tests/node/torch-bin.test.mjs loads real ones).
// Run: node --test tests/node/sharded.test.mjs
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { serve } from "../../www/serve.mjs";
import { ROOT, consumerProject } from "./package.mjs";

// Per-value agreement with PyTorch's unnormalised mean-pooled vectors: the CPU backend's, as tests/camembert.rs
// measures it natively (worst 8.3e-7 for these vectors); measured here 7.2e-7 (printed). 5e-6 is ~7× that.
const ATOL_MEAN = 5e-6;

const MODELS = path.join(ROOT, "tests/models");
const SHARDED = path.join(MODELS, "tiny-camembert-sharded");
const golden = JSON.parse(fs.readFileSync(path.join(ROOT, "tests/golden/camembert.json"), "utf8")).camembert;
const TEXTS = JSON.stringify(golden.embeddings.map((e) => e.text));
const run = promisify(execFile);

let consumer;
before(() => {
  consumer = consumerProject();
});

/** Runs an ES module in the consumer project; resolves to the JSON of its last stdout line. */
async function inConsumer(code, ...args) {
  let out;
  try {
    out = await run(process.execPath, ["--input-type=module", "-e", code, ...args], { cwd: consumer, timeout: 120_000 });
  } catch (e) {
    throw new Error(`the consumer script failed:\n${e.stdout}\n${e.stderr}`);
  }
  return JSON.parse(out.stdout.trim().split("\n").pop());
}

/** Loads process.argv[1] with the options JSON process.argv[3]; embeds argv[2]'s texts, or reports the error. */
const SCRIPT = `
  import { Bert } from "bertgpu";
  const [source, texts, options] = process.argv.slice(1);
  try {
    const bert = await Bert.load(source, { device: "cpu", ...JSON.parse(options) });
    const mean = (await bert.embed(JSON.parse(texts), { pooling: "mean", normalize: false })).map((v) => Array.from(v));
    console.log(JSON.stringify({ mean }));
    bert.dispose();
  } catch (e) {
    console.log(JSON.stringify({ error: e.message }));
  }
`;

function assertGolden(got, what) {
  assert.equal(got.error, undefined, `${what}: ${got.error}`);
  assert.equal(got.mean.length, golden.embeddings.length, `${what}: one vector per text`);
  let max = 0;
  got.mean.forEach((v, i) => {
    const want = golden.embeddings[i].mean;
    assert.equal(v.length, want.length, `${what}: [${i}] length`);
    v.forEach((x, j) => {
      assert.ok(Math.abs(x - want[j]) <= ATOL_MEAN, `${what}: [${i}][${j}] = ${x}, PyTorch ${want[j]}`);
      max = Math.max(max, Math.abs(x - want[j]));
    });
  });
  console.log(`measured ${what}: max |ours - PyTorch| ${max.toExponential(2)}`);
}

/** A copy of the sharded folder, changed by `edit`. */
function brokenCopy(edit) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-shards-"));
  for (const f of fs.readdirSync(SHARDED)) fs.copyFileSync(path.join(SHARDED, f), path.join(dir, f));
  edit(dir);
  return dir;
}

test("a sharded CamemBERT folder gives PyTorch's vectors, from its path and over http", async () => {
  assertGolden(await inConsumer(SCRIPT, SHARDED, TEXTS, "{}"), "folder path");
  // The unsharded twin, for comparison: the same numbers.
  assertGolden(await inConsumer(SCRIPT, path.join(MODELS, "tiny-camembert-mlm"), TEXTS, "{}"), "one file");
  const server = await serve(MODELS);
  try {
    assertGolden(await inConsumer(SCRIPT, `${server.url}tiny-camembert-sharded/`, TEXTS, "{}"), "http");
    assert.ok(server.requests.includes("/tiny-camembert-sharded/model.safetensors.index.json"));
    assert.ok(server.requests.includes("/tiny-camembert-sharded/model-00006-of-00006.safetensors"));
  } finally {
    await server.close();
  }
});

test("a missing shard, a shard failing its pin and a tensor in two shards are refused by name", async () => {
  const missing = brokenCopy((d) => fs.rmSync(path.join(d, "model-00003-of-00006.safetensors")));
  const got = await inConsumer(SCRIPT, missing, TEXTS, "{}");
  assert.match(got.error ?? "loaded", /model-00003-of-00006\.safetensors/);
  const twice = brokenCopy((d) => fs.copyFileSync(path.join(d, "model-00001-of-00006.safetensors"),
    path.join(d, "model-00002-of-00006.safetensors")));
  const two = await inConsumer(SCRIPT, twice, TEXTS, "{}");
  assert.match(two.error ?? "loaded",
    /is in two shards, model-00001-of-00006\.safetensors and model-00002-of-00006\.safetensors/);
  const server = await serve(MODELS);
  try {
    const url = `${server.url}tiny-camembert-sharded/`;
    const wrong = "0".repeat(64);
    const pinned = await inConsumer(SCRIPT, url, TEXTS, JSON.stringify({ sha256: { "model-00002-of-00006.safetensors": wrong } }));
    assert.match(pinned.error ?? "loaded", /model-00002-of-00006\.safetensors .*SHA-256/);
    const stranger = await inConsumer(SCRIPT, url, TEXTS, JSON.stringify({ sha256: { "model-00009-of-00009.safetensors": wrong } }));
    assert.match(stranger.error ?? "loaded", /sha256 names "model-00009-of-00009\.safetensors", which model\.safetensors\.index\.json does not name/);
  } finally {
    await server.close();
  }
  // Only a pytorch_model.bin that is no checkpoint: refused, naming it.
  const bin = brokenCopy((d) => {
    for (const f of fs.readdirSync(d)) if (f.includes("safetensors")) fs.rmSync(path.join(d, f));
    fs.writeFileSync(path.join(d, "pytorch_model.bin"), "PK not read");
  });
  const refused = await inConsumer(SCRIPT, bin, TEXTS, "{}");
  assert.match(refused.error ?? "loaded", /^Bert\.load: pytorch_model\.bin is not a PyTorch checkpoint/);
  for (const d of [missing, twice, bin]) fs.rmSync(d, { recursive: true, force: true });
});

/** Fine-tunes argv[1]'s model on a few labelled texts (CPU, seeded) and reports its exported files' names and a hash. */
const FINE_TUNE = `
  import { Bert } from "bertgpu";
  import { createHash } from "node:crypto";
  const bert = await Bert.load(process.argv[1], { device: "cpu" });
  const examples = [{ text: "a fine day", label: "positive" }, { text: "a bad day", label: "negative" },
    { text: "a day", label: "neutral" }, { text: "so good", label: "positive" }];
  try {
    const report = await bert.fineTune(examples, { task: "classify", epochs: 2, batchSize: 2, seed: 7 });
    const files = await bert.exportModel();
    const sha = createHash("sha256").update(files["model.safetensors"]).digest("hex");
    console.log(JSON.stringify({ loss: report.epochs.map((e) => e.trainLoss ?? e.train_loss), names: Object.keys(files).sort(), sha }));
  } catch (e) {
    console.log(JSON.stringify({ error: e.message }));
  }
  bert.dispose();
`;

test("a model loaded from shards fine-tunes to the same model as its one-file twin", async () => {
  const sharded = await inConsumer(FINE_TUNE, path.join(MODELS, "tiny-classifier-bin-sharded"));
  const one = await inConsumer(FINE_TUNE, path.join(MODELS, "tiny-classifier"));
  assert.equal(sharded.error, undefined, sharded.error);
  assert.equal(one.error, undefined, one.error);
  assert.ok(sharded.names.includes("model.safetensors") && !sharded.names.some((n) => n.endsWith(".bin")),
    `a trained model exports one model.safetensors: ${sharded.names}`);
  assert.equal(sharded.sha, one.sha, "the same tensors, the same seed: the same trained weights, bit for bit");
});

test("exportModel gives a sharded model's index and shards back as they came, or one .gguf of them", async () => {
  const got = await inConsumer(`
    import { Bert } from "bertgpu";
    const bert = await Bert.load(process.argv[1], { device: "cpu" });
    const files = await bert.exportModel();
    const gguf = (await bert.exportModel({ format: "gguf", dtype: "f32" }))["model.gguf"];
    bert.dispose();
    const back = await Bert.load({ gguf }, { device: "cpu" });
    const mean = (await back.embed(JSON.parse(process.argv[2]), { pooling: "mean", normalize: false })).map((v) => Array.from(v));
    const bytes = Object.fromEntries(Object.entries(files).map(([k, v]) => [k, Buffer.from(v).toString("base64")]));
    console.log(JSON.stringify({ bytes, mean }));
  `, SHARDED, TEXTS);
  const names = fs.readdirSync(SHARDED).filter((f) => f.includes("safetensors")).sort();
  assert.deepEqual(Object.keys(got.bytes).filter((f) => f.includes("safetensors")).sort(), names);
  for (const name of names) {
    assert.ok(Buffer.from(got.bytes[name], "base64").equals(fs.readFileSync(path.join(SHARDED, name))), `${name} as it came`);
  }
  assertGolden(got, "the .gguf exported from shards");
});
