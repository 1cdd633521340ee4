// The wasm instances (one per build, restarted after a panic), the threaded builds' pool, calls through `guard`.

import { BUILDS } from "./builds.js";
import { IN_NODE, nodeBuiltin, readBytes } from "./env.js";
import { endPool, startPool } from "./threads.js";
import { cachedTunings } from "./tuning.js";

/**
 * Gives the threaded runtime a pool of `threads` threads (one per runtime: a model that asks for another count
 * restarts it, and every model of the runtime then runs on the new one), and counts `rt.users`: the last model's
 * dispose() ends the pool. Pool changes run one at a time (`rt.poolOps`), and a pool's workers have left before
 * the next one starts.
 */
export function usePool(rt, threads) {
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
export function releasePool(rt) {
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

export async function getRuntime(build, wasm) {
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
  live.delete(old);
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
  glue.setPanicListener((message) => poison(rt, `a Rust panic: ${message}`));
  live.add(rt);
  watchTraps();
  return rt;
}

/** Marks the instance unusable and rejects the calls in flight on it (each `guard` listens). */
function poison(rt, why) {
  if (rt.poisoned) return;
  rt.poisoned = why;
  for (const fn of rt.listeners) fn(why);
}

/**
 * A trap that is not a panic leaves the instance in as unknown a state as a panic does, and the panic hook never
 * hears of it: running out of memory aborts without a panic, and so do `unreachable`s the compiler put there. Thrown
 * from a synchronous call, `guard` sees it. While an async Rust call was suspended, it is thrown from wasm-bindgen's
 * task queue, a microtask, to the global scope (an `error` event), and that call's promise, with every later one the
 * queue would have run, would wait forever. So every runtime with a call in flight is poisoned then: the event does
 * not say which module trapped, and a trap in another module of the page costs at most a fresh start here. In Node.js
 * (no global `error` event) such a trap ends the process with its message, as any uncaught exception does.
 */
const live = new Set(); // the attached runtimes, until restarted
let watching = false;
function watchTraps() {
  if (watching || typeof globalThis.addEventListener !== "function") return;
  watching = true;
  const onTrap = (error) => {
    if (!(error instanceof WebAssembly.RuntimeError)) return;
    for (const rt of live) if (rt.listeners.size > 0) poison(rt, trapReason(error));
  };
  globalThis.addEventListener("error", (event) => onTrap(event.error));
  globalThis.addEventListener("unhandledrejection", (event) => onTrap(event.reason));
}

function trapReason(error) {
  return `a trap that was not a panic (${error.name}: ${error.message}), e.g. the module ran out of memory`;
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
        return await readBytes(file);
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

/**
 * A WasmModel from downloaded files on `device` ("webgpu", "auto" after pickDevice saw a hardware adapter, or
 * "cpu"). `injectFault`: Bert.load's test-only `_injectFault`.
 */
export function instantiate(rt, files, device, injectFault = false, { consume = false } = {}) {
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
 * Runs a call into the module so that a Rust panic or a trap rejects it: synchronous ones throw (a trap) by
 * themselves, and poison the instance here; one while an async Rust call is suspended would leave its promise pending
 * forever, so the panic hook (src/wasm/) or `watchTraps` tells us and the call rejects.
 */
export function guard(rt, fn) {
  return new Promise((resolve, reject) => {
    const onPoison = (why) => reject(new Error(`bertgpu: internal error (${why})`));
    rt.listeners.add(onPoison);
    Promise.resolve()
      .then(fn)
      .then(resolve, (e) => {
        if (e instanceof WebAssembly.RuntimeError) poison(rt, trapReason(e));
        reject(toError(e));
      })
      .finally(() => rt.listeners.delete(onPoison));
  });
}

/** Errors from Rust arrive as JS Error objects (JsError) or strings; traps as WebAssembly.RuntimeError. */
function toError(e) {
  if (e instanceof Error) return e;
  return new Error(typeof e === "string" ? e : String(e));
}
