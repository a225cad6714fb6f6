// The dashboard (/ui) in a real headless Chromium against a real `fencelock serve`: what an
// operator sees. Waiting for the page is polling its document with a deadline
// (waitForFunction), never a sleep.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Server, browser, live, principal, rowText, screenshot, waitForRow, watchedPage } from "./support.mjs";

/** Cells of a lock's row: name, owner, principal, token, metadata, age, expires in. */
const LOCK = { owner: 1, principal: 2, token: 3, meta: 4, age: 5, left: 6 };
const COUNTDOWN = /^\d+(\.\d)? s$|^\d+ m \d\d s$/;

let chrome;
before(async () => {
  chrome = await browser();
});
after(async () => {
  await chrome?.close();
});

describe("without --auth", () => {
  let server;
  let page;
  let problems;
  before(async () => {
    server = await Server.start();
    ({ page, problems } = await watchedPage(chrome));
  });
  after(async () => {
    await page?.close();
    await server?.stop();
  });

  test("the page and its files carry a strict CSP and load with no console error or CSP violation", async () => {
    const answer = await server.call("GET", "/ui");
    assert.equal(answer.status, 200);
    assert.match(answer.headers.get("content-security-policy"), /default-src 'none'; script-src 'self'/);
    await page.goto(`${server.url}/ui`);
    await live(page);
    await page.waitForFunction(() => document.querySelectorAll("#charts figure").length === 6);
    await screenshot(page, "01-empty");
    assert.deepEqual(problems, []);
  });

  test("a lock acquired through the API appears within 1 s with its token and a countdown, and goes on release", async () => {
    const acquired = await server.call("POST", "/locks/payment%3A42", {
      owner: "worker-7",
      ttl_seconds: 30,
      meta: { host: "db-3", job: "nightly" },
    });
    assert.equal(acquired.status, 200);
    const token = acquired.body.lock.fencing_token;
    await waitForRow(
      page,
      "locks",
      "payment:42",
      { [LOCK.owner]: /^worker-7$/, [LOCK.token]: new RegExp(`^${token}$`), [LOCK.left]: COUNTDOWN },
      1000,
    );
    const cells = await rowText(page, "locks", "payment:42");
    assert.equal(cells[LOCK.meta], "host=db-3 job=nightly");
    // The countdown counts down.
    const seconds = (text) => (text.includes("m") ? Infinity : parseFloat(text));
    const first = seconds(cells[LOCK.left]);
    await page.waitForFunction(
      (first) => {
        const row = document.querySelector('#locks tr[data-name="payment:42"]');
        return row && parseFloat(row.cells[6].textContent) < first;
      },
      { timeout: 2000 },
      first,
    );
    await screenshot(page, "02-lock-held");

    const released = await server.call("DELETE", "/locks/payment%3A42", { owner: "worker-7" });
    assert.equal(released.status, 204);
    await waitForRow(page, "locks", "payment:42", null, 1000);
    await screenshot(page, "03-lock-released");
    assert.deepEqual(problems, []);
  });

  test("a semaphore shows its permits used of its limit, a read-write lock its readers", async () => {
    for (const owner of ["etl-1", "etl-2"]) {
      const answer = await server.call("POST", "/semaphores/exports", { owner, limit: 3, ttl_seconds: 60 });
      assert.equal(answer.body.acquired, true);
    }
    for (const owner of ["reader-a", "reader-b"]) {
      const answer = await server.call("POST", "/rwlocks/catalog", { owner, mode: "read", ttl_seconds: 60 });
      assert.equal(answer.body.acquired, true);
    }
    await waitForRow(page, "semaphores", "exports", { 1: /^2 \/ 3$/, 2: /^etl-1, etl-2$/ }, 1000);
    await waitForRow(page, "rwlocks", "catalog", { 1: /^2: reader-a, reader-b$/, 2: /^$/ }, 1000);
    await screenshot(page, "04-semaphore-and-rwlock");
    assert.deepEqual(problems, []);
  });

  test("a name's detail shows its history from the stream and this server's waiters", async () => {
    const held = await server.call("POST", "/locks/report", { owner: "cron-a", ttl_seconds: 60 });
    const token = held.body.lock.fencing_token;
    // A waiter, in line until it gives up (the test ends its wait by releasing).
    const waiting = server.call("POST", "/locks/report", { owner: "cron-b", ttl_seconds: 60, wait_ms: 30_000 });
    await waitForRow(page, "locks", "report", { [LOCK.owner]: /^cron-a$/ }, 1000);
    await page.click('#locks tr[data-name="report"]');
    // The waiter may join its line after the detail first asks: the detail asks every 2 s.
    await page.waitForFunction(() => /cron-b/.test(document.getElementById("detail-waiters").textContent), {
      timeout: 5000,
    });
    const history = await page.$eval("#detail-history", (ol) => ol.textContent);
    assert.match(history, new RegExp(`grant · cron-a · token ${token}`));
    await screenshot(page, "05-detail-with-waiter");

    await server.call("DELETE", "/locks/report", { owner: "cron-a" });
    const granted = await waiting;
    assert.equal(granted.body.acquired, true);
    await waitForRow(page, "locks", "report", { [LOCK.owner]: /^cron-b$/ }, 1000);
    await page.waitForFunction(
      () => /release · cron-a/.test(document.getElementById("detail-history").textContent),
      { timeout: 1000 },
    );
    assert.deepEqual(problems, []);
  });

  test("an election won before the page opened shows at once", async () => {
    const won = await server.call("POST", "/elections/nightly", { candidate: "node-7", value: "v7", ttl_seconds: 60 });
    assert.equal(won.body.elected, true);
    await page.reload();
    await waitForRow(page, "elections", "nightly", { 1: /^node-7$/, 2: new RegExp(`^${won.body.leadership.term}$`), 3: /^v7$/ }, 2000);
    await server.call("DELETE", "/elections/nightly", { candidate: "node-7", term: won.body.leadership.term });
    assert.deepEqual(problems, []);
  });

  test("an election shows its leader, term and value, and its vacancy", async () => {
    const won = await server.call("POST", "/elections/scheduler", { candidate: "node-1", value: "10.0.0.1:8080", ttl_seconds: 60 });
    assert.equal(won.body.elected, true);
    const term = won.body.leadership.term;
    await waitForRow(page, "elections", "scheduler", { 1: /^node-1$/, 2: new RegExp(`^${term}$`), 3: /^10\.0\.0\.1:8080$/ }, 1000);
    await screenshot(page, "12-election");
    const resigned = await server.call("DELETE", "/elections/scheduler", { candidate: "node-1", term });
    assert.equal(resigned.status, 204);
    await waitForRow(page, "elections", "scheduler", { 1: /^\(vacant\)$/ }, 1000);
    assert.deepEqual(problems, []);
  });

  test("the prefix filter shows only the names that start with it", async () => {
    await server.call("POST", "/locks/job%3Aa", { owner: "w", ttl_seconds: 60 });
    await server.call("POST", "/locks/other", { owner: "w", ttl_seconds: 60 });
    await waitForRow(page, "locks", "other", { [LOCK.owner]: /^w$/ }, 1000);
    await page.type("#prefix", "job:");
    await page.waitForFunction(() => {
      const names = [...document.querySelectorAll("#locks tbody tr")].map((tr) => tr.dataset.name);
      return names.length === 1 && names[0] === "job:a";
    });
    await page.$eval("#prefix", (input) => {
      input.value = "";
      input.dispatchEvent(new Event("input"));
    });
  });
});

