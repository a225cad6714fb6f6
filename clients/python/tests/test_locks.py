"""The sync client against a real server: acquire, renew, release, contention, waiting, and
every kind (locks, several locks, semaphores, read-write locks)."""

from __future__ import annotations

import gc
import threading
import time
from datetime import datetime
from typing import Any, Union

import pytest

import fencelock

from .support import LossWatch, Server, eventually


def lease_of(outcome: Union[fencelock.Lease, fencelock.NotAcquired]) -> fencelock.Lease:
    assert isinstance(outcome, fencelock.Lease), f"expected a lease, got {outcome}"
    return outcome


def not_acquired(outcome: Union[fencelock.Lease, fencelock.NotAcquired]) -> fencelock.NotAcquired:
    assert isinstance(outcome, fencelock.NotAcquired), f"expected not acquired, got {outcome}"
    return outcome


def stamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_the_block_holds_the_lease_with_its_token_and_releases_it_on_exit(
    server: Server, client: fencelock.Client
) -> None:
    with client.lock("payment:42", ttl=30, owner="worker-7") as lease:
        held = server.lease("payment:42")
        assert held["owner"] == "worker-7"
        assert held["fencing_token"] == lease.token
        assert lease.state is fencelock.LeaseState.HELD and not lease.jeopardy
        assert not lease.lost.is_set() and lease.loss is None
        assert lease.info.expires_at == stamp(held["expires_at"])
    assert server.lease("payment:42") is None
    assert lease.lost.is_set() and lease.loss is not None
    assert lease.loss.reason is fencelock.LostReason.RELEASED


@pytest.mark.parametrize("error", [KeyError("the work failed"), KeyboardInterrupt()])
def test_leaving_the_block_by_an_exception_releases_the_lease(
    server: Server, client: fencelock.Client, error: BaseException
) -> None:
    with pytest.raises(type(error)), client.lock("job") as lease:
        assert server.lease("job")["fencing_token"] == lease.token
        raise error
    assert server.lease("job") is None


def test_the_release_carries_the_token_so_a_newer_lease_of_the_same_owner_stays(
    server: Server, client: fencelock.Client
) -> None:
    with client.lock("report", ttl=30, owner="cron") as old:
        # Unseen by the guard (its renewals paused), the lease ends and the same owner takes
        # the name again: a newer lease, with a greater token.
        old._pause_renewal()
        assert server.delete("/locks/report", {"owner": "cron"}).status_code == 204
        newer = server.post("/locks/report", {"owner": "cron", "ttl_ms": 30_000}).json()
        assert newer["lock"]["fencing_token"] > old.token
    # The block's release carried the old token: the server refused it (409), and the newer
    # lease is untouched.
    assert server.lease("report")["fencing_token"] == newer["lock"]["fencing_token"]
    assert old.release() is False


def test_a_lease_held_for_several_ttls_stays_held(server: Server, client: fencelock.Client) -> None:
    states = set()
    # A TTL short enough to pass three of them soon, long enough that a renewal slowed by a
    # busy machine is not a failed one (it has 700 ms before the give-up point).
    with client.lock("long-job", ttl=1.5) as lease:

        def renewed_past_three_ttls() -> bool:
            states.add(lease.state)
            held = server.lease("long-job")
            lived = stamp(held["expires_at"]) - stamp(held["acquired_at"])
            return held["fencing_token"] == lease.token and lived.total_seconds() >= 3 * 1.5

        eventually(renewed_past_three_ttls, "the lease to be renewed past three TTLs")
        assert states == {fencelock.LeaseState.HELD}
        assert lease.expires_at > lease.info.acquired_at
    assert server.lease("long-job") is None


