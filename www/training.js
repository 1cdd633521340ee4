// The training panel: a head on the frozen encoder (trainHead) or every layer (fineTune, checkpointed so that a
// closed tab can resume), the loss and accuracy drawn as they come; the trained model tried, exported, or a head
// loaded.
import { Bert } from "/pkg/worker.js";
import { drawChart as chart } from "./chart.js";
import { exampleData, examplesToText, parseExamples } from "./examples.js";
import { showTasks } from "./model.js";
import { $, bars, busy, el, fmtMs, on, showError, state, submit, timed } from "./ui.js";

export function countExamples() {
  try {
    const ex = parseExamples($("tr-input").value);
    const labels = new Set(ex.map((e) => e.label));
    $("tr-count").textContent = `${ex.length} examples, ${labels.size} labels`;
  } catch (e) {
    $("tr-count").textContent = e.message;
  }
}

/** The training panel's chart. */
export const drawChart = (history, epochs, fromZero = false) => chart($("tr-chart"), history, epochs, { fromZero });

/** Whole-model training's stop button (an AbortController), while it runs. */
let stopTraining = null;

/**
 * Whole-model training is checkpointed (OPFS, run "demo"): a tab closed part way offers to resume on the next visit.
 * What the run needs to be resumed (its examples, options and model) is kept in localStorage beside it.
 */
const RESUME_KEY = "bertgpu-demo-training";
const CHECKPOINT = { name: "demo", every: 20 };

async function forgetTraining() {
  localStorage.removeItem(RESUME_KEY);
  await Bert.deleteCheckpoint(CHECKPOINT.name).catch(() => {});
  $("tr-resume").hidden = true;
}

/** After a model loads: offers "Resume training (step k of n)" if a run on this model was cut short. */
export async function offerResume() {
  $("tr-resume").hidden = true;
  let saved;
  try {
    saved = JSON.parse(localStorage.getItem(RESUME_KEY) ?? "null");
  } catch {
    saved = null;
  }
  if (!saved || saved.model !== state.name) return;
  const ckpt = (await Bert.checkpoints().catch(() => [])).find((c) => c.name === CHECKPOINT.name);
  if (!ckpt) return;
  $("tr-resume").textContent = `Resume training (step ${ckpt.step} of ${ckpt.totalSteps ?? "?"})`;
  $("tr-resume").hidden = false;
}

/** Fine-tunes every layer (bert.fineTune): the loss of every step, validation after each epoch. */
async function fineTuneModel(examples, epochs, resume = false) {
  const history = [];
  drawChart(history, epochs, true);
  const controller = new AbortController();
  stopTraining = controller;
  $("tr-stop").hidden = false;
  $("tr-stop").disabled = false;
  $("tr-resume").hidden = true;
  const t0 = performance.now();
  const lr = Number($("tr-lr").value);
  // A model already fine-tuned in this page is lost with the tab, and a run from it could not be resumed: only a
  // run from the model as loaded is checkpointed.
  const resumable = resume || !state.trained;
  if (!resume) {
    await forgetTraining();
    if (resumable) {
      localStorage.setItem(RESUME_KEY, JSON.stringify({ model: state.name, input: $("tr-input").value, epochs, lr }));
    }
  }
  try {
    const report = await state.bert.fineTune(examples, {
      task: "classify", epochs, learningRate: lr, batchSize: 16, seed: 0,
      validationSplit: examples.length >= 10 ? 0.1 : 0, signal: controller.signal,
      ...(resumable ? { checkpoint: CHECKPOINT, resume } : {}),
      onProgress: (p) => {
        if (p.type === "checkpoint") {
          if (p.checkpoint === "resumed") $("tr-time").textContent = `resumed at step ${p.step}`;
          return;
        }
        if (p.type === "memory") {
          $("tr-time").textContent = `training holds ${(p.total / 2 ** 20).toFixed(0)} MiB besides the model`;
          return;
        }
        if (p.type === "step") {
          history.push({ epoch: (p.step / p.totalSteps) * epochs, loss: p.loss });
          $("tr-time").textContent = `step ${p.step}/${p.totalSteps} · loss ${p.loss.toFixed(3)}`;
        } else if (p.type === "epoch") {
          history.push({ epoch: p.epoch, valLoss: p.valLoss, valAccuracy: p.valAccuracy });
        }
        drawChart(history, epochs, true);
      },
    });
    await forgetTraining();
    const last = report.epochs.at(-1);
    $("tr-time").textContent = `fine-tuned in ${fmtMs(performance.now() - t0)} · ${report.steps.length} steps`
      + (last.valAccuracy != null ? ` · validation accuracy ${(last.valAccuracy * 100).toFixed(0)}%` : "")
      + ` · labels: ${report.labels.join(", ")}`;
    return report;
  } catch (e) {
    if (e?.name === "AbortError") {
      await forgetTraining();
      $("tr-time").textContent = "stopped: the model is as it was before training";
      return null;
    }
    throw e;
  } finally {
    stopTraining = null;
    $("tr-stop").hidden = true;
  }
}

