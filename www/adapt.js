// The search-adaptation panel: the page's model (any family that trains embeddings) fine-tuned on the user's own
// (query, passage) pairs with in-batch negatives (bert.fineTune, task "embed"), its loss drawn step by step, and a
// search over the pairs' passages ranked by the model before and after, side by side.
import { drawChart } from "./chart.js";
import { $, busy, el, fmtMs, on, state } from "./ui.js";

/**
 * The pairs in `text`: one a line, the query, a Tab or " | ", then the passage it should find (the first separator
 * splits; a Tab wins over " | "); or JSON lines of {"anchor", "positive"} (the CLI's data). Blank lines are skipped.
 * Throws naming the first line it cannot read.
 */
export function parsePairs(text) {
  const lines = text.split("\n").map((l, i) => [l.trim(), i + 1]).filter(([l]) => l !== "");
  return lines.map(([line, n]) => {
    let anchor, positive;
    if (line.startsWith("{")) {
      let o;
      try { o = JSON.parse(line); } catch { throw new Error(`line ${n} is not JSON`); }
      ({ anchor, positive } = o);
      if (typeof anchor !== "string" || typeof positive !== "string") {
        throw new Error(`line ${n} needs "anchor" and "positive" strings`);
      }
    } else {
      const tab = line.indexOf("\t");
      const [k, w] = tab >= 0 ? [tab, 1] : [line.indexOf(" | "), 3];
      if (k < 0) throw new Error(`line ${n} should read "query<Tab>passage" or "query | passage": "${line.slice(0, 60)}"`);
      [anchor, positive] = [line.slice(0, k), line.slice(k + w)];
    }
    anchor = anchor.trim();
    positive = positive.trim();
    if (!anchor || !positive) throw new Error(`line ${n} has an empty ${anchor ? "passage" : "query"}`);
    return { anchor, positive };
  });
}

/** The checks before any work: at least two pairs (the other pairs' passages are each pair's negatives). */
export function checkPairs(pairs) {
  if (pairs.length < 2) {
    throw new Error(`paste at least 2 pairs (${pairs.length} now): each query learns against the other pairs' passages`);
  }
  const passages = new Set(pairs.map((p) => p.positive));
  if (passages.size < 2) throw new Error("the pairs need at least 2 different passages to rank");
}

const dot = (a, b) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
};

/** `corpus`'s passages ranked for the query vector `q`: [{ i, score }], best first. */
function rank(q, vectors) {
  return vectors.map((v, i) => ({ i, score: dot(q, v) })).sort((a, b) => b.score - a.score);
}

/**
 * Wires the panel. Vectors are made as training shapes them (mean pooling, unit length, no prompt), so the two
 * rankings compare the models as trained.
 */
