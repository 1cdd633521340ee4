// Downloads kept for offline loads: the Cache API, or Node.js's cacheDir; a large file in parts.

import { nodeBuiltin } from "./env.js";

const CACHE_NAME = "bertgpu-models-v1";

export async function openCache(enabled, cacheDir) {
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

/** The size of the parts a download is put into the Cache API in (`cacheParts`). */
const PART_BYTES = 4 << 20;
/** Headers of a file cached in parts: on the entry at its own URL, how many parts and how many bytes in all. */
export const PARTS_HEADER = "x-bertgpu-parts";
export const LENGTH_HEADER = "x-bertgpu-length";

/**
 * The key an entry that belongs to `url` is cached under (its parts, the note of its absence). The Cache API
 * ignores a URL's fragment when it matches (`url#absent` is `url`'s own entry), so `tag` goes into the query.
 */
export function cacheKey(url, tag) {
  const u = new URL(url);
  u.searchParams.append("bertgpu-cache", tag);
  return u.href;
}

/** The responses of a file cached in `n` parts, in order (undefined for a part that is missing). */
export async function* cachedParts(cache, url, n) {
  for (let k = 0; k < n; k++) yield await cache.match(cacheKey(url, `part-${k}`));
}

/** Deletes a cached file: its entry, and its parts if it was stored in parts. Never throws. */
export async function forgetCached(cache, url) {
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
export function cacheParts(cache, url, response) {
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

/** Deletes every model file bertgpu cached (all models). Resolves to whether a cache existed. */
export async function clearCache() {
  if (typeof caches === "undefined") return false;
  return caches.delete(CACHE_NAME);
}
