// The checks of what callers pass: types (Rust checks the ranges, saying how to fix them).

import { IN_NODE } from "./env.js";

const DEVICES = ["auto", "webgpu", "cpu"];
/** sentence-transformers' pooling modes, by our names (src/sentence.rs `Pooling`). */
const POOLINGS = ["mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken"];
/** Texts per forward pass in `embed`: bounds the activation memory of one call whatever the number of texts. */
export const DEFAULT_BATCH_SIZE = 32;
/** `embed`'s encodings (sentence-transformers' `quantize_embeddings` precisions; src/heads/quantize.rs). */
const PRECISIONS = ["float32", "int8", "uint8", "binary", "ubinary"];

export function checkOptions(options, allowed, method) {
  if (options == null) return {};
  if (typeof options !== "object" || Array.isArray(options)) {
    throw new TypeError(`${method}: options must be an object`);
  }
  for (const k of Object.keys(options)) {
    if (!allowed.includes(k)) {
      throw new TypeError(`${method}: unknown option "${k}" (known: ${allowed.join(", ")})`);
    }
  }
  return options;
}

/** `o`'s `keys` that are set must be non-negative integers (`m`: the method, for the message). */
function counts(m, o, keys) {
  for (const k of keys) {
    if (o[k] != null && (!Number.isInteger(o[k]) || o[k] < 0)) {
      throw new TypeError(`${m}: ${k} must be a non-negative integer (got ${JSON.stringify(o[k])})`);
    }
  }
}

function seed(m, v) {
  if (v != null && (!Number.isSafeInteger(v) || v < 0)) {
    throw new TypeError(`${m}: seed must be a non-negative integer (got ${JSON.stringify(v)})`);
  }
}

function finite(m, o, keys) {
  for (const k of keys) {
    if (o[k] != null && (typeof o[k] !== "number" || !Number.isFinite(o[k]))) {
      throw new TypeError(`${m}: ${k} must be a finite number (got ${JSON.stringify(o[k])})`);
    }
  }
}

/** `o`'s `keys` that are set must be true or false. */
export function flags(m, o, keys) {
  for (const k of keys) if (o[k] != null && typeof o[k] !== "boolean") throw new TypeError(`${m}: ${k} must be true or false`);
}

/** Drops the options set to null or undefined (the module takes an absent one for its default). */
function dropNulls(o) {
  for (const k of Object.keys(o)) if (o[k] == null) delete o[k];
}

export function positiveInt(v, method, name) {
  if (!Number.isInteger(v) || v < 1) throw new TypeError(`${method}: ${name} must be a positive integer`);
  return v;
}

export const TRAIN_OPTIONS = ["labels", "epochs", "learningRate", "batchSize", "weightDecay", "validationSplit", "seed",
  "hidden", "activation", "pooling", "patience", "onProgress"];

/** [{ text, label }] → parallel arrays, with a TypeError naming the first bad example. */
export function trainingExamples(examples) {
  if (!Array.isArray(examples)) {
    throw new TypeError("trainHead: examples must be an array of { text, label } objects");
  }
  const texts = [];
  const labels = [];
  examples.forEach((e, i) => {
    if (e == null || typeof e !== "object" || typeof e.text !== "string" || typeof e.label !== "string") {
      throw new TypeError(`trainHead: examples[${i}] must be { text: string, label: string }`);
    }
    texts.push(e.text);
    labels.push(e.label);
  });
  return { texts, labels };
}

/** Types of trainHead's options. */
export function checkTrainOptions(o, onProgress) {
  const m = "trainHead";
  if (onProgress != null && typeof onProgress !== "function") {
    throw new TypeError(`${m}: onProgress must be a function ({ epoch, loss, accuracy, valLoss, valAccuracy }) => void`);
  }
  counts(m, o, ["epochs", "batchSize", "hidden", "patience"]);
  seed(m, o.seed);
  finite(m, o, ["learningRate", "weightDecay", "validationSplit"]);
  for (const k of ["activation", "pooling"]) {
    if (o[k] != null && typeof o[k] !== "string") throw new TypeError(`${m}: ${k} must be a string`);
  }
  if (o.labels != null && (!Array.isArray(o.labels) || o.labels.some((l) => typeof l !== "string"))) {
    throw new TypeError(`${m}: labels must be an array of strings`);
  }
  dropNulls(o);
}
export const FINE_TUNE_OPTIONS = ["task", "epochs", "learningRate", "batchSize", "accumulate", "layers", "warmup",
  "weightDecay", "validationSplit", "seed", "docStride", "dropout", "patience", "lora", "checkpoint", "resume", "onProgress",
  "signal"];
const FINE_TUNE_TASKS = ["classify", "pair", "ner", "qa", "embed"];

/** Types of a training call's `onProgress` and `signal` (`m`: the method). */
function checkHooks(m, onProgress, signal) {
  if (onProgress != null && typeof onProgress !== "function") {
    throw new TypeError(`${m}: onProgress must be a function (progress) => void`);
  }
  if (signal != null && (typeof signal !== "object" || typeof signal.aborted !== "boolean")) {
    throw new TypeError(`${m}: signal must be an AbortSignal`);
  }
}

