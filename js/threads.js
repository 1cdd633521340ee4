// A threaded build's pool (pkg/wasm-threads/ or wasm-threads-relaxed/, src/backend/cpu/threads.rs): `threads - 1` Web Workers, each
// running the same compiled module over the page's one shared memory; the thread that calls into the model is the
// last of the `threads`. One model in memory, every thread on every call, a single sentence included.

import { IN_NODE } from "./env.js";

/**
 * The default `threads`: the cores the browser reports, at most this many. A BERT layer's loops split into as many
 * items as threads; past 8 a small model's items (one sentence of MiniLM: 384-column matmuls) get too short for the
 * wake-up and join of each loop to pay, and every worker costs its own thread stack and module instance.
 */
export const MAX_DEFAULT_THREADS = 8;
/** The most `threads` may ask for: a worker per thread, and browsers cap workers per page around here. */
export const MAX_THREADS = 64;
/** How long a worker may take to start (fetch its script, instantiate the module) before Bert.load gives up. */
const WORKER_START_MS = 30_000;

/**
 * Why the threaded build cannot run here (a string), or null: it needs a cross-origin isolated page (COOP/COEP
 * headers: `crossOriginIsolated` and `SharedArrayBuffer`) and Web Workers. Node.js runs the single-threaded builds.
 */
export function threadsUnavailable() {
  if (IN_NODE) return "Node.js runs the single-threaded builds";
  if (typeof SharedArrayBuffer === "undefined" || globalThis.crossOriginIsolated !== true) {
    return "the page is not cross-origin isolated (no SharedArrayBuffer): serve it with the headers "
      + "Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp";
  }
  if (typeof Worker === "undefined") return "this context cannot start Web Workers";
  return null;
}

/** The `threads` option checked (an integer from 1 to MAX_THREADS), or its default. */
export function threadsOption(value, method) {
  if (value == null) {
    const cores = Number(globalThis.navigator?.hardwareConcurrency) || 1;
    return Math.max(1, Math.min(cores, MAX_DEFAULT_THREADS));
  }
  if (!Number.isInteger(value) || value < 1 || value > MAX_THREADS) {
    throw new TypeError(`${method}: threads must be an integer from 1 to ${MAX_THREADS} (got ${JSON.stringify(value)})`);
  }
  return value;
}

/** Waits for a worker's message of `type`; rejects on its error message or error event. */
function workerMessage(worker, type) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(new Error(`no ${type} message from a thread of the pool within `
      + `${WORKER_START_MS / 1000} s`)), WORKER_START_MS);
    const onMessage = ({ data }) => {
      if (data?.type === type) done(null, data);
      else if (data?.type === "bertgpu-threads-error") done(new Error(data.message));
    };
    const onError = (e) => done(new Error(e?.message || "the worker script failed to load"));
    function done(error, data) {
      clearTimeout(timer);
      worker.removeEventListener("message", onMessage);
      worker.removeEventListener("error", onError);
      if (error) reject(error);
      else resolve(data);
    }
    worker.addEventListener("message", onMessage);
    worker.addEventListener("error", onError);
  });
}

/**
 * Starts a pool of `threads` threads (the caller and `threads - 1` workers) on the threaded runtime's module and
 * memory (`build`: "threads" or "threadsRelaxed", whose glue the workers start); resolves to { threads, workers } once every worker waits for work. A failure ends what was started.
 */
export async function startPool(glue, threads, build) {
  const generation = glue.__threadsBegin(threads);
  const module = glue.__threadsModule();
  const memory = glue.__threadsMemory();
  const workers = [];
  try {
    await Promise.all(Array.from({ length: threads - 1 }, () => {
      const worker = new Worker(new URL("./threads-worker.js", import.meta.url), { type: "module", name: "bertgpu-thread" });
      workers.push(worker);
      const ready = workerMessage(worker, "bertgpu-threads-ready");
      worker.postMessage({ type: "bertgpu-threads-start", build, module, memory, generation });
      return ready;
    }));
  } catch (e) {
    // Not waited for: a worker that never started would hold the error back for the whole grace period.
    endPool(glue, { threads, workers });
    throw new Error(`Bert.load: could not start the thread pool (${threads} threads): ${e.message}`);
  }
  return { threads, workers };
}

/**
 * Ends a pool: its generation ends (idle workers return at once; the loops run on the caller alone), then each
 * worker frees its thread's stack and closes itself; any still running after a grace period is terminated.
 * Resolves once every worker has left. A worker is never terminated while it may be inside the module (holding
 * its allocator's lock, say), except one that has not left after that grace period.
 */
export function endPool(glue, pool) {
  try {
    glue.__threadsEnd();
  } catch {
    // a poisoned instance: the workers are terminated below all the same
  }
  const left = pool.workers.map((worker) => new Promise((resolve) => {
    const gone = () => {
      clearTimeout(timer);
      worker.terminate();
      resolve();
    };
    const timer = setTimeout(gone, WORKER_START_MS);
    worker.addEventListener("message", ({ data }) => {
      if (data?.type === "bertgpu-threads-exit" || data?.type === "bertgpu-threads-error") gone();
    });
    worker.addEventListener("error", gone);
  }));
  pool.workers = [];
  return Promise.all(left).then(() => {});
}
