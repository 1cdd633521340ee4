// Loads a model with bertgpu on the main thread and in its worker entry, as an app would; the test calls
// window.embedBoth(modelUrl, texts) and compares the vectors with PyTorch's.
import { Bert } from "bertgpu";
import { Bert as WorkerBert } from "bertgpu/worker";

window.embedBoth = async (model, texts) => {
  const bert = await Bert.load(model, { device: "cpu" });
  const main = (await bert.embed(texts)).map((v) => Array.from(v));
  const simd = bert.simd;
  bert.dispose();
  const inWorker = await WorkerBert.load(model, { device: "cpu" });
  const worker = (await inWorker.embed(texts)).map((v) => Array.from(v));
  inWorker.dispose();
  return { main, worker, simd };
};
window.appReady = true;
