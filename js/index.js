// bertgpu: BERT in the browser, on WebGPU or on the CPU (wasm SIMD128).
//
//   import { Bert } from "bertgpu";
//   const bert = await Bert.load("https://example.com/models/all-MiniLM-L6-v2/");
//   const [a, b] = await bert.embed(["a sentence", "another one"]);
//
// The model lives in a wasm module (Rust: src/wasm/ over src/engine.rs). This wrapper resolves and downloads the
// model files (js/loader.js and the files it imports), picks the device, validates inputs, and queues calls so they never overlap inside the
// module.

import { clearCache } from "./cache.js";
import { IN_NODE, nodeBuiltin } from "./env.js";
import { checkLoadOptions, fetchAdapterFiles, fetchModelFiles } from "./loader.js";
import { resolveSource } from "./sources.js";
import { deleteCheckpoint, listCheckpoints, openCheckpointStore } from "./checkpoints.js";
import { cachedCrossover, cachedTunings, calibrate, rememberCrossover, tune } from "./tuning.js";
import { endPool, startPool, threadsOption, threadsUnavailable } from "./threads.js";
// The wasm-bindgen glue of the four builds (see BUILDS).
import * as glueSimd128 from "./wasm/bertgpu.js";
import * as glueRelaxed from "./wasm-relaxed/bertgpu.js";
import * as glueThreads from "./wasm-threads/bertgpu.js";
import * as glueThreadsRelaxed from "./wasm-threads-relaxed/bertgpu.js";

export { clearCache };

const DEVICES = ["auto", "webgpu", "cpu"];
/** sentence-transformers' pooling modes, by our names (src/sentence.rs `Pooling`). */
const POOLINGS = ["mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken"];
/** Texts per forward pass in `embed`: bounds the activation memory of one call whatever the number of texts. */
const DEFAULT_BATCH_SIZE = 32;
/** How long `crossover: true` may time the CPU against the GPU at load (src/engine/crossover.rs `measure`). */
const CROSSOVER_BUDGET_MS = 1000;

const SIMDS = ["auto", "relaxed", "simd128"];

// The smallest module using a relaxed SIMD instruction (`() -> v128`: three `v128.const 0` into
// `i32x4.relaxed_dot_i8x16_i7x16_add_s`): it validates exactly where relaxed SIMD is implemented.
const RELAXED_PROBE = (() => {
  const b = [0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 5, 1, 0x60, 0, 1, 0x7b, 3, 2, 1, 0, 10, 0x3d, 1, 0x3b, 0];
  for (let i = 0; i < 3; i++) b.push(0xfd, 0x0c, ...new Array(16).fill(0));
  b.push(0xfd, 0x93, 0x02, 0x0b);
  return new Uint8Array(b);
})();

/** Whether this engine runs relaxed SIMD (Chrome/Edge 114+), which the faster of the two builds needs. */
export function hasRelaxedSimd() {
  try {
    return WebAssembly.validate(RELAXED_PROBE);
  } catch {
    return false;
  }
}

/**
 * The build `simd` ("auto" | "relaxed" | "simd128") asks for, checked against what the engine can run and, when the
 * caller gives the wasm (`given`: { relaxed?, simd128? }), against the builds given.
 */
function pickBuild(simd, given) {
  if (!SIMDS.includes(simd)) {
    throw new TypeError(`Bert.load: simd must be one of ${SIMDS.map((d) => `"${d}"`).join(", ")} (got ${JSON.stringify(simd)})`);
  }
  const relaxed = hasRelaxedSimd();
  if (simd === "relaxed" && !relaxed) {
    throw new Error("Bert.load: simd: \"relaxed\" was asked for, but this engine does not implement WebAssembly "
      + "relaxed SIMD; use \"auto\" or \"simd128\"");
  }
  if (given) {
    const pick = simd === "auto" ? (relaxed && given.relaxed ? "relaxed" : "simd128") : simd;
    if (!given[pick]) {
      const file = pick === "relaxed" ? "wasm-relaxed/bertgpu_bg.wasm" : "wasm/bertgpu_bg.wasm";
      throw new TypeError(`Bert.load: the wasm option gives no ${pick} build (${file}); give it as { ${pick}: ... }`);
    }
    return pick;
  }
  return simd === "auto" ? (relaxed ? "relaxed" : "simd128") : simd;
}

// The two builds (scripts/build-wasm.sh): wasm/ (SIMD128) and wasm-relaxed/ (plus relaxed SIMD: a faster Q8_0
// kernel, the same results bit for bit). Both glue modules are imported statically, at the top (about 10 kB gzipped
// each; a page downloads only the .wasm of the build it uses): a service worker may not use import(), and a static
// import leaves a bundler no chunk to place. Every specifier is a literal, which bundlers follow (Vite, webpack and
// Rollup copy the .wasm files and rewrite the URLs) and browsers resolve as they are, next to this file.
// The other two, wasm-threads/ and wasm-threads-relaxed/ (the same two with threads: js/threads.js), run where the
// page is cross-origin isolated.
const BUILDS = {
  simd128: { glue: glueSimd128, url: () => new URL("./wasm/bertgpu_bg.wasm", import.meta.url) },
  relaxed: { glue: glueRelaxed, url: () => new URL("./wasm-relaxed/bertgpu_bg.wasm", import.meta.url) },
  threads: { glue: glueThreads, url: () => new URL("./wasm-threads/bertgpu_bg.wasm", import.meta.url) },
  threadsRelaxed: { glue: glueThreadsRelaxed, url: () => new URL("./wasm-threads-relaxed/bertgpu_bg.wasm", import.meta.url) },
};
/** The threaded builds, and the SIMD each has (the `simd` a model reports). */
const THREADED = { threads: "simd128", threadsRelaxed: "relaxed" };

/**
 * The build and thread count for Bert.load's options: a threaded build when more than one thread is asked for (or
 * by default, where the browser reports several cores), the page can run it and, when the caller gives the wasm,
 * gives it; the relaxed-SIMD one where the single-threaded choice would be relaxed SIMD (`simd` "relaxed", or
 * "auto" on an engine that has it). Else the single-threaded build on one thread, with `threadsReason` saying why
 * where threads were asked for.
 */
function pickThreads(opts, wasm, method) {
  const threads = threadsOption(opts.threads, method);
  const simd = opts.simd ?? "auto";
  // The single-threaded build, checked only where it runs (a wasm option may give a threaded build alone).
  const single = () => pickBuild(simd, wasm);
  if (threads === 1) return { build: single(), threads: 1, threadsReason: null };
  if (!SIMDS.includes(simd) || (simd === "relaxed" && !hasRelaxedSimd())) pickBuild(simd, null); // the same errors
  const relaxed = simd === "relaxed" || (simd === "auto" && hasRelaxedSimd() && (!wasm || wasm.threadsRelaxed != null));
  const build = relaxed ? "threadsRelaxed" : "threads";
  let why = threadsUnavailable();
  if (!why && wasm && !wasm[build]) {
    why = `the wasm option gives no threaded${relaxed ? " relaxed-SIMD" : ""} build ({ ${build}: ... })`;
  }
  if (!why) return { build, threads, threadsReason: null };
  return { build: single(), threads: 1, threadsReason: why };
}

/**
 * Gives the threaded runtime a pool of `threads` threads (one per runtime: a model that asks for another count
 * restarts it, and every model of the runtime then runs on the new one), and counts `rt.users`: the last model's
 * dispose() ends the pool. Pool changes run one at a time (`rt.poolOps`), and a pool's workers have left before
 * the next one starts.
 */
function usePool(rt, threads) {
  const done = rt.poolOps.then(async () => {
    if (rt.pool?.threads !== threads) {
      const old = rt.pool;
      rt.pool = null;
      if (old) await endPool(rt.glue, old);
      rt.pool = await startPool(rt.glue, threads, rt.build);
    }
    rt.users++;
  });
  // A pool that failed to start rejects this load only: the next one tries again.
  rt.poolOps = done.catch(() => {});
  return done;
}

/** One model less on the pool; the last one ends it. Resolves once the pool's workers have left, if it ended. */
function releasePool(rt) {
  rt.poolOps = rt.poolOps.then(async () => {
    rt.users--;
    if (rt.users === 0 && rt.pool) {
      const old = rt.pool;
      rt.pool = null;
      await endPool(rt.glue, old);
    }
  }).catch(() => {});
  return rt.poolOps;
}

// One wasm instance per build serves every model until a Rust panic (a trap) leaves it in an unknown state; then
// the next `Bert.load` starts a fresh instance of the same compiled module (the glue's `__wbg_reset_state`, from
// wasm-bindgen's --experimental-reset-state-function: new memory, new state, and the models of the old instance
// refuse further calls).
const runtimes = new Map(); // build → Promise<{ glue, build, poisoned: false | the panic message, listeners }>

