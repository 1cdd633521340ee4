// The static file server of the demo (scripts/demo.sh) and of the browser tests: serves a directory on
// 127.0.0.1 with the MIME types browsers insist on (application/wasm, text/javascript, text/css).
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const TYPES = {
  ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8", ".json": "application/json", ".wasm": "application/wasm",
  ".txt": "text/plain; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
};

/**
 * The headers that make a page cross-origin isolated: SharedArrayBuffer, which the threaded build's one shared
 * memory needs (and transformers.js's wasm threads, in the benchmarks).
 */
export const ISOLATION_HEADERS = {
  "Cross-Origin-Opener-Policy": "same-origin",
  "Cross-Origin-Embedder-Policy": "require-corp",
};

/**
 * Serves `root` on 127.0.0.1:`port` (0: any free port); resolves to { url, close(), requests } (requests: the
 * paths asked for). `cors` lets pages of another origin fetch (the tests' model server); `home` is where "/"
 * redirects; a path ending in "/" serves its index.html; `cache` is the Cache-Control header; `headers` are added to
 * every response.
 */
export function serve(root, { port = 0, cors = false, home = null, cache = "no-store", headers = {} } = {}) {
  const rootAbs = path.resolve(root);
  const requests = [];
  const sockets = new Set();
  const server = http.createServer((req, res) => {
    let pathname;
    try {
      pathname = decodeURIComponent(new URL(req.url, "http://x").pathname);
    } catch {
      res.writeHead(400).end();
      return;
    }
    requests.push(pathname);
    if (cors) res.setHeader("Access-Control-Allow-Origin", "*");
    for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
    if (home && pathname === "/") {
      res.writeHead(302, { location: home }).end();
      return;
    }
    let file = path.join(rootAbs, pathname);
    if (file !== rootAbs && !file.startsWith(rootAbs + path.sep)) {
      res.writeHead(403).end();
      return;
    }
    if (pathname.endsWith("/")) file = path.join(file, "index.html");
    fs.stat(file, (err, st) => {
      if (err || !st.isFile()) {
        res.writeHead(404, { "content-type": "text/plain" }).end("not found");
        return;
      }
      res.writeHead(200, {
        "content-type": TYPES[path.extname(file)] ?? "application/octet-stream",
        "content-length": st.size,
        "cache-control": cache,
        // The demo's service worker lives in /www/ but serves the whole site (the package's worker scripts are in /pkg/).
        ...(path.basename(file) === "sw.js" ? { "service-worker-allowed": "/" } : {}),
      });
      if (req.method === "HEAD") res.end();
      else fs.createReadStream(file).pipe(res);
    });
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => {
      resolve({
        url: `http://127.0.0.1:${server.address().port}/`,
        requests,
        close: () => new Promise((done) => {
          for (const s of sockets) s.destroy();
          server.close(() => done());
        }),
      });
    });
  });
}

/**
 * The demo: the repository with "/" sent to the page, cross-origin isolated (so that the model can be split across
 * workers); resolves to { url (of the page), close() }.
 */
export async function serveDemo(port) {
  const s = await serve(ROOT, { port, home: "/www/", cache: "no-cache", headers: ISOLATION_HEADERS });
  return { url: `${s.url}www/`, close: s.close };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const port = Number(process.env.PORT ?? 8080);
  serveDemo(port).then(
    ({ url }) => console.log(`bertgpu demo: ${url}  (Ctrl-C to stop)`),
    (e) => {
      console.error(`demo server: ${e.message}${e.code === "EADDRINUSE" ? ` (try PORT=${port + 1} scripts/demo.sh)` : ""}`);
      process.exit(1);
    });
}
