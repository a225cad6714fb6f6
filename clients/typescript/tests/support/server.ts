/**
 * Real servers for the tests: `fencelock serve` (the binary `$FENCELOCK_BIN` names) on a free
 * loopback port, its store in a temporary folder, and the Redis it may stand on; started by
 * a test and stopped by it, by PID.
 */

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** The `fencelock` binary under test. A test run without one fails: it never skips. */
export function fencelockBin(): string {
  const bin = process.env.FENCELOCK_BIN;
  if (bin === undefined || bin === "") throw new Error("FENCELOCK_BIN must name a built `fencelock` binary");
  return bin;
}

/** A temporary folder, removed by the returned function. */
export function tempDir(): { path: string; remove: () => void } {
  const path = mkdtempSync(join(tmpdir(), "fencelock-ts-"));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** A port free on 127.0.0.1 right now, as the OS hands one out. */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Waits for `child` to exit, killing it (by its PID) if it has not within `ms`. */
async function exited(child: ChildProcess, ms: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const done = new Promise((resolve) => child.once("exit", resolve));
  const timer = setTimeout(() => child.kill("SIGKILL"), ms);
  await done;
  clearTimeout(timer);
}

/** What to start a `fencelock serve` with. */
export interface ServeOptions {
  /** The store; default: the embedded one in the server's temporary folder. */
  readonly store?: string;
  /** More flags, e.g. `--auth FILE`. */
  readonly args?: readonly string[];
  /** `https://` in the address (with `--tls-cert`/`--tls-key` in `args`). */
  readonly tls?: boolean;
}

/** A `fencelock serve` of a test's own. */
export class TestServer {
  private constructor(
    readonly url: string,
    private readonly child: ChildProcess,
    private readonly dir: { path: string; remove: () => void },
    readonly log: () => string,
  ) {}

  /** Starts one on a port the OS picks (`--listen 127.0.0.1:0`), read back from its log line. */
  static async start(options: ServeOptions = {}): Promise<TestServer> {
    const dir = tempDir();
    const store = options.store ?? `sqlite://${join(dir.path, "locks.db")}`;
    const args = ["serve", "--listen", "127.0.0.1:0", "--store", store, ...(options.args ?? [])];
    const child = spawn(fencelockBin(), args, { stdio: ["ignore", "pipe", "pipe"] });
    let log = "";
    const address = new Promise<string>((resolve, reject) => {
      const read = (chunk: Buffer) => {
        log += chunk.toString();
        const serving = /fencelock is serving address=(\S+)/.exec(log);
        if (serving !== null) resolve(serving[1]);
      };
      child.stdout?.on("data", read);
      child.stderr?.on("data", read);
      child.once("exit", (code) => reject(new Error(`fencelock serve exited (${code}) before serving:\n${log}`)));
      child.once("error", reject);
    });
    const timeout = setTimeout(() => child.kill("SIGKILL"), 10_000);
    try {
      const at = await address;
      return new TestServer(`${options.tls === true ? "https" : "http"}://${at}`, child, dir, () => log);
    } finally {
      clearTimeout(timeout);
    }
  }

  /** Stops the process whole (SIGSTOP): it answers nothing, and its clock-driven work waits. */
  pause(): void {
    this.child.kill("SIGSTOP");
  }

  /** Continues it (SIGCONT). */
  resume(): void {
    this.child.kill("SIGCONT");
  }

  /** Stops it (SIGTERM: it exits within 5 s by the SPEC) and removes its folder. */
  async stop(): Promise<void> {
    this.resume();
    this.child.kill("SIGTERM");
    await exited(this.child, 10_000);
    this.dir.remove();
  }

  /** `method path` with `body`, as any HTTP client would send it (e.g. an administrator's force-release). */
  async call(method: string, path: string, body?: unknown, token?: string): Promise<{ status: number; body: any }> {
    const headers: Record<string, string> = body === undefined ? {} : { "content-type": "application/json" };
    if (token !== undefined) headers.authorization = `Bearer ${token}`;
    const answer = await fetch(`${this.url}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await answer.text();
    return { status: answer.status, body: text === "" ? undefined : JSON.parse(text) };
  }

  /** The value of the metric `name` (e.g. `fencelock_waiters`), summed over its labels that contain `labels`. */
  async metric(name: string, labels = ""): Promise<number> {
    const text = await (await fetch(`${this.url}/metrics`)).text();
    const lines = text.split("\n").filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
    const matching = lines.filter((l) => l.includes(labels));
    return matching.reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(" ") + 1)), 0);
  }
}

/** The principals of a server with authentication on, and their bearer tokens. */
export interface Principals {
  readonly file: string;
  readonly tokens: Record<string, string>;
}

/**
 * Writes an `--auth` file into `dir` with one principal per entry of `grants` (name → rights
 * over every name), each with a fresh token from `fencelock auth new-token`.
 */
export function principals(dir: string, grants: Record<string, readonly string[]>): Principals {
  const tokens: Record<string, string> = {};
  let file = "";
  for (const [name, rights] of Object.entries(grants)) {
    const printed = execFileSync(fencelockBin(), ["auth", "new-token", name], { encoding: "utf8" });
    const token = /^token: (\S+)$/m.exec(printed)?.[1];
    const hash = /^token_sha256 = "([0-9a-f]{64})"$/m.exec(printed)?.[1];
    if (token === undefined || hash === undefined) throw new Error(`unexpected output of auth new-token:\n${printed}`);
    tokens[name] = token;
    const list = rights.map((r) => `"${r}"`).join(", ");
    file += `[[principal]]\nname = "${name}"\ntoken_sha256 = "${hash}"\ngrants = [{ prefix = "", rights = [${list}] }]\n\n`;
  }
  const path = join(dir, "auth.toml");
  writeFileSync(path, file);
  return { file: path, tokens };
}

/** A throwaway `redis-server` on a free loopback port, for a fencelock server to stand on. */
export class TestRedis {
  private constructor(
    readonly address: string,
    private readonly child: ChildProcess,
    private readonly dir: { path: string; remove: () => void },
  ) {}

  static async start(): Promise<TestRedis> {
    const dir = tempDir();
    const port = await freePort();
    const args = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir.path];
    const child = spawn("redis-server", args, { stdio: "ignore" });
    const failed = new Promise<never>((_, reject) => child.once("error", reject));
    await Promise.race([failed, waitUntil(() => canConnect(port), 10_000, `redis-server on port ${port}`)]);
    return new TestRedis(`redis://127.0.0.1:${port}`, child, dir);
  }

  /** Kills it (by its PID), as a store that crashed. */
  async kill(): Promise<void> {
    this.child.kill("SIGKILL");
    await exited(this.child, 10_000);
    this.dir.remove();
  }
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Polls `condition` until it holds, failing with `what` after `ms`. */
export async function waitUntil(condition: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const deadline = performance.now() + ms;
  for (;;) {
    if (await condition()) return;
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