async function getRuntime(build, wasm) {
  for (;;) {
    const pending = runtimes.get(build);
    if (!pending) break;
    let rt = null;
    try {
      rt = await pending;
    } catch (e) {
      // A failed start (say, a bad `wasm` URL) is not kept: this load tries again. A failed restart is final: the
      // glue still holds the instance that panicked.
      if (e.final) throw e;
    }
    if (rt && !rt.poisoned) return rt;
    if (runtimes.get(build) === pending) {
      if (rt) runtimes.set(build, restartRuntime(rt));
      else runtimes.delete(build);
    }
  }
  const started = startRuntime(build, wasm);
  runtimes.set(build, started);
  return started;
}

async function startRuntime(build, wasm) {
  const from = wasm ?? BUILDS[build].url();
  const glue = BUILDS[build].glue;
  const input = await wasmInput(from);
  try {
    const module = input instanceof URL && typeof fetch === "function" ? await compileFrom(input) : input;
    await glue.default({ module_or_path: module });
  } catch (e) {
    const where = from instanceof URL ? ` from ${from.href}` : "";
    throw new Error(`Bert.load: could not start the wasm module (${build} build)${where}: ${e?.message ?? e}`);
  }
  return attachRuntime(glue, build);
}

async function restartRuntime(old) {
  // The old instance's workers run over the old memory: end them (the new instance starts its own pool).
  if (old.pool) endPool(old.glue, old.pool);
  old.pool = null;
  try {
    if (typeof old.glue.__wbg_reset_state !== "function") throw new Error("this build cannot start a fresh instance");
    old.glue.__wbg_reset_state();
    return attachRuntime(old.glue, old.build);
  } catch (e) {
    const error = new Error(`Bert.load: the wasm module stopped after an internal error (${old.poisoned}) and could `
      + `not start again (${e.message}); reload the page`);
    error.final = true;
    throw error;
  }
}

function attachRuntime(glue, build) {
  const rt = { glue, build, poisoned: false, listeners: new Set(), pool: null, users: 0, poolOps: Promise.resolve() };
  glue.setPanicListener((message) => {
    rt.poisoned = message;
    for (const fn of rt.listeners) fn(message);
  });
  return rt;
}

/**
 * What the glue's init takes, from the wasm module's URL, bytes or compiled module. In Node.js a file: URL is read
 * from the disk (Node's fetch cannot read files).
 */
async function wasmInput(from) {
  if (from instanceof URL) {
    if (from.protocol === "file:" && IN_NODE) {
      const file = nodeBuiltin("node:url").fileURLToPath(from);
      try {
        const buffer = await nodeBuiltin("node:fs/promises").readFile(file);
        return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
      } catch (e) {
        throw new Error(`Bert.load: cannot read the wasm module ${file} (${e.message})`);
      }
    }
    return from;
  }
  return from; // bytes, a WebAssembly.Module or a Response (checked by checkWasmOption)
}

/**
 * The module at `url`, compiled from its bytes, not as it streams in. A streamed compilation
 * (`instantiateStreaming`, what the glue runs given a URL) left ~10 MiB in Chromium 156's renderer that only a
 * collection frees, and a load makes few collections of its own: WebGPU 8-bit peaked at 180.7-183.0 MiB that way,
 * 174.5-174.6 this way (BENCHMARKS.md, issue 29). What a compiled module keeps is the same either way. The bytes are
 * freed as soon as `compile` has its own copy.
 */
async function compileFrom(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`HTTP ${response.status} ${response.statusText}`);
  const bytes = await response.arrayBuffer();
  const compiling = WebAssembly.compile(bytes);
  try {
    return await compiling;
  } finally {
    // `compile` copies the bytes before it returns (the specification's "get a copy of the buffer source").
    if (typeof bytes.transfer === "function") bytes.transfer(0);
  }
}

/** One value of the `wasm` option → a URL, bytes, a WebAssembly.Module or a Response; TypeError if it is none. */
function wasmValue(value, what) {
  if (value instanceof URL) return value;
  if (typeof value === "string") {
    const base = IN_NODE ? nodeBuiltin("node:url").pathToFileURL(`${globalThis.process.cwd()}/`).href
      : globalThis.location?.href;
    try {
      return new URL(value, base);
    } catch {
      throw new TypeError(`Bert.load: ${what} "${value}" is not a URL`);
    }
  }
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof WebAssembly.Module) return value;
  if (typeof Response === "function" && value instanceof Response) return value;
  throw new TypeError(`Bert.load: ${what} must be a URL (string or URL), the module's bytes (ArrayBuffer or `
    + "Uint8Array), a WebAssembly.Module or a Response");
}

/**
 * The `wasm` option → { relaxed?, simd128? }: one value is the SIMD128 build (wasm/bertgpu_bg.wasm), or the relaxed
 * one when `simd` is "relaxed"; an object names either or both.
 */
function checkWasmOption(wasm, simd) {
  if (wasm == null) return null;
  if (Object.getPrototypeOf(wasm) === Object.prototype) {
    const keys = Object.keys(wasm);
    const bad = keys.find((k) => !(k in BUILDS));
    if (bad || keys.length === 0) {
      throw new TypeError(`Bert.load: wasm as an object names the builds, { relaxed, simd128, threads, threadsRelaxed }${bad ? ` (got "${bad}")` : ""}`);
    }
    const out = {};
    for (const k of keys) if (wasm[k] != null) out[k] = wasmValue(wasm[k], `wasm.${k}`);
    return out;
  }
  return { [simd === "relaxed" ? "relaxed" : "simd128"]: wasmValue(wasm, "wasm") };
}

/** The WebGPU adapter, or null (no WebGPU, or no adapter). */
async function webgpuAdapter() {
  const gpu = globalThis.navigator?.gpu;
  if (!gpu) return null;
  try {
    return await gpu.requestAdapter({ powerPreference: "high-performance" });
  } catch {
    return null;
  }
}

function isFallback(adapter) {
  return Boolean(adapter.info?.isFallbackAdapter ?? adapter.isFallbackAdapter);
}

/**
 * The device string for the wasm module, and why "auto" did not even try the GPU: `{ device, reason }`.
 * "auto": WebGPU when there is a hardware adapter; on a software fallback adapter (e.g. SwiftShader) the wasm CPU
 * backend is tens of times faster, so "auto" takes the CPU there. "webgpu" insists (any adapter), "cpu" never asks.
 * With a hardware adapter "auto" stays "auto" for the module: it takes the GPU if the GPU passes the load-time check
 * (its output on a fixed input against the CPU backend's), else the CPU, saying why (`bert.deviceReason`).
 */
async function pickDevice(device) {
  if (device === "cpu") return { device: "cpu", reason: null };
  const adapter = await webgpuAdapter();
  if (device === "webgpu") {
    if (!adapter) {
      throw new Error(IN_NODE
        ? "Bert.load: device \"webgpu\" was asked for but Node.js has no WebGPU; use device: \"cpu\" or \"auto\""
        : "Bert.load: device \"webgpu\" was asked for but this browser gives no WebGPU adapter "
          + "(navigator.gpu is missing or requestAdapter() returned null); use device: \"cpu\" or \"auto\"");
    }
    return { device: "webgpu", reason: null };
  }
  if (!adapter) {
    return { device: "cpu", reason: IN_NODE ? "Node.js has no WebGPU"
      : "this browser gives no WebGPU adapter (navigator.gpu is missing or requestAdapter() returned null)" };
  }
  if (isFallback(adapter)) {
    const info = adapter.info ?? {};
    const name = info.description || [info.vendor, info.architecture].filter(Boolean).join(" ");
    return { device: "cpu", reason: `the WebGPU adapter${name ? ` "${name}"` : ""} is a software fallback adapter `
      + "running on the CPU, slower than the CPU backend" };
  }
  return { device: "auto", reason: null };
}

