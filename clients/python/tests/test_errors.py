"""Failures: every problem the server answers is an error typed by its ``type``; answers that
never come leave the outcome unknown; bad input is refused before anything is sent."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

import fencelock

from .conftest import Auth
from .support import Redis, Server, certificates, eventually


def test_an_invalid_field_is_a_422_naming_it(start: Callable[..., Server]) -> None:
    server = start("--max-ttl", "60s")
    with fencelock.Client(server.url) as client:
        with pytest.raises(fencelock.InvalidFields) as raised:
            client.lock("job", ttl=120).acquire()
        error = raised.value
        assert (error.status, error.type) == (422, "urn:fencelock:problem:invalid-fields")
        assert [e.field for e in error.errors] == ["ttl_ms"]
        assert "60000" in error.errors[0].message and error.detail
        with pytest.raises(fencelock.InvalidFields) as empty:
            client.lock("").acquire()
        assert [e.field for e in empty.value.errors] == ["resource"]
        assert isinstance(empty.value, fencelock.InvalidRequest)


def test_no_token_is_a_401_and_a_missing_right_a_403_denied(auth: Auth) -> None:
    with fencelock.Client(auth.server.url, auth_token="") as anonymous:
        with pytest.raises(fencelock.Unauthorized) as raised:
            anonymous.lock("job").acquire()
    assert (raised.value.status, raised.value.type) == (401, "urn:fencelock:problem:unauthorized")
    assert "token" in raised.value.detail
    # ops may force-release, not lock: a 403 of its own type, not another owner's lease.
    with fencelock.Client(auth.server.url, auth_token=auth.ops) as ops:
        with pytest.raises(fencelock.Denied) as denied:
            ops.lock("job").acquire()
    assert (denied.value.status, denied.value.type) == (403, "urn:fencelock:problem:denied")
    assert not isinstance(denied.value, fencelock.Forbidden)


def test_the_token_is_read_from_the_environment(
    auth: Auth, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fencelock.AUTH_TOKEN_VAR, auth.app)
    with fencelock.Client(auth.server.url) as client, client.lock("job") as lease:
        assert auth.server.lease("job", token=auth.app)["principal"] == "app"
        assert lease.info.principal == "app"


def test_a_store_that_is_down_is_a_503_whose_outcome_is_unknown(
    start: Callable[..., Server], redis: Redis
) -> None:
    server = start(store=f"redis://127.0.0.1:{redis.port}")
    redis.stop()
    with fencelock.Client(server.url) as client:
        with pytest.raises(fencelock.StoreUnavailable) as raised:
            client.lock("job").acquire()
    error = raised.value
    assert (error.status, error.type) == (503, "urn:fencelock:problem:store-unavailable")
    assert isinstance(error, fencelock.OutcomeUnknown) and error.detail


def test_a_limit_mismatch_and_a_deadlock_are_told_apart_from_a_conflict(
    server: Server, client: fencelock.Client
) -> None:
    with client.semaphore("exports", 2):
        with pytest.raises(fencelock.LimitMismatch) as mismatch:
            client.semaphore("exports", 3, wait=0).acquire()
    assert (mismatch.value.status, mismatch.value.limit) == (409, 2)
    assert not isinstance(mismatch.value, fencelock.Conflict)
    # a holds x and waits for y; b holds y and would wait for x: refused at once.
    with client.lock("x", owner="a"), client.lock("y", owner="b"):
        waited: list[Any] = []
        waiter = threading.Thread(
            target=lambda: waited.append(client.lock("y", owner="a", wait=5).acquire())
        )
        waiter.start()
        eventually(lambda: server.metric("fencelock_waiters") == 1, "a to wait for y")
        with pytest.raises(fencelock.Deadlock) as deadlock:
            client.lock("x", owner="b", wait=5).acquire()
        assert deadlock.value.status == 409 and "x" in deadlock.value.detail
    # Nothing a or b held was released by the refusal: a got y once b left its block.
    waiter.join(timeout=10)
    assert isinstance(waited[0], fencelock.Lease) and waited[0].owner == "a"
    waited[0].release()


def test_too_many_requests_is_a_429_with_retry_after(start: Callable[..., Server]) -> None:
    server = start("--rate-limit", "1", "--rate-burst", "1")
    assert server.lease("job") is None  # the one request of this second
    with fencelock.Client(server.url) as client:
        with pytest.raises(fencelock.RateLimited) as raised:
            client.lock("job", wait=0).acquire()
    assert (raised.value.status, raised.value.type) == (
        429,
        "urn:fencelock:problem:too-many-requests",
    )
    assert raised.value.retry_after is not None and raised.value.retry_after >= 1


def test_a_server_that_cannot_be_reached_leaves_the_outcome_unknown() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
        with fencelock.Client(f"http://127.0.0.1:{port}") as client:
            with pytest.raises(fencelock.ServerUnreachable) as raised:
                client.lock("job").acquire()
    assert isinstance(raised.value, fencelock.OutcomeUnknown)
    assert "cannot be reached" in str(raised.value)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_a_server_that_does_not_answer_in_time_leaves_the_outcome_unknown(
    silent_port: int,
) -> None:
    with fencelock.Client(f"http://127.0.0.1:{silent_port}", timeout=0.2) as client:
        with pytest.raises(fencelock.ServerUnreachable) as raised:
            client.lock("job", wait=0).acquire()
    assert "did not answer in time" in str(raised.value)


def test_an_https_server_is_trusted_through_the_ca_file(
    tmp_path: Path, start: Callable[..., Server]
) -> None:
    ca, cert, key = certificates(tmp_path)
    server = start("--tls-cert", str(cert), "--tls-key", str(key))
    assert server.url.startswith("https://")
    with fencelock.Client(server.url, ca_file=str(ca)) as client, client.lock("job") as lease:
        assert server.lease("job")["fencing_token"] == lease.token
    with fencelock.Client(server.url) as untrusting:
        with pytest.raises(fencelock.ServerUnreachable) as raised:
            untrusting.lock("job").acquire()
    assert "TLS" in str(raised.value)


@pytest.mark.parametrize(
    ("ask", "error", "words"),
    [
        (lambda c: c.lock("job", ttl=0), ValueError, "ttl must be at least 1 ms"),
        (lambda c: c.lock("job", ttl=-1), ValueError, "ttl must be a finite number"),
        (lambda c: c.lock("job", ttl="30"), TypeError, "ttl must be a number of seconds"),
        (lambda c: c.lock("job", wait=float("nan")), ValueError, "wait must be a finite"),
        (lambda c: c.lock("job", ttl=30, max_hold=5), ValueError, "leaves nothing to hold"),
        (lambda c: c.lock(42), TypeError, "a name must be a string"),
        (lambda c: c.locks("ab"), TypeError, "a list of strings"),
        (lambda c: c.semaphore("gpu", True), TypeError, "limit must be an integer"),
        (lambda c: c.lock("job", on_lost="print"), TypeError, "on_lost must be callable"),
    ],
)
def test_bad_input_is_refused_before_anything_is_sent(
    server: Server, client: fencelock.Client, ask: Callable[[Any], Any], error: type, words: str
) -> None:
    with pytest.raises(error, match=words):
        ask(client)
    assert server.requests() == 0


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"url": "ftp://127.0.0.1:7070"}, "expected http://HOST:PORT"),
        ({"url": "http://127.0.0.1:7070/?x=1"}, "must not have a query"),
        ({"auth_token": "a b"}, "without white space"),
        ({"ca_file": "/nowhere/ca.pem"}, "cannot read the CA file"),
        ({"timeout": -1}, "timeout must be a finite"),
    ],
)
def test_bad_client_options_are_refused(options: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        fencelock.Client(**options)
