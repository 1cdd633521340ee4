// Model sources → the bytes the wasm module loads: HF-style folders, .gguf URLs, Hugging Face repo ids, or bytes.
// Downloads stream (onProgress per chunk) and land in the Cache API so a second load works offline. In Node.js,
// local paths and file: URLs are read from the disk (Node's fetch cannot read file: URLs, and it has no Cache API).

const CACHE_NAME = "bertgpu-models-v1";
/** Default of `maxBytes`: no file of a BERT checkpoint comes near it (BERT-large f32 is 1.3 GB), and a wasm32 module
 * cannot hold much more next to the model it builds from the file. */
export const DEFAULT_MAX_BYTES = 2 * 1024 ** 3;
const HF_HUB = "https://huggingface.co";

/** A Hugging Face repo id: `name` or `owner/name` (no scheme, not starting with `.` or `/`). */
const REPO_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*(\/[A-Za-z0-9][A-Za-z0-9_.-]*)?$/;

/**
 * Node.js (or a runtime that copies its API), not a browser: files come from the disk. Checked by the absence of
 * `window` and `importScripts` too, so that a page or worker with a `process` polyfill is not taken for Node.
 */
export const IN_NODE = typeof globalThis.process?.versions?.node === "string"
  && typeof globalThis.window === "undefined" && typeof globalThis.importScripts === "undefined";

/**
 * A Node.js built-in module (`"node:fs/promises"`, `"node:url"`, ...) through `process.getBuiltinModule` (Node
 * 20.16+): a plain function call, which bundlers building for the browser neither follow nor try to resolve.
 */
export function nodeBuiltin(name) {
  const get = globalThis.process?.getBuiltinModule;
  if (typeof get !== "function") {
    throw new Error(`bertgpu: reading files in Node.js needs Node 20.16 or newer (process.getBuiltinModule); this is `
      + `Node ${globalThis.process?.versions?.node}`);
  }
  return get(name);
}

/** A local path (Node.js): absolute, `./` or `../` (either slash), `~` is not expanded; Windows drive paths too. */
const LOCAL_PATH = /^(\/|\\|\.{1,2}([\\/]|$)|[A-Za-z]:[\\/])/;

function baseUrl() {
  // Relative URLs resolve against the page (or, inside a worker, the worker script's location).
  return globalThis.location ? globalThis.location.href : undefined;
}

/** The file: URL of a local path in Node.js (relative paths against the working directory). */
function fileUrl(p) {
  const { pathToFileURL } = nodeBuiltin("node:url");
  const { resolve } = nodeBuiltin("node:path");
  return pathToFileURL(resolve(p));
}

/**
 * What a source names. Returns one of
 *   { kind: "bytes", files }                       user-supplied bytes
 *   { kind: "folder", base }                       a URL ending in "/" (config.json, tokenizer.json, ... below it)
 *   { kind: "gguf", url }
 */
export function resolveSource(source) {
  if (source == null) {
    throw new TypeError(`Bert.load: no source given; pass a model folder ${IN_NODE ? "path or " : ""}URL, a .gguf `
      + "URL, a Hugging Face repo id, or { config, tokenizer, weights } bytes");
  }
  if (source instanceof URL) source = source.href;
  if (typeof source === "string") {
    const s = source.trim();
    if (s === "") throw new TypeError("Bert.load: the source is an empty string");
    const local = IN_NODE && LOCAL_PATH.test(s);
    const looksLikeUrl = local || /^[a-z][a-z0-9+.-]*:/i.test(s) || s.startsWith("/") || s.startsWith(".");
    if (!looksLikeUrl && REPO_ID.test(s) && !s.toLowerCase().endsWith(".gguf")) {
      return { kind: "folder", base: `${HF_HUB}/${s}/resolve/main/`, repo: s };
    }
    let url = local ? fileUrl(s) : null;
    try {
      url ??= new URL(s, baseUrl());
    } catch {
      throw new TypeError(IN_NODE
        ? `Bert.load: "${s}" is neither a path, a URL nor a Hugging Face repo id (like "owner/name"); relative `
          + "paths must start with \"./\" or \"../\""
        : `Bert.load: "${s}" is neither a URL nor a Hugging Face repo id (like "owner/name"); `
          + "relative URLs must start with \"./\" or \"/\"");
    }
    if (url.pathname.toLowerCase().endsWith(".gguf")) return { kind: "gguf", url: url.href };
    if (!url.pathname.endsWith("/")) url.pathname += "/";
    return { kind: "folder", base: url.href };
  }
  if (typeof source === "object") {
    const files = bytesSource(source);
    return { kind: "bytes", files };
  }
  throw new TypeError(`Bert.load: unsupported source of type ${typeof source}`);
}

/** A string, ArrayBuffer, typed array or (for config) plain object → Uint8Array. */
function toBytes(value, what) {
  if (value instanceof Uint8Array) return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (typeof value === "string") return new TextEncoder().encode(value);
  if (what === "config" && value && typeof value === "object") {
    return new TextEncoder().encode(JSON.stringify(value));
  }
  throw new TypeError(`Bert.load: \`${what}\` must be a string, an ArrayBuffer or a Uint8Array (got ${describe(value)})`);
}

function describe(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return typeof v === "object" ? (v.constructor?.name ?? "object") : typeof v;
}

