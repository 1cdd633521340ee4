// The demo's service worker: the page and the package (HTML, JS, CSS, wasm, the example data) are served from the
// network when it answers and from this cache when it does not, so a second visit works offline while an online
// visit always gets the current files. Model files are not kept here: the package caches them itself (js/loader.js).
const CACHE = "bertgpu-demo-v1";
const KEEP = [/^\/www\//, /^\/pkg\//, /^\/tests\/data\//];

// Fetched at install, so the first visit is enough to make the next one work offline (the page's own requests of
// the first visit happen before this worker controls it).
const SHELL = [
  "/www/", "/www/app.js", "/www/style.css", "/pkg/worker.js", "/pkg/worker-main.js", "/pkg/index.js", "/pkg/loader.js",
  "/pkg/wasm/bertgpu.js", "/pkg/wasm/bertgpu_bg.wasm", "/tests/data/fortunes/train.jsonl",
];

self.addEventListener("install", (e) => {
  e.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await cache.addAll(SHELL);
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
