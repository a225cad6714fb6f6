/**
 * A lock held with the guard, against a real `fencelock serve`: the token, renewal in the
 * background, release at the end of the block (also on a throw) with the token, and a second
 * owner that is told "not acquired" or waits.
 */

import assert from "node:assert/strict";
import { hostname } from "node:os";
import { after, before, describe, it } from "node:test";

import { Client, LostError, NotAcquired, type Lease } from "fencelock";

import { TestServer, waitUntil } from "./support/server";

describe("a lock", () => {
  let server: TestServer;
  let client: Client;
  const as = (owner: string) => new Client(server.url, { owner });

  before(async () => {
    server = await TestServer.start();
    client = as("worker-a");
  });
  after(async () => {
    client.close();
    await server.stop();
  });

  it("is held with a token, renewed in the background past several TTLs, and released with it at the end of using", async () => {
    const ttlMs = 600;
    let seen: Lease | undefined;
    const result = await client.using("job:renewed", { ttlMs }, async (lease, signal) => {
      seen = lease;
      assert.equal(typeof lease.token, "bigint");
      assert.ok(lease.token > 0n);
      const grantedAt = lease.info.acquiredAt.getTime();
      // Only renewals can move the server's expiry this far: three TTLs past the grant.
      await waitUntil(
        async () => {
          const { status, body } = await server.call("GET", "/locks/job%3Arenewed");
          assert.equal(status, 200);
          assert.equal(body.owner, "worker-a");
          assert.equal(BigInt(body.fencing_token), lease.token, "renewal keeps the token");
          return Date.parse(body.expires_at) > grantedAt + 3 * ttlMs;
        },
        10_000,
        "the lease to be renewed for three TTLs",
      );
      assert.equal(lease.state, "held");
      assert.equal(signal.aborted, false);
      return "done";
    });
    assert.equal(result, "done");
    assert.equal((await server.call("GET", "/locks/job%3Arenewed")).status, 404, "released at the end of using");
    assert.ok(seen?.signal.aborted, "the signal ends with the block");
    assert.equal((seen?.signal.reason as LostError).reason, "released");
  });

  it("is released at the end of using when the function throws, and the error goes on", async () => {
    await assert.rejects(
      client.using("job:throws", { ttlMs: 5_000 }, async (lease) => {
        assert.equal((await server.call("GET", "/locks/job%3Athrows")).body.fencing_token, Number(lease.token));
        throw new Error("the work failed");
      }),
      /the work failed/,
    );
    assert.equal((await server.call("GET", "/locks/job%3Athrows")).status, 404);
  });

  it("is released at the end of an `await using` block, also one left by a throw", async () => {
    const hold = async () => {
      await using lease = await client.lock("job:await-using", { ttlMs: 5_000 });
      assert.ok(lease.acquired);
      assert.equal((await server.call("GET", "/locks/job%3Aawait-using")).status, 200);
      throw new Error("left by a throw");
    };
    await assert.rejects(hold(), /left by a throw/);
    assert.equal((await server.call("GET", "/locks/job%3Aawait-using")).status, 404);
  });

  it("is released with its token, so a late release never frees a newer lease of the same owner", async () => {
    const lease = await client.lock("job:late", { ttlMs: 30_000 });
    assert.ok(lease.acquired);
    // Behind the guard's back: the lease is released and the same owner takes a new one.
    assert.equal((await server.call("DELETE", "/locks/job:late", { owner: "worker-a" })).status, 204);
    const newer = await server.call("POST", "/locks/job:late", { owner: "worker-a", ttl_ms: 30_000 });
    assert.ok(BigInt(newer.body.lock.fencing_token) > lease.token);
    await lease.release();
    const live = await server.call("GET", "/locks/job:late");
    assert.equal(live.status, 200, "the newer lease is still held");
    assert.equal(live.body.fencing_token, newer.body.lock.fencing_token);
  });

  it("is not acquired by another owner, who is told the holder and when its lease ends", async () => {
    await using held = await client.lock("job:busy", { ttlMs: 30_000 });
    assert.ok(held.acquired);
    const other = as("worker-b");
    await using refused = await other.lock("job:busy", { ttlMs: 30_000 });
    assert.ok(refused instanceof NotAcquired);
    assert.equal(refused.acquired, false);
    assert.equal(refused.kind, "lock");
    assert.deepEqual(refused.held, ["job:busy"]);
    assert.equal(refused.holder?.owner, "worker-a");
    assert.equal(refused.holder?.token, held.token);
    assert.ok(
      refused.retryInMs !== undefined && refused.retryInMs > 0 && refused.retryInMs <= 30_000,
      `${refused.retryInMs}`,
    );
    // using runs nothing when not acquired, and says why.
    let ran = false;
    const outcome = await other.using("job:busy", { ttlMs: 30_000 }, () => (ran = true));
    assert.ok(outcome instanceof NotAcquired && outcome.holder?.owner === "worker-a");
    assert.equal(ran, false);
    other.close();
  });

  it("is granted to a waiting owner as soon as the holder releases it", async () => {
    const held = await client.lock("job:wait", { ttlMs: 30_000 });
    assert.ok(held.acquired);
    const other = as("worker-b");
    const waiting = other.lock("job:wait", { ttlMs: 30_000, waitMs: 20_000 });
    await waitUntil(async () => (await server.metric("fencelock_waiters")) === 1, 5_000, "the second owner to wait");
    await held.release();
    const granted = await waiting;
    assert.ok(granted.acquired);
    assert.equal(granted.info.owner, "worker-b");
    assert.ok(granted.token > held.token, "the next lease has a greater token");
    await granted.release();
    other.close();
  });

  it("waits longer than one request may carry by sending several waiting requests in a row", async () => {
    const held = await client.lock("job:long-wait", { ttlMs: 30_000 });
    assert.ok(held.acquired);
    const other = new Client(server.url, { owner: "worker-b", maxWaitPerRequestMs: 300 });
    const expiredWaits = () => server.metric("fencelock_timeouts_total", 'kind="wait_expired"');
    const before = await expiredWaits();
    const waiting = other.lock("job:long-wait", { ttlMs: 30_000, waitMs: 20_000 });
    // The first request's wait ran out on the server; the client goes on waiting with another.
    await waitUntil(async () => (await expiredWaits()) > before, 5_000, "a first waiting request to run out");
    await held.release();
    const granted = await waiting;
    assert.ok(granted.acquired, "granted to the second request");
    await granted.release();
    other.close();
  });

  it("is not held twice in one process: without an owner, every acquire is an owner of its own", async () => {
    const shared = new Client(server.url);
    await shared.using("job:in-process", { ttlMs: 30_000 }, async (first) => {
      assert.match(first.owner, new RegExp(`^${hostname()}:${process.pid}:\\d+$`));
      const second = await shared.lock("job:in-process", { ttlMs: 30_000 });
      assert.ok(second instanceof NotAcquired, "a second task of this process is refused, as another process would be");
      assert.equal(second.holder?.owner, first.owner);
    });
    shared.close();
  });

  it("refuses options that cannot work before sending anything", async () => {
    await assert.rejects(client.lock("job:bad", { ttlMs: 1.5 }), RangeError);
    await assert.rejects(client.lock("job:bad", { ttlMs: 1_000, waitMs: -1 }), RangeError);
    await assert.rejects(client.lock("job:bad", { ttlMs: 1_000, maxHoldMs: 200 }), /safety margin/);
    await assert.rejects(client.lock("job:bad", { ttlMs: 1_000, renewEveryMs: 900 }), /no time to renew/);
    await assert.rejects(
      client.using("job:bad", { ttlMs: 1_000, limit: 2, mode: "read" } as never, () => 0),
      TypeError,
    );
    assert.equal((await server.call("GET", "/locks/job:bad")).status, 404);
    assert.throws(() => new Client("ftp://127.0.0.1:1"), /expected http:\/\/ or https:\/\//);
    assert.throws(() => new Client("http://127.0.0.1:1", { authToken: "two words" }), TypeError);
  });
});
