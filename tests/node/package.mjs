// The npm package as a user gets it: `npm pack` of the built package folder (pkg/, or $BERTGPU_PKG), installed
// from that tarball into a project. Shared by the Node.js tests (tests/node/) and the bundler apps (tests/bundlers/).
import { execFileSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
/** The built package folder (scripts/build-wasm.sh writes pkg/). */
export const PKG = path.resolve(ROOT, process.env.BERTGPU_PKG ?? "pkg");
export const MODELS = path.join(ROOT, "models");

let tarball = null;

/** `npm pack` of PKG into a temporary folder (once per process); returns the tarball's path. */
export function packTarball() {
  if (tarball) return tarball;
  if (!fs.existsSync(path.join(PKG, "wasm/bertgpu_bg.wasm"))) {
    throw new Error(`${PKG} has no wasm/bertgpu_bg.wasm: run scripts/build-wasm.sh first (or set BERTGPU_PKG)`);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-pack-"));
  const out = execFileSync("npm", ["pack", "--json", "--pack-destination", dir, PKG], { encoding: "utf8" });
  tarball = path.join(dir, JSON.parse(out)[0].filename);
  process.on("exit", () => fs.rmSync(dir, { recursive: true, force: true }));
  return tarball;
}

/** Runs npm in `cwd`; on failure the error carries npm's output. */
export function npm(cwd, args) {
  try {
    return execFileSync("npm", args, { cwd, encoding: "utf8", stdio: "pipe" });
  } catch (e) {
    throw new Error(`npm ${args.join(" ")} in ${cwd} failed:\n${e.stdout}\n${e.stderr}`);
  }
}

const NPM_QUIET = ["--no-audit", "--no-fund", "--loglevel=error"];

/**
 * `npm ci` in an app folder whose package-lock.json is committed, skipped when node_modules was installed from the
 * same lock file (a stamp holds its hash), so a second run costs nothing.
 */
export function npmCi(dir) {
  const lock = crypto.createHash("sha256").update(fs.readFileSync(path.join(dir, "package-lock.json"))).digest("hex");
  const stamp = path.join(dir, "node_modules/.installed-from-lock");
  if (fs.existsSync(stamp) && fs.readFileSync(stamp, "utf8") === lock) return;
  npm(dir, ["ci", ...NPM_QUIET]);
  fs.mkdirSync(path.dirname(stamp), { recursive: true }); // npm ci of an app without dependencies makes none
  fs.writeFileSync(stamp, lock);
}

/**
 * Installs the packed tarball into the project `dir` as a user does (`npm install <tarball>`); `--no-save` keeps the
 * project's committed package.json and lock file as they are. Needs no network: the tarball has no dependencies.
 */
export function installTarball(dir, { save = false } = {}) {
  npm(dir, ["install", ...(save ? [] : ["--no-save"]), "--prefer-offline", ...NPM_QUIET, packTarball()]);
}

/** A new project folder (package.json only) with the tarball installed; removed when the process exits. */
export function consumerProject() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "bertgpu-consumer-"));
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  installTarball(dir, { save: true });
  process.on("exit", () => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}
