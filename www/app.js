// The demo page: UI only. The models run in Web Workers ("bertgpu/worker"), so the page stays responsive.
import { Bert } from "/pkg/worker.js";
import { drawChart as chart } from "./chart.js";
import { setupPretraining } from "./pretrain.js";

const $ = (id) => document.getElementById(id);
const FILL_MASK_MODEL = "/models/splade-tiny/";
const EXAMPLE_DATA = "/tests/data/fortunes/train.jsonl";

const state = {
  bert: null, name: "", vectors: null, sentences: [], mlm: null, mlmLoading: null, busy: false, trained: false,
};
// Tests read this to know when the page has finished something.
window.demo = { ready: false, error: null, lastSimilarity: null, lastTraining: null, loads: 0 };

// ---- small helpers ------------------------------------------------------------------------------------------------

function fmtMs(ms) {
  return ms < 1000 ? `${ms.toFixed(0)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

async function timed(el, label, fn) {
  const t0 = performance.now();
  const out = await fn();
  el.textContent = `${label} in ${fmtMs(performance.now() - t0)}`;
  return out;
}

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  Object.assign(e, props);
  e.append(...children);
  return e;
}

function showError(target, e) {
  target.textContent = String(e?.message ?? e);
  target.hidden = false;
}

/** Buttons that need a model are disabled while none is loaded or a call runs. */
function setBusy(on) {
  state.busy = on;
  const needModel = ["sim-run", "search-run", "tr-run", "tr-resume", "tr-try-run", "tr-export", "tr-export-model", "cl-run", "ner-run", "qa-run", "rr-run"];
  for (const id of needModel) $(id).disabled = on || !state.bert;
  $("model-load").disabled = on;
  $("pt-run").disabled = on; // trains the fill-mask model when the page's has no masked-LM head
  $("model-files").disabled = on;
}

/** Runs `fn` with the page busy; errors go to `errorEl` (text) instead of escaping. */
async function busy(errorEl, fn) {
  if (state.busy) return undefined;
  setBusy(true);
  try {
    return await fn();
  } catch (e) {
    errorEl.textContent = `Error: ${e?.message ?? e}`;
    errorEl.hidden = false;
    return undefined;
  } finally {
    setBusy(false);
  }
}

function bars(list, items) {
  const max = Math.max(...items.map((r) => r.score), 1e-9);
  list.replaceChildren(...items.map((r) => {
    const li = el("li", {}, el("span", { className: "word", textContent: r.label }),
      el("span", { className: "bar" }, el("span")), el("span", { className: "score", textContent: `${(r.score * 100).toFixed(1)}%` }));
    li.children[1].firstChild.style.width = `${(r.score / max) * 100}%`;
    if (r.title) li.title = r.title;
    return li;
  }));
}

// ---- loading a model ----------------------------------------------------------------------------------------------

function progressHandler() {
  const wrap = $("progress-wrap"), bar = $("progress"), text = $("progress-text");
  wrap.hidden = false;
  return (p) => {
    if (p.total) {
      bar.max = p.total;
      bar.value = p.loaded;
    } else {
      bar.removeAttribute("value"); // indeterminate
    }
    const mb = (n) => (n / 1e6).toFixed(1);
    text.textContent = `${p.file}: ${mb(p.loaded)}${p.total ? ` / ${mb(p.total)}` : ""} MB${p.cached ? " (cached)" : ""}`;
  };
}

const TASK_NAMES = {
  fillMask: "fill-mask", nextSentence: "next sentence", classify: "classify", tokenClassify: "named entities",
  answer: "question answering", rerank: "reranking",
};

/**
 * `Bert.load` in a worker. On the CPU, on a cross-origin isolated page (this server sends the headers) the package
 * runs its threaded build there: one copy of the model, one sentence on every core (the `threads` default).
 */
function loadBert(source, options) {
  return Bert.load(source, options);
}

/** Loads `source` (a URL, a repo id, or { config, tokenizer, weights } / { gguf } bytes) as the page's model. */
async function loadModel(source, name) {
  const device = $("model-device").value;
  $("model-error").hidden = true;
  setBusy(true);
  $("badge").className = "badge badge-idle";
  $("badge").textContent = "loading…";
  $("status-text").textContent = `Loading ${name}…`;
  try {
    const t0 = performance.now();
    const bert = await loadBert(source, { device, onProgress: progressHandler() });
    state.bert?.dispose();
    state.bert = bert;
    state.name = name;
    state.vectors = null;
    state.trained = false;
    const dev = bert.device === "webgpu" ? "WebGPU" : "CPU";
    $("badge").textContent = dev;
    // Which wasm build runs the CPU path (relaxed SIMD: the faster 8-bit kernel).
    $("badge").title = `wasm build: ${bert.simd === "relaxed" ? "SIMD128 + relaxed SIMD" : "SIMD128"}`
      + (bert.device === "cpu" ? `; ${bert.threads} thread${bert.threads === 1 ? "" : "s"}` : "");
    $("badge").className = `badge badge-${bert.device}`;
    $("status-text").textContent = `${name} loaded in ${fmtMs(performance.now() - t0)}`;
    offerResume().catch(() => {});
    $("progress-wrap").hidden = true;
    showTasks();
    window.demo.ready = true;
    window.demo.loads += 1;
  } catch (e) {
    $("badge").textContent = state.bert ? $("badge").textContent : "no model";
    $("status-text").textContent = `Could not load ${name}`;
    $("progress-wrap").hidden = true;
    showError($("model-error"), e);
    window.demo.error = String(e?.message ?? e);
  } finally {
    setBusy(false);
  }
}

/**
 * How the model embeds, as its sentence-transformers files say (its pooling, a Dense layer, Normalize, its
 * prompts), in words: "" where it has no such files (mean pooling, normalised).
 */
function embeddingHow(st) {
  if (!st) return "";
  const pooling = st.modules.find((m) => m.type === "pooling");
  const parts = [pooling ? `${pooling.mode} pooling` : "no pooling"];
  if (st.modules.some((m) => m.type === "dense")) parts.push("a Dense layer");
  if (st.modules.some((m) => m.type === "normalize")) parts.push("normalised");
  const prompts = Object.keys(st.prompts ?? {});
  return ` (${parts.join(", ")}${prompts.length ? `; prompts: ${prompts.join(", ")}` : ""})`;
}

/** Shows the panels of the tasks the loaded model has, and what it has in words. */
function showTasks() {
  const tasks = state.bert?.tasks ?? [];
  const extra = tasks.map((t) => TASK_NAMES[t]);
  $("model-tasks").textContent = `${state.name}: embeddings${embeddingHow(state.bert?.sentenceTransformers)}`
    + `${extra.length ? `, ${extra.join(", ")}` : ""}.`;
  for (const [section, task] of [["classify", "classify"], ["ner", "tokenClassify"], ["qa", "answer"], ["rerank", "rerank"]]) {
    const has = tasks.includes(task);
    $(section).querySelector("[data-missing]").hidden = has;
    $(section).querySelector("form.task").hidden = !has;
  }
  $("fm-model").textContent = tasks.includes("fillMask") ? state.name : "splade-tiny";
  $("pt-model").textContent = $("fm-model").textContent;
}

function loadFromForm() {
  const url = $("model-url").value.trim();
  if (!url) {
    showError($("model-error"), "Give a URL or a Hugging Face repo id (owner/name), or pick a bundled model.");
    return;
  }
  // A path like "models/x/" would read as a repo id: the page's own files are absolute paths.
  loadModel(url, url.replace(/\/$/, "").split("/").pop());
}

/** Dropped or chosen files → the bytes Bert.load takes. */
async function loadFromFiles(fileList) {
  const files = [...fileList];
  if (!files.length) return;
  const byName = new Map(files.map((f) => [f.name, f]));
  const gguf = files.find((f) => f.name.endsWith(".gguf"));
  try {
    let source;
    if (gguf) {
      source = { gguf: new Uint8Array(await gguf.arrayBuffer()) };
    } else {
      const need = (n) => {
        const f = byName.get(n);
        if (!f) throw new Error(`the dropped files have no ${n}: drop config.json, tokenizer.json (or vocab.txt) and model.safetensors together, or one .gguf`);
        return f;
      };
      const bytes = async (f) => new Uint8Array(await f.arrayBuffer());
      const tok = byName.get("tokenizer.json");
      source = {
        config: await bytes(need("config.json")),
        weights: await bytes(need("model.safetensors")),
        ...(tok ? { tokenizer: await bytes(tok) } : { vocab: await bytes(need("vocab.txt")) }),
        ...(byName.get("tokenizer_config.json") ? { tokenizerConfig: await bytes(byName.get("tokenizer_config.json")) } : {}),
      };
    }
    $("model-preset").value = "";
    $("model-url").value = "";
    await loadModel(source, gguf ? gguf.name : "dropped model");
  } catch (e) {
    showError($("model-error"), e);
  }
}

// ---- similarity and search ----------------------------------------------------------------------------------------

function cosine(a, b) {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s; // the vectors are unit length
}

function heatColor(v) {
  // 0 → pale, 1 → deep blue; negative similarities clamp to pale.
  const t = Math.max(0, Math.min(1, v));
  const light = 96 - t * 58;
  return `hsl(221 70% ${light}%)`;
}

function renderHeatmap(sentences, sim) {
  const n = sentences.length;
  const table = el("table", { className: "heat" });
  table.append(el("caption", { className: "sr-only", textContent: "Cosine similarity between every pair of sentences" }));
  const head = table.createTHead().insertRow();
  head.append(el("th"));
  for (let j = 0; j < n; j++) head.append(el("th", { scope: "col", textContent: `#${j + 1}`, title: sentences[j] }));
  const body = table.createTBody();
  for (let i = 0; i < n; i++) {
    const row = body.insertRow();
    row.append(el("th", { scope: "row" }, el("span", { className: "idx", textContent: `#${i + 1}` }), ` ${sentences[i]}`));
    for (let j = 0; j < n; j++) {
      const td = row.insertCell();
      const v = sim[i][j];
      td.textContent = v.toFixed(2);
      td.dataset.i = i;
      td.dataset.j = j;
      td.dataset.sim = v;
      td.style.background = heatColor(v);
      if (v > 0.6) td.classList.add("dark");
      td.title = `#${i + 1} vs #${j + 1}: ${v.toFixed(3)}`;
    }
  }
  $("heatmap").replaceChildren(table);
}

