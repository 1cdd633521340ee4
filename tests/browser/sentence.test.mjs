// sentence-transformers' modules in the browser: stacks of tests/models/st-stacks laid over the real
// all-MiniLM-L6-v2 (as tests/golden/sentence.py lays them), loaded from a folder URL (the loader fetches modules.json
// and each module's files) and as bytes, embedded with no options against `SentenceTransformer.encode`
// (tests/golden/sentence.json), with prompts and dimensions; on the wasm CPU backend and on WebGPU (SwiftShader:
// short inputs only). The native twin of these checks is tests/sentence.rs.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { createHash } from "node:crypto";
import { readJson, withPage } from "./harness.mjs";

/**
 * Max |ours − sentence-transformers| per value: the native bound (tests/sentence.rs: measured 3.2e-6 on the CPU,
 * 2.6e-6 on lavapipe; the wasm build's sums run in another order again). Measured here: printed at the end.
 */
const ATOL = 1e-5;

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const golden = readJson("tests/golden/sentence.json");
const ctx = withPage();

/** The stack `name` laid over all-MiniLM-L6-v2 under target/browser-test/ (served with the repository). */
function laidOver(name) {
  const rel = `target/browser-test/st-${name}/`;
  const dir = path.join(ROOT, rel);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  const minilm = path.join(ROOT, "models/all-MiniLM-L6-v2");
  for (const f of ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]) {
    fs.symlinkSync(path.join(minilm, f), path.join(dir, f));
  }
  fs.cpSync(path.join(ROOT, "tests/models/st-stacks", name), dir, { recursive: true });
  return rel;
}

const measured = { max: 0 };
function check(got, want, what) {
  assert.equal(got.length, want.length, `${what}: one vector per text`);
  got.forEach((v, i) => {
    assert.equal(v.length, want[i].length, `${what}: text ${i}: dimensions`);
    v.forEach((x, j) => {
      const d = Math.abs(x - want[i][j]);
      assert.ok(d <= ATOL, `${what}: text ${i}[${j}]: ours ${x}, sentence-transformers ${want[i][j]}`);
      measured.max = Math.max(measured.max, d);
    });
  });
}

