// The inside of the bertgpu/worker entry: one model per worker, driven by { id, method, args } messages.
import { Bert } from "./index.js";

let bert = null;
/** The options the model was loaded with, to load its fine-tuned self alike ("adopt"). */
let loadOptions = null;
/** fineTune and pretrain calls in flight, by the page's token: their AbortControllers. */
const aborts = new Map();

/** Buffers of the typed arrays in a result, to transfer instead of copy. */
function transferables(result) {
  const out = [];
  const visit = (v) => {
    if (ArrayBuffer.isView(v)) out.push(v.buffer);
    else if (Array.isArray(v)) v.forEach(visit);
  };
  visit(result);
  // A buffer shared by two views (or listed twice) cannot be transferred twice.
  return [...new Set(out)];
}

async function handle(id, method, args) {
  switch (method) {
    case "load": {
      if (bert) throw new Error("Bert.load: this worker already holds a model");
      const [source, { progress, ...options }] = args;
      if (progress) options.onProgress = (p) => self.postMessage({ id, progress: p });
      bert = await Bert.load(source, options);
      const { onProgress, ...kept } = options;
      loadOptions = { ...kept, device: bert.device };
      return { device: bert.device, deviceReason: bert.deviceReason, activations: bert.activations, tasks: bert.tasks, simd: bert.simd,
        prompts: bert.prompts, sentenceTransformers: bert.sentenceTransformers,
        threads: bert.threads, threadsReason: bert.threadsReason };
    }
    case "tokenize":
      return bert.tokenize(...args);
    case "embed":
    case "embedSparse":
    case "embedTokens":
    case "fillMask":
    case "classify":
    case "nextSentence":
    case "tokenClassify":
    case "answer":
    case "rerank":
    case "replacedTokens":
    case "zeroShot":
      return bert[method](...args);
    case "trainHead": {
      const [examples, { progress, ...options }] = args;
      if (progress) options.onProgress = (p) => self.postMessage({ id, progress: p });
      return bert.trainHead(examples, options);
    }
    case "fineTune":
    case "pretrain": {
      const [data, { progress, token, ...options }] = args;
      if (progress) options.onProgress = (p) => self.postMessage({ id, progress: p });
      const controller = new AbortController();
      aborts.set(token, controller);
      try {
        return await bert[method](data, { ...options, signal: controller.signal });
      } finally {
        aborts.delete(token);
      }
    }
    case "abort":
      aborts.get(args[0])?.abort();
      return null;
    case "exportModel":
      return bert.exportModel(...args);
    case "adopt": {
      // Another worker's fine-tuned model (its exportModel files) replaces this one.
      const [f] = args;
      const next = await Bert.load({ config: f["config.json"], tokenizer: f["tokenizer.json"], vocab: f["vocab.txt"],
        tokenizerConfig: f["tokenizer_config.json"], weights: f["model.safetensors"] }, { ...loadOptions, sha256: undefined });
      bert.dispose();
      bert = next;
      return bert.tasks;
    }
    case "tasks":
      return bert.tasks;
    case "calibrate":
      return bert.calibrate(...args);
    case "exportHead":
    case "loadHead":
    case "clearHead":
      return bert[method](...args);
    case "dispose": {
      // Answered once the model is freed and its thread pool's workers have left: the page terminates this worker
      // then, and none of its threads is cut off inside the module.
      const last = bert;
      bert = null;
      await last?.dispose();
      return null;
    }
    default:
      throw new Error(`bertgpu worker: unknown method ${method}`);
  }
}

self.onmessage = async (e) => {
  const { id, method, args } = e.data;
  try {
    if (method !== "load" && method !== "dispose" && !bert) throw new Error(`${method}: no model is loaded`);
    const result = await handle(id, method, args);
    // What the page's getters read between calls: where this call ran, and the crossover once measured.
    const state = bert ? { lastCallDevice: bert.lastCallDevice, crossover: bert.crossover } : null;
    self.postMessage({ id, result, state }, transferables(result));
  } catch (err) {
    self.postMessage({ id, error: { name: err?.name ?? "Error", message: err?.message ?? String(err) } });
  }
};