function bytesSource(src) {
  if (src.gguf != null) return { gguf: toBytes(src.gguf, "gguf") };
  const missing = ["config", "weights"].filter((k) => src[k] == null);
  if (src.tokenizer == null && src.vocab == null) missing.push("tokenizer");
  if (missing.length) {
    throw new TypeError(`Bert.load: the bytes source lacks ${missing.join(", ")}; pass { config, tokenizer, weights } `
      + "(config.json, tokenizer.json and model.safetensors contents) or { gguf }");
  }
  const files = { config: toBytes(src.config, "config"), weights: toBytes(src.weights, "weights") };
  if (src.tokenizer != null) files.tokenizer = toBytes(src.tokenizer, "tokenizer");
  if (src.vocab != null) files.vocab = toBytes(src.vocab, "vocab");
  if (src.tokenizerConfig != null) files.tokenizerConfig = toBytes(src.tokenizerConfig, "tokenizerConfig");
  if (src.sentence != null) {
    if (typeof src.sentence !== "object" || Array.isArray(src.sentence)) {
      throw new TypeError("Bert.load: sentence must be an object of sentence-transformers' files by path, e.g. "
        + "{ \"modules.json\": bytes, \"1_Pooling/config.json\": bytes }");
    }
    files.sentence = Object.entries(src.sentence).map(([name, bytes]) => [name, toBytes(bytes, `sentence["${name}"]`)]);
  }
  return files;
}

async function openCache(enabled, cacheDir) {
  if (!enabled) return null;
  if (cacheDir != null) return diskCache(cacheDir);
  if (typeof caches === "undefined") return null;
  try {
    return await caches.open(CACHE_NAME);
  } catch {
    return null; // e.g. an insecure context or storage disabled: downloads still work, just not offline
  }
}

/**
 * Node.js: the Cache API's part for `fetchFile` (match, put, delete), kept in a folder: one file per URL, named by
 * the SHA-256 of the URL; written to a temporary name and renamed, so that a reader never sees half a file. The
 * headers this package reads back (a file cached in parts: `cacheParts`) are kept beside it, in `<name>.headers`.
 */
function diskCache(dir) {
  const fs = nodeBuiltin("node:fs/promises");
  const { join } = nodeBuiltin("node:path");
  const { createHash } = nodeBuiltin("node:crypto");
  const file = (url) => join(dir, createHash("sha256").update(url).digest("hex"));
  let written = 0;
  const write = async (to, bytes) => {
    const tmp = `${to}.${globalThis.process.pid}-${(written += 1)}.part`;
    await fs.writeFile(tmp, bytes);
    await fs.rename(tmp, to);
  };
  return {
    async match(url) {
      const bytes = await fs.readFile(file(url)).catch(() => null);
      if (!bytes) return undefined;
      // (unreadable: none; the entry of a file stored in parts then reads as an empty file, which a load refuses)
      const headers = await fs.readFile(`${file(url)}.headers`, "utf8").then((t) => new Headers(JSON.parse(t)))
        .catch(() => new Headers());
      return new Response(bytes, { headers });
    },
    async put(url, response) {
      const bytes = new Uint8Array(await response.arrayBuffer());
      const kept = Object.fromEntries([PARTS_HEADER, LENGTH_HEADER].filter((h) => response.headers.has(h))
        .map((h) => [h, response.headers.get(h)]));
      await fs.mkdir(dir, { recursive: true });
      if (Object.keys(kept).length) await write(`${file(url)}.headers`, JSON.stringify(kept));
      else await fs.rm(`${file(url)}.headers`, { force: true });
      await write(file(url), bytes);
    },
    async delete(url) {
      await fs.rm(`${file(url)}.headers`, { force: true });
      return fs.unlink(file(url)).then(() => true, () => false);
    },
  };
}

function tooBig(name, size, maxBytes, known) {
  return new Error(`Bert.load: ${name} ${known ? "is" : "grew past"} ${size} bytes, over the maxBytes limit of `
    + `${maxBytes} bytes; pass a larger maxBytes to Bert.load if you trust this file`);
}

