// The demo's service worker: the page and the package (HTML, JS, CSS, wasm, the example data) are served from the
// network when it answers and from this cache when it does not, so a second visit works offline while an online
// visit always gets the current files. Model files are not kept here: the package caches them itself (js/loader.js).
const CACHE = "bertgpu-demo-v1";
const KEEP = [/^\/www\//, /^\/pkg\//, /^\/tests\/data\//];

// Fetched at install, so the first visit is enough to make the next one work offline (the page's own requests of
// the first visit happen before this worker controls it).
const SHELL = [
  "/www/", "/www/style.css", "/www/app.js", "/www/ui.js", "/www/examples.js", "/www/model.js", "/www/similarity.js",
  "/www/fillmask.js", "/www/training.js", "/www/pretrain.js", "/www/chart.js", "/www/heads.js",
  "/www/dropped.js", "/www/zeroshot.js", "/www/adapt.js",
  // The package's modules (js/package.json's "files"; tests/node/demo.test.mjs checks the list is whole).
  "/pkg/worker.js", "/pkg/worker-main.js", "/pkg/index.js", "/pkg/builds.js", "/pkg/runtime.js", "/pkg/device.js",
  "/pkg/options.js", "/pkg/text.js", "/pkg/training.js", "/pkg/tokenizer.js", "/pkg/loader.js", "/pkg/env.js",
  "/pkg/sources.js", "/pkg/cache.js", "/pkg/download.js", "/pkg/checkpoints.js", "/pkg/tuning.js", "/pkg/threads.js",
  "/pkg/threads-worker.js", "/pkg/vectors.js",
  // pkg/index.js imports the four builds' glue statically (bundlers and extension service workers need that); only
  // the .wasm of the build in use is fetched.
  "/pkg/wasm/bertgpu.js", "/pkg/wasm-relaxed/bertgpu.js", "/pkg/wasm-threads/bertgpu.js",
  "/pkg/wasm-threads-relaxed/bertgpu.js",
  "/tests/data/fortunes/train.jsonl",
];

/** Whether WebAssembly relaxed SIMD validates (js/index.js `hasRelaxedSimd`, the same 82-byte module). */
function relaxedSimd() {
  const b = [0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 5, 1, 0x60, 0, 1, 0x7b, 3, 2, 1, 0, 10, 0x3d, 1, 0x3b, 0];
  for (let i = 0; i < 3; i++) b.push(0xfd, 0x0c, ...new Array(16).fill(0));
  b.push(0xfd, 0x93, 0x02, 0x0b);
  try {
    return WebAssembly.validate(new Uint8Array(b));
  } catch {
    return false;
  }
}

self.addEventListener("install", (e) => {
  e.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    // Of the package's wasm modules, the two the page would load: pkg/index.js picks them with the same probe
    // (repeated here: a classic service worker cannot import modules), single-threaded and threaded (the page,
    // served cross-origin isolated, runs the CPU on several cores).
    const relaxed = relaxedSimd();
    const builds = relaxed ? ["/pkg/wasm-relaxed/", "/pkg/wasm-threads-relaxed/"] : ["/pkg/wasm/", "/pkg/wasm-threads/"];
    await cache.addAll([...SHELL, ...builds.map((b) => `${b}bertgpu_bg.wasm`)]);
    await self.skipWaiting();
  })());
});
self.addEventListener("activate", (e) => e.waitUntil(self.clients.claim()));

self.addEventListener("fetch", (e) => {
  const url = new URL(e.request.url);
  if (e.request.method !== "GET" || url.origin !== self.location.origin) return;
  const path = url.pathname === "/" ? "/www/" : url.pathname;
  if (!KEEP.some((re) => re.test(path))) return;
  e.respondWith((async () => {
    const cache = await caches.open(CACHE);
    try {
      const res = await fetch(e.request);
      if (res.ok) await cache.put(e.request, res.clone());
      return res;
    } catch (err) {
      const hit = await cache.match(e.request);
      if (hit) return hit;
      throw err;
    }
  })());
});
