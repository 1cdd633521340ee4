// The vectors beside `embed`'s in the browser, against sentence-transformers itself (tests/golden/vectors.json, made
// by tests/golden/vectors.py): `embedSparse` (SPLADE) of the real splade-tiny, bare and under the sparse stack
// tests/models/st-stacks/splade-log1p-short (the loader fetches its SpladePooling); `embedTokens` of the real
// all-MiniLM-L6-v2; `embed`'s `precision` codes (quantize_embeddings). On the wasm CPU backend and on WebGPU
// (SwiftShader: two short texts). The native twin of these checks is tests/vectors.rs.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { readJson, withPage } from "./harness.mjs";

/** tests/vectors.rs's bounds (measured there: sparse 4.9e-6, tokens 3.2e-6); measured here: printed at the end. */
const SPARSE_ATOL = 2e-5;
const TOKEN_ATOL = 2e-5;
/** A code may differ from sentence-transformers' only where its float is this close to an edge (tests/vectors.rs). */
const EMBED_ATOL = 1e-5;

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const golden = readJson("tests/golden/vectors.json");
const ctx = withPage();

/** The sparse stack laid over splade-tiny under target/browser-test/ (served with the repository). */
function sparseStack() {
  const rel = "target/browser-test/st-splade-log1p-short/";
  const dir = path.join(ROOT, rel);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  const base = path.join(ROOT, "models/splade-tiny");
  for (const f of fs.readdirSync(base)) fs.symlinkSync(path.join(base, f), path.join(dir, f));
  fs.cpSync(path.join(ROOT, "tests/models/st-stacks/splade-log1p-short"), dir, { recursive: true });
  return rel;
}

const measured = { sparse: 0, tokens: 0 };

function checkSparse(got, want, what) {
  assert.equal(got.length, want.length, `${what}: one vector per text`);
  got.forEach((v, i) => {
    assert.equal(v.indices.length, v.values.length, `${what}: text ${i}`);
    assert.ok(want[i].indices.length > 0, `${what}: text ${i}: the golden keeps an entry`);
    const all = new Map();
    v.indices.forEach((k, j) => all.set(k, [v.values[j], 0]));
    want[i].indices.forEach((k, j) => all.set(k, [all.get(k)?.[0] ?? 0, want[i].values[j]]));
    for (const [k, [a, b]] of all) {
      const d = Math.abs(a - b);
      assert.ok(d <= SPARSE_ATOL, `${what}: text ${i} entry ${k}: ours ${a}, sentence-transformers ${b}`);
      measured.sparse = Math.max(measured.sparse, d);
    }
  });
}

