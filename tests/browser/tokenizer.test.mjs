// trainTokenizer in headless Chromium: a WordPiece vocabulary from page texts, no model loaded, against the golden
// of Python's trainer (tests/golden/wordpiece.json, made by tests/golden/wordpiece.py; tests/wordpiece.rs says what
// is compared and why not the id order); and Bert.create, a BERT from scratch on such a vocabulary. Run: scripts/build-wasm.sh && node --test tests/browser/tokenizer.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { ROOT, readJson, readSafetensors, withPage } from "./harness.mjs";

const ctx = withPage();
const golden = readJson("tests/golden/wordpiece.json");
const texts = fs.readFileSync(path.join(ROOT, golden.corpus), "utf8").split("\n").filter((l) => l.trim())
  .map((l) => JSON.parse(l).text);

test("trainTokenizer gives Python's vocabulary set, with the specials and alphabet in its order", async () => {
  assert.equal(texts.length, 440);
  for (const [name, lowercase] of [["uncased-300", true], ["cased-500", false]]) {
    const s = golden.settings[name];
    const got = await ctx.page.evaluate(async ({ texts, options }) => {
      const files = await bertgpu.trainTokenizer(texts, options);
      const text = (k) => new TextDecoder().decode(files[k]);
      return { names: Object.keys(files).sort(), typed: Object.values(files).every((v) => v instanceof Uint8Array),
        vocab: text("vocab.txt").split("\n").slice(0, -1), config: JSON.parse(text("tokenizer_config.json")) };
    }, { texts, options: { vocabSize: s.vocab_size, minFrequency: s.min_frequency, lowercase } });
    assert.deepEqual(got.names, ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]);
    assert.ok(got.typed, "every file is a Uint8Array");
    assert.equal(got.vocab.length, s.size, name);
    assert.deepEqual(got.vocab.slice(0, s.prefix.length), s.prefix, `${name}: special tokens and alphabet`);
    assert.deepEqual([...got.vocab].sort(), [...s.tokens].sort(), `${name}: the vocabulary as a set`);
    assert.equal(got.config.do_lower_case, lowercase);
  }
});

test("trainTokenizer refuses bad options by name and bad corpora with the reason", async () => {
  const got = await ctx.page.evaluate(async (texts) => {
    const cases = [[texts, { vocabSize: 0 }], [texts, { minFrequency: -1 }], [texts, { lowercase: "yes" }],
      [texts, { vocab: 3 }], [[1], {}], [[], {}], [texts, { vocabSize: 20 }]];
    const out = [];
    for (const [t, o] of cases) {
      try {
        await bertgpu.trainTokenizer(t, o);
        out.push("no error");
      } catch (e) {
        out.push(`${e.name}: ${e.message}`);
      }
    }
    return out;
  }, texts);
  const want = [/^TypeError: .*vocabSize must be a positive integer/, /^TypeError: .*minFrequency must be a non-negative/,
    /^TypeError: .*lowercase must be true or false/, /^TypeError: .*unknown option "vocab"/,
    /^TypeError: .*texts\[0\] must be a string/, /^Error: .*corpus is empty/, /^Error: .*vocab_size 20 is too small/];
  assert.equal(got.length, want.length);
  got.forEach((g, i) => assert.match(g, want[i]));
});

/**
 * Bert.create draws each weight from N(0, initializer_range): the sample standard deviation of the ~37k weights of
 * tiny-pretraining's shape is within 1% of it (its standard error is 0.4%).
 */
const INIT_STD_RTOL = 0.01;

