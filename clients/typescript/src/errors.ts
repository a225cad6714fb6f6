/**
 * What can go wrong: a call that failed ({@link FencelockError}, with the server's problem in
 * a {@link ProblemError}), and a lease that can no longer be trusted ({@link LostError}).
 *
 * A lock held by someone else is neither: acquiring answers a `NotAcquired`.
 *
 * @module
 */

/** A call to the server that failed: it could not be made, or the server refused it. */
export class FencelockError extends Error {
  /**
   * Whether the server may have done what was asked even so: a 503 (its store may have
   * applied the change before it failed to answer), a timeout, a connection cut during the
   * request. An acquire by the same owner is safe to retry (it extends); read the lease
   * before retrying a release. False when the request surely had no effect (refused before
   * anything was done, or never sent).
   */
  readonly outcomeUnknown: boolean;

  constructor(message: string, options: { outcomeUnknown: boolean; cause?: unknown }) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.outcomeUnknown = options.outcomeUnknown;
  }
}

/** The server could not be reached, the TLS handshake failed, or no answer came in time. */
export class ConnectionError extends FencelockError {}

/**
 * The short name of every problem type the server answers with: the last part of its
 * `type` (`urn:fencelock:problem:<kind>`).
 */
export type ProblemKind =
  | "bad-request"
  | "unauthorized"
  | "forbidden"
  | "denied"
  | "not-found"
  | "no-route"
  | "method-not-allowed"
  | "request-timeout"
  | "conflict"
  | "limit-mismatch"
  | "deadlock"
  | "payload-too-large"
  | "unsupported-media-type"
  | "invalid-fields"
  | "too-many-requests"
  | "internal"
  | "store-unavailable";

/** One invalid field of a request, as a 422 lists them. */
export interface FieldError {
  /** A body member (`owner`, `ttl_ms`, …), or `resource`/`name` for the path. */
  readonly field: string;
  /** What is wrong with it, e.g. `must be a JSON integer from 1 to 86400000`. */
  readonly message: string;
}

const PROBLEM_PREFIX = "urn:fencelock:problem:";

/** The members of an RFC 9457 problem that {@link ProblemError} carries. */
export interface Problem {
  /** A URI naming the kind of problem, e.g. `urn:fencelock:problem:forbidden`. */
  readonly type: string;
  /** The HTTP status code. */
  readonly status: number;
  /** A short summary, the same for every problem of a type. */
  readonly title: string;
  /** What happened this time. */
  readonly detail: string;
  /** The request's path. */
  readonly instance?: string;
  /** For 422: every invalid field. */
  readonly errors?: readonly FieldError[];
  /** For `limit-mismatch`: the limit of the semaphore's live permits. */
  readonly limit?: number;
}

/**
 * An answer of the server that is an `application/problem+json` (or, from something in
 * between such as a proxy, another error status: then `type` is `about:blank`).
 *
 * Tell problems apart by {@link kind} (or `type`), never by status alone: 409 is `conflict`,
 * `limit-mismatch` or `deadlock`, 403 `forbidden` (another owner's lease) or `denied` (a right
 * the caller lacks).
 */
export class ProblemError extends FencelockError implements Problem {
  readonly type: string;
  readonly status: number;
  readonly title: string;
  readonly detail: string;
  readonly instance?: string;
  readonly errors: readonly FieldError[];
  readonly limit?: number;
  /** From the answer's `Retry-After` (429, and 503 where given), in milliseconds. */
  readonly retryAfterMs?: number;

  constructor(problem: Problem, retryAfterMs?: number) {
    const fields = problem.errors?.map((e) => `${e.field}: ${e.message}`).join("; ");
    super(`${problem.status} ${problem.title} ${fields || problem.detail}`.trim(), {
      // The SPEC: a 503 means the store may or may not have done it.
      outcomeUnknown: problem.status === 503,
    });
    this.type = problem.type;
    this.status = problem.status;
    this.title = problem.title;
    this.detail = problem.detail;
    this.instance = problem.instance;
    this.errors = problem.errors ?? [];
    this.limit = problem.limit;
    this.retryAfterMs = retryAfterMs;
  }

  /** The problem's kind, from its `type`; undefined for a type this client does not know. */
  get kind(): ProblemKind | undefined {
    if (!this.type.startsWith(PROBLEM_PREFIX)) return undefined;
    return this.type.slice(PROBLEM_PREFIX.length) as ProblemKind;
  }
}

/** Why a lease is lost. */
export type LostReason =
  /** The server has no live lease: it expired, or an administrator force-released it (404). */
  | "gone"
  /** Another owner, or another principal, holds it now (403). */
  | "taken"
  /** This owner holds a newer lease on the name, with another fencing token (409). */
  | "superseded"
  /** Renewals kept failing until only the safety margin was left, or the grant came too late. */
  | "not-renewed"
  /** The lease reached its cap on holding (`maxHoldMs`): no renewal can keep it longer. */
  | "cap-reached"
  /** The holder released it (the end of `using`, `await using`, or `release()`). */
  | "released";

const LOST_MESSAGES: Record<LostReason, string> = {
  gone: "the lease is gone: it expired or was force-released",
  taken: "the lock was taken by another owner",
  superseded: "this owner holds a newer lease on the name",
  "not-renewed": "the lease could not be renewed in time",
  "cap-reached": "the lease reached its cap on holding: no renewal can keep it longer",
  released: "the lease was released",
};

/**
 * The reason a lease's `signal` is aborted with: from then on, the holder can no longer be
 * sure to hold the lease, and must stop working on what it protects.
 */
export class LostError extends Error {
  /** Why. */
  readonly reason: LostReason;
  /** The name whose lease the server refused to renew (for several locks, which one), if that is why. */
  readonly lostOn?: string;

  constructor(reason: LostReason, detail?: { lostOn?: string; lastError?: string }) {
    const on = detail?.lostOn === undefined ? "" : ` (${detail.lostOn})`;
    const last = detail?.lastError === undefined ? "" : `: ${detail.lastError}`;
    super(`${LOST_MESSAGES[reason]}${on}${last}`);
    this.name = "LostError";
    this.reason = reason;
    this.lostOn = detail?.lostOn;
  }
}
