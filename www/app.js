// The demo page: UI only. The models run in Web Workers ("bertgpu/worker"), so the page stays responsive.
import { Bert } from "/pkg/worker.js";

const $ = (id) => document.getElementById(id);
const FILL_MASK_MODEL = "/models/splade-tiny/";

const state = { bert: null, vectors: null, sentences: [], mlm: null, mlmLoading: null };
// Tests read this to know when the page has finished something.
window.demo = { ready: false, error: null, lastSimilarity: null };

function fmtMs(ms) {
  return ms < 1000 ? `${ms.toFixed(0)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

async function timed(el, label, fn) {
  const t0 = performance.now();
  const out = await fn();
  el.textContent = `${label} in ${fmtMs(performance.now() - t0)}`;
  return out;
}

function setBusy(on) {
  for (const id of ["sim-run", "search-run", "model-load"]) $(id).disabled = on || (id !== "model-load" && !state.bert);
}

function showError(el, e) {
  el.textContent = String(e?.message ?? e);
  el.hidden = false;
}

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

async function loadModel() {
  const url = $("model-url").value.trim();
  const device = $("model-device").value;
  $("model-error").hidden = true;
  setBusy(true);
  $("badge").className = "badge badge-idle";
  $("badge").textContent = "loading…";
  $("status-text").textContent = `Loading ${url}…`;
  try {
    const t0 = performance.now();
    const bert = await Bert.load(url, { device, onProgress: progressHandler() });
    state.bert?.dispose();
    state.bert = bert;
    state.vectors = null;
    const dev = bert.device === "webgpu" ? "WebGPU" : "CPU";
    $("badge").textContent = dev;
    $("badge").className = `badge badge-${bert.device}`;
    $("status-text").textContent = `${url.replace(/\/$/, "").split("/").pop()} loaded in ${fmtMs(performance.now() - t0)}`;
    $("progress-wrap").hidden = true;
    window.demo.ready = true;
  } catch (e) {
    $("badge").textContent = "no model";
    $("status-text").textContent = "Could not load the model";
    showError($("model-error"), e);
    window.demo.error = String(e?.message ?? e);
  } finally {
    setBusy(false);
  }
}

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
  const table = document.createElement("table");
  table.className = "heat";
  const cap = document.createElement("caption");
  cap.className = "sr-only";
  cap.textContent = "Cosine similarity between every pair of sentences";
  table.append(cap);
  const head = table.createTHead().insertRow();
  head.append(document.createElement("th"));
  for (let j = 0; j < n; j++) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = `#${j + 1}`;
    th.title = sentences[j];
    head.append(th);
  }
  const body = table.createTBody();
  for (let i = 0; i < n; i++) {
    const row = body.insertRow();
    const th = document.createElement("th");
    th.scope = "row";
    th.innerHTML = `<span class="idx">#${i + 1}</span> `;
    th.append(document.createTextNode(sentences[i]));
    row.append(th);
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

async function runSimilarity() {
  const sentences = $("sim-input").value.split("\n").map((s) => s.trim()).filter(Boolean);
  if (!sentences.length || !state.bert) return;
  setBusy(true);
  try {
    const vectors = await timed($("sim-time"), `${sentences.length} sentences embedded`,
      () => state.bert.embed(sentences, { normalize: true }));
    state.vectors = vectors;
    state.sentences = sentences;
    const sim = vectors.map((a) => vectors.map((b) => cosine(a, b)));
    renderHeatmap(sentences, sim);
    window.demo.lastSimilarity = sim;
  } catch (e) {
    $("sim-time").textContent = `Error: ${e.message}`;
  } finally {
    setBusy(false);
  }
}

async function runSearch() {
  const q = $("search-query").value.trim();
  if (!q || !state.bert) return;
  setBusy(true);
  try {
    if (!state.vectors) await runSimilarity();
    setBusy(true);
    const qv = await timed($("search-time"), "query embedded", () => state.bert.embed(q, { normalize: true }));
    const ranked = state.sentences.map((s, i) => ({ s, score: cosine(qv, state.vectors[i]) }))
      .sort((a, b) => b.score - a.score);
    $("search-results").replaceChildren(...ranked.map(({ s, score }) => {
      const li = document.createElement("li");
      li.innerHTML = `<span class="score"></span><span class="text"></span>`;
      li.firstChild.textContent = score.toFixed(3);
      li.lastChild.textContent = s;
      li.style.setProperty("--w", `${Math.max(0, score) * 100}%`);
      return li;
    }));
  } catch (e) {
    $("search-time").textContent = `Error: ${e.message}`;
  } finally {
    setBusy(false);
  }
}

async function runFillMask() {
  const text = $("fm-input").value;
  if (!text.includes("[MASK]")) {
    $("fm-time").textContent = "Put [MASK] somewhere in the sentence.";
    return;
  }
  $("fm-run").disabled = true;
  try {
    if (!state.mlm) {
      $("fm-time").textContent = "Loading the fill-mask model…";
      state.mlmLoading ??= Bert.load(FILL_MASK_MODEL, { device: $("model-device").value });
      state.mlm = await state.mlmLoading;
    }
    const out = await timed($("fm-time"), "filled", () => state.mlm.fillMask(text, { topK: 5 }));
    const top = Array.isArray(out[0]) ? out[0] : out;
    const max = Math.max(...top.map((r) => r.score), 1e-9);
    $("fm-results").replaceChildren(...top.map((r) => {
      const li = document.createElement("li");
      li.innerHTML = `<span class="word"></span><span class="bar"><span></span></span><span class="score"></span>`;
      li.children[0].textContent = r.token_str;
      li.children[1].firstChild.style.width = `${(r.score / max) * 100}%`;
      li.children[2].textContent = `${(r.score * 100).toFixed(1)}%`;
      li.title = r.sequence;
      return li;
    }));
  } catch (e) {
    state.mlmLoading = null;
    $("fm-time").textContent = `Error: ${e.message}`;
  } finally {
    $("fm-run").disabled = false;
  }
}

$("model-form").addEventListener("submit", (e) => {
  e.preventDefault();
  loadModel();
});
$("sim-run").addEventListener("click", runSimilarity);
// Ctrl+Enter (or Cmd+Enter) in the sentence box runs the comparison without leaving the keyboard.
$("sim-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !$("sim-run").disabled) {
    e.preventDefault();
    runSimilarity();
  }
});
$("search-form").addEventListener("submit", (e) => {
  e.preventDefault();
  runSearch();
});

// Feature detection: sections whose method the package does not have yet say so instead of failing.
if (typeof Bert.prototype.fillMask === "function") {
  $("fm-form").addEventListener("submit", (e) => {
    e.preventDefault();
    runFillMask();
  });
  $("fm-run").disabled = false;
} else {
  $("fm-body").hidden = true;
  $("fm-missing").hidden = false;
}
if (typeof Bert.prototype.trainHead === "function") {
  $("tr-missing").textContent = "Head training is in the package; its panel is not on this page yet.";
}

loadModel();