/** Lower-case hex SHA-256 of `bytes` (Web Crypto: secure contexts only, i.e. https or localhost). */
async function sha256Hex(bytes, name) {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) {
    throw new Error(`Bert.load: checking the sha256 of ${name} needs crypto.subtle, which browsers only offer to `
      + "secure contexts (https:// or localhost)");
  }
  const digest = new Uint8Array(await subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Fetches one file, from the cache when there, else from the network (streamed, reporting progress) into the cache.
 * Returns Uint8Array, or null when `optional` and the server says 404. `maxBytes` caps the size (checked against
 * content-length before downloading, and as bytes arrive); `sha256`, when given, must match the bytes, which are
 * checked before they are used (a cached copy that does not match is dropped and downloaded again; a download
 * that does not match is not left in the cache).
 * `stream` (the weights file): `async ({ total, limit, hash }) => WeightStream` (src/wasm/stream.rs), which each
 * piece is pushed to as it arrives instead of being assembled in JS memory; the result is then the finished stream,
 * its SHA-256 computed as it went. `cacheFirst`: see `fetchModelFiles`.
 */
async function fetchFile(url, name, { cache, onProgress, optional = false, fetchOptions, maxBytes = DEFAULT_MAX_BYTES,
  sha256 = null, stream = null, cacheFirst = false }) {
  // A pinned file must be there: falling back to another file (vocab.txt for tokenizer.json) would skip the check.
  optional = optional && sha256 == null;
  const sink = stream && ((total) => stream({ total, limit: maxBytes, hash: sha256 != null }));
  if (url.startsWith("file:") && IN_NODE) return readLocalFile(url, name, { onProgress, optional, maxBytes, sha256, sink });
  if (cache) {
    const hit = await cache.match(url);
    if (hit) {
      // Stored whole (a response as it came), or in parts (`cacheParts`): then `hit` says how many and how long.
      const parts = Number(hit.headers.get(PARTS_HEADER) ?? NaN);
      const inParts = Number.isSafeInteger(parts) && parts >= 0;
      const header = Number(hit.headers.get(inParts ? LENGTH_HEADER : "content-length") ?? NaN);
      if (header > maxBytes) throw tooBig(name, header, maxBytes, true);
      const length = Number.isSafeInteger(header) ? header : null;
      let got;
      try {
        got = await readCached(inParts ? cachedParts(cache, url, parts) : [hit], name,
          { maxBytes, length, sink: sink && await sink(length) });
      } catch (e) {
        // A cached copy the module refuses (damaged storage) is dropped: the next load downloads the file again;
        // one of another length than it was stored with, or with a part missing, is downloaded again now.
        if (sink && !/over the maxBytes limit/.test(e.message)) await forgetCached(cache, url);
        if (!(e instanceof ShortCopy)) throw e;
      }
      // An older version of this package noted an optional file's absence under the file's own URL (the Cache API
      // ignores the fragment it added): an empty copy of an optional file is such a note.
      if (got && optional && !sink && got.loaded === 0) return null;
      if (got && (sha256 == null || await digestOf(got, name) === sha256)) {
        onProgress?.({ file: name, loaded: got.loaded, total: got.loaded, cached: true });
        return got.result;
      }
      // Not the pinned file (stale or damaged cache): forget it and download.
      got?.result.free?.();
      await forgetCached(cache, url);
    }
    // Remembered absence of an optional file, so an offline reload tries the same files.
    const miss = await cache.match(cacheKey(url, "absent"));
    if (miss && optional) return null;
  }
  // Aborted when the load gives up on this download (too big, cut short), so that the rest of the file is not
  // fetched.
  const abort = new AbortController();
  let response;
  try {
    response = await fetch(url, { ...fetchOptions, signal: abort.signal });
  } catch (e) {
    throw new Error(`Bert.load: could not download ${url} (${e.message}); check the URL and your connection `
      + "(files already downloaded once are served from the cache)");
  }
  if (!response.ok) {
    if (optional && (response.status === 404 || response.status === 403 || response.status === 401)) {
      if (cache) await cache.put(cacheKey(url, "absent"), new Response("", { status: 200 })).catch(() => {});
      return null;
    }
    throw new Error(`Bert.load: ${url} answered HTTP ${response.status} ${response.statusText}; `
      + `is ${name} present at that address?`);
  }
  const header = response.headers.get("content-length");
  const encoded = response.headers.get("content-encoding");
  // A compressed body's length differs from the content-length header: then the total is unknown.
  const total = header && !encoded ? Number(header) : null;
  if (total != null && total > maxBytes) {
    abort.abort();
    throw tooBig(name, total, maxBytes, true);
  }
  // The weights, with nobody to tell of the progress: the browser writes the response into the cache itself, and
  // the module reads them from there through one reused buffer (`throughCache`), so that the download leaves no
  // chunks for the collector (BENCHMARKS.md, issue 29).
  if (sink && !onProgress && total != null && typeof Cache === "function" && cache instanceof Cache
    && cacheFirst) {
    const got = await throughCache(cache, url, name, response, { total, maxBytes, sha256, sink });
    if (got) return got;
    // Not stored (quota, or the download failed): downloaded again, past the cache.
    return fetchFile(url, name, { onProgress, optional, fetchOptions, maxBytes, sha256, stream });
  }
  // The cache is fed the download as it arrives, in parts: putting a `new Response(bytes)` afterwards would hold a
  // second copy of the whole file in the page. A failed put (quota) must not fail the load: the model is in memory
  // already.
  const feed = cache && response.body ? cacheParts(cache, url, response) : null;
  let got;
  try {
    got = await readBody(response, name, { total, maxBytes, onProgress, abort, feed, sink: sink && await sink(total) });
    await checkPinned(got, url, name, sha256);
  } catch (e) {
    got?.result.free?.();
    // Drops what the cache was fed before the error is thrown: no half or unpinned file stays behind.
    abort.abort();
    await feed?.abandon();
    throw e;
  }
  const bytes = got.result;
  if (feed) {
    await feed.finish();
  } else if (cache && got.bytes) {
    // No stream to branch (a runtime whose Response has no body stream): the bytes themselves.
    const headers = { "content-type": response.headers.get("content-type") ?? "application/octet-stream",
      "content-length": String(got.bytes.byteLength) };
    await cache.put(url, new Response(got.bytes, { headers })).catch(() => {});
  }
  return bytes;
}

/**
 * A download put into the Cache API as the response it is, then read from there into `sink`: resolves to the sink,
 * or null where the cache did not store it whole. Chromium writes a response's own body into the cache without a
 * copy in the page, where a stream of ours, which reported progress, was held whole in the page until the cache had
 * it: the 8-bit row's first load peaked at 98-104 MiB that way, 86 this way (BENCHMARKS.md, issue 29).
 * A file that fails its pin or that the module refuses is deleted from the cache again.
 */
async function throughCache(cache, url, name, response, { total, maxBytes, sha256, sink }) {
  try {
    await cache.put(url, response);
  } catch {
    return null;
  }
  const hit = await cache.match(url).catch(() => undefined);
  if (!hit) return null;
  let got;
  try {
    got = await readCached([hit], name, { maxBytes, length: total, sink: await sink(total) });
    await checkPinned(got, url, name, sha256);
  } catch (e) {
    got?.result.free?.();
    await cache.delete(url).catch(() => {});
    if (e instanceof ShortCopy) return null;
    throw e;
  }
  return got.result;
}

/** How much of a local file (Node.js) is read at once into a weights stream. */
const PIECE_BYTES = 4 << 20;

/**
 * The streams a BYOB read is pending on. Without a reference from here, reading a Cache API body in the demo's
 * worker after a reload never finished in Chromium 156 (tests/browser/demo.test.mjs, every run), nor, in some runs,
 * the second load of a model folder in threads.test.mjs's isolated page. Nothing else held the stream while
 * its read was pending (the reading async function waits on the read, and is held only by it), and the read was
 * never answered, as if the stream had been collected. Holding it here while a read is pending, with no other
 * change, made the same tests pass.
 */
const READING = new Set();

/** The bytes one read of a byte stream asks for: the size of the one buffer a download is read through. */
const BYOB_BYTES = 256 << 10;

/**
 * Reads `body` (a stream of bytes) chunk by chunk: `next()` as a reader's `read()`. Where the stream is a byte
 * stream (fetch and Cache API bodies: Chromium 115+, Firefox, Node.js 20), a BYOB reader reads every chunk into one
 * buffer that the next read reuses. A file then streams through without leaving a chunk behind per piece for
 * the collector: with the default reader those were about the file's size at the end of a load, at the load's
 * peak (BENCHMARKS.md, issue 29). So a chunk is valid only until the next `next()`, and what is kept must be
 * copied (`keep`). Elsewhere, the default reader, whose chunks may be kept as they are.
 */
function chunkReader(body) {
  let byob = null;
  try {
    byob = body.getReader({ mode: "byob" });
  } catch {
    // Not a byte stream: the default reader below.
  }
  if (!byob) {
    const reader = body.getReader();
    return { next: () => reader.read(), keep: (chunk) => chunk };
  }
  let buffer = new ArrayBuffer(BYOB_BYTES);
  return {
    async next() {
      // Held from a module-level set while a read is pending (see READING).
      READING.add(body);
      let step;
      try {
        step = await byob.read(new Uint8Array(buffer));
      } finally {
        READING.delete(body);
      }
      // The read transferred the buffer into the chunk it returns: the next read takes it back.
      if (step.value) buffer = step.value.buffer;
      return step;
    },
    keep: (chunk) => chunk.slice(),
  };
}

/** A cached file that reads shorter or longer than the length it was stored with, or lacks a part (damaged storage). */
class ShortCopy extends Error {}

/**
 * A cached file, from its responses (`hits`: one, or its parts in order, `cachedParts`): the bytes (`{ result:
 * bytes, bytes, loaded }`), or pushed piece by piece into `sink` (`{ result: sink, digest, loaded }`). Throws
 * ShortCopy where a part is missing, or where `length` (the stored length) is known and the bytes are not that many.
 */
async function readCached(hits, name, { maxBytes, length, sink }) {
  const short = (loaded) => new ShortCopy(`Bert.load: the cached ${name} holds ${loaded} bytes, not ${length}`);
  let loaded = 0;
  const pieces = []; // without a sink: the bytes, joined at the end
  const take = (value, keep, whole) => {
    loaded += value.byteLength;
    if (loaded > maxBytes) throw tooBig(name, loaded, maxBytes, whole);
    if (sink) sink.push(value); // copied into the module's memory
    else pieces.push(keep(value));
  };
  const read = async () => {
    for await (const hit of hits) {
      if (!hit) throw new ShortCopy(`Bert.load: the cached ${name} lacks a part`);
      if (!sink || !hit.body || typeof hit.body.getReader !== "function") {
        take(new Uint8Array(await hit.arrayBuffer()), (bytes) => bytes, true);
        continue;
      }
      const reader = chunkReader(hit.body);
      for (;;) {
        const { done, value } = await reader.next();
        if (done) break;
        take(value, reader.keep, false);
      }
    }
    if (length != null && loaded !== length) throw short(loaded);
  };
  if (sink) return finishSink(sink, name, null, read).then((got) => ({ ...got, loaded }));
  await read();
  let bytes = pieces[0] ?? new Uint8Array(0);
  if (pieces.length > 1) {
    bytes = new Uint8Array(loaded);
    let at = 0;
    for (const p of pieces) {
      bytes.set(p, at);
      at += p.byteLength;
    }
  }
  return { result: bytes, bytes, loaded };
}

/**
 * Runs `feed` (which pushes the file's pieces into `sink`), then finishes the stream: `{ result: sink, digest,
 * loaded }`. The stream is freed if either fails.
 */
async function finishSink(sink, name, loaded, feed) {
  try {
    await feed();
    return { result: sink, digest: sink.finish(), loaded };
  } catch (e) {
    sink.free();
    // The file's header says it is bigger than the stream's limit (maxBytes): said as a download's length would be.
    const over = /describes a file of (\d+) bytes, more than the (\d+) bytes allowed/.exec(e?.message);
    if (over) throw tooBig(name, Number(over[1]), Number(over[2]), true);
    throw e instanceof Error && !e.message.startsWith("Bert.load") ? new Error(`Bert.load: ${name}: ${e.message}`) : e;
  }
}

/** The SHA-256 of what was read: computed as it streamed, or of the bytes. */
async function digestOf(got, name) {
  return got.digest ?? sha256Hex(got.bytes, name);
}

/** The size of the parts a download is put into the Cache API in (`cacheParts`). */
const PART_BYTES = 4 << 20;
/** Headers of a file cached in parts: on the entry at its own URL, how many parts and how many bytes in all. */
const PARTS_HEADER = "x-bertgpu-parts";
const LENGTH_HEADER = "x-bertgpu-length";

/**
 * The key an entry that belongs to `url` is cached under (its parts, the note of its absence). The Cache API
 * ignores a URL's fragment when it matches (`url#absent` is `url`'s own entry), so `tag` goes into the query.
 */
function cacheKey(url, tag) {
  const u = new URL(url);
  u.searchParams.append("bertgpu-cache", tag);
  return u.href;
}

/** The responses of a file cached in `n` parts, in order (undefined for a part that is missing). */
async function* cachedParts(cache, url, n) {
  for (let k = 0; k < n; k++) yield await cache.match(cacheKey(url, `part-${k}`));
}

/** Deletes a cached file: its entry, and its parts if it was stored in parts. Never throws. */
async function forgetCached(cache, url) {
  await cache.delete(url).catch(() => {});
  await forgetParts(cache, url, 0);
}

/** Deletes the cached parts of `url` from part `from` on (up to the first that is not there). Never throws. */
async function forgetParts(cache, url, from) {
  for (let k = from; await cache.delete(cacheKey(url, `part-${k}`)).catch(() => false); k++);
}

/**
 * The cache's copy of a download, written as it arrives: `push` copies each piece into one PART_BYTES buffer, and
 * each full buffer is put as an entry of its own (a `Response` made from bytes holds its own copy, so the buffer is
 * reused at once) while the next one fills; `push` waits while a put is in flight. `finish` puts the last part,
 * then the entry at the file's own URL that says how many parts there are: a file is found in the cache only once
 * it is whole, after its pin was checked. A cache that gives up (quota) stops being fed and the download goes on.
 *
 * Why parts: a stream of ours given to `cache.put` is held whole in the page until the cache has it, and a branch
 * of the response (`response.clone()`) queues without bound when the network outruns the cache's writes. Put in
 * parts, a first load with `onProgress` peaked lower by ~7 MiB on the 8-bit model's CPU load (median 84.0 against
 * 90.7 MiB) and by 25-35 MiB on its WebGPU load (BENCHMARKS.md, issue 29).
 */
function cacheParts(cache, url, response) {
  const type = response.headers.get("content-type") ?? "application/octet-stream";
  const part = new Uint8Array(PART_BYTES);
  let fill = 0, count = 0, length = 0, failed = false;
  let inflight = Promise.resolve(true);
  const put = async (key, body, headers) => {
    if (!await inflight) failed = true;
    if (failed) return;
    inflight = cache.put(key, new Response(body, { headers })).then(() => true, () => false);
  };
  const flush = () => {
    const n = fill;
    fill = 0;
    return put(cacheKey(url, `part-${count++}`), part.subarray(0, n), { "content-type": type });
  };
  return {
    async push(chunk) {
      for (let at = 0; at < chunk.byteLength && !failed;) {
        const n = Math.min(chunk.byteLength - at, PART_BYTES - fill);
        part.set(chunk.subarray(at, at + n), fill);
        fill += n;
        at += n;
        length += n;
        if (fill === PART_BYTES) await flush();
      }
    },
    /** Stores the rest and the file's entry. Resolves to whether the whole file was stored. */
    async finish() {
      if (fill > 0) await flush();
      await put(url, null, { "content-type": type, [PARTS_HEADER]: String(count), [LENGTH_HEADER]: String(length) });
      if (!failed && await inflight) {
        await forgetParts(cache, url, count); // those of a longer file stored before, if any
        return true;
      }
      await forgetCached(cache, url);
      return false;
    },
    /** The download failed: drops what was stored. */
    async abandon() {
      failed = true;
      await inflight;
      await forgetCached(cache, url);
    },
  };
}

/**
 * A response's body, streamed with progress and the size checks: as one Uint8Array (`{ result: bytes, bytes }`), or
 * each chunk pushed into `sink` as it arrives and dropped (`{ result: sink, digest }`). With a known length the
 * chunks are written into the one array as they arrive (the chunks and their concatenation are never held at once).
 */
async function readBody(response, name, { total, maxBytes, onProgress, abort, feed, sink }) {
  if (!response.body || typeof response.body.getReader !== "function") {
    const bytes = new Uint8Array(await response.arrayBuffer());
    if (bytes.byteLength > maxBytes) {
      sink?.free();
      throw tooBig(name, bytes.byteLength, maxBytes, true);
    }
    onProgress?.({ file: name, loaded: bytes.byteLength, total: bytes.byteLength });
    if (!sink) return { result: bytes, bytes };
    return finishSink(sink, name, bytes.byteLength, () => sink.push(bytes));
  }
  if (sink) {
    return finishSink(sink, name, null, () => readChunks(response, name,
      { total, maxBytes, onProgress, abort, feed, take: (value) => sink.push(value) })); // copied into the module
  }
  const whole = total != null ? new Uint8Array(total) : null;
  const chunks = [];
  const loaded = await readChunks(response, name, { total, maxBytes, onProgress, abort, feed,
    take: (value, at, keep) => (whole ? whole.set(value, at) : chunks.push(keep(value))) });
  if (whole) return { result: whole, bytes: whole };
  const bytes = new Uint8Array(loaded);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.byteLength;
  }
  return { result: bytes, bytes };
}

