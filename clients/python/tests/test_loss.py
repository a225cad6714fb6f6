"""When a lease can no longer be counted on: a stopped server, refused renewals, failing
renewals, and jeopardy — with the sync client (the asyncio one: ``test_async.py``)."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any, Callable

import pytest

import fencelock

from .conftest import Auth, LostInTime
from .support import LossWatch, Redis, Server, eventually


def now() -> datetime:
    return datetime.now(timezone.utc)


def test_lost_fires_before_another_owner_is_granted_the_lock_of_a_stopped_server(
    server: Server, client: fencelock.Client, lost_in_time: LostInTime
) -> None:
    watch = LossWatch()
    lease = client.lock("payment:42", ttl=3, on_lost=watch).acquire()
    assert isinstance(lease, fencelock.Lease)
    # The server stops (as a stopped VM would): renewals go unanswered. Another owner asks
    # meanwhile; its request waits in the kernel's queue.
    server.pause()
    granted: list[Any] = []
    with fencelock.Client(server.url) as other:
        thief = threading.Thread(
            target=lambda: granted.append(other.lock("payment:42", wait=30).acquire())
        )
        thief.start()
        # The server goes on once the lease has expired by its clock, as the holder was told
        # it would: the other owner is granted the lock at once.
        eventually(lambda: now() >= lease.info.expires_at, "the lease's expiry")
        server.resume()
        thief.join(timeout=30)
        theirs = granted[0]
        assert isinstance(theirs, fencelock.Lease) and theirs.token > lease.token
        assert lease.loss is not None and lease.loss.reason is fencelock.LostReason.NOT_RENEWED
        lost_in_time(lease, watch.once(), theirs.info.acquired_at)
        assert theirs.release() is True
    assert lease.release() is False, "the lease had passed on: nothing of it to release"


@pytest.mark.parametrize(
    ("meanwhile", "reason"),
    [
        ("force-released", fencelock.LostReason.GONE),
        ("taken by another owner", fencelock.LostReason.TAKEN),
        ("taken again by its owner", fencelock.LostReason.SUPERSEDED),
    ],
)
def test_a_refused_renewal_fires_lost_at_once_with_the_reason(
    auth: Auth, meanwhile: str, reason: fencelock.LostReason
) -> None:
    watch = LossWatch()
    with (
        fencelock.Client(auth.server.url, auth_token=auth.app) as client,
        client.lock("invoice:7", ttl=3, on_lost=watch) as lease,
    ):
        # While the guard sends nothing, an administrator frees the lock, and maybe someone
        # takes it: the next renewal is refused.
        lease._pause_renewal()
        auth.force_release("invoice:7")
        if meanwhile != "force-released":
            owner = "someone-else" if meanwhile == "taken by another owner" else lease.owner
            taken = auth.server.post(
                "/locks/invoice:7", {"owner": owner, "ttl_ms": 30_000}, auth.app
            )
            assert taken.json()["acquired"] is True
        give_up = lease.held_until - lease.safety_margin
        lease._resume_renewal()
        eventually(lease.lost.is_set, "the refused renewal to fire lost")
        lost = watch.once()
        assert (lost.loss.reason, lost.loss.name) == (reason, "invoice:7")
        assert lease.loss == lost.loss and str(lease.token) in lost.loss.detail
        assert lost.monotonic < give_up, "lost at once, not by running out of renewals"
    # Leaving the block sends no release of a lease the server said is not this holder's.
    if meanwhile != "force-released":
        assert auth.server.lease("invoice:7", token=auth.app) is not None


def test_several_locks_are_lost_together_and_the_rest_released_on_exit(auth: Auth) -> None:
    watch = LossWatch()
    with fencelock.Client(auth.server.url, auth_token=auth.app) as client:
        with client.locks(["ledger:a", "ledger:b"], ttl=1.5, on_lost=watch) as both:
            auth.force_release("ledger:b")
            eventually(both.lost.is_set, "the refused renewal of one lock to lose them all")
            lost = watch.once()
            assert (lost.loss.reason, lost.loss.name) == (fencelock.LostReason.GONE, "ledger:b")
            assert auth.server.lease("ledger:a", token=auth.app) is not None
        # Leaving the block released the lock the server still had for this holder.
        assert auth.server.lease("ledger:a", token=auth.app) is None


def test_a_renewal_that_times_out_puts_the_lease_in_jeopardy_until_one_succeeds(
    server: Server,
) -> None:
    with fencelock.Client(server.url, timeout=0.25) as client, client.lock("j", ttl=3) as lease:
        server.pause()
        eventually(lambda: lease.jeopardy, "the renewal to time out")
        assert lease.state is fencelock.LeaseState.JEOPARDY and not lease.lost.is_set()
        server.resume()
        eventually(lambda: lease.state is fencelock.LeaseState.HELD, "a renewal to succeed")
        assert not lease.lost.is_set()
        assert server.lease("j")["fencing_token"] == lease.token


def test_renewals_answered_503_put_the_lease_in_jeopardy_then_lose_it_in_time(
    start: Callable[..., Server], redis: Redis
) -> None:
    server = start(store=f"redis://127.0.0.1:{redis.port}")
    watch = LossWatch()
    with fencelock.Client(server.url) as client, client.lock("r", ttl=2, on_lost=watch) as lease:
        redis.stop()  # the server's store dies: every renewal is answered 503
        eventually(lambda: lease.jeopardy, "a renewal answered 503")
        eventually(lease.lost.is_set, "the lease to be lost")
        assert lease.loss is not None and lease.loss.reason is fencelock.LostReason.NOT_RENEWED
        assert "503" in lease.loss.detail
        # Lost while the lease was still surely held: its holder had the margin to stop.
        assert watch.once().monotonic < lease.held_until
