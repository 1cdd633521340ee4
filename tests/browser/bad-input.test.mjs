// Bad inputs through the JS API, as a table: each row is an input and either the clear error it must give (a regex
// on the message) or its documented result. After every error, the model loaded at the start must still embed as
// before. tests/models/tiny-pretraining (2 layers, hidden 32, 64 positions) on the wasm CPU backend.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { start, openPage, ROOT } from "./harness.mjs";

const TINY = "tests/models/tiny-pretraining/";
const FIXTURES = "target/browser-test/bad-input/";

let env;
let page;
let cutShort; // a server whose model.safetensors answers a full content-length, then hangs up halfway

/** A copy of the tiny model's folder under FIXTURES/name with its weights replaced by `weights`. */
function folderWith(name, weights) {
  const dir = path.join(ROOT, FIXTURES, name);
  fs.mkdirSync(dir, { recursive: true });
  for (const f of ["config.json", "tokenizer.json", "tokenizer_config.json"]) {
    fs.copyFileSync(path.join(ROOT, TINY, f), path.join(dir, f));
  }
  fs.writeFileSync(path.join(dir, "model.safetensors"), weights);
  return `${FIXTURES}${name}/`;
}

/** The tiny model's safetensors with `edit(header, data)` applied to its JSON header and data section. */
function editedSafetensors(edit) {
  const bytes = fs.readFileSync(path.join(ROOT, TINY, "model.safetensors"));
  const n = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + n).toString());
  const data = Buffer.from(bytes.subarray(8 + n));
  edit(header, data);
  let json = JSON.stringify(header);
  json += " ".repeat((8 - (json.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([len, Buffer.from(json), data]);
}

/** Sets the first f32 of tensor `name` to `value`. */
function poison(name, value) {
  return editedSafetensors((h, data) => data.writeFloatLE(value, h[name].data_offsets[0]));
}

before(async () => {
  fs.rmSync(path.join(ROOT, FIXTURES), { recursive: true, force: true });
  const full = fs.readFileSync(path.join(ROOT, TINY, "model.safetensors"));
  folderWith("truncated", full.subarray(0, full.length >> 1));
  folderWith("wrong-dtype", editedSafetensors((h) => {
    h["bert.encoder.layer.0.attention.self.query.weight"].dtype = "I32"; // same width: only the dtype is wrong
  }));
  folderWith("nan", poison("bert.encoder.layer.0.attention.self.query.weight", NaN));
  folderWith("inf", poison("bert.encoder.layer.1.output.dense.weight", Infinity));
  // The same model as a GGUF (written by the CLI: `cargo build` runs before these tests), then cut in half.
  const cli = path.join(ROOT, "target/debug/bertgpu");
  assert.ok(fs.existsSync(cli), "target/debug/bertgpu is missing: run `cargo build` first");
  const gguf = path.join(ROOT, FIXTURES, "tiny.gguf");
  execFileSync(cli, ["convert", "--model", path.join(ROOT, TINY), "--dtype", "f32", "--out", gguf], { stdio: "pipe" });
  const g = fs.readFileSync(gguf);
  fs.writeFileSync(path.join(ROOT, FIXTURES, "truncated.gguf"), g.subarray(0, g.length >> 1));

  cutShort = http.createServer((req, res) => {
    const file = path.join(ROOT, TINY, path.basename(new URL(req.url, "http://x").pathname));
    if (!fs.existsSync(file)) {
      res.writeHead(404, { "access-control-allow-origin": "*" }).end();
      return;
    }
    const body = fs.readFileSync(file);
    res.writeHead(200, { "access-control-allow-origin": "*", "content-length": body.length, "cache-control": "no-store" });
    if (file.endsWith(".safetensors")) {
      res.write(body.subarray(0, body.length >> 1));
      setTimeout(() => res.socket.destroy(), 50);
    } else {
      res.end(body);
    }
  });
  await new Promise((r) => cutShort.listen(0, "127.0.0.1", r));

  env = await start();
  page = await openPage(env);
  // `attempt(fn)`: { value } or { error: { name, message } }, so a row's outcome crosses back as data.
  await page.evaluate(async (url) => {
    window.attempt = async (fn) => {
      try {
        return { value: await fn() };
      } catch (e) {
        return { error: { name: e?.name, message: e?.message ?? String(e) } };
      }
    };
    window.model = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
    window.reference = Array.from(await model.embed("the model still works"));
    // Embeds the reference text again: the model must be unharmed by whatever the row did.
    window.stillWorks = async () => {
      const v = Array.from(await model.embed("the model still works"));
      return v.length === reference.length && v.every((x, i) => x === reference[i]);
    };
  }, env.models.url + TINY);
});

after(async () => {
  await env?.stop();
  await new Promise((r) => (cutShort ? cutShort.close(r) : r()));
  fs.rmSync(path.join(ROOT, FIXTURES), { recursive: true, force: true });
});

/** Asserts that a row failed with a message matching `re` (and, when given, an error of class `name`). */
function assertError(row, got, re, name) {
  assert.ok(got.error, `${row}: expected an error matching ${re}, got ${JSON.stringify(got.value)?.slice(0, 200)}`);
  assert.match(got.error.message, re, `${row}: message`);
  if (name) assert.equal(got.error.name, name, `${row}: error class (${got.error.message})`);
}

test("texts: empty, whitespace, control characters, lone surrogates, far over the position limit", async () => {
  const got = await page.evaluate(async () => {
    const vec = async (t) => Array.from(await model.embed(t));
    const tok = async (t) => model.tokenize(t);
    const the = (n) => Array(n).fill("the").join(" ");
    return {
      empty: await vec(""),
      emptyTokens: await tok(""),
      spaces: await vec(" \t\n\r\u00a0\u3000 "),
      control: await tok("a\u0000b\u0007c\u001b[31md\u007f"),
      controlVec: await vec("a\u0000b\u0007c\u001b[31md\u007f"),
      controlRemoved: await tok("abc[31md"),
      controlRemovedVec: await vec("abc[31md"),
      lone: await tok("x\uD800y\uDC00z"),
      loneVec: await vec("x\uD800y\uDC00z"),
      replaced: await vec("x\uFFFDy\uFFFDz"),
      xyz: await tok("xyz"),
      // a pair of surrogates is one character (U+1F600); offsets of NER/QA count UTF-16 units (index.d.ts)
      pairTokens: await tok("\uD83D\uDE00"),
      long: await tok(the(5000)),
      longVec: await vec(the(5000)),
      // 62 words + [CLS] + [SEP] = the model's 64 positions: what the long text is cut to
      cutVec: await vec(the(62)),
      longPair: await tok(the(5000), the(5000)),
      works: await stillWorks(),
    };
  });
  // Empty and whitespace-only texts are valid: [CLS] [SEP] (what transformers' tokenizer gives), a finite vector.
  assert.deepEqual(got.emptyTokens.tokens, ["[CLS]", "[SEP]"]);
  assert.equal(got.emptyTokens.truncated, false);
  assert.ok(got.empty.every(Number.isFinite) && got.empty.length === 32);
  assert.deepEqual(got.spaces, got.empty, "whitespace-only embeds as the empty text");
  // Control characters are dropped by BERT's normalizer (BertNormalizer clean_text), as in transformers.
  // "a\0b\x07c\x1b[31md\x7f" reads as "abc[31md": the pieces around a control character join into one word.
  assert.deepEqual(got.control.tokens, got.controlRemoved.tokens, "control characters dropped");
  assert.deepEqual(got.controlVec, got.controlRemovedVec);
  // Lone surrogates cannot cross into Rust (UTF-8): they arrive as U+FFFD, which BERT's normalizer drops like a
  // control character (transformers' BasicTokenizer._clean_text does the same): "x\uD800y\uDC00z" reads as "xyz".
  assert.deepEqual(got.loneVec, got.replaced, "lone surrogates read as U+FFFD");
  assert.deepEqual(got.lone.tokens, got.xyz.tokens, "U+FFFD dropped");
  assert.equal(got.pairTokens.tokens.length, 3);
  // Far over the limit: cut to max_position_embeddings (64) tokens, and `truncated` says so; the vector is the one of
  // the first 62 words.
  assert.equal(got.long.input_ids.length, 64);
  assert.equal(got.long.truncated, true);
  assert.deepEqual(got.longVec, got.cutVec);
  assert.equal(got.longPair.input_ids.length, 64);
  assert.equal(got.longPair.truncated, true);
  assert.ok(got.works);
  page.checkErrors();
});

test("10,000 texts in one embed call on the CPU: chunked by batchSize, every vector equals its own call", async () => {
  const got = await page.evaluate(async () => {
    const texts = Array.from({ length: 10_000 }, (_, i) => `text number ${i} ${"word ".repeat(i % 9)}`);
    const t0 = performance.now();
    const all = await model.embed(texts);
    const ms = performance.now() - t0;
    const picks = [0, 1, 31, 32, 4999, 9999];
    const alone = [];
    for (const i of picks) alone.push(Array.from(await model.embed(texts[i])));
    return { n: all.length, ms, finite: all.every((v) => v.length === 32 && v.every(Number.isFinite)),
      picked: picks.map((i) => Array.from(all[i])), alone, works: await stillWorks() };
  });
  assert.equal(got.n, 10_000);
  assert.ok(got.finite);
  // Padding to the batch's longest text does not change a vector: on the CPU backend the padded positions are masked
  // out exactly and every row is summed in the same order whatever the batch (measured: no value differs).
  assert.equal(got.alone.length, 6);
  got.alone.forEach((v, k) => assert.deepEqual(got.picked[k], v, `vector ${k}: batched vs alone`));
  assert.ok(got.works);
  console.log(`# 10,000 texts embedded in ${got.ms.toFixed(0)} ms`);
  page.checkErrors();
});

test("options and arguments of the wrong type: a TypeError naming the option, for every method", async () => {
  const rows = [
    ["embed(123)", /embed: text must be a string or an array of strings/],
    ["embed([\"a\", 1])", /embed: text\[1\] must be a string \(got number\)/],
    ["embed(\"a\", \"mean\")", /embed: options must be an object/],
    ["embed(\"a\", { pooling: \"median\" })", /embed: pooling must be one of "mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken"/],
    ["embed(\"a\", { pooling: 1 })", /embed: pooling must be one of "mean", "cls"/],
    ["embed(\"a\", { prompt: 1 })", /embed: prompt must be a prompt's name/],
    ["embed(\"a\", { dimensions: 0 })", /embed: dimensions must be a positive integer/],
    ["embed(\"a\", { dimensions: 1.5 })", /embed: dimensions must be a positive integer/],
    ["embed(\"a\", { normalize: \"yes\" })", /embed: normalize must be true or false/],
    ["embed(\"a\", { batchSize: 0 })", /embed: batchSize must be a positive integer/],
    ["embed(\"a\", { batchSize: \"32\" })", /embed: batchSize must be a positive integer/],
    ["embed(\"a\", { batchSize: 1.5 })", /embed: batchSize must be a positive integer/],
    ["embed(\"a\", { poolling: \"cls\" })", /embed: unknown option "poolling"/],
    ["tokenize(null)", /tokenize: text must be a string or an array of strings \(got null\)/],
    ["tokenize(\"a\", 5)", /tokenize: textPair must be a string/],
    ["tokenize([\"a\", \"b\"], [\"c\"])", /tokenize: 2 texts but 1 pair texts/],
    ["fillMask(\"a [MASK]\", { topK: \"5\" })", /fillMask: topK must be a positive integer/],
    ["fillMask(\"a [MASK]\", { topK: 0 })", /fillMask: topK must be a positive integer/],
    ["fillMask(\"a [MASK]\", [])", /fillMask: options must be an object/],
    ["classify(\"a\", { topK: -1 })", /classify: topK must be a positive integer/],
    ["classify(42)", /classify: give a text, a pair/],
    ["classify([[\"a\", 1]])", /classify: input\[0\] must be a string or a pair/],
    ["nextSentence(\"a\", [\"b\"])", /nextSentence: give two strings, or two arrays of the same length/],
    ["nextSentence(\"a\", 2)", /nextSentence: b must be a string/],
    ["tokenClassify(\"a\", { aggregation: 3 })", /tokenClassify: aggregation must be "none" or "simple"/],
    ["answer(1, \"context\")", /answer: question and context must be strings/],
    ["trainHead(\"text\")", /trainHead: examples must be an array/],
    ["trainHead([{ text: \"a\", label: 1 }])", /trainHead: examples\[0\] must be \{ text: string, label: string \}/],
    ["trainHead([{ text: \"a\", label: \"x\" }], { epochs: \"3\" })", /trainHead: epochs must be a non-negative integer/],
    ["trainHead([{ text: \"a\", label: \"x\" }], { learningRate: NaN })", /trainHead: learningRate must be a finite number/],
    ["trainHead([{ text: \"a\", label: \"x\" }], { onProgress: 1 })", /trainHead: onProgress must be a function/],
    ["trainHead([{ text: \"a\", label: \"x\" }], { labels: \"x\" })", /trainHead: labels must be an array of strings/],
    ["loadHead(\"head.safetensors\")", /loadHead: give the head file's bytes/],
    // src/training/head.rs import_safetensors: 3 bytes cannot hold safetensors' 8-byte header length.
    ["loadHead(new Uint8Array([1, 2, 3]))",
      /^invalid weights: head file: not a valid safetensors file \(.+\); export it again with train-head \/ exportHead$/],
  ];
  const loads = [
    ["Bert.load(42)", /Bert.load: unsupported source of type number/],
    ["Bert.load(null)", /Bert.load: no source given/],
    ["Bert.load(\"\")", /Bert.load: the source is an empty string/],
    ["Bert.load({ config: \"{}\" })", /Bert.load: the bytes source lacks weights, tokenizer/],
    ["Bert.load({ config: 1, tokenizer: \"{}\", weights: new Uint8Array(8) })", /`config` must be a string, an ArrayBuffer or a Uint8Array \(got number\)/],
    ["Bert.load(URL, \"cpu\")", /Bert.load: options must be an object/],
    ["Bert.load(URL, { device: \"gpu\" })", /Bert.load: device must be one of "auto", "webgpu", "cpu" \(got "gpu"\)/],
    ["Bert.load(URL, { cache: \"yes\" })", /Bert.load: cache must be true or false/],
    ["Bert.load(URL, { onProgress: 1 })", /Bert.load: onProgress must be a function/],
    ["Bert.load(URL, { devise: \"cpu\" })", /Bert.load: unknown option "devise"/],
  ];
  const got = await page.evaluate(async ({ rows, loads, url }) => {
    const out = [];
    for (const [src] of rows) {
      // eslint-disable-next-line no-new-func
      const call = new Function("model", `return model.${src};`);
      out.push({ src, got: await attempt(() => call(model)), works: await stillWorks() });
    }
    for (const [src] of loads) {
      const call = new Function("Bert", "URL", `return ${src};`);
      out.push({ src, got: await attempt(() => call(bertgpu.Bert, url)), works: await stillWorks() });
    }
    return out;
  }, { rows: rows.map(([s]) => [s]), loads: loads.map(([s]) => [s]), url: env.models.url + TINY });
  const all = [...rows, ...loads];
  got.forEach(({ src, got: g, works }, i) => {
    assertError(src, g, all[i][1]);
    assert.ok(works, `${src}: the model stopped working`);
  });
  // Type errors are TypeErrors (JS's class for a wrong argument), the rest plain Errors.
  for (const { src, got: g } of got) {
    if (/must be|unknown option|options must|give a text|give two|no source|unsupported source|empty string/.test(g.error.message)) {
      assert.equal(g.error.name, "TypeError", `${src}: ${g.error.message}`);
    }
  }
  page.checkErrors();
});

test("bad model files: truncated downloads, a wrong dtype, NaN/Inf weights, a head of another hidden size", async () => {
  const got = await page.evaluate(async ({ base, cutShort, splade }) => {
    const load = (url) => attempt(async () => {
      const bert = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
      const v = Array.from(await bert.embed("the model still works"));
      bert.dispose();
      return v;
    });
    const out = {};
    out.truncated = await load(base + "truncated/");
    out.truncatedGguf = await load(base + "truncated.gguf");
    out.cutShort = await load(cutShort);
    // Cached, the same download cut short says the same, with no onProgress (the browser writes the response into
    // the cache itself, then the loader downloads it again past the cache) and with one (the loader feeds the
    // cache); nothing of it stays in the cache.
    out.cutShortCached = [];
    for (const onProgress of [undefined, () => {}]) {
      out.cutShortCached.push(await attempt(() => bertgpu.Bert.load(cutShort, { device: "cpu", onProgress })));
    }
    out.cutShortLeft = (await (await caches.open("bertgpu-models-v1")).match(cutShort + "model.safetensors")) != null;
    out.wrongDtype = await load(base + "wrong-dtype/");
    out.nan = await load(base + "nan/");
    out.inf = await load(base + "inf/");
    out.gguf = await load(base + "tiny.gguf");
    // A head trained on a model of hidden size 128 (splade-tiny) loaded into one of hidden size 32.
    out.head = await attempt(async () => {
      const other = await bertgpu.Bert.load(splade, { device: "cpu", cache: false });
      await other.trainHead([{ text: "good", label: "pos" }, { text: "bad", label: "neg" }], { epochs: 1 });
      const bytes = await other.exportHead();
      other.dispose();
      return model.loadHead(bytes);
    });
    out.works = await stillWorks();
    out.reference = reference;
    return out;
  }, { base: env.models.url + FIXTURES, cutShort: `http://127.0.0.1:${cutShort.address().port}/`,
    splade: env.models.url + "models/splade-tiny/" });
  assertError("truncated model.safetensors", got.truncated, /not a valid safetensors file .*truncated: download it again/);
  assertError("truncated .gguf", got.truncatedGguf, /past the end of the file .*: the file is truncated or corrupt/);
  assertError("download cut short", got.cutShort,
    /the download of model\.safetensors was cut short after \d+ bytes of 154256 .*load again/);
  got.cutShortCached.forEach((r, i) => assertError(`download cut short, cached (${["no onProgress", "onProgress"][i]})`,
    r, /the download of model\.safetensors was cut short after \d+ bytes of 154256 .*load again/));
  assert.equal(got.cutShortLeft, false, "a download cut short is not cached");
  assertError("wrong dtype", got.wrongDtype,
    /`bert\.encoder\.layer\.0\.attention\.self\.query\.weight` is stored as I32; only f32, f16 and bf16/);
  // Without the check a NaN in a query weight still gives finite (wrong) vectors, and an infinity gives NaN.
  assertError("NaN weight", got.nan, /`bert\.encoder\.layer\.0\.attention\.self\.query\.weight` holds NaN/);
  assertError("Inf weight", got.inf, /`bert\.encoder\.layer\.1\.output\.dense\.weight` holds an infinity/);
  assert.deepEqual(got.gguf.value, got.reference, "the untruncated GGUF embeds as the safetensors");
  assertError("head of hidden size 128 in a model of 32", got.head,
    /trained on features of size 128, but the model's hidden size is 32/);
  assert.ok(got.works);
  // Chromium logs the cut-short response itself.
  page.checkErrors(/ERR_CONTENT_LENGTH_MISMATCH/);
});

test("the worker entry: the same TypeErrors cross the worker boundary; arguments that cannot be sent say so", async () => {
  const rows = [
    ["embed(123)", /^embed: text must be a string or an array of strings/, "TypeError"],
    ["embed(\"a\", { batchSize: 0 })", /^embed: batchSize must be a positive integer/, "TypeError"],
    ["fillMask(\"a [MASK]\", { topK: \"5\" })", /^fillMask: topK must be a positive integer/, "TypeError"],
    ["embed(\"a\", { pooling: () => \"mean\" })", /^embed: arguments cannot be sent to the worker \(.*\)/, "TypeError"],
    ["tokenize(\"\")", null],
  ];
  const got = await page.evaluate(async ({ url, rows }) => {
    const bert = await bertgpuWorker.Bert.load(url, { device: "cpu", cache: false });
    const out = [];
    for (const [src] of rows) {
      const call = new Function("model", `return model.${src};`);
      out.push(await attempt(() => call(bert)));
    }
    out.works = Array.from(await bert.embed("the model still works"));
    bert.dispose();
    return { out, works: out.works, reference };
  }, { url: env.models.url + TINY, rows: rows.map(([s]) => [s]) });
  rows.forEach(([src, re, name], i) => {
    if (re) assertError(src, got.out[i], re, name);
    else assert.deepEqual(got.out[i].value.tokens, ["[CLS]", "[SEP]"]);
  });
  assert.deepEqual(got.works, got.reference, "the worker's model still works, as the main thread's");
  page.checkErrors();
});