/**
 * Reads a response's body chunk by chunk, with progress and the size checks, handing each chunk to `take(chunk,
 * offset, keep)` and to the cache's `feed`; resolves to the number of bytes. A chunk is valid until `take` returns
 * (`chunkReader`): `keep(chunk)` gives what may be held longer.
 */
async function readChunks(response, name, { total, maxBytes, onProgress, abort, feed, take }) {
  const reader = chunkReader(response.body);
  const cutShort = (loaded) => new Error(`Bert.load: the download of ${name} was cut short: ${loaded} of ${total} `
    + "bytes arrived; check your connection and load again");
  let loaded = 0;
  onProgress?.({ file: name, loaded: 0, total });
  for (;;) {
    let step;
    try {
      step = await reader.next();
    } catch (e) {
      throw new Error(`Bert.load: the download of ${name} was cut short after ${loaded} bytes`
        + `${total != null ? ` of ${total}` : ""} (${e.message}); check your connection and load again`);
    }
    const { done, value } = step;
    if (done) break;
    if (loaded + value.byteLength > maxBytes) {
      abort.abort();
      throw tooBig(name, loaded + value.byteLength, maxBytes, false);
    }
    if (total != null && loaded + value.byteLength > total) {
      abort.abort();
      throw new Error(`Bert.load: ${name} sent more than the ${total} bytes its content-length announced; `
        + "load again (a proxy may have changed the file)");
    }
    take(value, loaded, reader.keep);
    loaded += value.byteLength;
    onProgress?.({ file: name, loaded, total });
    if (feed) await feed.push(value);
  }
  if (total != null && loaded !== total) throw cutShort(loaded);
  return loaded;
}

