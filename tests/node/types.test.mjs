// The package's TypeScript types, as a TypeScript project sees them: tests/node/types/ (TypeScript and Node's types
// pinned by its committed lock file) with the packed tarball installed, `tsc --strict` over main.ts, a browser app
// that uses the whole API (and marks with @ts-expect-error the mistakes the types must reject), and over node.ts, a
// Node.js script typed without the DOM library. Run: node --test tests/node/
import { test } from "node:test";
import { execFileSync } from "node:child_process";
import path from "node:path";
import { ROOT, npmCi, installTarball } from "./package.mjs";

const APP = path.join(ROOT, "tests/node/types");

test("the types compile under tsc --strict (TypeScript 7 and 5.9) in a consumer project: with the DOM library, and with Node's types alone", () => {
  npmCi(APP);
  installTarball(APP);
  // tsconfig.json: a browser app (main.ts); tsconfig.node.json: a Node.js script (node.ts), no DOM library. With
  // TypeScript 7 (the native compiler) and 5.9, the last of the JavaScript one, which many projects still use.
  for (const tsc of ["typescript/bin/tsc", "typescript-5/bin/tsc"]) {
    for (const config of ["tsconfig.json", "tsconfig.node.json"]) {
      try {
        execFileSync(process.execPath, [path.join(APP, "node_modules", tsc), "--strict", "-p", path.join(APP, config)],
          { cwd: APP, encoding: "utf8", stdio: "pipe" });
      } catch (e) {
        throw new Error(`${tsc} --strict -p ${config} failed:\n${e.stdout}${e.stderr}`);
      }
    }
  }
});
