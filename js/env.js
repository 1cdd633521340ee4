// A browser (page or worker), or Node.js.

/**
 * Node.js (or a runtime that copies its API), not a browser: files come from the disk. Checked by the absence of
 * `window` and `importScripts` too, so that a page or worker with a `process` polyfill is not taken for Node.
 */
export const IN_NODE = typeof globalThis.process?.versions?.node === "string"
  && typeof globalThis.window === "undefined" && typeof globalThis.importScripts === "undefined";

/**
 * A Node.js built-in module (`"node:fs/promises"`, `"node:url"`, ...) through `process.getBuiltinModule` (Node
 * 20.16+): a plain function call, which bundlers building for the browser neither follow nor try to resolve.
 */
export function nodeBuiltin(name) {
  const get = globalThis.process?.getBuiltinModule;
  if (typeof get !== "function") {
    throw new Error(`bertgpu: reading files in Node.js needs Node 20.16 or newer (process.getBuiltinModule); this is `
      + `Node ${globalThis.process?.versions?.node}`);
  }
  return get(name);
}

/** Node.js: a file's bytes, as a Uint8Array over the Buffer fs gives. */
export async function readBytes(file) {
  const b = await nodeBuiltin("node:fs/promises").readFile(file);
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}