describe("after a disconnect", () => {
  test("the page resumes the stream, and rebuilds from the snapshot after a reset", async () => {
    const server = await Server.start({ embedded: true });
    const { page, problems } = await watchedPage(chrome);
    try {
      await server.call("POST", "/locks/before", { owner: "old", ttl_seconds: 300 });
      await page.goto(`${server.url}/ui`);
      await live(page);
      await waitForRow(page, "locks", "before", { [LOCK.owner]: /^old$/ }, 1000);
      // A restart: the stream breaks, and the last id the page saw is of the old epoch.
      await server.restart();
      await server.call("POST", "/locks/after", { owner: "new", ttl_seconds: 300 });
      await server.call("DELETE", "/locks/before", { owner: "old" });
      await waitForRow(page, "locks", "after", { [LOCK.owner]: /^new$/ }, 15_000);
      await waitForRow(page, "locks", "before", null, 15_000);
      await live(page);
      await screenshot(page, "11-resumed");
      // The page's fetch of a broken stream is no error of the page.
      assert.deepEqual(
        problems.filter((p) => !/ERR_(INCOMPLETE_CHUNKED_ENCODING|CONNECTION_REFUSED|EMPTY_RESPONSE)/.test(p)),
        [],
      );
    } finally {
      await page.close();
      await server.stop();
    }
  });
});

