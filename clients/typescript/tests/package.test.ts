/**
 * The package as its users load it: by name, from CommonJS and from an ES module, with its
 * types; `Symbol.asyncDispose` present for `await using`.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";

const root = join(__dirname, "..", "..");

it("loads by name from CommonJS and from an ES module, with its declarations shipped", () => {
  const names = "Client,Lease,NotAcquired,ProblemError,ConnectionError,FencelockError,LostError";
  const check = `for (const n of "${names}".split(",")) if (typeof m[n] !== "function") throw new Error(n + " missing");`;
  const cjs = `const m = require("fencelock"); ${check} console.log(typeof Symbol.asyncDispose);`;
  const esm = `import * as m from "fencelock"; ${check} console.log(typeof Symbol.asyncDispose);`;
  assert.equal(execFileSync(process.execPath, ["-e", cjs], { cwd: root, encoding: "utf8" }).trim(), "symbol");
  assert.equal(execFileSync(process.execPath, ["--input-type=module", "-e", esm], { cwd: root, encoding: "utf8" }).trim(), "symbol");
  assert.ok(existsSync(join(root, "dist", "index.d.ts")));
});
