// Tiny real apps that `import { Bert } from "bertgpu"` (and "bertgpu/worker"), each with its bundler pinned by a
// committed lock file and the package installed from the packed tarball (`npm pack` of pkg/, or $BERTGPU_PKG), as
// a user installs it. Each is built (or served by its dev server) and run in headless Chromium, where it embeds the
// golden texts with all-MiniLM-L6-v2 on the main thread and in the worker entry, which must give PyTorch's vectors.
// The built apps are served with a strict Content-Security-Policy (no eval, only 'wasm-unsafe-eval'), and Node.js,
// running the same installed package, must give the browser's vectors of the same wasm build bit for bit.
// The first run installs the apps' dependencies from the npm registry (`npm ci`); later runs reuse them.
// Run: node --test tests/bundlers/
import { test, before, after } from "node:test";
import path from "node:path";
import { pathToFileURL } from "node:url";
import assert from "node:assert/strict";
import { prepareApp, tool, startBrowser, checkApp, serve, strictCsp, nodeVectors } from "./harness.mjs";
import { npm } from "../node/package.mjs";

let env;
before(async () => {
  env = await startBrowser();
});
after(async () => {
  await env?.stop();
});

test("Vite: a production build (vite build), served as static files under a strict CSP", async () => {
  const app = prepareApp("vite");
  tool(app, "vite", ["build", "--logLevel", "warn"]);
  const site = await serve(path.join(app, "dist"), { headers: strictCsp(env) });
  let got;
  try {
    got = await checkApp(env, site.url);
  } finally {
    await site.close();
  }
  // The same package in Node.js (its SIMD128 build, or relaxed on Node 22+) gives the vectors of the same build in
  // Chromium bit for bit.
  const node = await nodeVectors(app);
  assert.deepEqual(node.vectors, node.simd === "relaxed" ? got.main : got.simd128, `Node.js and Chromium differ (${node.simd})`);
});

test("Vite: the dev server (dependencies pre-bundled)", async () => {
  const app = prepareApp("vite");
  const vite = await import(pathToFileURL(path.join(app, "node_modules/vite/dist/node/index.js")).href);
  // A fresh pre-bundle each run: what a user's first `vite` does.
  const server = await vite.createServer({ root: app, configFile: false, logLevel: "error", server: { port: 0, host: "127.0.0.1" },
    optimizeDeps: { force: true } });
  await server.listen();
  try {
    await checkApp(env, server.resolvedUrls.local[0]);
  } finally {
    await server.close();
  }
});

test("webpack 5: a production build, served as static files under a strict CSP", async () => {
  const app = prepareApp("webpack");
  tool(app, "webpack", []);
  const site = await serve(app, { headers: strictCsp(env) });
  try {
    await checkApp(env, site.url);
  } finally {
    await site.close();
  }
});

test("esbuild: the worker entry a second entry point, the wasm folders copied (its build script); a strict CSP", async () => {
  const app = prepareApp("esbuild");
  npm(app, ["run", "build", "--silent"]);
  const site = await serve(app, { headers: strictCsp(env) });
  try {
    await checkApp(env, site.url);
  } finally {
    await site.close();
  }
});
