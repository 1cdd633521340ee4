// The demo page's search-adaptation panel (www/adapt.js) in headless Chromium with the page's default model
// (all-MiniLM-L6-v2): pasted pairs fine-tune it with in-batch negatives (bert.fineTune, task "embed"), the loss of
// every step is drawn, and a query's ranking of the passages shows before and after side by side, the paired passage
// marked with its rank; a run stopped part way says the model is as it was. Bad input (one pair, a line without a
// separator) and a model that cannot train embeddings (a GTE with its NTK-scaled rotation: refused by name) are shown in the panel,
// and the page stays usable. About 10 s on 2 cores (the wasm CPU path: SwiftShader's adapter is a fallback one).
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { start, ROOT } from "./harness.mjs";
import { serveDemo } from "../../www/serve.mjs";

/**
 * Made-up names the model cannot know, each paired with a place: before training a name's passage ranks where the
 * pretrained model happens to put it; training pulls each name towards its own passage, so after it the mean rank of
 * the paired passages is lower (MIN_GAIN). Measured at 2 epochs, batches of 3, learning rate 3e-4: 3.5 before, 1 after
 * (every name's passage first).
 */
const PAIRS = [
  ["where is the Zorblat", "The kitchen is on the third floor, next to the lifts."],
  ["open the Quindle", "The bike shed is behind the car park, through the grey gate."],
  ["find the Vextor", "The library is in the basement of the north building."],
  ["go to the Plimsk", "The gym is at the end of the ground-floor corridor."],
  ["visit the Drazzle", "The roof garden opens at noon on weekdays."],
  ["reach the Kroof", "The first-aid room is beside reception."],
];
/** How much lower the mean rank of the paired passages must be after training (of 6 passages). */
const MIN_GAIN = 0.5;
const SHOTS = path.join(ROOT, "tests/browser/screenshots");

function watch(page, errors) {
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(`uncaught: ${e.message}`));
}

/** Clicks Adapt and waits until the panel says it finished, or shows an error; the error's text or null. */
async function adapt(page) {
  await page.$eval("#ad-time", (e) => { e.textContent = ""; });
  await page.click("#ad-run");
  await page.waitForFunction(() => /^adapted in/.test(document.querySelector("#ad-time").textContent)
    || !document.querySelector("#ad-error").hidden, null, { timeout: 120_000 });
  await page.waitForFunction(() => !document.querySelector("#ad-run").disabled);
  return await page.isVisible("#ad-error") ? page.textContent("#ad-error") : null;
}

