"""Set-up phases whose tools talk a lot (debootstrap, apt, go, umoci): progress, not noise.

Their output goes to a log file; the terminal gets one line with the phase's time when it did
any work, or the log's path when it failed.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def log_phase(name: str, log_path: Path, out: IO[str] = sys.stderr) -> Iterator[IO[str]]:
    """Run a phase with its tools' output in ``log_path`` (appended, under a header with the time)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with log_path.open("a") as log:
        print(f"== {name} ({time.strftime('%Y-%m-%d %H:%M:%S')})", file=log, flush=True)
        try:
            yield log
        except BaseException:
            print(f"  {name:<16} failed after {time.monotonic() - began:.0f}s; its output: {log_path}", file=out,
                  flush=True)
            raise
    if (took := time.monotonic() - began) >= 1:
        print(f"  {name:<16} ready ({took:.0f}s; output in {log_path})", file=out, flush=True)
