"""One user of the dev cluster at a time.

Cluster tests and benchmarks assume they have the dev cluster to themselves: they drain
nodes, lock them, fill them with jobs and count calls. Two sessions on one machine (a
test run while a benchmark runs, or two `tox` runs) would break each other in ways that
look like product bugs. Each takes this advisory lock (flock on
``<home>/run/cluster.claim``) for as long as it uses the cluster; a second one waits and
says who holds it. The kernel drops a flock when its holder dies, so a killed session
never leaves the cluster claimed.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

CLAIM_FILE = "cluster.claim"


class ClaimTimeout(TimeoutError):
    pass


@contextmanager
def claimed(run_dir: Path, who: str, timeout: float = 3600, log: TextIO = sys.stderr) -> Iterator[None]:
    """Hold the dev cluster for ``who`` (written into the file, so a waiter can name it)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM_FILE
    with open(path, "a+") as f:
        deadline = time.monotonic() + timeout
        announced = False
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ClaimTimeout(f"the dev cluster is still claimed after {timeout:.0f}s by "
                                       f"{holder(path)} ({path})") from None
                if not announced:
                    print(f"sunk-dev: waiting for {holder(path)} to finish with the dev cluster ({path})",
                          file=log, flush=True)
                    announced = True
                time.sleep(0.5)
        f.seek(0)
        f.truncate()
        f.write(f"{who} (pid {os.getpid()})\n")
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            f.flush()
            fcntl.flock(f, fcntl.LOCK_UN)


def holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "another session"
