"""``python -m sunk_dev.supervise -- CMD ...``: run CMD and start it again whenever it exits, as a Deployment's
kubelet restarts a container. The dev cluster runs its sunk-operator this way: a leader-elected daemon exits when it
loses its Lease (the apiserver down longer than the renew deadline, which the fault tests do), and the dev cluster's
own slurmd Pods must not be left without their operator for the rest of a test session.

SIGTERM (``Daemon.stop``) is passed on to CMD, and the supervisor exits once CMD has.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

RESTART_DELAY = 1.0
PR_SET_PDEATHSIG = 1  # prctl(2)


def supervise(argv: Sequence[str], *, restart_delay: float = RESTART_DELAY) -> int:
    stopping = threading.Event()
    child: list[subprocess.Popen[bytes]] = []

    def stop(*_: object) -> None:
        stopping.set()
        if child and child[0].poll() is None:
            child[0].send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    while not stopping.is_set():
        child[:] = [subprocess.Popen(list(argv), preexec_fn=_die_with_parent)]
        if stopping.is_set():  # (SIGTERM came while it was being started)
            child[0].send_signal(signal.SIGTERM)
        code = child[0].wait()
        if not stopping.is_set():
            print(f"sunk_dev.supervise: {argv[0]} exited with {code}; starting it again", file=sys.stderr, flush=True)
            time.sleep(restart_delay)
    return 0 if code < 0 else code  # (ended by the SIGTERM passed on: a clean stop)


def _die_with_parent() -> None:
    """In the child: SIGTERM when the supervisor dies (a SIGKILL after ``Daemon.stop``'s grace leaves no orphan)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m sunk_dev.supervise -- CMD ...", file=sys.stderr)
        return 2
    return supervise(args)


if __name__ == "__main__":
    sys.exit(main())
