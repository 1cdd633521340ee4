// A model's files: which ones a source fetches, in what order, with which pins and limits.

import { openCache } from "./cache.js";
import { DEFAULT_MAX_BYTES, fetchFile } from "./download.js";
import { IN_NODE, nodeBuiltin, readBytes } from "./env.js";
import { describe, toBytes } from "./sources.js";

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

/** The files a folder source may fetch, in the order they are fetched: the only URLs `Bert.load` asks for (and,
 * where there is no model.safetensors, the index of shards and the shards it names; where there is neither,
 * pytorch_model.bin, else its index of shards and the shards it names). */
export const FOLDER_FILES = ["config.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt", "model.safetensors",
  "pytorch_model.bin"];

/** A checkpoint saved in shards: this index names them (src/weights/sharded.rs checks it again, and the shards). */
export const SHARD_INDEX = "model.safetensors.index.json";
/** The index's bounds, as src/weights/sharded.rs's: its bytes, and the shard files it may name. */
const MAX_INDEX_BYTES = 8 << 20;
const MAX_SHARDS = 1000;
/** A shard's name: a plain .safetensors file name beside the index (no path), as src/weights/sharded.rs requires. */
const SHARD_NAME = /^[A-Za-z0-9_-][A-Za-z0-9_.-]*\.safetensors$/;
/** An older checkpoint's weights: torch.save's pickle, which the module reads as data and never runs
 * (src/weights/torch_bin.rs); fetched only where the folder has no safetensors weights. */
const TORCH_BIN = "pytorch_model.bin";
/** ... and saved in shards: their index, and a shard's name (a plain .bin file name beside it). */
const TORCH_SHARD_INDEX = "pytorch_model.bin.index.json";
const TORCH_SHARD_NAME = /^[A-Za-z0-9_-][A-Za-z0-9_.-]*\.bin$/;
/**
 * `bytes` (the file `name`), once its first bytes are torch.save's: a zip archive, or the pickle of the magic number
 * of the format before torch 1.6. The module tells a pytorch_model.bin from a safetensors file by them (a bytes
 * source comes with no name), so a file that has neither is refused here, by its name.
 */
function torchBin(bytes, name) {
  const [a, b, c, d] = bytes.subarray(0, 4);
  const zip = a === 0x50 && b === 0x4b && ((c === 3 && d === 4) || (c === 5 && d === 6));
  if (!zip && !(a === 0x80 && b === 2 && c === 0x8a && d === 0x0a)) {
    throw new Error(`Bert.load: ${name} is not a PyTorch checkpoint: neither the zip archive torch.save writes nor `
      + "its format before torch 1.6 (the file may be damaged, or not a checkpoint at all)");
  }
  return bytes;
}

/** The two kinds of shards: their index, their names, and whether they stream into the module as they arrive (a
 * .bin is read from its bytes once it is whole). */