describe("with --auth", () => {
  const ops = principal("ops", [["", ["read", "lock", "admin"]]]);
  const billing = principal("billing", [["payment:", ["read", "lock"]]]);
  let server;
  before(async () => {
    server = await Server.start({ principals: [ops, billing] });
  });
  after(async () => {
    await server?.stop();
  });

  /** A page signed in as `who` through the form, live. */
  async function signedIn(who) {
    const { page, problems } = await watchedPage(chrome);
    await page.goto(`${server.url}/ui`);
    await page.waitForSelector("#token", { visible: true });
    await page.type("#token", who.token);
    await page.keyboard.press("Enter");
    await live(page);
    return { page, problems };
  }

  test("the page asks for a token, keeps it in the tab's session only, and signs out", async () => {
    const { page, problems } = await watchedPage(chrome);
    await page.goto(`${server.url}/ui`);
    await page.waitForSelector("#sign-in", { visible: true });
    await screenshot(page, "06-sign-in");
    await page.type("#token", "not-a-token");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => /does not know/.test(document.getElementById("sign-in-error").textContent));
    await page.type("#token", ops.token);
    await page.keyboard.press("Enter");
    await live(page);
    assert.equal(await page.evaluate(() => sessionStorage.getItem("fencelock.token")), ops.token);
    assert.equal(await page.evaluate(() => localStorage.length), 0);
    assert.ok(!page.url().includes(ops.token));
    assert.match(await page.$eval("#principal", (e) => e.textContent), /ops/);
    await page.click("#sign-out");
    await page.waitForSelector("#sign-in", { visible: true });
    assert.equal(await page.evaluate(() => sessionStorage.getItem("fencelock.token")), null);
    assert.deepEqual(problems, []);
    await page.close();
  });

  test("an admin's force-release through the dialog frees the lock; a non-admin sees no button and only what it may read", async () => {
    await server.call("POST", "/locks/payment%3A7", { owner: "billing-worker", ttl_seconds: 300 }, billing.token);
    await server.call("POST", "/locks/internal%3Ax", { owner: "ops-worker", ttl_seconds: 300 }, ops.token);

    const viewer = await signedIn(billing);
    await waitForRow(viewer.page, "locks", "payment:7", { [LOCK.principal]: /^billing$/ }, 2000);
    assert.equal(await rowText(viewer.page, "locks", "internal:x"), null);
    assert.equal(await viewer.page.$$eval("#locks button", (b) => b.length), 0);
    await screenshot(viewer.page, "07-non-admin");

    const admin = await signedIn(ops);
    await waitForRow(admin.page, "locks", "payment:7", { [LOCK.principal]: /^billing$/ }, 2000);
    await waitForRow(admin.page, "locks", "internal:x", { [LOCK.principal]: /^ops$/ }, 2000);
    await admin.page.click('#locks tr[data-name="payment:7"] button');
    await admin.page.waitForSelector("#confirm[open]");
    assert.match(await admin.page.$eval("#confirm-text", (p) => p.textContent), /payment:7/);
    await screenshot(admin.page, "08-force-release-dialog");
    await admin.page.click("#confirm-ok");
    await waitForRow(admin.page, "locks", "payment:7", null, 2000);
    // The viewer sees it go too, from the stream.
    await waitForRow(viewer.page, "locks", "payment:7", null, 2000);
    const after = await server.call("GET", "/locks/payment%3A7", undefined, ops.token);
    assert.equal(after.status, 404);
    assert.deepEqual(viewer.problems, []);
    assert.deepEqual(admin.problems, []);
    await viewer.page.close();
    await admin.page.close();
  });

  test("keyboard only: Tab to a row, Enter opens its history, Tab to force-release, Enter, confirm", async () => {
    await server.call("POST", "/locks/kbd", { owner: "keys", ttl_seconds: 300 }, ops.token);
    const { page, problems } = await signedIn(ops);
    await waitForRow(page, "locks", "kbd", { [LOCK.owner]: /^keys$/ }, 2000);
    const focusedRow = () => page.evaluate(() => document.activeElement?.dataset?.name ?? null);
    // Tab from the top of the page until the row of kbd has the focus.
    await page.evaluate(() => document.activeElement?.blur());
    for (let i = 0; i < 40 && (await focusedRow()) !== "kbd"; i++) await page.keyboard.press("Tab");
    assert.equal(await focusedRow(), "kbd");
    // The focus is visible.
    const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
    assert.notEqual(outline, "none");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => !document.getElementById("detail").hidden);
    assert.match(await page.$eval("#detail-title", (h) => h.textContent), /kbd/);
    await screenshot(page, "09-keyboard-detail");
    // Escape closes the detail and gives the focus back to the row.
    await page.keyboard.press("Escape");
    await page.waitForFunction(() => document.getElementById("detail").hidden);
    assert.equal(await focusedRow(), "kbd");
    // The row's force-release button is next; Escape closes the dialog, changing nothing.
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => document.activeElement.textContent), "Force release");
    await page.keyboard.press("Enter");
    await page.waitForSelector("#confirm[open]");
    await page.keyboard.press("Escape");
    await page.waitForSelector("#confirm:not([open])");
    assert.equal((await server.call("GET", "/locks/kbd", undefined, ops.token)).status, 200);
    // Again, and confirm: the dialog's focus starts on Cancel; Tab moves to Force release.
    await page.keyboard.press("Enter");
    await page.waitForSelector("#confirm[open]");
    assert.equal(await page.evaluate(() => document.activeElement.id), "confirm-cancel");
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => document.activeElement.id), "confirm-ok");
    await page.keyboard.press("Enter");
    await waitForRow(page, "locks", "kbd", null, 2000);
    assert.equal((await server.call("GET", "/locks/kbd", undefined, ops.token)).status, 404);
    assert.deepEqual(problems, []);
    await page.close();
  });
});

describe("over TLS", () => {
  test("the page works over https: live, and shows a lock", async () => {
    const server = await Server.start({ tls: true });
    const { page, problems } = await watchedPage(chrome);
    try {
      await page.goto(`${server.url}/ui`);
      await live(page);
      const acquired = await fetchInsecure(server, "/locks/tls-lock", { owner: "secure", ttl_seconds: 30 });
      assert.equal(acquired.acquired, true);
      await waitForRow(page, "locks", "tls-lock", { [LOCK.owner]: /^secure$/ }, 1000);
      await screenshot(page, "10-tls");
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
      await server.stop();
    }
  });
});

/** Acquires through the page's own origin (the test's Node trusts no self-signed certificate). */
async function fetchInsecure(server, path, body) {
  const { page } = await watchedPage(chrome);
  try {
    await page.goto(`${server.url}/ui`);
    return await page.evaluate(
      async (path, body) => {
        const answer = await fetch(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
        return answer.json();
      },
      path,
      body,
    );
  } finally {
    await page.close();
  }
}
