// Where a model runs: the WebGPU adapter, what `device` makes of it, and `crossover`'s CPU copy.

import { THREADED } from "./builds.js";
import { IN_NODE } from "./env.js";
import { releasePool } from "./runtime.js";
import { cachedCrossover, rememberCrossover } from "./tuning.js";

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
export async function pickDevice(device) {
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

/** How long `crossover: true` may time the CPU against the GPU at load (src/engine/crossover.rs `measure`). */
const CROSSOVER_BUDGET_MS = 1000;

/**
 * `crossover: true` on WebGPU: a CPU copy of the model for the short calls the CPU finishes sooner, made from the
 * model's files again (from the cache when it is on), with the crossover measured on this adapter (src/engine/
 * crossover.rs). Queued after the calibration, so the first calls wait for it; the copy is kept only where the CPU
 * wins at some length.
 */
export function measureCrossover(bert) {
  bert._crossover = null;
  bert._enqueue("Bert.load (crossover)", async (m) => {
    // Measured once per adapter, driver and model shape (the kernels' tuning key), then read from the cache.
    const key = m.tuningKey;
    const known = key == null ? undefined : await cachedCrossover(key);
    if (known === 0) {
      bert._crossover = { maxTokens: 0, points: [], text: "every call on the GPU", source: "cached" };
      return;
    }
    const f = await bert._files();
    // In a threaded build the copy runs on the thread pool a CPU model would (and is timed so): started for it,
    // and ended again if no copy is kept (a pool that does not start leaves the copy on one thread).
    if (bert._rt.build in THREADED && bert._poolThreads > 1 && !bert._usesPool) await bert._joinPool();
    let c = null;
    try {
      c = f.gguf
        ? await m.addCpuTwinGguf(f.gguf, CROSSOVER_BUDGET_MS, known)
        : await m.addCpuTwin(f.config, f.tokenizer, f.vocab, f.tokenizerConfig, f.weights, f.adapterConfig,
          f.adapterWeights, CROSSOVER_BUDGET_MS, known);
    } finally {
      if (bert._usesPool && bert._device === "webgpu" && !(c?.maxTokens > 0)) {
        bert._usesPool = false;
        await releasePool(bert._rt);
      }
    }
    if (c && known === undefined && key != null) await rememberCrossover(key, c.maxTokens);
    bert._crossover = c && { ...c, source: known === undefined ? "measured" : "cached" };
  }).catch((e) => {
    bert._crossover = { maxTokens: 0, points: [], text: `not measured (${e.message}): every call on the GPU`,
      source: "failed" };
  });
}
