"""The guard's decisions, with no server: the clock is passed in, so time is not waited for."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Optional

import fencelock
from fencelock import _wire as wire
from fencelock._guard import Failure, GuardCore, Kept, Renew, Timing

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def lease(at_ms: int = 0, ttl_ms: int = 600, cap_ms: Optional[int] = None) -> wire.LeaseInfo:
    """A lease renewed at ``at_ms`` after T0 (by the server's clock), acquired at T0."""
    renewed = T0 + timedelta(milliseconds=at_ms)
    cap = None if cap_ms is None else T0 + timedelta(milliseconds=cap_ms)
    expires = renewed + timedelta(milliseconds=ttl_ms)
    return wire.LeaseInfo(
        wire.Kind.LOCK, "r", "a", 7, T0, expires if cap is None else min(expires, cap), cap
    )


def test_renewals_go_out_every_third_of_the_ttl_and_the_margin_is_a_fifth() -> None:
    timing = Timing(30_000, 10.0)
    assert (timing.renew_every, timing.margin) == (10.0, 6.0)
    core = GuardCore(
        [Kept.granted(lease(ttl_ms=30_000), 100.0, 30.0, None)], timing, 100.0, 100.0, print
    )
    assert core.step(100.0) == 110.0, "sleeps until a third of the TTL after the send"
    renew = core.step(110.0)
    assert isinstance(renew, Renew) and renew.requests == (wire.renew(lease(), 30_000),)
    assert renew.limit == 10.0, "the request timeout, well before the give-up point"


def test_failed_renewals_mean_jeopardy_then_lost_a_margin_before_the_lease_ends() -> None:
    losses: list[fencelock.Loss] = []
    timing = Timing(3_000, 10.0)
    core = GuardCore(
        [Kept.granted(lease(ttl_ms=3_000), 0.0, 3.0, None)], timing, 0.0, 0.0, losses.append
    )
    renew = core.step(1.0)
    assert isinstance(renew, Renew) and renew.limit == 1.4, "cut at the give-up point, 2.4"
    core.take_round(renew, [Failure("HTTP 503")], 1.1)
    assert core.state is fencelock.LeaseState.JEOPARDY and not losses
    assert core.step(2.39) is not None
    assert core.step(2.4) is None
    [loss] = losses
    assert loss.reason is fencelock.LostReason.NOT_RENEWED and "HTTP 503" in loss.detail
    assert core.loss == loss


def test_a_timeout_cut_short_by_the_give_up_point_keeps_the_failure_before_it() -> None:
    losses: list[fencelock.Loss] = []
    kept = [Kept.granted(lease(ttl_ms=3_000), 0.0, 3.0, None)]
    core = GuardCore(kept, Timing(3_000, 0.5), 0.0, 0.0, losses.append)

    def next_round() -> Renew:
        """The next round of renewals, sent when the guard says."""
        at = core.step(0.0)
        renew = core.step(at) if isinstance(at, float) else None
        assert isinstance(renew, Renew)
        return renew

    first = next_round()
    assert first.limit == 0.5, "the request timeout"
    core.take_round(first, [Failure("HTTP 503")], first.sent + 0.01)
    # Every retry times out; each says how long it was given.
    while True:
        renew = next_round()
        why = f"no answer within {renew.limit:.3f} s"
        core.take_round(renew, [Failure(why, timed_out=True)], renew.sent + 0.1)
        if renew.limit < 0.5:
            break
    assert core.step(2.4) is None
    [loss] = losses
    assert loss.reason is fencelock.LostReason.NOT_RENEWED
    # A whole request timeout replaced the 503; the one cut short by the give-up point did not.
    assert loss.detail.endswith("no answer within 0.500 s"), loss.detail


def test_a_success_after_failures_holds_again_from_its_send() -> None:
    core = GuardCore(
        [Kept.granted(lease(ttl_ms=3_000), 0.0, 3.0, None)], Timing(3_000, 10.0), 0.0, 0.0, print
    )
    first = core.step(1.0)
    assert isinstance(first, Renew)
    core.take_round(first, [Failure("no answer", timed_out=True)], 1.2)
    retry = core.step(core.step(1.2) or 0.0)  # type: ignore[arg-type]
    assert isinstance(retry, Renew)
    core.take_round(retry, [lease(at_ms=1_400, ttl_ms=3_000)], retry.sent + 0.01)
    assert core.state is fencelock.LeaseState.HELD
    assert core.held_until == retry.sent + 3.0


def test_a_grant_answered_too_late_starts_lost() -> None:
    losses: list[fencelock.Loss] = []
    GuardCore([Kept.granted(lease(), 0.0, 0.6, None)], Timing(600, 10.0), 0.0, 0.5, losses.append)
    [loss] = losses
    assert loss.reason is fencelock.LostReason.NOT_RENEWED and "too late" in loss.detail


def test_the_cap_is_placed_from_the_grants_send_and_moved_later_by_an_uncut_renewal() -> None:
    # Granted after a wait the guard cannot measure: all it knows is the send, at 0.
    kept = Kept.granted(lease(ttl_ms=600, cap_ms=10_000), 0.0, 0.6, None)
    assert (kept.cap, kept.until) == (10.0, 0.6)
    # The wait took 3 s: renewed 1 s after the grant by the server's clock, 4 s after the send
    # by ours. 9 s of the cap are left from that renewal's send.
    kept.renewed(lease(at_ms=1_000, ttl_ms=600, cap_ms=10_000), 4.0, 0.6)
    assert kept.cap is not None and abs(kept.cap - 13.0) < 1e-9
    assert (kept.until, kept.capped) == (4.6, False)
    # A renewal cut at the cap says nothing new of it, and ends the lease there.
    kept.renewed(lease(at_ms=9_700, ttl_ms=600, cap_ms=10_000), 12.7, 0.6)
    assert kept.capped and abs(kept.until - 13.0) < 1e-9


def test_a_server_that_keeps_no_cap_gets_the_one_asked_for_kept_by_the_guard() -> None:
    kept = Kept.granted(lease(ttl_ms=600), 5.0, 0.6, 0.9)
    assert (kept.cap, kept.until) == (5.9, 5.6)
