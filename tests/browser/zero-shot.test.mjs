// bert.zeroShot against transformers' zero-shot-classification pipeline (tests/golden/zero_shot.json, made by
// tests/golden/zero_shot.py) on the tiny NLI checkpoints, on the CPU and on WebGPU; its option checks and refusals;
// and the demo page's zero-shot panel (in the page's worker, bertgpu/worker) on the tiny NLI preset.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readJson, withPage } from "./harness.mjs";
import { serveDemo } from "../../www/serve.mjs";

/**
 * Max |ours − PyTorch| on the scores (probabilities): measured 7.8e-7 here on the CPU and on SwiftShader's WebGPU
 * ("measured … zero-shot scores"), ≤ 1.7e-6 natively (tests/zero_shot.rs, CPU and lavapipe); heads.test.mjs's
 * SCORE_ATOL, 1e-5, is ~6× the largest.
 */
const SCORE_ATOL = 1e-5;
/** The page shows a percentage to one decimal: up to 0.05 points of rounding on top of the score's error. */
const PERCENT_ROUNDING = 0.0005;

const golden = readJson("tests/golden/zero_shot.json");
const ctx = withPage();

/** One text's output against the pipeline's: the same labels in the same order (the NLI goldens hold no near-tie,
 * zero_shot.py checks), each score within SCORE_ATOL. Returns the worst error. */
function assertRanked(got, want, what) {
  assert.deepEqual(got.map((l) => l.label), want.labels, `${what}: order`);
  got.forEach((l, i) => assert.ok(Math.abs(l.score - want.scores[i]) <= SCORE_ATOL,
    `${what}: ${l.label} ${l.score} vs ${want.scores[i]}`));
  return Math.max(...got.map((l, i) => Math.abs(l.score - want.scores[i])));
}

const call = (c) => ({ labels: c.candidate_labels, options: { template: c.template ?? undefined, multiLabel: c.multi_label },
  texts: c.results.map((r) => r.text) });

test("zeroShot equals the pipeline on the CPU (every NLI case) and on WebGPU", async () => {
  const fams = ["bert", "roberta"];
  const cases = Object.fromEntries(fams.map((f) => [f, golden.families[f].cases.map(call)]));
  const got = await ctx.page.evaluate(async ({ base, fams, cases }) => {
    const out = {};
    for (const device of ["cpu", "webgpu"]) {
      for (const fam of fams) {
        const bert = await bertgpu.Bert.load(`${base}tiny-nli-${fam}/`, { device });
        out[`${device} device`] = bert.device;
        out[`${device} ${fam} tasks`] = bert.tasks;
        // WebGPU on SwiftShader is slow: the single- and the multi-label case with the default template.
        const picked = device === "cpu" ? cases[fam] : [cases[fam][0], cases[fam][2]];
        out[`${device} ${fam}`] = [];
        for (const c of picked) out[`${device} ${fam}`].push(await bert.zeroShot(c.texts, c.labels, c.options));
        out[`${device} ${fam} one`] = await bert.zeroShot(cases[fam][0].texts[0], cases[fam][0].labels);
        bert.dispose();
      }
    }
    return out;
  }, { base: ctx.env.models.url + "tests/models/", fams, cases });
  assert.equal(got["cpu device"], "cpu");
  assert.equal(got["webgpu device"], "webgpu");
  for (const device of ["cpu", "webgpu"]) {
    let worst = 0;
    for (const fam of fams) {
      assert.ok(got[`${device} ${fam} tasks`].includes("zeroShot"), `${fam}: tasks`);
      const want = golden.families[fam].cases;
      const picked = device === "cpu" ? want : [want[0], want[2]];
      assert.equal(got[`${device} ${fam}`].length, picked.length);
      picked.forEach((c, n) => {
        assert.equal(got[`${device} ${fam}`][n].length, c.results.length, "one result per text");
        c.results.forEach((r, i) => {
          worst = Math.max(worst, assertRanked(got[`${device} ${fam}`][n][i], r, `${device} ${fam} case ${n}: ${r.text}`));
        });
      });
      assertRanked(got[`${device} ${fam} one`], want[0].results[0], `${device} ${fam}: one text`);
    }
    console.log(`measured ${device} zero-shot scores: ${worst.toExponential(2)}`);
  }
  ctx.page.checkErrors();
});

