// The npm package in headless Chromium: loading (URL, repo id, bytes), the Cache API, input validation, queued
// calls, panics, and the worker entry. Run: scripts/build-wasm.sh && node --test tests/browser/
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { ROOT, readJson, withPage } from "./harness.mjs";

// splade-tiny: a real 2-layer BERT whose tokenizer the fill-mask goldens (PyTorch) tokenized.
const TINY = "models/splade-tiny/";
const MINILM = "models/all-MiniLM-L6-v2/";

const ctx = withPage();

test("tokenize equals transformers on the golden table (tokenizer.json, and vocab.txt given as bytes)", async () => {
  const golden = readJson("tests/golden/tokens.json");
  // Cases with their own max_length need an option the JS API does not have; the rest use the model's limit.
  const cases = golden.cases.map((c, i) => ({ ...c, i })).filter((c) => c.max_length == null);
  assert.ok(cases.length > 30);
  const got = await ctx.page.evaluate(async ({ tiny, minilm, cases }) => {
    const run = (bert) => Promise.all(cases.map((c) => bert.tokenize(c.text, c.text_pair)));
    const fromJson = await bertgpu.Bert.load(tiny, { device: "cpu" });
    const tinyOut = await run(fromJson);
    const many = await fromJson.tokenize(cases.map((c) => c.text)); // pairs ignored here
    fromJson.dispose();
    const get = async (f) => new Uint8Array(await (await fetch(minilm + f)).arrayBuffer());
    const fromVocab = await bertgpu.Bert.load({
      config: await get("config.json"), vocab: await get("vocab.txt"),
      tokenizerConfig: await get("tokenizer_config.json"), weights: await get("model.safetensors"),
    }, { device: "cpu" });
    const minilmOut = await run(fromVocab);
    fromVocab.dispose();
    return { tinyOut, many, minilmOut };
  }, { tiny: ctx.env.models.url + TINY, minilm: ctx.env.models.url + MINILM, cases });
  const strip = (r) => ({ input_ids: r.input_ids, token_type_ids: r.token_type_ids, tokens: r.tokens });
  for (const [model, out] of [["splade-tiny", got.tinyOut], ["all-MiniLM-L6-v2", got.minilmOut]]) {
    cases.forEach((c, k) => {
      assert.deepEqual(strip(out[k]), strip(golden.models[model].results[c.i]), `${model}, case ${c.name}`);
    });
  }
  // An array of texts gives the array of results (cases without a pair).
  const singles = cases.map((c, k) => [c, k]).filter(([c]) => c.text_pair == null);
  assert.deepEqual(singles.map(([, k]) => strip(got.many[k])), singles.map(([c]) => strip(golden.models["splade-tiny"].results[c.i])));
  ctx.page.checkErrors();
});

test("loads from bytes, and from a Hugging Face repo id (hub URLs routed to the local files): the folder's model", async () => {
  const hub = [];
  // The hub is unreachable here: answer its resolve/main/ URLs from the local folder, to check the URLs we ask for.
  await ctx.page.route("https://huggingface.co/**", async (route) => {
    const url = new URL(route.request().url());
    hub.push(url.pathname);
    const m = url.pathname.match(/^\/prajjwal1\/splade-tiny\/resolve\/main\/(.+)$/);
    const file = m && path.join(ROOT, TINY, m[1]);
    if (file && fs.existsSync(file)) {
      await route.fulfill({ status: 200, body: fs.readFileSync(file), headers: { "access-control-allow-origin": "*" } });
    } else {
      await route.fulfill({ status: 404, body: "not found", headers: { "access-control-allow-origin": "*" } });
    }
  });
  // The same texts through the folder (checked against PyTorch in embed.test.mjs), the bytes and the hub.
  const texts = readJson("tests/golden/model.json")["splade-tiny"].sentences;
  const got = await ctx.page.evaluate(async ({ base, texts }) => {
    const run = async (bert) => {
      const out = { tokens: await bert.tokenize("hello world"),
        vectors: (await bert.embed(texts, { normalize: false })).map((v) => Array.from(v)) };
      bert.dispose();
      return out;
    };
    const get = async (f) => new Uint8Array(await (await fetch(base + f)).arrayBuffer());
    const folder = await run(await bertgpu.Bert.load(base, { device: "cpu", cache: false }));
    const fromBytes = await run(await bertgpu.Bert.load(
      { config: await get("config.json"), tokenizer: await get("tokenizer.json"), weights: await get("model.safetensors") },
      { device: "cpu" }));
    const fromHub = await run(await bertgpu.Bert.load("prajjwal1/splade-tiny", { device: "cpu", cache: false }));
    return { folder, fromBytes, fromHub };
  }, { base: ctx.env.models.url + TINY, texts });
  await ctx.page.unroute("https://huggingface.co/**");
  assert.deepEqual(got.folder.tokens.tokens, ["[CLS]", "hello", "world", "[SEP]"]);
  assert.equal(got.folder.vectors.length, texts.length);
  assert.ok(got.folder.vectors.every((v) => v.length === 128 && v.every(Number.isFinite)));
  // The same weights on the same backend: the same tokens and vectors, bit for bit.
  assert.deepEqual(got.fromBytes, got.folder, "loaded from bytes");
  assert.deepEqual(got.fromHub, got.folder, "loaded from the hub");
  assert.ok(hub.includes("/prajjwal1/splade-tiny/resolve/main/config.json"), hub.join(" "));
  assert.ok(hub.includes("/prajjwal1/splade-tiny/resolve/main/model.safetensors"), hub.join(" "));
  ctx.page.checkErrors();
});