export function setupAdapt() {
  const EMBED = { pooling: "mean", normalize: true };
  const history = [];
  let epochs = 1;
  const draw = () => drawChart($("ad-chart"), history, epochs, { fromZero: true });
  let stop = null;
  /**
   * The last run: its passages, the pairs' queries, and from the model before it the vectors of both (and of the
   * query box's text then); `after` holds the passages' vectors from the adapted model.
   */
  let run = null;

  const count = () => {
    try {
      const pairs = parsePairs($("ad-input").value);
      const passages = new Set(pairs.map((p) => p.positive)).size;
      const n = (k, what) => `${k} ${what}${k === 1 ? "" : "s"}`;
      $("ad-count").textContent = `${n(pairs.length, "pair")}, ${n(passages, "passage")}`;
    } catch (e) {
      $("ad-count").textContent = e.message;
    }
  };

  const queries = (pairs) => [...new Set(pairs.map((p) => p.anchor))];

  /** For each query of the pairs, the rank of its passage (1 = first) among all passages. */
  function pairRanks(pairs, passages, queryVecs, passageVecs) {
    return pairs.map((p) => {
      const order = rank(queryVecs.get(p.anchor), passageVecs);
      return order.findIndex((r) => passages[r.i] === p.positive) + 1;
    });
  }

  function summary(before, after) {
    const n = before.length;
    const top = (r) => r.filter((k) => k === 1).length;
    const mean = (r) => r.reduce((a, b) => a + b, 0) / n;
    $("ad-summary").textContent = `On the ${n} pairs: the paired passage ranks first for ${top(before)} of ${n} queries `
      + `before and ${top(after)} after; its mean rank ${mean(before).toFixed(2)} → ${mean(after).toFixed(2)}.`;
    window.demo.lastAdapt.ranks = { before, after };
  }

  /** One side's ranking into `list`: every passage with its score, the paired ones marked with their rank. */
  function showRanking(list, order, paired) {
    list.replaceChildren(...order.map(({ i, score }, k) => {
      const text = run.passages[i];
      const li = el("li", {}, el("span", { className: "score", textContent: score.toFixed(3) }),
        el("span", { className: "text", textContent: text }));
      if (paired.has(text)) {
        li.classList.add("paired");
        li.append(el("span", { className: "tag", textContent: `paired · rank ${k + 1}` }));
      }
      li.style.setProperty("--w", `${Math.max(0, score) * 100}%`);
      return li;
    }));
  }

  /** The query box's search, before and after. */
  async function search() {
    $("ad-search-note").textContent = "";
    if (!run?.after) throw new Error("adapt the model first: the search compares it before and after");
    const q = $("ad-query").value.trim();
    if (!q) return;
    const paired = new Set(run.pairs.filter((p) => p.anchor === q).map((p) => p.positive));
    const t0 = performance.now();
    const qAfter = await state.bert.embed(q, EMBED);
    const after = rank(qAfter, run.after);
    showRanking($("ad-after"), after, paired);
    const qBefore = run.queryVecs.get(q);
    const before = qBefore ? rank(qBefore, run.before) : null;
    if (before) {
      showRanking($("ad-before"), before, paired);
    } else {
      $("ad-before").replaceChildren();
      $("ad-search-note").textContent = "The model before adapting embedded only the pairs' queries and the query "
        + "given when it started: pick one of those to see both rankings.";
    }
    const rankOf = (order) => {
      const k = order.findIndex((r) => paired.has(run.passages[r.i]));
      return k < 0 ? null : k + 1;
    };
    $("ad-search-time").textContent = `searched in ${fmtMs(performance.now() - t0)}`
      + (paired.size ? ` · paired passage: rank ${before ? rankOf(before) : "?"} before, ${rankOf(after)} after` : "");
  }

  async function adapt() {
    $("ad-error").hidden = true;
    const pairs = parsePairs($("ad-input").value);
    checkPairs(pairs);
    epochs = Number($("ad-epochs").value);
    if (!(epochs >= 1)) throw new Error("epochs must be at least 1");
    const bert = state.bert;
    const passages = [...new Set(pairs.map((p) => p.positive))];
    const asked = queries(pairs);
    const typed = $("ad-query").value.trim();
    if (typed && !asked.includes(typed)) asked.push(typed);
    // The model before: its vectors are kept, since training changes the model in place.
    $("ad-time").textContent = "embedding the pairs with the model as it is…";
    const before = await bert.embed(passages, EMBED);
    const qBefore = await bert.embed(asked, EMBED);
    run = { pairs, passages, before, queryVecs: new Map(asked.map((q, i) => [q, qBefore[i]])), after: null };
    for (const id of ["ad-before", "ad-after"]) $(id).replaceChildren();
    $("ad-summary").textContent = "";
    $("ad-results").hidden = true;
    window.demo.lastAdapt = null;
    history.length = 0;
    draw();
    const controller = new AbortController();
    stop = controller;
    $("ad-stop").hidden = false;
    $("ad-stop").disabled = false;
    const t0 = performance.now();
    try {
      const report = await bert.fineTune(pairs, {
        task: "embed", epochs, learningRate: Number($("ad-lr").value), batchSize: Number($("ad-batch").value),
        validationSplit: 0, seed: 0, signal: controller.signal,
        onProgress: (p) => {
          if (p.type === "memory") {
            $("ad-time").textContent = `training holds ${(p.total / 2 ** 20).toFixed(0)} MiB besides the model`;
            return;
          }
          if (p.type !== "step") return;
          history.push({ epoch: (p.step / p.totalSteps) * epochs, loss: p.loss });
          $("ad-time").textContent = `step ${p.step}/${p.totalSteps} · loss ${p.loss.toFixed(3)}`;
          draw();
        },
      });
      // The model is now the adapted one: the similarity panel's vectors are the old model's.
      state.trained = true;
      state.vectors = null;
      run.after = await bert.embed(passages, EMBED);
      const qAfter = await bert.embed(queries(pairs), EMBED);
      const afterVecs = new Map(queries(pairs).map((q, i) => [q, qAfter[i]]));
      const loss = report.steps.map((s) => s.loss);
      $("ad-time").textContent = `adapted in ${fmtMs(performance.now() - t0)} · ${report.steps.length} steps · loss `
        + `${loss[0].toFixed(3)} → ${loss.at(-1).toFixed(3)}`;
      window.demo.lastAdapt = { steps: report.steps.length, loss };
      summary(pairRanks(pairs, passages, run.queryVecs, before), pairRanks(pairs, passages, afterVecs, run.after));
      $("ad-results").hidden = false;
      $("ad-queries").replaceChildren(...queries(pairs).map((q) => el("option", { value: q })));
      if (!$("ad-query").value.trim()) $("ad-query").value = pairs[0].anchor;
      await search();
    } catch (e) {
      if (e?.name !== "AbortError") throw e;
      run = null;
      $("ad-time").textContent = "stopped: the model is as it was before adapting";
    } finally {
      stop = null;
      $("ad-stop").hidden = true;
    }
  }

  /** A new model: the last run's vectors belong to another. */
  function reset() {
    run = null;
    $("ad-results").hidden = true;
    $("ad-time").textContent = "";
  }

  on("ad-input", "input", count);
  on("ad-run", "click", () => busy($("ad-error"), adapt));
  on("ad-stop", "click", () => {
    stop?.abort();
    $("ad-stop").disabled = true;
  });
  on("ad-search", "submit", (e) => {
    e.preventDefault();
    $("ad-error").hidden = true;
    busy($("ad-error"), search);
  });
  count();
  draw();
  return { reset };
}
