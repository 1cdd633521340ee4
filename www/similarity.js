// The similarity panel: sentences embedded, their cosine similarities as a heat map; search ranks them for a query.
import { $, busy, el, on, state, submit, timed } from "./ui.js";

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

export function setupSimilarity() {
  on("sim-run", "click", () => busy($("sim-time"), similarity));
  // Ctrl+Enter (or Cmd+Enter) in the sentence box runs the comparison without leaving the keyboard.
  on("sim-input", "keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !$("sim-run").disabled) {
      e.preventDefault();
      busy($("sim-time"), similarity);
    }
  });
  submit("search-form", "search-time", search);
}