/** Rejects unless what was read (`{ bytes }` or `{ digest }`) has the pinned SHA-256 (when one is pinned). */
async function checkPinned(read, url, name, sha256) {
  if (sha256 == null) return;
  const got = await digestOf(read, name);
  if (got !== sha256) {
    throw new Error(`Bert.load: ${name} from ${url} has SHA-256 ${got}, but ${sha256} was pinned for it; the file `
      + "changed or was damaged on the way: it was not used (check the URL, or pin the new hash if you trust it)");
  }
}

/**
 * Node.js: a file: URL read from the disk, with fetchFile's checks (size, pin) and progress (null: optional, absent);
 * with `sink`, read a piece at a time into the stream.
 */
async function readLocalFile(url, name, { onProgress, optional, maxBytes, sha256, sink }) {
  const fs = nodeBuiltin("node:fs/promises");
  const file = nodeBuiltin("node:url").fileURLToPath(url);
  let stat;
  try {
    stat = await fs.stat(file);
  } catch (e) {
    if (e.code === "ENOENT" || e.code === "ENOTDIR") {
      if (optional) return null;
      throw new Error(`Bert.load: ${file} does not exist; is ${name} in that folder?`);
    }
    throw new Error(`Bert.load: cannot read ${file} (${e.message})`);
  }
  if (!stat.isFile()) throw new Error(`Bert.load: ${file} is not a file`);
  if (stat.size > maxBytes) throw tooBig(name, stat.size, maxBytes, true);
  onProgress?.({ file: name, loaded: 0, total: stat.size });
  if (sink) {
    const stream = await sink(stat.size);
    const got = await finishSink(stream, name, stat.size, async () => {
      const fh = await fs.open(file);
      try {
        // One piece reused: the stream copies each into the tensors it belongs to.
        const piece = new Uint8Array(Math.min(PIECE_BYTES, Math.max(stat.size, 1)));
        for (let at = 0; ;) {
          const { bytesRead } = await fh.read(piece, 0, piece.byteLength, at);
          if (bytesRead === 0) break;
          stream.push(piece.subarray(0, bytesRead));
          at += bytesRead;
        }
      } finally {
        await fh.close();
      }
    });
    onProgress?.({ file: name, loaded: stat.size, total: stat.size });
    try {
      await checkPinned(got, url, name, sha256);
    } catch (e) {
      stream.free();
      throw e;
    }
    return stream;
  }
  let buffer;
  try {
    buffer = await fs.readFile(file);
  } catch (e) {
    throw new Error(`Bert.load: cannot read ${file} (${e.message})`);
  }
  const bytes = new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  onProgress?.({ file: name, loaded: bytes.byteLength, total: bytes.byteLength });
  await checkPinned({ bytes }, url, name, sha256);
  return bytes;
}

