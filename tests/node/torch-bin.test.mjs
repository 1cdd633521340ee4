// A folder whose weights are only pytorch_model.bin (torch.save's pickle, read as data by the module: never run) in
// Node.js through the packed package: tests/models/tiny-classifier-bin (tests/golden/torch_bin.py: tiny-classifier's
// tensors written by torch.save) from its path and over http, where model.safetensors answers 404 first, gives
// PyTorch's logits (tests/golden/torch_bin.json) and the very vectors of the same model's model.safetensors; so do
// its shards (pytorch_model.bin.index.json) and a sentence-transformers Dense module in pytorch_model.bin; its pin
// and maxBytes hold as model.safetensors' do; and a hostile pytorch_model.bin (a pickle calling os.system or
// builtins.eval, a truncated archive) is a clear error, after which the models already loaded and new loads work.
// Run: node --test tests/node/torch-bin.test.mjs
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { serve } from "../../www/serve.mjs";
import { ROOT, MODELS as REAL_MODELS, consumerProject } from "./package.mjs";

// PyTorch's logits against ours, as tests/torch_bin.rs checks them natively (2.5e-5; both f32); the softmax scores
// are within the same.
const ATOL = 2.5e-5;

const MODELS = path.join(ROOT, "tests/models");
const BIN = path.join(MODELS, "tiny-classifier-bin");
const HOSTILE = path.join(ROOT, "tests/data/torch_bin/hostile");
const golden = JSON.parse(fs.readFileSync(path.join(ROOT, "tests/golden/torch_bin.json"), "utf8")).classifier;
const TEXTS = JSON.stringify(golden.texts);
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

/** Loads argv[1] with the options JSON argv[3]; the mean vectors and the class scores of argv[2]'s texts. */
const SCRIPT = `
  import { Bert } from "bertgpu";
  const [source, texts, options] = process.argv.slice(1);
  try {
    const bert = await Bert.load(source, { device: "cpu", ...JSON.parse(options) });
    const mean = (await bert.embed(JSON.parse(texts), { pooling: "mean", normalize: false })).map((v) => Array.from(v));
    const scores = [];
    for (const t of JSON.parse(texts)) scores.push(await bert.classify(t, { topK: 3 }));
    const exported = await bert.exportModel().then((f) => Object.keys(f).sort(), (e) => e.message);
    console.log(JSON.stringify({ mean, scores, exported }));
    bert.dispose();
  } catch (e) {
    console.log(JSON.stringify({ error: e.message }));
  }
`;

/** PyTorch's logits as the classifier's scores (softmax), by label. */
function goldenScores() {
  const labels = ["negative", "neutral", "positive"];
  return golden.logits.map((l) => {
    const m = Math.max(...l);
    const e = l.map((x) => Math.exp(x - m));
    const sum = e.reduce((a, b) => a + b, 0);
    return Object.fromEntries(labels.map((label, i) => [label, e[i] / sum]));
  });
}

function assertPytorch(got, what) {
  assert.equal(got.error, undefined, `${what}: ${got.error}`);
  const want = goldenScores();
  got.scores.forEach((s, i) => {
    assert.equal(s.length, 3, `${what}: three labels`);
    for (const { label, score } of s) {
      assert.ok(Math.abs(score - want[i][label]) <= ATOL, `${what}: text ${i} ${label} ${score}, PyTorch ${want[i][label]}`);
    }
  });
}

let reference;
async function safetensorsTwin() {
  reference ??= await inConsumer(SCRIPT, path.join(MODELS, "tiny-classifier"), TEXTS, "{}");
  assert.equal(reference.error, undefined, reference.error);
  return reference;
}