/** Continues the whole-model run a closed tab cut short, with its examples and options. */
async function resumeTraining() {
  const saved = JSON.parse(localStorage.getItem(RESUME_KEY));
  $("tr-input").value = saved.input;
  countExamples();
  $("tr-mode").value = "model";
  trainMode();
  $("tr-epochs").value = saved.epochs;
  $("tr-lr").value = String(saved.lr);
  await train(true);
}

async function train(resume = false) {
  $("tr-error").hidden = true;
  const examples = parseExamples($("tr-input").value);
  if ($("tr-mode").value === "model") {
    const report = await fineTuneModel(examples, Number($("tr-epochs").value), resume);
    if (!report) return;
    state.trained = true;
    $("tr-after").hidden = false;
    $("tr-export").hidden = true;
    $("tr-export-model").hidden = false;
    showTasks();
    window.demo.lastFineTuning = report;
    return;
  }
  const epochs = Number($("tr-epochs").value);
  const hidden = $("tr-hidden").value ? Number($("tr-hidden").value) : undefined;
  const history = [];
  drawChart(history, epochs);
  const t0 = performance.now();
  const report = await state.bert.trainHead(examples, {
    epochs, learningRate: Number($("tr-lr").value), hidden, seed: 0,
    onProgress: (p) => {
      history.push(p);
      drawChart(history, epochs);
      const acc = p.valAccuracy ?? p.accuracy;
      $("tr-time").textContent = `epoch ${p.epoch}/${epochs} · loss ${p.loss.toFixed(3)} · `
        + `${p.valAccuracy != null ? "validation" : "training"} accuracy ${(acc * 100).toFixed(0)}%`;
    },
  });
  const best = report.history[report.bestEpoch - 1];
  $("tr-time").textContent = `trained in ${fmtMs(performance.now() - t0)} · kept epoch ${report.bestEpoch}`
    + (best.valAccuracy != null ? ` · validation accuracy ${(best.valAccuracy * 100).toFixed(0)}%` : "")
    + ` · labels: ${report.labels.join(", ")}`;
  state.trained = true;
  $("tr-after").hidden = false;
  $("tr-export").hidden = false;
  $("tr-export-model").hidden = true;
  showTasks();
  window.demo.lastTraining = report;
}

async function tryTrained() {
  const text = $("tr-try").value.trim();
  if (!text) return;
  const out = await timed($("tr-try-time"), "classified", () => state.bert.classify(text));
  bars($("tr-results"), out);
}

async function exportHead() {
  const bytes = await state.bert.exportHead();
  const a = el("a", { href: URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" })), download: "head.safetensors" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

/** The fine-tuned model's files, each downloaded (config.json, model.safetensors, the tokenizer's). */
async function exportModel() {
  const files = await state.bert.exportModel();
  for (const [name, bytes] of Object.entries(files)) {
    const a = el("a", { href: URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" })), download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  }
}

/** Head-only and whole-model training want different learning rates and epochs (BERT's paper: 2e-5 to 5e-5, 2–4). */
function trainMode() {
  const model = $("tr-mode").value === "model";
  const rates = model ? ["0.00002", "0.00005", "0.0001"] : ["0.001", "0.003", "0.01", "0.03"];
  const pick = model ? "0.00005" : "0.01";
  $("tr-lr").replaceChildren(...rates.map((r) => el("option", { textContent: r, value: r, selected: r === pick })));
  $("tr-epochs").value = model ? 3 : 30;
  $("tr-hidden-label").style.display = model ? "none" : "";
}

async function loadHeadFile(file) {
  const labels = await state.bert.loadHead(new Uint8Array(await file.arrayBuffer()));
  $("tr-head-status").textContent = `${file.name}: a head for ${labels.join(", ")}`;
  $("tr-after").hidden = false;
  showTasks();
}

export function setupTraining() {
  on("tr-input", "input", countExamples);
  on("tr-example", "click", async () => {
    try {
      $("tr-input").value = examplesToText(parseExamples(await exampleData()));
      $("tr-try").value = "The waiter brought us the wrong dessert.";
      countExamples();
    } catch (e) {
      showError($("tr-error"), e);
    }
  });
  on("tr-file", "change", async () => {
    const f = $("tr-file").files[0];
    if (!f) return;
    try {
      $("tr-input").value = examplesToText(parseExamples(await f.text(), f.name.toLowerCase()));
      countExamples();
    } catch (e) {
      showError($("tr-error"), new Error(`${f.name}: ${e.message}`));
    }
    $("tr-file").value = "";
  });
  on("tr-run", "click", () => busy($("tr-error"), () => train()));
  on("tr-resume", "click", () => busy($("tr-error"), resumeTraining));
  on("tr-stop", "click", () => {
    stopTraining?.abort();
    $("tr-stop").disabled = true;
  });
  on("tr-mode", "change", trainMode);
  on("tr-export-model", "click", () => busy($("tr-error"), exportModel));
  submit("tr-try-form", "tr-try-time", tryTrained);
  on("tr-export", "click", () => busy($("tr-error"), exportHead));
  on("tr-head-file", "change", async () => {
    const f = $("tr-head-file").files[0];
    if (f) await busy($("tr-head-status"), () => loadHeadFile(f));
    $("tr-head-file").value = "";
  });
}
