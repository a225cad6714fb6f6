/** The fenced-write example runs against a real server, and the protected resource refuses A's late write. */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { promisify } from "node:util";

import { TestServer } from "./support/server";

let server: TestServer;
before(async () => {
  server = await TestServer.start();
});
after(async () => {
  await server.stop();
});

it("the fenced-write example: B's write is accepted, A's late write with the older token is rejected", async () => {
  const example = join(__dirname, "..", "examples", "fenced-write.js");
  const { stdout } = await promisify(execFile)(process.execPath, [example, server.url], { timeout: 30_000 });
  const lines = stdout.trim().split("\n");
  const tokenOf = (who: string) =>
    BigInt(/fencing token (\d+)/.exec(lines.find((l) => l.includes(`${who} acquires`)) ?? "")?.[1] ?? "0");
  assert.ok(tokenOf("B") > tokenOf("A") && tokenOf("A") > 0n, stdout);
  assert.match(stdout, /B writes with token \d+: accepted/);
  assert.match(stdout, /A resumes and writes with token \d+: REJECTED/);
  assert.match(stdout, /A's guard says: the lease could not be renewed in time/);
  assert.match(stdout, /the ledger holds \["B's entry"\]/);
});