const SAFETENSORS_SHARDS = { index: SHARD_INDEX, name: SHARD_NAME, ext: ".safetensors", stream: true };
const TORCH_SHARDS = { index: TORCH_SHARD_INDEX, name: TORCH_SHARD_NAME, ext: ".bin", stream: false };

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
  const folder = resolved.kind !== "gguf";
  const out = {};
  for (const [name, hex] of Object.entries(sha256)) {
    // A folder's shards are known once its index is read: a pin of a name the index does not give is refused then.
    const shard = folder && ([SHARD_INDEX, TORCH_SHARD_INDEX].includes(name)
      || ((SHARD_NAME.test(name) || TORCH_SHARD_NAME.test(name)) && !names.includes(name)));
    if (!names.includes(name) && !(folder && sentenceFile(name)) && !shard) {
      throw new TypeError(`Bert.load: sha256 names "${name}", which this source does not fetch `
        + `(it fetches ${names.join(", ")}${folder ? `; and sentence-transformers' ${SENTENCE_FILES.join(", ")} and `
          + "a module's FOLDER/config.json, FOLDER/model.safetensors or FOLDER/pytorch_model.bin" : ""})`);
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
      return readBytes(nodeBuiltin("node:path").join(dir, name));
    }
    const url = new URL(name, new URL(dir, globalThis.location?.href));
    if (url.protocol === "file:") {
      return readBytes(nodeBuiltin("node:url").fileURLToPath(url));
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
  const sentence = await fetchSentenceFiles(at, pinned);
  if (sentence.length) files.sentence = sentence;
  // A pinned sentence-transformers file must be one the folder's modules.json led to (it was fetched, and checked).
  for (const name of Object.keys(limits.sha256 ?? {})) {
    if (sentenceFile(name) && !sentence.some(([n]) => n === name)) {
      throw new Error(`Bert.load: sha256 pins "${name}", which ${resolved.base}'s modules.json does not list`);
    }
  }
  // The weights, safetensors first: model.safetensors, else its index of shards and each shard; else
  // pytorch_model.bin, else its index and shards. A pin on any of them says which the folder must have.
  const pins = Object.keys(limits.sha256 ?? {});
  const shardPins = pins.filter((n) => n === SHARD_INDEX || SHARD_NAME.test(n) && n !== "model.safetensors");
  const binPins = pins.filter((n) => n === TORCH_SHARD_INDEX || TORCH_SHARD_NAME.test(n));
  const binShardPins = binPins.filter((n) => n !== TORCH_BIN);
  const single = shardPins.length || binPins.length ? null : await fetchFile(at("model.safetensors"),
    "model.safetensors", { ...pinned("model.safetensors"), optional: true, cacheFirst,
      stream: stream && ((o) => stream({ ...o, gguf: false })) });
  let weights = single ?? (binPins.length ? null : await fetchShards(at, pinned, limits, stream, SAFETENSORS_SHARDS));
  if (!weights && !shardPins.length) {
    // Fetched whole, with the same maxBytes and pin as model.safetensors: the module reads its zip's entries from
    // the bytes (src/weights/torch_bin.rs), which say which format they are.
    const bin = binShardPins.length ? null : await fetchFile(at(TORCH_BIN), TORCH_BIN, { ...pinned(TORCH_BIN),
      optional: true });
    if (bin) torchBin(bin, TORCH_BIN);
    weights = bin ?? await fetchShards(at, pinned, limits, stream, TORCH_SHARDS);
    if (weights) files.weightsName = TORCH_BIN;
  }
  if (!weights) {
    throw new Error(`Bert.load: ${resolved.base} has no weights: none of model.safetensors, ${SHARD_INDEX}, `
      + `${TORCH_BIN} or ${TORCH_SHARD_INDEX}`);
  }
  files.weights = weights;
  return files;
}

/**
 * A folder saved in shards (`kind`: SAFETENSORS_SHARDS or TORCH_SHARDS): model.safetensors.index.json (or
 * pytorch_model.bin.index.json), then each shard it names, each a file as model.safetensors (pytorch_model.bin) is
 * (maxBytes each, its pin if any), a safetensors shard read into a stream on the host (one GPU device per load: a
 * stream placed on the device acquires its own). Resolves to `{ index, indexName, shards: [[name, bytes | stream],
 * ...], free() }`, which the module checks against the index and joins (src/wasm/mod.rs), or null where the folder
 * has no such index.
 */
