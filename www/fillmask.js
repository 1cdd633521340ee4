// The fill-mask panel: the page's model when it has a masked-LM head, else splade-tiny, loaded once.
import { loadBert } from "./model.js";
import { $, bars, on, state, timed } from "./ui.js";

const FILL_MASK_MODEL = "/models/splade-tiny/";

/** The masked-language model: the page's model when it has the head, else splade-tiny, loaded once. */
export async function mlmModel() {
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

export function setupFillMask() {
  on("fm-form", "submit", (e) => {
    e.preventDefault();
    $("fm-run").disabled = true;
    fillMask().catch((err) => { $("fm-time").textContent = `Error: ${err.message}`; })
      .finally(() => { $("fm-run").disabled = false; });
  });
}
