// bertgpu/worker: the same API as "bertgpu", with the model in a dedicated Web Worker so the page never freezes.
//
//   import { Bert } from "bertgpu/worker";
//   const bert = await Bert.load("https://example.com/models/all-MiniLM-L6-v2/");
//   const vectors = await bert.embed(["a sentence", "another one"]);
//   bert.dispose(); // also ends the worker
//
// Every call is a message { id, method, args } to the worker, answered by { id, result } or { id, error };
// embeddings come back as transferred buffers (no copy). Load progress arrives as { id, progress }.

import { resolveSource } from "./loader.js";


export class Bert {
  /** @internal use Bert.load */
  constructor(worker, device, tasks) {
    this._worker = worker;
    this._device = device;
    this._tasks = tasks;
  }

  static async load(source, options = {}) {
    if (options == null || typeof options !== "object") throw new TypeError("Bert.load: options must be an object");
    const { onProgress, ...rest } = options;
    if (onProgress != null && typeof onProgress !== "function") {
      throw new TypeError("Bert.load: onProgress must be a function ({ file, loaded, total }) => void");
    }
    // URLs are resolved here, against the page: inside the worker a relative URL would mean something else.
    const resolved = resolveSource(source);
    const src = resolved.kind === "folder" ? resolved.base : resolved.kind === "gguf" ? resolved.url : source;
    const worker = new Worker(new URL("./worker-main.js", import.meta.url), { type: "module", name: "bertgpu" });
    const channel = new Channel(worker);
    try {
      const { device, tasks } = await channel.call("load", [src, { ...rest, progress: onProgress != null }], [],
        onProgress);
      const bert = new Bert(worker, device, tasks);
      bert._channel = channel;
      return bert;
    } catch (e) {
      worker.terminate();
      throw e;
    }
  }

  /** "webgpu" or "cpu". */
  get device() {
    return this._device;
  }

  /** See "bertgpu": the tasks this model can run besides tokenize and embed (kept current after head changes). */
  get tasks() {
    return this._channel ? this._tasks : [];
  }

  async _refreshTasks() {
    this._tasks = await this._call("tasks", []);
  }

  tokenize(text, textPair) {
    return this._call("tokenize", [text, textPair]);
  }

  embed(texts, options) {
    return this._call("embed", [texts, options]);
  }

  fillMask(texts, options) {
    return this._call("fillMask", [texts, options]);
  }

  classify(input, options) {
    return this._call("classify", [input, options]);
  }

  nextSentence(a, b) {
    return this._call("nextSentence", [a, b]);
  }

  tokenClassify(texts, options) {
    return this._call("tokenClassify", [texts, options]);
  }

  answer(question, context) {
    return this._call("answer", [question, context]);
  }

  /** See "bertgpu": `onProgress` is called here, in the page, as the worker reports each epoch. */
  async trainHead(examples, options = {}) {
    const { onProgress, ...rest } = options ?? {};
    if (onProgress != null && typeof onProgress !== "function") {
      throw new TypeError("trainHead: onProgress must be a function ({ epoch, loss, accuracy, valLoss, valAccuracy }) => void");
    }
    const report = await this._call("trainHead", [examples, { ...rest, progress: onProgress != null }], onProgress);
    this._headLabels = report.labels;
    await this._refreshTasks();
    return report;
  }

  exportHead() {
    return this._call("exportHead", []);
  }

  async loadHead(bytes) {
    const labels = await this._call("loadHead", [bytes]);
    this._headLabels = labels;
    await this._refreshTasks();
    return labels;
  }

  async clearHead() {
    await this._call("clearHead", []);
    this._headLabels = null;
    await this._refreshTasks();
  }

  /** The labels of the live trained head, or null. */
  get headLabels() {
    return this._headLabels ?? null;
  }

  _call(method, args, onProgress) {
    if (!this._channel) return Promise.reject(new Error(`${method}: this model was disposed; load it again with Bert.load`));
    return this._channel.call(method, args, [], onProgress);
  }

  /** Frees the model and ends its worker. Calls already made still finish first. */
  dispose() {
    const channel = this._channel;
    if (!channel) return;
    this._channel = null;
    channel.call("dispose", []).finally(() => this._worker.terminate());
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
      p.resolve(msg.result);
    }
  }

  failAll(error) {
    for (const p of this.pending.values()) p.reject(error);
    this.pending.clear();
  }
}