test("zeroShot's checks: option types, labels, the template, a checkpoint without an entailment label", async () => {
  const got = await ctx.page.evaluate(async (base) => {
    const err = (p) => p.then(() => "no error", (e) => `${e.name}: ${e.message}`);
    const nli = await bertgpu.Bert.load(`${base}tiny-nli-bert/`, { device: "cpu" });
    const out = {
      unknown: await err(nli.zeroShot("t", ["a"], { topK: 1 })),
      template: await err(nli.zeroShot("t", ["a"], { template: 5 })),
      multi: await err(nli.zeroShot("t", ["a"], { multiLabel: "yes" })),
      labels: await err(nli.zeroShot("t", "a,b")),
      text: await err(nli.zeroShot(5, ["a"])),
      none: await err(nli.zeroShot("t", [])),
      empty: await err(nli.zeroShot("t", ["a", ""])),
      slot: await err(nli.zeroShot("t", ["a"], { template: "no slot" })),
      noTexts: await nli.zeroShot([], ["a"]),
      after: (await nli.zeroShot("t", ["a", "b"])).length,
    };
    nli.dispose();
    const plain = await bertgpu.Bert.load(`${base}tiny-classifier/`, { device: "cpu" });
    out.plain = await err(plain.zeroShot("t", ["a", "b"]));
    out.plainTasks = plain.tasks;
    plain.dispose();
    return out;
  }, ctx.env.models.url + "tests/models/");
  assert.match(got.unknown, /^TypeError: zeroShot: unknown option "topK"/);
  assert.match(got.template, /^TypeError: zeroShot: template must be a string/);
  assert.match(got.multi, /^TypeError: zeroShot: multiLabel must be true or false/);
  assert.match(got.labels, /^TypeError: zeroShot: labels must be an array of strings/);
  assert.match(got.text, /^TypeError: zeroShot: text must be a string or an array of strings/);
  assert.match(got.none, /at least one candidate label/);
  assert.match(got.empty, /candidate label 1 is empty/);
  assert.match(got.slot, /template "no slot": it has no `\{\}`/);
  assert.deepEqual(got.noTexts, []);
  assert.equal(got.after, 2, "the model still answers after refusals");
  assert.match(got.plain, /entailment label.*negative, neutral, positive/);
  assert.ok(!got.plainTasks.includes("zeroShot"));
  ctx.page.checkErrors();
});

test("the demo's zero-shot panel on the tiny NLI preset, in the page's worker", { timeout: 300_000 }, async () => {
  const demo = await serveDemo(0);
  const page = await ctx.env.context.newPage();
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(`uncaught: ${e.message}`));
  try {
    await page.goto(demo.url);
    await page.waitForFunction(() => window.demo?.ready || window.demo?.error, null, { timeout: 120_000 });
    assert.equal(await page.evaluate(() => window.demo.error), null);
    // all-MiniLM-L6-v2 has no classifier: the panel says what it needs.
    assert.ok(await page.isVisible("#zeroshot [data-missing]"));
    assert.equal(await page.isVisible("#zs-form"), false);
    const before = await page.evaluate(() => window.demo.loads);
    await page.selectOption("#model-preset", "/tests/models/tiny-nli-bert/");
    await page.waitForFunction((n) => window.demo.loads > n || !document.querySelector("#model-error").hidden, before,
      { timeout: 60_000 });
    assert.equal(await page.isVisible("#model-error"), false, await page.textContent("#model-error"));
    assert.match(await page.textContent("#model-tasks"), /zero-shot classification/);
    assert.ok(await page.isVisible("#zs-form"));
    for (const [n, multi] of [[1, false], [3, true]]) { // the custom template's cases
      const c = golden.families.bert.cases[n];
      const r = c.results[0];
      await page.fill("#zs-input", r.text);
      await page.fill("#zs-labels", c.candidate_labels.join(", "));
      await page.fill("#zs-template", c.template);
      await page.setChecked("#zs-multi", multi);
      await page.$eval("#zs-time", (e) => { e.textContent = ""; });
      await page.click("#zs-run");
      await page.waitForFunction(() => document.querySelector("#zs-time").textContent !== "", null, { timeout: 60_000 });
      assert.doesNotMatch(await page.textContent("#zs-time"), /Error/, await page.textContent("#zs-time"));
      const shown = await page.$$eval("#zs-results li", (ls) => ls.map((l) => ({
        label: l.children[0].textContent, pct: Number(l.children[2].textContent.replace("%", "")) })));
      assert.deepEqual(shown.map((s) => s.label), r.labels);
      shown.forEach((s, i) => assert.ok(Math.abs(s.pct / 100 - r.scores[i]) <= PERCENT_ROUNDING + SCORE_ATOL,
        `${s.label} ${s.pct}% vs ${r.scores[i]}`));
    }
    // A template without {} is the model's refusal, on the panel's line.
    await page.fill("#zs-template", "no slot");
    await page.click("#zs-run");
    await page.waitForFunction(() => /Error/.test(document.querySelector("#zs-time").textContent), null, { timeout: 60_000 });
    assert.match(await page.textContent("#zs-time"), /template "no slot"/);
    assert.deepEqual(errors, [], `console errors:\n${errors.join("\n")}`);
  } finally {
    await page.close();
    await demo.close();
  }
});