function checkTokens(got, want, texts, what) {
  assert.equal(got.length, want.length, `${what}: one list per text`);
  got.forEach((t, i) => {
    assert.deepEqual(Array.from(t.ids), want[i].ids, `${what}: text ${i}: the tokens`);
    assert.equal(t.vectors.length, want[i].vectors.length, `${what}: text ${i}: one vector per token`);
    t.vectors.forEach((v, k) => {
      assert.equal(v.length, want[i].vectors[k].length);
      v.forEach((x, j) => {
        const d = Math.abs(x - want[i].vectors[k][j]);
        assert.ok(d <= TOKEN_ATOL, `${what}: text ${i} token ${k}[${j}]: ours ${x}, sentence-transformers ${want[i].vectors[k][j]}`);
        measured.tokens = Math.max(measured.tokens, d);
      });
    });
    t.offsets.forEach(([s, e], k) => {
      if (e > s) assert.equal(texts[i].slice(s, e).toLowerCase(), t.tokens[k].replace(/^##/, ""), `${what}: offsets`);
    });
  });
}

/** Codes equal to sentence-transformers' but where a float of `floats` sits within EMBED_ATOL of 0 (bits). */
function checkBits(got, want, floats, what) {
  assert.equal(got.length, want.length);
  got.forEach((row, i) => {
    assert.equal(row.length, want[i].length, `${what}: text ${i}: bytes`);
    row.forEach((b, j) => {
      const near = floats[i].slice(8 * j, 8 * j + 8).some((x) => Math.abs(x) <= EMBED_ATOL);
      assert.ok(b === want[i][j] || near, `${what}: text ${i} byte ${j}: ours ${b}, sentence-transformers ${want[i][j]}`);
    });
  });
}

test("embedSparse, embedTokens and embed's precision as sentence-transformers (wasm CPU, folder URLs)", async () => {
  const q = golden.quantized;
  const texts6 = [...golden.texts, "A second look at the same question.", "Nothing to see here."];
  const got = await ctx.page.evaluate(async ({ base, stack, minilm, texts, texts6, ranges }) => {
    const list = (vs) => vs.map((v) => ({ indices: Array.from(v.indices), values: Array.from(v.values) }));
    const out = {};
    const bare = await bertgpu.Bert.load(base, { device: "cpu", cache: false });
    out.plain = list(await bare.embedSparse(texts));
    bare.dispose();
    const sparse = await bertgpu.Bert.load(stack, { device: "cpu", cache: false });
    out.st = sparse.sentenceTransformers;
    out.stack = list(await sparse.embedSparse(texts));
    out.query = list(await sparse.embedSparse(texts, { prompt: "query" }));
    out.top5 = list(await sparse.embedSparse(texts, { maxActiveDims: 5 }));
    out.single = list([await sparse.embedSparse(texts[2])]);
    out.denseRefused = await sparse.embed(texts[0]).then(() => "no error", (e) => e.message);
    sparse.dispose();
    const m = await bertgpu.Bert.load(minilm, { device: "cpu", cache: false });
    out.tokens = (await m.embedTokens(texts)).map((t) => ({ ids: Array.from(t.ids), tokens: t.tokens, offsets: t.offsets,
      vectors: t.vectors.map((v) => Array.from(v)) }));
    const unit = await m.embedTokens(texts[0], { normalize: true });
    out.unitNorms = unit.vectors.map((v) => Math.hypot(...v));
    out.floats = Array.from(await m.embed(texts6), (v) => Array.from(v));
    out.ubinary = Array.from(await m.embed(texts6, { precision: "ubinary" }), (v) => [v.constructor.name, ...v]);
    out.int8 = Array.from(await m.embed(texts6, { precision: "int8", ranges }), (v) => [v.constructor.name, ...v]);
    out.int8Own = Array.from(await m.embed(texts6, { precision: "int8" }), (v) => Array.from(v));
    out.oneInt8 = await m.embed(texts[0], { precision: "int8" }).then(() => "no error", (e) => e.message);
    out.badPrecision = await m.embed(texts[0], { precision: "int4" }).then(() => "no error", (e) => e.message);
    out.sparseRefused = await m.embedSparse(texts[0]).then(() => "no error", (e) => e.message);
    out.after = Array.from(await m.embed(texts6.slice(0, 1)), (v) => Array.from(v));
    m.dispose();
    return out;
  }, { base: ctx.env.models.url + "models/splade-tiny/", stack: ctx.env.models.url + sparseStack(),
    minilm: ctx.env.models.url + "models/all-MiniLM-L6-v2/", texts: golden.texts, texts6, ranges: q.ranges });

  checkSparse(got.plain, golden.sparse.plain, "splade-tiny");
  assert.deepEqual(got.st.modules, [{ type: "splade", log1p_relu: true }]);
  checkSparse(got.stack, golden.sparse["splade-log1p-short"], "sparse stack");
  checkSparse(got.query, golden.sparse["splade-log1p-short prompt query"], "sparse stack, prompt query");
  checkSparse(got.top5, golden.sparse["splade-log1p-short max_active_dims 5"], "sparse stack, maxActiveDims 5");
  checkSparse(got.single, [golden.sparse["splade-log1p-short"][2]], "one text");
  assert.match(got.denseRefused, /this is a sparse encoder/);
  checkTokens(got.tokens, golden.tokens.plain, golden.texts, "embedTokens");
  got.unitNorms.forEach((n) => assert.ok(Math.abs(n - 1) < 1e-5, `normalize: a token's norm ${n}`));
  got.ubinary.forEach((row) => assert.equal(row[0], "Uint8Array"));
  checkBits(got.ubinary.map((r) => r.slice(1)), q.from_input.ubinary, q.input, "ubinary");
  got.int8.forEach((row, i) => {
    assert.equal(row[0], "Int8Array");
    const codes = row.slice(1);
    assert.equal(codes.length, 384);
    codes.forEach((c, j) => assert.ok(Math.abs(c - q.with_ranges.int8[i][j]) <= 1, `int8: text ${i}[${j}]`));
  });
  // Ranges from the call's own vectors: ours, quantized as sentence-transformers would quantize them.
  const lo = got.floats[0].map((_, j) => Math.min(...got.floats.map((v) => v[j])));
  const hi = got.floats[0].map((_, j) => Math.max(...got.floats.map((v) => v[j])));
  got.int8Own.forEach((row, i) => row.forEach((c, j) => {
    const step = Math.fround((Math.fround(hi[j] - lo[j])) / 255);
    const want = Math.min(255, Math.max(0, Math.floor(Math.fround(Math.fround(got.floats[i][j] - lo[j]) / step)))) - 128;
    assert.equal(c, want, `int8 from the call's vectors: text ${i}[${j}]`);
  }));
  assert.match(got.oneInt8, /int8 and uint8 ranges cannot come from 1 vector/);
  assert.match(got.badPrecision, /precision must be one of "float32", "int8", "uint8", "binary", "ubinary"/);
  assert.match(got.sparseRefused, /makes dense vectors/);
  assert.equal(got.after.length, 1);
  ctx.page.checkErrors();
});

test("embedSparse and embedTokens on WebGPU as on the CPU", async () => {
  const got = await ctx.page.evaluate(async ({ base, minilm, texts }) => {
    const sparse = await bertgpu.Bert.load(base, { device: "webgpu", cache: false });
    const plain = (await sparse.embedSparse(texts)).map((v) => ({ indices: Array.from(v.indices), values: Array.from(v.values) }));
    const device = sparse.device;
    sparse.dispose();
    const m = await bertgpu.Bert.load(minilm, { device: "webgpu", cache: false });
    const tokens = (await m.embedTokens(texts)).map((t) => ({ ids: Array.from(t.ids), tokens: t.tokens, offsets: t.offsets,
      vectors: t.vectors.map((v) => Array.from(v)) }));
    m.dispose();
    return { device, plain, tokens };
  }, { base: ctx.env.models.url + "models/splade-tiny/", minilm: ctx.env.models.url + "models/all-MiniLM-L6-v2/",
    texts: [golden.texts[0], golden.texts[2]] });
  assert.equal(got.device, "webgpu");
  checkSparse(got.plain, [golden.sparse.plain[0], golden.sparse.plain[2]], "splade-tiny on WebGPU");
  checkTokens(got.tokens, [golden.tokens.plain[0], golden.tokens.plain[2]], [golden.texts[0], golden.texts[2]], "embedTokens on WebGPU");
  console.log(`# max |ours − sentence-transformers|: sparse ${measured.sparse.toExponential(2)} (ATOL ${SPARSE_ATOL}), `
    + `tokens ${measured.tokens.toExponential(2)} (ATOL ${TOKEN_ATOL})`);
  ctx.page.checkErrors();
});