/** A fresh copy of the .bin folder, changed by `edit`. */
function copyOf(from, edit) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-torch-bin-"));
  for (const f of fs.readdirSync(from)) fs.copyFileSync(path.join(from, f), path.join(dir, f));
  edit(dir);
  process.on("exit", () => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test("a pytorch_model.bin folder gives PyTorch's outputs and its safetensors twin's vectors, by path and over http", async () => {
  const twin = await safetensorsTwin();
  const byPath = await inConsumer(SCRIPT, BIN, TEXTS, "{}");
  assertPytorch(byPath, "folder path");
  assert.deepEqual(byPath.mean, twin.mean, "the same tensors: the same vectors");
  assert.deepEqual(byPath.exported, ["config.json", "pytorch_model.bin", "tokenizer.json", "tokenizer_config.json"],
    "exportModel gives the file back under its own name");
  const sharded = await inConsumer(SCRIPT, path.join(MODELS, "tiny-classifier-bin-sharded"), TEXTS, "{}");
  assert.equal(sharded.error, undefined, sharded.error);
  assert.deepEqual(sharded.mean, twin.mean, "pytorch_model.bin.index.json and its shards");
  const server = await serve(MODELS);
  try {
    const overHttp = await inConsumer(SCRIPT, `${server.url}tiny-classifier-bin/`, TEXTS, "{}");
    assert.deepEqual(overHttp.mean, twin.mean, `over http: ${overHttp.error}`);
    const asked = server.requests.filter((r) => r.startsWith("/tiny-classifier-bin/"));
    const at = (f) => asked.indexOf(`/tiny-classifier-bin/${f}`);
    assert.ok(at("model.safetensors") >= 0 && at("model.safetensors") < at("pytorch_model.bin"),
      `model.safetensors is asked for first: ${asked.join(", ")}`);
    const shards = await inConsumer(SCRIPT, `${server.url}tiny-classifier-bin-sharded/`, TEXTS, "{}");
    assert.deepEqual(shards.mean, twin.mean, `shards over http: ${shards.error}`);
    assert.ok(server.requests.includes("/tiny-classifier-bin-sharded/pytorch_model-00004-of-00004.bin"));
    // Where both are there, pytorch_model.bin is never fetched.
    const before = server.requests.length;
    const st = await inConsumer(SCRIPT, `${server.url}tiny-classifier/`, TEXTS, "{}");
    assert.deepEqual(st.mean, twin.mean);
    assert.ok(!server.requests.slice(before).some((r) => r.endsWith("pytorch_model.bin")), "no .bin asked for");
  } finally {
    await server.close();
  }
});

test("pytorch_model.bin's sha256 pin and maxBytes hold as model.safetensors' do", async () => {
  const bytes = fs.readFileSync(path.join(BIN, "pytorch_model.bin"));
  const sha = crypto.createHash("sha256").update(bytes).digest("hex");
  const pinned = await inConsumer(SCRIPT, BIN, TEXTS, JSON.stringify({ sha256: { "pytorch_model.bin": sha } }));
  assert.deepEqual(pinned.mean, (await safetensorsTwin()).mean, `pinned: ${pinned.error}`);
  const wrong = await inConsumer(SCRIPT, BIN, TEXTS, JSON.stringify({ sha256: { "pytorch_model.bin": "0".repeat(64) } }));
  assert.match(wrong.error ?? "loaded", /^Bert\.load: pytorch_model\.bin from .* has SHA-256 [0-9a-f]{64}, but 0{64} was pinned/);
  // A pin on pytorch_model.bin says the folder must have it: a folder with model.safetensors instead is refused.
  const elsewhere = await inConsumer(SCRIPT, path.join(MODELS, "tiny-classifier"), TEXTS,
    JSON.stringify({ sha256: { "pytorch_model.bin": sha } }));
  assert.match(elsewhere.error ?? "loaded", /pytorch_model\.bin/);
  const big = await inConsumer(SCRIPT, BIN, TEXTS, JSON.stringify({ maxBytes: 100_000 }));
  assert.match(big.error ?? "loaded", new RegExp(`^Bert\\.load: pytorch_model\\.bin is ${bytes.length} bytes, over the `
    + "maxBytes limit of 100000 bytes"));
});

test("a sentence-transformers Dense module in pytorch_model.bin embeds as in model.safetensors", async () => {
  const base = path.join(REAL_MODELS, "all-MiniLM-L6-v2");
  const stack = (dense) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-st-bin-"));
    for (const f of fs.readdirSync(base)) {
      const p = path.join(base, f);
      if (fs.statSync(p).isFile() && !["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"].includes(f)) {
        fs.symlinkSync(p, path.join(dir, f));
      }
    }
    fs.cpSync(path.join(MODELS, "st-stacks/mean-dense-normalize"), dir, { recursive: true });
    dense(path.join(dir, "2_Dense"));
    process.on("exit", () => fs.rmSync(dir, { recursive: true, force: true }));
    return dir;
  };
  const EMBED = `
    import { Bert } from "bertgpu";
    const bert = await Bert.load(process.argv[1], { device: "cpu" }).catch((e) => e);
    if (bert instanceof Error) {
      console.log(JSON.stringify({ error: bert.message }));
    } else {
      console.log(JSON.stringify({ v: Array.from((await bert.embed(["a dense module in pytorch_model.bin"]))[0]) }));
    }
  `;
  const st = await inConsumer(EMBED, stack(() => {}));
  const bin = await inConsumer(EMBED, stack((d) => {
    fs.rmSync(path.join(d, "model.safetensors"));
    fs.copyFileSync(path.join(ROOT, "tests/data/torch_bin/dense.bin"), path.join(d, "pytorch_model.bin"));
  }));
  assert.equal(bin.error, undefined, bin.error);
  assert.deepEqual(bin.v, st.v);
  const hostile = await inConsumer(EMBED, stack((d) => {
    fs.rmSync(path.join(d, "model.safetensors"));
    fs.copyFileSync(path.join(HOSTILE, "os_system.bin"), path.join(d, "pytorch_model.bin"));
  }));
  assert.match(hostile.error ?? "loaded", /2_Dense\/pytorch_model\.bin: its pickle names `os\.system`/);
});

