"""sunk/controller/httpfront.py: its limits, its connection cap and its liveness, served in this process.

The whole server under 1000 hostile connections per listener is tests/unit/test_web_hostile.py;
here one ListenerFront runs on a loop in a thread, with small limits, so that each rule shows.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import h11
import pytest
import requests
from flask import Flask, request

from sunk.commands.web import nofile_soft_limit
from sunk.controller.httpfront import (
    Admission,
    FrontHealth,
    FrontThread,
    Limits,
    ListenerFront,
    PeerTable,
    PoolSnapshot,
    Streamed,
    admission,
    biggest_reader,
    call_app,
    environ_for,
    error_answer,
    parse_status,
    peer_of,
    refusal_status,
    text_error_answer,
    tick_forever,
    wedged,
)

PATIENCE = 30.0


def _app(release: threading.Event) -> Flask:
    app = Flask("t")

    @app.post("/echo")
    def echo():
        return {"got": len(request.get_data())}

    @app.get("/block")
    def block():
        release.wait(PATIENCE)
        return {"released": True}

    @app.get("/who")
    def who():
        return {"app": "t"}

    return app


@pytest.fixture
def front_on() -> Iterator[Callable[[Limits], tuple[ListenerFront, threading.Event]]]:
    started: list[tuple[asyncio.AbstractEventLoop, ListenerFront, threading.Event, list[asyncio.Task[None]]]] = []

    def start(limits: Limits) -> tuple[ListenerFront, threading.Event]:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        release = threading.Event()
        front = ListenerFront("test", sock, _app(release), limits=limits)
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        ticks: list[asyncio.Task[None]] = []

        async def main() -> None:
            await front.start()
            ticks.append(asyncio.get_running_loop().create_task(tick_forever([front], every=0.1)))
            ready.set()

        threading.Thread(target=lambda: (loop.run_until_complete(main()), loop.run_forever()), daemon=True).start()
        assert ready.wait(PATIENCE)
        started.append((loop, front, release, ticks))
        return front, release

    yield start
    for loop, front, release, ticks in started:
        release.set()
        loop.call_soon_threadsafe(ticks[0].cancel)
        asyncio.run_coroutine_threadsafe(front.stop(1.0), loop).result(PATIENCE)
        loop.call_soon_threadsafe(loop.stop)


def _url(front: ListenerFront, path: str) -> str:
    return f"http://127.0.0.1:{front.port}{path}"


def _raw(front: ListenerFront, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", front.port), timeout=PATIENCE) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_body_over_the_limit_is_a_json_413(front_on):
    front, _ = front_on(Limits(max_body_bytes=1000))
    assert requests.post(_url(front, "/echo"), data=b"x" * 1000, timeout=PATIENCE).json() == {"got": 1000}
    answer = requests.post(_url(front, "/echo"), data=b"x" * 1001, timeout=PATIENCE)
    assert answer.status_code == 413 and "over 1000 bytes" in answer.json()["error"]


def test_a_chunked_body_over_the_limit_is_a_413_too(front_on):
    front, _ = front_on(Limits(max_body_bytes=1000))
    assert requests.post(_url(front, "/echo"), data=iter([b"x" * 600]), timeout=PATIENCE).json() == {"got": 600}
    answer = _raw(front, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"258\r\n" + b"x" * 600 + b"\r\n258\r\n" + b"x" * 600 + b"\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413 ")


def test_bodies_held_at_once_are_capped_across_connections_and_the_count_returns(front_on):
    """Many connections each sending a body under the per-request limit must not add up to the process's memory."""
    front, _ = front_on(Limits(max_body_bytes=1000, max_buffered_bytes=1500))
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
    with socket.create_connection(("127.0.0.1", front.port), timeout=PATIENCE) as holding:
        holding.sendall(head + b"x" * 900)  # 900 bytes held, the body not whole
        time.sleep(0.3)
        answer = _raw(front, head + b"x" * 1000)  # 900 + 1000 > 1500
        assert answer.startswith(b"HTTP/1.1 503 ") and b"in flight" in answer
        holding.sendall(b"x" * 100)
        assert b'"got":1000' in holding.recv(65536).replace(b" ", b"")
    # Every byte counted was given back: a whole body fits again.
    assert requests.post(_url(front, "/echo"), data=b"x" * 1000, timeout=PATIENCE).json() == {"got": 1000}


