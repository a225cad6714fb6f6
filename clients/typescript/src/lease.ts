/**
 * {@link Lease}: a lease kept alive in the background, whose `signal` is aborted as soon as
 * its holder can no longer be sure to hold it — before anyone else can be granted it.
 *
 * # How the guard counts time
 *
 * Never by the server's wall clock (two machines' clocks disagree), always by this process's
 * monotonic clock (`performance.now()`), from the moment each grant or renewal request was
 * **sent**: the server set `expires_at = its now + TTL`, and its now was not before the send,
 * so the lease lasts at least until `sent + TTL`. Counting from the answer instead would add
 * the request's whole round trip to the lease.
 *
 * # When it gives up
 *
 * Renewals go out every third of the TTL; failed ones are retried with a growing pause, and
 * the lease is *in jeopardy* until one succeeds. It is **lost** as soon as:
 * - the server refuses a renewal: 404 (it expired or was force-released), 403 (another owner
 *   or principal holds it), 409 (this owner holds a newer lease);
 * - renewals failed until only the safety margin (a fifth of the TTL) is left before
 *   `sent + TTL`: the margin is the holder's time to stop before anyone else can be granted
 *   the name, and it absorbs the drift between this machine's clock rate and the server's;
 * - the lease has a cap (`hold_until`) and only the margin is left before it;
 * - the grant was answered so late that only the margin, or less, was left: it starts lost.
 *
 * Nothing here helps a process that is stopped whole (a pause, a stopped VM): that is what
 * the fencing token is for. Pass {@link Lease.token} to the protected resource with every write.
 *
 * @module
 */

import "./dispose";

import { LostError, type LostReason } from "./errors";
import { failure, TimeoutError, type Http } from "./http";
import { stringify } from "./json";
import { leaseOf, pathOf, type Kind, type LeaseInfo } from "./wire";

/** `performance.now()`: this process's monotonic clock, in milliseconds. */
const now = (): number => performance.now();

/** How a guard renews its lease and when it gives up, for one TTL. */
export interface Timing {
  readonly ttlMs: number;
  /** How often to renew: a third of the TTL by default, so two renewals may fail before the margin. */
  readonly renewEveryMs: number;
  /** How long before the lease's end the guard gives up: a fifth of the TTL by default. */
  readonly safetyMarginMs: number;
  /** The longest one request may take. */
  readonly requestTimeoutMs: number;
}

/** The timing of a guard over a lease of `ttlMs`; a RangeError if it leaves no time to renew. */
export function timingOf(
  ttlMs: number,
  requestTimeoutMs: number,
  renewEveryMs?: number,
  safetyMarginMs?: number,
): Timing {
  const timing = {
    ttlMs,
    renewEveryMs: renewEveryMs ?? ttlMs / 3,
    safetyMarginMs: safetyMarginMs ?? ttlMs / 5,
    requestTimeoutMs,
  };
  // A renewal must be due before the guard gives up, or it would only ever run out its grant.
  if (
    !(timing.renewEveryMs > 0) ||
    !(timing.safetyMarginMs >= 0) ||
    timing.renewEveryMs + timing.safetyMarginMs >= ttlMs
  ) {
    throw new RangeError(
      `renewing every ${timing.renewEveryMs} ms with a safety margin of ${timing.safetyMarginMs} ms leaves no time to renew a lease of ${ttlMs} ms: their sum must be below the TTL`,
    );
  }
  return timing;
}

/** A refused renewal: the lease is not this holder's any more. */
type Refusal = Extract<LostReason, "gone" | "taken" | "superseded">;

/** One lease a guard keeps, and how long it surely lasts on this process's clock. */
interface Kept {
  readonly info: LeaseInfo;
  /** The lease is surely live before this: its last confirmed send plus the TTL, cut at its cap. */
  readonly until: number;
  /** Where its cap falls on this clock, never later than the server's `hold_until`; undefined: none. */
  readonly cap?: number;
}

