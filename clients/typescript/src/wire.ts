/**
 * The HTTP API's words: the kinds and their paths, the acquire bodies, and the answers read
 * back into {@link LeaseInfo}s and {@link NotAcquired}. The contract is `docs/SPEC.md`.
 *
 * @module
 */

import "./dispose";

import { FencelockError } from "./errors";
import { bigintOf } from "./json";

/** The three namespaces: `/locks/x`, `/semaphores/x` and `/rwlocks/x` are unrelated. */
export type Kind = "lock" | "semaphore" | "rwlock";

/** How a read-write lock is held: by many readers, or by one writer. */
export type Mode = "read" | "write";

/** One lease as the server last told of it: a lock's lease, a semaphore's permit or a read-write lock's hold. */
export interface LeaseInfo {
  readonly kind: Kind;
  /** The lock's resource, or the semaphore's or read-write lock's name. */
  readonly name: string;
  readonly owner: string;
  /** The fencing token: greater than every token issued for this name before. */
  readonly token: bigint;
  /** When it was granted, by the server's clock. */
  readonly acquiredAt: Date;
  /** When it ends unless renewed, by the server's clock: for people, never for deciding (the guard counts on this process's clock). */
  readonly expiresAt: Date;
  /** Its cap on holding (`maxHoldMs`), if it has one: no renewal keeps it past this. */
  readonly holdUntil?: Date;
  /** A permit's semaphore limit. */
  readonly limit?: number;
  /** A hold's mode. */
  readonly mode?: Mode;
  /** On a server with authentication on, the principal that holds it. */
  readonly principal?: string;
}

/** What one acquire asks for. */
export type Target =
  | { readonly kind: "lock"; readonly name: string }
  | { readonly kind: "semaphore"; readonly name: string; readonly limit: number }
  | { readonly kind: "rwlock"; readonly name: string; readonly mode: Mode }
  /** Several locks, all or none (`POST /locks`). */
  | { readonly kind: "locks"; readonly names: readonly string[] };

/** The names a target asks for. */
export function namesOf(target: Target): readonly string[] {
  return target.kind === "locks" ? target.names : [target.name];
}

/** The namespace of what a target holds (several locks are locks). */
export function kindOf(target: Target): Kind {
  return target.kind === "locks" ? "lock" : target.kind;
}

const COLLECTIONS: Record<Kind, string> = { lock: "/locks", semaphore: "/semaphores", rwlock: "/rwlocks" };

/** The path of `name` of `kind`: where it is acquired, renewed (`…/renew`) and released. */
export function pathOf(kind: Kind, name: string): string {
  // Every reserved character, `/` included, is escaped: the name is one path segment.
  return `${COLLECTIONS[kind]}/${encodeURIComponent(name)}`;
}

/** Where to POST an acquire of `target`, and its body's members besides the wait. */
export function acquireRequest(
  target: Target,
  owner: string,
  ttlMs: number,
  maxHoldMs: number | undefined,
): { path: string; fields: Record<string, unknown> } {
  const fields: Record<string, unknown> = { owner, ttl_ms: ttlMs };
  if (maxHoldMs !== undefined) fields.max_hold_ms = maxHoldMs;
  switch (target.kind) {
    case "lock":
      return { path: pathOf("lock", target.name), fields };
    case "locks":
      return { path: "/locks", fields: { ...fields, resources: target.names } };
    case "semaphore":
      return { path: pathOf("semaphore", target.name), fields: { ...fields, limit: target.limit } };
    case "rwlock":
      return { path: pathOf("rwlock", target.name), fields: { ...fields, mode: target.mode } };
  }
}

/**
 * An acquire that was not granted: the name is held by others (or, with a lock-delay,
 * closed for a while). Not an error: a normal outcome, told by `acquired === false`.
 *
 * Disposing it does nothing, so `await using lease = await client.lock(…)` works whatever
 * the outcome.
 */
export class NotAcquired implements AsyncDisposable {
  readonly acquired = false as const;
  readonly kind: Kind;
  /** The names asked for. */
  readonly names: readonly string[];
  /** Those of them held by others (for several locks, as the server listed them). */
  readonly held: readonly string[];
  /** The leases in the way, as far as the answer shows them (a lock's holder, a semaphore's permits, a read-write lock's holders). */
  readonly holders: readonly LeaseInfo[];
  /** For a semaphore: how many permits are held (the server counts them even where it lists none). */
  readonly holderCount: number;
  /** For a read-write lock: the mode it is held in. */
  readonly heldMode?: Mode;
  /**
   * About how long, in milliseconds, until it may be free: until the holder's lease ends
   * (`expires_in_ms`), the first permit or hold ends (`retry_in_ms`), or the lock-delay
   * (`retry_after_ms`) is over. Undefined when the server did not say.
   */
  readonly retryInMs?: number;
  /** The server was shutting down: not acquired, holder unknown. */
  readonly shuttingDown: boolean;

