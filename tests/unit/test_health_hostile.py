"""The probe and metrics server under hostile clients, in this process (issue 31 item 3).

The stdlib server it replaced gave every connection a thread for up to 10 s: 1000 idle
connections were 1000 threads in every daemon. Behind the front they are file descriptors:
with 1000 idle connections and 100 half-sent heads held on the port (its real limits; from 22
addresses of 127/8, 50 each, under the per-peer cap), the probes and a scrape are still
answered, and the process holds no thread beyond the front's own (its loop's and its pool's).
No timing is asserted beyond a generous deadline on an answer.
"""

from __future__ import annotations

import resource
import socket
import threading
from collections.abc import Iterator

import pytest
import requests
from web_fakes import connection_from

from sunk.controller.health import PROBE_LIMITS, HttpEndpoints

IDLE, HALF_SENT = 1000, 100
PER_SOURCE = 50  # under PROBE_LIMITS.max_connections_per_peer: the port holds every one
PATIENCE = 60.0  # generous: what the kubelet or Prometheus would wait at most


@pytest.fixture
def many_open_files() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * (IDLE + HALF_SENT) + 512  # this process holds both ends
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"needs {needed} open files, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_probes_and_a_scrape_are_answered_past_1000_idle_and_100_half_sent_connections(many_open_files):
    threads_before = threading.active_count()
    server = HttpEndpoints("127.0.0.1:0", healthz={"ping": lambda: True}, readyz={"informers": lambda: True},
                           metrics=True)
    server.start()
    held: list[socket.socket] = []
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert requests.get(f"{base}/healthz", timeout=PATIENCE).text == "ok"
        sources = (f"127.0.1.{n // PER_SOURCE}" for n in range(IDLE + HALF_SENT))
        for _ in range(IDLE):
            held.append(connection_from(next(sources), server.port, PATIENCE))
        for _ in range(HALF_SENT):
            sock = connection_from(next(sources), server.port, PATIENCE)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Never: ends")
            held.append(sock)

        assert requests.get(f"{base}/healthz", timeout=PATIENCE).text == "ok"
        assert requests.get(f"{base}/readyz", timeout=PATIENCE).text == "ok"
        scrape = requests.get(f"{base}/metrics", timeout=PATIENCE)
        assert scrape.status_code == 200 and b"# TYPE " in scrape.content

        assert server.open_connections >= IDLE  # (held by the server, not refused or closed)
        # The threads the front may ever hold: its loop's and its pool's, whatever the connections.
        assert threading.active_count() <= threads_before + 1 + PROBE_LIMITS.threads
    finally:
        for sock in held:
            sock.close()
        server.stop()
