// README's two commands, as a newcomer runs them: both start with scripts/setup.sh, which must install what is
// missing, say what to do when it cannot (not root), and be quiet when everything is there, so that the second run
// starts its real work at once. CI itself is the fresh-machine run (it executes scripts/test.sh on a fresh clone);
// these tests check the paths CI does not take. They run after scripts/test.sh's set-up and package build.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const run = (args, env = {}) =>
  spawnSync("bash", args, { cwd: ROOT, encoding: "utf8", env: { ...process.env, ...env }, timeout: 120_000 });

test("a second set-up is quiet: nothing is installed again", () => {
  for (const what of ["test", "demo"]) {
    const r = run(["scripts/setup.sh", what]);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout + r.stderr, "", `setup.sh ${what} had work to do on a set-up machine`);
  }
});

test("set-up rejects an unknown target", () => {
  const r = run(["scripts/setup.sh", "everything"]);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /usage: scripts\/setup\.sh \[demo\|test\]/);
});

test("without root, missing Debian packages stop the set-up with the one command that installs them", () => {
  // A PATH where dpkg says the packages are not installed and `id -u` is an ordinary user's.
  const bin = fs.mkdtempSync(path.join(os.tmpdir(), "setup-test-"));
  fs.writeFileSync(path.join(bin, "dpkg-query"), "#!/bin/sh\necho 'deinstall ok config-files'\n", { mode: 0o755 });
  fs.writeFileSync(path.join(bin, "id"), "#!/bin/sh\necho 1000\n", { mode: 0o755 });
  try {
    const r = run(["scripts/setup.sh", "test"], { PATH: `${bin}:${process.env.PATH}` });
    assert.equal(r.status, 1, r.stderr);
    // The threaded wasm build's toolchain at its pinned version, then the tests' browser and Vulkan driver.
    const toolchain = "rustc-web=(\\S+) cargo-web=\\1 rust-web-src=\\1 lld";
    assert.match(r.stderr, new RegExp("\\n {2}sudo apt-get update && sudo apt-get install -y --no-install-recommends "
      + `${toolchain} mesa-vulkan-drivers chromium\\n`));
    // The demo builds the package too, so it needs the toolchain, but neither of the others.
    const demo = run(["scripts/setup.sh", "demo"], { PATH: `${bin}:${process.env.PATH}` });
    assert.equal(demo.status, 1, demo.stderr);
    assert.match(demo.stderr, new RegExp(`--no-install-recommends ${toolchain}\\n`));
  } finally {
    fs.rmSync(bin, { recursive: true, force: true });
  }
});

test("scripts/demo.sh on a set-up machine serves the page and the package at once", async () => {
  const child = spawn("bash", ["scripts/demo.sh"], {
    cwd: ROOT, env: { ...process.env, PORT: "0" }, detached: true, stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "", err = "";
  child.stdout.on("data", (d) => { out += d; });
  child.stderr.on("data", (d) => { err += d; });
  try {
    const url = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no URL within 60 s:\n${out}\n${err}`)), 60_000);
      child.stdout.on("data", () => {
        const m = out.match(/bertgpu demo: (http:\/\/127\.0\.0\.1:\d+\/\S*)/);
        if (m) { clearTimeout(timer); resolve(m[1]); }
      });
      child.on("exit", (code) => { clearTimeout(timer); reject(new Error(`demo.sh exited ${code}:\n${out}\n${err}`)); });
    });
    const origin = new URL(url).origin;
    const page = await fetch(`${origin}/www/`);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /<title>[^<]*bertgpu/i);
    for (const file of ["/pkg/index.js", "/pkg/wasm/bertgpu_bg.wasm", "/models/all-MiniLM-L6-v2/config.json"]) {
      const r = await fetch(origin + file);
      assert.equal(r.status, 200, file);
      await r.arrayBuffer();
    }
    assert.equal(err, "", "the package was already built and everything set up: no set-up or build step should run");
  } finally {
    // The whole process group (bash and the node server); gone already when demo.sh failed, which the test reports.
    try { process.kill(-child.pid, "SIGTERM"); } catch (e) { if (e.code !== "ESRCH") throw e; }
  }
});
