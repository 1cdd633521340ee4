// sentence-transformers' models in Node.js through the packed package (as tests/node/node.test.mjs installs it): a
// Dense stack embedded as its files say (tests/golden/sentence.json), and the vectors beside embed's
// (tests/golden/vectors.json): embedSparse of a sparse encoder with its prompt, embedTokens, embed's int8 codes.
// Stacks are laid over the real checkpoints as tests/golden/*.py lay them. The bounds are tests/vectors.rs's and
// tests/sentence.rs's.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { ROOT, MODELS, consumerProject } from "./package.mjs";

const EMBED_ATOL = 1e-5; // tests/sentence.rs CPU_ATOL (measured 3.2e-6)
const SPARSE_ATOL = 2e-5; // tests/vectors.rs (measured 4.9e-6)
const TOKEN_ATOL = 2e-5; // tests/vectors.rs (measured 3.2e-6)

const sentence = JSON.parse(fs.readFileSync(path.join(ROOT, "tests/golden/sentence.json"), "utf8"));
const vectors = JSON.parse(fs.readFileSync(path.join(ROOT, "tests/golden/vectors.json"), "utf8"));
const run = promisify(execFile);

/** tests/models/st-stacks/<name> laid over models/<base> in a temporary folder. */
function laidOver(name, base) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `bertgpu-st-${name}-`));
  for (const f of fs.readdirSync(path.join(MODELS, base))) {
    const p = path.join(MODELS, base, f);
    if (fs.statSync(p).isFile() && !["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"].includes(f)) {
      fs.symlinkSync(p, path.join(dir, f));
    }
  }
  fs.cpSync(path.join(ROOT, "tests/models/st-stacks", name), dir, { recursive: true });
  process.on("exit", () => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

let consumer;
before(() => {
  consumer = consumerProject();
});

function close(got, want, atol, what) {
  assert.equal(got.length, want.length, `${what}: length`);
  got.forEach((x, j) => assert.ok(Math.abs(x - want[j]) <= atol, `${what}[${j}]: ours ${x}, sentence-transformers ${want[j]}`));
}

test("a Dense stack, a sparse encoder, per-token vectors and int8 codes in Node.js as sentence-transformers", async () => {
  const code = `
    import { Bert } from "bertgpu";
    const [dense, sparse, minilm, texts, ranges] = process.argv.slice(1).map((a, i) => (i < 3 ? a : JSON.parse(a)));
    const out = {};
    let bert = await Bert.load(dense, { device: "cpu" });
    out.dense = (await bert.embed(texts)).map((v) => Array.from(v));
    bert.dispose();
    bert = await Bert.load(sparse, { device: "cpu" });
    out.sparse = (await bert.embedSparse(texts, { prompt: "query" })).map((v) => ({ indices: Array.from(v.indices),
      values: Array.from(v.values) }));
    bert.dispose();
    bert = await Bert.load(minilm, { device: "cpu" });
    const t = await bert.embedTokens(texts[0]);
    out.tokens = { ids: Array.from(t.ids), vectors: t.vectors.map((v) => Array.from(v)) };
    out.int8 = (await bert.embed(texts, { precision: "int8", ranges })).map((v) => [v.constructor.name, ...v]);
    bert.dispose();
    console.log(JSON.stringify(out));
  `;
  let stdout;
  try {
    ({ stdout } = await run(process.execPath, ["--input-type=module", "-e", code, laidOver("mean-dense-normalize", "all-MiniLM-L6-v2"),
      laidOver("splade-log1p-short", "splade-tiny"), path.join(MODELS, "all-MiniLM-L6-v2"), JSON.stringify(vectors.texts),
      JSON.stringify(vectors.quantized.ranges)], { cwd: consumer, timeout: 300_000 }));
  } catch (e) {
    throw new Error(`the consumer script failed:\n${e.stdout}\n${e.stderr}`);
  }
  const got = JSON.parse(stdout.trim().split("\n").pop());
  assert.deepEqual(sentence.texts, vectors.texts, "the two goldens embed the same texts");
  const want = sentence.stacks["mean-dense-normalize"].default;
  assert.equal(got.dense.length, want.length);
  got.dense.forEach((v, i) => close(v, want[i], EMBED_ATOL, `Dense stack: text ${i}`));

  const sparse = vectors.sparse["splade-log1p-short prompt query"];
  assert.equal(got.sparse.length, sparse.length);
  got.sparse.forEach((v, i) => {
    const all = new Map();
    v.indices.forEach((k, j) => all.set(k, [v.values[j], 0]));
    sparse[i].indices.forEach((k, j) => all.set(k, [all.get(k)?.[0] ?? 0, sparse[i].values[j]]));
    assert.ok(all.size >= sparse[i].indices.length && sparse[i].indices.length > 0);
    for (const [k, [a, b]] of all) assert.ok(Math.abs(a - b) <= SPARSE_ATOL, `sparse: text ${i} entry ${k}: ours ${a}, ${b}`);
  });

  const tokens = vectors.tokens.plain[0];
  assert.deepEqual(got.tokens.ids, tokens.ids);
  assert.equal(got.tokens.vectors.length, tokens.vectors.length);
  got.tokens.vectors.forEach((v, k) => close(v, tokens.vectors[k], TOKEN_ATOL, `token ${k}`));

  // int8 by the golden's ranges: within one step of sentence-transformers' codes for the same texts.
  const codes = vectors.quantized.with_ranges.int8;
  assert.equal(got.int8.length, vectors.texts.length);
  got.int8.forEach((row, i) => {
    assert.equal(row[0], "Int8Array");
    close(row.slice(1), codes[i], 1, `int8: text ${i}`);
  });
});
