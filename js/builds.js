// Which wasm build runs, on how many threads (the `simd`, `threads` and `wasm` options).

import { IN_NODE, nodeBuiltin } from "./env.js";
import { threadsOption, threadsUnavailable } from "./threads.js";
// The wasm-bindgen glue of the four builds (see BUILDS).
import * as glueSimd128 from "./wasm/bertgpu.js";
import * as glueRelaxed from "./wasm-relaxed/bertgpu.js";
import * as glueThreads from "./wasm-threads/bertgpu.js";
import * as glueThreadsRelaxed from "./wasm-threads-relaxed/bertgpu.js";

const SIMDS = ["auto", "relaxed", "simd128"];

// The smallest module using a relaxed SIMD instruction (`() -> v128`: three `v128.const 0` into
// `i32x4.relaxed_dot_i8x16_i7x16_add_s`): it validates exactly where relaxed SIMD is implemented.
const RELAXED_PROBE = (() => {
  const b = [0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 5, 1, 0x60, 0, 1, 0x7b, 3, 2, 1, 0, 10, 0x3d, 1, 0x3b, 0];
  for (let i = 0; i < 3; i++) b.push(0xfd, 0x0c, ...new Array(16).fill(0));
  b.push(0xfd, 0x93, 0x02, 0x0b);
  return new Uint8Array(b);
})();

/** Whether this engine runs relaxed SIMD (Chrome/Edge 114+), which the faster of the two builds needs. */
export function hasRelaxedSimd() {
  try {
    return WebAssembly.validate(RELAXED_PROBE);
  } catch {
    return false;
  }
}

/**
 * The build `simd` ("auto" | "relaxed" | "simd128") asks for, checked against what the engine can run and, when the
 * caller gives the wasm (`given`: { relaxed?, simd128? }), against the builds given.
 */
export function pickBuild(simd, given) {
  if (!SIMDS.includes(simd)) {
    throw new TypeError(`Bert.load: simd must be one of ${SIMDS.map((d) => `"${d}"`).join(", ")} (got ${JSON.stringify(simd)})`);
  }
  const relaxed = hasRelaxedSimd();
  if (simd === "relaxed" && !relaxed) {
    throw new Error("Bert.load: simd: \"relaxed\" was asked for, but this engine does not implement WebAssembly "
      + "relaxed SIMD; use \"auto\" or \"simd128\"");
  }
  if (given) {
    const pick = simd === "auto" ? (relaxed && given.relaxed ? "relaxed" : "simd128") : simd;
    if (!given[pick]) {
      const file = pick === "relaxed" ? "wasm-relaxed/bertgpu_bg.wasm" : "wasm/bertgpu_bg.wasm";
      throw new TypeError(`Bert.load: the wasm option gives no ${pick} build (${file}); give it as { ${pick}: ... }`);
    }
    return pick;
  }
  return simd === "auto" ? (relaxed ? "relaxed" : "simd128") : simd;
}

// The two builds (scripts/build-wasm.sh): wasm/ (SIMD128) and wasm-relaxed/ (plus relaxed SIMD: a faster Q8_0
// kernel, the same results bit for bit). Both glue modules are imported statically, at the top (about 10 kB gzipped
// each; a page downloads only the .wasm of the build it uses): a service worker may not use import(), and a static
// import leaves a bundler no chunk to place. Every specifier is a literal, which bundlers follow (Vite, webpack and
// Rollup copy the .wasm files and rewrite the URLs) and browsers resolve as they are, next to this file.
// The other two, wasm-threads/ and wasm-threads-relaxed/ (the same two with threads: js/threads.js), run where the
// page is cross-origin isolated.
export const BUILDS = {
  simd128: { glue: glueSimd128, url: () => new URL("./wasm/bertgpu_bg.wasm", import.meta.url) },
  relaxed: { glue: glueRelaxed, url: () => new URL("./wasm-relaxed/bertgpu_bg.wasm", import.meta.url) },
  threads: { glue: glueThreads, url: () => new URL("./wasm-threads/bertgpu_bg.wasm", import.meta.url) },
  threadsRelaxed: { glue: glueThreadsRelaxed, url: () => new URL("./wasm-threads-relaxed/bertgpu_bg.wasm", import.meta.url) },
};
/** The threaded builds, and the SIMD each has (the `simd` a model reports). */
export const THREADED = { threads: "simd128", threadsRelaxed: "relaxed" };

/**
 * The build and thread count for Bert.load's options: a threaded build when more than one thread is asked for (or
 * by default, where the browser reports several cores), the page can run it and, when the caller gives the wasm,
 * gives it; the relaxed-SIMD one where the single-threaded choice would be relaxed SIMD (`simd` "relaxed", or
 * "auto" on an engine that has it). Else the single-threaded build on one thread, with `threadsReason` saying why
 * where threads were asked for.
 */
export function pickThreads(opts, wasm, method) {
  const threads = threadsOption(opts.threads, method);
  const simd = opts.simd ?? "auto";
  // The single-threaded build, checked only where it runs (a wasm option may give a threaded build alone).
  const single = () => pickBuild(simd, wasm);
  if (threads === 1) return { build: single(), threads: 1, threadsReason: null };
  if (!SIMDS.includes(simd) || (simd === "relaxed" && !hasRelaxedSimd())) pickBuild(simd, null); // the same errors
  const relaxed = simd === "relaxed" || (simd === "auto" && hasRelaxedSimd() && (!wasm || wasm.threadsRelaxed != null));
  const build = relaxed ? "threadsRelaxed" : "threads";
  let why = threadsUnavailable();
  if (!why && wasm && !wasm[build]) {
    why = `the wasm option gives no threaded${relaxed ? " relaxed-SIMD" : ""} build ({ ${build}: ... })`;
  }
  if (!why) return { build, threads, threadsReason: null };
  return { build: single(), threads: 1, threadsReason: why };
}

/** One value of the `wasm` option → a URL, bytes, a WebAssembly.Module or a Response; TypeError if it is none. */
function wasmValue(value, what) {
  if (value instanceof URL) return value;
  if (typeof value === "string") {
    const base = IN_NODE ? nodeBuiltin("node:url").pathToFileURL(`${globalThis.process.cwd()}/`).href
      : globalThis.location?.href;
    try {
      return new URL(value, base);
    } catch {
      throw new TypeError(`Bert.load: ${what} "${value}" is not a URL`);
    }
  }
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof WebAssembly.Module) return value;
  if (typeof Response === "function" && value instanceof Response) return value;
  throw new TypeError(`Bert.load: ${what} must be a URL (string or URL), the module's bytes (ArrayBuffer or `
    + "Uint8Array), a WebAssembly.Module or a Response");
}

/**
 * The `wasm` option → { relaxed?, simd128? }: one value is the SIMD128 build (wasm/bertgpu_bg.wasm), or the relaxed
 * one when `simd` is "relaxed"; an object names either or both.
 */
export function checkWasmOption(wasm, simd) {
  if (wasm == null) return null;
  if (Object.getPrototypeOf(wasm) === Object.prototype) {
    const keys = Object.keys(wasm);
    const bad = keys.find((k) => !(k in BUILDS));
    if (bad || keys.length === 0) {
      throw new TypeError(`Bert.load: wasm as an object names the builds, { relaxed, simd128, threads, threadsRelaxed }${bad ? ` (got "${bad}")` : ""}`);
    }
    const out = {};
    for (const k of keys) if (wasm[k] != null) out[k] = wasmValue(wasm[k], `wasm.${k}`);
    return out;
  }
  return { [simd === "relaxed" ? "relaxed" : "simd128"]: wasmValue(wasm, "wasm") };
}
