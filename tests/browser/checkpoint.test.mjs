// fineTune's checkpoints in the browser (the Origin Private File System): a page fine-tunes with `checkpoint`, the
// page is closed mid-run, a new page resumes from OPFS (`resume: true`) and ends with the model an uninterrupted page
// run makes, bit for bit, on the wasm CPU backend and on WebGPU (its kernels sum in a fixed order: the same adapter
// gives the same numbers). Bert.checkpoints() lists the runs and Bert.deleteCheckpoint removes one.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { ROOT, openPage, withPage } from "./harness.mjs";

const TINY = "tests/models/tiny-classifier/";
// Real text (Debian's fortunes, tests/data/fortunes/): 24 short quotations, 4 topics; a new head from the seed.
const EXAMPLES = fs.readFileSync(path.join(ROOT, "tests/data/fortunes/train.jsonl"), "utf8").trim().split("\n")
  .map((l) => JSON.parse(l)).sort((a, b) => a.text.length - b.text.length || (a.text < b.text ? -1 : 1)).slice(0, 24);
// 18 training rows in batches of 8: 3 steps an epoch; a checkpoint after every step (and each epoch's end).
const OPTIONS = { task: "classify", batchSize: 8, learningRate: 1e-3, seed: 3, validationSplit: 0.25 };

const ctx = withPage();

/**
 * Starts fine-tuning in `page` without waiting for it; its progress events go to `window.events`. With `holdAfter`
 * (a predicate over the events so far, as source text), the run is held once they satisfy it: `onProgress` then holds
 * the page's timers on a promise the test controls (`window.release()`), and the run stops at its next wait between
 * two steps (fineTune yields there on a timer, js/index.js `hooks.pause`), before anything of that step is done.
 */
async function start(page, url, device, options, holdAfter = null) {
  await page.evaluate(async ({ url, device, examples, options, holdAfter }) => {
    window.events = [];
    window.bert = await bertgpu.Bert.load(url, { device });
    const hold = holdAfter && new Function("events", `return (${holdAfter})(events);`);
    let armed = false;
    let held;
    window.held = new Promise((r) => { held = r; });
    window.run = window.bert.fineTune(examples, { ...options, onProgress: (p) => {
      window.events.push(p);
      if (!hold || armed || !hold(window.events)) return;
      armed = true;
      const timer = window.setTimeout;
      const gate = new Promise((r) => { window.release = () => { window.setTimeout = timer; r(); }; });
      window.setTimeout = (fn, ms, ...args) => {
        held(window.events.length); // the run waits here from now on, until the test releases it
        gate.then(() => timer(fn, ms, ...args));
        return 0;
      };
    } });
    window.run.catch(() => {});
  }, { url, device, examples: EXAMPLES, options, holdAfter: holdAfter?.toString() });
}

/**
 * Waits until the run started with `holdAfter` is held; the number of events then. It fails if the run ended first
 * (a hold that no longer holds anything).
 */
async function held(page) {
  const n = await page.evaluate(() => Promise.race([window.held, window.run.then(() => "finished", (e) => `failed: ${e}`)]));
  assert.equal(typeof n, "number", `the run was not held: it ${n}`);
  return n;
}

/** The step events in `events`, and the step of the newest checkpoint saved among them. */
function progress(events) {
  const steps = events.filter((e) => e.type === "step");
  const saved = events.filter((e) => e.type === "checkpoint" && e.checkpoint === "saved");
  return { steps: steps.length, saved: saved.length ? saved[saved.length - 1].step : 0 };
}

/** Waits for the run in `page` to end; its report, events and the model's weights' SHA-256. */
function finish(page) {
  return page.evaluate(async () => {
    const report = await window.run;
    const weights = (await window.bert.exportModel())["model.safetensors"];
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", weights));
    window.bert.dispose();
    return { report, events: window.events, sha256: Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("") };
  });
}

