/**
 * When a lease is lost: a server stopped (SIGSTOP) or cut off while the lease is held — lost
 * fires, after jeopardy, before another owner is granted the name; a renewal refused (the
 * lease force-released by an administrator) — lost fires at once, with the reason; a cap on
 * holding — lost fires a safety margin before it.
 */

import assert from "node:assert/strict";
import { after, before, describe, it, type TestContext } from "node:test";

import { Client, LostError, type Acquired, type Lease } from "fencelock";

import { TestProxy } from "./support/proxy";
import { principals, TestServer, tempDir, waitUntil } from "./support/server";

function granted(acquired: Acquired): Lease {
  assert.ok(acquired.acquired, "not acquired");
  return acquired;
}

/**
 * The guard's events in order, and where lost fell: by the wall clock (the server's too: the
 * same host), and against the lease's end as the holder was told it — on this process's
 * clock (`heldUntil`) and on the server's (`expiresAt`).
 */
function watch(lease: Lease): { events: string[]; lostAt: () => number; beforeTheEnd: () => boolean } {
  const events: string[] = [];
  let lostAt = Number.NaN;
  let beforeTheEnd = false;
  lease.addEventListener("jeopardy", () => events.push("jeopardy"));
  lease.signal.addEventListener("abort", () => {
    lostAt = Date.now();
    beforeTheEnd = performance.now() < lease.heldUntil && lostAt < lease.expiresAt.getTime();
    events.push("lost");
  });
  return { events, lostAt: () => lostAt, beforeTheEnd: () => beforeTheEnd };
}

/** Resolves with the lease's loss, or rejects if it has not come within `ms`. */
function lostWithin(lease: Lease, ms: number): Promise<LostError> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the lease was not lost within ${ms} ms`)), ms);
  });
  return Promise.race([lease.lost, late]).finally(() => clearTimeout(timer));
}

/** Checks that lost fired before `grantedAt` (the other owner's `acquired_at`), and reports by how much. */
function reportMargin(t: TestContext, how: string, lostAt: number, grantedAt: Date): void {
  const margin = grantedAt.getTime() - lostAt;
  const line = `${how}: lost fired ${margin} ms before the other owner's grant`;
  t.diagnostic(line);
  assert.ok(margin > 0, line);
}

describe("losing a lease", () => {
  let server: TestServer;
  const ttlMs = 1_500;

  before(async () => {
    server = await TestServer.start();
  });
  after(async () => {
    await server.stop();
  });

  it("fires lost, after jeopardy, before another owner is granted the name when the server is stopped (SIGSTOP)", async (t) => {
    const holder = new Client(server.url, { owner: "holder", requestTimeoutMs: 5_000 });
    const other = new Client(server.url, { owner: "other" });
    const lease = granted(await holder.lock("stopped", { ttlMs }));
    const seen = watch(lease);
    server.pause();
    let lost: LostError;
    try {
      lost = await lostWithin(lease, 2 * ttlMs);
    } finally {
      server.resume();
    }
    assert.equal(lost.reason, "not-renewed");
    assert.deepEqual(seen.events, ["jeopardy", "lost"], "jeopardy first, from the first failed renewal");
    assert.ok(seen.beforeTheEnd(), "lost fired before the end of the lease as the holder was told it");
    const next = granted(await other.lock("stopped", { ttlMs, waitMs: 10_000 }));
    reportMargin(t, "server stopped", seen.lostAt(), next.info.acquiredAt);
    assert.ok(next.token > lease.token);
    await next.release();
    await lease.release();
    [holder, other].forEach((c) => c.close());
  });

  it("fires lost before a waiting owner is granted the name when the holder is cut off from the server", async (t) => {
    const proxy = await TestProxy.start(server.url);
    const holder = new Client(proxy.url, { owner: "holder", requestTimeoutMs: 5_000 });
    const other = new Client(server.url, { owner: "other" });
    try {
      const lease = granted(await holder.lock("cut-off", { ttlMs }));
      const seen = watch(lease);
      // The other owner waits at the server, which grants it the moment the lease expires there.
      const waiting = other.lock("cut-off", { ttlMs, waitMs: 10_000 });
      await waitUntil(async () => (await server.metric("fencelock_waiters")) === 1, 5_000, "the other owner to wait");
      proxy.cut();
      const next = granted(await waiting);
      assert.equal(lease.lostReason?.reason, "not-renewed", "lost by the time the other owner is answered");
      assert.deepEqual(seen.events, ["jeopardy", "lost"]);
      assert.ok(seen.beforeTheEnd(), "lost fired before the end of the lease as the holder was told it");
      reportMargin(t, "holder cut off", seen.lostAt(), next.info.acquiredAt);
      await next.release();
    } finally {
      [holder, other].forEach((c) => c.close());
      await proxy.close();
    }
  });

  it("starts lost when the grant was answered so late that no more than the safety margin was left of it", async () => {
    const proxy = await TestProxy.start(server.url);
    const client = new Client(proxy.url, { owner: "slow" });
    try {
      proxy.delay(900);
      // 900 ms of a 1,000 ms lease have passed when the answer comes: its give-up point (800 ms) is behind.
      const lease = granted(await client.lock("late", { ttlMs: 1_000 }));
      assert.equal(lease.state, "lost", "never reported held");
      assert.equal(lease.lostReason?.reason, "not-renewed");
      assert.match(lease.lostReason?.message ?? "", /answered too late/);
      assert.ok(lease.signal.aborted);
      await lease.release();
    } finally {
      client.close();
      await proxy.close();
    }
  });

  it("fires lost at once, with the reason, when the server refuses a renewal: force-released by an administrator", async () => {
    const dir = tempDir();
    const auth = principals(dir.path, { app: ["read", "lock"], ops: ["admin"] });
    const guarded = await TestServer.start({ args: ["--auth", auth.file] });
    const client = new Client(guarded.url, { owner: "app-1", authToken: auth.tokens.app });
    try {
      const lease = granted(await client.lock("payment:7", { ttlMs: 3_000 }));
      const seen = watch(lease);
      const forced = await guarded.call("DELETE", "/locks/payment:7", { force: true }, auth.tokens.ops);
      assert.equal(forced.status, 204);
      const giveUpAt = lease.heldUntil - lease.safetyMarginMs;
      const lost = await lostWithin(lease, 3_000);
      assert.equal(lost.reason, "gone");
      assert.match(lost.message, /expired or was force-released/);
      assert.ok(performance.now() < giveUpAt, "at the next renewal, not when renewals would have run out");
      assert.deepEqual(seen.events, ["lost"], "no jeopardy: a refusal is an answer");
      assert.ok(lease.signal.reason instanceof LostError);
      await lease.release(); // the server already said it is gone: nothing to do, no error
    } finally {
      client.close();
      await guarded.stop();
      dir.remove();
    }
  });

  it("fires lost a safety margin before the lease's cap on holding, however well renewals go", async () => {
    const client = new Client(server.url, { owner: "capped" });
    const lease = granted(await client.lock("capped", { ttlMs: 600, maxHoldMs: 1_200 }));
    const seen = watch(lease);
    const holdUntil = lease.info.holdUntil;
    assert.ok(holdUntil !== undefined, "the server shows the cap");
    const lost = await lostWithin(lease, 3_000);
    assert.equal(lost.reason, "cap-reached");
    assert.ok(seen.lostAt() < holdUntil.getTime(), "before the cap");
    assert.ok(seen.beforeTheEnd());
    await lease.release();
    client.close();
  });
});
