"""The asyncio client against a real server: the same guard, in a task."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Callable, Optional, TypeVar, Union

import pytest

import fencelock

from .conftest import Auth, LostInTime
from .support import DEADLINE, LossWatch, Server

pytestmark = pytest.mark.anyio
T = TypeVar("T")


async def eventually(check: Callable[[], Optional[T]], what: str) -> T:
    """Polls ``check`` in the event loop until it holds, for up to the suite's deadline."""
    end = time.monotonic() + DEADLINE
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"waited {DEADLINE} s for {what}")
        await asyncio.sleep(0.01)


def lease_of(outcome: Union[fencelock.AsyncLease, fencelock.NotAcquired]) -> fencelock.AsyncLease:
    assert isinstance(outcome, fencelock.AsyncLease), f"expected a lease, got {outcome}"
    return outcome


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[fencelock.AsyncClient]:
    async with fencelock.AsyncClient(server.url) as client:
        yield client


async def test_the_block_holds_the_lease_and_releases_it_on_exit(
    server: Server, aclient: fencelock.AsyncClient
) -> None:
    async with aclient.lock("payment:42", ttl=30, owner="worker-7") as lease:
        assert isinstance(lease.lost, asyncio.Event) and not lease.lost.is_set()
        held = server.lease("payment:42")
        assert (held["owner"], held["fencing_token"]) == ("worker-7", lease.token)
    assert server.lease("payment:42") is None
    assert lease.loss is not None and lease.loss.reason is fencelock.LostReason.RELEASED


async def test_a_cancelled_task_releases_its_lease(
    server: Server, aclient: fencelock.AsyncClient
) -> None:
    entered = asyncio.Event()

    async def work() -> None:
        async with aclient.lock("job", ttl=30):
            entered.set()
            await asyncio.Event().wait()  # until cancelled

    task = asyncio.ensure_future(work())
    await entered.wait()
    assert server.lease("job") is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert server.lease("job") is None


async def test_an_exception_releases_the_lease(
    server: Server, aclient: fencelock.AsyncClient
) -> None:
    with pytest.raises(ZeroDivisionError):
        async with aclient.lock("job"):
            assert server.lease("job") is not None
            _ = 1 / 0
    assert server.lease("job") is None


async def test_an_owner_that_waits_gets_the_lock_when_the_holder_releases(
    server: Server, aclient: fencelock.AsyncClient
) -> None:
    first = lease_of(await aclient.lock("queue", ttl=30).acquire())
    refused = await aclient.lock("queue", wait=0).acquire()
    assert isinstance(refused, fencelock.NotAcquired)
    assert refused.holder is not None and refused.holder.token == first.token
    waiting = asyncio.ensure_future(aclient.lock("queue", wait=10).acquire())
    await eventually(lambda: server.metric("fencelock_waiters") == 1, "the second owner to wait")
    assert await first.release() is True
    second = lease_of(await waiting)
    assert second.token > first.token
    await second.release()


async def test_a_semaphore_and_a_read_write_lock(aclient: fencelock.AsyncClient) -> None:
    async with aclient.semaphore("gpu", 1) as permit:
        busy = await aclient.semaphore("gpu", 1, wait=0).acquire()
        assert isinstance(busy, fencelock.NotAcquired) and busy.holder is not None
        assert busy.holder.token == permit.token
    async with aclient.read_lock("cfg") as reader, aclient.read_lock("cfg") as other:
        writer = await aclient.write_lock("cfg", wait=0).acquire()
        assert isinstance(writer, fencelock.NotAcquired)
        assert {h.token for h in writer.holders} == {reader.token, other.token}
    async with aclient.locks(["a", "b"]) as both:
        assert set(both.tokens) == {"a", "b"}


async def test_a_refused_renewal_sets_lost_and_calls_on_lost(auth: Auth) -> None:
    losses: list[fencelock.Loss] = []
    async with fencelock.AsyncClient(auth.server.url, auth_token=auth.app) as client:
        async with client.lock("invoice:7", ttl=1.5, on_lost=losses.append) as lease:
            auth.force_release("invoice:7")
            await asyncio.wait_for(lease.lost.wait(), DEADLINE)
            assert [loss.reason for loss in losses] == [fencelock.LostReason.GONE]


async def test_lost_fires_before_another_owner_is_granted_the_lock_of_a_stopped_server(
    server: Server, aclient: fencelock.AsyncClient, lost_in_time: LostInTime
) -> None:
    watch = LossWatch()
    lease = lease_of(await aclient.lock("payment:42", ttl=3, on_lost=watch).acquire())
    server.pause()
    async with fencelock.AsyncClient(server.url) as other:
        # Its request waits in the kernel's queue while the server is stopped.
        stealing = asyncio.ensure_future(other.lock("payment:42", wait=30).acquire())
        await eventually(
            lambda: datetime.now(timezone.utc) >= lease.info.expires_at, "the lease's expiry"
        )
        server.resume()
        theirs = lease_of(await stealing)
        assert lease.loss is not None and lease.loss.reason is fencelock.LostReason.NOT_RENEWED
        lost_in_time(lease, watch.once(), theirs.info.acquired_at)
        await theirs.release()
    await lease.release()


async def test_a_lease_dropped_without_release_is_released(
    server: Server, aclient: fencelock.AsyncClient
) -> None:
    lease_of(await aclient.lock("forgotten", ttl=30).acquire())  # kept by nobody
    gc.collect()
    await eventually(lambda: server.lease("forgotten") is None, "the dropped lease's release")
