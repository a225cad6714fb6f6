"""What the sync and the asyncio clients share beyond the flows: their settings, the checks of
what a caller asks for, the methods that ask (:class:`ClientBase`) and what a lease shows
(:class:`LeaseView`)."""

from __future__ import annotations

import itertools
import logging
import math
import os
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Generic, Optional, TypeVar, Union

import httpx

from . import _flows as flows
from . import _wire as wire
from ._guard import GuardCore, LeaseState, Loss, LostReason
from .errors import ServerUnreachable

log = logging.getLogger("fencelock")

#: A length of time: seconds, or a ``timedelta``.
Duration = Union[float, timedelta]
#: Called once with the reason when a lease is lost (not when it is released).
OnLost = Callable[[Loss], None]

DEFAULT_URL = "http://127.0.0.1:7070"
#: Read for the bearer token when ``auth_token`` is not given, as the commands read it.
AUTH_TOKEN_VAR = "FENCELOCK_AUTH_TOKEN"
#: Read for the CA file when ``ca_file`` is not given, as the commands read it.
CACERT_VAR = "FENCELOCK_CACERT"
USER_AGENT = "fencelock-python/0.1.0"

#: Numbers the default owners of this process: two leases of one process are two owners, so
#: two threads (or tasks) of it never share a lease that only one of them took.
_owners = itertools.count(1)


def default_owner() -> str:
    """``host:pid:n``: the host and process, and which of its leases."""
    return f"{socket.gethostname()}:{os.getpid()}:{next(_owners)}"


def seconds(value: Duration, what: str) -> float:
    """``value`` in seconds, refused unless it is a finite number ≥ 0."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or a timedelta, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return float(value)


def millis(value: Duration, what: str) -> int:
    """``value`` in whole milliseconds, refused below one."""
    ms = round(seconds(value, what) * 1000)
    if ms < 1:
        raise ValueError(f"{what} must be at least 1 ms, not {value!r}")
    return ms


def ask(
    kind: wire.Kind,
    names: tuple[str, ...],
    ttl: Duration,
    *,
    wait: Optional[Duration],
    owner: Optional[str],
    on_lost: Optional[OnLost],
    together: bool = False,
    max_hold: Optional[Duration] = None,
    limit: Optional[int] = None,
    mode: Optional[str] = None,
) -> Asked:
    """What a caller asks for, checked: every refusal here is raised before anything is sent."""
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"a name must be a string, not {name!r}")
    if owner is not None and not isinstance(owner, str):
        raise TypeError(f"owner must be a string, not {owner!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise TypeError(f"limit must be an integer, not {limit!r}")
    if on_lost is not None and not callable(on_lost):
        raise TypeError(f"on_lost must be callable, not {on_lost!r}")
    ttl_ms = millis(ttl, "ttl")
    cap_ms = None if max_hold is None else millis(max_hold, "max_hold")
    margin = ttl_ms / 5
    if cap_ms is not None and cap_ms <= margin:
        raise ValueError(
            f"a cap on holding of {cap_ms} ms leaves nothing to hold: the guard gives a lease "
            f"up its safety margin ({margin:g} ms, a fifth of the TTL) before the cap"
        )
    claim = wire.Claim(kind, names, ttl_ms, together, cap_ms, limit, mode)
    return Asked(
        claim=claim,
        owner=owner,
        wait=None if wait is None else seconds(wait, "wait"),
        max_hold=None if cap_ms is None else cap_ms / 1000,
        on_lost=on_lost,
    )


@dataclass(frozen=True)
class Asked:
    """An acquire, checked and ready to send."""

    claim: wire.Claim
    #: ``None``: a new default owner for each acquire, so that two acquires of one request
    #: (in two threads, say) are two owners, never two guards over one lease.
    owner: Optional[str]
    #: Seconds to wait in line; ``None``: as long as it takes.
    wait: Optional[float]
    max_hold: Optional[float]
    on_lost: Optional[OnLost]

    def flow(self, pacing: flows.Pacing) -> flows.Flow[Union[flows.Grant, wire.NotAcquired]]:
        """The acquire, as a flow for a client's driver."""
        owner = default_owner() if self.owner is None else self.owner
        return flows.acquire(self.claim, owner, self.wait, self.max_hold, pacing)

    def listener(self, set_lost: Callable[[], None]) -> OnLost:
        """What a guard calls once when lost: ``set_lost`` (the lease's ``lost`` event), then
        ``on_lost`` unless the lease was released."""
        on_lost = self.on_lost

        def lost(loss: Loss) -> None:
            set_lost()
            if on_lost is None or loss.reason is LostReason.RELEASED:
                return
            try:
                on_lost(loss)
            except Exception:
                log.exception("the on_lost callback of a lease failed")

        return lost


