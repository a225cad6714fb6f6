/**
 * {@link Client}: the calls that acquire — a lock, several locks all or none, a semaphore's
 * permit, a read-write lock's hold — and {@link Client.using}, which holds one while a
 * function runs.
 *
 * @module
 */

import { readFileSync } from "node:fs";
import { hostname } from "node:os";

import { failure, Http } from "./http";
import { stringify } from "./json";
import { Lease, timingOf } from "./lease";
import { acquireRequest, decodeAcquire, NotAcquired, type Mode, type Target } from "./wire";

/** The environment variable a {@link Client} reads its bearer token from, as the `fencelock` commands do. */
export const AUTH_TOKEN_VAR = "FENCELOCK_AUTH_TOKEN";

/** The environment variable a {@link Client} reads the path of the CAs to trust (PEM) from, as the commands do. */
export const CACERT_VAR = "FENCELOCK_CACERT";

/** How a {@link Client} talks to its server. */
export interface ClientOptions {
  /** Sent as `Authorization: Bearer …` (`fencelock auth new-token` makes one). Default: `$FENCELOCK_AUTH_TOKEN`, if set. */
  readonly authToken?: string;
  /** For `https://`: a PEM file of the CAs to trust, in place of Node's. Default: `$FENCELOCK_CACERT`, if set. */
  readonly caFile?: string;
  /**
   * Who holds what this client acquires, unless an acquire names another. Acquires by one
   * owner extend each other's lease (same token): they do not exclude each other. Default:
   * `HOST:PID:N`, with N new for every acquire, so that two holders in one process exclude
   * each other as two processes do.
   */
  readonly owner?: string;
  /** The longest one request may take, a waiting acquire's wait not counted. Default 10 s. */
  readonly requestTimeoutMs?: number;
  /**
   * The longest `wait_ms` one request carries; a longer wait is sent as several waiting
   * requests in a row. Default 300 s, the server's default `--max-wait`: set it to that of
   * your server if it is lower.
   */
  readonly maxWaitPerRequestMs?: number;
}

/** What every acquire takes. */
export interface AcquireOptions {
  /** How long the lease lasts from each grant or renewal, in whole milliseconds (≥ 1). */
  readonly ttlMs: number;
  /** How long to wait in line (first come, first served) while it is held by others. Default 0: answer at once. */
  readonly waitMs?: number;
  /** The owner, in place of the client's (see {@link ClientOptions.owner}). */
  readonly owner?: string;
  /** How often to renew. Default: a third of the TTL. */
  readonly renewEveryMs?: number;
  /** How long before the lease's end to declare it lost if renewals keep failing. Default: a fifth of the TTL. */
  readonly safetyMarginMs?: number;
}

/** What acquiring locks takes: also a cap on holding. */
export interface LockOptions extends AcquireOptions {
  /**
   * A cap on holding, measured from the grant: no renewal keeps the lease past it, and the
   * lease is lost a safety margin before it (reason `cap-reached`). Locks only.
   */
  readonly maxHoldMs?: number;
}

/**
 * What {@link Client.using} takes: a lock by default; with `limit`, one permit of a
 * semaphore of that many; with `mode`, a read or write hold of a read-write lock (as
 * `fencelock run NAME --limit N` and `--mode read|write` do).
 */
export type UsingOptions =
  | (LockOptions & { readonly limit?: undefined; readonly mode?: undefined })
  | (AcquireOptions & { readonly limit: number; readonly mode?: undefined })
  | (AcquireOptions & { readonly mode: Mode; readonly limit?: undefined });

/** Whatever is acquired: a {@link Lease} (`acquired: true`), or {@link NotAcquired} (`acquired: false`). */
export type Acquired = Lease | NotAcquired;

/**
 * A client of one fencelock server. Cheap to keep: it holds a pool of keep-alive
 * connections; make one per server and share it.
 *
 * ```ts
 * const client = new Client("http://127.0.0.1:7070");
 * await client.using("payment:42", { ttlMs: 30_000 }, async (lease, signal) => {
 *   await charge(order, { fencingToken: lease.token, signal });
 * });
 * ```
 */
export class Client {
  private readonly http: Http;
  private readonly owner?: string;
  private readonly requestTimeoutMs: number;
  private readonly maxWaitPerRequestMs: number;

