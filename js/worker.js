// bertgpu/worker: the same API as "bertgpu", with the model in a dedicated Web Worker so the page never freezes.
//
//   import { Bert } from "bertgpu/worker";
//   const bert = await Bert.load("https://example.com/models/all-MiniLM-L6-v2/");
//   const vectors = await bert.embed(["a sentence", "another one"]);
//   bert.dispose(); // also ends the worker
//
// Every call is a message { id, method, args } to the worker, answered by { id, result } or { id, error };
// embeddings come back as transferred buffers (no copy). Load progress arrives as { id, progress }.

import { resolveSource } from "./sources.js";
import { deleteCheckpoint, listCheckpoints } from "./checkpoints.js";


const MAX_WORKERS = 8;

/** Starts one worker and loads the model in it; resolves to { worker, channel, device, deviceReason, tasks }. */
async function startWorker(src, options, onProgress) {
  const worker = new Worker(new URL("./worker-main.js", import.meta.url), { type: "module", name: "bertgpu" });
  const channel = new Channel(worker);
  try {
    const { device, deviceReason, tasks, simd, threads, threadsReason, activations, prompts, sentenceTransformers } =
      await channel.call("load", [src, { ...options, progress: onProgress != null }], [], onProgress);
    return { worker, channel, device, deviceReason, tasks, simd, threads, threadsReason, activations, prompts,
      sentenceTransformers };
  } catch (e) {
    worker.terminate();
    throw e;
  }
}

/** A URL of the `wasm` option resolved against the page (inside the worker a relative URL means something else). */
function pageUrl(value) {
  try {
    return new URL(value, globalThis.location?.href).href;
  } catch {
    return value; // not a URL: Bert.load in the worker rejects it, saying so
  }
}

/** `value` is an array of strings (then a call over it can be split between workers). */
const stringList = (value) => Array.isArray(value) && value.every((v) => typeof v === "string");
const isPair = (v) => Array.isArray(v) && v.length === 2 && v.every((x) => typeof x === "string");

export class Bert {
  /** @internal use Bert.load */
  constructor(members, device, tasks) {
    this._members = members; // [{ worker, channel }], the first one holds the trained head's training state
    this._device = device;
    this._tasks = tasks;
  }

  /**
   * As "bertgpu"'s `Bert.load`, plus `workers`: on the CPU backend, how many workers (each on its own core) share
   * the work of a call. A number, or "auto" (the cores the browser reports, at most 4). Default 1. Ignored on
   * WebGPU, where one device does the work. Each worker holds a copy of the model and takes a part of a call's
   * texts (`parallel: "data"`, the only way there is); one text runs on one core. That is the way to more cores on a
   * page that is not cross-origin isolated; on one that is, the threaded build (`threads`) runs one model on every
   * core, one sentence included. (`parallel: "tensor"`, workers holding a part of every layer each, was retired:
   * the threads ran level with it or faster with one model and no exchange between workers, BENCHMARKS.md.)
   */
  /** fineTune's checkpoints kept by this origin (as `Bert.checkpoints` of "bertgpu"). */
  static checkpoints() {
    return listCheckpoints();
  }

  /** Removes run `name`'s checkpoints (as `Bert.deleteCheckpoint` of "bertgpu"). */
  static deleteCheckpoint(name) {
    return deleteCheckpoint(name);
  }