/** One process: a model loaded, then each hostile folder refused, then the first model and a new load still work. */
const HOSTILE_SCRIPT = `
  import { Bert } from "bertgpu";
  const [good, texts, ...bad] = process.argv.slice(1);
  const first = await Bert.load(good, { device: "cpu" });
  const before = Array.from((await first.embed(JSON.parse(texts)))[0]);
  const errors = [];
  for (const b of bad) {
    errors.push(await Bert.load(b, { device: "cpu" }).then((m) => { m.dispose(); return "loaded"; }, (e) => e.message));
  }
  const after = Array.from((await first.embed(JSON.parse(texts)))[0]);
  const again = await Bert.load(good, { device: "cpu" });
  const fresh = Array.from((await again.embed(JSON.parse(texts)))[0]);
  console.log(JSON.stringify({ errors, same: JSON.stringify(before) === JSON.stringify(after)
    && JSON.stringify(before) === JSON.stringify(fresh) }));
`;

test("a hostile pytorch_model.bin is a clear error, and the models stay usable", async () => {
  const cases = [
    ["os_system.bin", /^invalid weights: pytorch_model\.bin: its pickle names `os\.system`, which is not part of a PyTorch state dict: refused/],
    ["builtins_eval.bin", /its pickle names `builtins\.eval`/],
    ["legacy_os_system.bin", /its pickle names `posix\.system`/],
    ["truncated.bin", /pytorch_model\.bin: its zip archive cannot be read/],
    ["short_storage.bin", /the storage is shorter than the tensor claims/],
    ["huge_dim.bin", /has shape \[1099511627776, 1099511627776\]: more elements than any memory holds/],
    ["deep.bin", /more than 100000 values and marks on its stack/],
  ];
  const dirs = cases.map(([file]) => copyOf(BIN, (d) => fs.copyFileSync(path.join(HOSTILE, file), path.join(d, "pytorch_model.bin"))));
  // A pytorch_model.bin that is no checkpoint at all, named; and a folder with no weights: every name looked for.
  dirs.push(copyOf(BIN, (d) => fs.writeFileSync(path.join(d, "pytorch_model.bin"), "{\"not\": \"a checkpoint\"}")));
  dirs.push(copyOf(BIN, (d) => fs.rmSync(path.join(d, "pytorch_model.bin"))));
  const got = await inConsumer(HOSTILE_SCRIPT, BIN, TEXTS, ...dirs);
  cases.forEach(([file, want], i) => assert.match(got.errors[i], want, file));
  assert.match(got.errors[cases.length], /^Bert\.load: pytorch_model\.bin is not a PyTorch checkpoint/);
  assert.match(got.errors[cases.length + 1], /has no weights: none of model\.safetensors, model\.safetensors\.index\.json, pytorch_model\.bin or pytorch_model\.bin\.index\.json/);
  assert.ok(got.same, "the loaded model, and a new load, give the same vectors as before");
  assert.ok(!fs.existsSync("/tmp/pwned"), "nothing ran");
});