function checkOptions(options, allowed, method) {
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

/** One string or an array of strings → { list, single }. */
function texts(value, method, what = "text") {
  if (typeof value === "string") return { list: [value], single: true };
  if (Array.isArray(value)) {
    value.forEach((v, i) => {
      if (typeof v !== "string") {
        throw new TypeError(`${method}: ${what}[${i}] must be a string (got ${v === null ? "null" : typeof v})`);
      }
    });
    return { list: value, single: false };
  }
  throw new TypeError(`${method}: ${what} must be a string or an array of strings `
    + `(got ${value === null ? "null" : typeof value})`);
}

function positiveInt(v, method, name) {
  if (!Number.isInteger(v) || v < 1) throw new TypeError(`${method}: ${name} must be a positive integer`);
  return v;
}

const TRAIN_OPTIONS = ["labels", "epochs", "learningRate", "batchSize", "weightDecay", "validationSplit", "seed",
  "hidden", "activation", "pooling", "patience", "onProgress"];

/** [{ text, label }] → parallel arrays, with a TypeError naming the first bad example. */
function trainingExamples(examples) {
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

/** Types of trainHead's options (their ranges are checked in Rust, with messages that say how to fix them). */
function checkTrainOptions(o, onProgress) {
  const m = "trainHead";
  if (onProgress != null && typeof onProgress !== "function") {
    throw new TypeError(`${m}: onProgress must be a function ({ epoch, loss, accuracy, valLoss, valAccuracy }) => void`);
  }
  for (const k of ["epochs", "batchSize", "hidden", "patience"]) {
    if (o[k] != null && (!Number.isInteger(o[k]) || o[k] < 0)) {
      throw new TypeError(`${m}: ${k} must be a non-negative integer (got ${JSON.stringify(o[k])})`);
    }
  }
  if (o.seed != null && (!Number.isSafeInteger(o.seed) || o.seed < 0)) {
    throw new TypeError(`${m}: seed must be a non-negative integer (got ${JSON.stringify(o.seed)})`);
  }
  for (const k of ["learningRate", "weightDecay", "validationSplit"]) {
    if (o[k] != null && (typeof o[k] !== "number" || !Number.isFinite(o[k]))) {
      throw new TypeError(`${m}: ${k} must be a finite number (got ${JSON.stringify(o[k])})`);
    }
  }
  for (const k of ["activation", "pooling"]) {
    if (o[k] != null && typeof o[k] !== "string") throw new TypeError(`${m}: ${k} must be a string`);
  }
  if (o.labels != null && (!Array.isArray(o.labels) || o.labels.some((l) => typeof l !== "string"))) {
    throw new TypeError(`${m}: labels must be an array of strings`);
  }
  for (const k of Object.keys(o)) if (o[k] == null) delete o[k];
}

/** How many GPU device losses one checkpointed fineTune goes on after (each from its last checkpoint). */
const MAX_DEVICE_LOSSES = 3;

const FINE_TUNE_OPTIONS = ["task", "epochs", "learningRate", "batchSize", "accumulate", "layers", "warmup",
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

/** Types of fineTune's options (their ranges are checked in Rust, with messages that say how to fix them). */
function checkFineTuneOptions(o, onProgress, signal) {
  const m = "fineTune";
  checkHooks(m, onProgress, signal);
  if (o.task != null && !FINE_TUNE_TASKS.includes(o.task)) {
    throw new TypeError(`${m}: task must be one of ${FINE_TUNE_TASKS.map((t) => `"${t}"`).join(", ")} (got ${JSON.stringify(o.task)})`);
  }
  for (const k of ["epochs", "batchSize", "accumulate", "docStride", "patience"]) {
    if (o[k] != null && (!Number.isInteger(o[k]) || o[k] < 0)) {
      throw new TypeError(`${m}: ${k} must be a non-negative integer (got ${JSON.stringify(o[k])})`);
    }
  }
  if (o.layers != null && o.layers !== "all" && !(Number.isInteger(o.layers) && o.layers >= 0)) {
    throw new TypeError(`${m}: layers must be "all" or a number of top layers, 0 for the head alone (got ${JSON.stringify(o.layers)})`);
  }
  if (o.seed != null && (!Number.isSafeInteger(o.seed) || o.seed < 0)) {
    throw new TypeError(`${m}: seed must be a non-negative integer (got ${JSON.stringify(o.seed)})`);
  }
  if (o.dropout != null && typeof o.dropout !== "boolean") throw new TypeError(`${m}: dropout must be true or false`);
  if (o.lora != null) {
    const l = o.lora;
    if (typeof l !== "object" || !Number.isInteger(l.r) || l.r < 1
      || (l.alpha != null && (typeof l.alpha !== "number" || !Number.isFinite(l.alpha)))
      || (l.targets != null && l.targets !== "qv" && l.targets !== "all")) {
      throw new TypeError(`${m}: lora must be { r: a positive integer, alpha?: number, targets?: "qv" | "all" }`);
    }
  }
  for (const k of ["learningRate", "warmup", "weightDecay", "validationSplit"]) {
    if (o[k] != null && (typeof o[k] !== "number" || !Number.isFinite(o[k]))) {
      throw new TypeError(`${m}: ${k} must be a finite number (got ${JSON.stringify(o[k])})`);
    }
  }
  for (const k of Object.keys(o)) if (o[k] == null) delete o[k];
}

const PRETRAIN_OPTIONS = ["steps", "batchSize", "maxLength", "mlmProbability", "wholeWordMask", "nsp", "shortSeqProb",
  "learningRate", "warmup", "weightDecay", "validationSplit", "seed", "dropout", "checkpoint", "resume", "onProgress",
  "signal"];

/** Types of pretrain's corpus and options (their ranges are checked in Rust, with messages that say how to fix them). */
function checkPretrainOptions(corpus, o, onProgress, signal) {
  const m = "pretrain";
  if (typeof corpus !== "string" && !(Array.isArray(corpus) && corpus.every((d) => typeof d === "string"))) {
    throw new TypeError(`${m}: corpus must be a string (one sentence or line per line, a blank line between `
      + "documents) or an array of document strings (each document's lines its sentences)");
  }
  checkHooks(m, onProgress, signal);
  for (const k of ["steps", "batchSize", "maxLength"]) {
    if (o[k] != null && (!Number.isInteger(o[k]) || o[k] < 0)) {
      throw new TypeError(`${m}: ${k} must be a non-negative integer (got ${JSON.stringify(o[k])})`);
    }
  }
  if (o.seed != null && (!Number.isSafeInteger(o.seed) || o.seed < 0)) {
    throw new TypeError(`${m}: seed must be a non-negative integer (got ${JSON.stringify(o.seed)})`);
  }
  for (const k of ["wholeWordMask", "nsp", "dropout"]) {
    if (o[k] != null && typeof o[k] !== "boolean") throw new TypeError(`${m}: ${k} must be true or false`);
  }
  for (const k of ["mlmProbability", "shortSeqProb", "learningRate", "warmup", "weightDecay", "validationSplit"]) {
    if (o[k] != null && (typeof o[k] !== "number" || !Number.isFinite(o[k]))) {
      throw new TypeError(`${m}: ${k} must be a finite number (got ${JSON.stringify(o[k])})`);
    }
  }
  for (const k of Object.keys(o)) if (o[k] == null) delete o[k];
}

/** Types of a training call's `checkpoint` and `resume` (the name is checked by js/checkpoints.js). */
function checkCheckpointOptions(checkpoint, resume, m = "fineTune") {
  if (checkpoint != null) {
    const count = (v) => v == null || (Number.isInteger(v) && v >= 1);
    if (typeof checkpoint !== "object" || typeof checkpoint.name !== "string" || !count(checkpoint.every)
      || !count(checkpoint.keep) || Object.keys(checkpoint).some((k) => !["name", "every", "keep"].includes(k))) {
      throw new TypeError(`${m}: checkpoint must be { name: string, every?: steps >= 1, keep?: count >= 1 }`);
    }
  }
  if (resume != null && typeof resume !== "boolean") throw new TypeError(`${m}: resume must be true or false`);
  if (resume && checkpoint == null) {
    throw new TypeError(`${m}: resume continues from a checkpoint: give checkpoint: { name } as the first run did`);
  }
}

/**
 * Rust reports character offsets (Unicode scalar values); JavaScript strings index UTF-16 units, where characters
 * outside the Basic Multilingual Plane (most emoji) count twice. Rewrites `obj.start`/`obj.end` in place.
 */
function toUtf16Span(text, obj) {
  if (!/[\uD800-\uDBFF]/.test(text)) return obj; // no surrogate pairs: the two agree
  const at = (chars) => {
    let units = 0;
    let n = 0;
    for (const ch of text) {
      if (n === chars) break;
      units += ch.length;
      n += 1;
    }
    return units;
  };
  obj.start = at(obj.start);
  obj.end = at(obj.end);
  return obj;
}

export class Bert {
  /** @internal use Bert.load */
  constructor(rt, model, device) {
    this._rt = rt;
    this._model = model;
    this._device = device;
    this._tail = Promise.resolve();
    this._disposed = false;
  }

  /**
   * The fine-tuning checkpoints this origin keeps (fineTune's `checkpoint`): [{ name, step, totalSteps, size,
   * date }], the newest complete checkpoint of each run, the most recent first.
   */
  static checkpoints() {
    return listCheckpoints();
  }

  /** Removes the checkpoints of run `name` (fineTune's `checkpoint.name`); resolves to false if there were none. */
  static deleteCheckpoint(name) {
    return deleteCheckpoint(name);
  }

  /**
   * A BERT from scratch, to pre-train (`pretrain`): `config` is config.json's fields (an object or its JSON text:
   * BertForPreTraining, or BertForMaskedLM when its `architectures` says so), `tokenizer` the files of a tokenizer
   * (what `trainTokenizer` resolves to: { "tokenizer.json", "vocab.txt", "tokenizer_config.json", ... }). Every
   * weight is drawn as transformers initialises them (N(0, initializer_range), zero biases, LayerNorms at 1 and 0,
   * the decoder tied to the word embeddings), from `options.seed` (0). The other options are `Bert.load`'s
   * `device`, `simd`, `wasm` and `threads`. `exportModel()` gives its Hugging Face folder.
   */
  static async create(config, tokenizer, options = {}) {
    const method = "Bert.create";
    const opts = checkOptions(options, ["seed", "device", "simd", "wasm", "threads"], method);
    if (opts.seed != null && (!Number.isSafeInteger(opts.seed) || opts.seed < 0)) {
      throw new TypeError(`${method}: seed must be a non-negative integer (got ${JSON.stringify(opts.seed)})`);
    }
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
    const { device, simd, wasm, threads } = opts;
    // The runtime Bert.load then uses for these options: the weights are drawn there and loaded from its memory.
    const wasmFiles = checkWasmOption(wasm, simd);
    const build = pickBuild(simd ?? "auto", wasmFiles);
    const rt = await getRuntime(build, wasmFiles?.[build]);
    const made = await guard(rt, () => rt.glue.initialModel(json, opts.seed == null ? {} : { seed: opts.seed }));
    const source = { config: made.config, weights: made.weights, tokenizer: file("tokenizer.json"), vocab: file("vocab.txt"),
      tokenizerConfig: file("tokenizer_config.json") };
    const loadOptions = Object.fromEntries(Object.entries({ device, simd, wasm, threads }).filter(([, v]) => v != null));
    return Bert.load(source, loadOptions);
  }

  /**
   * Loads a model. `source`: the base URL of a Hugging Face-style folder (config.json, tokenizer.json or vocab.txt,
   * model.safetensors), a .gguf URL, a Hugging Face repo id ("owner/name"), or { config, tokenizer, weights } bytes.
   */
  static async load(source, options = {}) {
    // (`_injectFault`: tests only. The GPU's linears return wrong values, as a miscompiled kernel would, so that
    // the load-time check fails: "auto" must then give the CPU with a `deviceReason`, "webgpu" must reject.)
    const opts = checkOptions(options, ["device", "onProgress", "cache", "cacheDir", "sha256", "maxBytes", "simd", "wasm",
      "adapter", "threads", "activations", "crossover", "_injectFault"], "Bert.load");
    const device = opts.device ?? "auto";
    const activations = opts.activations ?? "f32";
    if (activations !== "f32" && activations !== "f16") {
      throw new TypeError(`Bert.load: activations must be "f32" or "f16" (got ${JSON.stringify(opts.activations)})`);
    }
    if (opts.crossover != null && typeof opts.crossover !== "boolean") {
      throw new TypeError("Bert.load: crossover must be true or false");
    }
    if (!DEVICES.includes(device)) {
      throw new TypeError(`Bert.load: device must be one of ${DEVICES.map((d) => `"${d}"`).join(", ")} (got ${JSON.stringify(device)})`);
    }
    if (opts.cache != null && typeof opts.cache !== "boolean") {
      throw new TypeError("Bert.load: cache must be true or false");
    }
    if (opts.onProgress != null && typeof opts.onProgress !== "function") {
      throw new TypeError("Bert.load: onProgress must be a function ({ file, loaded, total }) => void");
    }
    if (opts.cacheDir != null && !IN_NODE) {
      throw new TypeError("Bert.load: cacheDir is for Node.js; a browser keeps downloads in the Cache API (cache: true)");
    }
    if (opts.cacheDir != null && (typeof opts.cacheDir !== "string" || opts.cacheDir === "")) {
      throw new TypeError("Bert.load: cacheDir must be the path of a folder (a non-empty string)");
    }
    const wasm = checkWasmOption(opts.wasm, opts.simd);
    const { build, threads, threadsReason } = pickThreads(opts, wasm, "Bert.load");
    const resolved = resolveSource(source);
    const cache = opts.cache ?? true;
    const { sha256, maxBytes } = checkLoadOptions(resolved, opts);
    const fetchOptions = { cache, cacheDir: opts.cacheDir, sha256, maxBytes };
    const runtime = getRuntime(build, wasm?.[build]);
    // The weights file goes into the module piece by piece as it downloads (src/wasm/stream.rs): never whole in JS.
    // For the GPU, its matrices go on into GPU memory as they arrive, never into wasm memory, which would keep their
    // size for the life of the tab (a LoRA adapter is folded into the weights on the host: then they stay there).
    const choosing = pickDevice(device);
    const stream = async ({ gguf, total, limit, hash }) => {
      const { glue } = await runtime;
      const chosen = await choosing.catch(() => null);
      return chosen && chosen.device !== "cpu" && opts.adapter == null
        ? glue.WeightStream.onDevice(gguf, total, limit, hash, chosen.device)
        : new glue.WeightStream(gguf, total, limit, hash);
    };
    // A first download with no onProgress goes into the cache as it is, then is read from there (js/loader.js).
    const fetching = fetchModelFiles(resolved, { ...fetchOptions, onProgress: opts.onProgress, stream, cacheFirst: true });
    let fetched, rt, chosen, adapter;
    try {
      [fetched, rt, chosen, adapter] = await Promise.all([fetching, runtime, choosing,
        opts.adapter == null ? null : fetchAdapterFiles(opts.adapter)]);
      if (adapter && fetched.gguf) throw new Error("Bert.load: a LoRA adapter loads beside a Hugging Face folder, not a .gguf");
    } catch (e) {
      // A stream that was read holds the model's tensors in wasm memory until freed.
      fetching.then((f) => (f.gguf ?? f.weights)?.free?.(), () => {});
      throw e;
    }
    // `files` is the only reference this function keeps to the downloaded bytes, and `instantiate` empties it once
    // the module has read them: the JS copy of the weights is garbage while the model is built, not after.
    const files = { ...fetched, ...adapter };
    if (resolved.kind !== "bytes") for (const k of Object.keys(fetched)) delete fetched[k]; // (a bytes source is the caller's)
    // The pool serves the CPU backend: a model the GPU runs starts none (its idle workers would each hold an instance
    // of the module and a stack for nothing). With "auto" on a hardware adapter the device is known once the model is
    // built: the pool starts then if the model fell back to the CPU.
    const poolFirst = build in THREADED && chosen.device === "cpu";
    if (poolFirst) {
      await usePool(rt, threads).catch((e) => {
        (files.gguf ?? files.weights)?.free?.();
        throw e;
      });
    }
    let model;
    try {
      model = await instantiate(rt, files, chosen.device, opts._injectFault === true, { consume: true });
      // f16 activations (WebGPU only; the CPU computes in f32), checked like the kernels before the model is used.
      if (activations === "f16" && model.device === "webgpu") await model.setF16Activations(true).catch((e) => {
        model.free();
        throw new Error(`Bert.load: activations "f16": ${e.message ?? e}`);
      });
      if (build in THREADED && !poolFirst && model.device === "cpu") {
        await usePool(rt, threads).catch((e) => {
          model.free();
          throw e;
        });
      }
    } catch (e) {
      if (poolFirst) releasePool(rt);
      throw e;
    }
    const bert = new Bert(rt, model, model.device);
    bert._f16 = model.f16Activations;
    bert._usesPool = build in THREADED && model.device === "cpu";
    bert._poolThreads = threads;
    bert._threadsReason = threadsReason;
    bert._deviceReason = model.deviceReason ?? chosen.reason;
    // A GPU device can be lost (driver reset, GPU process crash, `destroy()`), and its buffers with it: remember
    // where the files came from, so the call after the loss can load the model again on a new device. (For a bytes
    // source that keeps the caller's bytes referenced; URLs are fetched again, from the cache when it is on.)
    if (bert._device === "webgpu") bert._reloadFrom = { resolved, fetchOptions };
    // fineTune and exportModel read the model's files again (from the cache when it is on).
    bert._source = { resolved, fetchOptions, adapter };
    if (bert._device === "webgpu") {
      // The kernels for this adapter: the choice cached for it and this model's shape, or a calibration (about a
      // second, once). The model is usable at once; the first call waits for it in the queue.
      bert._kernelTuning = null;
      bert._enqueue("Bert.load (GPU calibration)", async (m) => {
        bert._kernelTuning = await tune(m).catch((e) => ({ tuning: m.tuning, source: "default",
          why: `the calibration failed (${e.message}); the default kernels run` }));
      }).catch(() => {});
      if (opts.crossover === true) bert._measureCrossover();
    }
    return bert;
  }

  /**
   * `crossover: true` on WebGPU: a CPU copy of the model for the short calls the CPU finishes sooner, made from the
   * model's files again (from the cache when it is on), with the crossover measured on this adapter (src/engine/
   * crossover.rs). Queued after the calibration, so the first calls wait for it; the copy is kept only where the CPU
   * wins at some length.
   */
  _measureCrossover() {
    this._crossover = null;
    this._enqueue("Bert.load (crossover)", async (m) => {
      // Measured once per adapter, driver and model shape (the kernels' tuning key), then read from the cache.
      const key = m.tuningKey;
      const known = key == null ? undefined : await cachedCrossover(key);
      if (known === 0) {
        this._crossover = { maxTokens: 0, points: [], text: "every call on the GPU", source: "cached" };
        return;
      }
      const f = await this._files();
      // In a threaded build the copy runs on the thread pool a CPU model would (and is timed so): started for it,
      // and ended again if no copy is kept (a pool that does not start leaves the copy on one thread).
      if (this._rt.build in THREADED && this._poolThreads > 1 && !this._usesPool) await this._joinPool();
      let c = null;
      try {
        c = f.gguf
          ? await m.addCpuTwinGguf(f.gguf, CROSSOVER_BUDGET_MS, known)
          : await m.addCpuTwin(f.config, f.tokenizer, f.vocab, f.tokenizerConfig, f.weights, f.adapterConfig,
            f.adapterWeights, CROSSOVER_BUDGET_MS, known);
      } finally {
        if (this._usesPool && this._device === "webgpu" && !(c?.maxTokens > 0)) {
          this._usesPool = false;
          await releasePool(this._rt);
        }
      }
      if (c && known === undefined && key != null) await rememberCrossover(key, c.maxTokens);
      this._crossover = c && { ...c, source: known === undefined ? "measured" : "cached" };
    }).catch((e) => {
      this._crossover = { maxTokens: 0, points: [], text: `not measured (${e.message}): every call on the GPU`,
        source: "failed" };
    });
  }

  /**
   * With `Bert.load`'s `crossover: true` on WebGPU: `{ maxTokens, points, text, source }`: calls of at most
   * `maxTokens` tokens run on a CPU copy of the model, longer ones on the GPU (0: every call on the GPU, and no copy
   * is kept); `points` holds what was timed (`[tokens, cpuMs, gpuMs]`; none where `source` is "cached": measured at
   * an earlier load on this adapter). null before it is measured, and without the option.
   */
  get crossover() {
    return this._crossover ?? null;
  }

  /** Where the last call ran: "webgpu" or "cpu". It differs from `device` only with `crossover: true`. */
  get lastCallDevice() {
    return this._model?.lastCallDevice ?? this._device;
  }

  /**
   * The GPU kernels this model runs (null on the CPU, and while the first calibration is under way): `{ tuning,
   * source }` where `source` is "cached" (calibrated on an earlier load on this adapter), "calibrated" (now, with
   * `defaultMs`, `chosenMs`, `spentMs` and every variant's time in `timed`) or "default" (a CPU adapter, with `why`).
   */
  get tuning() {
    return this._kernelTuning ?? null;
  }

  /**
   * Times the GPU kernels' variants on this model's shapes again (for benchmarks and bug reports; `budgetMs`,
   * default 1000, bounds it) and switches to the fastest: resolves to the calibration (`tuning`'s form), or null on
   * the CPU. Not cached: loads keep using the choice made at the first load.
   */
  calibrate({ budgetMs = 1000 } = {}) {
    if (typeof budgetMs !== "number" || !(budgetMs > 0)) {
      return Promise.reject(new TypeError("calibrate: budgetMs must be a positive number of milliseconds"));
    }
    return this._enqueue("calibrate", async (m) => {
      const c = await calibrate(m, budgetMs);
      if (c) this._kernelTuning = c;
      return c;
    });
  }

  /** "webgpu" or "cpu": where this model runs. */
  get device() {
    return this._device;
  }

  /**
   * How the GPU stores activations between kernels: "f16" where `Bert.load` asked for it and WebGPU runs the model
   * (arithmetic stays f32; BENCHMARKS.md, "f16 activations", has its accuracy against PyTorch), else "f32".
   */
  get activations() {
    return this._f16 ? "f16" : "f32";
  }

  /**
   * Why this model runs on the CPU although `device: "auto"` considered WebGPU: no WebGPU, a software fallback
   * adapter, or an adapter whose output failed the load-time check against the CPU backend's (which adapter, by how
   * much, where), or a GPU device lost during fineTune with no new one. null when WebGPU runs it or "cpu" was asked for.
   */
  get deviceReason() {
    return this._deviceReason ?? null;
  }

  /** "relaxed" or "simd128": which wasm build runs this model (see the `simd` option of `Bert.load`). */
  get simd() {
    return THREADED[this._rt.build] ?? this._rt.build;
  }

  /**
   * The threads this model's CPU work runs on (the calling thread included): the `threads` option where the
   * threaded build runs (a cross-origin isolated page), else 1. On WebGPU the GPU does the work.
   */
  get threads() {
    return this._usesPool && !this._disposed ? (this._rt.pool?.threads ?? 1) : 1;
  }

  /** Why this model runs on one thread although more were asked for (or by default), or null. */
  get threadsReason() {
    return this._threadsReason ?? null;
  }

  /** The model's prompts by name (`config_sentence_transformers.json`): `{ name: text }`, empty where it has none. */
  get prompts() {
    return this._disposed ? {} : this._model.prompts;
  }

  /**
   * sentence-transformers' description of the model as its files give it: `{ modules, max_seq_length, prompts,
   * default_prompt_name }` (modules: `{ type: "pooling", mode, include_prompt }`, `{ type: "dense", ... }`,
   * `{ type: "normalize" }`), or null where the model has none. What `embed` does with no options.
   */
  get sentenceTransformers() {
    return this._disposed ? null : this._model.sentenceTransformers ?? null;
  }

  /**
   * The tasks this model can run besides `tokenize` and `embed`: "fillMask", "nextSentence", "classify", "rerank",
   * "tokenClassify", "answer", "replacedTokens" (the heads its checkpoint carries; "classify" also once a head is trained or loaded).
   */
  get tasks() {
    return this._disposed ? [] : this._model.tasks;
  }

  /**
   * Runs `fn` after every earlier call finished (calls that overlap are queued, in order). A call that finds the GPU
   * device lost rejects saying so; the call after it loads the model again on a new device first.
   */
  _enqueue(method, fn) {
    if (this._training) {
      const what = this._training === "pretrain" ? "pre-training" : "fine-tuning";
      return Promise.reject(new Error(`${method}: this model is ${what}; wait for ${this._training} to finish, or stop `
        + "it with its signal (an AbortController's)"));
    }
    const run = async () => {
      if (this._disposed) throw new Error(`${method}: this model was disposed; load it again with Bert.load`);
      if (this._rt.poisoned) {
        throw new Error(`${method}: this model stopped working after an internal error (${this._rt.poisoned}); `
          + "load it again with Bert.load");
      }
      if (this._lost) await this._recover(method);
      try {
        return await guard(this._rt, () => fn(this._model));
      } catch (e) {
        const why = await this._lostReason(e);
        if (!why) throw e;
        this._lost = why;
        throw new Error(`${method}: the GPU device was lost (${why}); `
          + (this._reloadFrom ? "the next call loads the model again on a new device"
            : "load the model again with Bert.load"));
      }
    };
    const p = this._tail.then(run, run);
    this._tail = p.catch(() => {});
    return p;
  }

  /**
   * Why this model's GPU device was lost, if it was. wgpu learns it from `GPUDevice.lost`, a promise that may settle
   * a little after the failed read-back that revealed it: a GPU error waits for it briefly.
   */
  async _lostReason(error) {
    if (this._device !== "webgpu" || this._rt.poisoned) return null;
    const gpuError = /^gpu: /.test(error?.message ?? "");
    for (let i = 0; i < (gpuError ? 20 : 1); i++) {
      const why = this._model.deviceLost;
      if (why) return why;
      if (gpuError) await new Promise((r) => setTimeout(r, 10));
    }
    return null;
  }

  /** Loads the model again on a new GPU device (after a loss), with the live trained head, if any. */
  async _recover(method) {
    if (!this._reloadFrom) {
      throw new Error(`${method}: the GPU device was lost (${this._lost}); load the model again with Bert.load`);
    }
    let model;
    try {
      const files = this._tuned ?? await this._files();
      model = await instantiate(this._rt, files, "webgpu");
      if (this._headBytes) model.loadHead(this._headBytes);
      if (this._f16) await model.setF16Activations(true);
      const t = this._kernelTuning?.tuning;
      if (t && !model.runsTuning(t)) await model.setTuning(t).catch(() => { this._kernelTuning = null; });
    } catch (e) {
      model?.free();
      throw new Error(`${method}: the GPU device was lost (${this._lost}) and loading the model again on a new `
        + `device failed: ${e.message}`);
    }
    const old = this._model;
    this._model = model;
    this._lost = null;
    old.free();
    // The CPU copy went with the old model: made again for the new one, after this call.
    if (this._crossover) this._measureCrossover();
  }

  /**
   * A new model for a checkpointed fineTune whose GPU device was lost (`why`): on a new GPU device, or on the CPU if
   * none can be had. It becomes this model's.
   */
  async _replaceLostDevice(why) {
    const files = this._tuned ?? await this._files();
    let model;
    try {
      model = await instantiate(this._rt, files, "webgpu");
    } catch (e) {
      console.warn(`fineTune: the GPU device was lost (${why}) and a new one failed (${e.message}): going on on the CPU`);
      model = await instantiate(this._rt, files, "cpu");
      this._deviceReason = `the GPU device was lost (${why}) and a new one failed (${e.message})`;
    }
    const old = this._model;
    this._model = model;
    this._device = model.device;
    if (this._device !== "webgpu") this._reloadFrom = null;
    old.free();
    if (this._rt.build in THREADED && !this._usesPool && this._device === "cpu") {
      await this._joinPool(); // now on the CPU: the threads it was loaded for
    }
    return model;
  }

  /**
   * Runs this model's CPU work on the runtime's pool of the threads it was loaded for; a pool that does not start
   * leaves it on one thread, and `threadsReason` says why.
   */
  async _joinPool() {
    await usePool(this._rt, this._poolThreads).then(() => { this._usesPool = true; },
      (e) => { this._threadsReason = `the thread pool did not start: ${e.message}`; });
  }

  /** The files this model was loaded from, fetched again (from the cache when it is on), with its adapter. */
  async _files() {
    return { ...(await fetchModelFiles(this._source.resolved, this._source.fetchOptions)), ...this._source.adapter };
  }

  /** Keeps the live head's bytes of a GPU model, to restore it after a device loss. */
  _keepHead(bytes) {
    if (this._reloadFrom) this._headBytes = bytes;
  }

  /**
   * Tokenizes a text (or a pair). Arrays of texts (and of pairs) give arrays of results.
   * @returns {{input_ids: number[], token_type_ids: number[], tokens: string[]}}
   */
  tokenize(text, textPair) {
    return this._enqueue("tokenize", (m) => {
      const a = texts(text, "tokenize");
      let b = null;
      if (textPair != null) {
        b = texts(textPair, "tokenize", "textPair");
        if (b.list.length !== a.list.length) {
          throw new TypeError(`tokenize: ${a.list.length} texts but ${b.list.length} pair texts; give one pair per text`);
        }
      }
      const out = a.list.map((t, i) => m.tokenize(t, b ? b.list[i] : undefined));
      return a.single ? out[0] : out;
    });
  }

  /**
   * Sentence embeddings: one Float32Array per text (a single Float32Array for a single text). With no options, as
   * the model's sentence-transformers files say (its pooling, Dense layers, Normalize, default prompt; see
   * `sentenceTransformers`); a model without them pools by mean and normalises. Options override the files:
   * `pooling` ("mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken"), `normalize` (unit length),
   * `prompt` (one of `prompts`, by name, put before every text), `dimensions` (the first n values, normalised again
   * where normalising: Matryoshka).
   */
  embed(input, options = {}) {
    return this._enqueue("embed", async (m) => {
      const { list, single } = texts(input, "embed");
      const opts = checkOptions(options, ["pooling", "normalize", "batchSize", "prompt", "dimensions"], "embed");
      const { pooling, normalize, prompt, dimensions } = opts;
      if (pooling != null && !POOLINGS.includes(pooling)) {
        throw new TypeError(`embed: pooling must be one of ${POOLINGS.map((p) => `"${p}"`).join(", ")} `
          + `(got ${JSON.stringify(pooling)})`);
      }
      if (normalize != null && typeof normalize !== "boolean") throw new TypeError("embed: normalize must be true or false");
      if (prompt != null && typeof prompt !== "string") throw new TypeError("embed: prompt must be a prompt's name");
      if (dimensions != null && (!Number.isInteger(dimensions) || dimensions < 1)) {
        throw new TypeError("embed: dimensions must be a positive integer");
      }
      const batchSize = opts.batchSize ?? DEFAULT_BATCH_SIZE;
      if (!Number.isInteger(batchSize) || batchSize < 1) {
        throw new TypeError("embed: batchSize must be a positive integer");
      }
      const out = [];
      for (let i = 0; i < list.length; i += batchSize) {
        const chunk = list.slice(i, i + batchSize);
        const flat = await m.embed(chunk, pooling ?? undefined, normalize ?? undefined, prompt ?? undefined,
          dimensions ?? undefined); // (n, width)
        const h = flat.length / chunk.length;
        for (let j = 0; j < chunk.length; j++) out.push(flat.slice(j * h, (j + 1) * h));
      }
      return single ? out[0] : out;
    });
  }

  /**
   * Fill-mask: the `topK` (5) likeliest tokens for the mask token, best first: [{ score, token, token_str, sequence }].
   * A text with several masks gives one such list per mask. An array of texts gives an array of results.
   */
  fillMask(input, options = {}) {
    return this._enqueue("fillMask", async (m) => {
      const { list, single } = texts(input, "fillMask");
      const opts = checkOptions(options, ["topK"], "fillMask");
      const topK = positiveInt(opts.topK ?? 5, "fillMask", "topK");
      const out = list.length ? await m.fillMask(list, topK) : [];
      const shaped = out.map((masks) => (masks.length === 1 ? masks[0] : masks));
      return single ? shaped[0] : shaped;
    });
  }

  /**
   * Sequence classification: [{ label, score }] best first (all labels, or `topK`). A pair is [a, b]; an array of
   * texts or pairs gives an array of results.
   */
  classify(input, options = {}) {
    return this._enqueue("classify", async (m) => {
      const opts = checkOptions(options, ["topK"], "classify");
      const topK = opts.topK == null ? 0 : positiveInt(opts.topK, "classify", "topK");
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
      const out = a.length ? await m.classify(a, b, topK) : [];
      return single ? out[0] : out;
    });
  }

  /**
   * Reranks `documents` for `query` with a cross-encoder (a sequence classifier with one output): [{ index, score,
   * document }] best first, `score` the relevance logit; all documents, or the `topK` best.
   */
  rerank(query, documents, options = {}) {
    return this._enqueue("rerank", async (m) => {
      const opts = checkOptions(options, ["topK"], "rerank");
      const topK = opts.topK == null ? 0 : positiveInt(opts.topK, "rerank", "topK");
      if (typeof query !== "string") throw new TypeError("rerank: the query must be a string");
      if (!Array.isArray(documents) || !documents.every((d) => typeof d === "string")) {
        throw new TypeError("rerank: documents must be an array of strings");
      }
      const out = await m.rerank(query, documents, topK);
      return out.map(({ index, score }) => ({ index, score, document: documents[index] }));
    });
  }

  /** { is_next }: the probability that `b` follows `a`. Arrays of the same length give an array. */
  nextSentence(a, b) {
    return this._enqueue("nextSentence", async (m) => {
      const x = texts(a, "nextSentence", "a");
      const y = texts(b, "nextSentence", "b");
      if (x.list.length !== y.list.length || x.single !== y.single) {
        throw new TypeError("nextSentence: give two strings, or two arrays of the same length");
      }
      const out = x.list.length ? await m.nextSentence(x.list, y.list) : [];
      return x.single ? out[0] : out;
    });
  }

  /**
   * Token classification (NER): [{ entity, score, index, word, start, end }] (aggregation "none", the default) or
   * [{ entity_group, score, word, start, end }] ("simple"). `start`/`end` index the JavaScript string.
   */
  tokenClassify(input, options = {}) {
    return this._enqueue("tokenClassify", async (m) => {
      const { list, single } = texts(input, "tokenClassify");
      const opts = checkOptions(options, ["aggregation"], "tokenClassify");
      const aggregation = opts.aggregation ?? "none";
      if (aggregation !== "none" && aggregation !== "simple") {
        throw new TypeError(`tokenClassify: aggregation must be "none" or "simple" (got ${JSON.stringify(aggregation)})`);
      }
      const out = list.length ? await m.tokenClassify(list, aggregation) : [];
      out.forEach((ents, i) => ents.forEach((e) => toUtf16Span(list[i], e)));
      return single ? out[0] : out;
    });
  }

  /**
   * ELECTRA's replaced-token detection (a discriminator checkpoint): [{ index, token, start, end, score }] for every
   * token but the special ones, `score` the probability that the token was replaced; `start`/`end` index the string.
   */
  replacedTokens(input) {
    return this._enqueue("replacedTokens", async (m) => {
      const { list, single } = texts(input, "replacedTokens");
      const out = list.length ? await m.replacedTokens(list) : [];
      out.forEach((toks, i) => toks.forEach((t) => toUtf16Span(list[i], t)));
      return single ? out[0] : out;
    });
  }

  /** Extractive question answering: { answer, score, start, end }, `start`/`end` indexing `context`. */
  answer(question, context) {
    return this._enqueue("answer", async (m) => {
      if (typeof question !== "string" || typeof context !== "string") {
        throw new TypeError("answer: question and context must be strings");
      }
      const out = await m.answer(question, context);
      return toUtf16Span(context, out);
    });
  }

  /**
   * Trains a classification head on this model's frozen encoder, from labelled examples [{ text, label }]: pooled
   * features are computed once, then a linear head (or one hidden layer: `hidden`) is trained with softmax
   * cross-entropy and AdamW on the model's device. Deterministic for a given `seed`; stops early when the
   * validation loss stops improving (`validationSplit`, `patience`). The head becomes live at once: `classify` uses
   * it. `onProgress({ epoch, loss, accuracy, valLoss, valAccuracy })` after each epoch.
   * @returns {Promise<{labels: string[], bestEpoch: number, history: object[]}>}
   */
  trainHead(examples, options = {}) {
    return this._enqueue("trainHead", async (m) => {
      const { texts: list, labels } = trainingExamples(examples);
      const opts = { ...checkOptions(options, TRAIN_OPTIONS, "trainHead") };
      const onProgress = opts.onProgress;
      delete opts.onProgress;
      checkTrainOptions(opts, onProgress);
      const report = await m.trainHead(list, labels, opts, onProgress ?? undefined);
      this._headLabels = report.labels;
      if (this._reloadFrom) this._keepHead(m.exportHead());
      return report;
    });
  }

  /**
   * Fine-tunes the whole model (or its top `layers` and the head) on `examples`, as the BERT paper does, on this
   * model's device; then this model *is* the fine-tuned one (`classify`, `tokenClassify`, `answer` and `embed` use
   * it, and `exportModel` gives its files). `task` and its examples:
   * - "classify": [{ text, label }]; "pair": [{ text, text_pair, label }];
   * - "ner": [{ tokens: [...], tags: [...] }] (one tag per word);
   * - "qa": [{ question, context, answers: { text: [...], answer_start: [...] } }] (SQuAD's; offsets in characters);
   * - "embed": [{ anchor, positive }] (the batch's other positives are the negatives).
   * Options (the BERT paper's recipe by default): epochs 3, learningRate 5e-5, batchSize 16, accumulate 1,
   * layers "all" (or the number of top layers; 0 trains the head alone), warmup 0.1, weightDecay 0.01,
   * validationSplit 0.1, seed 0, docStride 128 (qa), dropout true (the checkpoint's probabilities, seeded; false:
   * none), patience (early stopping: after this many epochs without a lower validation loss, stop and keep the best
   * epoch's model; unset: every epoch, the last kept), checkpoint (`{ name, every = 100, keep = 2 }`: the whole
   * training state saved in the origin's private file system every `every` steps and at each epoch's end) and
   * resume (true: continue run `name` from its newest intact checkpoint, with the first run's examples and options;
   * with none yet, start afresh), lora (e.g. `{ r: 8, alpha: 16, targets: "qv" | "all" }`: LoRA adapters on a
   * frozen encoder, and the head; the model becomes the merged one). `onProgress(p)` gets `{ type: "step", epoch,
   * step, totalSteps, loss, learningRate }` after each step, `{ type: "epoch", epoch, trainLoss, valLoss,
   * valAccuracy }` after each epoch, and with `checkpoint` `{ type: "checkpoint", checkpoint: "saved" | "resumed" |
   * "skipped", name, step }` and `{ type: "deviceLost", reason, device }` (a lost GPU device: the run goes on from
   * its last checkpoint on a new one, or on the CPU). With `checkpoint`, a stop by `signal` saves one where it
   * stops, and `resume` goes on from there. `signal` (an AbortSignal) stops it between two steps: the promise rejects with the signal's
   * reason and the model is left as it was, as after any error. Other calls made while it runs reject.
   * @returns {Promise<{labels: string[] | null, steps: object[], epochs: object[], bestEpoch: number}>}
   */
  fineTune(examples, options = {}) {
    return this._enqueue("fineTune", async (m) => {
      const opts = { ...checkOptions(options, FINE_TUNE_OPTIONS, "fineTune") };
      const run = { onProgress: opts.onProgress, signal: opts.signal, checkpoint: opts.checkpoint, resume: opts.resume };
      for (const k of ["onProgress", "signal", "checkpoint", "resume"]) delete opts[k];
      checkFineTuneOptions(opts, run.onProgress, run.signal);
      checkCheckpointOptions(run.checkpoint, run.resume);
      if (!Array.isArray(examples)) throw new TypeError("fineTune: examples must be an array of the task's objects");
      const out = await this._train("fineTune", m, run, (model, files, hooks, saving) => model.fineTune(files.config,
        files.tokenizer, files.vocab, files.tokenizerConfig, files.weights, files.adapterConfig, files.adapterWeights,
        examples, opts, hooks, saving));
      this._adapter = out.adapterConfig
        ? { "adapter_config.json": out.adapterConfig, "adapter_model.safetensors": out.adapterWeights } : null;
      return { labels: out.labels ?? null, steps: out.steps, epochs: out.epochs, bestEpoch: out.bestEpoch };
    });
  }

  /**
   * Pre-trains the whole model further (masked LM, and next-sentence prediction unless `nsp: false`), as
   * `bertgpu pretrain` does, on this model's device; then this model *is* the pre-trained one (`fillMask` and
   * `nextSentence` use it, `exportModel` gives its folder). The checkpoint needs the masked-LM head
   * (`cls.predictions`), and for NSP its head (`cls.seq_relationship`). `corpus`: a string, read as the CLI reads a
   * plain-text corpus (one sentence or line per line, a blank line between documents), or an array of documents,
   * each a string whose lines are its sentences. Options (the CLI's defaults): steps 1000, batchSize 16, maxLength
   * 128 (or the model's positions, if fewer), mlmProbability 0.15, wholeWordMask false, nsp true, shortSeqProb 0.1,
   * learningRate 1e-4, warmup 0.1, weightDecay 0.01, validationSplit 0.05, seed 0, dropout true; checkpoint, resume,
   * onProgress and signal as fineTune's. `onProgress(p)` gets `{ type: "step", epoch, step, totalSteps, loss,
   * mlmLoss, mlmAccuracy, nspLoss, nspAccuracy, learningRate }` after each step (`loss = mlmLoss + nspLoss`; the
   * NSP pair null without NSP; accuracies over the step's masked tokens and rows), `{ type: "epoch", epoch,
   * trainLoss, valLoss, valAccuracy, valNspAccuracy? }` after each pass over the rows (`valAccuracy`: the masked
   * LM's), and fineTune's checkpoint and deviceLost events. Errors, the signal and dispose() leave the model as it
   * was; other calls made while it runs reject.
   * @returns {Promise<{steps: object[], epochs: object[]}>}
   */
  pretrain(corpus, options = {}) {
    return this._enqueue("pretrain", async (m) => {
      const opts = { ...checkOptions(options, PRETRAIN_OPTIONS, "pretrain") };
      const run = { onProgress: opts.onProgress, signal: opts.signal, checkpoint: opts.checkpoint, resume: opts.resume };
      for (const k of ["onProgress", "signal", "checkpoint", "resume"]) delete opts[k];
      checkPretrainOptions(corpus, opts, run.onProgress, run.signal);
      checkCheckpointOptions(run.checkpoint, run.resume, "pretrain");
      // A LoRA adapter loaded with the model is folded into the weights that train; the result holds it merged.
      const out = await this._train("pretrain", m, run, (model, files, hooks, saving) => model.pretrain(files.config,
        files.tokenizer, files.vocab, files.tokenizerConfig, files.weights, files.adapterConfig, files.adapterWeights,
        corpus, opts, hooks, saving));
      this._adapter = null;
      return { steps: out.steps, epochs: out.epochs };
    });
  }

  /**
   * fineTune's and pretrain's common part: the model's files, the hooks (progress, stop, pause), the checkpoint
   * store, the run (`train(model, files, hooks, saving)`: the module's call, which trains a copy) going on from its
   * last checkpoint on a new device after a GPU device loss, and on success its result (`config`, `weights`) loaded
   * as this model's new self. Until then nothing changes: an error, the signal or dispose() leave the model as it
   * was, and other calls made meanwhile reject. Resolves to the module's result.
   */
  async _train(method, m, { onProgress, signal, checkpoint, resume }, train) {
    const what = method === "pretrain" ? "pre-training" : "fine-tuning";
    signal?.throwIfAborted();
    const files = this._tuned ?? await this._files();
    if (files.gguf) {
      throw new Error(`${method}: this model was loaded from a .gguf; ${what} starts from a Hugging Face folder `
        + "(config.json, model.safetensors, the tokenizer files), whose config it exports");
    }
    signal?.throwIfAborted();
    const hooks = {
      onProgress: (p) => {
        try {
          onProgress?.(p);
        } catch (e) {
          console.warn(`${method}: onProgress threw`, e); // the user's callback must not stop training
        }
      },
      shouldStop: () => (signal?.aborted ? "aborted" : this._disposed ? "disposed" : undefined),
      pause: () => new Promise((resolve) => setTimeout(resolve, 0)),
    };
    const saving = checkpoint == null ? null : {
      store: await openCheckpointStore(checkpoint.name), every: checkpoint.every, keep: checkpoint.keep,
      resume: resume === true,
    };
    let out;
    this._training = method;
    try {
      // A GPU device lost part way through a checkpointed run: the run goes on from its last checkpoint on a new
      // device (or the CPU, if none comes), and onProgress says so.
      for (let losses = 0; ; losses++) {
        try {
          out = await train(m, files, hooks, saving);
          break;
        } catch (e) {
          const why = saving && losses < MAX_DEVICE_LOSSES && !signal?.aborted && !this._disposed
            ? await this._lostReason(e) : null;
          if (!why) throw e;
          m = await this._replaceLostDevice(why);
          saving.resume = true;
          hooks.onProgress({ type: "deviceLost", reason: why, device: this._device });
        }
      }
    } catch (e) {
      if (signal?.aborted) throw signal.reason ?? new DOMException(`${method} was aborted`, "AbortError");
      if (this._disposed) throw new Error(`${method}: the model was disposed during ${what}`);
      throw e;
    } finally {
      this._training = false;
    }
    const tuned = { config: out.config, tokenizer: files.tokenizer, vocab: files.vocab,
      tokenizerConfig: files.tokenizerConfig, weights: out.weights };
    for (const k of Object.keys(tuned)) if (tuned[k] == null) delete tuned[k];
    const model = await instantiate(this._rt, tuned, this._device);
    const old = this._model;
    this._model = model;
    this._tuned = tuned;
    // A head trained by trainHead was trained on the old encoder's features: it does not carry over.
    this._headLabels = null;
    this._headBytes = null;
    old.free();
    return out;
  }

  /**
   * The files of this model as a Hugging Face folder, `{ "config.json": Uint8Array, "model.safetensors": ...,
   * "tokenizer.json" | "vocab.txt", "tokenizer_config.json"? }`: after `fineTune`, the fine-tuned model (f32, with
   * `architectures` and `id2label` set), which transformers' `from_pretrained` and `Bert.load` load. With
   * `{ format: "gguf", dtype }` ("f32", "f16", "q8_0" (default), "q4_0"): `{ "model.gguf": Uint8Array }`, one file
   * with the weights quantized again, as `bertgpu convert` writes it. With `{ format: "adapter" }` after a LoRA
   * fine-tuning: peft's `{ "adapter_config.json", "adapter_model.safetensors" }` (the folder has them merged in).
   */
  exportModel(options = {}) {
    return this._enqueue("exportModel", async () => {
      const opts = checkOptions(options, ["format", "dtype"], "exportModel");
      const format = opts.format ?? "folder";
      if (!["folder", "gguf", "adapter"].includes(format)) {
        throw new TypeError(`exportModel: format must be "folder", "gguf" or "adapter" (got ${JSON.stringify(format)})`);
      }
      if (format === "adapter") {
        if (!this._adapter) throw new Error("exportModel: no LoRA adapter: fine-tune with the lora option first");
        return { ...this._adapter };
      }
      if (opts.dtype != null && format !== "gguf") throw new TypeError("exportModel: dtype is for format: \"gguf\"");
      const files = this._tuned ?? await this._files();
      if (files.gguf) throw new Error("exportModel: this model was loaded from a .gguf, not a Hugging Face folder");
      if (format === "gguf") {
        const gguf = await guard(this._rt, () => this._rt.glue.toGguf(files.config, files.tokenizer, files.vocab,
          files.tokenizerConfig, files.weights, opts.dtype ?? "q8_0"));
        return { "model.gguf": gguf };
      }
      const names = { config: "config.json", weights: "model.safetensors", tokenizer: "tokenizer.json",
        vocab: "vocab.txt", tokenizerConfig: "tokenizer_config.json", adapterConfig: "adapter_config.json",
        adapterWeights: "adapter_model.safetensors" };
      const out = {};
      for (const [k, name] of Object.entries(names)) if (files[k] != null) out[name] = files[k];
      return out;
    });
  }

  /** The live trained head as safetensors bytes (Hugging Face names; labels and pooling in the metadata). */
  exportHead() {
    return this._enqueue("exportHead", (m) => m.exportHead());
  }

  /**
   * Makes a head saved by `exportHead` (or `bertgpu train-head`) the live head; resolves to its labels. A head
   * trained on a model of another hidden size is an error.
   */
  loadHead(bytes) {
    return this._enqueue("loadHead", (m) => {
      let data = bytes;
      if (data instanceof ArrayBuffer) data = new Uint8Array(data);
      else if (ArrayBuffer.isView(data)) data = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      else throw new TypeError("loadHead: give the head file's bytes (a Uint8Array or an ArrayBuffer)");
      const labels = m.loadHead(data);
      this._headLabels = labels;
      this._keepHead(data.slice());
      return labels;
    });
  }

  /** Drops the trained head: `classify` goes back to the checkpoint's own classifier, if it has one. */
  clearHead() {
    return this._enqueue("clearHead", (m) => {
      m.clearHead();
      this._headLabels = null;
      this._headBytes = null;
    });
  }

  /** The labels of the live trained head, or null. */
  get headLabels() {
    return this._headLabels ?? null;
  }

  /**
   * Frees the model (GPU buffers and wasm memory). Calls queued before it still run; later calls reject. Resolves
   * once the model is freed and, for the last model on a thread pool, the pool's workers have left.
   */
  dispose() {
    if (this._disposed) return this._disposing;
    this._disposed = true;
    // After the queued calls: the model must outlive every call already accepted (and one of them may have loaded
    // it again after a GPU device loss).
    this._disposing = this._tail.then(async () => {
      const model = this._model;
      this._model = null;
      if (model && !this._rt.poisoned) model.free();
      if (this._usesPool) await releasePool(this._rt);
    });
    return this._disposing;
  }
}

const TOKENIZER_OPTIONS = ["vocabSize", "minFrequency", "lowercase"];

/**
 * Trains a BERT WordPiece vocabulary on `texts` (strings) as Python's `BertWordPieceTokenizer.train_from_iterator`
 * does; no model needed. Options: `vocabSize` (30000), `minFrequency` (2), `lowercase` (true). Resolves to the
 * tokenizer files of a Hugging Face folder, `{ "tokenizer.json", "vocab.txt", "tokenizer_config.json",
 * "special_tokens_map.json" }` as Uint8Arrays, which transformers' `from_pretrained` loads.
 */
export async function trainTokenizer(corpus, options = {}) {
  const method = "trainTokenizer";
  const { list } = texts(corpus, method, "texts");
  const opts = checkOptions(options, TOKENIZER_OPTIONS, method);
  const rustOptions = {};
  if (opts.vocabSize != null) rustOptions.vocabSize = positiveInt(opts.vocabSize, method, "vocabSize");
  if (opts.minFrequency != null) {
    if (!Number.isInteger(opts.minFrequency) || opts.minFrequency < 0) {
      throw new TypeError(`${method}: minFrequency must be a non-negative integer`);
    }
    rustOptions.minFrequency = opts.minFrequency;
  }
  if (opts.lowercase != null) {
    if (typeof opts.lowercase !== "boolean") throw new TypeError(`${method}: lowercase must be true or false`);
    rustOptions.lowercase = opts.lowercase;
  }
  // The same runtime Bert.load starts (or has started) for this engine's build; no model, no device.
  const rt = await getRuntime(pickBuild("auto"), undefined);
  return guard(rt, () => rt.glue.trainTokenizer(list, rustOptions));
}

/**
 * A WasmModel from downloaded files on `device` ("webgpu", "auto" after pickDevice saw a hardware adapter, or
 * "cpu"). `injectFault`: Bert.load's test-only `_injectFault`.
 */
function instantiate(rt, files, device, injectFault = false, { consume = false } = {}) {
  return guard(rt, async () => {
    // On a GPU, the kernels an earlier load chose for this adapter and model shape are checked and run from the
    // start (js/tuning.js), not the defaults first.
    const tunings = device === "cpu" ? undefined : await cachedTunings().catch(() => undefined);
    const loading = files.gguf
      ? rt.glue.WasmModel.loadGguf(files.gguf, device, injectFault, tunings)
      : rt.glue.WasmModel.load(files.config, files.tokenizer, files.vocab, files.tokenizerConfig, files.weights,
        files.adapterConfig, files.adapterWeights, files.sentence, device, injectFault, tunings);
    // The glue copied the small files into wasm memory, and the module holds its own reference to the weights
    // (read a tensor at a time, then released): ours can go.
    if (consume) for (const k of Object.keys(files)) delete files[k];
    return loading;
  });
}

/**
 * Runs a call into the module so that a Rust panic rejects it: synchronous panics throw (a trap) by themselves,
 * but a panic while an async Rust call is suspended would leave its promise pending forever, so the panic hook
 * (src/wasm/) tells us and the call rejects.
 */
function guard(rt, fn) {
  return new Promise((resolve, reject) => {
    const onPanic = (message) => reject(new Error(`bertgpu: internal error (a Rust panic): ${message}`));
    rt.listeners.add(onPanic);
    Promise.resolve()
      .then(fn)
      .then(resolve, (e) => reject(toError(e)))
      .finally(() => rt.listeners.delete(onPanic));
  });
}

/** Errors from Rust arrive as JS Error objects (JsError) or strings; traps as WebAssembly.RuntimeError. */
function toError(e) {
  if (e instanceof Error) return e;
  return new Error(typeof e === "string" ? e : String(e));
}
