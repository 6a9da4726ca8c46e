"""Fixtures of the davinci package's tests: the backends (the embedded device and a real
davinci-mockd) and a daemon to start.

The daemon binary is $DAVINCI_MOCKD, else davinci-mockd on $PATH (scripts/python-test.sh
builds it and sets DAVINCI_MOCKD). Without one, the daemon's tests are skipped, unless
DAVINCI_PYTEST_REQUIRE_MOCKD=1 (the test command sets it), when they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Iterator, List, Optional

import pytest


def mockd_binary() -> Optional[str]:
    return os.environ.get("DAVINCI_MOCKD") or shutil.which("davinci-mockd")


class Mockd:
    """A davinci-mockd in its own socket directory, stopped by stop()."""

    def __init__(self, *args: str) -> None:
        exe = mockd_binary()
        if exe is None:
            if os.environ.get("DAVINCI_PYTEST_REQUIRE_MOCKD") == "1":
                pytest.fail("no davinci-mockd: set DAVINCI_MOCKD to its path")
            pytest.skip("no davinci-mockd (set DAVINCI_MOCKD, or put it on PATH)")
        self.dir = tempfile.mkdtemp(prefix="davinci-pytest-")
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        cmd: List[str] = [exe, "--socket-dir", self.dir, "--exit-with-parent", *args]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "ready" not in line:
            self.proc.wait(timeout=30)
            pytest.fail(f"davinci-mockd did not get ready ({self.proc.returncode}): {line!r}")

    def path(self, n: int = 0) -> str:
        return f"mock:{self.dir}/davinci{n}.sock"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def mockd() -> Iterator[Mockd]:
    """A shared-mode daemon for the whole run (tests open several clients)."""
    d = Mockd("--share-mode", "shared")
    yield d
    d.stop()


@pytest.fixture(params=["embedded", "mockd"])
def spec(request: pytest.FixtureRequest) -> str:
    """Each test with this fixture runs on the embedded device and on davinci-mockd."""
    if request.param == "embedded":
        return "embedded"
    return request.getfixturevalue("mockd").path(0)
