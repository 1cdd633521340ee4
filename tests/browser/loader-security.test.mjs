// Security of loading (js/loader.js): only the files of the source the user gave are fetched; a pinned sha256 per
// file is checked before the bytes are used (cached copies included); maxBytes caps every file; and the package
// works under a strict Content-Security-Policy (no eval, no inline script: only 'wasm-unsafe-eval').
// tests/models/tiny-pretraining on the wasm CPU backend.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { start, openPage, ROOT } from "./harness.mjs";
import { serve } from "./server.mjs";

const TINY = "tests/models/tiny-pretraining/";
const FIXTURES = "target/browser-test/loader-security/";
const WEIGHTS_BYTES = fs.statSync(path.join(ROOT, TINY, "model.safetensors")).size;

let env;
let page;
let chunked; // serves the tiny model without content-length (chunked), so only the streamed bytes tell the size

const sha = (rel) => createHash("sha256").update(fs.readFileSync(path.join(ROOT, rel))).digest("hex");

before(async () => {
  fs.rmSync(path.join(ROOT, FIXTURES), { recursive: true, force: true });
  // A folder with vocab.txt and no tokenizer.json: the loader tries tokenizer.json, then vocab.txt.
  const vocabOnly = path.join(ROOT, FIXTURES, "vocab-only");
  fs.mkdirSync(vocabOnly, { recursive: true });
  for (const f of ["config.json", "tokenizer_config.json", "vocab.txt", "model.safetensors"]) {
    fs.copyFileSync(path.join(ROOT, TINY, f), path.join(vocabOnly, f));
  }
  const cli = path.join(ROOT, "target/debug/bertgpu");
  assert.ok(fs.existsSync(cli), "target/debug/bertgpu is missing: run `cargo build` first");
  execFileSync(cli, ["convert", "--model", path.join(ROOT, TINY), "--dtype", "f32",
    "--out", path.join(ROOT, FIXTURES, "tiny.gguf")], { stdio: "pipe" });

  chunked = http.createServer((req, res) => {
    const file = path.join(ROOT, TINY, path.basename(new URL(req.url, "http://x").pathname));
    if (!fs.existsSync(file)) {
      res.writeHead(404, { "access-control-allow-origin": "*" }).end();
      return;
    }
    res.writeHead(200, { "access-control-allow-origin": "*", "cache-control": "no-store" }); // no content-length
    fs.createReadStream(file, { highWaterMark: 16 * 1024 }).pipe(res);
  });
  await new Promise((r) => chunked.listen(0, "127.0.0.1", r));

  env = await start();
  page = await openPage(env);
  await page.evaluate(() => {
    window.attempt = async (fn) => {
      try {
        return { value: await fn() };
      } catch (e) {
        return { error: { name: e?.name, message: e?.message ?? String(e) } };
      }
    };
    window.embedWith = async (url, options) => {
      const bert = await bertgpu.Bert.load(url, { device: "cpu", ...options });
      const v = Array.from(await bert.embed("pinned"));
      bert.dispose();
      return v;
    };
  });
});

after(async () => {
  await env?.stop();
  await new Promise((r) => (chunked ? chunked.close(r) : r()));
  fs.rmSync(path.join(ROOT, FIXTURES), { recursive: true, force: true });
});

/** The model server's requests made by `fn` (paths). */
async function requestsOf(fn) {
  env.models.requests.length = 0;
  const out = await fn();
  return { out, requests: [...env.models.requests] };
}

test("only the files of the given source are fetched: a folder (tokenizer.json or vocab.txt), a .gguf", async () => {
  // Every request of the page (and its workers) goes to the page's own server (the package) or the model's.
  const seen = [];
  const record = (r) => seen.push(r.url());
  env.context.on("request", record);
  const folder = await requestsOf(() => page.evaluate((url) => embedWith(url, { cache: false }),
    env.models.url + TINY));
  // sentence-transformers' files are asked for too (absent here: the defaults apply).
  const st = ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"];
  assert.deepEqual(folder.requests, ["config.json", "tokenizer_config.json", "tokenizer.json", ...st, "model.safetensors"]
    .map((f) => `/${TINY}${f}`));
  const vocab = await requestsOf(() => page.evaluate((url) => embedWith(url, { cache: false }),
    env.models.url + FIXTURES + "vocab-only/"));
  assert.deepEqual(vocab.requests,
    ["config.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt", ...st, "model.safetensors"]
      .map((f) => `/${FIXTURES}vocab-only/${f}`));
  const gguf = await requestsOf(() => page.evaluate((url) => embedWith(url, { cache: false }),
    env.models.url + FIXTURES + "tiny.gguf"));
  assert.deepEqual(gguf.requests, [`/${FIXTURES}tiny.gguf`]);
  env.context.off("request", record);
  // (the listener works: it saw the model server's 16 requests)
  assert.equal(seen.filter((u) => u.startsWith(env.models.url)).length, 16, JSON.stringify(seen));
  const elsewhere = seen.filter((u) => !u.startsWith(env.site.url) && !u.startsWith(env.models.url));
  assert.deepEqual(elsewhere, [], "requests to other hosts");
  page.checkErrors(/404/); // the absent tokenizer.json of the vocab-only folder
});

