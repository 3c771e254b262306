"""Hostile clients for the HTTP front's tests and benchmarks: one host flooding a listener with connections.

Shared by tests/cluster/test_locking_flows.py (the real Syncer's hook API) and benchmarks/hostile.py (no
cluster): any Slurm user on a node can do this to a hook API.
"""

from __future__ import annotations

import collections
import socket
import threading
from typing import Optional


class Flood:
    """One host (``source``, an address of 127/8) opening connections to ``port`` without end, each sending
    ``first``, holding its last ``held``; ``per_second``: at most that many a second (None: as fast as it can).

    ``opened`` counts the connections made; ``closed_by_server``, once the flood has ended, those the server had
    closed by the time the flood let them go or ended (the per-peer cap closing the flood's own oldest for its
    newer ones, or the head deadline)."""

    def __init__(self, port: int, *, held: int, source: str, first: bytes = b"P",
                 per_second: Optional[float] = None):
        self.port, self.held, self.source, self.first = port, held, source, first
        self.pause = 1.0 / per_second if per_second else 0.0
        self.opened = 0
        self.closed_by_server = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flood", daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        held: collections.deque[socket.socket] = collections.deque()
        while not self._stop.wait(self.pause):
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=5, source_address=(self.source, 0))
                if self.first:
                    sock.sendall(self.first)
            except OSError:
                continue
            self.opened += 1
            held.append(sock)
            if len(held) > self.held:
                self._let_go(held.popleft())
        for sock in held:
            self._let_go(sock)

    def _let_go(self, sock: socket.socket) -> None:
        """Close ``sock``, counting it as the server's if the server had closed (or reset) it already."""
        sock.setblocking(False)
        try:
            if sock.recv(1) == b"":
                self.closed_by_server += 1
        except BlockingIOError:
            pass
        except OSError:
            self.closed_by_server += 1
        sock.close()
