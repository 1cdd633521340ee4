// A Manifest V3 Chrome extension (tests/bundlers/extension/) with no bundler: its own copy of the package from the
// packed tarball (no code from a CDN), the wasm files moved elsewhere in the extension and handed over with the
// `wasm` option. Its service worker (where import() is not allowed) and an extension page (the main thread and
// bertgpu/worker) embed the golden texts in headless Chromium, which must give PyTorch's vectors.
// Run: node --test tests/bundlers/
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { prepareApp, startBrowser, checkApp, assertGolden, assertBuildsAgree, GOLDEN } from "./harness.mjs";

/** The unpacked extension: its files, the installed package as bertgpu/, and the .wasm files moved to wasm/. */
function buildExtension(app) {
  const ext = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-extension-"));
  for (const f of ["manifest.json", "background.js", "page.html", "page.js"]) fs.copyFileSync(path.join(app, f), path.join(ext, f));
  fs.cpSync(path.join(app, "node_modules/bertgpu"), path.join(ext, "bertgpu"), { recursive: true });
  fs.mkdirSync(path.join(ext, "wasm"));
  // Moved, not copied: had the package fetched its own files rather than the ones handed over, the load would fail.
  fs.renameSync(path.join(ext, "bertgpu/wasm/bertgpu_bg.wasm"), path.join(ext, "wasm/simd128.wasm"));
  fs.renameSync(path.join(ext, "bertgpu/wasm-relaxed/bertgpu_bg.wasm"), path.join(ext, "wasm/relaxed.wasm"));
  return ext;
}

test("a Manifest V3 extension: the service worker and an extension page (main thread and worker) embed", async () => {
  const ext = buildExtension(prepareApp("extension"));
  const env = await startBrowser({ extension: ext });
  try {
    const sw = env.context.serviceWorkers()[0] ?? await env.context.waitForEvent("serviceworker", { timeout: 30_000 });
    const id = new URL(sw.url()).host;
    const embed = (simd) => sw.evaluate(({ model, texts, simd }) => self.embed(model, texts, simd),
      { model: `${env.models.url}all-MiniLM-L6-v2/`, texts: GOLDEN.sentences, simd });
    const got = await embed("auto");
    assert.equal(got.simd, "relaxed");
    assertGolden(got.vectors, "service worker");
    const simd128 = await embed("simd128");
    assert.equal(simd128.simd, "simd128");
    assertGolden(simd128.vectors, "service worker, SIMD128 build");
    assertBuildsAgree(simd128.vectors, got.vectors, "service worker: the two builds");
    await checkApp(env, `chrome-extension://${id}/page.html`);
  } finally {
    await env.stop();
    fs.rmSync(ext, { recursive: true, force: true });
  }
});
