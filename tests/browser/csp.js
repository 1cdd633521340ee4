// The page of the CSP test: loads the package (main-thread and worker entries) and embeds one text with each, with
// no inline script and no eval allowed. Reports through window.result; CSP violations land in window.violations.
window.violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.violations.push(`${e.violatedDirective}: ${e.blockedURI}`);
});

async function run() {
  const model = new URLSearchParams(location.search).get("model");
  const out = {};
  try {
    const { Bert } = await import("/pkg/index.js");
    const bert = await Bert.load(model, { device: "cpu", cache: false });
    out.main = Array.from(await bert.embed("a strict policy"));
    bert.dispose();
    const worker = await import("/pkg/worker.js");
    const inWorker = await worker.Bert.load(model, { device: "cpu", cache: false });
    out.worker = Array.from(await inWorker.embed("a strict policy"));
    inWorker.dispose();
  } catch (e) {
    out.error = String(e?.message ?? e);
  }
  window.result = out;
}

run();
