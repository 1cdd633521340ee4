// bertgpu (the packed npm package, pkg/) against transformers.js (4.3.1, bench/package.json) in one Node.js process
// on one WebGPU implementation: Dawn, through the npm package `webgpu` (dawn-gpu/node-webgpu), on the adapter it
// finds. The same workloads as bench/browser.mjs: (a) 1 × 12, (b) 8 × 128, (c) 32 × 32 tokens of real text
// (tests/data/fortunes), mean pooling + normalize, in all-MiniLM-L6-v2's shape and bert-base's (seeded weights,
// bench/dawn_models.py: speed depends on the shapes alone), f32 and 8-bit (ours: q8_0 GGUF made here with
// exportModel; theirs: the q8 ONNX, int8 per channel). Calls alternate between the two; medians.
//
//   node bench/dawn.mjs --out FILE.json [--quick] [--models DIR] [--only minilm|base] [--reps N] [--dawn FLAG,...]
//
// --quick: workload (a) only. --models: the folders bench/dawn_models.py made (default bench/models/dawn).
// --dawn: flags for `webgpu`'s create() (e.g. "backend=vulkan"). Writes {"adapter": {...}, "rows": [{lib, dtype,
// model, workload, median_ms, first_load_ms, ...}]} and prints a Markdown table.
//
// first_load_ms: the library's load (ours: pipelines, the load-time check, the kernels' calibration on a hardware
// adapter; theirs: the ONNX session) and its first call of (a), end to end; Dawn keeps nothing between processes.
// GPU memory: the bytes of every buffer each library's GPUDevice created and has not destroyed (counted in
// createBuffer/destroy, so the same for both), after its first call and at its peak, and where `nvidia-smi` is
// there, the driver's count for this process after each load.
//
// How transformers.js runs on Dawn here: its web build (dist/transformers.web.js) with onnxruntime-web's WebGPU
// execution provider on `navigator.gpu` (the node build would take onnxruntime-node, whose WebGPU EP is a Dawn of
// its own); the web build's files come through `fetch`, served from --models. Where it fails, the row carries the
// error, and onnxruntime-node's own WebGPU EP runs the same ONNX files (lib "onnxruntime-node").
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : dflt;
};
const OUT = arg("out", null);
const QUICK = argv.includes("--quick");
const MODELS = path.resolve(arg("models", path.join(ROOT, "bench/models/dawn")));
const ONLY = arg("only", null);
const REPS = Number(arg("reps", QUICK ? 5 : 15));
const DAWN_FLAGS = (arg("dawn", "") || "").split(",").filter(Boolean);
const PKG = path.resolve(arg("pkg", path.join(ROOT, "pkg")));
if (!OUT) {
  console.error("usage: node bench/dawn.mjs --out FILE.json [--quick] [--models DIR] [--only minilm|base] [--reps N]");
  process.exit(2);
}
const log = (...a) => console.error(`[${new Date().toISOString().slice(11, 19)}]`, ...a);

// ---- WebGPU from Dawn, as a browser page would see it --------------------------------------------------------------
const { create, globals } = await import("webgpu");
Object.assign(globalThis, globals);
const gpu = create(DAWN_FLAGS);
Object.defineProperty(globalThis, "navigator", {
  value: { gpu, hardwareConcurrency: os.availableParallelism(), userAgent: `Node.js ${process.version}`, language: "en" },
  configurable: true, writable: true,
});
// wgpu's WebGPU backend (the wasm module's) reads `navigator.gpu` only where the global scope has a `Window` or a
// `WorkerGlobalScope` constructor; Node has neither (wgpu then panics: "Accessing the GPU is only supported on the
// main thread or from a dedicated worker"). bertgpu's own Node check looks at `window`, which stays undefined.
globalThis.Window ??= function Window() {};
// dawn.node rejects (or crashes on) a writeBuffer from a view of a SharedArrayBuffer: onnxruntime-web's memory is
// one. A copy costs what the browser's own copy costs.
const writeBuffer = GPUQueue.prototype.writeBuffer;
GPUQueue.prototype.writeBuffer = function (buffer, offset, data, dataOffset, size) {
  if (data?.buffer instanceof SharedArrayBuffer) data = data.slice();
  return writeBuffer.call(this, buffer, offset, data, dataOffset, size);
};