/** `info` as granted by a request sent at `sent` that asked for `ttlMs` and `maxHoldMs`. */
function granted(info: LeaseInfo, sent: number, ttlMs: number, maxHoldMs: number | undefined): Kept {
  // The server measured the cap from `acquired_at`, its now at the grant: not before the send.
  // A server that keeps no cap gets the one asked for kept here, so the holder never counts on more.
  const cap =
    info.holdUntil !== undefined
      ? sent + (info.holdUntil.getTime() - info.acquiredAt.getTime())
      : maxHoldMs === undefined
        ? undefined
        : sent + maxHoldMs;
  return { info, cap, until: cut(sent + ttlMs, cap) };
}

/** `kept`, renewed to `info` for `ttlMs` by a request sent at `sent`. */
function renewed(kept: Kept, info: LeaseInfo, sent: number, ttlMs: number): Kept {
  let cap = kept.cap;
  if (info.holdUntil !== undefined && info.expiresAt < info.holdUntil) {
    // Not cut at the cap: the server renewed at `expires_at - ttl`, not before the send, so
    // the cap is at least this far from the send — far closer than the grant's bound after a wait.
    const seen = sent + ttlMs + (info.holdUntil.getTime() - info.expiresAt.getTime());
    cap = cap === undefined ? seen : Math.max(cap, seen);
  }
  return { info, cap, until: cut(sent + ttlMs, cap) };
}

function cut(until: number, cap: number | undefined): number {
  return cap === undefined ? until : Math.min(until, cap);
}

/** What a round of renewals, one per lease, came to. */
interface Round {
  /** Each lease renewed, or undefined where its renewal failed. */
  readonly renewed: (LeaseInfo | undefined)[];
  /** The first lease the server refused, if one was. */
  readonly refused?: { readonly at: number; readonly reason: Refusal };
  /** Why the first failed renewal failed, if one did. */
  readonly error?: string;
  /** Whether every failed renewal failed by getting no answer in time. */
  readonly timedOut: boolean;
}

/** Renews every lease of `infos` at once, each carrying its token, each within `timeoutMs`. */
async function renewAll(http: Http, infos: readonly LeaseInfo[], ttlMs: number, timeoutMs: number): Promise<Round> {
  const answers = await Promise.allSettled(infos.map((info) => renewOne(http, info, ttlMs, timeoutMs)));
  const round: { -readonly [K in keyof Round]: Round[K] } = { renewed: [], timedOut: true };
  answers.forEach((answer, at) => {
    if (answer.status === "fulfilled" && typeof answer.value === "object") {
      round.renewed.push(answer.value);
      return;
    }
    round.renewed.push(undefined);
    if (answer.status === "fulfilled") {
      round.refused ??= { at, reason: answer.value as Refusal };
    } else {
      const message = answer.reason instanceof Error ? answer.reason.message : String(answer.reason);
      round.error ??= infos.length > 1 ? `${infos[at].name}: ${message}` : message;
      round.timedOut &&= answer.reason instanceof TimeoutError;
    }
  });
  return round;
}

async function renewOne(http: Http, info: LeaseInfo, ttlMs: number, timeoutMs: number): Promise<LeaseInfo | Refusal> {
  const body = stringify({ owner: info.owner, ttl_ms: Math.round(ttlMs) }, info.token);
  const answer = await http.send("POST", `${pathOf(info.kind, info.name)}/renew`, body, timeoutMs);
  if (answer.status === 200) return leaseOf(info.kind, answer.body);
  const refusal = refusalOf(answer.problem?.kind);
  if (refusal === undefined) throw failure(answer);
  return refusal;
}

/** Releases `info` (carrying its token): done, or already not this holder's (not an error here). */
async function releaseOne(http: Http, info: LeaseInfo, timeoutMs: number): Promise<void> {
  const body = stringify({ owner: info.owner }, info.token);
  const answer = await http.send("DELETE", pathOf(info.kind, info.name), body, timeoutMs);
  if (answer.status !== 204 && refusalOf(answer.problem?.kind) === undefined) throw failure(answer);
}

