// The demo page: UI only, one file per panel. The models run in Web Workers ("bertgpu/worker"), so the page stays
// responsive.
import { setupAdapt } from "./adapt.js";
import { corpusOf, exampleData } from "./examples.js";
import { setupFillMask, mlmModel } from "./fillmask.js";
import { setupHeads } from "./heads.js";
import { loadFromForm, setupModel } from "./model.js";
import { setupPretraining } from "./pretrain.js";
import { setupSimilarity } from "./similarity.js";
import { countExamples, drawChart, offerResume, setupTraining } from "./training.js";
import { $, bars, busy, fmtMs } from "./ui.js";
import { setupZeroShot } from "./zeroshot.js";

// Tests read this to know when the page has finished something.
window.demo = { ready: false, error: null, lastSimilarity: null, lastTraining: null, loads: 0 };

const adapt = setupAdapt();
setupModel({ onLoad: () => { adapt.reset(); return offerResume(); } });
setupSimilarity();
setupFillMask();
setupTraining();
setupHeads();
setupZeroShot();

// The page and the package are cached by a service worker so a second visit works offline (the model files are
// cached by the package itself). Served from /www/ with scope "/" (the server allows it), so the worker scripts
// under /pkg/ are covered too.
if ("serviceWorker" in navigator) {
  navigator.serviceWorker.register("/www/sw.js", { scope: "/" }).catch((e) => {
    console.warn(`offline cache unavailable: ${e.message}`);
  });
}

setupPretraining({ $, mlm: mlmModel, busy, bars, fmtMs, example: async () => corpusOf(await exampleData()) });
countExamples();
drawChart([], Number($("tr-epochs").value));
loadFromForm();
