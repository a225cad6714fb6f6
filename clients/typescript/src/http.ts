/**
 * One request to a fencelock server, and its answer read back: the body, or the problem as a
 * {@link ProblemError}.
 *
 * Requests go through Node's own `node:http` and `node:https`, not `fetch`: Node's `fetch`
 * can trust a CA file only through a dispatcher of the `undici` package, and this client has
 * no runtime dependency. One code path serves both schemes, so every test over `http://`
 * also covers what `https://` does after the handshake.
 *
 * @module
 */

import * as http from "node:http";
import * as https from "node:https";

import { ConnectionError, FencelockError, ProblemError, type FieldError, type Problem } from "./errors";
import { parse } from "./json";

/** How an {@link Http} reaches its server. */
export interface HttpSettings {
  /** Sent as `Authorization: Bearer …` on every request. */
  readonly authToken?: string;
  /** For `https://`: trust only these CAs (PEM), in place of Node's. */
  readonly ca?: string | Buffer;
}

/** A request's answer: its status, its body parsed as JSON (undefined when empty) and, for
 * an error status, the problem it tells of (thrown by the caller where the status is not an
 * outcome of the call). */
export interface Answer {
  readonly status: number;
  readonly body: unknown;
  readonly problem?: ProblemError;
}

/**
 * Idle keep-alive connections are closed after this long: well before the server's own idle
 * limit (10 s by default), so a request is never sent on a connection the server is closing.
 */
const IDLE_MS = 5_000;

/** Errors of a TLS handshake that refused the server: nothing was sent. */
const TLS_CODES = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "ERR_SSL_WRONG_VERSION_NUMBER",
]);

/** Errors raised before the request could reach the server: nothing was done. */
const UNSENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"]);

/** No answer came within the time a request was given. */
export class TimeoutError extends ConnectionError {}

/** A server's address and a pool of keep-alive connections to it. */
export class Http {
  /** The address without a trailing `/` (a path prefix, for a server behind a proxy, stays). */
  readonly base: string;
  private readonly agent: http.Agent;
  private readonly module: typeof http | typeof https;
  private readonly authorization?: string;

  constructor(base: URL, settings: HttpSettings) {
    this.base = base.href.replace(/\/+$/, "");
    const secure = base.protocol === "https:";
    this.module = secure ? https : http;
    const options = { keepAlive: true, timeout: IDLE_MS };
    this.agent = secure ? new https.Agent({ ...options, ca: settings.ca }) : new http.Agent(options);
    this.authorization = settings.authToken === undefined ? undefined : `Bearer ${settings.authToken}`;
  }

  /**
   * Sends `method path` with `body` (JSON text) and reads the whole answer. Rejects with a
   * {@link ConnectionError} when no answer came within `timeoutMs`.
   */
  send(method: string, path: string, body: string | undefined, timeoutMs: number): Promise<Answer> {
    const headers: http.OutgoingHttpHeaders = { accept: "application/json, application/problem+json" };
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      headers["content-length"] = Buffer.byteLength(body);
    }
    if (this.authorization !== undefined) headers.authorization = this.authorization;
    const url = `${this.base}${path}`;
    return new Promise<Answer>((resolve, reject) => {
      const request = this.module.request(url, { method, headers, agent: this.agent });
      const fail = (error: Error) => {
        clearTimeout(timer);
        reject(error instanceof FencelockError ? error : this.connectionError(error));
      };
      // A timer of our own rather than the socket's idle timeout: the whole request counts.
      const timer = setTimeout(() => {
        const late = `the fencelock server at ${this.base} did not answer within ${timeoutMs} ms`;
        const error = new TimeoutError(late, { outcomeUnknown: true });
        request.destroy(error);
        fail(error);
      }, timeoutMs);
      request.on("error", fail);
      request.on("response", (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("error", fail);
        response.on("close", () => {
          if (!response.complete) fail(new Error("the answer was cut off"));
        });
        response.on("end", () => {
          clearTimeout(timer);
          try {
            resolve(answer(response, Buffer.concat(chunks).toString("utf8")));
          } catch (error) {
            reject(error);
          }
        });
      });
      request.end(body);
    });
  }

  /** Closes the idle connections; requests after this open new ones. */
  close(): void {
    this.agent.destroy();
  }

  private connectionError(error: Error & { code?: string }): ConnectionError {
    const code = error.code ?? "";
    if (TLS_CODES.has(code) || code.startsWith("ERR_SSL_")) {
      return new ConnectionError(
        `the TLS handshake with the fencelock server at ${this.base} failed: ${error.message} (is the server's certificate signed by a CA this client trusts, and made for the host in the address?)`,
        { outcomeUnknown: false, cause: error },
      );
    }
    return new ConnectionError(`the fencelock server at ${this.base} cannot be reached: ${error.message}`, {
      outcomeUnknown: !UNSENT_CODES.has(code),
      cause: error,
    });
  }
}

/** The answer of `response`, whose body is `text`. */
function answer(response: http.IncomingMessage, text: string): Answer {
  const status = response.statusCode ?? 0;
  let body: unknown;
  try {
    body = text === "" ? undefined : parse(text);
  } catch (error) {
    if (status < 400) {
      throw new FencelockError(
        `the answer (HTTP ${status}) is not what a fencelock server sends: ${text.slice(0, 200)}`,
        { outcomeUnknown: true, cause: error },
      );
    }
  }
  return { status, body, problem: status >= 400 ? problemOf(status, response, body) : undefined };
}

/** The problem an error answer tells of, with its `Retry-After`. */
function problemOf(status: number, response: http.IncomingMessage, body: unknown): ProblemError {
  const seconds = Number(response.headers["retry-after"]);
  const retryAfterMs = Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined;
  return new ProblemError(readProblem(status, response.statusMessage, body), retryAfterMs);
}

function readProblem(status: number, statusText: string | undefined, body: unknown): Problem {
  const b = (typeof body === "object" && body !== null ? body : {}) as Record<string, unknown>;
  const text = (value: unknown, otherwise: string) => (typeof value === "string" ? value : otherwise);
  const errors = Array.isArray(b.errors)
    ? b.errors.filter((e): e is FieldError => typeof e?.field === "string" && typeof e?.message === "string")
    : undefined;
  return {
    // RFC 9457: a problem without a type is `about:blank`, and so is a body that is no problem.
    type: text(b.type, "about:blank"),
    status,
    title: text(b.title, statusText ?? `HTTP ${status}`),
    detail: text(b.detail, `HTTP ${status} ${statusText ?? ""}`.trim()),
    instance: typeof b.instance === "string" ? b.instance : undefined,
    errors,
    limit: typeof b.limit === "number" ? b.limit : undefined,
  };
}

/** The error an answer tells of when its status is not an outcome of the call. */
export function failure(answer: Answer): FencelockError {
  return (
    answer.problem ??
    new FencelockError(`unexpected answer from the fencelock server: HTTP ${answer.status}`, { outcomeUnknown: true })
  );
}