@dataclass(frozen=True)
class Settings:
    """How a client talks to its server."""

    base_url: str
    pacing: flows.Pacing
    headers: Mapping[str, str]
    verify: Union[ssl.SSLContext, bool]

    @classmethod
    def of(
        cls,
        url: str,
        auth_token: Optional[str],
        ca_file: Optional[str],
        timeout: Duration,
        max_wait_per_request: Duration,
    ) -> Settings:
        """Checks what a client was given (``ValueError``/``TypeError`` on anything wrong)."""
        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(
                f"invalid server address {url!r}: expected http://HOST:PORT or https://HOST:PORT"
            )
        if parsed.query or parsed.fragment:
            raise ValueError(
                f"invalid server address {url!r}: it must not have a query or a fragment"
            )
        # An empty token is none, given or from the environment (as the commands read it).
        token = auth_token if auth_token is not None else os.environ.get(AUTH_TOKEN_VAR, "")
        headers = {"User-Agent": USER_AGENT}
        if token:
            if any(c.isspace() or not c.isprintable() for c in token):
                raise ValueError("auth_token must be a token without white space")
            headers["Authorization"] = f"Bearer {token}"
        ca = ca_file if ca_file is not None else os.environ.get(CACERT_VAR) or None
        verify: Union[ssl.SSLContext, bool] = True
        if ca is not None:
            try:
                # Only the CAs in the file are trusted, in place of the system's.
                verify = ssl.create_default_context(cafile=ca)
            except (OSError, ssl.SSLError) as error:
                raise ValueError(f"cannot read the CA file {ca!r}: {error}") from error
        pacing = flows.Pacing(
            request_timeout=seconds(timeout, "timeout"),
            max_wait_per_request=seconds(max_wait_per_request, "max_wait_per_request"),
        )
        return cls(str(parsed).rstrip("/"), pacing, headers, verify)

    def http_options(self) -> dict[str, Any]:
        """What an ``httpx.Client`` or ``httpx.AsyncClient`` is made with."""
        return {
            "base_url": self.base_url,
            "headers": dict(self.headers),
            "verify": self.verify,
            "timeout": self.pacing.request_timeout,
            # Shorter than the server's idle time (10 s by default), so the client never
            # sends on a keep-alive connection the server is closing.
            "limits": httpx.Limits(keepalive_expiry=5.0),
        }


def answer_of(response: httpx.Response) -> wire.Answer:
    """The parts of an ``httpx`` response the flows read."""
    headers = response.headers
    return wire.Answer(
        response.status_code,
        response.content,
        headers.get("content-type", ""),
        headers.get("retry-after"),
    )


def unreachable(base_url: str, error: BaseException) -> ServerUnreachable:
    """The error of a request that got no answer."""
    tls = next((e for e in causes(error) if isinstance(e, ssl.SSLError)), None)
    if isinstance(error, httpx.TimeoutException):
        words = f"the fencelock server at {base_url} did not answer in time"
    elif tls is not None:
        words = (
            f"the TLS handshake with the fencelock server at {base_url} failed: {tls} (is the "
            "server's certificate signed by a CA this client trusts, and made for the host in "
            "the address?)"
        )
    else:
        words = f"the fencelock server at {base_url} cannot be reached: {error}"
    failure = ServerUnreachable(words, timed_out=isinstance(error, httpx.TimeoutException))
    failure.__cause__ = error
    return failure