async function closedMidRunThenResumed(device, epochs, stopAfter) {
  const url = ctx.env.models.url + TINY;
  const name = `run-${device}`;
  const options = { ...OPTIONS, epochs };
  // The run never interrupted (its own checkpoints, so that it takes the same path).
  await start(ctx.page, url, device, { ...options, checkpoint: { name: `${name}-whole`, every: 1 } });
  const whole = await finish(ctx.page);
  assert.equal(whole.report.steps.length, 3 * epochs);

  // A page closed while its run is held after step `stopAfter` (and the checkpoint that step saves).
  const first = await openPage(ctx.env);
  await start(first, url, device, { ...options, checkpoint: { name, every: 1 } },
    `(events) => events.filter((e) => e.type === "checkpoint").length >= ${stopAfter}`);
  const n = await held(first);
  const events = await first.evaluate(() => window.events);
  await first.close();
  assert.equal(events.length, n, "no progress while held");
  assert.deepEqual(progress(events), { steps: stopAfter, saved: stopAfter }, JSON.stringify(events));

  const listed = await ctx.page.evaluate(() => bertgpu.Bert.checkpoints());
  const mine = listed.find((c) => c.name === name);
  assert.ok(mine && mine.step === stopAfter && mine.size > 0, JSON.stringify(listed));

  // A new page resumes and ends where the uninterrupted run did.
  await start(ctx.page, url, device, { ...options, checkpoint: { name, every: 1 }, resume: true });
  const resumed = await finish(ctx.page);
  const from = resumed.events.find((e) => e.type === "checkpoint" && e.checkpoint === "resumed");
  assert.equal(from?.step, stopAfter, JSON.stringify(resumed.events.slice(0, 3)));
  const stepLines = resumed.events.filter((e) => e.type === "step");
  assert.equal(stepLines.length, 3 * epochs - stopAfter, "the resumed run does only the steps left");
  assert.equal(stepLines[0].step, stopAfter + 1);
  assert.deepEqual(resumed.report, whole.report, "the report, every step's loss and every epoch's metrics");
  assert.equal(resumed.sha256, whole.sha256, "the resumed model is the uninterrupted run's, bit for bit");
  console.log(`${device}: closed after step ${stopAfter}, resumed at step ${from.step} of ${3 * epochs}; same model`);

  assert.equal(await ctx.page.evaluate((n) => bertgpu.Bert.deleteCheckpoint(n), name), true);
  assert.equal(await ctx.page.evaluate((n) => bertgpu.Bert.deleteCheckpoint(n), name), false);
  const after = await ctx.page.evaluate(() => bertgpu.Bert.checkpoints());
  assert.ok(!after.some((c) => c.name === name), JSON.stringify(after));
  ctx.page.checkErrors();
}

test("a page closed mid-run resumes from OPFS to the uninterrupted model (wasm CPU)", async () => {
  await closedMidRunThenResumed("cpu", 4, 5);
});

test("a page closed mid-run resumes from OPFS to the uninterrupted model (WebGPU)", async () => {
  await closedMidRunThenResumed("webgpu", 2, 2);
});

test("a GPU device lost mid-run: the run goes on from its last checkpoint on a new device, to the same model", async () => {
  const url = ctx.env.models.url + TINY;
  const options = { ...OPTIONS, epochs: 2 };
  await start(ctx.page, url, "webgpu", { ...options, checkpoint: { name: "lost-whole", every: 1 } });
  const whole = await finish(ctx.page);
  // Held after step 2's checkpoint; the device destroyed there; then let go.
  await start(ctx.page, url, "webgpu", { ...options, checkpoint: { name: "lost", every: 1 } },
    (events) => events.filter((e) => e.type === "checkpoint").length >= 2);
  await held(ctx.page);
  assert.ok(await ctx.page.evaluate(() => window.bert._model.__debugLoseDevice()), "the device was destroyed");
  await ctx.page.evaluate(() => window.release());
  const got = await finish(ctx.page);
  const lost = got.events.filter((e) => e.type === "deviceLost");
  assert.equal(lost.length, 1, JSON.stringify(got.events));
  assert.equal(lost[0].device, "webgpu", "a new device of the same adapter");
  const resumed = got.events.find((e) => e.type === "checkpoint" && e.checkpoint === "resumed");
  assert.equal(resumed?.step, 2, "went on from the checkpoint of step 2");
  assert.deepEqual(got.report, whole.report);
  assert.equal(got.sha256, whole.sha256, "the same model as the run whose device was never lost");
  console.log(`device lost after ${resumed.step} steps: went on from checkpoint ${resumed.name} on a new device`);
  for (const n of ["lost", "lost-whole", "run-cpu-whole", "run-webgpu-whole"]) {
    await ctx.page.evaluate((name) => bertgpu.Bert.deleteCheckpoint(name), n);
  }
  ctx.page.checkErrors();
});

