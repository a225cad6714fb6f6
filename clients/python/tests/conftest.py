"""Fixtures: servers of the test's own (see :mod:`tests.support`), clients of them, and the
margins the loss tests measured, shown at the end of the run."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional, Union

import pytest

import fencelock

from .support import Lost, Process, Redis, Server, principal

#: What the loss tests recorded: (test, milliseconds by which lost fired before the grant).
MARGINS: list[tuple[str, float]] = []
MARGIN = "lost_before_grant_ms"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Starts ``fencelock serve`` with more flags (``store=`` for another store); every
    server started is stopped after the test."""
    servers: list[Process] = []

    def started(*args: str, store: Optional[str] = None) -> Server:
        server = Server(tmp_path / f"server-{len(servers)}", *args, store=store)
        servers.append(server)
        return server

    yield started
    for server in servers:
        server.stop()


@pytest.fixture
def server(start: Callable[..., Server]) -> Server:
    """A server on the embedded store, with default flags."""
    return start()


@pytest.fixture
def client(server: Server) -> Iterator[fencelock.Client]:
    with fencelock.Client(server.url) as client:
        yield client


class Auth:
    """A server with ``--auth``: ``app`` may read and lock every name, ``ops`` may read and
    force-release (``admin``) every name."""

    def __init__(self, folder: Path, start: Callable[..., Server]) -> None:
        folder.mkdir()
        self.app, app = principal(folder, "app", ["read", "lock"])
        self.ops, ops = principal(folder, "ops", ["read", "admin"])
        (folder / "auth.toml").write_text(f"{app}\n{ops}\n")
        self.server = start("--auth", str(folder / "auth.toml"))

    def force_release(self, name: str) -> None:
        answer = self.server.delete(f"/locks/{name}", {"force": True}, token=self.ops)
        assert answer.status_code == 204, answer.text


@pytest.fixture
def auth(tmp_path: Path, start: Callable[..., Server]) -> Auth:
    return Auth(tmp_path / "auth", start)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[Redis]:
    redis = Redis(tmp_path / "redis")
    yield redis
    redis.stop()


#: Checks a loss against the lease and the other owner's grant (:func:`lost_in_time`).
LostInTime = Callable[[Union[fencelock.Lease, fencelock.AsyncLease], Lost, datetime], None]


@pytest.fixture
def lost_in_time(record_property: Callable[[str, object], None]) -> LostInTime:
    """Checks that a lease's loss fired before the lease's end as its holder was told it — on
    the guard's clock (``held_until``) and on the server's (``expires_at``): a guard with no
    safety margin fails here, though it may still beat the other owner by a few ms — and
    before the other owner's grant (its ``acquired_at``); the margin is shown at the end of
    the run."""

    def check(
        lease: Union[fencelock.Lease, fencelock.AsyncLease], lost: Lost, granted_at: datetime
    ) -> None:
        assert lost.monotonic < lease.held_until, "lost after the end the guard counted on"
        assert lost.wall < lease.info.expires_at, "lost after the end the server told of"
        margin = (granted_at - lost.wall).total_seconds() * 1000
        record_property(MARGIN, margin)
        assert margin > 0, f"lost fired {-margin:.0f} ms after the other owner's grant"

    return check


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        for key, value in report.user_properties:
            if key == MARGIN and isinstance(value, float):
                MARGINS.append((report.nodeid, value))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for test, margin in MARGINS:
        terminalreporter.write_line(
            f"loss test: lost fired {margin:.0f} ms before the other owner's grant ({test})"
        )
