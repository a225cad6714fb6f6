// Figures of the dashboard for docs/PERFORMANCE.md, and the README's screenshot — by hand,
// not a test (nothing here asserts):
//
//   FENCELOCK_BIN=target/release/fencelock CHROMIUM_BIN=$(command -v chromium) \
//     node crates/server/ui/test/measure.mjs weight | first-render [LEASES] [RUNS] | screenshot FILE
//
// weight: the bytes of every file of the page, as served and gzip'd.
// first-render: a server holding LEASES (10,000) locks; the page opened RUNS (5) times in a
// fresh tab; the time from navigation start to the first table row in the document (the
// page's own performance mark `fencelock:first-rows`), and to every lease read.
// screenshot: a few realistic leases, a semaphore, a read-write lock, a waiter and a name's
// detail open, saved as FILE.

import { gzipSync } from "node:zlib";

import { Server, browser, live } from "./support.mjs";

const FILES = ["/ui", "/ui/app.js", "/ui/api.js", "/ui/live.js", "/ui/tables.js", "/ui/charts.js", "/ui/app.css", "/ui/icon.svg"];

async function weight() {
  const server = await Server.start();
  try {
    let raw = 0;
    let gz = 0;
    for (const path of FILES) {
      const body = Buffer.from(await (await fetch(`${server.url}${path}`)).arrayBuffer());
      const zipped = gzipSync(body, { level: 9 }).length;
      console.log(`${path}\t${body.length}\t${zipped}`);
      raw += body.length;
      gz += zipped;
    }
    console.log(`total\t${raw}\t${gz}`);
  } finally {
    await server.stop();
  }
}

/** `n` locks, `parallel` requests at a time. */
async function fill(server, n, parallel = 64) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const name = `job:${String(i).padStart(5, "0")}`;
      const answer = await server.call("POST", `/locks/${encodeURIComponent(name)}`, {
        owner: `worker-${i % 97}`,
        ttl_seconds: 3600,
        meta: { host: `node-${i % 13}`, batch: i },
      });
      if (answer.status !== 200) throw new Error(`acquire ${name}: ${answer.status}`);
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
}

async function firstRender(leases = 10_000, runs = 5) {
  const server = await Server.start();
  const chrome = await browser();
  try {
    const filled = Date.now();
    await fill(server, leases);
    console.log(`${leases} leases made in ${Date.now() - filled} ms`);
    const results = [];
    for (let run = 0; run < runs; run++) {
      const page = await chrome.newPage();
      await page.setViewport({ width: 1400, height: 1000 });
      await page.goto(`${server.url}/ui`);
      await live(page, 60_000);
      await page.waitForFunction(() => performance.getEntriesByName("fencelock:first-rows").length > 0, { timeout: 60_000 });
      await page.waitForFunction(
        (n) => /(\d+) (shown|held)$/.exec(document.getElementById("locks-summary").textContent.replace(/^\d+ of /, ""))?.[1] === String(n),
        { timeout: 60_000 },
        leases,
      );
      const all = await page.evaluate(() => performance.now());
      const first = await page.evaluate(() => performance.getEntriesByName("fencelock:first-rows")[0].startTime);
      results.push({ first, all });
      console.log(`run ${run + 1}: first rows ${first.toFixed(0)} ms, all ${leases} read by ${all.toFixed(0)} ms (upper bound)`);
      await page.close();
    }
    const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    console.log(`median: first rows ${median(results.map((r) => r.first)).toFixed(0)} ms`);
  } finally {
    await chrome.close();
    await server.stop();
  }
}

async function screenshot(file) {
  const server = await Server.start();
  const chrome = await browser();
  try {
    const put = (path, body) => server.call("POST", path, body);
    await put("/locks/payment%3A4711", { owner: "billing-7f3c", ttl_seconds: 45, meta: { host: "pay-2", order: "4711" } });
    await put("/locks/payment%3A4712", { owner: "billing-91aa", ttl_seconds: 8, meta: { host: "pay-1", order: "4712" } });
    await put("/locks/nightly-backup", { owner: "cron@db-3", ttl_seconds: 3600, meta: { host: "db-3", job: "pg_dump", pid: 3141 } });
    await put("/locks/migrations", { owner: "deploy-512", ttl_seconds: 300, meta: { release: "v2.14.0" } });
    for (const owner of ["export-a", "export-b"]) await put("/semaphores/exports", { owner, limit: 3, ttl_seconds: 120 });
    for (const owner of ["api-1", "api-2", "api-3"]) await put("/rwlocks/catalog", { owner, mode: "read", ttl_seconds: 90 });
    await put("/rwlocks/schema", { owner: "migrator", mode: "write", ttl_seconds: 600 });
    const page = await chrome.newPage();
    await page.setViewport({ width: 1440, height: 900 });
    await page.goto(`${server.url}/ui`);
    await live(page);
    // Changes while the page watches (the detail's history), a waiter on the backup, and
    // traffic for the charts over two of their samples.
    const traffic = async () => {
      await server.call("POST", "/locks/nightly-backup/renew", { owner: "cron@db-3", ttl_seconds: 3600 });
      await server.call("POST", "/locks/nightly-backup", { owner: "cron@db-5", ttl_seconds: 60, wait_ms: 300 });
      for (let i = 0; i < 20; i++) {
        await server.call("POST", `/locks/report%3A${i}`, { owner: "reporter", ttl_seconds: 30 });
        await server.call("DELETE", `/locks/report%3A${i}`, { owner: "reporter" });
      }
    };
    await traffic();
    server.call("POST", "/locks/nightly-backup", { owner: "cron@db-4", ttl_seconds: 3600, wait_ms: 60_000 });
    await page.waitForSelector('#locks tr[data-name="nightly-backup"]');
    await page.click('#locks tr[data-name="nightly-backup"]');
    await page.waitForFunction(() => /cron@db-4/.test(document.getElementById("detail-waiters").textContent), { timeout: 10_000 });
    await page.waitForFunction(() => document.querySelector("#charts polyline")?.getAttribute("points")?.includes(" "), { timeout: 20_000 });
    await traffic();
    await page.waitForFunction(
      () => [...document.querySelectorAll("#charts polyline")].every((p) => (p.getAttribute("points") ?? "").split(" ").length >= 3),
      { timeout: 20_000 },
    );
    await page.screenshot({ path: file });
    console.log(`saved ${file}`);
  } finally {
    await chrome.close();
    await server.stop();
  }
}

const [what, ...args] = process.argv.slice(2);
if (what === "weight") await weight();
else if (what === "first-render") await firstRender(Number(args[0] ?? 10_000), Number(args[1] ?? 5));
else if (what === "screenshot") await screenshot(args[0] ?? "docs/dashboard.png");
else {
  console.error("usage: measure.mjs weight | first-render [LEASES] [RUNS] | screenshot FILE");
  process.exit(2);
}
process.exit(0);