test("where OPFS cannot write files, IndexedDB keeps the checkpoints: closed mid-run, resumed, the same model", async () => {
  const url = ctx.env.models.url + TINY;
  const options = { ...OPTIONS, epochs: 2 };
  // The pages below lose OPFS's writable files (as Safari's main thread before 18 lacks createWritable).
  const withoutOpfs = async (page) => {
    await page.evaluate(() => { delete FileSystemFileHandle.prototype.createWritable; });
    assert.equal(await page.evaluate(() => typeof FileSystemFileHandle.prototype.createWritable), "undefined");
  };
  const page = await openPage(ctx.env);
  await withoutOpfs(page);
  await start(page, url, "cpu", { ...options, checkpoint: { name: "idb-whole", every: 1 } });
  const whole = await finish(page);
  await start(page, url, "cpu", { ...options, checkpoint: { name: "idb", every: 1 } },
    (events) => events.filter((e) => e.type === "checkpoint").length >= 2);
  await held(page);
  assert.deepEqual(progress(await page.evaluate(() => window.events)), { steps: 2, saved: 2 });
  await page.close();
  const again = await openPage(ctx.env);
  await withoutOpfs(again);
  const listed = await again.evaluate(() => bertgpu.Bert.checkpoints());
  assert.ok(listed.some((c) => c.name === "idb" && c.step === 2 && c.totalSteps === 6 && c.size > 0), JSON.stringify(listed));
  // Nothing of these runs went to OPFS.
  const inOpfs = await ctx.page.evaluate(() => bertgpu.Bert.checkpoints());
  assert.ok(!inOpfs.some((c) => c.name.startsWith("idb")), JSON.stringify(inOpfs));
  await start(again, url, "cpu", { ...options, checkpoint: { name: "idb", every: 1 }, resume: true });
  const resumed = await finish(again);
  assert.ok(resumed.events.some((e) => e.type === "checkpoint" && e.checkpoint === "resumed"));
  assert.deepEqual(resumed.report, whole.report);
  assert.equal(resumed.sha256, whole.sha256, "the same model bit for bit");
  assert.equal(await again.evaluate(() => bertgpu.Bert.deleteCheckpoint("idb")), true);
  assert.equal(await again.evaluate(() => bertgpu.Bert.deleteCheckpoint("idb")), false);
  await again.evaluate(() => bertgpu.Bert.deleteCheckpoint("idb-whole"));
  assert.deepEqual((await again.evaluate(() => bertgpu.Bert.checkpoints())).map((c) => c.name), []);
  again.checkErrors();
  await again.close();
});

test("a stop asked with the signal saves a checkpoint where it stops; resume goes on from it to the same model", async () => {
  const url = ctx.env.models.url + TINY;
  // An interval longer than the run: the checkpoints are the epochs' ends and the one the stop asks for.
  const options = { ...OPTIONS, epochs: 2, checkpoint: { name: "asked", every: 1000 } };
  await start(ctx.page, url, "cpu", { ...options, checkpoint: { name: "asked-whole", every: 1000 } });
  const whole = await finish(ctx.page);
  const stopped = await ctx.page.evaluate(async ({ url, examples, options }) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const controller = new AbortController();
    let steps = 0;
    const error = await bert.fineTune(examples, { ...options, signal: controller.signal, onProgress: (p) => {
      if (p.type === "step" && ++steps === 2) controller.abort();
    } }).then(() => null, (e) => e.name);
    bert.dispose();
    return { error, listed: await bertgpu.Bert.checkpoints() };
  }, { url, examples: EXAMPLES, options });
  assert.equal(stopped.error, "AbortError");
  const mine = stopped.listed.find((c) => c.name === "asked");
  assert.equal(mine?.step, 2, JSON.stringify(stopped.listed));
  await start(ctx.page, url, "cpu", { ...options, resume: true });
  const resumed = await finish(ctx.page);
  assert.deepEqual(resumed.report, whole.report);
  assert.equal(resumed.sha256, whole.sha256);
  for (const n of ["asked", "asked-whole"]) await ctx.page.evaluate((name) => bertgpu.Bert.deleteCheckpoint(name), n);
  ctx.page.checkErrors();
});

test("checkpoint options are checked", async () => {
  const errors = await ctx.page.evaluate(async ({ url, examples }) => {
    const bert = await bertgpu.Bert.load(url, { device: "cpu" });
    const out = [];
    for (const o of [{ resume: true }, { checkpoint: { name: "../up" } }, { checkpoint: { name: "x", every: 0 } },
      { checkpoint: "x" }, { checkpoint: { name: "x", other: 1 } }]) {
      try {
        await bert.fineTune(examples, o);
        out.push("no error");
      } catch (e) {
        out.push(`${e.name}: ${e.message}`);
      }
    }
    bert.dispose();
    return out;
  }, { url: ctx.env.models.url + TINY, examples: EXAMPLES });
  assert.match(errors[0], /TypeError: fineTune: resume continues from a checkpoint/);
  assert.match(errors[1], /TypeError: checkpoint name must be/);
  for (const e of errors.slice(2)) assert.match(e, /TypeError: fineTune: checkpoint must be/);
  ctx.page.checkErrors();
});