/** Node.js: a local folder source must be a folder (a clear error for a file path or a typo, before its files). */
async function checkLocalFolder(base) {
  const fs = nodeBuiltin("node:fs/promises");
  // Without the trailing slash: stat of "file/" fails (ENOTDIR) where "file" says what it is.
  const dir = nodeBuiltin("node:url").fileURLToPath(base).replace(/(.)[\\/]+$/, "$1");
  const stat = await fs.stat(dir).catch(() => null);
  if (!stat) throw new Error(`Bert.load: there is no folder ${dir}`);
  if (!stat.isDirectory()) {
    throw new Error(`Bert.load: ${dir} is a file, not a folder; give the folder that holds config.json and `
      + "model.safetensors, or a .gguf file");
  }
}

/** The files a folder source may fetch, in the order they are fetched: the only URLs `Bert.load` asks for. */
export const FOLDER_FILES = ["config.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt", "model.safetensors"];

/** The file name a .gguf URL is known by (in progress events and `sha256`). */
function ggufName(url) {
  return decodeURIComponent(new URL(url).pathname.split("/").pop());
}

/**
 * Checks the loader's options (`sha256`, `maxBytes`) against a resolved source; returns them normalised
 * ({ sha256: { name: hex } | null, maxBytes }).
 */
export function checkLoadOptions(resolved, { sha256, maxBytes } = {}) {
  if (maxBytes != null && (!Number.isSafeInteger(maxBytes) || maxBytes < 1)) {
    throw new TypeError(`Bert.load: maxBytes must be a positive integer number of bytes (got ${JSON.stringify(maxBytes)})`);
  }
  if (sha256 == null) return { sha256: null, maxBytes: maxBytes ?? DEFAULT_MAX_BYTES };
  if (typeof sha256 !== "object" || Array.isArray(sha256)) {
    throw new TypeError("Bert.load: sha256 must be an object { fileName: hex digest }, e.g. "
      + "{ \"model.safetensors\": \"9f86d0...\" }");
  }
  if (resolved.kind === "bytes") {
    throw new TypeError("Bert.load: sha256 checks downloaded files; a bytes source is used as given");
  }
  const names = resolved.kind === "gguf" ? [ggufName(resolved.url)] : FOLDER_FILES;
  const out = {};
  for (const [name, hex] of Object.entries(sha256)) {
    if (!names.includes(name)) {
      throw new TypeError(`Bert.load: sha256 names "${name}", which this source does not fetch `
        + `(it fetches ${names.join(", ")})`);
    }
    if (typeof hex !== "string" || !/^[0-9a-fA-F]{64}$/.test(hex)) {
      throw new TypeError(`Bert.load: sha256["${name}"] must be 64 hex digits (a SHA-256 digest)`);
    }
    out[name] = hex.toLowerCase();
  }
  return { sha256: out, maxBytes: maxBytes ?? DEFAULT_MAX_BYTES };
}

