// The panels of a checkpoint's heads: classify (a text or a pair), named entities, question answering, reranking.
import { $, bars, el, state, submit, timed } from "./ui.js";

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

export function setupHeads() {
  submit("cl-form", "cl-time", classify);
  submit("ner-form", "ner-time", ner);
  submit("qa-form", "qa-time", answer);
  submit("rr-form", "rr-time", rerank);
}
