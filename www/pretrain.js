// The pre-training panel: a masked-language model continues its pre-training on the user's own text, in the tab
// (nothing leaves it), with the loss and accuracy of every step drawn as they come, and fill-mask on a sentence of
// that text before and after.
import { drawChart } from "./chart.js";

/** The documents of a corpus as `bert.pretrain` reads plain text: a blank line between documents. */
function documents(text) {
  return text.split(/\n\s*\n/).map((d) => d.trim()).filter((d) => d !== "");
}

/** A sentence of the text with one word masked: the first line of 5 words or more, its longest word masked. */
export function maskedSentence(text) {
  const line = text.split("\n").map((l) => l.trim()).find((l) => l.split(/\s+/).length >= 5);
  if (!line) return "";
  const words = line.match(/\p{L}{4,}/gu) ?? [];
  const longest = words.reduce((a, w) => (w.length > a.length ? w : a), "");
  return longest ? line.replace(longest, "[MASK]") : "";
}

/**
 * Wires the panel. `mlm()` resolves to the model it trains (the page's model when it has a masked-LM head, else the
 * fill-mask panel's); `busy(errorEl, fn)` runs `fn` with the page busy; `bars(list, items)` draws scores; `fmtMs`
 * formats a duration.
 */
export function setupPretraining({ $, mlm, busy, bars, fmtMs, example }) {
  const history = [];
  const draw = () => drawChart($("pt-chart"), history, Number($("pt-steps").value) || 1, { unit: "step", fromZero: true });
  let stop = null;

  const count = () => {
    const docs = documents($("pt-input").value);
    const lines = docs.reduce((n, d) => n + d.split("\n").length, 0);
    $("pt-count").textContent = docs.length ? `${docs.length} documents, ${lines} lines` : "";
  };
  const setText = (text) => {
    $("pt-input").value = text;
    $("pt-try").value = maskedSentence(text) || $("pt-try").value;
    count();
  };

  /** fill-mask on the panel's sentence, drawn into `list`; its top candidates. */
  async function fill(model, list) {
    const out = await model.fillMask($("pt-try").value, { topK: 5 });
    const top = Array.isArray(out[0]) ? out[0] : out; // several masks: the first one's candidates
    bars(list, top.map((r) => ({ label: r.token_str, score: r.score, title: r.sequence })));
    return top.map((r) => r.token_str);
  }

  async function run() {
    $("pt-error").hidden = true;
    if (!$("pt-try").value.includes("[MASK]")) throw new Error("put [MASK] somewhere in the sentence to compare");
    if (documents($("pt-input").value).length < 2) {
      throw new Error("paste at least two documents (a blank line between them): pre-training pairs sentences of "
        + "one document with sentences of others");
    }
    $("pt-time").textContent = "Loading the masked-language model…";
    const model = await mlm();
    $("pt-after").replaceChildren();
    const before = await fill(model, $("pt-before"));
    const steps = Number($("pt-steps").value);
    history.length = 0;
    draw();
    const controller = new AbortController();
    stop = controller;
    $("pt-stop").hidden = false;
    $("pt-stop").disabled = false;
    const t0 = performance.now();
    try {
      const report = await model.pretrain($("pt-input").value, {
        steps, batchSize: 16, maxLength: 64, learningRate: Number($("pt-lr").value), warmup: 0.1,
        nsp: model.tasks.includes("nextSentence"), validationSplit: 0, seed: 0, signal: controller.signal,
        onProgress: (p) => {
          if (p.type !== "step") return;
          history.push({ epoch: p.step, loss: p.mlmLoss ?? p.loss, accuracy: p.mlmAccuracy });
          $("pt-time").textContent = `step ${p.step}/${p.totalSteps} · masked-LM loss ${(p.mlmLoss ?? p.loss).toFixed(3)}`
            + (p.mlmAccuracy != null ? ` · accuracy ${(p.mlmAccuracy * 100).toFixed(0)}%` : "");
          draw();
        },
      });
      const after = await fill(model, $("pt-after"));
      $("pt-time").textContent = `pre-trained in ${fmtMs(performance.now() - t0)} · ${report.steps.length} steps`;
      window.demo.lastPretraining = { steps: report.steps.length, before, after };
    } catch (e) {
      if (e?.name !== "AbortError") throw e;
      $("pt-time").textContent = "stopped: the model is as it was before";
    } finally {
      stop = null;
      $("pt-stop").hidden = true;
    }
  }

  $("pt-input").addEventListener("input", count);
  // A text file dropped on the box replaces its text.
  $("pt-input").addEventListener("dragover", (e) => e.preventDefault());
  $("pt-input").addEventListener("drop", async (e) => {
    const f = e.dataTransfer.files[0];
    if (!f) return;
    e.preventDefault();
    setText(await f.text());
  });
  $("pt-example").addEventListener("click", () => busy($("pt-error"), async () => setText(await example())));
  $("pt-file").addEventListener("change", async () => {
    const f = $("pt-file").files[0];
    if (f) setText(await f.text());
    $("pt-file").value = "";
  });
  $("pt-run").addEventListener("click", () => busy($("pt-error"), run));
  $("pt-stop").addEventListener("click", () => {
    stop?.abort();
    $("pt-stop").disabled = true;
  });
  draw();
}