/**
 * A LoRA adapter as peft saves it, for `Bert.load`'s `adapter` option: `{ config, weights }` (the bytes or text of
 * adapter_config.json and adapter_model.safetensors), or the URL (in Node.js also the path) of the folder holding
 * them. Resolves to `{ adapterConfig, adapterWeights }` as Uint8Arrays.
 */
export async function fetchAdapterFiles(adapter) {
  if (adapter && typeof adapter === "object" && !(adapter instanceof URL)) {
    if (adapter.config == null || adapter.weights == null) {
      throw new TypeError("Bert.load: adapter must be { config, weights } (adapter_config.json and "
        + "adapter_model.safetensors) or the URL of the folder holding them");
    }
    return { adapterConfig: toBytes(adapter.config, "adapter.config"), adapterWeights: toBytes(adapter.weights, "adapter.weights") };
  }
  if (typeof adapter !== "string" && !(adapter instanceof URL)) {
    throw new TypeError(`Bert.load: adapter must be { config, weights } or a URL (got ${describe(adapter)})`);
  }
  const dir = String(adapter).endsWith("/") ? String(adapter) : `${adapter}/`;
  const read = async (name) => {
    if (IN_NODE && !/^[a-z]+:\/\//i.test(dir) && !dir.startsWith("file:")) {
      const buffer = await nodeBuiltin("node:fs/promises").readFile(nodeBuiltin("node:path").join(dir, name));
      return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
    }
    const url = new URL(name, new URL(dir, globalThis.location?.href));
    if (url.protocol === "file:") {
      const buffer = await nodeBuiltin("node:fs/promises").readFile(nodeBuiltin("node:url").fileURLToPath(url));
      return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
    }
    const r = await fetch(url);
    if (!r.ok) throw new Error(`Bert.load: adapter: ${url.href} answered ${r.status}`);
    return new Uint8Array(await r.arrayBuffer());
  };
  try {
    return { adapterConfig: await read("adapter_config.json"), adapterWeights: await read("adapter_model.safetensors") };
  } catch (e) {
    throw new Error(`Bert.load: cannot read the adapter at ${dir}: ${e.message}`);
  }
}

/**
 * Downloads (or reads from the cache) everything a model needs.
 * Returns { config, tokenizer?, vocab?, tokenizerConfig?, weights } or { gguf } as Uint8Arrays; with
 * `options.stream` (`async ({ gguf, total, limit, hash }) => WeightStream`), the weights (or the .gguf) are read
 * into a stream as they arrive and come back as the finished stream, never whole in JS memory. `cacheFirst`: a
 * first download of the weights with no `onProgress` may go into the cache as it is before it is read
 * (`throughCache`).
 */
