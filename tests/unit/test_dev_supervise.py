"""sunk_dev.supervise: a command started again whenever it exits, stopped with the supervisor."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path


def _until(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_exited_command_is_started_again_and_sigterm_stops_both(tmp_path: Path):
    starts, pid_file = tmp_path / "starts", tmp_path / "pid"
    # Each start appends a line; the first exits at once (as an operator that lost its Lease), later ones stay.
    script = (f"import os, time; p = {str(starts)!r}; open(p, 'a').write('x'); "
              f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
              "time.sleep(0 if len(open(p).read()) == 1 else 60)")
    sup = subprocess.Popen([sys.executable, "-m", "sunk_dev.supervise", "--", sys.executable, "-c", script])
    try:
        _until(lambda: starts.exists() and len(starts.read_text()) == 2)
        _until(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit())
        child = int(pid_file.read_text())
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(10) == 0  # (the child ended on the SIGTERM passed on: a clean stop)
        _until(lambda: not Path(f"/proc/{child}").exists())
        assert len(starts.read_text()) == 2
    finally:
        sup.kill()
        sup.wait()


def test_the_command_dies_with_a_killed_supervisor(tmp_path: Path):
    pid_file = tmp_path / "pid"
    script = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    sup = subprocess.Popen([sys.executable, "-m", "sunk_dev.supervise", "--", sys.executable, "-c", script])
    try:
        _until(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit())
        child = int(pid_file.read_text())
        sup.kill()
        sup.wait()
        _until(lambda: not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2])
    finally:
        sup.kill()
        sup.wait()