  static async load(source, options = {}) {
    if (options == null || typeof options !== "object") throw new TypeError("Bert.load: options must be an object");
    if (typeof Worker === "undefined") {
      throw new Error("bertgpu/worker: this environment has no Web Workers (Node.js has none); import { Bert } from "
        + "\"bertgpu\" instead");
    }
    const { onProgress, workers = 1, parallel = "data", ...rest } = options;
    if (onProgress != null && typeof onProgress !== "function") {
      throw new TypeError("Bert.load: onProgress must be a function ({ file, loaded, total }) => void");
    }
    let n = workers;
    if (n === "auto") n = Math.min(4, Math.max(1, globalThis.navigator?.hardwareConcurrency ?? 1));
    if (!Number.isInteger(n) || n < 1 || n > MAX_WORKERS) {
      throw new TypeError(`Bert.load: workers must be "auto" or an integer from 1 to ${MAX_WORKERS} (got ${JSON.stringify(workers)})`);
    }
    if (parallel === "tensor") {
      throw new TypeError("Bert.load: parallel: \"tensor\" was retired. On a cross-origin isolated page the threaded "
        + "build runs one model on every core (the `threads` option; the default takes the cores the browser reports); "
        + "elsewhere `workers` with parallel: \"data\" (the default) take a part of each call's texts each");
    }
    if (parallel !== "data") {
      throw new TypeError(`Bert.load: parallel must be "data" (got ${JSON.stringify(parallel)})`);
    }
    // URLs are resolved here, against the page: inside the worker a relative URL would mean something else.
    const resolved = resolveSource(source);
    const src = resolved.kind === "folder" ? resolved.base : resolved.kind === "gguf" ? resolved.url : source;
    if (typeof rest.wasm === "string" || rest.wasm instanceof URL) rest.wasm = pageUrl(rest.wasm);
    else if (rest.wasm != null && Object.getPrototypeOf(rest.wasm) === Object.prototype) {
      rest.wasm = Object.fromEntries(Object.entries(rest.wasm).map(([k, v]) =>
        [k, typeof v === "string" || v instanceof URL ? pageUrl(v) : v]));
    }
    // Several workers are the parallelism already: each runs on one thread unless `threads` says otherwise (on a
    // cross-origin isolated page one worker with the threaded build's `threads` holds one copy of the model).
    if (n > 1 && rest.threads == null) rest.threads = 1;
    const first = await startWorker(src, rest, onProgress);
    const members = [first];
    if (first.device === "cpu" && n > 1) {
      // The others load after the first, so a URL's files come from the cache the first one filled.
      const more = await Promise.allSettled(Array.from({ length: n - 1 },
        () => startWorker(src, { ...rest, device: "cpu" })));
      const failed = more.find((r) => r.status === "rejected");
      if (failed) {
        // End every worker that did start, not only the first.
        for (const r of [{ value: first }, ...more]) r.value?.worker.terminate();
        throw failed.reason;
      }
      members.push(...more.map((r) => r.value));
    }
    const bert = new Bert(members, first.device, first.tasks);
    bert._deviceReason = first.deviceReason ?? null;
    bert._activations = first.activations ?? "f32";
    bert._prompts = first.prompts ?? {};
    bert._sentenceTransformers = first.sentenceTransformers ?? null;
    return bert;
  }

  /** "data": how the workers share a call (see `load`). */
  get parallel() {
    return "data";
  }

  /** "webgpu" or "cpu". */
  get device() {
    return this._device;
  }

  /** As "bertgpu"'s `activations`: "f16" where the GPU stores them so, else "f32". */
  get activations() {
    return this._activations;
  }

  /** As "bertgpu"'s `deviceReason`: why "auto" runs this model on the CPU, or null. */
  get deviceReason() {
    return this._deviceReason ?? null;
  }

  /**
   * As "bertgpu"'s `calibrate`: times the GPU kernels' variants again in every worker holding the model, each on its
   * own device; resolves to the first worker's calibration (null on the CPU).
   */
  async calibrate(options) {
    const all = await Promise.all((this._members ?? []).map((_, i) => this._call("calibrate", [options], undefined, i)));
    this._tuning = all[0] ?? null;
    return this._tuning;
  }

  /** The GPU kernels the workers run, as the most recent `calibrate()` reported them (null before one, and on the CPU). */
  get tuning() {
    return this._tuning ?? null;
  }

  /**
   * As "bertgpu"'s `crossover` (WebGPU, with `crossover: true`): as the worker reported it with the last answer,
   * so null until a call after the load has finished.
   */
  get crossover() {
    return this._members?.[0]?.channel.state?.crossover ?? null;
  }

  /** As "bertgpu"'s `lastCallDevice`: where the worker ran the last call that has answered. */
  get lastCallDevice() {
    return this._lastChannel?.state?.lastCallDevice ?? this._device;
  }

  /** "relaxed" or "simd128": which wasm build runs the model. */
  get simd() {
    return this._members[0].simd;
  }

  /** As "bertgpu"'s `threads`: the threads each worker's model runs on (the worker's own included). */
  get threads() {
    return this._members?.[0]?.threads ?? 1;
  }

  /** As "bertgpu"'s `threadsReason`. */
  get threadsReason() {
    return this._members?.[0]?.threadsReason ?? null;
  }

  /** How many workers hold the model. */
  get workers() {
    return this._members?.length ?? 0;
  }

  /** See "bertgpu": the model's prompts by name. */
  get prompts() {
    return this._members ? this._prompts : {};
  }

  /** See "bertgpu": sentence-transformers' description of the model, or null. */
  get sentenceTransformers() {
    return this._members ? this._sentenceTransformers : null;
  }

  /** See "bertgpu": the tasks this model can run besides tokenize and embed (kept current after head changes). */
  get tasks() {
    return this._members ? this._tasks : [];
  }

  async _refreshTasks() {
    this._tasks = await this._call("tasks", []);
  }

