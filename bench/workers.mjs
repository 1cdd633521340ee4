// The cost of the worker entry on one short sentence. Two experiments in one headless Chromium page each:
//   default: bertgpu's main-thread entry and its worker entry with 1 and 2 workers (each a copy of the model),
//            loaded side by side, each timed on the same sentence in turn (5 warm-up rounds, then `reps`); and 2
//            workers on two sentences at once (one each), against one sentence, to see how much the two cores slow
//            each other;
//   --batches: 2 workers holding copies against 2 threads of the threaded build on batches (8 × ~128 and
//            32 × ~32 tokens, as bench/browser.mjs's (b) and (c)), alternating, 7 runs each after 2 warm-up;
//   --beside-theirs: the worker entry (2 workers) next to transformers.js with 2 wasm threads (bench/page.js, as in
//            bench/browser.mjs): ours timed right after one of their calls and again after a 300 ms pause, in case
//            their idle threads take the cores.
// Medians printed. From the repository root, after bench/browser.sh has prepared pkg/ and (for --beside-theirs)
// bench/node_modules and the ONNX export:
//
//   node bench/workers.mjs [model source /models/all-MiniLM-L6-v2] [reps 35] [--batches | --beside-theirs]
import { withBenchPage } from "./harness.mjs";

const args = process.argv.slice(2);
const beside = args.includes("--beside-theirs");
const batches = args.includes("--batches");
const [source = "/models/all-MiniLM-L6-v2", reps = "35"] = args.filter((a) => !a.startsWith("--"));
// Cross-origin isolated, or neither transformers.js nor our threaded build can start their 2 threads.
await withBenchPage({ isolated: true }, async (page) => {
  const r = await page.evaluate(async ({ source, reps, beside, batches }) => {
    const text = ["The quick brown fox jumps over the lazy dog again."];
    const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
    const timed = async (f) => {
      const t0 = performance.now();
      await f();
      return performance.now() - t0;
    };
    const times = {};
    const add = (name, ms) => (times[name] ??= []).push(ms);
    if (batches) {
      const worker = (await import("/pkg/worker.js")).Bert;
      const models = {
        "2 workers (copies)": await worker.load(source, { device: "cpu", cache: true, workers: 2 }),
        "2 threads (threaded build)": await (await import("/pkg/index.js")).Bert.load(source,
          { device: "cpu", cache: true, threads: 2 }),
      };
      for (const [n, words] of [[8, 128], [32, 32]]) {
        const texts = window.repeatedTexts(n, words);
        for (let i = 0; i < 9; i++) {
          for (const [name, m] of Object.entries(models)) {
            const ms = await timed(() => m.embed(texts));
            if (i >= 2) add(`${n} × ~${words} tokens, ${name}`, ms);
          }
        }
      }
    } else if (beside) {
      await window.load("ours", { source, device: "cpu", workers: 2 });
      await window.load("theirs", { dtype: "fp32", device: "wasm", threads: 2 });
      for (let i = 0; i < 5 + reps; i++) {
        const theirs = await timed(() => window.embed("theirs", text));
        const right = await timed(() => window.embed("ours", text));
        await window.embed("theirs", text);
        await new Promise((r) => setTimeout(r, 300));
        const paused = await timed(() => window.embed("ours", text));
        if (i < 5) continue;
        add("transformers.js, 2 threads", theirs);
        add("ours (2 workers) right after theirs", right);
        add("ours (2 workers) 300 ms after theirs", paused);
      }
    } else {
      const main = (await import("/pkg/index.js")).Bert;
      const worker = (await import("/pkg/worker.js")).Bert;
      const models = {
        "main thread": await main.load(source, { device: "cpu", cache: true }),
        "worker entry, 1 worker": await worker.load(source, { device: "cpu", cache: true, workers: 1 }),
        "worker entry, 2 workers": await worker.load(source, { device: "cpu", cache: true, workers: 2 }),
      };
      for (let i = 0; i < 5 + reps; i++) {
        for (const [name, m] of Object.entries(models)) {
          const ms = await timed(() => m.embed(text));
          if (i >= 5) add(name, ms);
        }
        const two = await timed(() => models["worker entry, 2 workers"].embed([...text, ...text]));
        if (i >= 5) add("worker entry, 2 workers, 2 sentences at once", two);
      }
    }
    return Object.entries(times).map(([name, xs]) => `${name}: ${median(xs).toFixed(1)} ms`);
  }, { source, reps: Number(reps), beside, batches });
  console.log(r.join("\n"));
});
