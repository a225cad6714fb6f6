"""The lease guard's decisions, written once for the sync and the asyncio clients: when to
renew, when a lease is in jeopardy, when it is lost. No I/O and no sleeping here: every
method takes the time it is called at, on this process's monotonic clock.

How the guard counts time (``docs/CLIENTS.md``): never with the server's wall clock — clocks
of two machines disagree — but from the moment each grant or renewal request was **sent**.
The server set ``expires_at = its now + TTL``, and its now was not before the send, so the
lease lasts at least until ``sent + TTL`` (its *held until*). Counting from the answer instead
would add the whole round trip to the lease: after a slow answer, the guard would believe in
a lease that has already passed to someone else.

Renewals go out every third of the TTL; a failed one is retried with a growing pause, and the
guard is in **jeopardy** until one succeeds. It is **lost** — once, with a reason — as soon as:

- the server refuses a renewal: 404 (the lease expired or was force-released), 403 (another
  owner holds it), 409 (this owner holds a newer lease);
- renewals kept failing until only the **safety margin** (a fifth of the TTL) is left before
  *held until*: the margin is the holder's time to stop before anyone else can be granted the
  name, and it absorbs the drift between this machine's clock rate and the server's;
- the lease has a cap (``hold_until``) and only the margin is left before it;
- the grant itself came so late that only the margin, or less, was left of it.

A paused process (its guard included) sees none of this: that is what fencing tokens are for.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Optional, Union

from . import _wire as wire
from .errors import FencelockError, ServerUnreachable

log = logging.getLogger("fencelock")

#: While renewal is paused (a test's stand-in for a stopped process), how often the renewal
#: loop looks whether it was resumed.
PAUSE_POLL = 0.02


class LostReason(str, Enum):
    """Why a guard's lease is lost."""

    #: The server has no live lease: it expired, or an administrator force-released it (404).
    GONE = "gone"
    #: Another owner (or principal) holds the name now (403).
    TAKEN = "taken"
    #: This owner holds a newer lease on the name, with another fencing token (409).
    SUPERSEDED = "superseded"
    #: Renewals failed until only the safety margin was left, or the grant came that late.
    NOT_RENEWED = "not_renewed"
    #: The cap on holding (``max_hold``) is only the safety margin away: no renewal helps.
    CAP_REACHED = "cap_reached"
    #: The holder released the lease (or left its ``with`` block).
    RELEASED = "released"


@dataclass(frozen=True)
class Loss:
    """A lost lease: why, in words, and which lease if the server said so of one."""

    reason: LostReason
    detail: str
    #: The name whose lease the server refused (gone, taken, superseded), if that is why.
    name: Optional[str] = None

    def __str__(self) -> str:
        return self.detail


class LeaseState(str, Enum):
    """Where a guard's lease stands."""

    #: The last renewal (or the grant) succeeded.
    HELD = "held"
    #: Renewals are failing, but the lease is surely held until ``held_until``: finish
    #: quickly, start nothing long.
    JEOPARDY = "jeopardy"
    #: The holder can no longer be sure it holds the lease: stop working on the resource.
    LOST = "lost"


@dataclass(frozen=True)
class Timing:
    """How a guard over a lease of ``ttl_ms`` renews, and when it gives up."""

    ttl_ms: int
    #: The longest one request may take (a renewal is also cut at the give-up point).
    request_timeout: float

    @property
    def ttl(self) -> float:
        """The TTL in seconds."""
        return self.ttl_ms / 1000

    @property
    def renew_every(self) -> float:
        """A third of the TTL: two renewals can fail before the margin is reached."""
        return self.ttl / 3

    @property
    def margin(self) -> float:
        """A fifth of the TTL: the lease is declared lost this long before it surely ends."""
        return self.ttl / 5

    @property
    def first_retry(self) -> float:
        """The pause after the first failed renewal; it doubles up to half a renewal period."""
        return min(max(self.renew_every / 8, 0.005), 0.5)


@dataclass
class Kept:
    """One lease a guard keeps, as the server last confirmed it, and how long it surely lasts
    by this process's monotonic clock."""

    info: wire.LeaseInfo
    #: The lease is surely live before this: the send of its last confirmed grant or renewal
    #: plus the TTL, cut at its cap.
    until: float
    #: Where its cap on holding falls on this clock, as far as the server's answers show (never
    #: later than the server's own ``hold_until``); ``None``: no cap.
    cap: Optional[float]

    @classmethod
    def granted(
        cls, info: wire.LeaseInfo, sent: float, ttl: float, max_hold: Optional[float]
    ) -> Kept:
        """``info`` as granted by a request sent at ``sent`` that asked for ``max_hold``."""
        cap: Optional[float] = None
        if info.hold_until is not None:
            # The server measured the cap from acquired_at, which it set to its now: not
            # before the send.
            cap = sent + (info.hold_until - info.acquired_at).total_seconds()
        elif max_hold is not None:
            # A server that keeps no cap: the guard keeps the one asked for itself, so the
            # holder never counts on more.
            cap = sent + max_hold
        return cls(info, cut(sent + ttl, cap), cap)

    def renewed(self, info: wire.LeaseInfo, sent: float, ttl: float) -> None:
        """Takes in ``info``, renewed for ``ttl`` by a request sent at ``sent``."""
        if info.hold_until is not None and info.expires_at < info.hold_until:
            # Not cut at the cap: the server renewed at expires_at - ttl, not before the send,
            # so the cap is at least this far from the send (after a long wait, far closer
            # than the bound from the grant's send).
            cap = sent + ttl + (info.hold_until - info.expires_at).total_seconds()
            self.cap = cap if self.cap is None else max(self.cap, cap)
        self.until = cut(sent + ttl, self.cap)
        self.info = info

    @property
    def capped(self) -> bool:
        """Whether the cap, not the TTL, ends the lease."""
        return self.cap is not None and self.cap == self.until


