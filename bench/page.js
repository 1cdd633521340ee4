// The in-page half of bench/browser.mjs: loads and runs either library on demand. Both end at the same thing:
// strings in, mean-pooled unit-length embeddings out (Float32Array per text).
const ORT_DIST = "/bench/node_modules/onnxruntime-web/dist/";

const sessions = { ours: null, theirs: null };

/** The main-thread entry, or the worker entry when the model is split across several workers. */
async function importOurs(workers) {
  return import(workers > 1 ? "/pkg/worker.js" : "/pkg/index.js");
}

async function importTheirs({ threads, cache }) {
  const t = await import("/bench/node_modules/@huggingface/transformers/dist/transformers.web.js");
  t.env.allowRemoteModels = false; // nothing from a hub
  t.env.allowLocalModels = true;
  t.env.localModelPath = "/bench/models/";
  t.env.useBrowserCache = cache ?? false; // its default is true; the timing benchmarks keep nothing between pages
  t.env.backends.onnx.wasm.wasmPaths = ORT_DIST; // the npm package's own files, not a CDN
  t.env.backends.onnx.wasm.numThreads = threads;
  return t;
}

/** { ms, dims }: loads a model (cold when the page is fresh) and embeds one text, timing the whole. */
window.coldStart = async (which, opts) => {
  const t0 = performance.now();
  await window.load(which, opts);
  const v = await window.embed(which, ["Cold start: import, load, first result."]);
  return { ms: performance.now() - t0, dims: v[0].length };
};

/** `{ what, t }` (t: Date.now()) for each file a load finished fetching, and for marks of bench/memory.mjs. */
window.marks = [];

/**
 * Loads `which` ("ours" | "theirs"). ours: { source, device: "cpu" | "webgpu", workers, threads, simd, cache };
 * theirs: { model, dtype: "fp32" | "q8", device: "wasm" | "webgpu", threads, cache } (model: a folder of
 * /bench/models/ with its ONNX export, default all-MiniLM-L6-v2). `cache`: keep the downloads in the
 * Cache API (each library's default is true; without it, ours caches only with several workers, theirs never).
 */
window.load = async (which, opts) => {
  if (which === "ours") {
    const { Bert } = await importOurs(opts.workers ?? 1);
    sessions.ours?.dispose();
    const extra = opts.workers > 1 ? { workers: opts.workers } : {};
    if (opts.simd) extra.simd = opts.simd; // which wasm build (default "auto": relaxed SIMD where the engine has it)
    // The threaded build's threads (bertgpu's default is the cores; the rows without `threads` measure one thread).
    extra.threads = opts.threads ?? 1;
    // With several workers the files are fetched once per worker: the cache makes the later fetches local.
    // `progress: false`: the plain call, with no onProgress (then no "fetched" marks).
    const onProgress = opts.progress === false ? undefined
      : (p) => { if (p.loaded === p.total) window.marks.push({ what: `fetched ${p.file}`, t: Date.now() }); };
    sessions.ours = await Bert.load(opts.source, { device: opts.device, cache: opts.cache ?? opts.workers > 1, onProgress, ...extra });
    return `${sessions.ours.device} (${sessions.ours.simd}, ${sessions.ours.threads} threads)`;
  }
  const t = await importTheirs(opts);
  const progress_callback = (p) => { if (p.status === "done") window.marks.push({ what: `fetched ${p.file}`, t: Date.now() }); };
  sessions.theirs = await t.pipeline("feature-extraction", opts.model ?? "all-MiniLM-L6-v2", { device: opts.device,
    dtype: opts.dtype, progress_callback });
  return opts.device;
};

/** Embeddings of `texts` as plain arrays of Float32Array. */
window.embed = async (which, texts) => {
  if (which === "ours") return sessions.ours.embed(texts, { pooling: "mean", normalize: true, batchSize: texts.length });
  const out = await sessions.theirs(texts, { pooling: "mean", normalize: true });
  const [n, h] = out.dims;
  return Array.from({ length: n }, (_, i) => out.data.slice(i * h, (i + 1) * h));
};

/**
 * Which form of relaxed SIMD's byte dot product our Q8_0 kernel runs on this engine and CPU: "fused" (one
 * instruction where the engine has one: AVX-VNNI, ARM's sdot) or "split" (src/backend/cpu/q8.rs); null unless our
 * relaxed-SIMD build is loaded in this page (not in a worker).
 */
window.q8DotForm = async () => {
  try {
    return (await import("/pkg/wasm-relaxed/bertgpu.js")).__q8DotForm();
  } catch {
    return null; // the module is not initialised here
  }
};

/**
 * What bench/memory.mjs reads inside the page, in bytes: our wasm module's linear memory (`memoryBytes`: its size,
 * which never shrinks, so its high-water mark; `liveBytes`: what Rust holds now) and our model's GPU buffers
 * (`gpu`: the pool's buffers and the weights'), through the package's debugging exports (null where ours is not
 * loaded or on the CPU); the JS heap (Chromium's `performance.memory`); what this origin keeps in storage (Cache
 * API); the wasm modules the page fetched (encoded bytes).
 */
window.memoryInfo = async () => {
  const out = { wasm: null, gpu: null, jsHeap: performance.memory?.usedJSHeapSize ?? null, storage: null, modules: [] };
  if (sessions.ours && !sessions.ours.workers) {
    // The module the package instantiated: the threaded builds are modules of their own.
    const dir = (sessions.ours.threads > 1 ? "wasm-threads" : "wasm") + (sessions.ours.simd === "relaxed" ? "-relaxed" : "");
    const glue = await import(`/pkg/${dir}/bertgpu.js`);
    out.wasm = glue.__debugHeap();
    const g = sessions.ours._model?.__debugGpuBuffers?.();
    if (g) out.gpu = { poolBuffers: g[0], poolBytes: g[1], weightBytes: g[2] };
  }
  out.storage = (await navigator.storage?.estimate?.())?.usage ?? null;
  out.modules = performance.getEntriesByType("resource").filter((e) => /\.wasm$/.test(e.name))
    .map((e) => ({ name: new URL(e.name).pathname, bytes: e.decodedBodySize }));
  return out;
};

/** Runs `embed` and returns its time in ms and the vectors (kept for the agreement check). */
window.timeEmbed = async (which, texts) => {
  const t0 = performance.now();
  const v = await window.embed(which, texts);
  const ms = performance.now() - t0;
  return { ms, vectors: v.map((x) => Array.from(x)) };
};

/** Token counts of `texts` with [CLS]/[SEP] (our tokenizer: the same vocabulary and rules as theirs). */
window.tokenCounts = async (texts) => {
  const r = await sessions.ours.tokenize(texts);
  return r.map((x) => x.input_ids.length);
};

/**
 * `n` synthetic texts of about `tokens` tokens each: a number, then one sentence repeated (about 10 tokens a
 * repetition; the tokenizer cuts at the model's limit). For the scripts that time one kind of input repeatedly
 * (ab.mjs, profile.mjs, workers.mjs); the side-by-side benchmark uses real text instead.
 */
window.repeatedTexts = (n, tokens) => Array.from({ length: n }, (_, i) => `${i} `
  + "The quick brown fox jumps over the lazy dog. ".repeat(Math.ceil(tokens / 10)));

window.ready = true;
