// The event stream (`GET /events`) read with fetch() — an EventSource cannot send the
// Authorization header — and kept open: after a disconnect it resumes from the last id seen
// (Last-Event-ID), so no change is missed; the server answers `reset` and a snapshot when
// that id is too old.

import { call, Unauthenticated } from "./api.js";

/** Parses a text/event-stream body into `{event, data, id}` and `{comment}` messages. */
export async function* messages(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let message = { event: "message", data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
      if (line === "") {
        if (message.data.length) yield { ...message, data: message.data.join("\n") };
        else if (message.id !== null) yield { id: message.id };
        message = { event: "message", data: [], id: null };
        continue;
      }
      if (line.startsWith(":")) {
        yield { comment: line.slice(1).trim() };
        continue;
      }
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") message.event = text;
      else if (field === "data") message.data.push(text);
      else if (field === "id") message.id = text;
    }
  }
}

/** How long to wait before reconnecting, after `failures` failures in a row. */
function backoff(failures) {
  return Math.min(500 * 2 ** failures, 10_000);
}

/**
 * One stream, kept open until {@link Live#stop}.
 *
 * - `onStart(id)`: the stream is open and starts after `id` (its first heartbeat); called
 *   once, for the first connection.
 * - `onEvent(name, data, id)`: every event, `reset` and `snapshot` included.
 * - `onStatus(state)`: `"live"`, `"reconnecting"`, `"signed-out"`.
 */
export class Live {
  /**
   * `path`: the stream (default `/events`); `from`: the id to resume from at the first
   * connection (`"0-0"` asks for a `reset` and a snapshot of what is live).
   */
  constructor({ onStart, onEvent, onStatus, path = "/events", from = null }) {
    this.onStart = onStart;
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.path = path;
    this.lastId = from;
    this.started = false;
    this.abort = null;
    this.stopped = false;
  }

  start() {
    this.run();
  }

  stop() {
    this.stopped = true;
    this.abort?.abort();
  }

  async run() {
    let failures = 0;
    while (!this.stopped) {
      this.abort = new AbortController();
      try {
        const headers = { Accept: "text/event-stream" };
        if (this.lastId) headers["Last-Event-ID"] = this.lastId;
        const response = await call(this.path, { headers, signal: this.abort.signal });
        if (!response.ok) throw new Error(`GET ${this.path}: HTTP ${response.status}`);
        this.onStatus("live");
        for await (const message of messages(response.body)) {
          failures = 0;
          this.take(message);
        }
      } catch (error) {
        if (this.stopped) return;
        if (error instanceof Unauthenticated) {
          this.onStatus("signed-out");
          return;
        }
      }
      if (this.stopped) return;
      this.onStatus("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, backoff(failures++)));
    }
  }

  take(message) {
    if (message.comment !== undefined) {
      // `: heartbeat ID` — where a fresh stream starts, and a resume point on a quiet one.
      const match = /^heartbeat (\S+)$/.exec(message.comment);
      if (match) this.seen(match[1]);
      return;
    }
    if (message.id) this.seen(message.id);
    if (message.data === undefined) return;
    let data;
    try {
      data = JSON.parse(message.data);
    } catch {
      return;
    }
    this.onEvent(message.event, data, message.id);
  }

  seen(id) {
    this.lastId = id;
    if (!this.started) {
      this.started = true;
      this.onStart(id);
    }
  }
}