def test_another_owner_is_told_who_holds_the_lock_not_an_error(client: fencelock.Client) -> None:
    with client.lock("payment:42", ttl=30, owner="worker-7") as lease:
        refused = not_acquired(client.lock("payment:42", owner="worker-8", wait=0).acquire())
        assert refused.name == "payment:42"
        assert refused.holder is not None
        assert (refused.holder.owner, refused.holder.token) == ("worker-7", lease.token)
        assert refused.expires_in is not None and 0 < refused.expires_in <= 30
        assert "worker-7" in str(refused)
        # In a with block, which cannot be skipped otherwise, it is raised — as no
        # FencelockError.
        with pytest.raises(fencelock.NotAcquiredError) as raised:
            with client.lock("payment:42", owner="worker-8", wait=0):
                pytest.fail("the block ran without the lock")
        assert not isinstance(raised.value, fencelock.FencelockError)
        assert raised.value.not_acquired.holder == refused.holder


def test_two_holders_in_one_process_are_two_owners(client: fencelock.Client) -> None:
    # The default owner is new for each acquire: a second thread of this process that asks
    # for the lock (even through the same request) waits its turn, as in any other process.
    request = client.lock("payment:42", wait=0)
    with request as first:
        second = not_acquired(request.acquire())
        assert second.holder is not None and second.holder.owner == first.owner
        other = not_acquired(client.lock("payment:42", wait=0).acquire())
        assert other.holder is not None and other.holder.token == first.token


def test_an_owner_that_waits_gets_the_lock_when_the_holder_releases(
    server: Server, client: fencelock.Client
) -> None:
    first = lease_of(client.lock("queue", ttl=30).acquire())
    second: list[Any] = []
    waiter = threading.Thread(target=lambda: second.append(client.lock("queue", wait=10).acquire()))
    waiter.start()
    eventually(lambda: server.metric("fencelock_waiters") == 1, "the second owner to wait in line")
    assert first.release() is True
    waiter.join(timeout=10)
    lease = lease_of(second[0])
    assert lease.token > first.token
    assert server.lease("queue")["fencing_token"] == lease.token
    lease.release()


def test_a_wait_longer_than_the_servers_maximum_is_several_requests(
    start: Any,
) -> None:
    server = start("--max-wait", "300ms")
    with fencelock.Client(server.url, max_wait_per_request=0.3) as client:
        holder = lease_of(client.lock("batch").acquire())
        second: list[Any] = []
        waiter = threading.Thread(
            target=lambda: second.append(client.lock("batch", wait=10).acquire())
        )
        waiter.start()
        # The server answered the first request at its maximum wait; the client asked again.
        eventually(
            lambda: (
                server.metric('fencelock_timeouts_total{kind="wait_expired"}') >= 1
                and server.metric("fencelock_waiters") == 1
            ),
            "a second waiting request after the first ran out",
        )
        holder.release()
        waiter.join(timeout=10)
        assert lease_of(second[0]).token > holder.token


def test_a_grant_after_a_wait_longer_than_the_ttl_is_confirmed_and_held(
    server: Server, client: fencelock.Client
) -> None:
    holder = lease_of(client.lock("slow", ttl=30).acquire())
    second: list[Any] = []
    waiter = threading.Thread(
        target=lambda: second.append(client.lock("slow", ttl=1, wait=10).acquire())
    )
    waiter.start()
    eventually(lambda: server.metric("fencelock_waiters") == 1, "the second owner to wait")
    # Counted from its request, a lease granted 1.5 s later would have only -0.5 s left of
    # its 1 s TTL: the guard must count from a renewal sent after the grant.
    time.sleep(1.5)
    holder.release()
    waiter.join(timeout=10)
    lease = lease_of(second[0])
    assert lease.state is fencelock.LeaseState.HELD and not lease.lost.is_set()
    assert lease.held_until - time.monotonic() > lease.safety_margin
    lease.release()


def test_a_lease_dropped_without_release_is_released(
    server: Server, client: fencelock.Client
) -> None:
    lease_of(client.lock("forgotten", ttl=30).acquire())  # kept by nobody
    gc.collect()
    eventually(lambda: server.lease("forgotten") is None, "the dropped lease to be released")


