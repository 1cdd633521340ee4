// An extension page (an offscreen document would do the same): the main-thread and worker entries, with the wasm
// files handed over as in the service worker.
import { Bert } from "./bertgpu/index.js";
import { Bert as WorkerBert } from "./bertgpu/worker.js";

const wasm = {
  relaxed: chrome.runtime.getURL("wasm/relaxed.wasm"),
  simd128: chrome.runtime.getURL("wasm/simd128.wasm"),
};

window.embedBoth = async (model, texts, simd = "auto") => {
  const bert = await Bert.load(model, { device: "cpu", simd, wasm });
  const main = (await bert.embed(texts)).map((v) => Array.from(v));
  const builds = [bert.simd];
  bert.dispose();
  const inWorker = await WorkerBert.load(model, { device: "cpu", simd, wasm });
  const worker = (await inWorker.embed(texts)).map((v) => Array.from(v));
  builds.push(inWorker.simd);
  inWorker.dispose();
  return { main, worker, builds };
};
window.appReady = true;
