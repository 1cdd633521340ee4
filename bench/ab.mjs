// Two builds of the package side by side: both loaded in one headless Chromium page, the same texts embedded by
// each in alternating order, medians printed. For measuring one change (build the old package into another folder
// first, e.g. `cp -a pkg pkg-old` before the change). Run from the repository root:
//
//   node bench/ab.mjs <dir A> <dir B> <model source> <texts> <tokens> [reps 7] [simd A] [simd B]
//   node bench/ab.mjs pkg-old pkg /bench/models/all-MiniLM-L6-v2.q8_0.gguf 8 128 9 relaxed relaxed
//
// The directories are package folders under the repository root (pkg/ layout); the source is a URL path the
// repository server serves (a model folder or a .gguf); simd is "relaxed" / "simd128" (default "auto").
import { chromium } from "playwright-core";
import { ARGS, CHROMIUM, ROOT } from "../tests/browser/harness.mjs";
import { serve } from "../www/serve.mjs";

const [dirA, dirB, source, texts, tokens, reps = "7", simdA = "auto", simdB = "auto"] = process.argv.slice(2);
if (!dirA || !dirB || !source || !texts || !tokens) {
  console.error("usage: node bench/ab.mjs <dir A> <dir B> <model source> <texts> <tokens> [reps] [simd A] [simd B]");
  process.exit(2);
}
const site = await serve(ROOT);
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
try {
  const page = await browser.newPage();
  await page.goto(`${site.url}bench/page.html`);
  const r = await page.evaluate(async ({ dirs, source, n, tokens, reps, simds }) => {
    const berts = [];
    for (const [i, dir] of dirs.entries()) {
      const { Bert } = await import(`/${dir}/index.js`);
      berts.push(await Bert.load(source, { device: "cpu", cache: false, simd: simds[i] }));
    }
    // Texts of about `tokens` tokens each (about 10 tokens per repetition of the sentence, cut by truncation).
    const texts = Array.from({ length: n }, (_, i) => `${i} `
      + "The quick brown fox jumps over the lazy dog. ".repeat(Math.ceil(tokens / 10)));
    const times = [[], []];
    for (let rep = 0; rep <= reps; rep++) {
      for (const j of rep % 2 ? [0, 1] : [1, 0]) {
        const t0 = performance.now();
        await berts[j].embed(texts);
        if (rep > 0) times[j].push(performance.now() - t0); // rep 0 warms up
      }
    }
    const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
    return times.map(median);
  }, { dirs: [dirA, dirB], source, n: Number(texts), tokens: Number(tokens), reps: Number(reps), simds: [simdA, simdB] });
  console.log(`${dirA} (${simdA}): ${r[0].toFixed(1)} ms, ${dirB} (${simdB}): ${r[1].toFixed(1)} ms, B/A ${(r[1] / r[0]).toFixed(3)}`);
} finally {
  await browser.close();
  await site.close();
}