async function similarity() {
  const sentences = $("sim-input").value.split("\n").map((s) => s.trim()).filter(Boolean);
  if (!sentences.length) return;
  const vectors = await timed($("sim-time"), `${sentences.length} sentences embedded`,
    () => state.bert.embed(sentences, { normalize: true }));
  state.vectors = vectors;
  state.sentences = sentences;
  const sim = vectors.map((a) => vectors.map((b) => cosine(a, b)));
  renderHeatmap(sentences, sim);
  window.demo.lastSimilarity = sim;
}

async function search() {
  const q = $("search-query").value.trim();
  if (!q) return;
  if (!state.vectors) await similarity();
  // A model with a query prompt (bge's, e5's) embeds the query behind it, as its authors meant.
  const prompt = state.bert.prompts?.query != null ? { prompt: "query" } : {};
  const qv = await timed($("search-time"), "query embedded", () => state.bert.embed(q, { normalize: true, ...prompt }));
  const ranked = state.sentences.map((s, i) => ({ s, score: cosine(qv, state.vectors[i]) }))
    .sort((a, b) => b.score - a.score);
  $("search-results").replaceChildren(...ranked.map(({ s, score }) => {
    const li = el("li", {}, el("span", { className: "score", textContent: score.toFixed(3) }), el("span", { className: "text", textContent: s }));
    li.style.setProperty("--w", `${Math.max(0, score) * 100}%`);
    return li;
  }));
}

