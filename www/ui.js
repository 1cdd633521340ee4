// What the demo's panels share: the page's state, the busy flag every button follows, and small DOM helpers.

export const $ = (id) => document.getElementById(id);

export const state = {
  bert: null, name: "", vectors: null, sentences: [], mlm: null, mlmLoading: null, busy: false, trained: false,
};

export function fmtMs(ms) {
  return ms < 1000 ? `${ms.toFixed(0)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

export async function timed(el, label, fn) {
  const t0 = performance.now();
  const out = await fn();
  el.textContent = `${label} in ${fmtMs(performance.now() - t0)}`;
  return out;
}

export function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  Object.assign(e, props);
  e.append(...children);
  return e;
}

export function showError(target, e) {
  target.textContent = String(e?.message ?? e);
  target.hidden = false;
}

/** Buttons that need a model are disabled while none is loaded or a call runs. */
export function setBusy(on) {
  state.busy = on;
  const needModel = ["sim-run", "search-run", "tr-run", "tr-resume", "tr-try-run", "tr-export", "tr-export-model", "cl-run", "ner-run", "qa-run", "rr-run",
    "zs-run", "ad-run", "ad-search-run"];
  for (const id of needModel) $(id).disabled = on || !state.bert;
  $("model-load").disabled = on;
  $("pt-run").disabled = on; // trains the fill-mask model when the page's has no masked-LM head
  $("model-files").disabled = on;
}

/** Runs `fn` with the page busy; errors go to `errorEl` (text) instead of escaping. */
export async function busy(errorEl, fn) {
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

export function bars(list, items) {
  const max = Math.max(...items.map((r) => r.score), 1e-9);
  list.replaceChildren(...items.map((r) => {
    const li = el("li", {}, el("span", { className: "word", textContent: r.label }),
      el("span", { className: "bar" }, el("span")), el("span", { className: "score", textContent: `${(r.score * 100).toFixed(1)}%` }));
    li.children[1].firstChild.style.width = `${(r.score / max) * 100}%`;
    if (r.title) li.title = r.title;
    return li;
  }));
}

export function on(id, event, fn) {
  $(id).addEventListener(event, fn);
}
export const submit = (id, errEl, fn) => on(id, "submit", (e) => {
  e.preventDefault();
  busy($(errEl), fn);
});
