// Where the wasm CPU path spends its time: Chromium's sampling profiler (CDP) around repeated `embed` calls, self
// time per function. Function names need a module that kept its name section, i.e. one not passed through
// wasm-opt. From the repository root, after scripts/build-wasm.sh:
//
//   cargo build --lib --profile wasm --target wasm32-unknown-unknown --target-dir target/relaxed --features relaxed-simd
//   rm -rf pkg-prof && cp -a pkg pkg-prof && wasm-bindgen --target web --out-dir pkg-prof/wasm-relaxed \
//     --out-name bertgpu target/relaxed/wasm32-unknown-unknown/wasm/bertgpu.wasm
//   node bench/profile.mjs pkg-prof /bench/models/all-MiniLM-L6-v2.q8_0.gguf 8 128 relaxed [calls 3]
//
// (For the SIMD128 build: target/ without the feature, into pkg-prof/wasm, and simd "simd128".)
// THREADS=n in the environment: a cross-origin isolated page and `threads: n` (the threaded build; put its
// unoptimized module into pkg-prof/wasm-threads-relaxed the same way, from target/threads-relaxed). The profile is
// the main thread's, which runs its share of every parallel loop and waits for the workers' (`par_for`).
// <tokens> "sentence": bench/latency.mjs's one sentence (15 tokens) instead of repeated text.
// After the top functions, the self time grouped by what it does, in ms per call: the GEMMs, the attention, the
// pool (`par_for`'s own time: publishing a loop, taking items, and, on the caller, waiting for the workers' last
// items), the other passes (LayerNorm, epilogues, embeddings, pooling), the tokenizer, and the rest (JS, glue).
import { withBenchPage } from "./harness.mjs";

const THREADS = process.env.THREADS ? Number(process.env.THREADS) : undefined;

const [dir, source, texts, tokens, simd = "auto", calls = "3"] = process.argv.slice(2);
if (!dir || !source || !texts || !tokens) {
  console.error("usage: node bench/profile.mjs <package dir> <model source> <texts> <tokens> [simd] [calls]");
  process.exit(2);
}
await withBenchPage({ isolated: THREADS !== undefined }, async (page) => {
  const setup = { dir, source, simd, n: Number(texts), tokens, threads: THREADS };
  await page.evaluate(async ({ dir, source, simd, n, tokens, threads }) => {
    const { Bert } = await import(`/${dir}/index.js`);
    window.profiled = await Bert.load(source, { device: "cpu", cache: false, simd, threads });
    window.profiledTexts = tokens === "sentence"
      ? ["Anyone who has never made a mistake has never tried anything new."]
      : window.repeatedTexts(n, Number(tokens));
    for (let i = 0; i < 2; i++) await window.profiled.embed(window.profiledTexts); // warm-up
  }, setup);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Profiler.enable");
  await cdp.send("Profiler.setSamplingInterval", { interval: 200 });
  await cdp.send("Profiler.start");
  const ms = await page.evaluate(async (calls) => {
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) await window.profiled.embed(window.profiledTexts);
    return (performance.now() - t0) / calls;
  }, Number(calls));
  const { profile } = await cdp.send("Profiler.stop");
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const f = nodes.get(id).callFrame;
    const name = f.functionName || f.url.split("/").pop() || "(anonymous)";
    self.set(name, (self.get(name) ?? 0) + profile.timeDeltas[i]);
    total += profile.timeDeltas[i];
  });
  console.log(`${ms.toFixed(1)} ms per embed call (profiler on), self time:`);
  for (const [name, t] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 20)) {
    console.log(`${(100 * t / total).toFixed(1).padStart(5)}%  ${name.slice(0, 120)}`);
  }
  const groups = [
    ["GEMM kernels", /matmul::|::q8::|gemm/],
    ["attention", /attention/],
    ["pool (par_for: publish, take items, wait for workers)", /threads::/],
    ["other passes (LayerNorm, epilogues, embeddings, pooling)", /norm::|epilogue|embeddings|pool_tokens|rotary|glu/],
    ["tokenizer", /tokenizers|tokenizer::/],
  ];
  const byGroup = new Map([...groups.map(([g]) => [g, 0]), ["the rest (JS, glue, allocation)", 0]]);
  for (const [name, t] of self) {
    const g = groups.find(([, re]) => re.test(name));
    const key = g ? g[0] : "the rest (JS, glue, allocation)";
    byGroup.set(key, byGroup.get(key) + t);
  }
  console.log("by kind, ms per call (share):");
  for (const [g, t] of byGroup) {
    console.log(`${(ms * t / total).toFixed(2).padStart(7)} ms  ${(100 * t / total).toFixed(1).padStart(5)}%  ${g}`);
  }
});