def causes(error: BaseException) -> list[BaseException]:
    """``error`` and every error under it."""
    chain: list[BaseException] = []
    seen: Optional[BaseException] = error
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


R = TypeVar("R")


class ClientBase(Generic[R]):
    """The ways to ask for a lease, shared by :class:`~fencelock.Client` (which answers a
    :class:`~fencelock.LeaseRequest`) and :class:`~fencelock.AsyncClient`
    (:class:`~fencelock.AsyncLeaseRequest`). Nothing is sent until the request is entered
    (``with``/``async with``) or acquired.

    Every one takes: ``ttl`` (seconds or a ``timedelta``; 30 s by default), ``wait`` (how long
    to wait in line for it; ``None``, the default: as long as it takes; ``0``: one try),
    ``owner`` (default: ``host:pid:n``, a new one for each lease) and ``on_lost`` (called once,
    with the :class:`~fencelock.Loss`, if the lease is lost; from the renewal thread, or in the
    event loop).
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        auth_token: Optional[str] = None,
        ca_file: Optional[str] = None,
        timeout: Duration = 10.0,
        max_wait_per_request: Duration = 300.0,
    ) -> None:
        self._open(Settings.of(url, auth_token, ca_file, timeout, max_wait_per_request))

    def _open(self, settings: Settings) -> None:
        """Makes the client's transport, which talks to the server as ``settings`` say."""
        raise NotImplementedError

    def _ask(self, asked: Asked) -> R:
        raise NotImplementedError

    def lock(
        self,
        name: str,
        ttl: Duration = 30,
        *,
        wait: Optional[Duration] = None,
        max_hold: Optional[Duration] = None,
        owner: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
    ) -> R:
        """The lock ``name``: one holder at a time. ``max_hold`` caps how long it can be held,
        from the grant, whatever the renewals (the lease shows it as ``hold_until``; the guard
        is lost a safety margin before it)."""
        checked = ask(
            wire.Kind.LOCK, (name,), ttl, wait=wait, owner=owner, on_lost=on_lost, max_hold=max_hold
        )
        return self._ask(checked)

    def locks(
        self,
        names: Sequence[str],
        ttl: Duration = 30,
        *,
        wait: Optional[Duration] = None,
        max_hold: Optional[Duration] = None,
        owner: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
    ) -> R:
        """Several locks, all or none (1 to 64 distinct names): while some are held by others,
        none is taken and the wait is for all of them at once, so two callers naming the same
        locks in any order never deadlock. One guard renews them together and is lost when
        any one is; each lease keeps its own token (``lease.tokens[name]``)."""
        checked = ask(
            wire.Kind.LOCK,
            wire.names(names),
            ttl,
            wait=wait,
            owner=owner,
            on_lost=on_lost,
            together=True,
            max_hold=max_hold,
        )
        return self._ask(checked)

    def semaphore(
        self,
        name: str,
        limit: int,
        ttl: Duration = 30,
        *,
        wait: Optional[Duration] = None,
        owner: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
    ) -> R:
        """A permit of the semaphore ``name``: at most ``limit`` holders at once, each with a
        token of its own. Every holder must ask with the same limit
        (:class:`~fencelock.errors.LimitMismatch` otherwise)."""
        checked = ask(
            wire.Kind.SEMAPHORE, (name,), ttl, wait=wait, owner=owner, on_lost=on_lost, limit=limit
        )
        return self._ask(checked)

    def read_lock(
        self,
        name: str,
        ttl: Duration = 30,
        *,
        wait: Optional[Duration] = None,
        owner: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
    ) -> R:
        """A read hold of the read-write lock ``name``: shared with other readers, while no
        writer holds it or waits before this reader."""
        checked = ask(
            wire.Kind.RWLOCK, (name,), ttl, wait=wait, owner=owner, on_lost=on_lost, mode="read"
        )
        return self._ask(checked)

    def write_lock(
        self,
        name: str,
        ttl: Duration = 30,
        *,
        wait: Optional[Duration] = None,
        owner: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
    ) -> R:
        """A write hold of the read-write lock ``name``: exclusive. While it waits, readers
        that come after it wait too (writers are not starved)."""
        checked = ask(
            wire.Kind.RWLOCK, (name,), ttl, wait=wait, owner=owner, on_lost=on_lost, mode="write"
        )
        return self._ask(checked)