/**
 * A refusal of a renewal or release, told by the problem's type: a 403 `denied` (a right the
 * caller lacks) or a 404 `no-route` is an error, not the lease's end.
 */
function refusalOf(kind: string | undefined): Refusal | undefined {
  switch (kind) {
    case "not-found":
      return "gone";
    case "forbidden":
      return "taken";
    case "conflict":
      return "superseded";
    default:
      return undefined;
  }
}

/** Where a {@link Lease} stands: renewed, renewals failing but surely held, or lost. */
export type LeaseState = "held" | "jeopardy" | "lost";

/**
 * A lease — a lock's, a semaphore's permit, a read-write lock's hold, or several locks taken
 * all or none — renewed in the background until it is released or lost.
 *
 * - {@link token}: pass it to the protected resource with every write.
 * - {@link signal}: aborted, with a {@link LostError} as its reason, the moment the lease is
 *   lost (and when it is released); pass it to whatever does the work.
 * - {@link jeopardy}: renewals are failing; the lease is still surely held, but start nothing long.
 * - Events: `jeopardy` (a renewal failed), `held` (renewed again after that), `lost`.
 * - {@link release}, or the end of `client.using(…)` / `await using`: stops renewing and
 *   releases, carrying the token, so a late release never frees a newer lease.
 *
 * Like a timer, a lease keeps Node running while it renews: release it.
 *
 * Acquiring a name the same owner already holds extends that lease (same token) and gives a
 * second guard over it; releasing either releases it.
 */
export class Lease extends EventTarget implements AsyncDisposable {
  readonly acquired = true as const;
  readonly kind: Kind;
  readonly owner: string;
  /** The names held, in the order asked for. */
  readonly names: readonly string[];
  /** Aborted, with a {@link LostError}, as soon as the lease is lost or released. */
  readonly signal: AbortSignal;
  /** Resolves, with why, as soon as the lease is lost or released; it never rejects. */
  readonly lost: Promise<LostError>;
  private readonly http: Http;
  private readonly timing: Timing;
  private readonly controller = new AbortController();
  private resolveLost!: (error: LostError) => void;
  private kept: Kept[];
  private current: LeaseState = "held";
  /** The lease the server refused, if that is why the guard is lost. */
  private lostOn?: number;
  private wake?: () => void;
  private releasing?: Promise<void>;

  /** Made by the client's acquire calls. */
  private constructor(http: Http, kept: Kept[], sent: number, timing: Timing, failedRenewal?: string) {
    super();
    this.http = http;
    this.kept = kept;
    this.timing = timing;
    this.kind = kept[0].info.kind;
    this.owner = kept[0].info.owner;
    this.names = kept.map((k) => k.info.name);
    this.signal = this.controller.signal;
    this.lost = new Promise((resolve) => (this.resolveLost = resolve));
    // Before anyone can read `state`: a lease that may already be another's is never "held".
    if (now() >= this.giveUpAt()) {
      this.lose(
        this.giveUpReason(),
        failedRenewal ?? "the grant was answered too late: only the safety margin, or less, was left of the lease",
      );
      return;
    }
    // Every failure inside is a failed renewal already; this only keeps a bug from going unseen.
    this.keepAlive(sent).catch((error) => this.lose("not-renewed", String(error)));
  }