test("the second load works with the model server stopped (Cache API); cache: false does not cache", async () => {
  // A server of its own, so stopping it cuts exactly the model downloads.
  const { serve } = await import("./server.mjs");
  const own = await serve(ROOT, { cors: true });
  const url = own.url + TINY;
  const first = await ctx.page.evaluate(async (url) => {
    const events = [];
    const bert = await bertgpu.Bert.load(url, { device: "cpu", onProgress: (p) => events.push(p) });
    const t = await bert.tokenize("offline test");
    bert.dispose();
    return { events, t };
  }, url);
  const weights = first.events.filter((e) => e.file === "model.safetensors");
  const size = fs.statSync(path.join(ROOT, TINY, "model.safetensors")).size;
  assert.ok(weights.length >= 2, "progress reported while streaming");
  assert.deepEqual(weights.at(-1), { file: "model.safetensors", loaded: size, total: size });
  assert.ok(own.requests.includes(`/${TINY}model.safetensors`));

  await own.close();
  const second = await ctx.page.evaluate(async (url) => {
    const reachable = await fetch(url + "config.json").then(() => true, () => false);
    const events = [];
    const bert = await bertgpu.Bert.load(url, { device: "cpu", onProgress: (p) => events.push(p) });
    const t = await bert.tokenize("offline test");
    bert.dispose();
    const uncached = await bertgpu.Bert.load(url, { device: "cpu", cache: false }).then(
      () => "loaded", (e) => e.message);
    return { reachable, events, t, uncached };
  }, url);
  assert.equal(second.reachable, false, "the model server is really down");
  assert.deepEqual(second.t, first.t);
  assert.ok(second.events.every((e) => e.cached === true), JSON.stringify(second.events));
  assert.match(second.uncached, /could not download .*config\.json/);
  // The failed fetch of the `cache: false` load is logged by Chromium itself ("net::ERR_CONNECTION_REFUSED").
  ctx.page.checkErrors(/ERR_CONNECTION_REFUSED/);
});

test("bad inputs are rejected with clear errors", async () => {
  const got = await ctx.page.evaluate(async (url) => {
    const msg = (p) => p.then(() => "no error", (e) => `${e.name}: ${e.message}`);
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const out = {
      device: await msg(bertgpu.Bert.load(url, { device: "gpu" })),
      option: await msg(bertgpu.Bert.load(url, { devise: "cpu" })),
      source: await msg(bertgpu.Bert.load({ config: "{}" })),
      notFound: await msg(bertgpu.Bert.load(url.replace("splade-tiny", "no-such-model"), { device: "cpu" })),
      number: await msg(bert.tokenize(42)),
      arrayItem: await msg(bert.tokenize(["ok", null])),
      pairs: await msg(bert.tokenize(["a", "b"], ["c"])),
    };
    bert.dispose();
    out.disposed = await msg(bert.tokenize("after dispose"));
    return out;
  }, ctx.env.models.url + TINY);
  assert.match(got.device, /^TypeError: Bert\.load: device must be one of "auto", "webgpu", "cpu" \(got "gpu"\)/);
  assert.match(got.option, /unknown option "devise"/);
  assert.match(got.source, /lacks weights, tokenizer/);
  assert.match(got.notFound, /HTTP 404.*config\.json/);
  assert.match(got.number, /^TypeError: tokenize: text must be a string or an array of strings \(got number\)/);
  assert.match(got.arrayItem, /text\[1\] must be a string \(got null\)/);
  assert.match(got.pairs, /2 texts but 1 pair texts/);
  assert.match(got.disposed, /disposed; load it again/);
  ctx.page.checkErrors(/404/);
});