  tokenize(text, textPair) {
    return this._call("tokenize", [text, textPair]);
  }

  embed(texts, options) {
    // int8/uint8 without ranges take them from all of the call's vectors: one worker sees them all.
    const calibrates = (options?.precision === "int8" || options?.precision === "uint8") && options?.ranges == null;
    return stringList(texts) && !calibrates
      ? this._fanOut("embed", [texts], (part) => [part, options])
      : this._run("embed", [texts, options]);
  }

  embedSparse(texts, options) {
    return stringList(texts) ? this._fanOut("embedSparse", [texts], (part) => [part, options]) : this._run("embedSparse", [texts, options]);
  }

  embedTokens(texts, options) {
    return stringList(texts) ? this._fanOut("embedTokens", [texts], (part) => [part, options]) : this._run("embedTokens", [texts, options]);
  }

  fillMask(texts, options) {
    return stringList(texts) ? this._fanOut("fillMask", [texts], (part) => [part, options]) : this._run("fillMask", [texts, options]);
  }

  classify(input, options) {
    // A two-string array is one pair (as in "bertgpu"), not two texts.
    const many = Array.isArray(input) && !isPair(input) && input.every((x) => typeof x === "string" || isPair(x));
    return many ? this._fanOut("classify", [input], (part) => [part, options]) : this._run("classify", [input, options]);
  }

  nextSentence(a, b) {
    return stringList(a) && stringList(b) && a.length === b.length
      ? this._fanOut("nextSentence", [a, b], (x, y) => [x, y])
      : this._run("nextSentence", [a, b]);
  }

  tokenClassify(texts, options) {
    return stringList(texts)
      ? this._fanOut("tokenClassify", [texts], (part) => [part, options])
      : this._run("tokenClassify", [texts, options]);
  }

  answer(question, context) {
    return this._run("answer", [question, context]);
  }

  replacedTokens(texts) {
    return stringList(texts) ? this._fanOut("replacedTokens", [texts], (part) => [part]) : this._run("replacedTokens", [texts]);
  }

  rerank(query, documents, options) {
    return this._run("rerank", [query, documents, options]);
  }

  zeroShot(texts, labels, options) {
    return stringList(texts)
      ? this._fanOut("zeroShot", [texts], (part) => [part, labels, options])
      : this._run("zeroShot", [texts, labels, options]);
  }

  /** See "bertgpu": `onProgress` is called here, in the page, as the worker reports each epoch. */
  async trainHead(examples, options = {}) {
    const { onProgress, ...rest } = options ?? {};
    if (onProgress != null && typeof onProgress !== "function") {
      throw new TypeError("trainHead: onProgress must be a function ({ epoch, loss, accuracy, valLoss, valAccuracy }) => void");
    }
    const report = await this._run("trainHead", [examples, { ...rest, progress: onProgress != null }], onProgress);
    await this._shareHead();
    this._headLabels = report.labels;
    await this._refreshTasks();
    return report;
  }

  exportHead() {
    return this._call("exportHead", []);
  }

  /**
   * See "bertgpu": `onProgress` is called here, in the page, and `signal` is passed on to the worker. The first
   * worker fine-tunes, then the others load its result.
   */
  fineTune(examples, options = {}) {
    return this._train("fineTune", examples, options);
  }

  /** See "bertgpu": as fineTune, in the first worker. */
  pretrain(corpus, options = {}) {
    return this._train("pretrain", corpus, options);
  }

  /** fineTune and pretrain (`method`) on `data`: see fineTune. */
  async _train(method, data, options) {
    const { onProgress, signal, ...rest } = options ?? {};
    if (onProgress != null && typeof onProgress !== "function") {
      throw new TypeError(`${method}: onProgress must be a function (progress) => void`);
    }
    if (signal != null && (typeof signal !== "object" || typeof signal.aborted !== "boolean")) {
      throw new TypeError(`${method}: signal must be an AbortSignal`);
    }
    if (!this._members) throw new Error(`${method}: this model was disposed; load it again with Bert.load`);
    signal?.throwIfAborted();
    const trainer = this._members[0];
    const token = (this._tokens = (this._tokens ?? 0) + 1);
    const abort = () => trainer.channel.call("abort", [token]).catch(() => {});
    signal?.addEventListener("abort", abort, { once: true });
    let report;
    let files = null;
    try {
      report = await trainer.channel.call(method, [data, { ...rest, token, progress: onProgress != null }], [],
        onProgress);
      if (this.workers > 1) files = await trainer.channel.call("exportModel", []);
      this._adapter = rest.lora ? await trainer.channel.call("exportModel", [{ format: "adapter" }]) : null;
    } catch (e) {
      if (signal?.aborted) throw signal.reason ?? new DOMException(`${method} was aborted`, "AbortError");
      throw e;
    } finally {
      signal?.removeEventListener("abort", abort);
    }
    if (files) {
      // The other copies load the trained model's files.
      await Promise.all(this._members.slice(1).map((m) => m.channel.call("adopt", [files])));
    }
    this._headLabels = null;
    await this._refreshTasks();
    return report;
  }

