// Model sources → the bytes the wasm module loads: HF-style folders, .gguf URLs, Hugging Face repo ids, or bytes.
// Downloads stream (onProgress per chunk) and land in the Cache API so a second load works offline.

const CACHE_NAME = "bertgpu-models-v1";
const HF_HUB = "https://huggingface.co";

/** A Hugging Face repo id: `name` or `owner/name` (no scheme, not starting with `.` or `/`). */
const REPO_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*(\/[A-Za-z0-9][A-Za-z0-9_.-]*)?$/;

function baseUrl() {
  // Relative URLs resolve against the page (or, inside a worker, the worker script's location).
  return globalThis.location ? globalThis.location.href : undefined;
}

/**
 * What a source names. Returns one of
 *   { kind: "bytes", files }                       user-supplied bytes
 *   { kind: "folder", base }                       a URL ending in "/" (config.json, tokenizer.json, ... below it)
 *   { kind: "gguf", url }
 */
export function resolveSource(source) {
  if (source == null) {
    throw new TypeError("Bert.load: no source given; pass a model folder URL, a .gguf URL, a Hugging Face repo id, "
      + "or { config, tokenizer, weights } bytes");
  }
  if (source instanceof URL) source = source.href;
  if (typeof source === "string") {
    const s = source.trim();
    if (s === "") throw new TypeError("Bert.load: the source is an empty string");
    const looksLikeUrl = /^[a-z][a-z0-9+.-]*:/i.test(s) || s.startsWith("/") || s.startsWith(".");
    if (!looksLikeUrl && REPO_ID.test(s) && !s.toLowerCase().endsWith(".gguf")) {
      return { kind: "folder", base: `${HF_HUB}/${s}/resolve/main/`, repo: s };
    }
    let url;
    try {
      url = new URL(s, baseUrl());
    } catch {
      throw new TypeError(`Bert.load: "${s}" is neither a URL nor a Hugging Face repo id (like "owner/name"); `
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
  return files;
}

async function openCache(enabled) {
  if (!enabled || typeof caches === "undefined") return null;
  try {
    return await caches.open(CACHE_NAME);
  } catch {
    return null; // e.g. an insecure context or storage disabled: downloads still work, just not offline
  }
}

/**
 * Fetches one file, from the cache when there, else from the network (streamed, reporting progress) into the cache.
 * Returns Uint8Array, or null when `optional` and the server says 404.
 */
async function fetchFile(url, name, { cache, onProgress, optional = false, fetchOptions }) {
  if (cache) {
    const hit = await cache.match(url);
    if (hit) {
      const bytes = new Uint8Array(await hit.arrayBuffer());
      onProgress?.({ file: name, loaded: bytes.byteLength, total: bytes.byteLength, cached: true });
      return bytes;
    }
    // Remembered absence of an optional file, so an offline reload tries the same files.
    const miss = await cache.match(url + "#absent");
    if (miss && optional) return null;
  }
  let response;
  try {
    response = await fetch(url, fetchOptions);
  } catch (e) {
    throw new Error(`Bert.load: could not download ${url} (${e.message}); check the URL and your connection `
      + "(files already downloaded once are served from the cache)");
  }
  if (!response.ok) {
    if (optional && (response.status === 404 || response.status === 403 || response.status === 401)) {
      if (cache) await cache.put(url + "#absent", new Response("", { status: 200 })).catch(() => {});
      return null;
    }
    throw new Error(`Bert.load: ${url} answered HTTP ${response.status} ${response.statusText}; `
      + `is ${name} present at that address?`);
  }
  const header = response.headers.get("content-length");
  const encoded = response.headers.get("content-encoding");
  // A compressed body's length differs from the content-length header: then the total is unknown.
  const total = header && !encoded ? Number(header) : null;
  let bytes;
  if (response.body && typeof response.body.getReader === "function") {
    const reader = response.body.getReader();
    const chunks = [];
    let loaded = 0;
    onProgress?.({ file: name, loaded: 0, total });
    for (;;) {
      let step;
      try {
        step = await reader.read();
      } catch (e) {
        throw new Error(`Bert.load: the download of ${name} was cut short after ${loaded} bytes`
          + `${total != null ? ` of ${total}` : ""} (${e.message}); check your connection and load again`);
      }
      const { done, value } = step;
      if (done) break;
      chunks.push(value);
      loaded += value.byteLength;
      onProgress?.({ file: name, loaded, total });
    }
    if (total != null && loaded !== total) {
      throw new Error(`Bert.load: the download of ${name} was cut short: ${loaded} of ${total} bytes arrived; `
        + "check your connection and load again");
    }
    bytes = new Uint8Array(loaded);
    let at = 0;
    for (const c of chunks) {
      bytes.set(c, at);
      at += c.byteLength;
    }
  } else {
    bytes = new Uint8Array(await response.arrayBuffer());
    onProgress?.({ file: name, loaded: bytes.byteLength, total: bytes.byteLength });
  }
  if (cache) {
    const headers = { "content-type": response.headers.get("content-type") ?? "application/octet-stream",
      "content-length": String(bytes.byteLength) };
    // A full cache (quota) must not fail the load: the model is in memory already.
    await cache.put(url, new Response(bytes, { headers })).catch(() => {});
  }
  return bytes;
}

/**
 * Downloads (or reads from the cache) everything a model needs.
 * Returns { config, tokenizer?, vocab?, tokenizerConfig?, weights } or { gguf } as Uint8Arrays.
 */
export async function fetchModelFiles(resolved, { cache: useCache = true, onProgress } = {}) {
  if (resolved.kind === "bytes") return resolved.files;
  if (onProgress != null && typeof onProgress !== "function") {
    throw new TypeError("Bert.load: onProgress must be a function ({ file, loaded, total }) => void");
  }
  const cache = await openCache(useCache);
  const opts = { cache, onProgress };
  if (resolved.kind === "gguf") {
    const name = resolved.url.split("/").pop();
    return { gguf: await fetchFile(resolved.url, name, opts) };
  }
  const at = (f) => new URL(f, resolved.base).href;
  // The small files first: a wrong URL fails fast, before the weights download.
  const config = await fetchFile(at("config.json"), "config.json", opts);
  const tokenizerConfig = await fetchFile(at("tokenizer_config.json"), "tokenizer_config.json",
    { ...opts, optional: true });
  const files = { config };
  if (tokenizerConfig) files.tokenizerConfig = tokenizerConfig;
  const tokenizer = await fetchFile(at("tokenizer.json"), "tokenizer.json", { ...opts, optional: true });
  if (tokenizer) {
    files.tokenizer = tokenizer;
  } else {
    const vocab = await fetchFile(at("vocab.txt"), "vocab.txt", { ...opts, optional: true });
    if (!vocab) {
      throw new Error(`Bert.load: ${resolved.base} has neither tokenizer.json nor vocab.txt; `
        + "a BERT model folder needs one of them");
    }
    files.vocab = vocab;
  }
  files.weights = await fetchFile(at("model.safetensors"), "model.safetensors", opts);
  return files;
}

/** Deletes every model file bertgpu cached (all models). Resolves to whether a cache existed. */
export async function clearCache() {
  if (typeof caches === "undefined") return false;
  return caches.delete(CACHE_NAME);
}
