// bertgpu: BERT in the browser, on WebGPU or on the CPU (wasm SIMD128).
//
//   import { Bert } from "bertgpu";
//   const bert = await Bert.load("https://example.com/models/all-MiniLM-L6-v2/");
//   const [a, b] = await bert.embed(["a sentence", "another one"]);
//
// The model lives in a wasm module (Rust: src/wasm/ over src/engine.rs). `Bert` loads it, queues calls so they never
// overlap inside the module, and loads it again after a lost GPU device; the other jobs have a file each.

import { checkWasmOption, pickBuild, pickThreads, THREADED } from "./builds.js";
import { clearCache } from "./cache.js";
import { deleteCheckpoint, listCheckpoints } from "./checkpoints.js";
import { measureCrossover, pickDevice } from "./device.js";
import { checkLoadOptions, fetchAdapterFiles, fetchModelFiles } from "./loader.js";
import { checkCheckpointOptions, checkCreateArgs, checkFineTuneOptions, checkLoad, checkOptions,
  checkPretrainOptions, checkTrainOptions, checkZeroShot, classifyInputs, FINE_TUNE_OPTIONS, positiveInt,
  PRETRAIN_OPTIONS, TRAIN_OPTIONS, trainingExamples } from "./options.js";
import { getRuntime, guard, instantiate, releasePool, usePool } from "./runtime.js";
import { resolveSource } from "./sources.js";
import { texts, toUtf16Span } from "./text.js";
import { calibrate, tune } from "./tuning.js";
import { trainModel } from "./training.js";
import { embed, embedSparse, embedTokens } from "./vectors.js";