def cut(until: float, cap: Optional[float]) -> float:
    """``until``, or the cap if that comes first."""
    return until if cap is None else min(until, cap)


@dataclass(frozen=True)
class Failure:
    """A renewal that failed, to be retried: why, and whether its time limit ended it."""

    why: str
    timed_out: bool = False


#: What a renewal's answer says: the lease as renewed, the server's refusal, or a failure.
Renewal = Union[wire.LeaseInfo, wire.Refusal, Failure]


def read_renewal(lease: wire.LeaseInfo, reply: Union[wire.Answer, FencelockError]) -> Renewal:
    """What the reply to a renewal of ``lease`` says. Anything but a renewal or a refusal —
    no answer, a 503, a 429, a 401 — is a failure to retry."""
    if isinstance(reply, FencelockError):
        return Failure(str(reply), isinstance(reply, ServerUnreachable) and reply.timed_out)
    try:
        return wire.read_renewed(lease, reply)
    except FencelockError as error:
        return Failure(str(error))


def lost_by(refusal: wire.Refusal, lease: wire.LeaseInfo) -> Loss:
    """The loss a server's refusal of ``lease`` tells of."""
    words = {
        wire.Refusal.GONE: "the lease is gone: it expired or was force-released",
        wire.Refusal.TAKEN: "the lock was taken by another owner",
        wire.Refusal.SUPERSEDED: "this owner holds a newer lease on the name",
    }[refusal]
    detail = f"{words} ({lease.kind.value} {lease.name!r}, fencing token {lease.token})"
    return Loss(LostReason(refusal.value), detail, lease.name)


@dataclass(frozen=True)
class Renew:
    """The renewal loop's next step: send these renewals now; their answers are due within
    ``limit`` seconds (never past the point where the lease is declared lost)."""

    sent: float
    limit: float
    requests: tuple[wire.Request, ...]


