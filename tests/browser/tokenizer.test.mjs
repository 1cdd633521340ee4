// trainTokenizer in headless Chromium: a WordPiece vocabulary from page texts, no model loaded, against the golden
// of Python's trainer (tests/golden/wordpiece.json, made by tests/golden/wordpiece.py; tests/wordpiece.rs says what
// is compared and why not the id order). Run: scripts/build-wasm.sh && node --test tests/browser/tokenizer.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { ROOT, readJson, withPage } from "./harness.mjs";

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