export { clearCache };
export { hasRelaxedSimd } from "./builds.js";
export { trainTokenizer } from "./tokenizer.js";

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
    const { opts, json, file } = checkCreateArgs(config, tokenizer, options);
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
    const { opts, device, activations } = checkLoad(options);
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
    const stream = async ({ gguf, total, limit, hash, shard }) => {
      const { glue } = await runtime;
      const chosen = await choosing.catch(() => null);
      return chosen && chosen.device !== "cpu" && opts.adapter == null && !shard
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
      if (opts.crossover === true) measureCrossover(bert);
    }
    return bert;
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
   * "tokenClassify", "answer", "replacedTokens", "zeroShot" (an NLI classifier) (the heads its checkpoint carries;
   * "classify" also once a head is trained or loaded).
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
    if (this._crossover) measureCrossover(this);
  }

  /**
   * Runs this model's CPU work on the runtime's pool of the threads it was loaded for; a pool that does not start
   * leaves it on one thread, and `threadsReason` says why.
   */
  async _joinPool() {
    await usePool(this._rt, this._poolThreads).then(() => { this._usesPool = true; },
      (e) => { this._threadsReason = `the thread pool did not start: ${e.message}`; });
  }

  /** The files this model was loaded from, fetched again (from the cache when it is on), with its adapter. A
   * checkpoint saved in shards comes as its index and the shards' bytes, which loading, training and toGguf take
   * where they take one weights file (src/wasm/shards.rs). */
  async _files() {
    const files = await fetchModelFiles(this._source.resolved, this._source.fetchOptions);
    return { ...files, ...this._source.adapter };
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
   * `pooling`, `normalize`, `prompt` (one of `prompts`), `dimensions` (Matryoshka); `precision` "int8" / "uint8" /
   * "binary" / "ubinary" gives codes as sentence-transformers' `quantize_embeddings` (index.d.ts `EmbedOptions`).
   */
  embed(input, options = {}) {
    return this._enqueue("embed", (m) => embed(m, input, options));
  }

  /** SPLADE sparse vectors, `{ indices, values }` per text (index.d.ts `SparseOptions`). */
  embedSparse(input, options = {}) {
    return this._enqueue("embedSparse", (m) => embedSparse(m, input, options));
  }

  /** One vector per token, `{ tokens, ids, offsets, vectors }` per text (index.d.ts `TokenVectorOptions`). */
  embedTokens(input, options = {}) {
    return this._enqueue("embedTokens", (m) => embedTokens(m, input, options));
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
      const { single, a, b } = classifyInputs(input);
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

  /**
   * Zero-shot classification through an NLI checkpoint, as transformers' zero-shot-classification pipeline: each
   * label's score best first, [{ label, score }]; an array of texts gives an array. Options: `template` (default
   * "This example is {}."), `multiLabel` (each label on its own: entailment against contradiction).
   */
  zeroShot(input, labels, options = {}) {
    return this._enqueue("zeroShot", async (m) => {
      const { list, single } = texts(input, "zeroShot");
      const { template, multiLabel } = checkZeroShot(labels, options);
      const out = await m.zeroShot(list, labels, template, multiLabel);
      return single ? out[0] : out;
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
   * Its options (the BERT paper's recipe by default) and progress events: FineTuneOptions in index.d.ts. With
   * `checkpoint`, a stop by `signal` saves one where it stops, and `resume` goes on from there. `signal` (an
   * AbortSignal) stops it between two steps: the promise rejects with the signal's reason and the model is left as
   * it was, as after any error. Other calls made while it runs reject.
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
      run.gguf = opts.lora != null; // a .gguf trains LoRA adapters over its weights as stored
      const out = await trainModel(this, "fineTune", m, run, (model, files, hooks, saving) => files.gguf
        ? model.fineTuneGguf(files.gguf, examples, opts, hooks, saving)
        : model.fineTune(files.config, files.tokenizer, files.vocab, files.tokenizerConfig, files.weights,
          files.adapterConfig, files.adapterWeights, examples, opts, hooks, saving));
      this._adapter = out.adapterConfig
        ? { "adapter_config.json": out.adapterConfig, "adapter_model.safetensors": out.adapterWeights } : null;
      return { labels: out.labels ?? null, steps: out.steps, epochs: out.epochs, bestEpoch: out.bestEpoch };
    });
  }

  /**
   * Pre-trains the whole model further (masked LM, and next-sentence prediction unless `nsp: false`), as
   * `bertgpu pretrain` does, on this model's device; then this model *is* the pre-trained one (`fillMask` and
   * `nextSentence` use it, `exportModel` gives its folder). The checkpoint needs the masked-LM head
   * (`cls.predictions`), and for NSP its head (`cls.seq_relationship`); RoBERTa, XLM-R, CamemBERT, DistilBERT and
   * ALBERT train their own masked-LM head (`lm_head`, `vocab_*`, `predictions`) alone, `nsp` aside (an ALBERT
   * `AlbertForPreTraining`'s `nsp` is sentence order, `sop_classifier`). `corpus`: a string, read as the CLI reads
   * a plain-text corpus (a sentence or line per line, a blank line between documents), or an array of documents,
   * each a string whose lines are its sentences. Options (the CLI's defaults) and progress events: PretrainOptions
   * in index.d.ts. Errors, the signal and dispose() leave the model as it was; other calls made while it runs reject.
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
      const out = await trainModel(this, "pretrain", m, run, (model, files, hooks, saving) => model.pretrain(files.config,
        files.tokenizer, files.vocab, files.tokenizerConfig, files.weights, files.adapterConfig, files.adapterWeights,
        corpus, opts, hooks, saving));
      this._adapter = null;
      return { steps: out.steps, epochs: out.epochs };
    });
  }

  /**
   * The files of this model as a Hugging Face folder, `{ "config.json": Uint8Array, "model.safetensors": ...,
   * "tokenizer.json" | "vocab.txt", "tokenizer_config.json"? }`: after `fineTune`, the fine-tuned model (f32, with
   * `architectures` and `id2label` set), which transformers' `from_pretrained` and `Bert.load` load. With
   * `{ format: "gguf", dtype }` ("f32", "f16", "q8_0" (default), "q4_0"): `{ "model.gguf": Uint8Array }`, one file
   * with the weights quantized again, as `bertgpu convert` writes it. With `{ format: "adapter" }` after a LoRA
   * fine-tuning: peft's `{ "adapter_config.json", "adapter_model.safetensors" }` (the folder has them merged in).
   * A model loaded from shards and not trained since gives its index and its shards under their own names.
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
      // A folder loaded from pytorch_model.bin gives its bytes back under that name (the training calls' results are
      // model.safetensors: _tuned holds no weightsName).
      const names = { config: "config.json", weights: files.weightsName ?? "model.safetensors", tokenizer: "tokenizer.json",
        vocab: "vocab.txt", tokenizerConfig: "tokenizer_config.json", adapterConfig: "adapter_config.json",
        adapterWeights: "adapter_model.safetensors" };
      // Shards (a model not fine-tuned since it was loaded from them) go back as they came: the index and each shard.
      const shards = files.weights?.shards;
      const out = shards ? { [files.weights.indexName]: files.weights.index, ...Object.fromEntries(shards) } : {};
      for (const [k, name] of Object.entries(names)) if (files[k] != null && !(shards && k === "weights")) out[name] = files[k];
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