/** Types of fineTune's options. */
export function checkFineTuneOptions(o, onProgress, signal) {
  const m = "fineTune";
  checkHooks(m, onProgress, signal);
  if (o.task != null && !FINE_TUNE_TASKS.includes(o.task)) {
    throw new TypeError(`${m}: task must be one of ${FINE_TUNE_TASKS.map((t) => `"${t}"`).join(", ")} (got ${JSON.stringify(o.task)})`);
  }
  counts(m, o, ["epochs", "batchSize", "accumulate", "docStride", "patience"]);
  if (o.layers != null && o.layers !== "all" && !(Number.isInteger(o.layers) && o.layers >= 0)) {
    throw new TypeError(`${m}: layers must be "all" or a number of top layers, 0 for the head alone (got ${JSON.stringify(o.layers)})`);
  }
  seed(m, o.seed);
  flags(m, o, ["dropout"]);
  if (o.lora != null) {
    const l = o.lora;
    if (typeof l !== "object" || !Number.isInteger(l.r) || l.r < 1
      || (l.alpha != null && (typeof l.alpha !== "number" || !Number.isFinite(l.alpha)))
      || (l.targets != null && !["qv", "all", "all-projection"].includes(l.targets))) {
      throw new TypeError(`${m}: lora must be { r: a positive integer, alpha?: number, targets?: "qv" | "all" | "all-projection" }`);
    }
  }
  finite(m, o, ["learningRate", "warmup", "weightDecay", "validationSplit"]);
  dropNulls(o);
}

export const PRETRAIN_OPTIONS = ["steps", "batchSize", "maxLength", "mlmProbability", "wholeWordMask", "dynamicMasking",
  "nsp", "shortSeqProb", "learningRate", "warmup", "weightDecay", "validationSplit", "seed", "dropout", "checkpoint",
  "resume", "onProgress", "signal"];

/** Types of pretrain's corpus and options. */
export function checkPretrainOptions(corpus, o, onProgress, signal) {
  const m = "pretrain";
  if (typeof corpus !== "string" && !(Array.isArray(corpus) && corpus.every((d) => typeof d === "string"))) {
    throw new TypeError(`${m}: corpus must be a string (one sentence or line per line, a blank line between `
      + "documents) or an array of document strings (each document's lines its sentences)");
  }
  checkHooks(m, onProgress, signal);
  counts(m, o, ["steps", "batchSize", "maxLength"]);
  seed(m, o.seed);
  flags(m, o, ["wholeWordMask", "dynamicMasking", "nsp", "dropout"]);
  finite(m, o, ["mlmProbability", "shortSeqProb", "learningRate", "warmup", "weightDecay", "validationSplit"]);
  dropNulls(o);
}

/** Types of a training call's `checkpoint` and `resume` (the name is checked by js/checkpoints.js). */
export function checkCheckpointOptions(checkpoint, resume, m = "fineTune") {
  if (checkpoint != null) {
    const count = (v) => v == null || (Number.isInteger(v) && v >= 1);
    if (typeof checkpoint !== "object" || typeof checkpoint.name !== "string" || !count(checkpoint.every)
      || !count(checkpoint.keep) || Object.keys(checkpoint).some((k) => !["name", "every", "keep"].includes(k))) {
      throw new TypeError(`${m}: checkpoint must be { name: string, every?: steps >= 1, keep?: count >= 1 }`);
    }
  }
  flags(m, { resume }, ["resume"]);
  if (resume && checkpoint == null) {
    throw new TypeError(`${m}: resume continues from a checkpoint: give checkpoint: { name } as the first run did`);
  }
}

/** Bert.load's options, their types checked (`sha256` and `maxBytes`: js/loader.js checkLoadOptions). */
export function checkLoad(options) {
  const opts = checkOptions(options, ["device", "onProgress", "cache", "cacheDir", "sha256", "maxBytes", "simd", "wasm",
    "adapter", "threads", "activations", "crossover", "_injectFault"], "Bert.load");
  const device = opts.device ?? "auto";
  const activations = opts.activations ?? "f32";
  if (activations !== "f32" && activations !== "f16") {
    throw new TypeError(`Bert.load: activations must be "f32" or "f16" (got ${JSON.stringify(opts.activations)})`);
  }
  flags("Bert.load", opts, ["crossover"]);
  if (!DEVICES.includes(device)) {
    throw new TypeError(`Bert.load: device must be one of ${DEVICES.map((d) => `"${d}"`).join(", ")} (got ${JSON.stringify(device)})`);
  }
  flags("Bert.load", opts, ["cache"]);
  if (opts.onProgress != null && typeof opts.onProgress !== "function") {
    throw new TypeError("Bert.load: onProgress must be a function ({ file, loaded, total }) => void");
  }
  if (opts.cacheDir != null && !IN_NODE) {
    throw new TypeError("Bert.load: cacheDir is for Node.js; a browser keeps downloads in the Cache API (cache: true)");
  }
  if (opts.cacheDir != null && (typeof opts.cacheDir !== "string" || opts.cacheDir === "")) {
    throw new TypeError("Bert.load: cacheDir must be the path of a folder (a non-empty string)");
  }
  return { opts, device, activations };
}

