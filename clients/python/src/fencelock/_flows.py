"""What a client does, as generators that yield their I/O instead of doing it — written once,
run by the sync client (in the caller's thread, or the lease's renewal thread) and by the
asyncio client (in the caller's task, or the lease's renewal task).

A flow yields an :class:`Exchange` (requests to send; it is sent back one reply per request,
an :class:`~fencelock._wire.Answer` or the :class:`~fencelock.errors.FencelockError` of a
request that got none) or a :class:`Sleep`, and returns its result. A driver is a dozen lines
in each client; nothing here knows threads, tasks or sockets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar, Union

from . import _wire as wire
from ._guard import GuardCore, Kept, Loss, Timing, lost_by, read_renewal
from .errors import FencelockError, LostBeforeConfirmed

T = TypeVar("T")

#: The clock every decision is made on: monotonic, so a stepped wall clock changes nothing.
clock = time.monotonic

#: How long to pause before joining the server's line again after an answer that came before
#: the wait ran out (the server's own maximum wait, or a server shutting down): no hammering.
REJOIN_PAUSE = 0.1


@dataclass(frozen=True)
class Exchange:
    """Send these requests at once; a reply for each, in order, is due within ``timeout``.

    ``strict``: the replies must be in by then, however the transport times out (a guard's
    renewals: the lease is declared lost at that moment); a request still out counts as
    unanswered. Otherwise the transport's own timeout, which is the same, is enough."""

    requests: tuple[wire.Request, ...]
    timeout: float
    strict: bool = False


@dataclass(frozen=True)
class Sleep:
    """Sleep until ``until`` (``time.monotonic()``); a guard's renewal loop may be stopped
    meanwhile."""

    until: float


Step = Union[Exchange, Sleep]
Reply = Union[wire.Answer, FencelockError]
Flow = Generator[Step, Any, T]


@dataclass(frozen=True)
class Pacing:
    """A client's limits on time."""

    #: The longest one request may take; an acquire that waits in line gets its wait on top.
    request_timeout: float
    #: The longest wait sent in one acquire (the server's ``--max-wait``, 300 s by default);
    #: a longer wait is several requests in a row, each joining the line anew.
    max_wait_per_request: float


@dataclass(frozen=True)
class Grant:
    """Leases granted, ready for a guard: each as kept, when the request that granted or last
    confirmed them was sent, and why a confirming renewal failed, if one did."""

    kept: tuple[Kept, ...]
    timing: Timing
    sent: float
    failed_renewal: Optional[str]

    def core(self, listener: Callable[[Loss], None]) -> GuardCore:
        """The guard over these leases, starting now."""
        return GuardCore(self.kept, self.timing, self.sent, clock(), listener, self.failed_renewal)


def call(request: wire.Request, timeout: float) -> Flow[wire.Answer]:
    """Sends one request; raises the error of a request that got no answer."""
    (reply,) = yield Exchange((request,), timeout)
    if isinstance(reply, FencelockError):
        raise reply
    assert isinstance(reply, wire.Answer)
    return reply


def millis(seconds: float) -> int:
    """Whole milliseconds, rounded up: a wait is never cut short."""
    return math.ceil(seconds * 1000)


def acquire(
    claim: wire.Claim,
    owner: str,
    wait: Optional[float],
    max_hold: Optional[float],
    pacing: Pacing,
) -> Flow[Union[Grant, wire.NotAcquired]]:
    """Acquires ``claim`` for ``owner``, waiting in the server's line up to ``wait`` seconds
    (``None``: as long as it takes), and confirms a grant that came late."""
    deadline = math.inf if wait is None else clock() + wait
    while True:
        sent = clock()
        this_wait = min(max(deadline - sent, 0.0), pacing.max_wait_per_request)
        request = claim.acquire(owner, millis(this_wait))
        answer = yield from call(request, pacing.request_timeout + this_wait)
        outcome = claim.read_acquired(answer)
        if not isinstance(outcome, wire.NotAcquired):
            break
        now = clock()
        if now >= deadline:
            return outcome
        yield Sleep(min(now + REJOIN_PAUSE, deadline))
    timing = Timing(claim.ttl_ms, pacing.request_timeout)
    return (yield from confirm(outcome, sent, timing, max_hold))


def confirm(
    leases: tuple[wire.LeaseInfo, ...], sent: float, timing: Timing, max_hold: Optional[float]
) -> Flow[Grant]:
    """The grant of ``leases`` by a request sent at ``sent``, ready for a guard.

    A grant that came late (more than a tenth of the TTL after the send, e.g. after a wait in
    line) is renewed at once, so the guard counts from that renewal and not from before the
    wait. If the server refuses one of those renewals, that lease ended before it could be
    confirmed: the others are given back (all or none) and :class:`LostBeforeConfirmed` is
    raised. A renewal that fails (no answer, a 503) leaves the guard counting from ``sent``,
    in jeopardy."""
    kept = tuple(Kept.granted(info, sent, timing.ttl, max_hold) for info in leases)
    if clock() - sent <= timing.ttl / 10:
        return Grant(kept, timing, sent, None)
    resent = clock()
    renewals = tuple(wire.renew(info, timing.ttl_ms) for info in leases)
    replies = yield Exchange(renewals, timing.request_timeout)
    failed: Optional[str] = None
    for at, (info, reply) in enumerate(zip(leases, replies)):
        renewal = read_renewal(info, reply)
        if isinstance(renewal, wire.Refusal):
            others = tuple(wire.release(other) for other in leases if other is not info)
            if others:
                yield Exchange(others, timing.request_timeout)
            raise LostBeforeConfirmed(info, lost_by(renewal, info))
        if isinstance(renewal, wire.LeaseInfo):
            kept[at].renewed(renewal, resent, timing.ttl)
        else:
            failed = failed or renewal.why
    return Grant(kept, timing, sent if failed else resent, failed)


def keep_alive(core: GuardCore) -> Flow[None]:
    """The renewal loop: renews every lease of ``core`` when it says, until it is lost."""
    while True:
        step = core.step(clock())
        if step is None:
            return
        if isinstance(step, float):
            yield Sleep(step)
            continue
        replies = yield Exchange(step.requests, step.limit, strict=True)
        renewals = [read_renewal(info, reply) for info, reply in zip(core.granted, replies)]
        core.take_round(step, renewals, clock())


def release(core: GuardCore) -> Flow[bool]:
    """Stops renewal and releases every lease of ``core`` (each carrying its token) at once.

    Returns whether every lease was released by this call: ``False`` if one had already ended
    (expired, taken, superseded: not an error at that point; the guard is simply done). Once
    released, calling again sends nothing. If a release gets no answer or a 503, the error of
    the first, once every release has been tried (the lease then ends at its expiry)."""
    if core.release_result is not None:
        return core.release_result
    leases = core.stop()
    requests = tuple(wire.release(info) for info in leases)
    replies = (yield Exchange(requests, core.timing.request_timeout)) if requests else []
    released = len(leases) == len(core.granted)
    error: Optional[FencelockError] = None
    for reply in replies:
        try:
            if isinstance(reply, FencelockError):
                raise reply
            released = released and wire.read_released(reply) is None
        except FencelockError as failure:
            error = error or failure
    if error is not None:
        raise error
    core.release_result = released
    return released
