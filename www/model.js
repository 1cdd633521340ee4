// The model panel: a bundled model, a URL or repo id, or dropped files loaded as the page's model (in a Web Worker),
// its device and build on the badge, and the task panels its heads allow.
import { Bert } from "/pkg/worker.js";
import { folderEntries, relativePath, sourceFromFiles } from "./dropped.js";
import { $, fmtMs, on, setBusy, showError, state } from "./ui.js";

/** Called after each model loads (the training panel's offer to resume). */
let afterLoad = () => {};

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
  answer: "question answering", rerank: "reranking", zeroShot: "zero-shot classification",
};

/**
 * `Bert.load` in a worker. On the CPU, on a cross-origin isolated page (this server sends the headers) the package
 * runs its threaded build there: one copy of the model, one sentence on every core (the `threads` default).
 */
export function loadBert(source, options) {
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
    afterLoad().catch(() => {});
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
  const parts = [pooling ? `${pooling.mode} pooling` : st.modules.some((m) => m.type === "splade") ? "SPLADE sparse vectors"
    : "no pooling"];
  if (st.modules.some((m) => m.type === "dense")) parts.push("a Dense layer");
  if (st.modules.some((m) => m.type === "normalize")) parts.push("normalised");
  const prompts = Object.keys(st.prompts ?? {});
  return ` (${parts.join(", ")}${prompts.length ? `; prompts: ${prompts.join(", ")}` : ""})`;
}

/** Shows the panels of the tasks the loaded model has, and what it has in words. */
export function showTasks() {
  const tasks = state.bert?.tasks ?? [];
  const extra = tasks.map((t) => TASK_NAMES[t]);
  $("model-tasks").textContent = `${state.name}: embeddings${embeddingHow(state.bert?.sentenceTransformers)}`
    + `${extra.length ? `, ${extra.join(", ")}` : ""}.`;
  for (const [section, task] of [["classify", "classify"], ["ner", "tokenClassify"], ["qa", "answer"], ["rerank", "rerank"],
    ["zeroshot", "zeroShot"]]) {
    const has = tasks.includes(task);
    $(section).querySelector("[data-missing]").hidden = has;
    $(section).querySelector("form.task").hidden = !has;
  }
  $("fm-model").textContent = tasks.includes("fillMask") ? state.name : "splade-tiny";
  $("pt-model").textContent = $("fm-model").textContent;
}

export function loadFromForm() {
  const url = $("model-url").value.trim();
  if (!url) {
    showError($("model-error"), "Give a URL or a Hugging Face repo id (owner/name), or pick a bundled model.");
    return;
  }
  // A path like "models/x/" would read as a repo id: the page's own files are absolute paths.
  loadModel(url, url.replace(/\/$/, "").split("/").pop());
}

/** Dropped or chosen files (`entries`: [{ path, file }], or a promise of them) loaded as the page's model. */
async function loadFromFiles(entries) {
  try {
    const list = await entries;
    if (!list.length) return;
    const { source, name } = await sourceFromFiles(list);
    $("model-preset").value = "";
    $("model-url").value = "";
    await loadModel(source, name);
  } catch (e) {
    showError($("model-error"), e);
  }
}

/** A drop's files: a dragged folder read through the entries API (with its module folders), else the files. */
async function droppedEntries(dataTransfer) {
  const dirs = [...(dataTransfer.items ?? [])].map((i) => i.webkitGetAsEntry?.()).filter((e) => e?.isDirectory);
  if (dirs.length === 1) return folderEntries(dirs[0]);
  return [...dataTransfer.files].map((file) => ({ path: file.name, file }));
}

/** Wires the panel; `onLoad()` runs after each model loads. */
export function setupModel({ onLoad }) {
  afterLoad = onLoad;
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
    loadFromFiles(droppedEntries(e.dataTransfer));
  });
  for (const id of ["model-files", "model-folder"]) {
    on(id, "change", () => {
      loadFromFiles([...$(id).files].map((file) => ({ path: relativePath(file), file })));
      $(id).value = "";
    });
  }
  on("model-folder-pick", "click", () => $("model-folder").click());
}
