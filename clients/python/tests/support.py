"""What the tests run against: real ``fencelock serve`` processes (``$FENCELOCK_BIN``) on free
loopback ports with the embedded store in a temporary folder, a real Redis for a store that
dies, real TLS certificates from ``openssl``, and a plain HTTP client to see what a user of
the API would see. Every process started here is stopped by its PID."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar
from urllib.parse import quote

import httpx

import fencelock

T = TypeVar("T")

#: How long any state a test waits for may take to show; only a failing test waits this long.
DEADLINE = 15.0


def eventually(check: Callable[[], Optional[T]], what: str, deadline: float = DEADLINE) -> T:
    """Polls ``check`` until it returns something other than ``None``/``False``; fails the
    test, saying ``what`` it waited for, if that takes longer than ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"waited {deadline} s for {what}")
        time.sleep(0.01)


@dataclass(frozen=True)
class Lost:
    """A loss as a lease's ``on_lost`` callback was told it, and when: by the wall clock (the
    server's too: the same host) and by this process's monotonic clock (the guard's)."""

    loss: fencelock.Loss
    wall: datetime
    monotonic: float


class LossWatch:
    """An ``on_lost`` callback that keeps what it is called with."""

    def __init__(self) -> None:
        self.seen: list[Lost] = []

    def __call__(self, loss: fencelock.Loss) -> None:
        self.seen.append(Lost(loss, datetime.now(timezone.utc), time.monotonic()))

    def once(self) -> Lost:
        """The one loss seen (the callback is called once)."""
        [lost] = self.seen
        return lost


def program(name: str) -> str:
    """The path of a program the suite needs: missing is a failure, never a skip."""
    found = shutil.which(name)
    if found is None:
        raise AssertionError(f"{name} is not installed (clients/python/test installs it)")
    return found


def fencelock_bin() -> str:
    """The ``fencelock`` binary under test."""
    path = os.environ.get("FENCELOCK_BIN")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError(f"FENCELOCK_BIN must name a built fencelock binary, not {path!r}")
    return path


def free_port() -> int:
    """A loopback port nothing listens on now (for programs that cannot be given port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Process:
    """A child process of the test, stopped by its PID."""

    def __init__(self, args: Sequence[str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def pause(self) -> None:
        """SIGSTOP: the whole process stops; the kernel still queues connections for it."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.popen.poll() is not None:
            return
        self.resume()
        self.popen.terminate()
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def alive(self) -> bool:
        return self.popen.poll() is None


class Server(Process):
    """``fencelock serve`` on a free loopback port; ``args`` are more flags."""

    def __init__(self, folder: Path, *args: str, store: Optional[str] = None) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        store = store or f"sqlite://{folder / 'fencelock.db'}"
        command = [fencelock_bin(), "serve", "--listen", "127.0.0.1:0", "--store", store]
        super().__init__([*command, "--log-format", "json", *args], folder / "server.log")
        self.address = eventually(self._serving, f"fencelock serve to start (log: {self.log})")
        scheme = "https" if "--tls-cert" in args else "http"
        self.url = f"{scheme}://{self.address}"
        self.http = httpx.Client(base_url=self.url, timeout=10, verify=False)

    def _serving(self) -> Optional[str]:
        if not self.alive():
            raise AssertionError(f"fencelock serve exited: {self.log.read_text()}")
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if event.get("message") == "fencelock is serving":
                    address: str = event["address"]
                    return address
        return None

    def stop(self) -> None:
        self.http.close()
        super().stop()

    def lease(self, name: str, kind: str = "locks", token: Optional[str] = None) -> Any:
        """What ``GET /{kind}/{name}`` shows (``None`` for a 404), as a user of the API sees it."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        answer = self.http.get(f"/{kind}/{quote(name, safe='')}", headers=headers)
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        return answer.json()

    def post(self, path: str, body: dict[str, Any], token: Optional[str] = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.http.post(path, json=body, headers=headers)

    def delete(
        self, path: str, body: dict[str, Any], token: Optional[str] = None
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.http.request("DELETE", path, json=body, headers=headers)

    def requests(self) -> float:
        """How many requests the server has had, but those for ``/metrics``."""
        text = self.http.get("/metrics").text
        counts = re.findall(
            r'^fencelock_http_requests_total\{route="([^"]*)".*\} (\S+)$', text, re.M
        )
        return sum(float(count) for route, count in counts if route != "/metrics")

    def metric(self, series: str) -> float:
        """The value of one series of ``/metrics`` (0 if it has none yet)."""
        text = self.http.get("/metrics").text
        match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0


def principal(folder: Path, name: str, rights: Sequence[str]) -> tuple[str, str]:
    """A token for the principal ``name`` from ``fencelock auth new-token``, and its block of
    the auth file with ``rights`` on every name."""
    printed = subprocess.run(
        [fencelock_bin(), "auth", "new-token", name], check=True, capture_output=True, text=True
    ).stdout
    token = re.search(r"^token: (\S+)$", printed, re.MULTILINE)
    block = printed[printed.index("[[principal]]") :]
    lines = [line for line in block.splitlines() if not line.startswith("#")]
    quoted = ", ".join(f'"{r}"' for r in rights)
    grants = f'grants = [{{ prefix = "", rights = [{quoted}] }}]'
    assert token is not None and "grants = []" in lines, printed
    return token.group(1), "\n".join(grants if line == "grants = []" else line for line in lines)


class Redis(Process):
    """A throwaway ``redis-server`` on a free loopback port, with no persistence."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        args = [program("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(folder)]
        super().__init__(args, folder / "redis.log")
        eventually(self._answers, f"redis-server to start (log: {self.log})")

    def _answers(self) -> bool:
        if not self.alive():
            raise AssertionError(f"redis-server exited: {self.log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False


def certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signed for ``127.0.0.1`` with its key: (ca, cert, key)."""
    openssl = program("openssl")

    def run(*args: object) -> None:
        subprocess.run([openssl, *map(str, args)], check=True, capture_output=True)

    ca_key, ca, key, csr, cert, ext = (
        folder / name for name in ("ca.key", "ca.pem", "key.pem", "csr.pem", "cert.pem", "ext.cnf")
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca_subject = ["-subj", "/CN=fencelock test CA", "-days", "2"]
    run("req", "-x509", *ec, "-keyout", ca_key, "-out", ca, *ca_subject)
    run("req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1")
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    signed = ["-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2", "-extfile", ext]
    run("x509", "-req", "-in", csr, *signed, "-out", cert)
    return ca, cert, key