  /**
   * A client of the server at `url` (`http://HOST:PORT` or `https://…`, with a path prefix
   * for a server behind a reverse proxy). Sends nothing yet. Throws a TypeError for an
   * address or token that cannot work, and an Error naming the file for a CA file that
   * cannot be read.
   */
  constructor(url: string | URL, options: ClientOptions = {}) {
    const address = serverAddress(url);
    const authToken = options.authToken ?? fromEnv(AUTH_TOKEN_VAR);
    // A header value with a space or a control character would be refused or, worse, split.
    if (authToken !== undefined && !/^[\x21-\x7e]+$/.test(authToken)) {
      throw new TypeError(
        "the auth token must be printable ASCII without spaces, as `fencelock auth new-token` prints it",
      );
    }
    const caFile = options.caFile ?? fromEnv(CACERT_VAR);
    this.http = new Http(address, { authToken, ca: caFile === undefined ? undefined : readCa(caFile) });
    this.owner = options.owner;
    this.requestTimeoutMs = whole(options.requestTimeoutMs ?? 10_000, "requestTimeoutMs", 1);
    this.maxWaitPerRequestMs = whole(options.maxWaitPerRequestMs ?? 300_000, "maxWaitPerRequestMs", 1);
  }

  /** The server's address, without a trailing `/`. */
  get url(): string {
    return this.http.base;
  }

  /**
   * Acquires the lock `name`: a {@link Lease}, renewed in the background until released or
   * lost, or {@link NotAcquired} (held by another owner; with `waitMs`, still held when the
   * wait ran out). A refused request rejects with a {@link ProblemError}, an unreachable
   * server with a {@link ConnectionError}, and a grant that came after a wait but was gone
   * before the guard could confirm it with a {@link LostError} (the same holds for every
   * acquire call).
   *
   * ```ts
   * await using lease = await client.lock("report:daily", { ttlMs: 30_000 });
   * if (!lease.acquired) return console.log(`held by ${lease.holder?.owner}`);
   * ```
   */
  lock(name: string, options: LockOptions): Promise<Acquired> {
    return this.acquire({ kind: "lock", name }, options);
  }

  /**
   * Acquires every lock of `names` (1 to 64 distinct names) or none, waiting for all of them
   * at once and holding none meanwhile. One {@link Lease} holds them: renewed together, lost
   * as soon as one is; each has its own token ({@link Lease.tokenOf}).
   */
  locks(names: readonly string[], options: LockOptions): Promise<Acquired> {
    return this.acquire({ kind: "locks", names }, options);
  }

  /**
   * Acquires one permit of the semaphore `name`, of which at most `limit` are held at once.
   * Every permit is a lease of its own, with its own token. A `limit` other than that of the
   * live permits rejects with a {@link ProblemError} of kind `limit-mismatch`.
   */
  semaphore(name: string, limit: number, options: AcquireOptions): Promise<Acquired> {
    return this.acquire({ kind: "semaphore", name, limit }, options);
  }

  /** Acquires the read-write lock `name` for reading: shared with other readers, never with a writer. */
  readLock(name: string, options: AcquireOptions): Promise<Acquired> {
    return this.acquire({ kind: "rwlock", name, mode: "read" }, options);
  }

  /** Acquires the read-write lock `name` for writing: alone. A waiting writer is not starved by later readers. */
  writeLock(name: string, options: AcquireOptions): Promise<Acquired> {
    return this.acquire({ kind: "rwlock", name, mode: "write" }, options);
  }

  /**
   * Runs `fn` while holding `target` — a lock, or several locks all or none; a semaphore's
   * permit with `limit`, a read-write lock's hold with `mode` — and releases it (with its
   * token) when `fn` ends, also when it throws or is cancelled. `signal` is aborted, with a
   * {@link LostError}, the moment the lease is lost: pass it to the work.
   *
   * Resolves to what `fn` returns, or to {@link NotAcquired} without running `fn`. A release
   * that fails at the end is a process warning, not an error: the lease ends at its expiry.
   */
  async using<T>(
    target: string | readonly string[],
    options: UsingOptions,
    fn: (lease: Lease, signal: AbortSignal) => T | Promise<T>,
  ): Promise<T | NotAcquired> {
    const lease = await this.acquire(usingTarget(target, options), options);
    if (!lease.acquired) return lease;
    try {
      return await fn(lease, lease.signal);
    } finally {
      await lease.releaseAtExit();
    }
  }

