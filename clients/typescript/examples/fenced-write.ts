/**
 * Why a lock needs a fencing token: the timeline where a lease alone fails, and the protected
 * resource that saves the day.
 *
 * ```text
 * A acquires        → token 41 → pauses (GC, swap, a stopped VM)
 * A's lease expires → B acquires → token 42 → writes with 42 → accepted
 * A resumes         → writes with 41                     → REJECTED (41 < 42)
 * ```
 *
 * A checked that it held the lock just before its pause, and nothing in its process ran
 * during the pause, not even the renewal: A cannot know. Only the protected resource can
 * refuse A's write, by comparing tokens. Here the resource is a ledger in memory; in a
 * database it is one conditional UPDATE:
 *
 * ```sql
 * UPDATE accounts SET balance = $2, fencing_token = $1 WHERE id = $3 AND fencing_token <= $1
 * ```
 *
 * Run it against a server (`fencelock serve`): `node build/examples/fenced-write.js
 * http://127.0.0.1:7070` (default: `$FENCELOCK_SERVER`, else that address). Exits 0 when A's
 * late write was rejected.
 */

import { Client } from "fencelock";

/** The protected resource: it keeps the highest token it accepted, and refuses lower ones. */
class FencedLedger {
  private highest = 0n;
  readonly entries: string[] = [];

  /** Appends `entry` if `token` is at least the highest token seen; false if refused. */
  write(token: bigint, entry: string): boolean {
    if (token < this.highest) return false;
    this.highest = token;
    this.entries.push(entry);
    return true;
  }
}

/** Stops this whole thread for `ms`, as a long GC pause would: no timer, no renewal runs. */
function pauseEverything(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Plays the timeline with A and B, each a client with an owner of its own; true if A's late write was rejected. */
async function timeline(a: Client, b: Client): Promise<boolean> {
  const started = Date.now();
  const say = (text: string) => console.log(`t=${String(Date.now() - started).padStart(5)} ms  ${text}`);
  const ledger = new FencedLedger();
  const name = `ledger:${started}`;
  const ttlMs = 500;

  await using leaseA = await a.lock(name, { ttlMs });
  if (!leaseA.acquired) throw new Error(`${name} is held by ${leaseA.holder?.owner}`);
  say(`A acquires ${name}: fencing token ${leaseA.token}`);
  say(`A checks that it holds the lock (${leaseA.state}), and is about to write…`);
  pauseEverything(2 * ttlMs);
  say("…but its process was stopped for two TTLs: its lease expired meanwhile");

  await using leaseB = await b.lock(name, { ttlMs, waitMs: 5_000 });
  if (!leaseB.acquired) throw new Error(`B was not granted ${name}`);
  say(`B acquires ${name}: fencing token ${leaseB.token}`);
  say(`B writes with token ${leaseB.token}: ${ledger.write(leaseB.token, "B's entry") ? "accepted" : "REJECTED"}`);

  // A resumes where it stopped, still believing it holds the lock, and writes.
  const late = ledger.write(leaseA.token, "A's entry");
  say(
    `A resumes and writes with token ${leaseA.token}: ${late ? "accepted!" : `REJECTED (${leaseA.token} < ${leaseB.token})`}`,
  );
  say(`A's guard says: ${leaseA.lostReason?.message ?? "still held"}`);
  say(`the ledger holds ${JSON.stringify(ledger.entries)}`);
  return !late;
}

async function main(server: string): Promise<boolean> {
  const [a, b] = [new Client(server, { owner: "worker-a" }), new Client(server, { owner: "worker-b" })];
  try {
    return await timeline(a, b);
  } finally {
    [a, b].forEach((client) => client.close());
  }
}

main(process.argv[2] ?? process.env.FENCELOCK_SERVER ?? "http://127.0.0.1:7070").then(
  (rejected) => {
    if (!rejected) console.error("A's late write was accepted: the protected resource did not check tokens");
    process.exitCode = rejected ? 0 : 1;
  },
  (error: unknown) => {
    console.error(`fenced-write: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  },
);