class GuardCore:
    """One guard's leases (one, or several taken together) and their state: what the renewal
    loop of either client asks what to do next, and tells what its requests were answered.

    Thread-safe: the sync client's renewal thread and its caller's thread share it. The lock is
    held for bookkeeping only, never across I/O, and ``listener`` is called outside it, once,
    when the guard is lost (with the reason ``RELEASED`` too).
    """

    def __init__(
        self,
        kept: Sequence[Kept],
        timing: Timing,
        sent: float,
        now: float,
        listener: Callable[[Loss], None],
        failed_renewal: Optional[str] = None,
    ) -> None:
        """Starts keeping ``kept``: ``sent`` is when the last request that granted or renewed
        them was sent, and ``failed_renewal`` why a renewal tried since then failed, if one
        did. A guard whose give-up point has already passed starts lost: it never says held
        over a lease that may already be another owner's."""
        self.timing = timing
        #: What was granted, in the order asked: names, owner, tokens never change (a renewal
        #: only moves an expiry), so renewals and releases are made from these.
        self.granted: tuple[wire.LeaseInfo, ...] = tuple(k.info for k in kept)
        self._lock = threading.Lock()
        self._kept = list(kept)
        self._listener = listener
        self._state = LeaseState.HELD
        self._failures = 0
        self._last_error = "no renewal was attempted"
        self._loss: Optional[Loss] = None
        self._lost_on: Optional[int] = None
        self._next = sent + timing.renew_every
        self._retry = timing.first_retry
        self._paused = False
        #: Whether a release was begun (by the holder, or for a dropped lease).
        self.stopped = False
        #: Set once the leases were released: what that release returned.
        self.release_result: Optional[bool] = None
        if failed_renewal is not None:
            self._state, self._failures, self._last_error = LeaseState.JEOPARDY, 1, failed_renewal
        if now >= self._give_up_at():
            late = "the grant was answered too late: only the safety margin, or less, was left"
            self._lose(self._give_up(failed_renewal or late))

    # What the holder reads.

    @property
    def state(self) -> LeaseState:
        """Held, in jeopardy, or lost."""
        return self._state

    @property
    def loss(self) -> Optional[Loss]:
        """Why the guard is lost, once it is."""
        return self._loss

    @property
    def infos(self) -> tuple[wire.LeaseInfo, ...]:
        """Each lease as the server last confirmed it, in the order asked."""
        with self._lock:
            return tuple(k.info for k in self._kept)

    @property
    def held_until(self) -> float:
        """Before this moment (``time.monotonic()``), every lease is surely live."""
        with self._lock:
            return self._first_to_end().until

    # What the renewal loop asks and tells.

    def step(self, now: float) -> Union[Renew, float, None]:
        """What the renewal loop does next: send a round of renewals, sleep until the moment
        returned, or stop (``None``: the guard is lost)."""
        with self._lock:
            if self._loss is not None:
                return None
            give_up = self._give_up_at()
            if now < give_up:
                if now < self._next:
                    return min(self._next, give_up)
                if self._paused:
                    self._last_error = "renewal was paused"
                    return min(now + PAUSE_POLL, give_up)
                ttl_ms = self.timing.ttl_ms
                renewals = tuple(wire.renew(info, ttl_ms) for info in self.granted)
                return Renew(now, min(self.timing.request_timeout, give_up - now), renewals)
            loss = self._give_up(self._last_error)
        self._lose(loss)
        return None

    def take_round(self, renew: Renew, renewals: Sequence[Renewal], now: float) -> None:
        """Takes in what a round of renewals (one per lease, in order) was answered."""
        several = len(self.granted) > 1
        with self._lock:
            if self._loss is not None:
                return
            for at, (info, renewal) in enumerate(zip(self.granted, renewals)):
                if isinstance(renewal, wire.Refusal):
                    self._lost_on = at
                    loss = lost_by(renewal, info)
                    break
            else:
                self._tally(renew, renewals, now, several)
                return
        self._lose(loss)

    def _tally(self, renew: Renew, renewals: Sequence[Renewal], now: float, several: bool) -> None:
        """Takes in a round without refusals: held again if every lease was renewed, else in
        jeopardy and retried soon. Called with the lock held."""
        failed: Optional[tuple[Failure, str]] = None
        for kept, renewal in zip(self._kept, renewals):
            if isinstance(renewal, wire.LeaseInfo):
                kept.renewed(renewal, renew.sent, self.timing.ttl)
            elif isinstance(renewal, Failure) and failed is None:
                failed = (renewal, f"{kept.info.name}: {renewal.why}" if several else renewal.why)
        if failed is None:
            self._state, self._failures = LeaseState.HELD, 0
            self._next, self._retry = renew.sent + self.timing.renew_every, self.timing.first_retry
            return
        failure, error = failed
        self._failures += 1
        self._state = LeaseState.JEOPARDY
        # A renewal cut short by the give-up point says less than the failure before it (a
        # 503, a refused connection): that one stays the reason given.
        cut_short = failure.timed_out and renew.limit < self.timing.request_timeout
        if self._failures == 1 or not cut_short:
            self._last_error = error
        if self._failures == 1:
            log.warning("lease renewal failed; in jeopardy until renewed: %s", error)
        self._next = now + self._retry
        self._retry = max(
            min(self._retry * 2, self.timing.renew_every / 2), self.timing.first_retry
        )

    def stop(self) -> tuple[wire.LeaseInfo, ...]:
        """Stops renewal for good (the guard is lost, ``RELEASED``, unless it already was
        lost) and returns the leases worth releasing: all but one the server said is not this
        holder's any more."""
        self._lose(Loss(LostReason.RELEASED, "the lease was released"))
        with self._lock:
            self.stopped = True
            return tuple(info for at, info in enumerate(self.granted) if at != self._lost_on)

    def fail(self, why: str) -> None:
        """The renewal loop stopped on an error of its own: the lease cannot be counted on."""
        self._lose(Loss(LostReason.NOT_RENEWED, f"the lease could not be renewed: {why}"))

    def pause(self, paused: bool) -> None:
        """For tests: stops (or resumes) sending renewals, as if the process had stopped; the
        guard still gives up when only the safety margin is left."""
        with self._lock:
            self._paused = paused

    # Inside.

    def _first_to_end(self) -> Kept:
        return min(self._kept, key=lambda k: k.until)

    def _give_up_at(self) -> float:
        """The safety margin before the first lease ends."""
        return self._first_to_end().until - self.timing.margin

    def _give_up(self, last_error: str) -> Loss:
        """Why the guard gives up at its give-up point: the cap, if it ends the first lease
        to end (no renewal could have moved it), else failed renewals."""
        if self._first_to_end().capped:
            detail = "the lease reached its cap on holding: no renewal can keep it longer"
            return Loss(LostReason.CAP_REACHED, detail)
        detail = f"the lease could not be renewed in time: {last_error}"
        return Loss(LostReason.NOT_RENEWED, detail)

    def _lose(self, loss: Loss) -> None:
        """Marks the guard lost (once: the first reason stays) and tells the listener."""
        with self._lock:
            if self._loss is not None:
                return
            self._loss, self._state = loss, LeaseState.LOST
        if loss.reason is not LostReason.RELEASED:
            names = ", ".join(info.name for info in self.granted)
            log.warning("lease on %s lost: %s", names, loss)
        self._listener(loss)
