// zeroShot in Node.js through the packed package (as tests/node/node.test.mjs installs it), on the CPU backend:
// the tiny NLI checkpoints against transformers' zero-shot-classification pipeline (tests/golden/zero_shot.json),
// single- and multi-label, the default and a custom template, the long text that truncates. (bertgpu/worker is the browser's: tests/browser/zero-shot.test.mjs runs it through
// the demo page.)
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { ROOT, consumerProject } from "./package.mjs";

/** tests/zero_shot.rs measures ≤ 1.0e-6 on the CPU backend for the same calls; 1e-5 as the browser tests. */
const SCORE_ATOL = 1e-5;

const golden = JSON.parse(fs.readFileSync(path.join(ROOT, "tests/golden/zero_shot.json"), "utf8"));
const run = promisify(execFile);

let consumer;
before(() => {
  consumer = consumerProject();
});

test("zeroShot in Node.js equals the pipeline on the tiny NLI checkpoints ", async () => {
  const calls = Object.fromEntries(["bert", "roberta"].map((f) => [f, golden.families[f].cases.map((c) => ({
    labels: c.candidate_labels, options: { template: c.template ?? undefined, multiLabel: c.multi_label },
    texts: c.results.map((r) => r.text) }))]));
  const code = `
    import { Bert } from "bertgpu";
    const [base, calls] = [process.argv[1], JSON.parse(process.argv[2])];
    const out = {};
    for (const [fam, cases] of Object.entries(calls)) {
      const bert = await Bert.load(base + "tiny-nli-" + fam, { device: "cpu" });
      out[fam] = [];
      for (const c of cases) out[fam].push(await bert.zeroShot(c.texts, c.labels, c.options));
      bert.dispose();
    }
    console.log(JSON.stringify(out));
  `;
  let stdout;
  try {
    ({ stdout } = await run(process.execPath, ["--input-type=module", "-e", code,
      path.join(ROOT, "tests/models") + path.sep, JSON.stringify(calls)], { cwd: consumer, timeout: 300_000 }));
  } catch (e) {
    throw new Error(`the consumer script failed:\n${e.stdout}\n${e.stderr}`);
  }
  const got = JSON.parse(stdout.trim().split("\n").pop());
  const check = (res, want, what) => {
    assert.equal(res.length, want.results.length, `${what}: one result per text`);
    want.results.forEach((r, i) => {
      assert.deepEqual(res[i].map((l) => l.label), r.labels, `${what}: ${r.text}`);
      res[i].forEach((l, j) => assert.ok(Math.abs(l.score - r.scores[j]) <= SCORE_ATOL,
        `${what}: ${r.text}: ${l.label} ${l.score} vs ${r.scores[j]}`));
    });
  };
  for (const fam of ["bert", "roberta"]) {
    const cases = golden.families[fam].cases;
    assert.equal(got[fam].length, cases.length);
    cases.forEach((c, n) => check(got[fam][n], c, `${fam} case ${n}`));
  }
});
