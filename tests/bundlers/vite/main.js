// Loads a model with bertgpu on the main thread and in its worker entry, as an app would; the test calls
// window.embedBoth(modelUrl, texts, simd) and compares the vectors with PyTorch's.
import { Bert } from "bertgpu";
import { Bert as WorkerBert } from "bertgpu/worker";

window.embedBoth = async (model, texts, simd = "auto") => {
  const bert = await Bert.load(model, { device: "cpu", simd });
  const main = (await bert.embed(texts)).map((v) => Array.from(v));
  const builds = [bert.simd];
  bert.dispose();
  const inWorker = await WorkerBert.load(model, { device: "cpu", simd });
  const worker = (await inWorker.embed(texts)).map((v) => Array.from(v));
  builds.push(inWorker.simd);
  inWorker.dispose();
  return { main, worker, builds };
};
window.appReady = true;