test("demo page: adapting the loaded embedding model on pasted pairs, search before and after, bad input",
  { timeout: 300_000 }, async () => {
    const env = await start();
    const demo = await serveDemo(0);
    const errors = [];
    try {
      const page = await env.context.newPage();
      watch(page, errors);
      await page.goto(demo.url);
      await page.waitForFunction(() => window.demo?.ready || window.demo?.error, null, { timeout: 60_000 });
      assert.equal(await page.evaluate(() => window.demo.error), null);

      // The panel's example pairs parse.
      assert.equal(await page.textContent("#ad-count"), "8 pairs, 8 passages");

      // Bad input first: each is refused before any work, in the panel, and the page stays usable.
      await page.fill("#ad-input", `${PAIRS[0][0]} | ${PAIRS[0][1]}`);
      assert.equal(await page.textContent("#ad-count"), "1 pair, 1 passage");
      assert.match(await adapt(page), /^Error: paste at least 2 pairs \(1 now\)/);
      await page.fill("#ad-input", `${PAIRS[0][0]} | ${PAIRS[0][1]}\nno separator on this line`);
      assert.match(await page.textContent("#ad-count"), /^line 2 should read/);
      assert.match(await adapt(page), /^Error: line 2 should read "query<Tab>passage" or "query \| passage"/);
      assert.equal(await page.isVisible("#ad-results"), false);

      // The pairs, one with a Tab and the rest with " | ", trained 2 epochs in batches of 3: 4 steps.
      const text = PAIRS.map(([q, p], i) => `${q}${i === 0 ? "\t" : " | "}${p}`).join("\n");
      await page.fill("#ad-input", text);
      assert.equal(await page.textContent("#ad-count"), "6 pairs, 6 passages");
      await page.fill("#ad-epochs", "2");
      await page.evaluate(() => {
        // Batches of 3 (the menu's sizes are 2, 4, 8, 16): two steps an epoch over 6 pairs.
        document.querySelector("#ad-batch").append(new Option("3", "3", true, true));
      });
      await page.selectOption("#ad-lr", "0.0003");
      await page.fill("#ad-query", PAIRS[2][0]);
      const t0 = Date.now();
      assert.equal(await adapt(page), null);
      const ms = Date.now() - t0;
      const last = await page.evaluate(() => window.demo.lastAdapt);
      assert.equal(last.steps, 4);
      assert.equal(last.loss.length, 4);
      for (const l of last.loss) assert.ok(Number.isFinite(l) && l > 0, `loss ${l}`);
      assert.match(await page.textContent("#ad-time"), /^adapted in .* · 4 steps · loss [\d.]+ → [\d.]+$/);
      // The chart: one point per step on the loss line.
      const d = await page.getAttribute("#ad-chart path.train:not(.acc)", "d");
      assert.equal((d.match(/[ML]/g) ?? []).length, 4, d);
      assert.match(await page.getAttribute("#ad-chart", "aria-label"), /^Epoch 2: loss [\d.]+$/);

      // Both rankings, side by side, every passage in each, the paired passage marked with its rank.
      assert.equal(await page.isVisible("#ad-results"), true);
      const side = (id) => page.$$eval(`#${id} li`, (ls) => ls.map((l) => ({
        text: l.querySelector(".text").textContent, score: Number(l.querySelector(".score").textContent),
        tag: l.querySelector(".tag")?.textContent ?? null })));
      const before = await side("ad-before"), after = await side("ad-after");
      const passages = PAIRS.map((p) => p[1]);
      for (const list of [before, after]) {
        assert.deepEqual(list.map((l) => l.text).sort(), [...passages].sort());
        const tagged = list.filter((l) => l.tag);
        assert.equal(tagged.length, 1);
        assert.equal(tagged[0].text, PAIRS[2][1]);
        assert.equal(tagged[0].tag, `paired · rank ${list.indexOf(tagged[0]) + 1}`);
        for (let i = 1; i < list.length; i++) assert.ok(list[i - 1].score >= list[i].score, "best first");
      }
      assert.notDeepEqual(before.map((l) => l.score), after.map((l) => l.score), "the model changed");
      const rankIn = (list) => list.findIndex((l) => l.tag) + 1;
      assert.match(await page.textContent("#ad-search-time"),
        new RegExp(`paired passage: rank ${rankIn(before)} before, ${rankIn(after)} after$`));

      // Over all the pairs: the paired passages rank higher after training.
      const { ranks } = await page.evaluate(() => window.demo.lastAdapt);
      const mean = (r) => r.reduce((a, b) => a + b, 0) / r.length;
      assert.ok(mean(ranks.after) <= mean(ranks.before) - MIN_GAIN,
        `mean rank ${mean(ranks.before)} before, ${mean(ranks.after)} after`);
      assert.match(await page.textContent("#ad-summary"),
        /^On the 6 pairs: the paired passage ranks first for \d of 6 queries before and \d after; its mean rank/);

      // Another of the pairs' queries, searched after training: both sides again, from the kept vectors.
      await page.fill("#ad-query", PAIRS[4][0]);
      await page.$eval("#ad-search-time", (e) => { e.textContent = ""; });
      await page.click("#ad-search-run");
      await page.waitForFunction(() => /paired passage/.test(document.querySelector("#ad-search-time").textContent));
      assert.equal(await page.$$eval("#ad-before li", (l) => l.length), 6);
      assert.equal(await page.$eval("#ad-after li.paired .text", (e) => e.textContent), PAIRS[4][1]);
      fs.mkdirSync(SHOTS, { recursive: true });
      await page.setViewportSize({ width: 1100, height: 900 });
      await (await page.$("#adapt")).screenshot({ path: path.join(SHOTS, "demo-adapt.png") });
      // A query the model before never saw: the after side alone, and the page says why.
      await page.fill("#ad-query", "somewhere to exercise");
      await page.$eval("#ad-search-time", (e) => { e.textContent = ""; });
      await page.click("#ad-search-run");
      await page.waitForFunction(() => document.querySelector("#ad-search-time").textContent !== "");
      assert.equal(await page.$$eval("#ad-before li", (l) => l.length), 0);
      assert.equal(await page.$$eval("#ad-after li", (l) => l.length), 6);
      assert.match(await page.textContent("#ad-search-note"), /embedded only the pairs' queries/);
      console.log(`adapting: ${ms} ms for ${last.steps} steps; mean rank ${mean(ranks.before)} → ${mean(ranks.after)}`);

      // Stop: a 40-step run stopped once its first step shows ends between two steps, saying the model is as it was.
      await page.fill("#ad-epochs", "20");
      await page.$eval("#ad-time", (e) => { e.textContent = ""; });
      await page.click("#ad-run");
      await page.waitForFunction(() => /^step \d+\/40/.test(document.querySelector("#ad-time").textContent), null,
        { timeout: 60_000 });
      assert.equal(await page.isVisible("#ad-stop"), true);
      await page.click("#ad-stop");
      await page.waitForFunction(() => /^stopped/.test(document.querySelector("#ad-time").textContent), null,
        { timeout: 60_000 });
      assert.equal(await page.textContent("#ad-time"), "stopped: the model is as it was before adapting");
      assert.equal(await page.isVisible("#ad-error"), false, await page.textContent("#ad-error"));
      assert.equal(await page.isVisible("#ad-stop"), false);
      assert.equal(await page.isVisible("#ad-results"), false);
      await page.waitForFunction(() => !document.querySelector("#ad-run").disabled);

      // A model that cannot train embeddings (GTE's NTK-scaled rotation, which transformers' GteModel lacks: refused
      // by name), typed in the model box: the error shows in
      // the panel, and the page still works (similarity on the same model).
      await page.fill("#model-url", "/tests/models/tiny-gte-ntk/");
      const loads = await page.evaluate(() => window.demo.loads);
      await page.click("#model-load");
      await page.waitForFunction((n) => window.demo.loads > n || !document.querySelector("#model-error").hidden, loads,
        { timeout: 60_000 });
      assert.equal(await page.isVisible("#model-error"), false, await page.textContent("#model-error"));
      assert.equal(await page.isVisible("#ad-results"), false, "a new model drops the last run's rankings");
      const refused = await adapt(page);
      console.log(`tiny-gte-ntk: ${refused}`);
      assert.match(refused, /^Error: .*`gte`.*NTK-scaled rotation/);
      assert.equal(await page.isVisible("#ad-results"), false);
      await page.fill("#sim-input", "one sentence\nanother sentence");
      await page.click("#sim-run");
      await page.waitForSelector("#heatmap td[data-sim]", { timeout: 60_000 });
      assert.deepEqual(errors, [], `console errors:\n${errors.join("\n")}`);
    } finally {
      await demo.close();
      await env.stop();
    }
  });
