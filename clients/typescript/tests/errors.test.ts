/**
 * Every problem answer becomes a typed error with its `type`, `status` and `detail`: a 422
 * with its fields, a 401, a 403 for a missing right, a 503 whose outcome is unknown (a
 * server whose store is gone); a server that cannot be reached or does not answer; and TLS
 * with a CA file.
 */

import assert from "node:assert/strict";
import * as net from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { ConnectionError, Client, ProblemError } from "fencelock";

import { freePort, principals, TestRedis, TestServer, tempDir } from "./support/server";
import { testCertificates } from "./support/tls";

/** `error` as a problem of `kind` and `status`, failing the test otherwise. */
function problem(error: unknown, kind: string, status: number): ProblemError {
  assert.ok(error instanceof ProblemError, `not a ProblemError: ${String(error)}`);
  assert.equal(error.kind, kind);
  assert.equal(error.type, `urn:fencelock:problem:${kind}`);
  assert.equal(error.status, status);
  assert.ok(error.detail.length > 0, "a detail");
  return error;
}

describe("errors", () => {
  let server: TestServer;
  let client: Client;

  before(async () => {
    server = await TestServer.start();
    client = new Client(server.url, { owner: "worker" });
  });
  after(async () => {
    client.close();
    await server.stop();
  });

  it("a 422 lists each invalid field, and nothing is acquired", async () => {
    await assert.rejects(client.semaphore("pool", 0, { ttlMs: 1_000, owner: " " }), (error) => {
      const invalid = problem(error, "invalid-fields", 422);
      assert.deepEqual(invalid.errors.map((e) => e.field).sort(), ["limit", "owner"]);
      assert.ok(invalid.errors.every((e) => e.message.length > 0));
      assert.equal(invalid.outcomeUnknown, false);
      return true;
    });
    assert.equal((await server.call("GET", "/semaphores/pool")).status, 404);
  });

  it("a server with authentication on answers 401 without a token, and 403 `denied` for a right the principal lacks", async () => {
    const dir = tempDir();
    const auth = principals(dir.path, { viewer: ["read"] });
    const guarded = await TestServer.start({ args: ["--auth", auth.file] });
    const anonymous = new Client(guarded.url, { authToken: undefined });
    const viewer = new Client(guarded.url, { authToken: auth.tokens.viewer });
    try {
      await assert.rejects(
        anonymous.lock("payment:1", { ttlMs: 1_000 }),
        (error) => !!problem(error, "unauthorized", 401),
      );
      await assert.rejects(viewer.lock("payment:1", { ttlMs: 1_000 }), (error) => !!problem(error, "denied", 403));
    } finally {
      [anonymous, viewer].forEach((c) => c.close());
      await guarded.stop();
      dir.remove();
    }
  });

  it("a 503 says the outcome is unknown, and a held lease is in jeopardy, then lost, while the store is gone", async () => {
    const redis = await TestRedis.start();
    const onRedis = await TestServer.start({ store: redis.address });
    const holder = new Client(onRedis.url, { owner: "holder" });
    try {
      const lease = await holder.lock("payment:2", { ttlMs: 1_500 });
      assert.ok(lease.acquired);
      const jeopardy = new Promise((resolve) => lease.addEventListener("jeopardy", resolve));
      await redis.kill();
      await assert.rejects(holder.lock("payment:3", { ttlMs: 1_000 }), (error) => {
        const unavailable = problem(error, "store-unavailable", 503);
        assert.equal(unavailable.outcomeUnknown, true);
        return true;
      });
      await jeopardy;
      assert.equal(lease.state, "jeopardy", "a 503 to a renewal is a failure, not a refusal");
      const lost = await lease.lost;
      assert.equal(lost.reason, "not-renewed");
      assert.match(lost.message, /503/);
      // The release cannot be made either: the lease ends at its expiry.
      await assert.rejects(lease.release(), (error) => !!problem(error, "store-unavailable", 503));
    } finally {
      holder.close();
      await onRedis.stop();
    }
  });

  it("a server that cannot be reached, or does not answer in time, is a ConnectionError", async () => {
    const nobody = new Client(`http://127.0.0.1:${await freePort()}`);
    await assert.rejects(nobody.lock("x", { ttlMs: 1_000 }), (error) => {
      assert.ok(error instanceof ConnectionError);
      assert.equal(error.outcomeUnknown, false, "nothing was sent");
      assert.match(error.message, /cannot be reached/);
      return true;
    });

    // A port that accepts connections and never answers.
    const sockets: net.Socket[] = [];
    const silent = net.createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const { port } = silent.address() as net.AddressInfo;
    const hung = new Client(`http://127.0.0.1:${port}`, { requestTimeoutMs: 300 });
    try {
      await assert.rejects(hung.lock("x", { ttlMs: 1_000 }), (error) => {
        assert.ok(error instanceof ConnectionError);
        assert.equal(error.outcomeUnknown, true, "the request was sent");
        assert.match(error.message, /did not answer within 300 ms/);
        return true;
      });
    } finally {
      hung.close();
      sockets.forEach((s) => s.destroy());
      silent.close();
    }
  });

  it("an https:// server is trusted through the CA file given, and refused without it", async () => {
    const dir = tempDir();
    const certificates = testCertificates(dir.path);
    const tls = await TestServer.start({
      tls: true,
      args: ["--tls-cert", certificates.cert, "--tls-key", certificates.key],
    });
    const trusting = new Client(tls.url, { caFile: certificates.ca, owner: "tls" });
    const untrusting = new Client(tls.url);
    try {
      assert.match(tls.url, /^https:/);
      const lease = await trusting.lock("secure", { ttlMs: 5_000 });
      assert.ok(lease.acquired);
      await lease.release();
      await assert.rejects(untrusting.lock("secure", { ttlMs: 5_000 }), (error) => {
        assert.ok(error instanceof ConnectionError);
        assert.match(error.message, /TLS handshake/);
        assert.equal(error.outcomeUnknown, false);
        return true;
      });
      assert.throws(
        () => new Client(tls.url, { caFile: join(dir.path, "missing.pem") }),
        /cannot read the CA file .*missing\.pem/,
      );
    } finally {
      [trusting, untrusting].forEach((c) => c.close());
      await tls.stop();
      dir.remove();
    }
  });
});
