/**
 * The other kinds, held by the same guard: a semaphore's permits, a read-write lock's holds,
 * and several locks taken all or none — against a real `fencelock serve`.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Client, NotAcquired, ProblemError, type Acquired, type Lease } from "fencelock";

import { TestServer, waitUntil } from "./support/server";

/** `acquired` as a lease, failing the test if it is not one. */
function granted(acquired: Acquired): Lease {
  assert.ok(acquired.acquired, `not acquired: ${JSON.stringify((acquired as NotAcquired).held)}`);
  return acquired;
}

describe("the kinds", () => {
  let server: TestServer;
  const clients: Client[] = [];
  const as = (owner: string) => {
    const client = new Client(server.url, { owner });
    clients.push(client);
    return client;
  };
  const ttlMs = 30_000;

  before(async () => {
    server = await TestServer.start();
  });
  after(async () => {
    clients.forEach((c) => c.close());
    await server.stop();
  });

  it("a semaphore has at most `limit` holders, each with a token of its own", async () => {
    const one = granted(await as("trainer-1").semaphore("gpu", 2, { ttlMs }));
    const two = granted(await as("trainer-2").semaphore("gpu", 2, { ttlMs }));
    assert.equal(one.kind, "semaphore");
    assert.equal(one.info.limit, 2);
    assert.ok(two.token > one.token);

    const third = as("trainer-3");
    const full = await third.semaphore("gpu", 2, { ttlMs });
    assert.ok(full instanceof NotAcquired);
    assert.equal(full.holderCount, 2);
    assert.deepEqual(full.holders.map((h) => h.owner).sort(), ["trainer-1", "trainer-2"]);
    assert.ok(full.retryInMs !== undefined && full.retryInMs > 0);

    await assert.rejects(third.semaphore("gpu", 3, { ttlMs }), (error: unknown) => {
      assert.ok(error instanceof ProblemError);
      assert.equal(error.kind, "limit-mismatch");
      assert.equal(error.status, 409);
      assert.equal(error.limit, 2);
      return true;
    });

    // The third waits in line, and gets the permit the first gives back.
    const waiting = third.using("gpu", { ttlMs, limit: 2, waitMs: 20_000 }, (permit) => permit.info.owner);
    await waitUntil(async () => (await server.metric("fencelock_waiters")) === 1, 5_000, "the third to wait");
    await one.release();
    assert.equal(await waiting, "trainer-3");
    await two.release();
    assert.equal((await server.call("GET", "/semaphores/gpu")).status, 404, "every permit released");
  });

  it("a read-write lock is shared by readers and held by one writer alone", async () => {
    const r1 = granted(await as("reader-1").readLock("config", { ttlMs }));
    const r2 = granted(await as("reader-2").readLock("config", { ttlMs }));
    assert.equal(r1.info.mode, "read");
    assert.ok(r2.token > r1.token);

    const writer = as("writer");
    const busy = await writer.writeLock("config", { ttlMs });
    assert.ok(busy instanceof NotAcquired);
    assert.equal(busy.heldMode, "read");
    assert.deepEqual(busy.holders.map((h) => h.owner).sort(), ["reader-1", "reader-2"]);

    await Promise.all([r1.release(), r2.release()]);
    const written = await writer.using("config", { ttlMs, mode: "write" }, async (hold) => {
      assert.equal(hold.info.mode, "write");
      const reader = await as("reader-3").readLock("config", { ttlMs });
      assert.ok(reader instanceof NotAcquired);
      assert.equal(reader.heldMode, "write");
      return hold.token;
    });
    assert.ok(typeof written === "bigint" && written > r2.token);
    assert.equal((await server.call("GET", "/rwlocks/config")).status, 404);
  });

  it("several locks are taken all or none, each with its own token, and released together", async () => {
    const other = granted(await as("teller").lock("account:2", { ttlMs }));
    const clerk = as("clerk");
    const blocked = await clerk.locks(["account:1", "account:2"], { ttlMs });
    assert.ok(blocked instanceof NotAcquired);
    assert.deepEqual(blocked.held, ["account:2"]);
    assert.equal(blocked.holder?.owner, "teller");
    assert.equal((await server.call("GET", "/locks/account:1")).status, 404, "none was taken");

    await other.release();
    const tokens = await clerk.using(["account:1", "account:2"], { ttlMs }, (both) => {
      assert.deepEqual(both.names, ["account:1", "account:2"]);
      assert.deepEqual(
        both.leases.map((l) => l.name),
        ["account:1", "account:2"],
      );
      return [both.tokenOf("account:1"), both.tokenOf("account:2")];
    });
    assert.ok(Array.isArray(tokens));
    const [first, second] = tokens as bigint[];
    assert.ok(first > other.token && second > first, "each lock its own, newer token");
    for (const name of ["account:1", "account:2"]) {
      assert.equal((await server.call("GET", `/locks/${name}`)).status, 404, `${name} released`);
    }
  });

  it("several locks are lost together when one is, and the others are still released", async () => {
    const both = granted(await as("mover").locks(["shelf:a", "shelf:b"], { ttlMs: 900 }));
    // Released behind the guard's back: its next renewal of shelf:b is answered 404.
    assert.equal((await server.call("DELETE", "/locks/shelf:b", { owner: "mover" })).status, 204);
    const lost = await both.lost;
    assert.equal(lost.reason, "gone");
    assert.equal(lost.lostOn, "shelf:b");
    assert.equal(both.state, "lost");
    assert.equal((await server.call("GET", "/locks/shelf:a")).status, 200, "still held until released");
    await both.release();
    assert.equal((await server.call("GET", "/locks/shelf:a")).status, 404);
  });
});
