"""Product processes under test: started as real subprocesses, stopped by PID."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import requests

from sunk_dev.procs import free_port  # noqa: F401 (the harnesses' one)

ROOT = Path(__file__).resolve().parents[2]


class Process:
    """One ``python -m module`` with flags; readiness is its /readyz answering 200.

    ``cwd``: where it runs (this checkout by default), and so whose code it runs: ``python -m`` puts
    its working directory first on ``sys.path``, before PYTHONPATH, so another checkout's code needs
    its own ``cwd``.
    """

    def __init__(self, name: str, module: str, args: list[str], ready_url: str, log_dir: Path,
                 env: Optional[dict[str, str]] = None, cwd: Optional[Path] = None):
        self.name, self.module, self.args, self.ready_url = name, module, args, ready_url
        self.log = log_dir / f"{name}.log"
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.cwd = cwd or ROOT
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 60) -> None:
        """Start, unless already running: a ``finally`` that restarts it must never leave a second process
        holding the same Lease and lock names after the test (one did, and decided for the next tests)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", self.module, *self.args], stdout=out,
                                         stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if requests.get(self.ready_url, timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        # Stop it: a fixture that raises here never reaches its teardown, and a process left
        # running holds its ports and Lease into the next test run.
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout}s (stopped):\n{self.tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        """Signal the whole process group (gunicorn master and worker), then wait."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def kill(self) -> None:
        """As a crash would: no clean shutdown, no lease release."""
        self.stop(signal.SIGKILL)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def secret_file(directory: Path, name: str) -> Path:
    path = directory / name
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path
