// The demo page (www/) in headless Chromium: loads the default model (all-MiniLM-L6-v2) in the worker, runs the
// similarity section on three short sentences and checks the heatmap's ordering with the real model: the two
// paraphrases are more similar to each other than either is to the unrelated sentence. Then ranks a query, and
// fill-mask when the package has it. Saves screenshots to tests/browser/screenshots/ (git-ignored); any console
// error fails the test. The page is served by www/serve.mjs. Inputs are tiny: `auto` picks the wasm CPU path on SwiftShader's fallback adapter.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { start, ROOT } from "./harness.mjs";
import { serveDemo } from "../../www/serve.mjs";

const SHOTS = path.join(ROOT, "tests/browser/screenshots");

test("demo page: similarity heatmap and search with all-MiniLM-L6-v2, no console errors", { timeout: 120_000 }, async () => {
  // The page is served by the demo's own server (what scripts/demo.sh runs), Chromium comes from the harness.
  const env = await start();
  const demo = await serveDemo(0);
  try {
    const page = await env.context.newPage();
    await page.setViewportSize({ width: 1100, height: 900 });
    const errors = [];
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    page.on("pageerror", (e) => errors.push(`uncaught: ${e.message}`));
    page.on("worker", (w) => w.on?.("console", (m) => { if (m.type() === "error") errors.push(`worker: ${m.text()}`); }));

    await page.goto(demo.url);
    await page.waitForFunction(() => window.demo?.ready || window.demo?.error, null, { timeout: 60_000 });
    assert.equal(await page.evaluate(() => window.demo.error), null);
    const badge = await page.textContent("#badge");
    assert.match(badge, /^(WebGPU|CPU)$/);

    const sentences = ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell today."];
    await page.fill("#sim-input", sentences.join("\n"));
    await page.focus("#sim-input");
    await page.keyboard.press("Control+Enter"); // the keyboard path; the Compare button calls the same code
    await page.waitForSelector("#heatmap td[data-sim]", { timeout: 60_000 });
    const sim = await page.$$eval("#heatmap td[data-sim]", (tds) => {
      const m = [];
      for (const td of tds) (m[+td.dataset.i] ??= [])[+td.dataset.j] = Number(td.dataset.sim);
      return m;
    });
    assert.equal(sim.length, 3);
    for (let i = 0; i < 3; i++) assert.ok(Math.abs(sim[i][i] - 1) < 1e-3, `self-similarity ${sim[i][i]}`);
    assert.ok(sim[0][1] > sim[0][2] + 0.2, `paraphrases ${sim[0][1]} vs unrelated ${sim[0][2]}`);
    assert.ok(sim[0][1] > sim[1][2] + 0.2, `paraphrases ${sim[0][1]} vs unrelated ${sim[1][2]}`);
    assert.match(await page.textContent("#sim-time"), /3 sentences embedded in [\d.]+ m?s/);

    await page.fill("#search-query", "shares and stocks");
    await page.click("#search-run");
    await page.waitForFunction(() => document.querySelectorAll("#search-results li").length === 3, null, { timeout: 30_000 });
    const top = await page.textContent("#search-results li:first-child .text");
    assert.equal(top, sentences[2]);

    const hasFillMask = await page.isVisible("#fm-body");
    if (hasFillMask) {
      await page.click("#fm-run");
      await page.waitForSelector("#fm-results li", { timeout: 30_000 });
      const words = await page.$$eval("#fm-results .word", (els) => els.map((e) => e.textContent));
      assert.equal(words.length, 5);
      // PyTorch (transformers' fill-mask pipeline on models/splade-tiny, a tiny 2-layer model) gives
      // city 0.114, mountains 0.057, france 0.041, where 0.037, paris 0.015 for this sentence.
      assert.deepEqual(words.slice(0, 3), ["city", "mountains", "france"]);
    }

    fs.mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: path.join(SHOTS, "demo-desktop.png"), fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: path.join(SHOTS, "demo-phone.png"), fullPage: true });
    assert.deepEqual(errors, [], `console errors:\n${errors.join("\n")}`);
  } finally {
    await demo.close();
    await env.stop();
  }
});
