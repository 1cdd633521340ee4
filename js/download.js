// One file fetched (cache, network or disk), capped (maxBytes), pinned (sha256), streamed into the module.

import { cachedParts, cacheKey, cacheParts, forgetCached, LENGTH_HEADER, PARTS_HEADER } from "./cache.js";
import { IN_NODE, nodeBuiltin, readBytes } from "./env.js";

/** Default of `maxBytes`: no file of a BERT checkpoint comes near it (BERT-large f32 is 1.3 GB), and a wasm32 module
 * cannot hold much more next to the model it builds from the file. */
export const DEFAULT_MAX_BYTES = 2 * 1024 ** 3;

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
export async function fetchFile(url, name, { cache, onProgress, optional = false, fetchOptions, maxBytes = DEFAULT_MAX_BYTES,
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
  let bytes;
  try {
    bytes = await readBytes(file);
  } catch (e) {
    throw new Error(`Bert.load: cannot read ${file} (${e.message})`);
  }
  onProgress?.({ file: name, loaded: bytes.byteLength, total: bytes.byteLength });
  await checkPinned({ bytes }, url, name, sha256);
  return bytes;
}
