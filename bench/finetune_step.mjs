// One fine-tuning step of all-MiniLM-L6-v2 (every parameter, AdamW, dropout on as the checkpoint sets it), batch 16
// of real quotations (Debian's fortunes, tests/data/fortunes/train.jsonl, cut to 200 characters: 20–60 tokens), in
// one run: `bert.fineTune` in headless Chromium on the wasm CPU backend (one thread) and on WebGPU (here
// SwiftShader, a software adapter: what `auto` would not pick), and the native CLI's `fine-tune` on the CPU (all
// cores). Each side runs `--steps` steps of one epoch; the time of a step is the median gap between its progress
// events after the first (which includes the start: pipelines, the first forward). Needs pkg/ (scripts/build-wasm.sh)
// and target/release/bertgpu (cargo build --release). From the root:
//
//   node bench/finetune_step.mjs [--steps 4] [--devices cpu,webgpu,native]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ROOT } from "../tests/browser/harness.mjs";
import { browserSteps, nativeSteps, perStep } from "./harness.mjs";

const argv = process.argv.slice(2);
const arg = (name, dflt) => (argv.includes(`--${name}`) ? argv[argv.indexOf(`--${name}`) + 1] : dflt);
const STEPS = Number(arg("steps", 4));
const DEVICES = arg("devices", "cpu,webgpu,native").split(",");
const BATCH = 16;
const MINILM = "models/all-MiniLM-L6-v2/";

const examples = fs.readFileSync(path.join(ROOT, "tests/data/fortunes/train.jsonl"), "utf8").trim().split("\n")
  .map((l) => JSON.parse(l)).slice(0, STEPS * BATCH).map((e) => ({ text: e.text.slice(0, 200), label: e.label }));
const options = { task: "classify", epochs: 1, batchSize: BATCH, validationSplit: 0, learningRate: 5e-5, seed: 0 };

async function native() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-step-"));
  const data = path.join(dir, "data.jsonl");
  fs.writeFileSync(data, examples.map((e) => JSON.stringify(e)).join("\n") + "\n");
  const args = ["fine-tune", "--task", "classify", "--model", path.join(ROOT, MINILM), "--data", data,
    "--out", path.join(dir, "out"), "--device", "cpu", "--epochs", "1", "--batch-size", String(BATCH),
    "--validation-split", "0", "--lr", "5e-5"];
  const r = await nativeSteps(path.join(ROOT, "target/release/bertgpu"), args);
  fs.rmSync(dir, { recursive: true, force: true });
  return r;
}

const rows = [];
for (const d of DEVICES) {
  const r = d === "native" ? await native() : await browserSteps(MINILM, d, "fineTune", examples, options);
  const side = d === "native" ? `native CLI, CPU (${os.cpus().length} cores)`
    : r.device === "webgpu" ? "Chromium, WebGPU (this machine: SwiftShader)" : "Chromium, wasm CPU (1 thread)";
  rows.push({ side,
    step: perStep(r.times), first: r.first, steps: r.times.length });
}
const base = rows.find((r) => r.side.startsWith("native"));
console.log(`all-MiniLM-L6-v2, one fine-tuning step of ${BATCH} quotations (≤ 200 characters), ${STEPS} steps each`);
console.log("| where | ms per step (median after the first) | first step incl. start | × native |");
console.log("|---|---|---|---|");
for (const r of rows) {
  console.log(`| ${r.side} | ${r.step.toFixed(0)} | ${r.first.toFixed(0)} | ${base ? (r.step / base.step).toFixed(2) : "-"} |`);
}