// ---- fill-mask ------------------------------------------------------------------------------------------------------

/** The masked-language model: the page's model when it has the head, else splade-tiny, loaded once. */
async function mlmModel() {
  if (state.bert?.tasks.includes("fillMask")) return state.bert;
  if (!state.mlm) {
    state.mlmLoading ??= loadBert(FILL_MASK_MODEL, { device: $("model-device").value });
    try {
      state.mlm = await state.mlmLoading;
    } finally {
      state.mlmLoading = null;
    }
  }
  return state.mlm;
}

async function fillMask() {
  const text = $("fm-input").value;
  if (!text.includes("[MASK]")) {
    $("fm-time").textContent = "Put [MASK] somewhere in the sentence.";
    return;
  }
  if (!state.bert?.tasks.includes("fillMask") && !state.mlm) $("fm-time").textContent = "Loading the fill-mask model…";
  const model = await mlmModel();
  const out = await timed($("fm-time"), "filled", () => model.fillMask(text, { topK: 5 }));
  const top = Array.isArray(out[0]) ? out[0] : out; // several masks: the first one's candidates
  bars($("fm-results"), top.map((r) => ({ label: r.token_str, score: r.score, title: r.sequence })));
}

/** The pre-training panel's example: the quotations, each a document of its sentences (one a line). */
async function exampleCorpus() {
  const res = await fetch(EXAMPLE_DATA);
  if (!res.ok) throw new Error(`${EXAMPLE_DATA}: HTTP ${res.status}`);
  return (await res.text()).split("\n").filter((l) => l.trim())
    .map((l) => JSON.parse(l).text.split(/(?<=[.!?])\s+/).join("\n")).join("\n\n");
}