def test_a_head_over_the_limit_is_a_json_431(front_on):
    front, _ = front_on(Limits(max_head_bytes=2048))
    answer = _raw(front, b"GET /who HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"error": "request head over 2048 bytes"}
    with socket.create_connection(("127.0.0.1", front.port), timeout=PATIENCE) as sock:  # one that never ends
        sock.sendall(b"GET /who HTTP/1.1\r\nHost: x\r\n" + b"X-Big: a\r\n" * 1000)
        assert sock.recv(4096).startswith(b"HTTP/1.1 431 ")


def test_garbage_is_a_json_400(front_on):
    front, _ = front_on(Limits())
    answer = _raw(front, b"\x00\x01 nonsense\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and b'"error"' in answer


def test_a_body_that_stops_coming_is_a_408(front_on):
    front, _ = front_on(Limits(body_seconds=1.0))
    answer = _raw(front, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    assert answer.startswith(b"HTTP/1.1 408 ") and b"request body not whole within 1 s" in answer


def test_keep_alive_serves_several_requests_on_one_connection(front_on):
    front, _ = front_on(Limits())
    with requests.Session() as session:
        for _ in range(3):
            assert session.get(_url(front, "/who"), timeout=PATIENCE).json() == {"app": "t"}


def test_at_the_cap_the_longest_waiting_connection_makes_room(front_on, caplog):
    front, _ = front_on(Limits(max_connections=20, head_seconds=PATIENCE))
    idle = [socket.create_connection(("127.0.0.1", front.port), timeout=PATIENCE) for _ in range(40)]
    try:
        assert requests.get(_url(front, "/who"), timeout=PATIENCE).json() == {"app": "t"}
        assert idle[0].recv(10) == b""  # the oldest was closed for the newer ones
        assert front.open_connections <= 20
    finally:
        for sock in idle:
            sock.close()
    assert any("connections open (the cap)" in record.getMessage() for record in caplog.records)


def _from(source: str, front: ListenerFront) -> socket.socket:
    """A connection from ``source`` (any 127/8 address: Linux routes them all to lo), another peer than 127.0.0.1."""
    return socket.create_connection(("127.0.0.1", front.port), timeout=PATIENCE, source_address=(source, 0))


def _still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True  # nothing to read and not closed
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def _closed_by_server(sock: socket.socket) -> bool:
    """The server closed it (its FIN, or its reset): waits up to the socket's timeout, False if it stays open."""
    try:
        return sock.recv(10) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _ask(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /who HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock.recv(65536)


def test_a_peer_at_its_cap_evicts_only_its_own_and_another_peers_waiting_connections_stay(front_on, caplog):
    front, _ = front_on(Limits(max_connections=20, max_connections_per_peer=5, head_seconds=PATIENCE))
    other = [_from("127.0.0.2", front) for _ in range(4)]
    flood = [_from("127.0.0.1", front) for _ in range(200)]
    try:
        assert requests.get(_url(front, "/who"), timeout=PATIENCE).json() == {"app": "t"}  # (one more of 127.0.0.1)
        assert _closed_by_server(flood[0])  # its own oldest made room for its newer ones
        assert all(_still_open(sock) for sock in other)
        assert all(b" 200 " in _ask(sock).split(b"\r\n")[0] for sock in other)
        assert front.open_connections_of("127.0.0.1") <= 5 and front.open_connections_of("127.0.0.2") == 4
    finally:
        for sock in other + flood:
            sock.close()
    assert any("peer 127.0.0.1 holds 5 connections (its cap)" in record.getMessage() for record in caplog.records)


def test_at_the_listeners_cap_the_peer_with_the_most_waiting_gives_way(front_on, caplog):
    """Four hosts flooding at their caps fill the listener; a fifth peer's connections are never the ones closed."""
    front, _ = front_on(Limits(max_connections=20, max_connections_per_peer=6, head_seconds=PATIENCE))
    other = [_from("127.0.0.2", front) for _ in range(3)]
    flood = [_from(f"127.0.0.{host}", front) for _ in range(30) for host in range(10, 14)]
    try:
        assert requests.get(_url(front, "/who"), timeout=PATIENCE).json() == {"app": "t"}
        assert all(_still_open(sock) for sock in other)
        assert all(b" 200 " in _ask(sock).split(b"\r\n")[0] for sock in other)
        assert front.open_connections <= 20
    finally:
        for sock in other + flood:
            sock.close()
    assert any("connections open (the cap)" in record.getMessage() and "which has the most waiting"
               in record.getMessage() for record in caplog.records)


def test_a_peer_whose_connections_are_all_answered_is_refused_and_another_is_served(front_on, caplog):
    front, release = front_on(Limits(threads=4, max_connections_per_peer=2, head_seconds=2 * PATIENCE))
    results: list[Any] = []
    callers = [threading.Thread(target=lambda: results.append(requests.get(_url(front, "/block"), timeout=PATIENCE)))
               for _ in range(2)]
    for caller in callers:
        caller.start()
    deadline = time.monotonic() + PATIENCE
    while front.snapshot().in_pool < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        with socket.create_connection(("127.0.0.1", front.port), timeout=PATIENCE) as third:
            assert _closed_by_server(third)  # (not the head deadline): both of 127.0.0.1's are being answered
        with _from("127.0.0.2", front) as other:
            assert b" 200 " in _ask(other).split(b"\r\n")[0]
    finally:
        release.set()
        for caller in callers:
            caller.join(PATIENCE)
    assert [r.json() for r in results] == [{"released": True}] * 2
    assert any("peer 127.0.0.1 holds 2 connections (its cap), every one being answered" in record.getMessage()
               for record in caplog.records)


def test_a_pool_that_stops_finishing_is_wedged_and_a_busy_one_is_not(front_on):
    front, release = front_on(Limits(threads=1, stall_seconds=1.0))
    health = FrontHealth([front])
    results: list[Any] = []
    callers = [threading.Thread(target=lambda: results.append(requests.get(_url(front, "/block"), timeout=PATIENCE)))
               for _ in range(2)]
    for caller in callers:
        caller.start()
    deadline = time.monotonic() + PATIENCE
    while health() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not health() and "waited for a thread" in health.problems()[0]
    release.set()
    for caller in callers:
        caller.join(PATIENCE)
    assert [r.json() for r in results] == [{"released": True}] * 2
    assert health()


def test_wedged_reads_the_loop_tick_and_the_pools_progress():
    assert wedged(PoolSnapshot(loop_tick=100, in_pool=0, threads=4, last_finish=0), 150, 60) is None
    assert "event loop" in (wedged(PoolSnapshot(loop_tick=0, in_pool=0, threads=4, last_finish=0), 61, 60) or "")
    full_but_moving = PoolSnapshot(loop_tick=100, in_pool=9, threads=4, last_finish=90)
    assert wedged(full_but_moving, 100, 60) is None
    full_and_stuck = PoolSnapshot(loop_tick=100, in_pool=9, threads=4, last_finish=30)
    assert "5 request(s) waited" in (wedged(full_and_stuck, 100, 60) or "")
    busy_not_queued = PoolSnapshot(loop_tick=100, in_pool=4, threads=4, last_finish=0)  # long polls, by design
    assert wedged(busy_not_queued, 100, 60) is None


def test_a_peer_is_its_ip_address_canonical_and_ipv4_mapped_ones_as_ipv4():
    assert peer_of(("10.0.0.1", 5555)) == "10.0.0.1"
    assert peer_of(("::ffff:10.0.0.1", 5555, 0, 0)) == "10.0.0.1"  # a dual-stack listener's view of an IPv4 host
    assert peer_of(("::FFFF:0a00:0001", 1, 0, 0)) == "10.0.0.1"
    assert peer_of(("2001:DB8:0:0::1", 1, 0, 0)) == "2001:db8::1"  # one spelling per address
    assert peer_of(("fe80::1%lo", 1, 0, 1)) == "fe80::1%lo"
    assert peer_of("/run/sunk.sock") == "/run/sunk.sock"  # a Unix socket: its callers are one peer
    assert peer_of(("not an address", 1)) == "not an address"
    assert peer_of(None) == "" and peer_of(()) == ""


def _table(*opened: tuple[str, str]) -> PeerTable[str]:
    """Connections opened and waiting, in this order: (connection, peer)."""
    table: PeerTable[str] = PeerTable()
    for conn, peer in opened:
        table.open(conn, peer)
        table.wait_begins(conn)
    return table


def test_the_peer_table_keeps_each_peers_waits_in_order_and_the_peer_with_the_most_waiting():
    table = _table(("a1", "A"), ("b1", "B"), ("a2", "A"), ("b2", "B"), ("b3", "B"))
    assert len(table) == 5 and table.open_of("A") == 2 and table.open_of("B") == 3 and table.open_of("C") == 0
    assert table.most_waiting_peer() == "B" and table.longest_waiting_of("B") == "b1"
    table.wait_ends("b1")  # b1 has its request: answered, not waiting, still open
    assert not table.is_waiting("b1") and table.is_waiting("b2") and table.open_of("B") == 3
    assert table.longest_waiting_of("B") == "b2" and table.waiting_of("B") == 2
    table.wait_ends("b2")
    assert table.most_waiting_peer() == "A"  # B holds more open, but A has more waiting: A's is the one to close
    table.wait_begins("b1")  # b1 answered, waits again: the last of B's
    table.wait_begins("b2")
    assert table.most_waiting_peer() == "B" and table.longest_waiting_of("B") == "b3"
    table.wait_begins("b3")  # waiting again without an answer between (moved to the end, counted once)
    assert table.waiting_of("B") == 3 and table.longest_waiting_of("B") == "b1"
    assert sorted(table.waiting()) == ["a1", "a2", "b1", "b2", "b3"]


def test_the_peer_table_forgets_closed_connections_and_empty_peers():
    table = _table(("a1", "A"), ("b1", "B"))
    table.wait_ends("b1")
    table.close("a1")
    table.close("a1")  # twice (evicted, then its own end): nothing more
    table.wait_ends("gone")
    table.close("gone")
    table.wait_begins("a1")  # closed for room, then its task's next step: still gone
    assert len(table) == 1 and table.open_of("A") == 0 and table.longest_waiting_of("A") is None
    assert table.most_waiting_peer() is None and table.waiting() == [] and not table.is_waiting("a1")
    table.close("b1")
    assert len(table) == 0 and table.open_of("B") == 0
    table.open("c1", "C")
    table.open("c1", "C")  # (once)
    assert table.open_of("C") == 1 and table.most_waiting_peer() is None  # open, not waiting yet


def test_the_peer_with_the_most_waiting_follows_every_change_by_one():
    """The count of the busiest peer is kept as waits begin and end, never by a scan: checked against one."""
    rng = random.Random(31)
    table: PeerTable[int] = PeerTable()
    peer_of_conn: dict[int, str] = {}
    for step in range(3000):
        conn = rng.randrange(60)
        if conn not in peer_of_conn:
            peer_of_conn[conn] = rng.choice("ABCDE")
            table.open(conn, peer_of_conn[conn])
        move = rng.choice(("begin", "end", "close"))
        if move == "begin":
            table.wait_begins(conn)
        elif move == "end":
            table.wait_ends(conn)
        else:
            table.close(conn)
            del peer_of_conn[conn]
        counts = {peer: table.waiting_of(peer) for peer in "ABCDE"}
        most = max(counts.values())
        assert (table.most_waiting_peer() is None) if most == 0 else counts[table.most_waiting_peer()] == most, step
        assert len(table) == len(peer_of_conn)


SMALL = Limits(max_connections=6, max_connections_per_peer=3)


def test_under_both_caps_a_connection_is_admitted_as_it_is():
    assert admission(_table(("a1", "A"), ("a2", "A"), ("b1", "B")), "A", SMALL) == Admission(True)
    assert admission(PeerTable(), "A", SMALL) == Admission(True)


def test_at_its_cap_a_peer_makes_room_with_its_own_longest_waiting_connection_never_anothers():
    table = _table(("b1", "B"), ("a1", "A"), ("a2", "A"), ("a3", "A"))
    assert admission(table, "A", SMALL) == Admission(True, "a1", "peer")
    table.wait_ends("a1")  # a1 is being answered now: a2 waited longest of A's
    assert admission(table, "A", SMALL) == Admission(True, "a2", "peer")


def test_a_peer_at_its_cap_with_every_connection_answered_is_refused_even_with_others_waiting():
    table = _table(("b1", "B"), ("a1", "A"), ("a2", "A"), ("a3", "A"))
    for conn in ("a1", "a2", "a3"):
        table.wait_ends(conn)
    assert admission(table, "A", SMALL) == Admission(False, None, "peer")  # b1 waits, and is left alone
    assert admission(table, "B", SMALL) == Admission(True)


def test_at_the_listeners_cap_the_peer_with_the_most_waiting_makes_room():
    # A holds the most open but all being answered; C has the most waiting: C's longest waiting goes.
    table = _table(("a1", "A"), ("a2", "A"), ("a3", "A"), ("c1", "C"), ("c2", "C"), ("b1", "B"))
    for conn in ("a1", "a2", "a3"):
        table.wait_ends(conn)
    assert admission(table, "D", SMALL) == Admission(True, "c1", "listener")
    assert admission(table, "B", SMALL) == Admission(True, "c1", "listener")  # the newcomer's peer is not spared
    assert admission(table, "A", SMALL) == Admission(False, None, "peer")  # A at its own cap: only its own


def test_at_the_listeners_cap_with_every_connection_answered_a_new_one_is_refused():
    table = _table(("a1", "A"), ("a2", "A"), ("b1", "B"), ("b2", "B"), ("c1", "C"), ("c2", "C"))
    for conn in ("a1", "a2", "b1", "b2", "c1", "c2"):
        table.wait_ends(conn)
    assert admission(table, "D", SMALL) == Admission(False, None, "listener")


def test_a_peer_cap_above_the_listeners_leaves_the_listeners_rule():
    table = _table(*((f"a{n}", "A") for n in range(6)))
    assert admission(table, "A", Limits(max_connections=6, max_connections_per_peer=100)) == \
        Admission(True, "a0", "listener")


def test_the_biggest_unfinished_body_is_the_one_closed():
    assert biggest_reader({"small": 200, "stalled": 8 << 20, "mid": 5000}) == "stalled"
    assert biggest_reader({}) is None


def test_over_the_bodies_cap_the_connection_holding_the_most_is_closed_not_a_small_request(front_on):
    """A few stalled near-limit bodies must not refuse every small one (the Syncer's pre-hooks are small)."""
    front, _ = front_on(Limits(max_body_bytes=1000, max_buffered_bytes=1000))
    with socket.create_connection(("127.0.0.1", front.port), timeout=PATIENCE) as hog:
        hog.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"x" * 900)  # stalls
        time.sleep(0.3)
        assert requests.post(_url(front, "/echo"), data=b"x" * 200, timeout=PATIENCE).json() == {"got": 200}
        assert hog.recv(65536) in (b"",) or b"503" in hog.recv(65536)  # closed
    assert requests.post(_url(front, "/echo"), data=b"x" * 1000, timeout=PATIENCE).json() == {"got": 1000}


def test_a_body_in_tiny_chunks_is_refused_before_it_costs_the_loop(front_on):
    front, _ = front_on(Limits())
    chunks = b"".join(b"2\r\nxx\r\n" for _ in range(200)) + b"0\r\n\r\n"
    answer = _raw(front, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks)
    assert answer.startswith(b"HTTP/1.1 400 ") and b"larger chunks" in answer
    whole = b"".join(b"400\r\n" + b"y" * 1024 + b"\r\n" for _ in range(100)) + b"0\r\n\r\n"  # 100 KiB, 1 KiB chunks
    answer = _raw(front, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + whole)
    assert answer.startswith(b"HTTP/1.1 200 ") and b'"got":102400' in answer.replace(b" ", b"")


def test_a_storm_after_an_idle_spell_is_not_read_as_wedged(front_on):
    """No finish for longer than the stall while idle, then more requests than threads (a prolog storm whose
    pre-hooks wait by design): the stall is counted from when requests began to wait, not from the last
    finish before the idle spell."""
    front, release = front_on(Limits(threads=2, stall_seconds=2.0))
    health = FrontHealth([front])
    time.sleep(2.5)  # idle past the stall
    callers = [threading.Thread(target=lambda: requests.get(_url(front, "/block"), timeout=PATIENCE))
               for _ in range(3)]
    for caller in callers:
        caller.start()
    deadline = time.monotonic() + PATIENCE
    while front.snapshot().in_pool < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert health(), health.problems()  # queued for 0.3 s: not wedged
    release.set()
    for caller in callers:
        caller.join(PATIENCE)


def test_environ_routes_by_port_and_drops_headers_with_underscores():
    req = h11.Request(method="POST", target="/api/v1/jobs/7%2F8/started?wait=5",
                      headers=[("Host", "x"), ("X-Token", "good"), ("X_Token", "spoof"), ("Content-Type", "a/b"),
                               ("Accept", "1"), ("Accept", "2")])
    environ = environ_for(req, b"body", port=8000, scheme="http", peer=("10.0.0.1", 5555))
    assert environ["PATH_INFO"] == "/api/v1/jobs/7/8/started" and environ["QUERY_STRING"] == "wait=5"
    assert environ["SERVER_PORT"] == "8000" and environ["HTTP_X_TOKEN"] == "good"
    assert environ["CONTENT_TYPE"] == "a/b" and environ["CONTENT_LENGTH"] == "4"
    lying = h11.Request(method="POST", target="/", headers=[("Host", "x"), ("Content-Length", "50")])
    assert environ_for(lying, b"", port=1, scheme="http", peer=None)["CONTENT_LENGTH"] == "0"  # the body's own
    assert environ["HTTP_ACCEPT"] == "1,2" and environ["wsgi.input"].read() == b"body"
    assert environ["REMOTE_ADDR"] == "10.0.0.1"


def test_an_app_that_raises_or_misbehaves_is_a_json_500():
    def raises(environ, start_response):
        raise RuntimeError("boom")

    def never_starts(environ, start_response):
        return [b"x"]

    for app in (raises, never_starts):
        answer = call_app(app, {})
        assert answer.status == 500 and json.loads(answer.body) == {"error": "internal error"}


def test_parse_status_and_error_answer():
    assert parse_status("404 NOT FOUND") == (404, "NOT FOUND")
    with pytest.raises(ValueError):
        parse_status("OK")
    assert json.loads(error_answer(400, "Bad Request", 'say "hi" \\').body) == {"error": 'say "hi" \\'}


def test_the_open_files_limit_is_raised_to_the_hard_one():
    import resource

    assert nofile_soft_limit(1024, 524288, 9000) == 524288
    assert nofile_soft_limit(4096, 4096, 9000) == 4096  # cannot go above the hard limit (then a warning)
    assert nofile_soft_limit(1024, resource.RLIM_INFINITY, 9000) == 1 << 20


def test_the_fronts_refusal_of_a_request_h11_cannot_parse_is_always_a_4xx():
    assert refusal_status(400) == (400, "Bad Request")
    assert refusal_status(431) == (431, "Request Header Fields Too Large")
    assert refusal_status(501) == (400, "Bad Request")  # h11: a transfer coding it does not know
    answer = text_error_answer(408, "Request Timeout", "too slow")
    assert answer.body == b"too slow\n" and ("Content-Type", "text/plain; charset=utf-8") in answer.headers


CHUNK = b"x" * (1 << 20)


class _Chunks:
    """A streamed body of ``count`` 1 MiB chunks (or ``short`` fewer than it says), counting those made."""

    def __init__(self, count: int, short: int = 0):
        self.count, self.short, self.made = count, short, 0

    def app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ["PATH_INFO"] == "/small":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"small"]
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Streamed(self.count * len(CHUNK), self._make())

    def _make(self) -> Iterator[bytes]:
        for _ in range(self.count - self.short):
            self.made += 1
            yield CHUNK


@pytest.fixture
def threaded() -> Iterator[Callable[[Any, Limits], ListenerFront]]:
    running: list[FrontThread] = []

    def start(app: Any, limits: Limits) -> ListenerFront:
        sock = socket.create_server(("127.0.0.1", 0))
        front = ListenerFront("test", sock, app, limits=limits)
        thread = FrontThread("test-front", [front])
        thread.start()
        running.append(thread)
        return front

    yield start
    for thread in running:
        thread.stop()


def _read_all(sock: socket.socket) -> bytes:
    answer = b""
    while chunk := sock.recv(1 << 20):
        answer += chunk
    return answer


def test_a_streamed_answer_is_made_chunk_by_chunk_as_it_is_written(threaded):
    """32 MiB for a client that reads none: only what the socket buffers take (a few MiB) is made, the pool's
    one thread stays free for the next request; then the client reads the whole body, of the app's length."""
    chunks = _Chunks(32)
    front = threaded(chunks.app, Limits(threads=1, write_seconds=600.0))
    with socket.create_connection(("127.0.0.1", front.port), timeout=PATIENCE) as stalled:
        stalled.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        deadline = time.monotonic() + PATIENCE
        while chunks.made == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert requests.get(_url(front, "/small"), timeout=PATIENCE).text == "small"
        assert 0 < chunks.made < 32  # (joined whole, all 32 would be made before the small request ran)
        head, _, body = _read_all(stalled).partition(b"\r\n\r\n")
    assert b"content-length: %d" % (32 * len(CHUNK)) in head.lower()
    assert body == CHUNK * 32 and chunks.made == 32


def test_a_streamed_answer_to_head_makes_no_chunk(threaded):
    chunks = _Chunks(4)
    front = threaded(chunks.app, Limits(threads=1))
    answer = requests.head(_url(front, "/big"), timeout=PATIENCE)
    assert answer.headers["Content-Length"] == str(4 * len(CHUNK)) and answer.content == b""
    assert chunks.made == 0


def test_a_stream_shorter_than_its_length_ends_the_connection(threaded):
    front = threaded(_Chunks(4, short=1).app, Limits(threads=1))
    with socket.create_connection(("127.0.0.1", front.port), timeout=PATIENCE) as sock:
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")  # (kept alive: only the server's close ends it)
        _, _, body = _read_all(sock).partition(b"\r\n\r\n")
    assert body == CHUNK * 3
    assert requests.get(_url(front, "/small"), timeout=PATIENCE).text == "small"


def test_a_front_thread_that_cannot_start_says_so_in_start():
    sock = socket.create_server(("127.0.0.1", 0))
    front = ListenerFront("broken", sock, lambda environ, start_response: [], limits=Limits())
    sock.close()  # (after the front read its port: serving it fails)
    thread = FrontThread("test-broken", [front])
    with pytest.raises(OSError):
        thread.start()
    thread.stop()
