// Uses the public API as an application would; `tsc --strict` must accept it (and reject the marked mistakes).
import { Bert, clearCache, type LoadOptions, type WasmSource, type Tokenized } from "bertgpu";
import { Bert as WorkerBert } from "bertgpu/worker";

const wasm: WasmSource = new URL("https://example.com/bertgpu_bg.wasm");
const options: LoadOptions = {
  device: "auto",
  simd: "auto",
  cache: true,
  maxBytes: 1 << 30,
  sha256: { "model.safetensors": "0".repeat(64) },
  onProgress: ({ file, loaded, total }) => console.log(file, loaded, total ?? "?"),
  wasm: { relaxed: "/wasm-relaxed/bertgpu_bg.wasm", simd128: wasm, threads: "/wasm-threads/bertgpu_bg.wasm" },
  threads: 4,
};

const bert: Bert = await Bert.load("./models/all-MiniLM-L6-v2", options);
const fromBytes = await Bert.load({ config: { hidden_size: 384 }, tokenizer: "{}", weights: new Uint8Array(8) });
const fromGguf = await Bert.load({ gguf: new ArrayBuffer(8) }, { wasm: new Uint8Array(8), simd: "simd128" });
const inNode = await Bert.load("/models/all-MiniLM-L6-v2.gguf", { cacheDir: "/tmp/bertgpu-cache" });
const device: "webgpu" | "cpu" = bert.device;
const why: string | null = bert.deviceReason;
const threads: number = bert.threads;
const oneThreadWhy: string | null = bert.threadsReason;
// @ts-expect-error threads is a number
await Bert.load("./m", { threads: "auto" });
const one: Float32Array = await bert.embed("a sentence", { pooling: "mean", normalize: true, batchSize: 8 });
const many: Float32Array[] = await bert.embed(["one", "two"]);
const asMeant: Float32Array = await bert.embed("a query", { prompt: "query", dimensions: 256, pooling: "weightedmean" });
const prompts: Record<string, string> = bert.prompts;
const st = bert.sentenceTransformers;
const firstModule: string | undefined = st?.modules[0]?.type;
// @ts-expect-error: not a pooling mode
await bert.embed("x", { pooling: "median" });
const tokens: Tokenized = await bert.tokenize("Hello", "world");
const masks = await bert.fillMask("Paris is the [MASK] of France.", { topK: 3 });
const best: string = masks[0].token_str;
const pair = await bert.classify(["a question", "its answer"]); // two strings: one pair
const pairLabel: string = pair[0].label;
const scores = await bert.classify(["a", "b", ["c", "d"]], { topK: 1 });
const label: string = scores[0][0].label;
const answer = await bert.answer("who?", "me");
const zs = await bert.zeroShot("the match", ["sports", "politics"], { template: "It is about {}.", multiLabel: true });
const zsLabel: string = zs[0].label;
const zsMany: number = (await bert.zeroShot(["a", "b"], ["x"]))[1][0].score;
// @ts-expect-error: the labels are an array
await bert.zeroShot("x", "sports,politics");
const report = await bert.trainHead([{ text: "x", label: "y" }], { epochs: 2, onProgress: (e) => e.loss });
const head: Uint8Array = await bert.exportHead();
const labels: string[] = await bert.loadHead(head);
const tuned = await bert.fineTune([{ tokens: ["Paris"], tags: ["B-LOC"] }], {
  task: "ner", layers: 2, signal: new AbortController().signal,
  onProgress: (p) => (p.type === "step" ? p.loss : p.type === "epoch" ? p.valAccuracy
    : p.type === "checkpoint" ? p.step : p.type === "memory" ? p.total : p.device),
  checkpoint: { name: "ner-run", every: 50, keep: 2 }, resume: true, patience: 2,
});
const saved: Array<{ name: string; step: number; totalSteps: number | null; size: number; date: Date }> =
  await Bert.checkpoints();
const removed: boolean = await Bert.deleteCheckpoint("ner-run");
const bestTuned: number = tuned.bestEpoch;
const tunedLabels: string[] | null = tuned.labels;
const folder: Uint8Array = (await bert.exportModel())["config.json"];
const pre = await bert.pretrain(["A first sentence.\nIts next one.", "Another document.\nWith two lines."], {
  steps: 4, maxLength: 32, nsp: true, wholeWordMask: false, checkpoint: { name: "mlm-run" },
  onProgress: (p) => (p.type === "step" ? p.mlmAccuracy + (p.nspAccuracy ?? 0) : p.type === "epoch" ? p.valNspAccuracy
    : p.type === "checkpoint" ? p.step : p.type === "memory" ? p.total : p.device),
});
const nspLoss: number | null = pre.steps[0].nspLoss;
await bert.pretrain("one sentence\n\nanother document", { mlmProbability: 0.2 });
// @ts-expect-error: fineTune's option, not pretrain's
await bert.pretrain("text", { epochs: 2 });
// @ts-expect-error: a corpus is text, not examples
await bert.pretrain([{ text: "x" }]);
// @ts-expect-error: not a fine-tuning task
await bert.fineTune([], { task: "summarize" });
bert.dispose();
fromBytes.dispose();
fromGguf.dispose();
inNode.dispose();
await clearCache();

const inWorker: WorkerBert = await WorkerBert.load("https://example.com/m/", { workers: "auto", parallel: "data" });
const workers: number = inWorker.workers;
const vectors: Float32Array[] = await inWorker.embed(["x"]);

// @ts-expect-error: not a device
await Bert.load("x", { device: "tpu" });
// @ts-expect-error: embed of one text gives one vector, not an array
const wrong: Float32Array[] = await bert.embed("one");
// @ts-expect-error: cacheDir is a path
await Bert.load("x", { cacheDir: true });
// @ts-expect-error: not an option
await Bert.load("x", { wasmUrl: "/bertgpu_bg.wasm" });

console.log(device, why, threads, oneThreadWhy, pairLabel, one, many, tokens, best, label, answer.score, report.bestEpoch, labels, workers, vectors, wrong,
  saved, removed, bestTuned, nspLoss);
