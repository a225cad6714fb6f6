"""The sync client: calls block the caller's thread, and each lease is renewed by a thread of
its own."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor, wait
from types import TracebackType
from typing import Any, Optional, TypeVar, Union

import httpx

from . import _flows as flows
from ._common import (
    Asked,
    ClientBase,
    LeaseView,
    Settings,
    answer_of,
    unreachable,
)
from ._guard import GuardCore
from ._wire import NotAcquired, Request
from .errors import FencelockError, NotAcquiredError, ServerUnreachable

log = logging.getLogger("fencelock")
T = TypeVar("T")

#: Requests sent at once from a client's renewal threads (a guard over several locks renews
#: them all at once); more wait their turn.
RENEWAL_WORKERS = 16


class Client(ClientBase["LeaseRequest"]):
    """A client of the fencelock server at ``url``, for threads. Thread-safe: share one per
    process (it keeps a pool of keep-alive connections); close it when done, or use it as a
    context manager.

    ``auth_token`` is sent as ``Authorization: Bearer …`` (default: the environment's
    ``FENCELOCK_AUTH_TOKEN``, if set); ``ca_file`` is the PEM file of the CA that signed an
    ``https://`` server's certificate, trusted in place of the system's (default:
    ``FENCELOCK_CACERT``). ``timeout`` bounds each request (an acquire that waits in line gets
    its wait on top); ``max_wait_per_request`` must not exceed the server's ``--max-wait``.

    Ask with :meth:`lock`, :meth:`locks`, :meth:`semaphore`, :meth:`read_lock` and
    :meth:`write_lock`::

        with client.lock("payment:42", ttl=30) as lease:
            charge(order, fencing_token=lease.token)
    """

    _transport: Transport

    def _open(self, settings: Settings) -> None:
        self._transport = Transport(settings)

    def _ask(self, asked: Asked) -> LeaseRequest:
        return LeaseRequest(self._transport, asked)

    def close(self) -> None:
        """Closes the connections. A lease still held is lost at its next renewal (and ends on
        the server at its expiry): release leases first."""
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport:
    """Sends a flow's requests with one ``httpx.Client``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._http = httpx.Client(**settings.http_options())
        self._pool = ThreadPoolExecutor(RENEWAL_WORKERS, thread_name_prefix="fencelock-request")

    def send(self, request: Request, timeout: float) -> flows.Reply:
        """One request: its answer, or the error of a request that got none."""
        try:
            response = self._http.request(
                request.method, request.path, json=request.body, timeout=timeout
            )
        except httpx.HTTPError as error:
            return unreachable(self.settings.base_url, error)
        return answer_of(response)

    def exchange(self, step: flows.Exchange) -> list[flows.Reply]:
        """A flow's requests, sent at once. One request that has no deadline of its own is
        sent from the caller's thread, so an interrupt (Ctrl-C) closes it — and a server
        takes a waiter whose request closed out of its line."""
        if len(step.requests) == 1 and not step.strict:
            return [self.send(step.requests[0], step.timeout)]
        futures = [self._pool.submit(self.send, r, step.timeout) for r in step.requests]
        done, _ = wait(futures, timeout=step.timeout if step.strict else None)
        # A request still out is left to end on its own timeout; its answer is not waited for.
        late = ServerUnreachable(
            f"the fencelock server at {self.settings.base_url} did not answer within "
            f"{step.timeout:.3f} s",
            timed_out=True,
        )
        return [f.result() if f in done else late for f in futures]

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._http.close()


def drive(flow: flows.Flow[T], transport: Transport, wake: Optional[threading.Event] = None) -> T:
    """Runs ``flow`` in this thread; ``wake`` ends its sleeps early (a released lease's
    renewal loop then finds it is done)."""
    reply: Any = None
    try:
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as done:
                result: T = done.value
                return result
            reply = None
            if isinstance(step, flows.Sleep):
                delay = max(0.0, step.until - flows.clock())
                if wake is None:
                    time.sleep(delay)
                else:
                    wake.wait(delay)
            else:
                reply = transport.exchange(step)
    finally:
        flow.close()