  constructor(kind: Kind, names: readonly string[], body: Record<string, unknown>) {
    this.kind = kind;
    this.names = names;
    this.held = stringsOf(body.held) ?? names;
    this.holders = holdersOf(kind, body);
    this.holderCount = typeof body.holders === "number" ? body.holders : this.holders.length;
    this.heldMode = body.mode === "read" || body.mode === "write" ? body.mode : undefined;
    this.retryInMs = [body.expires_in_ms, body.retry_in_ms, body.retry_after_ms].find(
      (ms): ms is number => typeof ms === "number",
    );
    this.shuttingDown = body.shutting_down === true;
  }

  /** The first lease in the way, if the answer shows one. */
  get holder(): LeaseInfo | undefined {
    return this.holders[0];
  }

  /** Nothing to release. */
  async [Symbol.asyncDispose](): Promise<void> {}
}

/** The leases an answer of `acquired: false` shows. */
function holdersOf(kind: Kind, body: Record<string, unknown>): LeaseInfo[] {
  if (body.holder !== undefined) return [leaseOf(kind, body.holder)];
  if (Array.isArray(body.permits)) return body.permits.map((p) => leaseOf(kind, p));
  if (Array.isArray(body.holders)) return body.holders.map((h) => leaseOf(kind, h));
  if (Array.isArray(body.refusals)) {
    const refusals = body.refusals.filter((r) => isObject(r) && r.holder !== undefined);
    return refusals.map((r) => leaseOf(kind, (r as Record<string, unknown>).holder));
  }
  return [];
}

/** The answer of an acquire of `target`: the leases granted, in the order asked, or why not. */
export function decodeAcquire(target: Target, body: unknown): LeaseInfo[] | NotAcquired {
  const kind = kindOf(target);
  const answer = objectOf(body, "the answer to an acquire");
  if (answer.acquired === false) return new NotAcquired(kind, namesOf(target), answer);
  if (answer.acquired !== true) throw invalid("the answer to an acquire has no acquired: true or false");
  const granted = { lock: answer.lock, locks: answer.locks, semaphore: answer.permit, rwlock: answer.hold }[
    target.kind
  ];
  const leases = Array.isArray(granted) ? granted : [granted];
  return leases.map((lease) => leaseOf(kind, lease));
}

/** A lease of `kind` as the server writes it. */
export function leaseOf(kind: Kind, value: unknown): LeaseInfo {
  const v = objectOf(value, "a lease");
  const name = kind === "lock" ? v.resource : v.name;
  const token = bigintOf(v.fencing_token);
  if (typeof name !== "string" || typeof v.owner !== "string" || token === undefined) {
    throw invalid(`a lease without a name, an owner or a fencing token: ${JSON.stringify(value)}`);
  }
  return {
    kind,
    name,
    owner: v.owner,
    token,
    acquiredAt: dateOf(v.acquired_at, "acquired_at"),
    expiresAt: dateOf(v.expires_at, "expires_at"),
    holdUntil: v.hold_until === undefined ? undefined : dateOf(v.hold_until, "hold_until"),
    limit: typeof v.limit === "number" ? v.limit : undefined,
    mode: v.mode === "read" || v.mode === "write" ? v.mode : undefined,
    principal: typeof v.principal === "string" ? v.principal : undefined,
  };
}

function dateOf(value: unknown, field: string): Date {
  const date = typeof value === "string" ? new Date(value) : undefined;
  if (date === undefined || Number.isNaN(date.getTime()))
    throw invalid(`${field} is not a timestamp: ${String(value)}`);
  return date;
}

function stringsOf(value: unknown): string[] | undefined {
  return Array.isArray(value) && value.every((s) => typeof s === "string") ? value : undefined;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function objectOf(value: unknown, what: string): Record<string, unknown> {
  if (!isObject(value)) throw invalid(`${what} is not a JSON object`);
  return value;
}

/** An answer no fencelock server sends: like a 503, nothing is known of the outcome. */
function invalid(message: string): FencelockError {
  return new FencelockError(`the server answered what a fencelock server does not send: ${message}`, {
    outcomeUnknown: true,
  });
}
