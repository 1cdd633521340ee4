// The zero-shot panel: a text scored against labels the user types, through an NLI checkpoint (a sequence classifier
// with an entailment label), as transformers' zero-shot-classification pipeline.
import { $, bars, state, submit, timed } from "./ui.js";

/** The labels typed, comma-separated; empty pieces dropped (none at all: the model's refusal says so). */
export function labelsOf(text) {
  return text.split(",").map((l) => l.trim()).filter((l) => l);
}

async function zeroShot() {
  const options = { template: $("zs-template").value, multiLabel: $("zs-multi").checked };
  const labels = labelsOf($("zs-labels").value);
  const out = await timed($("zs-time"), "classified", () => state.bert.zeroShot($("zs-input").value, labels, options));
  bars($("zs-results"), out);
}

export function setupZeroShot() {
  submit("zs-form", "zs-time", zeroShot);
}
