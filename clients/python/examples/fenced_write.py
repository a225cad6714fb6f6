"""Why a lock needs a fencing token: the timeline where a lease alone fails, and the protected
resource that saves the day.

::

    A acquires        -> token 41 -> pauses (GC, swap, a stopped VM)
    A's lease expires -> B acquires -> token 42 -> writes with 42 -> accepted
    A resumes         -> writes with 41                     -> REJECTED (41 < 42)

A checked that it held the lock just before its pause, and nothing in its process ran during
the pause, not even its lease's renewal or the guard that sets ``lease.lost``. So A cannot
know; only the protected resource can refuse A's write, by comparing tokens. Here the
protected resource is both a value in memory (``FencedValue``) and a row in SQLite written
with the fenced ``UPDATE`` of ``update_sql``.

Run it against a server (``fencelock serve`` in another terminal)::

    python examples/fenced_write.py --server http://127.0.0.1:7070

It exits 0 when A's late write was rejected by both.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
import uuid

import fencelock
from fencelock.fence import FencedValue, StaleToken, update_sql


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="http://127.0.0.1:7070")
    server = parser.parse_args().server
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"t={(time.monotonic() - started) * 1000:>5.0f} ms  {text}", flush=True)

    # The protected resource: a value in memory, and an account row in SQLite.
    ledger = FencedValue("opening balance")
    db = sqlite3.connect(":memory:")
    db.executescript(
        """CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL,
                                  fencing_token INTEGER NOT NULL DEFAULT 0);
           INSERT INTO accounts (id, balance) VALUES (1, 100);"""
    )
    set_balance = update_sql("accounts", "balance = :balance", "id = :id", ":token")

    def write_row(token: int, balance: int) -> bool:
        changed = db.execute(set_balance, {"token": token, "balance": balance, "id": 1}).rowcount
        return changed == 1

    name = f"ledger:{uuid.uuid4().hex[:8]}"
    with fencelock.Client(server) as client:
        a = client.lock(name, ttl=0.5, owner="worker-a").acquire()
        assert isinstance(a, fencelock.Lease), a
        say(f"A acquires {name}: fencing token {a.token}")

        # A's process stops here: nothing in it runs, its lease is not renewed. (Simulated:
        # only its renewals stop; a stopped process would not see its guard give up either.)
        a._pause_renewal()
        say("A pauses (a stop-the-world pause: its lease is not renewed)")

        with client.lock(name, ttl=0.5, owner="worker-b", wait=10) as b:
            say(f"A's lease expired; B acquires: fencing token {b.token}")
            ledger.write(b.token, "B's entry")
            say(f"B writes with token {b.token}: accepted (row updated: {write_row(b.token, 80)})")

            # A resumes, still believing it holds the lock, and writes.
            try:
                ledger.write(a.token, "A's entry")
                say(f"A resumes and writes with token {a.token}: accepted!")
                late_rejected = False
            except StaleToken as stale:
                say(f"A resumes and writes with token {a.token}: REJECTED ({stale})")
                late_rejected = True
            a_wrote = write_row(a.token, 90)
            say(f"A's fenced UPDATE changed {int(a_wrote)} row(s)")

        (balance,) = db.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()
        say(f"the ledger holds {ledger.get()!r}, the balance is {balance}")
        a.release()
    if late_rejected and not a_wrote:
        return 0
    print(
        "A's late write was accepted: the protected resource did not check tokens", file=sys.stderr
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
