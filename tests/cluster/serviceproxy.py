"""A Service in front of several replicas of one daemon, for tests that run more than one.

In a cluster, placeholder jobs reach sunk-scheduler's hook API through its Service, which
sends each connection to a replica that is up. Two replicas on one machine need two ports,
and a job's ``--hooks-url`` is fixed when it is submitted; this proxy is that Service: one
port, each connection passed to the first backend that accepts it (round robin), closed at
once when none does, as a Service without endpoints refuses it.
"""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Callable, Sequence


class ServiceProxy:
    """``with ServiceProxy(lambda: [port, ...]) as proxy: proxy.url``; ``backends`` is asked per connection:
    ports on 127.0.0.1, or (host, port) pairs (a Pod's address, as kube-proxy sends to an endpoint)."""

    def __init__(self, backends: Callable[[], Sequence[int | tuple[str, int]]]):
        self.backends = backends
        self.connections = 0
        self.refused = 0  # connections no backend took
        self._turn = itertools.count()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.5)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="service-proxy", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServiceProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join(5)
        self._server.close()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        self.connections += 1
        backends = list(self.backends())
        start = next(self._turn)
        for i in range(len(backends)):
            backend = backends[(start + i) % len(backends)]
            try:
                upstream = socket.create_connection(backend if isinstance(backend, tuple) else ("127.0.0.1", backend),
                                                    timeout=2)
            except OSError:
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
            back.start()
            _pipe(client, upstream)
            back.join()
            upstream.close()
            client.close()
            return
        self.refused += 1
        client.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until ``source`` ends, then end ``sink``'s writing half (so an HTTP reply still gets back)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