class LeaseRequest:
    """A lease asked for, not yet acquired. ``with`` acquires it (waiting as asked) and
    releases it on leaving the block, however it is left::

        with client.lock("report:daily", ttl=30, wait=0) as lease:
            ...

    If it is not acquired within ``wait``, entering raises
    :class:`~fencelock.NotAcquiredError` (the block cannot be skipped otherwise);
    :meth:`acquire` returns the :class:`~fencelock.NotAcquired` instead.
    """

    def __init__(self, transport: Transport, asked: Asked) -> None:
        self._transport = transport
        self._asked = asked
        self._entered: list[Lease] = []

    def acquire(self) -> Union[Lease, NotAcquired]:
        """Acquires, waiting in line as asked: the lease, renewed in the background until it is
        released (or garbage-collected), or — not an error — who holds it.

        Raises :class:`~fencelock.errors.FencelockError` on failure: a problem the server
        answered (typed by its ``type``), :class:`~fencelock.errors.ServerUnreachable`,
        :class:`~fencelock.errors.LostBeforeConfirmed`."""
        outcome = drive(self._asked.flow(self._transport.settings.pacing), self._transport)
        if isinstance(outcome, NotAcquired):
            return outcome
        return Lease(outcome, self._asked, self._transport)

    def __enter__(self) -> Lease:
        outcome = self.acquire()
        if isinstance(outcome, NotAcquired):
            raise NotAcquiredError(outcome)
        self._entered.append(outcome)
        return outcome

    def __exit__(
        self,
        kind: Optional[type[BaseException]],
        error: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self._entered.pop().__exit__(kind, error, traceback)


class Lease(LeaseView):
    """A lease (a lock's, a permit, a hold, or several locks taken together), renewed by a
    thread of its own every third of the TTL until it is released.

    :attr:`lost` is set — before anyone else can be granted the name — when the lease can no
    longer be counted on (and on release); :attr:`loss` says why, and the ``on_lost``
    callback, if one was given, is called once from the renewal thread. While renewals fail
    without a refusal, :attr:`jeopardy` is true.

    Release it with :meth:`release`, or use it as a context manager. A lease that is neither
    released nor left by a ``with`` block is released when it is garbage-collected; one
    still held when the interpreter exits ends at its expiry.
    """

    #: Set once the lease is lost, or released.
    lost: threading.Event

    def __init__(self, grant: flows.Grant, asked: Asked, transport: Transport) -> None:
        self.lost = threading.Event()
        core = grant.core(asked.listener(self.lost.set))
        super().__init__(core)
        self._transport = transport
        self._wake = threading.Event()
        # The thread and the finalizer hold the guard, never this object: dropping it is
        # what releases the lease.
        self._finalizer = weakref.finalize(self, _abandon, core, transport, self._wake)
        self._finalizer.atexit = False
        names = ",".join(self.names)
        threading.Thread(
            target=_keep_alive,
            args=(core, transport, self._wake),
            name=f"fencelock-lease {names}",
            daemon=True,
        ).start()

    def release(self) -> bool:
        """Stops renewal and releases the lease (every lease, for several locks), carrying its
        token. Returns whether it was released by this call: ``False`` if it had already ended
        (expired, taken, superseded — not an error). Raises
        :class:`~fencelock.errors.OutcomeUnknown` if a release got no answer or a 503 (the
        lease then ends at its expiry); calling again tries again."""
        self._core.stop()
        self._wake.set()
        return drive(flows.release(self._core), self._transport)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        # Leaving the block releases, whatever left it; a release that fails is logged rather
        # than raised over the block's own outcome: the lease then ends at its expiry.
        try:
            self.release()
        except FencelockError as error:
            log.warning("releasing %s failed; it ends at its expiry: %s", self, error)


def _keep_alive(core: GuardCore, transport: Transport, wake: threading.Event) -> None:
    """A lease's renewal thread."""
    try:
        drive(flows.keep_alive(core), transport, wake)
    except Exception as error:  # e.g. the client was closed under it: never hold silently
        core.fail(repr(error))


def _abandon(core: GuardCore, transport: Transport, wake: threading.Event) -> None:
    """A lease garbage-collected while held: stop renewing it and release it, in the
    background (a finalizer must not block). One whose release was tried is left alone."""
    if core.stopped:
        return
    core.stop()
    wake.set()
    threading.Thread(
        target=_release_quietly, args=(core, transport), name="fencelock-release", daemon=True
    ).start()


def _release_quietly(core: GuardCore, transport: Transport) -> None:
    try:
        drive(flows.release(core), transport)
    except Exception as error:
        log.warning("releasing a dropped lease failed; it ends at its expiry: %s", error)