/** Bert.create's arguments: `{ opts, json }` (config.json's text) and `file(name)`, a tokenizer file or undefined. */
export function checkCreateArgs(config, tokenizer, options) {
  const method = "Bert.create";
  const opts = checkOptions(options, ["seed", "device", "simd", "wasm", "threads"], method);
  seed(method, opts.seed);
  let json = config;
  if (config != null && typeof config === "object" && !Array.isArray(config)) json = JSON.stringify(config);
  if (typeof json !== "string") {
    throw new TypeError(`${method}: config must be config.json's fields, an object or its JSON text`);
  }
  const file = (name) => tokenizer?.[name] ?? undefined;
  if (tokenizer == null || typeof tokenizer !== "object" || (file("tokenizer.json") == null && file("vocab.txt") == null)) {
    throw new TypeError(`${method}: tokenizer must be a tokenizer's files, { "tokenizer.json" or "vocab.txt", `
      + "\"tokenizer_config.json\" } (what trainTokenizer resolves to)");
  }
  return { opts, json, file };
}

/** `prompt` set must be a string (a prompt's name; Rust says which names the model has). */
export function promptName(method, prompt) {
  if (prompt != null && typeof prompt !== "string") throw new TypeError(`${method}: prompt must be a prompt's name`);
  return prompt ?? undefined;
}

/** embed's options, their types checked; `batchSize` defaulted. */
export function checkEmbedOptions(options) {
  const opts = checkOptions(options, ["pooling", "normalize", "batchSize", "prompt", "dimensions", "precision",
    "ranges"], "embed");
  const { pooling, normalize, prompt, dimensions, precision, ranges } = opts;
  if (precision != null && !PRECISIONS.includes(precision)) {
    throw new TypeError(`embed: precision must be one of ${PRECISIONS.map((p) => `"${p}"`).join(", ")} `
      + `(got ${JSON.stringify(precision)})`);
  }
  if (ranges != null) {
    if (precision !== "int8" && precision !== "uint8") throw new TypeError('embed: ranges apply to precision "int8" and "uint8"');
    const row = (r) => Array.isArray(r) || r instanceof Float32Array || r instanceof Float64Array;
    if (!Array.isArray(ranges) || ranges.length !== 2 || !row(ranges[0]) || !row(ranges[1])) {
      throw new TypeError("embed: ranges must be [min, max], each an array of numbers (one per dimension)");
    }
  }
  if (pooling != null && !POOLINGS.includes(pooling)) {
    throw new TypeError(`embed: pooling must be one of ${POOLINGS.map((p) => `"${p}"`).join(", ")} `
      + `(got ${JSON.stringify(pooling)})`);
  }
  flags("embed", opts, ["normalize"]);
  promptName("embed", prompt);
  if (dimensions != null && (!Number.isInteger(dimensions) || dimensions < 1)) {
    throw new TypeError("embed: dimensions must be a positive integer");
  }
  const batchSize = opts.batchSize ?? DEFAULT_BATCH_SIZE;
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new TypeError("embed: batchSize must be a positive integer");
  }
  return { pooling, normalize, prompt, dimensions, batchSize, precision, ranges };
}

/** zeroShot's labels and options → `{ template, multiLabel }` (Rust checks the labels' and template's content). */
export function checkZeroShot(labels, options) {
  if (!Array.isArray(labels) || !labels.every((l) => typeof l === "string")) {
    throw new TypeError("zeroShot: labels must be an array of strings (the candidate labels)");
  }
  const opts = checkOptions(options, ["template", "multiLabel"], "zeroShot");
  if (opts.template != null && typeof opts.template !== "string") {
    throw new TypeError("zeroShot: template must be a string with {} where the label goes");
  }
  flags("zeroShot", opts, ["multiLabel"]);
  return { template: opts.template ?? undefined, multiLabel: opts.multiLabel ?? false };
}

/** classify's input (a text, a pair [a, b], or an array of either) → `{ single, a, b }`: texts and pair texts. */
export function classifyInputs(input) {
  const isPair = (v) => Array.isArray(v) && v.length === 2 && v.every((x) => typeof x === "string");
  const single = typeof input === "string" || isPair(input);
  const items = single ? [input] : input;
  if (!Array.isArray(items)) {
    throw new TypeError("classify: give a text, a pair [a, b], or an array of texts or pairs");
  }
  const a = [];
  const b = [];
  items.forEach((it, i) => {
    if (typeof it === "string") {
      a.push(it);
      b.push(undefined);
    } else if (isPair(it)) {
      a.push(it[0]);
      b.push(it[1]);
    } else {
      throw new TypeError(`classify: input[${i}] must be a string or a pair [a, b] of strings`);
    }
  });
  return { single, a, b };
}
