// The GPU kernels' tuning in the browser: after `Bert.load` on WebGPU, the choice cached for this adapter and model
// shape is applied, or the kernels are calibrated (about a second a load, until it has finished once: a load whose
// budget ran out caches how far it got and the next resumes there) and the choice cached. IndexedDB database
// "bertgpu-tuning", store "choices": { key (adapter, driver, bertgpu version, model shape) → tuning text }. Where
// there is no IndexedDB (Node.js has no WebGPU anyway) nothing is cached and each load calibrates.

/** How long the calibration may take at the first load of a model shape on an adapter. */
export const CALIBRATION_BUDGET_MS = 1000;

let dbPromise = null;
function db() {
  if (typeof indexedDB === "undefined") return Promise.resolve(null);
  dbPromise ??= new Promise((resolve) => {
    const req = indexedDB.open("bertgpu-tuning", 1);
    req.onupgradeneeded = () => req.result.createObjectStore("choices");
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => resolve(null); // only a cache: without it every load calibrates
  });
  return dbPromise;
}

function request(mode, fn) {
  return db().then((d) => d && new Promise((resolve) => {
    const t = d.transaction("choices", mode);
    const r = fn(t.objectStore("choices"));
    t.oncomplete = () => resolve(r.result);
    t.onerror = () => resolve(undefined);
    t.onabort = () => resolve(undefined);
  }));
}

const cached = (key) => request("readonly", (s) => s.get(key));
// Every entry, as [key, value] pairs: both requests are done when their transaction completes, which is when
// `request` reads `result`.
const all = () => request("readonly", (s) => {
  const keys = s.getAllKeys();
  const values = s.getAll();
  return { get result() { return keys.result.map((k, i) => [k, values.result[i]]); } };
});
const remember = (key, tuning) => request("readwrite", (s) => s.put(tuning, key));

/**
 * The kernels' choices cached here, `{ key: text }` (the crossovers beside them left out), for `WasmModel.load`,
 * which checks and runs the one for its adapter and model shape from the start: a returning load then builds and
 * checks only the kernels it runs, not the defaults first. `undefined` where nothing is cached.
 */
export async function cachedTunings() {
  const entries = await all();
  if (!entries) return undefined;
  const tunings = Object.fromEntries(entries.filter(([k, v]) => typeof k === "string" && typeof v === "string"));
  return Object.keys(tunings).length ? tunings : undefined;
}

/**
 * Sets the kernels of a freshly loaded WebGPU model (the wasm `WasmModel`): resolves to what `bert.tuning` reports,
 * `{ tuning, source: "cached" | "calibrated" | "default", ...the calibration's times when it ran }`.
 */
export async function tune(model) {
  const key = model.tuningKey;
  if (key == null) return null;
  // The cached choice, or how far a calibration cut short by its budget got ("TUNING;stages=N"): it resumes there.
  const text = await cached(key);
  const [spec, stages] = typeof text === "string" ? text.split(";stages=") : [];
  if (!model.worthCalibrating) {
    // Nothing is calibrated or cached here unasked; a choice cached all the same ran from the load, checked.
    if (spec !== undefined && model.runsTuning(spec)) return { tuning: model.tuning, source: "cached" };
    return { tuning: model.tuning, source: "default", why: "a CPU adapter, where the default kernels are the fastest" };
  }
  let resume;
  if (spec !== undefined) {
    try {
      // The load found it cached and checked it already (`cachedTunings`), unless it failed the check there.
      const tuning = model.runsTuning(spec) ? model.tuning : await model.setTuning(spec);
      if (stages === undefined) return { tuning, source: "cached" };
      resume = text;
    } catch {
      // a choice this version cannot read, or one that fails the load-time check now (a new driver): calibrate again
    }
  }
  const c = await model.calibrate(CALIBRATION_BUDGET_MS, resume);
  // Kept even when cut short by its budget: the next load resumes from it.
  await remember(key, c.progress);
  return { ...c, source: "calibrated" };
}

/**
 * `crossover: true`'s measurement as an earlier load on this adapter cached it: the `maxTokens` of the model shape's
 * tuning key `key` (a whole number), or undefined. Beside the kernels' choices, under `${key};crossover`.
 */
export async function cachedCrossover(key) {
  const n = await cached(`${key};crossover`);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/** Caches a measured crossover's `maxTokens` for `cachedCrossover`. */
export function rememberCrossover(key, maxTokens) {
  return remember(`${key};crossover`, maxTokens);
}

/** `bert.calibrate()`: a fresh calibration (not cached), for benchmarks and bug reports. */
export async function calibrate(model, budgetMs) {
  const c = await model.calibrate(budgetMs);
  return c && { ...c, source: "calibrated" };
}
