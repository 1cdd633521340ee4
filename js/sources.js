// What a model source names: a folder, a .gguf, a Hugging Face repo id, or bytes.

import { IN_NODE, nodeBuiltin } from "./env.js";

const HF_HUB = "https://huggingface.co";

/** A Hugging Face repo id: `name` or `owner/name` (no scheme, not starting with `.` or `/`). */
const REPO_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*(\/[A-Za-z0-9][A-Za-z0-9_.-]*)?$/;

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
export function toBytes(value, what) {
  if (value instanceof Uint8Array) return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (typeof value === "string") return new TextEncoder().encode(value);
  if (what === "config" && value && typeof value === "object") {
    return new TextEncoder().encode(JSON.stringify(value));
  }
  throw new TypeError(`Bert.load: \`${what}\` must be a string, an ArrayBuffer or a Uint8Array (got ${describe(value)})`);
}

export function describe(v) {
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
      + "(config.json, tokenizer.json and model.safetensors, or pytorch_model.bin, contents) or { gguf }");
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
