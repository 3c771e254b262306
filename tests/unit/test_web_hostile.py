"""sunk/commands/web.py under hostile clients, in a real gunicorn on localhost (issue 31 item 3).

gthread gave any connection that sent one byte a thread until its request was whole: 16
stalled the scheduler's hook API, 256 the Syncer's. Here each listener holds 1000 idle and
1000 one-byte connections (from 10 addresses of 127/8, under the per-peer cap), and a
slow-loris, while a real caller still gets its answer; the slow-loris is cut off by the server.
And one host's flood, far past its per-peer cap, with more hosts filling the listener's cap,
closes none of another peer's waiting connections. Deadlines are short (3 s) so that the test
is quick; the assertions wait generously and assert what happens, never how fast.
"""

from __future__ import annotations

import resource
import socket
import ssl
import time
from collections.abc import Iterator

import pytest
import requests
from web_fakes import certificates, connection_from, served_in_a_child

from sunk.commands.web import TLS, Listener
from sunk.controller.httpfront import Limits

VERBS, HOOKS, PEERCAP = 18990, 18991, 18992
LIMITS = Limits(threads=4, head_seconds=3.0, body_seconds=3.0)
HOSTILE = 1000
PATIENCE = 60.0  # generous: what a real caller would wait at most
HOSTILE_SOURCES = [f"127.0.0.{n}" for n in range(100, 110)]  # 2000 connections, 200 a peer: under its cap (256)
# Small caps and a head deadline longer than the test: a connection closed there was closed for room.
PEER_LIMITS = Limits(threads=4, head_seconds=PATIENCE, max_connections=400, max_connections_per_peer=50)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server(certs) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 4 * HOSTILE + 512  # this process holds the clients' ends
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"needs {needed} open files, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    server = certs["server"]
    listeners = [Listener(f"127.0.0.1:{VERBS}", "verbs", TLS(str(server.cert), str(server.key), str(server.ca)),
                          limits=LIMITS),
                 Listener(f"127.0.0.1:{HOOKS}", "hooks", limits=LIMITS),
                 Listener(f"127.0.0.1:{PEERCAP}", "hooks", limits=PEER_LIMITS)]
    with served_in_a_child(listeners, 4, ready_port=HOOKS):
        yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _real_call(port: int, certs) -> dict:
    if port == HOOKS:
        return requests.get(f"http://127.0.0.1:{port}/who", timeout=PATIENCE).json()
    client = certs["client"]
    return requests.get(f"https://127.0.0.1:{port}/who", timeout=PATIENCE, verify=str(certs["ca"].cert),
                        cert=(str(client.cert), str(client.key))).json()


def _client_hello() -> bytes:
    """A real TLS ClientHello, to drip into the TLS listener a byte at a time."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    with pytest.raises(ssl.SSLWantReadError):
        context.wrap_bio(incoming, outgoing).do_handshake()
    return outgoing.read()


def _open(port: int, count: int, first: bytes = b"", sources: list[str] = HOSTILE_SOURCES) -> list[socket.socket]:
    opened = []
    for n in range(count):
        sock = connection_from(sources[n % len(sources)], port, PATIENCE)
        if first:
            sock.sendall(first)
        opened.append(sock)
    return opened


def _closed_by_server(sock: socket.socket, *, drip: bytes, within: float) -> bool:
    """Send ``drip`` a byte every 0.2 s until the server closes (or answers and closes)."""
    deadline = time.monotonic() + within
    sock.settimeout(0.2)
    sent = 0
    while time.monotonic() < deadline:
        try:
            sock.recv(4096)  # the server's 408 or its close (b""): either way it ended the request
            return True
        except TimeoutError:
            pass
        except OSError:
            return True
        try:
            sock.sendall(drip[sent % len(drip):sent % len(drip) + 1])
            sent += 1
        except OSError:
            return True
    return False


@pytest.mark.parametrize("port,app", [(HOOKS, "hooks"), (VERBS, "verbs")])
def test_a_real_caller_is_answered_past_1000_idle_and_1000_one_byte_connections(server, certs, port, app):
    held = []
    try:
        held += _open(port, HOSTILE)
        held += _open(port, HOSTILE, first=b"G" if port == HOOKS else b"\x16")
        assert _real_call(port, certs) == {"app": app}
        assert _real_call(HOOKS if port == VERBS else VERBS, certs)  # the other listener too
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize("port", [HOOKS, VERBS])
def test_a_slow_loris_is_cut_off_by_the_server_while_others_are_answered(server, certs, port):
    drip = b"GET /who HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 10_000 if port == HOOKS else _client_hello()
    sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
    try:
        assert _real_call(port, certs)
        assert _closed_by_server(sock, drip=drip, within=PATIENCE)
    finally:
        sock.close()


def test_a_half_sent_request_gets_a_json_408_then_the_close(server):
    sock = socket.create_connection(("127.0.0.1", HOOKS), timeout=PATIENCE)
    try:
        sock.sendall(b"GET /who HTTP/1.1\r\nHost: x\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert answer.endswith(b'{"error": "request head not whole within 3 s"}')


def test_an_idle_connection_is_closed_quietly(server):
    sock = socket.create_connection(("127.0.0.1", HOOKS), timeout=PATIENCE)
    try:
        assert sock.recv(4096) == b""
    finally:
        sock.close()


def test_tls_and_mutual_tls_stay_per_listener(server, certs):
    assert _real_call(HOOKS, certs) == {"app": "hooks"}
    assert _real_call(VERBS, certs) == {"app": "verbs"}
    with pytest.raises(requests.RequestException):  # the verbs port still wants a client certificate
        requests.get(f"https://127.0.0.1:{VERBS}/who", timeout=PATIENCE, verify=str(certs["ca"].cert))
    with pytest.raises(requests.RequestException):  # and the hook port stays plain
        requests.get(f"https://127.0.0.1:{HOOKS}/who", timeout=PATIENCE, verify=str(certs["ca"].cert))


def _still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True  # nothing to read, not closed
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def _asked(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /who HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock.recv(65536)


def test_one_hosts_flood_past_its_cap_closes_none_of_another_peers_waiting_connections(server):
    """127.0.0.1 opens 20 times its cap, eight more hosts twice theirs (together past the listener's cap, which
    they then share, about 40 each): the 10 connections 127.0.0.2 holds, waiting for their requests, fewer than
    any flooding host's, all stay open and are answered."""
    other = [connection_from("127.0.0.2", PEERCAP, PATIENCE) for _ in range(10)]
    held = []
    try:
        held += _open(PEERCAP, 20 * PEER_LIMITS.max_connections_per_peer, sources=["127.0.0.1"])
        held += _open(PEERCAP, 16 * PEER_LIMITS.max_connections_per_peer, first=b"G",
                      sources=[f"127.0.0.{n}" for n in range(10, 18)])
        assert requests.get(f"http://127.0.0.1:{PEERCAP}/who", timeout=PATIENCE).json() == {"app": "hooks"}
        assert all(_still_open(sock) for sock in other)
        answers = [_asked(sock) for sock in other]
        assert all(answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"app":"hooks"}\n')
                   for answer in answers), answers[:3]
        assert not _still_open(held[0])  # the flood's first was closed for its own newer ones
    finally:
        for sock in other + held:
            sock.close()