  /**
   * The guard over `infos`, granted by a request sent at `sent`. A grant that came late
   * (after a wait in line) is renewed at once, so the guard counts from that renewal and not
   * from before the wait; if the server refuses one of those renewals, that lease ended
   * before it could be confirmed: the others are released (all or none), and this rejects
   * with a {@link LostError} rather than hand out the token of a lease that is gone.
   *
   * @internal
   */
  static async start(http: Http, infos: LeaseInfo[], sent: number, timing: Timing, maxHoldMs?: number): Promise<Lease> {
    const { ttlMs } = timing;
    const kept = infos.map((info) => granted(info, sent, ttlMs, maxHoldMs));
    if (now() - sent <= ttlMs / 10) return new Lease(http, kept, sent, timing);
    const resent = now();
    const round = await renewAll(http, infos, ttlMs, timing.requestTimeoutMs);
    if (round.refused !== undefined) {
      const others = infos.filter((_, at) => at !== round.refused?.at);
      await Promise.allSettled(others.map((info) => releaseOne(http, info, timing.requestTimeoutMs)));
      throw new LostError(round.refused.reason, { lostOn: infos[round.refused.at].name });
    }
    const confirmed = kept.map((k, at) => {
      const info = round.renewed[at];
      return info === undefined ? k : renewed(k, info, resent, ttlMs);
    });
    // A lease whose renewal failed may still be ours: it counts from the grant, and the
    // guard renews (or gives up) at once.
    return new Lease(http, confirmed, round.error === undefined ? resent : sent, timing, round.error);
  }

  /** The fencing token (of the first name, for several locks): pass it with every write. */
  get token(): bigint {
    return this.kept[0].info.token;
  }

  /** The fencing token of the lease on `name`, or undefined if this guard does not hold it. */
  tokenOf(name: string): bigint | undefined {
    return this.kept.find((k) => k.info.name === name)?.info.token;
  }

  /** The (first) name held. */
  get name(): string {
    return this.names[0];
  }

  /** The (first) lease as the server last confirmed it. */
  get info(): LeaseInfo {
    return this.kept[0].info;
  }

  /** Every lease held, as the server last confirmed them, in the order asked for. */
  get leases(): LeaseInfo[] {
    return this.kept.map((k) => k.info);
  }

  get state(): LeaseState {
    return this.current;
  }

  /** Renewals are failing: the lease is still surely held, but finish quickly and start nothing long. */
  get jeopardy(): boolean {
    return this.current === "jeopardy";
  }

  /** Whether the holder may still count on the lease: held or in jeopardy, not lost or released. */
  get isHeld(): boolean {
    return this.current !== "lost";
  }

  /** Why the lease was lost (or released), once it is. */
  get lostReason(): LostError | undefined {
    return this.signal.aborted ? (this.signal.reason as LostError) : undefined;
  }

  /** When the first lease ends by the server's clock, as last confirmed: for people, not for deciding. */
  get expiresAt(): Date {
    return new Date(Math.min(...this.kept.map((k) => k.info.expiresAt.getTime())));
  }

  /**
   * The moment, on `performance.now()`'s clock, before which every lease is surely live:
   * the send of the last successful grant or renewal plus the TTL, or the cap if sooner.
   */
  get heldUntil(): number {
    return Math.min(...this.kept.map((k) => k.until));
  }

  get ttlMs(): number {
    return this.timing.ttlMs;
  }

  get renewEveryMs(): number {
    return this.timing.renewEveryMs;
  }

  /** The guard gives up this long before {@link heldUntil} if renewals keep failing, or a cap ends it. */
  get safetyMarginMs(): number {
    return this.timing.safetyMarginMs;
  }

  /**
   * Stops renewing and releases every lease, each carrying its token, all at once. Resolves
   * once each is released or was no longer this holder's (expired, force-released, taken:
   * nothing to do); rejects with the first error if a release could not be made (then that
   * lease ends at its expiry). Calling it again returns the same promise.
   */
  release(): Promise<void> {
    this.releasing ??= this.releaseAll();
    return this.releasing;
  }

  /** The end of `await using`: {@link release}, with a failure reported as a process warning. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.releaseAtExit();
  }

  /**
   * {@link release} at the end of a block: a release that fails is a process warning, not an
   * error (the block's own outcome matters more, and the lease ends at its expiry).
   *
   * @internal
   */
  async releaseAtExit(): Promise<void> {
    try {
      await this.release();
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      process.emitWarning(`releasing ${this.names.join(", ")} failed; the lease ends at its expiry: ${why}`, {
        code: "FENCELOCK_RELEASE_FAILED",
      });
    }
  }

