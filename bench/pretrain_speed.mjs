// Pre-training speed in the browser against the native CLI, in one run: continued pre-training (masked LM alone,
// `nsp: false`) of splade-tiny (BertForMaskedLM: 2 layers, hidden 128, 30522-token vocabulary, tied decoder) on real
// text (Debian's quotations, tests/data/fortunes-large/train.jsonl, each quotation of two or more sentences a
// document, one sentence a line), `bert.pretrain` in headless Chromium on the wasm CPU backend (one thread) and on
// WebGPU (here SwiftShader, a software adapter), and `bertgpu pretrain --device cpu` natively (all cores). Every side
// draws the same rows and batches (one seeded SplitMix64, the same Rust code): the native run writes them
// (`--save-batches`), which gives each step's real token count (padding excluded). A step's time is the median gap
// between progress events after the first (which includes the start). Needs pkg/ (scripts/build-wasm.sh) and
// target/release/bertgpu (cargo build --release). From the root:
//
//   node bench/pretrain_speed.mjs [--steps 6] [--batch-size 16] [--max-length 64] [--devices cpu,webgpu,native]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ROOT } from "../tests/browser/harness.mjs";
import { browserSteps, median, nativeSteps, perStep } from "./harness.mjs";

const argv = process.argv.slice(2);
const arg = (name, dflt) => (argv.includes(`--${name}`) ? argv[argv.indexOf(`--${name}`) + 1] : dflt);
const STEPS = Number(arg("steps", 6));
const BATCH = Number(arg("batch-size", 16));
const MAX_LENGTH = Number(arg("max-length", 64));
const DEVICES = arg("devices", "cpu,webgpu,native").split(",");
const MODEL = "models/splade-tiny/";
const BIN = process.env.BERTGPU_BIN ?? path.join(ROOT, "target/release/bertgpu");

const DOCUMENTS = fs.readFileSync(path.join(ROOT, "tests/data/fortunes-large/train.jsonl"), "utf8").trim().split("\n")
  .map((l) => JSON.parse(l).text.split(". ").map((s) => s.trim()).filter((s) => s !== ""))
  .filter((sentences) => sentences.length >= 2).map((sentences) => sentences.join("\n"));
const CORPUS = DOCUMENTS.join("\n\n") + "\n";
const options = { steps: STEPS, batchSize: BATCH, maxLength: MAX_LENGTH, nsp: false, learningRate: 1e-4,
  validationSplit: 0, seed: 0 };

async function native() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-pretrain-speed-"));
  const data = path.join(dir, "corpus.txt");
  const batches = path.join(dir, "batches.jsonl");
  fs.writeFileSync(data, CORPUS);
  const args = ["pretrain", "--model", path.join(ROOT, MODEL), "--data", data, "--out", path.join(dir, "out"),
    "--device", "cpu", "--no-nsp", "--steps", String(STEPS), "--batch-size", String(BATCH), "--max-length",
    String(MAX_LENGTH), "--lr", "1e-4", "--validation-split", "0", "--seed", "0", "--save-batches", batches];
  const r = await nativeSteps(BIN, args);
  const tokens = fs.readFileSync(batches, "utf8").trim().split("\n")
    .map((l) => JSON.parse(l).input_ids.reduce((n, row) => n + row.length, 0));
  fs.rmSync(dir, { recursive: true, force: true });
  return { ...r, tokens };
}

// Native first: its batches say how many tokens each step has, the same on every side.
const order = [...DEVICES].sort((a, b) => (a === "native" ? -1 : b === "native" ? 1 : 0));
const rows = [];
let tokensPerStep = null;
for (const d of order) {
  const r = d === "native" ? await native() : await browserSteps(MODEL, d, "pretrain", CORPUS, options);
  if (r.tokens) tokensPerStep = median(r.tokens.slice(1));
  const side = d === "native" ? `native CLI, CPU (${os.cpus().length} cores)`
    : r.device === "webgpu" ? "Chromium, WebGPU (this machine: SwiftShader)" : "Chromium, wasm CPU (1 thread)";
  rows.push({ side, step: perStep(r.times), first: r.first, steps: r.times.length });
}
const base = rows.find((r) => r.side.startsWith("native"));
console.log(`splade-tiny, masked-LM pre-training, ${STEPS} steps of ${BATCH} rows ≤ ${MAX_LENGTH} tokens` +
  (tokensPerStep ? ` (median ${tokensPerStep} tokens a step, padding excluded)` : ""));
console.log("| where | ms per step (median after the first) | tokens/s | first step incl. start | × native time |");
console.log("|---|---|---|---|---|");
for (const r of rows) {
  const tps = tokensPerStep ? (tokensPerStep / (r.step / 1000)).toFixed(0) : "-";
  console.log(`| ${r.side} | ${r.step.toFixed(0)} | ${tps} | ${r.first.toFixed(0)} | ` +
    `${base ? (r.step / base.step).toFixed(2) : "-"} |`);
}