async function fetchShards(at, pinned, limits, stream, kind) {
  const indexFile = kind.index;
  const index = await fetchFile(at(indexFile), indexFile,
    { ...pinned(indexFile), optional: true, maxBytes: Math.min(limits.maxBytes, MAX_INDEX_BYTES) });
  if (!index) return null;
  let map;
  try {
    map = JSON.parse(new TextDecoder().decode(index)).weight_map;
  } catch (e) {
    throw new Error(`Bert.load: ${indexFile} is not valid JSON (${e.message})`);
  }
  if (map == null || typeof map !== "object" || Array.isArray(map)) {
    throw new Error(`Bert.load: ${indexFile} has no weight_map (tensor name → shard file)`);
  }
  const names = [...new Set(Object.values(map))].sort();
  if (names.length > MAX_SHARDS) {
    throw new Error(`Bert.load: ${indexFile} names ${names.length} shard files, more than the ${MAX_SHARDS} allowed`);
  }
  const bad = names.find((n) => typeof n !== "string" || !kind.name.test(n));
  if (bad !== undefined) {
    throw new Error(`Bert.load: ${indexFile} names the shard ${JSON.stringify(bad)}: a shard must be a `
      + `${kind.ext} file in the index's own folder (no path)`);
  }
  const unknown = Object.keys(limits.sha256 ?? {}).find((n) => kind.name.test(n)
    && !["model.safetensors", TORCH_BIN].includes(n) && !names.includes(n));
  if (unknown) {
    throw new Error(`Bert.load: sha256 names "${unknown}", which ${indexFile} does not name (it names `
      + `${names.join(", ")})`);
  }
  const shards = [];
  const free = () => shards.forEach(([, s]) => s?.free?.());
  try {
    for (const name of names) {
      const shard = await fetchFile(at(name), name, { ...pinned(name),
        stream: kind.stream && stream && ((o) => stream({ ...o, gguf: false, shard: true })) });
      shards.push([name, kind.stream ? shard : torchBin(shard, name)]);
    }
  } catch (e) {
    free();
    throw e;
  }
  return { index, indexName: indexFile, shards, free };
}

/**
 * sentence-transformers' own files beside a model (src/sentence.rs reads them): how its authors pool, project and
 * normalise, its max_seq_length and prompts. Each is optional: a folder without them keeps the defaults.
 */
export const SENTENCE_FILES = ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"];

/** Modules whose folder holds files the model needs (their config.json; a Dense's weights too: model.safetensors,
 * else the pytorch_model.bin of sentence-transformers 2.x, read as data). An array: the first of them the folder
 * has (or the one pinned). */
const MODULE_FILES = {
  Pooling: ["config.json"],
  Dense: ["config.json", ["model.safetensors", TORCH_BIN]],
  SpladePooling: ["config.json"],
};

/** A module's folder name as the loader fetches it: one plain name, not hidden. */
const MODULE_FOLDER = /^[A-Za-z0-9_-][A-Za-z0-9_.-]*$/;

/** Whether `name` is a sentence-transformers file a folder source may fetch (and `sha256` may pin). */
function sentenceFile(name) {
  if (SENTENCE_FILES.includes(name)) return true;
  const [dir, file, ...rest] = name.split("/");
  return rest.length === 0 && MODULE_FOLDER.test(dir ?? "")
    && ["config.json", "model.safetensors", TORCH_BIN].includes(file);
}

/** At most this many modules are read from a modules.json (the module refuses more, by name). */
const MAX_MODULES = 16;

/**
 * The sentence-transformers files of the folder at `at(name)`: [[path, bytes], ...], those it has. A module's path
 * that is not one plain folder name is not fetched (the module refuses the model, naming the path).
 */
async function fetchSentenceFiles(at, pinned) {
  const out = [];
  for (const name of SENTENCE_FILES) {
    const bytes = await fetchFile(at(name), name, { ...pinned(name), optional: true });
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
    if (!wanted || typeof m.path !== "string" || !MODULE_FOLDER.test(m.path)) continue;
    for (const f of wanted) {
      const paths = [f].flat().map((name) => `${m.path}/${name}`);
      const pins = paths.filter((p) => pinned(p).sha256 != null);
      for (const path of pins.length ? pins.slice(0, 1) : paths) {
        const bytes = await fetchFile(at(path), path, { ...pinned(path), optional: true });
        if (bytes) {
          out.push([path, path.endsWith(`/${TORCH_BIN}`) ? torchBin(bytes, path) : bytes]);
          break;
        }
      }
    }
  }
  return out;
}