test("overlapping calls are queued and give the results of sequential calls", async () => {
  const got = await ctx.page.evaluate(async (url) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const texts = Array.from({ length: 12 }, (_, i) => `sentence number ${i} about ${"cats ".repeat(i)}`);
    const sequential = [];
    for (const t of texts) sequential.push(await bert.tokenize(t));
    // All started before any finished, plus one that fails in the middle of the queue.
    const overlapped = await Promise.all(texts.map((t) => bert.tokenize(t)));
    const mixed = await Promise.allSettled([bert.tokenize("a"), bert.tokenize(7), bert.tokenize("b")]);
    bert.dispose();
    return { sequential, overlapped, mixed: mixed.map((r) => r.status) };
  }, ctx.env.models.url + TINY);
  assert.deepEqual(got.overlapped, got.sequential);
  assert.deepEqual(got.mixed, ["fulfilled", "rejected", "fulfilled"]);
  ctx.page.checkErrors();
});

test("a Rust panic rejects the call, is logged, and a fresh load works afterwards", async () => {
  const got = await ctx.page.evaluate(async (url) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const before = await bert.tokenize("still alive");
    // The module the wrapper uses (of its two builds, the one `simd` names); __debugPanic exists for this test only.
    const glue = await import(`/pkg/${bert.simd === "relaxed" ? "wasm-relaxed" : "wasm"}/bertgpu.js`);
    let thrown;
    try {
      glue.__debugPanic();
    } catch (e) {
      thrown = `${e.name}: ${e.message}`;
    }
    const after = await bert.tokenize("still alive").then(() => "worked", (e) => e.message);
    const again = await bertgpu.Bert.load(url, { device: "cpu" });
    const fresh = await again.tokenize("still alive");
    again.dispose();
    return { before, thrown, after, fresh };
  }, ctx.env.models.url + TINY);
  assert.match(got.thrown, /RuntimeError: unreachable/);
  assert.match(got.after, /^tokenize: this model stopped working after an internal error \(.*deliberate panic.*\); load it again with Bert\.load$/s);
  assert.deepEqual(got.fresh, got.before);
  assert.ok(ctx.page.errors.some((e) => /deliberate panic/.test(e)), "the panic hook logged the message");
  ctx.page.checkErrors(/deliberate panic/);
});

test("a trap that is not a panic (out of memory) while a call is suspended rejects it; a fresh load works", async () => {
  const got = await ctx.page.evaluate(async (url) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const before = await bert.tokenize("still alive");
    // Through the queue every call takes; the allocation fails after the call suspended once, so the trap comes from
    // wasm-bindgen's task queue (a microtask). __debugOutOfMemoryAfterAwait exists for this test only.
    const call = bert._enqueue("debug", () => bert._rt.glue.__debugOutOfMemoryAfterAwait());
    const waited = new Promise((resolve) => setTimeout(() => resolve("still pending after 20 s"), 20000));
    const trapped = await Promise.race([call.then(() => "resolved", (e) => e.message), waited]);
    const after = await bert.tokenize("still alive").then(() => "worked", (e) => e.message);
    const again = await bertgpu.Bert.load(url, { device: "cpu" });
    const fresh = await again.tokenize("still alive");
    again.dispose();
    return { before, trapped, after, fresh };
  }, ctx.env.models.url + TINY);
  const why = "a trap that was not a panic \\(RuntimeError: unreachable\\), e\\.g\\. the module ran out of memory";
  assert.match(got.trapped, new RegExp(`^bertgpu: internal error \\(${why}\\)$`));
  assert.match(got.after, new RegExp(`^tokenize: this model stopped working after an internal error \\(${why}\\); load it again`));
  assert.deepEqual(got.fresh, got.before);
  ctx.page.checkErrors(/unreachable/);
});

test("the worker entry has the same API and results", async () => {
  const got = await ctx.page.evaluate(async (url) => {
    const events = [];
    const main = await bertgpu.Bert.load(url, { device: "cpu" });
    const inWorker = await bertgpuWorker.Bert.load(url, { device: "cpu", onProgress: (p) => events.push(p.file) });
    const texts = ["the worker entry", "runs off the main thread"];
    const a = await main.tokenize(texts);
    const [b, c] = await Promise.all([inWorker.tokenize(texts), inWorker.tokenize(texts[0], "pair")]);
    const bad = await inWorker.tokenize(3).then(() => "no error", (e) => `${e.name}: ${e.message}`);
    const device = inWorker.device;
    main.dispose();
    inWorker.dispose();
    const disposed = await inWorker.tokenize("x").then(() => "no error", (e) => e.message);
    return { a, b, c, bad, device, disposed, events: [...new Set(events)] };
  }, ctx.env.models.url + TINY);
  assert.deepEqual(got.b, got.a);
  assert.deepEqual(got.c.token_type_ids.at(-1), 1);
  assert.match(got.bad, /^TypeError: tokenize: text must be a string/);
  assert.equal(got.device, "cpu");
  assert.match(got.disposed, /disposed/);
  assert.ok(got.events.includes("model.safetensors"));
  ctx.page.checkErrors();
});