// ---- training -------------------------------------------------------------------------------------------------------

/** One CSV record per line, RFC 4180 quoting ("" inside quotes). */
function csvRows(text, sep) {
  const rows = [];
  let row = [], field = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === "\"" && text[i + 1] === "\"") { field += "\""; i++; }
      else if (c === "\"") quoted = false;
      else field += c;
    } else if (c === "\"" && field === "") quoted = true;
    else if (c === sep) { row.push(field); field = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(field); rows.push(row); row = []; field = "";
    } else field += c;
  }
  if (field !== "" || row.length) { row.push(field); rows.push(row); }
  return rows.filter((r) => r.some((f) => f.trim() !== ""));
}

/**
 * The examples in `text`: JSON lines ({"text", "label"}), CSV/TSV with a header naming `text` and `label`, or
 * `label: text` lines. Throws with the line number of the first line it cannot read.
 */
function parseExamples(text, fileName = "") {
  const trimmed = text.trim();
  if (!trimmed) return [];
  if (trimmed.startsWith("{")) {
    return trimmed.split("\n").filter((l) => l.trim()).map((line, i) => {
      let o;
      try { o = JSON.parse(line); } catch { throw new Error(`line ${i + 1} is not JSON`); }
      if (typeof o.text !== "string" || (typeof o.label !== "string" && typeof o.label !== "number")) {
        throw new Error(`line ${i + 1} needs "text" and "label"`);
      }
      return { text: o.text, label: String(o.label) };
    });
  }
  const sep = fileName.endsWith(".tsv") ? "\t" : fileName.endsWith(".csv") ? "," : null;
  if (sep) {
    const rows = csvRows(trimmed, sep);
    const header = rows[0].map((h) => h.trim().toLowerCase());
    const ti = header.indexOf("text"), li = header.indexOf("label");
    if (ti < 0 || li < 0) throw new Error(`the first row must name the columns "text" and "label" (got ${rows[0].join(", ")})`);
    return rows.slice(1).map((r, i) => {
      if (r[ti] == null || r[li] == null) throw new Error(`row ${i + 2} has fewer columns than the header`);
      return { text: r[ti], label: r[li].trim() };
    });
  }
  return trimmed.split("\n").map((l) => l.trim()).filter(Boolean).map((line, i) => {
    const k = line.indexOf(":");
    if (k <= 0) throw new Error(`line ${i + 1} should read "label: text"`);
    return { label: line.slice(0, k).trim(), text: line.slice(k + 1).trim() };
  });
}

function examplesToText(examples) {
  return examples.map((e) => `${e.label}: ${e.text.replace(/\s+/g, " ")}`).join("\n");
}

function countExamples() {
  try {
    const ex = parseExamples($("tr-input").value);
    const labels = new Set(ex.map((e) => e.label));
    $("tr-count").textContent = `${ex.length} examples, ${labels.size} labels`;
  } catch (e) {
    $("tr-count").textContent = e.message;
  }
}