test("embed with no options follows the model's own modules, prompts and dimensions (wasm CPU, folder URL)", async () => {
  const names = ["cls-normalize", "mean-dense-normalize", "meansqrt-noprompt", "weightedmean-dense-identity"];
  const urls = Object.fromEntries(names.map((n) => [n, ctx.env.models.url + laidOver(n)]));
  const got = await ctx.page.evaluate(async ({ urls, texts }) => {
    const out = {};
    for (const [name, url] of Object.entries(urls)) {
      const bert = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
      const r = { default: Array.from(await bert.embed(texts), (v) => Array.from(v)), prompts: bert.prompts,
        st: bert.sentenceTransformers };
      if (name === "cls-normalize") {
        r.query = Array.from(await bert.embed(texts, { prompt: "query" }), (v) => Array.from(v));
        r.dims64 = Array.from(await bert.embed(texts, { dimensions: 64 }), (v) => Array.from(v));
        r.badPrompt = await bert.embed(texts[0], { prompt: "qery" }).then(() => "no error", (e) => e.message);
        r.badDims = await bert.embed(texts[0], { dimensions: 385 }).then(() => "no error", (e) => e.message);
        r.after = Array.from(await bert.embed(texts), (v) => Array.from(v));
      }
      bert.dispose();
      out[name] = r;
    }
    return out;
  }, { urls, texts: golden.texts });
  for (const n of names) check(got[n].default, golden.stacks[n].default, `${n} default`);
  const cls = got["cls-normalize"];
  check(cls.query, golden.stacks["cls-normalize"].prompts.query, "cls-normalize prompt query");
  check(cls.dims64, golden.stacks["cls-normalize"].truncated["64"], "cls-normalize dimensions 64");
  assert.match(cls.badPrompt, /prompt `qery` is not one of this model's prompts: document, query/);
  assert.match(cls.badDims, /dimensions 385: this model's vectors have 384 values; ask for 1 to 384/);
  check(cls.after, golden.stacks["cls-normalize"].default, "cls-normalize after the errors");
  assert.deepEqual(Object.keys(cls.prompts).sort(), ["document", "query"]);
  assert.deepEqual(cls.st.modules, [{ type: "pooling", mode: "cls", include_prompt: true }, { type: "normalize" }]);
  assert.equal(got["meansqrt-noprompt"].st.default_prompt_name, "query");
  assert.deepEqual(got["mean-dense-normalize"].st.modules[1],
    { type: "dense", path: "2_Dense", in_features: 384, out_features: 64, bias: true, activation: "tanh" });
  ctx.page.checkErrors();
});

test("a bytes source takes sentence-transformers' files too; WebGPU runs the Dense module as the CPU does", async () => {
  const name = "mean-dense-normalize";
  const rel = laidOver(name);
  const got = await ctx.page.evaluate(async ({ base, texts }) => {
    const bytes = async (f) => new Uint8Array(await (await fetch(base + f)).arrayBuffer());
    const source = { config: await bytes("config.json"), tokenizer: await bytes("tokenizer.json"),
      weights: await bytes("model.safetensors"), sentence: {} };
    for (const f of ["modules.json", "sentence_bert_config.json", "1_Pooling/config.json", "2_Dense/config.json",
      "2_Dense/model.safetensors"]) source.sentence[f] = await bytes(f);
    const cpu = await bertgpu.Bert.load(source, { device: "cpu" });
    const fromBytes = Array.from(await cpu.embed(texts), (v) => Array.from(v));
    cpu.dispose();
    // SwiftShader: the first two texts only.
    const gpu = await bertgpu.Bert.load(base, { device: "webgpu", cache: false });
    const webgpu = { device: gpu.device, vectors: Array.from(await gpu.embed(texts.slice(0, 2)), (v) => Array.from(v)) };
    gpu.dispose();
    return { fromBytes, webgpu };
  }, { base: ctx.env.models.url + rel, texts: golden.texts });
  check(got.fromBytes, golden.stacks[name].default, `${name} from bytes`);
  assert.equal(got.webgpu.device, "webgpu");
  check(got.webgpu.vectors, golden.stacks[name].default.slice(0, 2), `${name} on WebGPU`);
  console.log(`# max |ours − sentence-transformers| ${measured.max.toExponential(2)} (ATOL ${ATOL})`);
  ctx.page.checkErrors();
});

test("sha256 pins sentence-transformers' files too: a Dense module's weights checked before use", async () => {
  const name = "mean-dense-normalize";
  const rel = laidOver(name);
  const sha = (f) => createHash("sha256").update(fs.readFileSync(path.join(ROOT, rel, f))).digest("hex");
  const pins = { "modules.json": sha("modules.json"), "2_Dense/model.safetensors": sha("2_Dense/model.safetensors"),
    "1_Pooling/config.json": sha("1_Pooling/config.json"), "model.safetensors": sha("model.safetensors") };
  const got = await ctx.page.evaluate(async ({ url, pins, texts }) => {
    const attempt = (f) => f().then((v) => ({ v }), (e) => ({ e: e.message }));
    const embedWith = async (sha256) => {
      const bert = await bertgpu.Bert.load(url, { device: "cpu", cache: false, sha256 });
      try {
        return Array.from(await bert.embed(texts), (v) => Array.from(v));
      } finally {
        bert.dispose();
      }
    };
    return {
      pinned: await attempt(() => embedWith(pins)),
      wrong: await attempt(() => embedWith({ "2_Dense/model.safetensors": "0".repeat(64) })),
      unlisted: await attempt(() => embedWith({ "3_Dense/config.json": pins["modules.json"] })),
      hidden: await attempt(() => embedWith({ ".git/config.json": pins["modules.json"] })),
    };
  }, { url: ctx.env.models.url + rel, pins, texts: golden.texts.slice(0, 2) });
  assert.ok(got.pinned.v, `pinned: ${got.pinned.e}`);
  check(got.pinned.v, golden.stacks[name].default.slice(0, 2), `${name} pinned`);
  assert.match(got.wrong.e ?? "accepted", /2_Dense\/model\.safetensors from .* has SHA-256 [0-9a-f]{64}, but 0{64} was pinned/);
  assert.match(got.unlisted.e ?? "accepted", /sha256 pins "3_Dense\/config\.json", which .*modules\.json does not list/);
  assert.match(got.hidden.e ?? "accepted", /sha256 names "\.git\/config\.json", which this source does not fetch/);
  ctx.page.checkErrors(/404/);
});
