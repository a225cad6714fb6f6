"""The asyncio client: calls are coroutines, and each lease is renewed by a task of its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
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

#: Releases started by garbage-collected leases: the event loop keeps only weak references to
#: tasks, so these keep them until they are done.
_releasing: set[asyncio.Task[Any]] = set()


class AsyncClient(ClientBase["AsyncLeaseRequest"]):
    """A client of the fencelock server at ``url``, for asyncio: the same options as
    :class:`~fencelock.Client`, and the same ways to ask (:meth:`lock`, :meth:`locks`,
    :meth:`semaphore`, :meth:`read_lock`, :meth:`write_lock`), entered with ``async with``::

        async with client.lock("payment:42", ttl=30) as lease:
            await charge(order, fencing_token=lease.token)

    Use it from one event loop; close it with :meth:`aclose`, or use it as an async context
    manager.
    """

    _transport: AsyncTransport

    def _open(self, settings: Settings) -> None:
        self._transport = AsyncTransport(settings)

    def _ask(self, asked: Asked) -> AsyncLeaseRequest:
        return AsyncLeaseRequest(self._transport, asked)

    async def aclose(self) -> None:
        """Closes the connections. A lease still held is lost at its next renewal (and ends on
        the server at its expiry): release leases first."""
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncTransport:
    """Sends a flow's requests with one ``httpx.AsyncClient``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._http = httpx.AsyncClient(**settings.http_options())

    async def send(self, request: Request, timeout: float) -> flows.Reply:
        """One request: its answer, or the error of a request that got none."""
        try:
            response = await self._http.request(
                request.method, request.path, json=request.body, timeout=timeout
            )
        except httpx.HTTPError as error:
            return unreachable(self.settings.base_url, error)
        return answer_of(response)

    async def exchange(self, step: flows.Exchange) -> list[flows.Reply]:
        """A flow's requests, sent at once."""
        return list(await asyncio.gather(*(self._send_by(r, step) for r in step.requests)))

    async def _send_by(self, request: Request, step: flows.Exchange) -> flows.Reply:
        if not step.strict:
            return await self.send(request, step.timeout)
        try:
            return await asyncio.wait_for(self.send(request, step.timeout), step.timeout)
        except asyncio.TimeoutError:
            return ServerUnreachable(
                f"the fencelock server at {self.settings.base_url} did not answer within "
                f"{step.timeout:.3f} s",
                timed_out=True,
            )

    async def aclose(self) -> None:
        await self._http.aclose()


async def drive(flow: flows.Flow[T], transport: AsyncTransport) -> T:
    """Runs ``flow`` in this task; cancelling the task ends it (and closes its requests)."""
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
                await asyncio.sleep(max(0.0, step.until - flows.clock()))
            else:
                reply = await transport.exchange(step)
    finally:
        flow.close()