/** The training panel's chart. */
const drawChart = (history, epochs, fromZero = false) => chart($("tr-chart"), history, epochs, { fromZero });

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
async function offerResume() {
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

// ---- classify, NER, QA ------------------------------------------------------------------------------------------

async function classify() {
  const text = $("cl-input").value;
  const pair = $("cl-pair").value.trim();
  const out = await timed($("cl-time"), "classified", () => state.bert.classify(pair ? [text, pair] : text));
  bars($("cl-results"), out);
}

/** `text` with `spans` ({ start, end, label, score }) wrapped in <mark>. */
function marked(target, text, spans) {
  const parts = [];
  let at = 0;
  for (const s of [...spans].sort((a, b) => a.start - b.start)) {
    if (s.start < at) continue;
    parts.push(text.slice(at, s.start));
    const m = el("mark", { title: `${s.label} · ${(s.score * 100).toFixed(1)}%` }, text.slice(s.start, s.end),
      el("span", { className: "tag", textContent: s.label }));
    parts.push(m);
    at = s.end;
  }
  parts.push(text.slice(at));
  target.replaceChildren(...parts);
}

async function ner() {
  const text = $("ner-input").value;
  const ents = await timed($("ner-time"), "tagged", () => state.bert.tokenClassify(text, { aggregation: "simple" }));
  marked($("ner-text"), text, ents.map((e) => ({ ...e, label: e.entity_group })));
  $("ner-results").replaceChildren(...ents.map((e) => el("li", {},
    el("span", { className: "ent", textContent: e.entity_group }), el("span", { className: "text", textContent: e.word }),
    el("span", { className: "score", textContent: `${(e.score * 100).toFixed(1)}%` }))));
}

async function answer() {
  const context = $("qa-context").value;
  const a = await timed($("qa-time"), "answered", () => state.bert.answer($("qa-question").value, context));
  marked($("qa-answer"), context, [{ start: a.start, end: a.end, label: "answer", score: a.score }]);
}

/** The documents (one per line, blank lines skipped) ranked for the query by the cross-encoder, best first. */
async function rerank() {
  const docs = $("rr-docs").value.split("\n").map((d) => d.trim()).filter((d) => d);
  const ranked = await timed($("rr-time"), "ranked", () => state.bert.rerank($("rr-query").value, docs));
  $("rr-results").replaceChildren(...ranked.map((r) => el("li", {},
    el("span", { className: "score", textContent: r.score.toFixed(2) }),
    el("span", { className: "text", textContent: r.document }))));
}

// ---- wiring ---------------------------------------------------------------------------------------------------------

function on(id, event, fn) {
  $(id).addEventListener(event, fn);
}
const submit = (id, errEl, fn) => on(id, "submit", (e) => {
  e.preventDefault();
  busy($(errEl), fn);
});

on("model-form", "submit", (e) => {
  e.preventDefault();
  loadFromForm();
});
on("model-preset", "change", () => {
  const v = $("model-preset").value;
  if (v) {
    $("model-url").value = v;
    loadFromForm();
  } else {
    $("model-url").value = "";
    $("model-url").focus();
  }
});
on("model-url", "input", () => { $("model-preset").value = ""; });
on("dropzone", "click", () => $("model-files").click());
on("dropzone", "keydown", (e) => {
  if (e.key === "Enter" || e.key === " ") {
    e.preventDefault();
    $("model-files").click();
  }
});
on("dropzone", "dragover", (e) => {
  e.preventDefault();
  $("dropzone").classList.add("over");
});
on("dropzone", "dragleave", () => $("dropzone").classList.remove("over"));
on("dropzone", "drop", (e) => {
  e.preventDefault();
  $("dropzone").classList.remove("over");
  loadFromFiles(e.dataTransfer.files);
});
on("model-files", "change", () => {
  loadFromFiles($("model-files").files);
  $("model-files").value = "";
});

on("sim-run", "click", () => busy($("sim-time"), similarity));
// Ctrl+Enter (or Cmd+Enter) in the sentence box runs the comparison without leaving the keyboard.
on("sim-input", "keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !$("sim-run").disabled) {
    e.preventDefault();
    busy($("sim-time"), similarity);
  }
});
submit("search-form", "search-time", search);
on("fm-form", "submit", (e) => {
  e.preventDefault();
  $("fm-run").disabled = true;
  fillMask().catch((err) => { $("fm-time").textContent = `Error: ${err.message}`; })
    .finally(() => { $("fm-run").disabled = false; });
});

on("tr-input", "input", countExamples);
on("tr-example", "click", async () => {
  try {
    const res = await fetch(EXAMPLE_DATA);
    if (!res.ok) throw new Error(`${EXAMPLE_DATA}: HTTP ${res.status}`);
    $("tr-input").value = examplesToText(parseExamples(await res.text()));
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
submit("cl-form", "cl-time", classify);
submit("ner-form", "ner-time", ner);
submit("qa-form", "qa-time", answer);
submit("rr-form", "rr-time", rerank);

// The page and the package are cached by a service worker so a second visit works offline (the model files are
// cached by the package itself). Served from /www/ with scope "/" (the server allows it), so the worker scripts
// under /pkg/ are covered too.
if ("serviceWorker" in navigator) {
  navigator.serviceWorker.register("/www/sw.js", { scope: "/" }).catch((e) => {
    console.warn(`offline cache unavailable: ${e.message}`);
  });
}

setupPretraining({ $, mlm: mlmModel, busy, bars, fmtMs, example: exampleCorpus });
countExamples();
drawChart([], Number($("tr-epochs").value));
loadFromForm();
