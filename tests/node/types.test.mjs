// The package's TypeScript types, as a TypeScript project sees them: tests/node/types/ (TypeScript pinned by its
// committed lock file) with the packed tarball installed, `tsc --strict` over main.ts, which uses the whole API
// (and marks with @ts-expect-error the mistakes the types must reject). Run: node --test tests/node/
import { test } from "node:test";
import { execFileSync } from "node:child_process";
import path from "node:path";
import { ROOT, npmCi, installTarball } from "./package.mjs";

const APP = path.join(ROOT, "tests/node/types");

test("the types compile under tsc --strict in a consumer project", () => {
  npmCi(APP);
  installTarball(APP);
  try {
    execFileSync(path.join(APP, "node_modules/.bin/tsc"), ["--strict", "-p", APP], { cwd: APP, encoding: "utf8", stdio: "pipe" });
  } catch (e) {
    throw new Error(`tsc --strict failed:\n${e.stdout}${e.stderr}`);
  }
});