  private async releaseAll(): Promise<void> {
    const lostOn = this.lostOn;
    this.lose("released");
    // A lease the server already said is not ours is not released again.
    const mine = this.kept.filter((_, at) => at !== lostOn);
    const results = await Promise.allSettled(
      mine.map((k) => releaseOne(this.http, k.info, this.timing.requestTimeoutMs)),
    );
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  }

  /** The guard gives up at this moment if no renewal succeeds before: the margin before the first lease ends. */
  private giveUpAt(): number {
    return this.heldUntil - this.timing.safetyMarginMs;
  }

  /** The cap, if it is what ends the first lease to end (no renewal could have moved it), else failed renewals. */
  private giveUpReason(): LostReason {
    const first = this.kept.reduce((a, b) => (b.until < a.until ? b : a));
    return first.cap === first.until ? "cap-reached" : "not-renewed";
  }

  /** Marks the lease lost, once: the first reason stays. */
  private lose(reason: LostReason, lastError?: string, lostOn?: number): void {
    if (this.current === "lost") return;
    this.current = "lost";
    this.lostOn = lostOn;
    const error = new LostError(reason, {
      lostOn: lostOn === undefined ? undefined : this.names[lostOn],
      lastError: reason === "not-renewed" ? lastError : undefined,
    });
    this.wake?.();
    this.controller.abort(error);
    this.resolveLost(error);
    this.dispatchEvent(new Event("lost"));
  }

  private setState(state: "held" | "jeopardy"): void {
    if (this.current === state || this.current === "lost") return;
    this.current = state;
    this.dispatchEvent(new Event(state));
  }

  /** Sleeps until `at`, or until the guard is lost. */
  private sleepUntil(at: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, Math.max(0, at - now()));
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /**
   * Renews every lease every `renewEveryMs` from the last confirmed send, all at once;
   * retries failures with a growing pause; declares the lease lost when the server refuses
   * it, or when only the safety margin is left.
   */
  private async keepAlive(sent: number): Promise<void> {
    const { ttlMs, renewEveryMs, requestTimeoutMs } = this.timing;
    const firstRetry = Math.min(Math.max(renewEveryMs / 8, 5), 500);
    let next = sent + renewEveryMs;
    let retry = firstRetry;
    let lastError: string | undefined;
    for (;;) {
      const giveUpAt = this.giveUpAt();
      await this.sleepUntil(Math.min(next, giveUpAt));
      if (!this.isHeld) return;
      if (now() >= giveUpAt) {
        this.lose(this.giveUpReason(), lastError ?? "no renewal was attempted");
        return;
      }
      const at = now();
      // Never past the give-up point: by then the answer is of no use.
      const limit = Math.max(1, Math.min(requestTimeoutMs, giveUpAt - at));
      const round = await renewAll(this.http, this.leases, ttlMs, limit);
      if (!this.isHeld) return;
      if (round.refused !== undefined) {
        this.lose(round.refused.reason, undefined, round.refused.at);
        return;
      }
      this.kept = this.kept.map((k, i) => {
        const info = round.renewed[i];
        return info === undefined ? k : renewed(k, info, at, ttlMs);
      });
      if (round.error === undefined) {
        [next, retry] = [at + renewEveryMs, firstRetry];
        this.setState("held");
        continue;
      }
      // A renewal cut short by the give-up point says less than the failure before it (a
      // 503, a refused connection): that one stays the reason given.
      const cutShort = round.timedOut && limit < requestTimeoutMs;
      if (!cutShort || lastError === undefined) lastError = round.error;
      this.setState("jeopardy");
      next = now() + retry;
      retry = Math.max(Math.min(retry * 2, renewEveryMs / 2), firstRetry);
    }
  }
}