// GPU memory per library: every device is tagged with the library loading when it was made.
let owner = "none";
const memory = {};
const account = (who) => (memory[who] ??= { liveBytes: 0, peakBytes: 0, buffers: 0 });
const requestDevice = GPUAdapter.prototype.requestDevice;
GPUAdapter.prototype.requestDevice = async function (desc) {
  const device = await requestDevice.call(this, desc);
  const m = account(owner);
  const live = new Set();
  const createBuffer = device.createBuffer;
  device.createBuffer = function (d) {
    const b = createBuffer.call(this, d);
    const size = Number(d.size);
    m.liveBytes += size;
    m.buffers += 1;
    m.peakBytes = Math.max(m.peakBytes, m.liveBytes);
    live.add(b);
    const destroy = b.destroy;
    b.destroy = function () {
      if (live.delete(b)) m.liveBytes -= size;
      return destroy.call(this);
    };
    return b;
  };
  const destroyDevice = device.destroy;
  device.destroy = function () {
    for (const b of live) b.destroy();
    return destroyDevice.call(this);
  };
  return device;
};

/** The driver's count of this process's GPU memory (MiB), or null where there is no nvidia-smi. */
function driverMiB() {
  try {
    const out = execFileSync("nvidia-smi", ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
      { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
    const mine = out.split("\n").map((l) => l.split(",").map((s) => s.trim())).find(([pid]) => Number(pid) === process.pid);
    return mine ? Number(mine[1]) : 0;
  } catch {
    return null;
  }
}

async function adapterInfo() {
  const a = await gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!a) throw new Error("Dawn found no WebGPU adapter (with lavapipe: Dawn refuses it; try VK_ICD_FILENAMES of a "
    + "SwiftShader or hardware Vulkan driver)");
  const i = a.info;
  const info = { vendor: i.vendor, architecture: i.architecture, device: i.device, description: i.description,
    isFallbackAdapter: Boolean(i.isFallbackAdapter), features: [...a.features].sort(),
    limits: Object.fromEntries(["maxStorageBufferBindingSize", "maxBufferSize", "maxComputeInvocationsPerWorkgroup",
      "maxComputeWorkgroupStorageSize", "maxStorageBuffersPerShaderStage"].map((k) => [k, a.limits[k]])),
    node: process.version, webgpu: pkgVersion("webgpu"), cpus: os.cpus()[0]?.model, cores: os.availableParallelism() };
  try {
    info.nvidia = execFileSync("nvidia-smi", ["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
      { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch { /* no NVIDIA driver */ }
  return info;
}

function pkgVersion(name) {
  try {
    return JSON.parse(fs.readFileSync(path.join(ROOT, "bench/node_modules", name, "package.json"), "utf8")).version;
  } catch {
    return null;
  }
}

// ---- The two libraries ---------------------------------------------------------------------------------------------
const { Bert } = await import(path.join(PKG, "index.js"));

/** Ours: `{ embed(texts), dispose(), gpu }` of a folder or .gguf on WebGPU. */
async function loadOurs(source) {
  const bert = await Bert.load(source, { device: "webgpu" });
  return {
    embed: (texts) => bert.embed(texts, { pooling: "mean", normalize: true, batchSize: texts.length }),
    dispose: () => bert.dispose(),
    describe: () => ({ device: bert.device, tuning: bert.tuning?.tuning ?? null, tuningSource: bert.tuning?.source ?? null,
      ...((b) => (b ? { pool_bytes: b[1], weight_bytes: b[2] } : {}))(bert._model?.__debugGpuBuffers?.()) }),
  };
}

/** Our q8_0 GGUF of a folder, made once with exportModel on the CPU (as `bertgpu convert --dtype q8_0` would). */
async function q8Gguf(folder) {
  const file = path.join(folder, "model.q8_0.gguf");
  if (!fs.existsSync(file)) {
    const bert = await Bert.load(folder, { device: "cpu" });
    const files = await bert.exportModel({ format: "gguf", dtype: "q8_0" });
    fs.writeFileSync(file, files["model.gguf"] ?? Object.values(files)[0]);
    bert.dispose();
  }
  return file;
}

let transformers = null;
/** transformers.js's web build, on onnxruntime-web's WebGPU EP, its files fetched from MODELS. */
async function importTransformers() {
  if (transformers) return transformers;
  // The web build decides Node or not from process.release.name when it is evaluated: Node would take
  // onnxruntime-node (not installed with the web build's WebGPU path, and a Dawn of its own).
  // It keeps the fetch it finds when evaluated: the model's files are served from MODELS through it.
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (url, opts) => {
    const s = String(url);
    if (!s.startsWith("/dawn-models/")) return realFetch(url, opts);
    const file = path.join(MODELS, decodeURIComponent(s.slice("/dawn-models/".length)));
    if (!file.startsWith(MODELS) || !fs.existsSync(file)) return new Response(null, { status: 404 });
    const bytes = fs.readFileSync(file);
    return new Response(bytes, { status: 200, headers: { "content-length": String(bytes.length) } });
  };
  const release = Object.getOwnPropertyDescriptor(process, "release");
  Object.defineProperty(process, "release", { value: { name: "browser-like" }, configurable: true });
  try {
    transformers = await import(path.join(ROOT, "bench/node_modules/@huggingface/transformers/dist/transformers.web.js"));
  } finally {
    Object.defineProperty(process, "release", release);
  }
  const env = transformers.env;
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.localModelPath = "/dawn-models/";
  env.useBrowserCache = false;
  env.useWasmCache = false;
  env.backends.onnx.wasm.wasmPaths = path.join(ROOT, "bench/node_modules/onnxruntime-web/dist/");
  return transformers;
}

const unpack = (out) => {
  const [n, h] = out.dims;
  return Array.from({ length: n }, (_, i) => out.data.slice(i * h, (i + 1) * h));
};

/** Theirs: transformers.js's feature-extraction pipeline on WebGPU (`dtype`: "fp32" | "q8"). */
async function loadTheirs(model, dtype) {
  const t = await importTransformers();
  const pipe = await t.pipeline("feature-extraction", model, { device: "webgpu", dtype });
  return {
    embed: async (texts) => unpack(await pipe(texts, { pooling: "mean", normalize: true })),
    dispose: () => pipe.dispose(),
    describe: () => ({ device: "webgpu (onnxruntime-web)", ort: pkgVersion("onnxruntime-web") }),
  };
}

/** The fallback: onnxruntime-node's own WebGPU EP on the same ONNX file, pooled as theirs (mean, normalize). */
async function loadOrtNode(model, dtype) {
  const ort = await import(path.join(ROOT, "bench/node_modules/onnxruntime-node/dist/index.js"));
  const file = path.join(MODELS, model, "onnx", dtype === "q8" ? "model_quantized.onnx" : "model.onnx");
  const session = await ort.InferenceSession.create(file, { executionProviders: ["webgpu"] });
  const tok = await Bert.load(path.join(MODELS, model), { device: "cpu" }); // tokenizer only
  return {
    embed: async (texts) => {
      const enc = await tok.tokenize(texts);
      const T = Math.max(...enc.map((e) => e.input_ids.length));
      const feed = (key, pad) => new ort.Tensor("int64", BigInt64Array.from(enc.flatMap((e) => {
        const v = key ? e[key] : e.input_ids.map(() => 1);
        return [...v, ...Array(T - v.length).fill(pad)].map(BigInt);
      })), [texts.length, T]);
      const out = (await session.run({ input_ids: feed("input_ids", 0), attention_mask: feed(null, 0),
        token_type_ids: feed("token_type_ids", 0) })).last_hidden_state;
      const H = out.dims[2];
      return enc.map((e, i) => {
        const v = new Float32Array(H);
        for (let t = 0; t < e.input_ids.length; t++) for (let h = 0; h < H; h++) v[h] += out.data[(i * T + t) * H + h];
        const norm = Math.hypot(...v) || 1;
        return v.map((x) => x / norm);
      });
    },
    dispose: () => { session.release(); tok.dispose(); },
    describe: () => ({ device: "webgpu (onnxruntime-node's EP)", ort: pkgVersion("onnxruntime-node") }),
  };
}

// ---- Workloads -----------------------------------------------------------------------------------------------------
const corpus = fs.readFileSync(path.join(ROOT, "tests/data/fortunes/train.jsonl"), "utf8").trim().split("\n")
  .map((l) => JSON.parse(l).text);

/** `n` texts of at most `tokens` tokens each ([CLS]/[SEP] included), cut from the corpus, as bench/harness.mjs. */
async function makeTexts(tok, n, tokens) {
  const words = corpus.join(" ").split(/\s+/);
  const count = async (a, len) => (await tok.tokenize(words.slice(a, a + len).join(" "))).input_ids.length;
  const out = [];
  let at = 0;
  for (let i = 0; i < n; i++) {
    let len = Math.max(1, Math.floor(tokens / 2));
    while ((await count(at, len + 1)) <= tokens) len += 1;
    while (len > 1 && (await count(at, len)) > tokens) len -= 1;
    out.push(words.slice(at, at + len).join(" "));
    at = (at + len) % Math.max(1, words.length - 4 * tokens);
  }
  return out;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function cosine(a, b) {
  let d = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { d += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return d / Math.sqrt(na * nb);
}

async function timed(f) {
  const t0 = performance.now();
  const v = await f();
  return { ms: performance.now() - t0, v };
}

// ---- The run -------------------------------------------------------------------------------------------------------
async function main() {
  const result = { adapter: await adapterInfo(), command: `node bench/dawn.mjs ${argv.join(" ")}`, rows: [], errors: [] };
  log(`adapter: ${JSON.stringify({ ...result.adapter, features: undefined, limits: undefined })}`);
  const tok = await Bert.load(path.join(MODELS, "minilm"), { device: "cpu" });
  const spec = [["(a) 1 × 12", 1, 12], ["(b) 8 × 128", 8, 128], ["(c) 32 × 32", 32, 32]].slice(0, QUICK ? 1 : 3);
  const workloads = [];
  for (const [name, n, t] of spec) workloads.push({ name, texts: await makeTexts(tok, n, t) });
  tok.dispose();
  const models = ["minilm", "base"].filter((m) => !ONLY || m === ONLY);
  const baseline = driverMiB();

  for (const model of models) {
    const folder = path.join(MODELS, model);
    for (const [dtype, oursSource, theirsDtype] of [["f32", folder, "fp32"], ["8-bit", await q8Gguf(folder), "q8"]]) {
      const libs = [];
      const load = async (lib, f) => {
        owner = `${lib} ${model} ${dtype}`;
        const before = driverMiB();
        const t0 = performance.now();
        const h = await f();
        const first = await h.embed(workloads[0].texts);
        const firstLoad = performance.now() - t0;
        const after = driverMiB();
        libs.push({ lib, h, firstLoad, first, key: owner,
          driverMiB: after == null ? null : after - before });
        log(`${owner}: first load + first call ${firstLoad.toFixed(0)} ms, ${JSON.stringify(h.describe())}`);
      };
      try {
        await load("bertgpu", () => loadOurs(oursSource));
      } catch (e) {
        result.errors.push({ lib: "bertgpu", model, dtype, error: String(e?.stack ?? e) });
        log(`bertgpu ${model} ${dtype} failed: ${e}`);
      }
      try {
        await load("transformers.js", () => loadTheirs(model, theirsDtype));
      } catch (e) {
        const reason = String(e?.message ?? e);
        result.errors.push({ lib: "transformers.js", model, dtype, error: String(e?.stack ?? e) });
        log(`transformers.js ${model} ${dtype} failed on Dawn (${reason}); onnxruntime-node's WebGPU EP instead`);
        try {
          await load("onnxruntime-node", () => loadOrtNode(model, theirsDtype));
          libs.at(-1).fallbackReason = reason;
        } catch (e2) {
          result.errors.push({ lib: "onnxruntime-node", model, dtype, error: String(e2?.stack ?? e2) });
          log(`onnxruntime-node ${model} ${dtype} failed too: ${e2}`);
        }
      }
      for (const [wi, w] of workloads.entries()) {
        const times = libs.map(() => []);
        const vectors = libs.map((l) => (wi === 0 ? l.first : null));
        // One untimed call each (pipelines of new shapes), then alternate so background load hits all alike.
        for (let r = wi === 0 ? 1 : 0; r <= REPS; r++) {
          const order = r % 2 ? [...libs.keys()].reverse() : [...libs.keys()];
          for (const i of order) {
            const { ms, v } = await timed(() => libs[i].h.embed(w.texts));
            if (r > 0) times[i].push(ms);
            else vectors[i] = v;
          }
        }
        const agree = libs.length === 2
          ? Math.min(...vectors[0].map((v, i) => cosine(v, vectors[1][i]))) : null;
        for (const [i, l] of libs.entries()) {
          const m = memory[l.key] ?? {};
          const row = { lib: l.lib, dtype, model: model === "minilm" ? "all-MiniLM-L6-v2 shape" : "bert-base shape",
            workload: w.name, median_ms: median(times[i]), min_ms: Math.min(...times[i]), max_ms: Math.max(...times[i]),
            reps: times[i].length, first_load_ms: l.firstLoad, gpu_bytes_live: m.liveBytes ?? null,
            gpu_bytes_peak: m.peakBytes ?? null, gpu_buffers_created: m.buffers ?? null, driver_mib_at_load: l.driverMiB,
            min_cosine_between_libs: agree, ...l.h.describe() };
          if (l.fallbackReason) row.transformers_js_error = l.fallbackReason;
          result.rows.push(row);
          log(`${l.lib} ${model} ${dtype} ${w.name}: median ${row.median_ms.toFixed(1)} ms (${row.min_ms.toFixed(1)}–`
            + `${row.max_ms.toFixed(1)}), first load ${l.firstLoad.toFixed(0)} ms, GPU peak ${(row.gpu_bytes_peak / 2 ** 20).toFixed(1)} MiB`
            + `${agree == null ? "" : `, min cosine ${agree.toFixed(5)}`}`);
        }
        fs.writeFileSync(OUT, JSON.stringify(result, null, 2)); // what is done so far survives a cut-off run
      }
      for (const l of libs) l.h.dispose();
    }
  }
  result.driver_baseline_mib = baseline;
  fs.writeFileSync(OUT, JSON.stringify(result, null, 2));
  console.log(table(result));
}

function table(res) {
  const f = (x) => (x == null ? "–" : x >= 100 ? x.toFixed(0) : x.toFixed(1));
  const mib = (b) => (b == null ? "–" : (b / 2 ** 20).toFixed(1));
  const a = res.adapter;
  const lines = [`Dawn (webgpu ${a.webgpu}, Node ${a.node}): ${a.vendor} ${a.architecture} ${a.description}`
    + `${a.isFallbackAdapter ? " (fallback adapter)" : ""}${a.nvidia ? `; ${a.nvidia}` : ""}`, "",
  "| library | dtype | model | workload | median ms (min–max) | first load + first call ms | GPU MiB live / peak | min cosine |",
  "|---|---|---|---|---|---|---|---|"];
  for (const r of res.rows) {
    lines.push(`| ${r.lib} | ${r.dtype} | ${r.model} | ${r.workload} | ${f(r.median_ms)} (${f(r.min_ms)}–${f(r.max_ms)}) | `
      + `${f(r.first_load_ms)} | ${mib(r.gpu_bytes_live)} / ${mib(r.gpu_bytes_peak)} | ${r.min_cosine_between_libs?.toFixed(5) ?? "–"} |`);
  }
  for (const e of res.errors) lines.push("", `${e.lib} ${e.model} ${e.dtype}: ${e.error.split("\n")[0]}`);
  return lines.join("\n");
}

main().then(() => process.exit(0), (e) => {
  console.error(e);
  process.exit(1);
});
