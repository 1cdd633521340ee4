// Time per token against the number of tokens, one package in one page (the calls of the four inputs alternate, so
// the machine's drift hits them alike): does a short input pay a fixed cost per call? From the repository root:
//
//   node bench/scaling.mjs [model source, default the q8_0 GGUF] [simd: relaxed | simd128 | auto]
//   node bench/scaling.mjs /models/all-MiniLM-L6-v2 simd128
import { withBenchPage } from "./harness.mjs";

const [source = "/bench/models/all-MiniLM-L6-v2.q8_0.gguf", simd = "auto"] = process.argv.slice(2);
await withBenchPage({}, async (page) => {
  const lines = await page.evaluate(async ({ source, simd }) => {
    const { Bert } = await import("/pkg/index.js");
    const bert = await Bert.load(source, { device: "cpu", cache: false, simd });
    const s = "The quick brown fox jumps over the lazy dog. ";
    const inputs = { "1 text": ["0 " + s], "1 longer text": ["0 " + s.repeat(4)], "1 long text": ["0 " + s.repeat(13)],
      "8 long texts": Array.from({ length: 8 }, (_, i) => `${i} ` + s.repeat(13)) };
    const tokens = {};
    for (const [k, t] of Object.entries(inputs)) {
      tokens[k] = (await bert.tokenize(t)).reduce((a, x) => a + x.input_ids.length, 0);
    }
    const times = Object.fromEntries(Object.keys(inputs).map((k) => [k, []]));
    for (let rep = 0; rep < 12; rep++) {
      for (const [k, t] of Object.entries(inputs)) {
        const t0 = performance.now();
        await bert.embed(t);
        if (rep > 0) times[k].push(performance.now() - t0); // rep 0 warms up
      }
    }
    const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
    return Object.keys(inputs).map((k) => `${k}: ${tokens[k]} tokens, ${median(times[k]).toFixed(1)} ms, `
      + `${(median(times[k]) / tokens[k]).toFixed(3)} ms per token`);
  }, { source, simd });
  console.log(lines.join("\n"));
});
