// What the dashboard's tests stand on: a real `fencelock serve` (the binary $FENCELOCK_BIN
// names) on a port the OS picks, a real HTTP client for the API, and Debian's Chromium driven
// headless by puppeteer-core. Every process is started by a test and stopped by it, by PID.

import { execFileSync, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import puppeteer from "puppeteer-core";

const here = dirname(fileURLToPath(import.meta.url));

/** Where the screenshots go: target/ui-screenshots at the top of the workspace. */
export const SCREENSHOTS = resolve(here, "../../../../target/ui-screenshots");

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} must be set (the test script sets it)`);
  return value;
}

/** A principal of an authentication file, with a fresh token. */
export function principal(name, grants) {
  return { name, token: randomBytes(16).toString("hex"), grants };
}

function authFile(principals) {
  return principals
    .map(({ name, token, grants }) => {
      const list = grants
        .map(([prefix, rights]) => `{ prefix = ${JSON.stringify(prefix)}, rights = ${JSON.stringify(rights)} }`)
        .join(", ");
      const sha = createHash("sha256").update(token).digest("hex");
      return `[[principal]]\nname = "${name}"\ntoken_sha256 = "${sha}"\ngrants = [${list}]\n`;
    })
    .join("\n");
}

/** A self-signed certificate for 127.0.0.1 and its key, in `dir`. */
function certificate(dir) {
  execFileSync(
    "openssl",
    [
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
      "-keyout", "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=127.0.0.1",
      "-addext", "subjectAltName=IP:127.0.0.1",
    ],
    { cwd: dir, stdio: "pipe" },
  );
  return { cert: join(dir, "cert.pem"), key: join(dir, "key.pem") };
}

/** A `fencelock serve` of a test's own, on the in-memory store. */
export class Server {
  /**
   * `principals`: turns `--auth` on with them; `tls`: HTTPS with a self-signed certificate;
   * `embedded`: the embedded store in the server's folder (it outlives a {@link Server#restart}),
   * else the in-memory one.
   */
  static async start({ principals = null, tls = false, embedded = false } = {}) {
    const dir = mkdtempSync(join(tmpdir(), "fencelock-ui-"));
    const store = embedded ? `sqlite://${join(dir, "locks.db")}` : "memory://";
    const args = ["serve", "--store", store];
    if (principals) {
      writeFileSync(join(dir, "auth.toml"), authFile(principals));
      args.push("--auth", join(dir, "auth.toml"));
    }
    if (tls) {
      const { cert, key } = certificate(dir);
      args.push("--tls-cert", cert, "--tls-key", key);
    }
    const server = new Server(dir, args, tls);
    await server.spawn("127.0.0.1:0");
    return server;
  }

  constructor(dir, args, tls) {
    this.dir = dir;
    this.args = args;
    this.tls = tls;
  }

  /** Starts the process listening on `listen`, and waits until it serves. */
  async spawn(listen) {
    const child = spawn(required("FENCELOCK_BIN"), [...this.args, "--listen", listen], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let log = "";
    const address = new Promise((resolve, reject) => {
      const read = (chunk) => {
        log += chunk.toString();
        const serving = /fencelock is serving address=(\S+)/.exec(log);
        if (serving) resolve(serving[1]);
      };
      child.stdout.on("data", read);
      child.stderr.on("data", read);
      child.once("exit", (code) => reject(new Error(`fencelock serve exited (${code}) before serving:\n${log}`)));
      child.once("error", reject);
    });
    const timeout = setTimeout(() => child.kill("SIGKILL"), 10_000);
    try {
      this.address = await address;
    } finally {
      clearTimeout(timeout);
    }
    this.child = child;
    this.url = `${this.tls ? "https" : "http"}://${this.address}`;
    this.log = () => log;
  }

  /** Stops the process and starts it again on the same address (a new epoch of event ids). */
  async restart() {
    await this.kill();
    await this.spawn(this.address);
  }

  /** `method path` with a JSON body, as any client sends it: `{status, body}`. */
  async call(method, path, body, token) {
    const headers = body === undefined ? {} : { "content-type": "application/json" };
    if (token) headers.authorization = `Bearer ${token}`;
    const answer = await fetch(`${this.url}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await answer.text();
    let parsed = text;
    try {
      parsed = text === "" ? undefined : JSON.parse(text);
    } catch {
      // Not JSON: the text as it came.
    }
    return { status: answer.status, body: parsed, headers: answer.headers };
  }

  /** Stops the process (SIGTERM: it exits within 5 s; SIGKILL after 10). */
  async kill() {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise((resolve) => this.child.once("exit", resolve));
      this.child.kill("SIGTERM");
      const timer = setTimeout(() => this.child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    }
  }

  /** Stops it and removes its folder. */
  async stop() {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Debian's Chromium, headless; `acceptInsecureCerts` for the self-signed test certificate. */
export async function browser() {
  return puppeteer.launch({
    executablePath: process.env.CHROMIUM_BIN || "/usr/bin/chromium",
    headless: true,
    acceptInsecureCerts: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
}

/**
 * A new page that records every console error, uncaught exception and CSP violation in
 * `problems`, so a test can assert there were none.
 */
export async function watchedPage(chrome) {
  const page = await chrome.newPage();
  await page.setViewport({ width: 1400, height: 1000 });
  const problems = [];
  page.on("console", (message) => {
    // Chromium logs every 4xx answer as an error; a 401 is how the page learns it needs a
    // token (and the sign-in form asks for it), so it is no fault of the page.
    const expected = /^Failed to load resource: the server responded with a status of 401/;
    if (message.type() === "error" && !expected.test(message.text())) problems.push(`console: ${message.text()}`);
  });
  page.on("pageerror", (error) => problems.push(`uncaught: ${error.message}`));
  await page.evaluateOnNewDocument(() => {
    document.addEventListener("securitypolicyviolation", (event) => {
      console.error(`CSP violation: ${event.violatedDirective} ${event.blockedURI}`);
    });
  });
  return { page, problems };
}

/** Saves a screenshot of `page` as target/ui-screenshots/NAME.png. */
export async function screenshot(page, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

/** Waits (up to `timeout` ms) until the page says it is live: the stream is open. */
export async function live(page, timeout = 10_000) {
  await page.waitForFunction(() => document.getElementById("status")?.textContent === "live", { timeout });
}

/** The cells of the row of `name` in the table `id`, as text; null if there is no such row. */
export function rowText(page, id, name) {
  return page.evaluate(
    (id, name) => {
      const row = [...document.querySelectorAll(`#${id} tbody tr`)].find((tr) => tr.dataset.name === name);
      return row ? [...row.cells].map((c) => c.textContent) : null;
    },
    id,
    name,
  );
}

/**
 * Waits until the row of `name` in table `id` has cells matching `patterns` (`{index: regex}`),
 * or, with `patterns` null, until there is no such row.
 */
export async function waitForRow(page, id, name, patterns, timeout) {
  const wanted = patterns && Object.entries(patterns).map(([i, re]) => [Number(i), re.source, re.flags]);
  await page.waitForFunction(
    (id, name, wanted) => {
      const row = [...document.querySelectorAll(`#${id} tbody tr`)].find((tr) => tr.dataset.name === name);
      if (!wanted) return !row;
      return !!row && wanted.every(([i, source, flags]) => new RegExp(source, flags).test(row.cells[i]?.textContent ?? ""));
    },
    { timeout },
    id,
    name,
    wanted,
  );
}
