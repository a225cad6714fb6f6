/**
 * fencelock: hold leases with fencing tokens on a fencelock server, safely.
 *
 * ```ts
 * import { Client } from "fencelock";
 *
 * const client = new Client("http://127.0.0.1:7070");
 * await client.using("payment:42", { ttlMs: 30_000 }, async (lease, signal) => {
 *   await charge(order, { fencingToken: lease.token, signal }); // signal: aborted on loss
 * });
 * ```
 *
 * # Layout
 *
 * - `client.ts`: {@link Client}, its acquire calls and `using`.
 * - `lease.ts`: {@link Lease}, the guard: renewal, jeopardy, loss, release.
 * - `wire.ts`: the API's kinds, paths and answers; {@link NotAcquired}.
 * - `http.ts`: one request over `node:http`/`node:https`, problems read back.
 * - `json.ts`: JSON whose fencing tokens stay exact (`bigint`).
 * - `errors.ts`: {@link FencelockError}, {@link ProblemError}, {@link LostError}.
 * - `dispose.ts`: `Symbol.asyncDispose` where an older Node 18 lacks it.
 *
 * @packageDocumentation
 */

import "./dispose";

export { AUTH_TOKEN_VAR, CACERT_VAR, Client } from "./client";
export type { Acquired, AcquireOptions, ClientOptions, LockOptions, UsingOptions } from "./client";
export { ConnectionError, FencelockError, LostError, ProblemError } from "./errors";
export type { FieldError, LostReason, Problem, ProblemKind } from "./errors";
export { Lease } from "./lease";
export type { LeaseState } from "./lease";
export { NotAcquired } from "./wire";
export type { Kind, LeaseInfo, Mode } from "./wire";