  /** Closes the idle connections to the server (leases still held keep renewing on new ones). */
  close(): void {
    this.http.close();
  }

  private async acquire(target: Target, options: LockOptions): Promise<Acquired> {
    const ttlMs = whole(options.ttlMs, "ttlMs", 1);
    const waitMs = whole(options.waitMs ?? 0, "waitMs", 0);
    const maxHoldMs = options.maxHoldMs === undefined ? undefined : whole(options.maxHoldMs, "maxHoldMs", 1);
    const timing = timingOf(ttlMs, this.requestTimeoutMs, options.renewEveryMs, options.safetyMarginMs);
    if (maxHoldMs !== undefined && maxHoldMs <= timing.safetyMarginMs) {
      throw new RangeError(
        `a cap on holding of ${maxHoldMs} ms is no longer than the safety margin (${timing.safetyMarginMs} ms): the lease would start lost`,
      );
    }
    const { path, fields } = acquireRequest(target, options.owner ?? this.owner ?? defaultOwner(), ttlMs, maxHoldMs);
    const deadline = performance.now() + waitMs;
    for (;;) {
      const wait = Math.min(Math.max(0, Math.round(deadline - performance.now())), this.maxWaitPerRequestMs);
      const body = stringify(wait > 0 ? { ...fields, wait_ms: wait } : fields);
      const sent = performance.now();
      const answer = await this.http.send("POST", path, body, this.requestTimeoutMs + wait);
      if (answer.status !== 200) throw failure(answer);
      const outcome = decodeAcquire(target, answer.body);
      if (!(outcome instanceof NotAcquired)) return Lease.start(this.http, outcome, sent, timing, maxHoldMs);
      // A wait longer than one request carries is several requests in a row; an answer
      // that came before its wait ran out (a server shutting down, no room to wait) ends it.
      const waitedOut = wait > 0 && performance.now() - sent >= wait;
      if (!waitedOut || performance.now() >= deadline) return outcome;
    }
  }
}

/** How many acquires this process made without an owner: each gets one of its own. */
let acquiresWithoutOwner = 0;

/**
 * `HOST:PID:N`, new for every acquire: in one Node process many tasks run at once, and two
 * of them acquiring as one owner would both hold the lock (the second acquire extends the
 * first's lease, with the same token).
 */
function defaultOwner(): string {
  acquiresWithoutOwner += 1;
  return `${hostname()}:${process.pid}:${acquiresWithoutOwner}`;
}

/** What {@link Client.using} acquires for `target` and `options`. */
function usingTarget(target: string | readonly string[], options: UsingOptions): Target {
  const { limit, mode } = options;
  if (limit !== undefined && mode !== undefined)
    throw new TypeError("give a semaphore's limit or a read-write lock's mode, not both");
  if (typeof target !== "string") {
    if (limit !== undefined || mode !== undefined)
      throw new TypeError("several names are locks: a limit or a mode needs one name");
    return { kind: "locks", names: target };
  }
  if (limit !== undefined) return { kind: "semaphore", name: target, limit };
  if (mode !== undefined) return { kind: "rwlock", name: target, mode };
  return { kind: "lock", name: target };
}

function serverAddress(url: string | URL): URL {
  let address: URL;
  try {
    address = new URL(url);
  } catch {
    throw new TypeError(`invalid server address ${JSON.stringify(String(url))}: not a URL`);
  }
  const refuse = (why: string) => new TypeError(`invalid server address ${JSON.stringify(address.href)}: ${why}`);
  if (address.protocol !== "http:" && address.protocol !== "https:") throw refuse("expected http:// or https://");
  if (address.hostname === "") throw refuse("it has no host");
  if (address.search !== "" || address.hash !== "") throw refuse("it must not have a query or a fragment");
  return address;
}

function fromEnv(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value === "" ? undefined : value;
}

function readCa(file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    throw new Error(`cannot read the CA file ${file}: ${(error as Error).message}`, { cause: error });
  }
}

/** `value` if it is a whole number of milliseconds of at least `min`; a RangeError naming `field` otherwise. */
function whole(value: number, field: string, min: number): number {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${field} must be a whole number of milliseconds, at least ${min}: not ${String(value)}`);
  }
  return value;
}