  /** See "bertgpu". */
  exportModel(options) {
    if (options?.format === "adapter" && this._adapter) return Promise.resolve({ ...this._adapter });
    return this._call("exportModel", [options]);
  }

  async loadHead(bytes) {
    const labels = await this._call("loadHead", [bytes]);
    await this._shareHead();
    this._headLabels = labels;
    await this._refreshTasks();
    return labels;
  }

  async clearHead() {
    await Promise.all(this._all("clearHead"));
    this._headLabels = null;
    await this._refreshTasks();
  }

  /** The labels of the live trained head, or null. */
  get headLabels() {
    return this._headLabels ?? null;
  }

  /** The first worker's head, copied to the others so that every worker classifies alike. */
  async _shareHead() {
    if (this.workers < 2) return;
    const bytes = await this._call("exportHead", []);
    await Promise.all(this._all("loadHead", [bytes], 1));
  }

  _all(method, args = [], from = 0) {
    if (!this._members) return [Promise.reject(new Error(`${method}: this model was disposed; load it again with Bert.load`))];
    return this._members.slice(from).map((m) => m.channel.call(method, args));
  }

  _call(method, args, onProgress, member = 0) {
    if (!this._members) return Promise.reject(new Error(`${method}: this model was disposed; load it again with Bert.load`));
    const { channel } = this._members[member];
    this._lastChannel = channel;
    return channel.call(method, args, [], onProgress);
  }

  /** A call that runs the model, on the first worker. */
  _run(method, args, onProgress) {
    return this._call(method, args, onProgress);
  }

  /**
   * Splits the parallel lists `lists` into one contiguous part per worker, runs `method` on each part at once
   * (`args(...parts)` builds its arguments) and concatenates the results in order.
   */
  async _fanOut(method, lists, args) {
    const n = Math.min(this.workers, lists[0].length);
    if (n <= 1) return this._call(method, args(...lists));
    const size = Math.ceil(lists[0].length / n);
    const parts = await Promise.all(Array.from({ length: n }, (_, i) =>
      this._call(method, args(...lists.map((l) => l.slice(i * size, (i + 1) * size))), undefined, i)));
    return parts.flat(1);
  }

  /**
   * Frees the model and ends its workers. Calls already made still finish first. Resolves once the workers are
   * ended (each after its model is freed and its own thread pool has left).
   */
  dispose() {
    const members = this._members;
    if (!members) return this._disposing ?? Promise.resolve();
    this._members = null;
    this._disposing = Promise.all(members.map((m) => m.channel.call("dispose", []).catch(() => {})
      .finally(() => m.worker.terminate()))).then(() => {});
    return this._disposing;
  }
}

/** Request/response over postMessage, matched by id. */
class Channel {
  constructor(worker) {
    this.worker = worker;
    this.next = 1;
    this.pending = new Map();
    worker.onmessage = (e) => this.receive(e.data);
    worker.onerror = (e) => {
      e.preventDefault?.();
      this.failAll(new Error(`bertgpu worker failed: ${e.message ?? "unknown error"} `
        + "(is worker-main.js served next to worker.js, as a module?)"));
    };
    worker.onmessageerror = () => this.failAll(new Error("bertgpu worker: a message could not be decoded"));
  }

  call(method, args, transfer = [], onProgress) {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, onProgress });
      try {
        this.worker.postMessage({ id, method, args }, transfer);
      } catch (e) {
        this.pending.delete(id);
        reject(new TypeError(`${method}: arguments cannot be sent to the worker (${e.message})`));
      }
    });
  }

  receive(msg) {
    const p = this.pending.get(msg.id);
    if (!p) return;
    if (msg.progress) {
      p.onProgress?.(msg.progress);
      return;
    }
    this.pending.delete(msg.id);
    if (msg.error) {
      const Ctor = msg.error.name === "TypeError" ? TypeError : Error;
      p.reject(new Ctor(msg.error.message));
    } else {
      if (msg.state) this.state = msg.state;
      p.resolve(msg.result);
    }
  }

  failAll(error) {
    for (const p of this.pending.values()) p.reject(error);
    this.pending.clear();
  }
}