export async function fetchModelFiles(resolved, options = {}) {
  if (resolved.kind === "bytes") return resolved.files;
  try {
    return await fetchFolderOrGguf(resolved, options);
  } catch (e) {
    // Node.js: "models/x" is a repo id, as in a browser; say so when a local folder of that name exists.
    if (IN_NODE && resolved.repo && nodeBuiltin("node:fs").existsSync(resolved.repo)) {
      throw new Error(`${e.message} ("${resolved.repo}" was read as a Hugging Face repo id; to load the local `
        + `folder of that name write "./${resolved.repo}")`);
    }
    throw e;
  }
}

async function fetchFolderOrGguf(resolved, { cache: useCache = true, cacheDir, onProgress, sha256, maxBytes, stream,
  cacheFirst = false }) {
  if (onProgress != null && typeof onProgress !== "function") {
    throw new TypeError("Bert.load: onProgress must be a function ({ file, loaded, total }) => void");
  }
  const limits = checkLoadOptions(resolved, { sha256, maxBytes });
  const cache = await openCache(useCache, cacheDir);
  const opts = { cache, onProgress, maxBytes: limits.maxBytes };
  const pinned = (name) => ({ ...opts, sha256: limits.sha256?.[name] ?? null });
  if (resolved.kind === "gguf") {
    const name = ggufName(resolved.url);
    return { gguf: await fetchFile(resolved.url, name, { ...pinned(name), cacheFirst,
      stream: stream && ((o) => stream({ ...o, gguf: true })) }) };
  }
  if (resolved.base.startsWith("file:") && IN_NODE) await checkLocalFolder(resolved.base);
  const at = (f) => new URL(f, resolved.base).href;
  // The small files first: a wrong URL fails fast, before the weights download.
  const config = await fetchFile(at("config.json"), "config.json", pinned("config.json"));
  const tokenizerConfig = await fetchFile(at("tokenizer_config.json"), "tokenizer_config.json",
    { ...pinned("tokenizer_config.json"), optional: true });
  const files = { config };
  if (tokenizerConfig) files.tokenizerConfig = tokenizerConfig;
  const tokenizer = await fetchFile(at("tokenizer.json"), "tokenizer.json",
    { ...pinned("tokenizer.json"), optional: true });
  if (tokenizer) {
    files.tokenizer = tokenizer;
  } else {
    const vocab = await fetchFile(at("vocab.txt"), "vocab.txt", { ...pinned("vocab.txt"), optional: true });
    if (!vocab) {
      throw new Error(`Bert.load: ${resolved.base} has neither tokenizer.json nor vocab.txt; `
        + "a BERT model folder needs one of them");
    }
    files.vocab = vocab;
  }
  const sentence = await fetchSentenceFiles(at, opts);
  if (sentence.length) files.sentence = sentence;
  files.weights = await fetchFile(at("model.safetensors"), "model.safetensors",
    { ...pinned("model.safetensors"), cacheFirst, stream: stream && ((o) => stream({ ...o, gguf: false })) });
  return files;
}

/**
 * sentence-transformers' own files beside a model (src/sentence.rs reads them): how its authors pool, project and
 * normalise, its max_seq_length and prompts. Each is optional: a folder without them keeps the defaults.
 */
export const SENTENCE_FILES = ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"];

/** Modules whose folder holds files the model needs (their config.json; a Dense's weights too). */
const MODULE_FILES = {
  Pooling: ["config.json"],
  Dense: ["config.json", "model.safetensors"],
  SpladePooling: ["config.json"],
};

/** At most this many modules are read from a modules.json (the module refuses more, by name). */
const MAX_MODULES = 16;

/**
 * The sentence-transformers files of the folder at `at(name)`: [[path, bytes], ...], those it has. A module's path
 * that is not one plain folder name is not fetched (the module refuses the model, naming the path).
 */
async function fetchSentenceFiles(at, opts) {
  const out = [];
  for (const name of SENTENCE_FILES) {
    const bytes = await fetchFile(at(name), name, { ...opts, optional: true });
    if (bytes) out.push([name, bytes]);
  }
  const modules = out.find(([name]) => name === "modules.json");
  let list = null;
  try {
    list = modules && JSON.parse(new TextDecoder().decode(modules[1]));
  } catch {
    // The module reports the malformed file with its own message.
  }
  if (!Array.isArray(list)) return out;
  for (const m of list.slice(0, MAX_MODULES)) {
    const kind = typeof m?.type === "string" ? m.type.split(".").pop() : null;
    const wanted = MODULE_FILES[kind];
    if (!wanted || typeof m.path !== "string" || !/^[A-Za-z0-9_.-]+$/.test(m.path) || m.path.startsWith(".")) continue;
    for (const f of wanted) {
      const path = `${m.path}/${f}`;
      const bytes = await fetchFile(at(path), path, { ...opts, optional: true });
      if (bytes) out.push([path, bytes]);
    }
  }
  return out;
}

/** Deletes every model file bertgpu cached (all models). Resolves to whether a cache existed. */
export async function clearCache() {
  if (typeof caches === "undefined") return false;
  return caches.delete(CACHE_NAME);
}