test("a file the server does not have is remembered as absent, not taken for the file: a vocab-only folder reloads", async () => {
  // The Cache API ignores a URL's fragment when it matches, so the note of an absent tokenizer.json must not be
  // kept under tokenizer.json's own URL: a reload would read the empty note as the file.
  const url = env.models.url + FIXTURES + "vocab-only/";
  await page.evaluate(() => bertgpu.clearCache());
  const first = await requestsOf(() => page.evaluate((url) => embedWith(url, { cache: true }), url));
  const second = await requestsOf(() => page.evaluate((url) => attempt(() => embedWith(url, { cache: true })), url));
  await page.evaluate(() => bertgpu.clearCache());
  assert.deepEqual(first.requests, ["config.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt",
    "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "model.safetensors"]
    .map((f) => `/${FIXTURES}vocab-only/${f}`));
  assert.deepEqual(second.out, { value: first.out }, "the reload embeds as the first load did");
  assert.deepEqual(second.requests, [], "the reload comes from the cache, the absence included");
  page.checkErrors(/404/);
});

test("sha256: pinned files are checked before use, cached copies too; bad pins are TypeErrors", async () => {
  const pins = Object.fromEntries(["config.json", "tokenizer_config.json", "tokenizer.json", "model.safetensors"]
    .map((f) => [f, sha(TINY + f)]));
  const wrong = "0".repeat(64);
  // The byte holding the sign of the first embeddings LayerNorm γ (little-endian f32: its 4th byte).
  const st = fs.readFileSync(path.join(ROOT, TINY, "model.safetensors"));
  const headerLen = Number(st.readBigUInt64LE(0));
  const header = JSON.parse(st.subarray(8, 8 + headerLen).toString());
  const gammaSign = 8 + headerLen + header["bert.embeddings.LayerNorm.weight"].data_offsets[0] + 3;
  const got = await requestsOf(() => page.evaluate(async ({ url, gguf, pins, ggufPin, wrong, gammaSign }) => {
    await bertgpu.clearCache();
    const out = {};
    out.plain = await embedWith(url, { cache: false });
    out.pinned = await attempt(() => embedWith(url, { cache: true, sha256: pins }));
    out.upperCase = await attempt(() => embedWith(url, { cache: false,
      sha256: { "model.safetensors": pins["model.safetensors"].toUpperCase() } }));
    out.gguf = await attempt(() => embedWith(gguf, { cache: false, sha256: { "tiny.gguf": ggufPin } }));
    // The server's file is not the pinned one: rejected, and not cached.
    const cache = await caches.open("bertgpu-models-v1");
    const weightsUrl = url + "model.safetensors";
    await cache.delete(weightsUrl);
    out.mismatch = await attempt(() => embedWith(url, { cache: true, sha256: { "model.safetensors": wrong } }));
    out.cachedAfterMismatch = (await cache.match(weightsUrl)) != null;
    // A cached copy that is not the pinned file (damaged, or swapped by other code on this origin) is dropped and
    // downloaded again; without a pin the cache is trusted as before.
    await embedWith(url, { cache: true });
    const good = new Uint8Array(await (await cache.match(weightsUrl)).arrayBuffer());
    const bad = good.slice();
    bad[gammaSign] ^= 0x80; // the sign of the embeddings' LayerNorm γ[0]: still a valid file, another model
    await cache.put(weightsUrl, new Response(bad));
    out.unpinnedFromTamperedCache = await attempt(() => embedWith(url, { cache: true }));
    out.mark = performance.now();
    out.pinnedFromTamperedCache = await attempt(() => embedWith(url, { cache: true, sha256: pins }));
    out.cacheRepaired = (new Uint8Array(await (await cache.match(weightsUrl)).arrayBuffer()))
      .every((b, i) => b === good[i]);
    // A cached copy that is not a valid file at all (cut short on disk) is refused as it streams into the module,
    // dropped from the cache, and the next load downloads it again.
    await cache.put(weightsUrl, new Response(good.subarray(0, good.length >> 1)));
    out.damagedCache = await attempt(() => embedWith(url, { cache: true }));
    out.damagedDropped = (await cache.match(weightsUrl)) == null;
    out.afterDamaged = await attempt(() => embedWith(url, { cache: true }));
    // A cached copy that holds fewer bytes than it was stored with is downloaded again in the same load.
    await cache.put(weightsUrl, new Response(good.subarray(0, good.length >> 1),
      { headers: { "content-length": String(good.length) } }));
    out.shortCopy = await attempt(() => embedWith(url, { cache: true }));
    out.shortCopyRepaired = (await (await cache.match(weightsUrl))?.arrayBuffer())?.byteLength === good.length;
    // Pins that cannot be checked are TypeErrors before anything is fetched.
    const bad1 = await attempt(() => embedWith(url, { sha256: "abc" }));
    const bad2 = await attempt(() => embedWith(url, { sha256: { "model.onnx": wrong } }));
    const bad3 = await attempt(() => embedWith(url, { sha256: { "model.safetensors": "xyz" } }));
    const bad4 = await attempt(() => bertgpu.Bert.load({ config: "{}", tokenizer: "{}", weights: new Uint8Array(8) },
      { sha256: { "model.safetensors": wrong } }));
    const bad5 = await attempt(() => embedWith(gguf, { sha256: { "model.safetensors": wrong } }));
    out.bad = [bad1, bad2, bad3, bad4, bad5];
    await bertgpu.clearCache();
    return out;
  }, { url: env.models.url + TINY, gguf: env.models.url + FIXTURES + "tiny.gguf", pins,
    ggufPin: sha(FIXTURES + "tiny.gguf"), wrong, gammaSign }));
  const { out } = got;
  assert.deepEqual(out.pinned.value, out.plain);
  assert.deepEqual(out.upperCase.value, out.plain, "hex digits in either case");
  assert.deepEqual(out.gguf.value, out.plain, "a pinned .gguf");
  assert.ok(out.mismatch.error);
  assert.match(out.mismatch.error.message, new RegExp(`^Bert\\.load: model\\.safetensors from .* has SHA-256 `
    + `${pins["model.safetensors"]}, but ${wrong} was pinned for it; .*it was not used`));
  assert.equal(out.cachedAfterMismatch, false, "a file that fails its pin is not cached");
  assert.ok(out.unpinnedFromTamperedCache.value, "without a pin the cache is used");
  assert.notDeepEqual(out.unpinnedFromTamperedCache.value, out.plain, "(the tampered weight changes the vector)");
  assert.deepEqual(out.pinnedFromTamperedCache.value, out.plain, "the pinned load ignored the tampered copy");
  assert.ok(out.cacheRepaired, "and replaced it in the cache");
  assert.match(out.damagedCache.error?.message ?? "accepted", /^Bert\.load: model\.safetensors: .*not a valid safetensors file .*truncated/);
  assert.ok(out.damagedDropped, "the damaged cached copy is dropped");
  assert.deepEqual(out.afterDamaged.value, out.plain, "the next load downloads it again");
  assert.deepEqual(out.shortCopy.value, out.plain, `a short cached copy is downloaded again: ${out.shortCopy.error?.message}`);
  assert.ok(out.shortCopyRepaired, "and replaced in the cache");
  const res = [
    /^Bert\.load: sha256 must be an object \{ fileName: hex digest \}/,
    /^Bert\.load: sha256 names "model\.onnx", which this source does not fetch \(it fetches config\.json, tokenizer_config\.json, tokenizer\.json, vocab\.txt, model\.safetensors, pytorch_model\.bin; and sentence-transformers' modules\.json, /,
    /^Bert\.load: sha256\["model\.safetensors"\] must be 64 hex digits/,
    /^Bert\.load: sha256 checks downloaded files; a bytes source is used as given/,
    /^Bert\.load: sha256 names "model\.safetensors", which this source does not fetch \(it fetches tiny\.gguf\)/,
  ];
  out.bad.forEach((b, i) => {
    assert.ok(b.error, `bad pin ${i} was accepted`);
    assert.equal(b.error.name, "TypeError");
    assert.match(b.error.message, res[i]);
  });
  page.checkErrors();
});

test("a download with onProgress is cached in parts; a part missing, cut short or altered is downloaded again", async () => {
  const url = env.models.url + "models/splade-tiny/";
  const weights = fs.readFileSync(path.join(ROOT, "models/splade-tiny/model.safetensors"));
  const pin = createHash("sha256").update(weights).digest("hex");
  const weightRequests = (r) => r.requests.filter((p) => p.endsWith("/model.safetensors")).length;
  await page.evaluate(() => {
    window.partsOf = async (url) => {
      const cache = await caches.open("bertgpu-models-v1");
      const entry = await cache.match(url + "model.safetensors");
      const n = Number(entry?.headers.get("x-bertgpu-parts"));
      const parts = [];
      for (let k = 0; k < n; k++) {
        const hit = await cache.match(`${url}model.safetensors?bertgpu-cache=part-${k}`);
        parts.push(hit ? new Uint8Array(await hit.arrayBuffer()) : null);
      }
      const joined = new Uint8Array(parts.reduce((a, p) => a + (p?.length ?? 0), 0));
      parts.reduce((at, p) => (p ? (joined.set(p, at), at + p.length) : at), 0);
      const sha = Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", joined)),
        (b) => b.toString(16).padStart(2, "0")).join("");
      return { n, length: entry?.headers.get("x-bertgpu-length"), sizes: parts.map((p) => p?.length ?? null), sha };
    };
    window.damagePart = async (url, k, how, at) => {
      const cache = await caches.open("bertgpu-models-v1");
      const key = `${url}model.safetensors?bertgpu-cache=part-${k}`;
      const bytes = new Uint8Array(await (await cache.match(key)).arrayBuffer());
      if (how === "missing") await cache.delete(key);
      if (how === "short") await cache.put(key, new Response(bytes.subarray(0, 1000)));
      if (how === "altered") {
        bytes[at] ^= 0x80; // a weight's sign: still a valid file, another model
        await cache.put(key, new Response(bytes));
      }
    };
  });
  await page.evaluate(() => bertgpu.clearCache());
  const load = (options) => requestsOf(() => page.evaluate(({ url, options }) =>
    attempt(() => embedWith(url, { cache: true, onProgress: () => {}, ...options })), { url, options }));
  const first = await load({});
  assert.ok(first.out.value, JSON.stringify(first.out.error));
  const stored = await page.evaluate((url) => partsOf(url), url);
  const PART = 4 << 20;
  assert.equal(stored.n, Math.ceil(weights.length / PART), `parts of ${PART} bytes`);
  assert.equal(stored.length, String(weights.length));
  assert.deepEqual(stored.sizes, Array.from({ length: stored.n }, (_, k) => Math.min(PART, weights.length - k * PART)));
  assert.equal(stored.sha, pin, "the parts hold the file's bytes");
  const again = await load({});
  assert.deepEqual(again.out.value, first.out.value);
  assert.equal(weightRequests(again), 0, "a reload reads the parts from the cache");
  for (const how of ["missing", "short"]) {
    await page.evaluate(({ url, how }) => damagePart(url, 2, how), { url, how });
    const got = await load({});
    assert.deepEqual(got.out.value, first.out.value, `a part ${how}: ${got.out.error?.message}`);
    assert.equal(weightRequests(got), 1, `a part ${how}: downloaded again in the same load`);
    assert.equal((await page.evaluate((url) => partsOf(url), url)).sha, pin, `a part ${how}: stored whole again`);
  }
  // The sign of a value of the first query weight, which every embedding goes through.
  const headerLen = Number(weights.readBigUInt64LE(0));
  const header = JSON.parse(weights.subarray(8, 8 + headerLen).toString());
  const [from, to] = header["bert.encoder.layer.0.attention.self.query.weight"].data_offsets;
  const at = 8 + headerLen + ((from + to) >> 1) + 3; // (little-endian f32: the byte with the sign)
  await page.evaluate(({ url, k, at }) => damagePart(url, k, "altered", at), { url, k: Math.floor(at / PART), at: at % PART });
  const unpinned = await load({});
  assert.ok(unpinned.out.value && weightRequests(unpinned) === 0, "without a pin the cache is trusted");
  assert.notDeepEqual(unpinned.out.value, first.out.value, "(the altered byte changes the vector)");
  const pinned = await load({ sha256: { "model.safetensors": pin } });
  assert.deepEqual(pinned.out.value, first.out.value, "a pinned load ignores the altered part");
  assert.equal(weightRequests(pinned), 1);
  assert.equal((await page.evaluate((url) => partsOf(url), url)).sha, pin, "and stores the file again");
  await page.evaluate(() => bertgpu.clearCache());
  page.checkErrors();
});

test("maxBytes caps each file: from content-length, while streaming without one, and from the cache", async () => {
  const limit = 100_000; // below the weights (154 KB), above every other file
  const got = await page.evaluate(async ({ url, chunkedUrl, limit }) => {
    await bertgpu.clearCache();
    const out = {};
    out.declared = await attempt(() => embedWith(url, { cache: false, maxBytes: limit }));
    out.streamed = await attempt(() => embedWith(chunkedUrl, { cache: false, maxBytes: limit }));
    out.fits = await attempt(() => embedWith(chunkedUrl, { cache: false, maxBytes: 200_000 }));
    await embedWith(url, { cache: true });
    out.cached = await attempt(() => embedWith(url, { cache: true, maxBytes: limit }));
    out.badOption = await attempt(() => embedWith(url, { maxBytes: "1GB" }));
    await bertgpu.clearCache();
    return out;
  }, { url: env.models.url + TINY, chunkedUrl: `http://127.0.0.1:${chunked.address().port}/`, limit });
  const over = (verb) => new RegExp(`^Bert\\.load: model\\.safetensors ${verb} \\d+ bytes, over the maxBytes limit `
    + `of ${limit} bytes; pass a larger maxBytes`);
  assert.match(got.declared.error?.message ?? "", over("is"));
  assert.match(got.declared.error.message, new RegExp(`is ${WEIGHTS_BYTES} bytes`), "the size from content-length");
  // Without a content-length: the bytes counted as they stream, or, when a first piece holds the file's header and
  // is under the cap, that header, which tells the file's size before the bytes past the cap arrive.
  assert.match(got.streamed.error?.message ?? "", new RegExp(`^Bert\\.load: model\\.safetensors (grew past \\d+|is `
    + `${WEIGHTS_BYTES}) bytes, over the maxBytes limit of ${limit} bytes; pass a larger maxBytes`));
  assert.ok(got.fits.value, `under the cap: ${got.fits.error?.message}`);
  assert.match(got.cached.error?.message ?? "", over("is"));
  assert.equal(got.badOption.error?.name, "TypeError");
  assert.match(got.badOption.error.message, /^Bert\.load: maxBytes must be a positive integer number of bytes \(got "1GB"\)/);
  page.checkErrors();
});

test("a strict Content-Security-Policy: the package loads and embeds with only 'wasm-unsafe-eval' (page and worker)", async () => {
  const models = new URL(env.models.url).origin;
  const policy = (scripts) => `default-src 'self'; script-src ${scripts}; connect-src 'self' ${models}; `
    + "worker-src 'self'; object-src 'none'; base-uri 'none'";
  const strict = await serve(ROOT, { headers: { "content-security-policy": policy("'self' 'wasm-unsafe-eval'") } });
  // The control: the same page without 'wasm-unsafe-eval' must fail, or the policy is not being applied at all.
  const noWasm = await serve(ROOT, { headers: { "content-security-policy": policy("'self'") } });
  try {
    const run = async (site) => {
      const p = await env.context.newPage();
      const errors = [];
      p.on("console", (m) => m.type() === "error" && errors.push(m.text()));
      p.on("pageerror", (e) => errors.push(`uncaught: ${e.message}`));
      await p.goto(`${site.url}tests/browser/csp.html?model=${encodeURIComponent(env.models.url + TINY)}`);
      await p.waitForFunction(() => window.result, null, { timeout: 60_000 });
      const out = await p.evaluate(() => ({ result: window.result, violations: window.violations }));
      await p.close();
      return { ...out, errors };
    };
    const ok = await run(strict);
    const blocked = await run(noWasm);
    const reference = await page.evaluate(async (url) => {
      const bert = await bertgpu.Bert.load(url, { device: "cpu", cache: false });
      const v = Array.from(await bert.embed("a strict policy"));
      bert.dispose();
      return v;
    }, env.models.url + TINY);
    console.log(`# CSP: without 'wasm-unsafe-eval' Bert.load fails with: ${blocked.result.error}`);
    assert.equal(ok.result.error, undefined, `under the strict policy: ${ok.result.error}`);
    assert.deepEqual(ok.violations, []);
    // (Chromium asks for /favicon.ico, which the server does not have: its 404 is the only console error.)
    assert.deepEqual(ok.errors.filter((e) => !/404 \(Not Found\)/.test(e)), []);
    assert.deepEqual(ok.result.main, reference);
    assert.deepEqual(ok.result.worker, reference);
    assert.match(blocked.result.error ?? "", /WebAssembly|wasm|Content Security Policy|CompileError/i,
      "without 'wasm-unsafe-eval' the module must be refused");
    assert.ok(blocked.violations.some((v) => v.startsWith("script-src")), JSON.stringify(blocked.violations));
  } finally {
    await strict.close();
    await noWasm.close();
  }
  page.checkErrors();
});
