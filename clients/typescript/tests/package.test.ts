/**
 * The package as its users load it: by name, from CommonJS and from an ES module, with its
 * types; `Symbol.asyncDispose` present for `await using`; and the README's first five lines,
 * run as they are written.
 */

import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { promisify } from "node:util";

import { TestServer } from "./support/server";

const root = join(__dirname, "..", "..");

it("loads by name from CommonJS and from an ES module, with its declarations shipped", () => {
  const names = "Client,Lease,NotAcquired,ProblemError,ConnectionError,FencelockError,LostError";
  const check = `for (const n of "${names}".split(",")) if (typeof m[n] !== "function") throw new Error(n + " missing");`;
  const cjs = `const m = require("fencelock"); ${check} console.log(typeof Symbol.asyncDispose);`;
  const esm = `import * as m from "fencelock"; ${check} console.log(typeof Symbol.asyncDispose);`;
  assert.equal(execFileSync(process.execPath, ["-e", cjs], { cwd: root, encoding: "utf8" }).trim(), "symbol");
  assert.equal(
    execFileSync(process.execPath, ["--input-type=module", "-e", esm], { cwd: root, encoding: "utf8" }).trim(),
    "symbol",
  );
  assert.ok(existsSync(join(root, "dist", "index.d.ts")));
});

it("the README's first five lines hold a lock and release it", async () => {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const snippet = /```ts\n([\s\S]*?)```/.exec(readme)?.[1] ?? assert.fail("the README has no ts snippet");
  assert.ok(snippet.includes('new Client("http://127.0.0.1:7070")'), "the first snippet makes a client");
  const server = await TestServer.start();
  try {
    // What the snippet leaves to its reader, declared after it (declarations are hoisted).
    const work = `\nvar order;\nasync function charge(order, { fencingToken, signal }) {\n  console.log(\`charged with token \${fencingToken}, lost: \${signal.aborted}\`);\n}\n`;
    const file = join(root, "build", "readme-first-lines.mjs");
    writeFileSync(file, snippet.replace("http://127.0.0.1:7070", server.url) + work);
    const { stdout } = await promisify(execFile)(process.execPath, [file], { cwd: root, timeout: 30_000 });
    assert.match(stdout, /^charged with token \d+, lost: false$/m);
    assert.equal((await server.call("GET", "/locks/payment:42")).status, 404, "released at the end");
  } finally {
    await server.stop();
  }
});