test("Bert.create: a BERT from scratch on a trained vocabulary, with transformers' tensors and initialisation", async () => {
  const config = readJson("tests/models/tiny-pretraining/config.json"); // saved by transformers (tests/golden/heads.py)
  const theirs = readSafetensors(fs.readFileSync(path.join(ROOT, "tests/models/tiny-pretraining/model.safetensors")));
  const got = await ctx.page.evaluate(async ({ texts, config }) => {
    const tok = await bertgpu.trainTokenizer(texts, { vocabSize: 400 });
    const made = async (seed) => {
      const bert = await bertgpu.Bert.create(config, tok, { device: "cpu", seed });
      const files = await bert.exportModel();
      const fill = await bert.fillMask("the [MASK] is here.");
      bert.dispose();
      return { weights: Array.from(files["model.safetensors"]), config: new TextDecoder().decode(files["config.json"]),
        vocab: new TextDecoder().decode(files["vocab.txt"]), fill: fill.length };
    };
    const caught = async (f) => {
      try {
        await f();
        return "no error";
      } catch (e) {
        return `${e.name}: ${e.message}`;
      }
    };
    const bad = {
      noVocab: await caught(() => bertgpu.Bert.create({ hidden_size: 32 }, tok)),
      classifier: await caught(() => bertgpu.Bert.create({ ...config, architectures: ["BertForSequenceClassification"] }, tok)),
      small: await caught(() => bertgpu.Bert.create({ ...config, vocab_size: 100 }, tok)),
      noTokenizer: await caught(() => bertgpu.Bert.create(config, {})),
      seed: await caught(() => bertgpu.Bert.create(config, tok, { seed: -1 })),
      option: await caught(() => bertgpu.Bert.create(config, tok, { seeds: 1 })),
      config: await caught(() => bertgpu.Bert.create(7, tok)),
    };
    return { a: await made(3), b: await made(3), c: await made(4), vocab: new TextDecoder().decode(tok["vocab.txt"]), bad };
  }, { texts, config });
  const a = readSafetensors(Uint8Array.from(got.a.weights));
  const shapes = (t) => Object.keys(t).sort().map((k) => `${k} ${t[k].length}`);
  assert.deepEqual(shapes(a), shapes(theirs), "the tensors of transformers' BertForPreTraining");
  assert.equal(JSON.parse(got.a.config).architectures[0], "BertForPreTraining");
  assert.equal(got.a.vocab, got.vocab, "the exported folder has the trained vocabulary");
  assert.ok(got.a.fill > 0, "fillMask runs on the new model");
  const H = config.hidden_size;
  const word = a["bert.embeddings.word_embeddings.weight"];
  assert.ok(word.subarray(0, H).every((x) => x === 0), "the padding row is zero");
  let [n, sum, sq] = [0, 0, 0];
  for (const [name, t] of Object.entries(a)) {
    if (/LayerNorm\.weight$/.test(name)) assert.ok(t.every((x) => x === 1), name);
    else if (/bias$/.test(name)) assert.ok(t.every((x) => x === 0), name);
    else for (const x of t) [n, sum, sq] = [n + 1, sum + x, sq + x * x];
  }
  const std = Math.sqrt(sq / n - (sum / n) ** 2);
  assert.ok(Math.abs(std / config.initializer_range - 1) <= INIT_STD_RTOL, `std ${std} of ${n} weights, `
    + `initializer_range ${config.initializer_range}`);
  assert.deepEqual(got.b.weights, got.a.weights, "the same seed, the same weights");
  assert.notDeepEqual(got.c.weights, got.a.weights, "another seed, other weights");
  const want = {
    noVocab: /^Error: .*vocab_size/,
    classifier: /^Error: .*BertForPreTraining or a BertForMaskedLM.*`BertForSequenceClassification`/,
    small: /^Error: .*the tokenizer has 400 tokens but the config says vocab_size 100/,
    noTokenizer: /^TypeError: Bert\.create: tokenizer must be a tokenizer's files/,
    seed: /^TypeError: Bert\.create: seed must be a non-negative integer/,
    option: /^TypeError: .*unknown option "seeds"/,
    config: /^TypeError: Bert\.create: config must be config\.json's fields/,
  };
  for (const [k, re] of Object.entries(want)) assert.match(got.bad[k], re, k);
  ctx.page.checkErrors();
});
