"""The fenced-write example runs, and the protected resource rejects the late write."""

from __future__ import annotations

import contextlib
import doctest
import io
import re
import subprocess
import sys
from pathlib import Path

import fencelock.fence

from .support import Server

HERE = Path(__file__).resolve().parent.parent
EXAMPLES = HERE / "examples"


def test_the_first_five_lines_of_the_readme_hold_a_lock(server: Server) -> None:
    readme = (HERE / "README.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", readme, re.DOTALL)
    assert snippet is not None
    lines = snippet.group(1).replace("http://127.0.0.1:7070", server.url)
    assert len(lines.splitlines()) == 5
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(lines, "README.md", "exec"), {})
    assert re.fullmatch(r"holding payment:42, fencing token 1 lost: False\n", out.getvalue())
    assert server.lease("payment:42") is None, "released at the end of the block"


def test_the_fenced_write_example_rejects_the_paused_holders_late_write(server: Server) -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "fenced_write.py"), "--server", server.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "REJECTED" in run.stdout and "changed 0 row(s)" in run.stdout
    assert "the balance is 80" in run.stdout


def test_the_fence_module_examples_hold() -> None:
    assert doctest.testmod(fencelock.fence).failed == 0