class LeaseView:
    """What a lease guard shows, in either client: the lease (or leases, for several locks),
    its token, and where it stands. Renewal runs in the background for as long as it is held.
    """

    def __init__(self, core: GuardCore) -> None:
        self._core = core

    @property
    def kind(self) -> wire.Kind:
        """A lock, a semaphore's permit or a read-write lock's hold."""
        return self._core.granted[0].kind

    @property
    def name(self) -> str:
        """The name held (for several locks: the first asked for)."""
        return self._core.granted[0].name

    @property
    def names(self) -> tuple[str, ...]:
        """Every name held, in the order asked for."""
        return tuple(info.name for info in self._core.granted)

    @property
    def owner(self) -> str:
        """The owner the lease was granted to."""
        return self._core.granted[0].owner

    @property
    def token(self) -> int:
        """The fencing token: pass it to the protected resource with every write. For several
        locks, each has its own: use :attr:`tokens`."""
        if len(self._core.granted) > 1:
            raise TypeError(
                f"this guard holds {len(self._core.granted)} locks: use lease.tokens[name]"
            )
        return self._core.granted[0].token

    @property
    def tokens(self) -> dict[str, int]:
        """The fencing token of each name held."""
        return {info.name: info.token for info in self._core.granted}

    @property
    def info(self) -> wire.LeaseInfo:
        """The (first) lease as the server last confirmed it."""
        return self._core.infos[0]

    @property
    def infos(self) -> tuple[wire.LeaseInfo, ...]:
        """Every lease as the server last confirmed it, in the order asked for."""
        return self._core.infos

    @property
    def state(self) -> LeaseState:
        """Held, in jeopardy, or lost."""
        return self._core.state

    @property
    def jeopardy(self) -> bool:
        """Renewals are failing, but the lease is still surely held until :attr:`held_until`:
        finish quickly, start nothing long."""
        return self._core.state is LeaseState.JEOPARDY

    @property
    def loss(self) -> Optional[Loss]:
        """Why the lease is lost (or ``RELEASED``), once it is; ``None`` while held."""
        return self._core.loss

    @property
    def held_until(self) -> float:
        """The moment (``time.monotonic()``) before which every lease is surely live: the send
        of the last successful renewal plus the TTL, or the cap if that comes first."""
        return self._core.held_until

    @property
    def expires_at(self) -> datetime:
        """When the (first) lease ends by the server's clock, as last confirmed: for people."""
        return min(info.expires_at for info in self._core.infos)

    @property
    def hold_until(self) -> Optional[datetime]:
        """The (earliest) cap on holding by the server's clock, if there is one."""
        caps = [info.hold_until for info in self._core.granted if info.hold_until is not None]
        return min(caps) if caps else None

    @property
    def safety_margin(self) -> float:
        """Seconds before :attr:`held_until` at which the lease is declared lost if renewals
        keep failing (a fifth of the TTL)."""
        return self._core.timing.margin

    def _pause_renewal(self) -> None:
        """For tests and demonstrations: stops sending renewals, as a stopped process would
        (the guard still declares the lease lost when only the safety margin is left)."""
        self._core.pause(True)

    def _resume_renewal(self) -> None:
        """Undoes :meth:`_pause_renewal`."""
        self._core.pause(False)

    def __repr__(self) -> str:
        leases = ", ".join(f"{i.name!r} token {i.token}" for i in self._core.granted)
        return f"<{type(self).__name__} {self.kind.value} {leases} {self.state.value}>"