class AsyncLeaseRequest:
    """A lease asked for, not yet acquired. ``async with`` acquires it (waiting as asked) and
    releases it on leaving the block, however it is left — an exception or a cancellation
    included. If it is not acquired within ``wait``, entering raises
    :class:`~fencelock.NotAcquiredError`; :meth:`acquire` returns the
    :class:`~fencelock.NotAcquired` instead."""

    def __init__(self, transport: AsyncTransport, asked: Asked) -> None:
        self._transport = transport
        self._asked = asked
        self._entered: list[AsyncLease] = []

    async def acquire(self) -> Union[AsyncLease, NotAcquired]:
        """Acquires, waiting in line as asked: the lease, renewed in the background until it is
        released (or garbage-collected), or — not an error — who holds it. Cancelling the wait
        takes the caller out of the server's line."""
        outcome = await drive(self._asked.flow(self._transport.settings.pacing), self._transport)
        if isinstance(outcome, NotAcquired):
            return outcome
        return AsyncLease(outcome, self._asked, self._transport)

    async def __aenter__(self) -> AsyncLease:
        outcome = await self.acquire()
        if isinstance(outcome, NotAcquired):
            raise NotAcquiredError(outcome)
        self._entered.append(outcome)
        return outcome

    async def __aexit__(
        self,
        kind: Optional[type[BaseException]],
        error: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        await self._entered.pop().__aexit__(kind, error, traceback)


class AsyncLease(LeaseView):
    """A lease (a lock's, a permit, a hold, or several locks taken together), renewed by a
    task of its own every third of the TTL until it is released.

    :attr:`lost` is set — before anyone else can be granted the name — when the lease can no
    longer be counted on (and on release); :attr:`loss` says why, and the ``on_lost``
    callback, if one was given, is called once in the event loop. While renewals fail
    without a refusal, :attr:`jeopardy` is true.

    Release it with :meth:`release`, or use it as an async context manager. A lease that is
    neither released nor left by an ``async with`` block is released when it is
    garbage-collected, while its event loop runs.
    """

    #: Set once the lease is lost, or released.
    lost: asyncio.Event

    def __init__(self, grant: flows.Grant, asked: Asked, transport: AsyncTransport) -> None:
        self.lost = asyncio.Event()
        core = grant.core(asked.listener(self.lost.set))
        super().__init__(core)
        self._transport = transport
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(
            _keep_alive(core, transport), name=f"fencelock-lease {','.join(self.names)}"
        )
        # The task and the finalizer hold the guard, never this object: dropping it is what
        # releases the lease.
        self._finalizer = weakref.finalize(self, _abandon, core, transport, self._task, loop)
        self._finalizer.atexit = False

    async def release(self) -> bool:
        """Stops renewal and releases the lease (every lease, for several locks), carrying its
        token. Returns whether it was released by this call: ``False`` if it had already ended
        (expired, taken, superseded — not an error). Raises
        :class:`~fencelock.errors.OutcomeUnknown` if a release got no answer or a 503 (the
        lease then ends at its expiry); calling again tries again.

        A cancellation of the caller does not stop the release once begun: it is finished in
        the background."""
        self._core.stop()
        self._task.cancel()
        return await asyncio.shield(drive(flows.release(self._core), self._transport))

    async def __aenter__(self) -> AsyncLease:
        return self

    async def __aexit__(self, *exc: object) -> None:
        # Leaving the block releases, whatever left it; a release that fails is logged rather
        # than raised over the block's own outcome: the lease then ends at its expiry.
        try:
            await self.release()
        except FencelockError as error:
            log.warning("releasing %s failed; it ends at its expiry: %s", self, error)


async def _keep_alive(core: GuardCore, transport: AsyncTransport) -> None:
    """A lease's renewal task."""
    try:
        await drive(flows.keep_alive(core), transport)
    except asyncio.CancelledError:
        # Cancelled by a release (the guard is already lost, as released), or by the event
        # loop shutting down: either way nothing renews the lease any more.
        core.fail("the renewal task was cancelled")
        raise
    except Exception as error:  # e.g. the client was closed under it: never hold silently
        core.fail(repr(error))


def _abandon(
    core: GuardCore,
    transport: AsyncTransport,
    task: asyncio.Task[None],
    loop: asyncio.AbstractEventLoop,
) -> None:
    """A lease garbage-collected while held: stop renewing it and release it, in its event
    loop (a finalizer may run in any thread, and must not block). One whose release was tried
    is left alone."""
    if core.stopped:
        return

    def in_loop() -> None:
        core.stop()
        task.cancel()
        releasing = loop.create_task(_release_quietly(core, transport))
        _releasing.add(releasing)
        releasing.add_done_callback(_releasing.discard)

    # A closed loop refuses: the lease then ends at its expiry, as if the process had died.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(in_loop)


async def _release_quietly(core: GuardCore, transport: AsyncTransport) -> None:
    try:
        await drive(flows.release(core), transport)
    except Exception as error:
        log.warning("releasing a dropped lease failed; it ends at its expiry: %s", error)
