"""Ports handed to daemons under test (``sunk_dev.procs.free_port``)."""

from __future__ import annotations

import socket

from sunk_dev import procs


class RepeatingSocket:
    """A socket whose ephemeral ports come from a fixed list, as the kernel may repeat one."""

    ports: list[int] = []

    def __init__(self, *args: object) -> None:
        self.port = 0

    def __enter__(self) -> RepeatingSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def bind(self, address: tuple[str, int]) -> None:
        self.port = RepeatingSocket.ports.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def test_a_port_the_kernel_gives_twice_is_handed_out_once(monkeypatch):
    monkeypatch.setattr(procs, "_HANDED_OUT", set())
    monkeypatch.setattr(procs.socket, "socket", RepeatingSocket)
    RepeatingSocket.ports = [40001, 40001, 40001, 40002, 40001, 40003]
    assert [procs.free_port() for _ in range(3)] == [40001, 40002, 40003]


def test_ports_are_free_and_distinct():
    ports = [procs.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    for port in ports[:5]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_kubelet_counts_as_started_only_by_a_status_posted_since_its_start():
    from sunk_dev.cluster import _posted_since

    started = 1_764_000_000.7  # (2025-11-24T16:00:00.7Z)
    assert _posted_since("2025-11-24T16:00:00Z", started)  # (the same second: RFC 3339 here has whole seconds)
    assert _posted_since("2025-11-24T16:00:05Z", started)
    assert not _posted_since("2025-11-24T15:59:59Z", started)  # (the Node's condition from before `down`)
    assert not _posted_since(None, started)
    assert not _posted_since("yesterday", started)
