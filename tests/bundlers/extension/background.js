// The extension's service worker: bertgpu from the extension's own copy of the package (no code from a CDN, no
// bundler; a service worker may not use import(), and the package needs none). The wasm files live where the
// extension put them, handed over with the `wasm` option.
import { Bert } from "./bertgpu/index.js";

const wasm = {
  relaxed: chrome.runtime.getURL("wasm/relaxed.wasm"),
  simd128: chrome.runtime.getURL("wasm/simd128.wasm"),
};

self.embed = async (model, texts, simd = "auto") => {
  const bert = await Bert.load(model, { device: "cpu", cache: false, simd, wasm });
  const vectors = (await bert.embed(texts)).map((v) => Array.from(v));
  const build = bert.simd;
  bert.dispose();
  return { vectors, simd: build };
};