def test_names_travel_escaped(server: Server, client: fencelock.Client) -> None:
    name = "orders/2026 12:ü?#%"
    with client.lock(name) as lease:
        assert lease.name == name
        assert server.lease(name)["resource"] == name
    assert server.lease(name) is None


def test_a_semaphore_lets_in_up_to_its_limit(server: Server, client: fencelock.Client) -> None:
    one = lease_of(client.semaphore("gpu-pool", 2).acquire())
    two = lease_of(client.semaphore("gpu-pool", 2).acquire())
    assert one.kind is fencelock.Kind.SEMAPHORE and one.info.limit == 2
    assert two.token > one.token
    refused = not_acquired(client.semaphore("gpu-pool", 2, wait=0).acquire())
    assert refused.kind is fencelock.Kind.SEMAPHORE
    assert sorted(h.token for h in refused.holders) == [one.token, two.token]
    one.release()
    with client.semaphore("gpu-pool", 2, wait=0) as three:
        tokens = sorted(
            p["fencing_token"] for p in server.lease("gpu-pool", "semaphores")["permits"]
        )
        assert tokens == [two.token, three.token]
    two.release()
    assert server.lease("gpu-pool", "semaphores") is None


def test_a_read_write_lock_is_shared_by_readers_and_taken_alone_by_a_writer(
    client: fencelock.Client,
) -> None:
    first = lease_of(client.read_lock("config").acquire())
    second = lease_of(client.read_lock("config").acquire())
    assert first.info.mode == second.info.mode == "read"
    refused = not_acquired(client.write_lock("config", wait=0).acquire())
    assert {h.token for h in refused.holders} == {first.token, second.token}
    first.release()
    second.release()
    with client.write_lock("config", wait=0) as writer:
        assert writer.info.mode == "write" and writer.token > second.token
        reader = not_acquired(client.read_lock("config", wait=0).acquire())
        assert [h.token for h in reader.holders] == [writer.token]


def test_several_locks_are_taken_all_or_none_and_held_together(
    server: Server, client: fencelock.Client
) -> None:
    bob = lease_of(client.lock("account:bob", owner="audit").acquire())
    refused = not_acquired(client.locks(["account:alice", "account:bob"], wait=0).acquire())
    assert [r.name for r in refused.in_the_way] == ["account:bob"]
    assert refused.holder is not None and refused.holder.owner == "audit"
    assert server.lease("account:alice") is None, "nothing is taken while one is held"
    bob.release()
    with client.locks(["account:alice", "account:bob"], ttl=1.5) as both:
        assert both.names == ("account:alice", "account:bob")
        tokens = both.tokens
        assert {n: server.lease(n)["fencing_token"] for n in both.names} == tokens
        with pytest.raises(TypeError):
            _ = both.token  # each lock has its own: there is no one token to pass

        def both_renewed() -> bool:
            ends = [
                stamp(server.lease(n)["expires_at"]) - stamp(server.lease(n)["acquired_at"])
                for n in both.names
            ]
            return all(end.total_seconds() >= 2 * 1.5 for end in ends)

        eventually(both_renewed, "both leases to be renewed past two TTLs")
        assert both.state is fencelock.LeaseState.HELD
    assert server.lease("account:alice") is None and server.lease("account:bob") is None


def test_a_cap_on_holding_ends_the_lease_before_the_server_does(
    server: Server, client: fencelock.Client
) -> None:
    watch = LossWatch()
    with client.lock("reindex", ttl=3, max_hold=4, on_lost=watch) as lease:
        cap = lease.hold_until
        assert cap is not None and cap == stamp(server.lease("reindex")["hold_until"])
        eventually(lease.lost.is_set, "the lease to reach its cap")
        assert lease.loss is not None and lease.loss.reason is fencelock.LostReason.CAP_REACHED
    lost = watch.once()
    assert lost.loss.reason is fencelock.LostReason.CAP_REACHED
    # The guard gave up before the cap by the server's clock (the same machine's): no renewal
    # could have kept the lease, and the holder had its margin to stop.
    assert lost.wall < cap
