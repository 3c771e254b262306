"""sunk/controller/health.py: the probe and metrics routes (pure), and HttpEndpoints served by the front."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import requests
from prometheus_client import CONTENT_TYPE_LATEST

from sunk.controller.health import HttpEndpoints, Reply, checks_reply
from sunk.controller.httpfront import FrontHealth, Limits, ListenerFront, Streamed
from sunk.controller.textsources import register_text, unregister_text

PATIENCE = 30.0


def _boom() -> bool:
    raise RuntimeError("check broke")


def test_all_checks_passing_is_a_bare_ok():
    assert checks_reply({"a": lambda: True, "b": lambda: True}, "") == Reply("200 OK", b"ok")


def test_a_failing_or_raising_check_is_a_500_naming_only_the_failed():
    reply = checks_reply({"a": lambda: True, "b": lambda: False, "c": _boom}, "")
    assert reply == Reply("500 Internal Server Error", b"[-]b failed\n[-]c failed\ncheck failed\n")


@pytest.mark.parametrize("query", ["verbose", "verbose=1", "x=2&verbose"])
def test_verbose_lists_every_check(query):
    assert checks_reply({"a": lambda: True, "b": lambda: True}, query) == Reply(
        "200 OK", b"[+]a ok\n[+]b ok\ncheck passed\n")
    assert checks_reply({"a": lambda: True, "b": lambda: False}, query).body == b"[+]a ok\n[-]b failed\ncheck failed\n"


@pytest.fixture
def endpoints() -> Iterator[HttpEndpoints]:
    server = HttpEndpoints("127.0.0.1:0", healthz={"ping": lambda: True}, readyz={}, metrics=True)
    server.start()
    yield server
    server.stop()


def _get(server: HttpEndpoints, path: str, method: str = "GET") -> requests.Response:
    return requests.request(method, f"http://127.0.0.1:{server.port}{path}", timeout=PATIENCE)


def test_routes_method_and_path(endpoints):
    assert (_get(endpoints, "/healthz").status_code, _get(endpoints, "/healthz").text) == (200, "ok")
    assert _get(endpoints, "/livez").text == "ok"
    assert _get(endpoints, "/readyz").text == "ok"
    missing = _get(endpoints, "/nope")
    assert (missing.status_code, missing.text) == (404, "not found\n")
    refused = _get(endpoints, "/healthz", "POST")
    assert refused.status_code == 405 and refused.headers["Allow"] == "GET, HEAD"
    assert refused.headers["Content-Type"].startswith("text/plain")


def test_head_is_answered_as_get_without_its_body(endpoints):
    got, head = _get(endpoints, "/metrics"), _get(endpoints, "/metrics", "HEAD")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["Content-Type"] == got.headers["Content-Type"] == CONTENT_TYPE_LATEST


def test_checks_are_the_callers_live_mappings(endpoints):
    """A Manager adds checks after it built its endpoints: they are served."""
    readyz = {"informers": lambda: True}
    server = HttpEndpoints("127.0.0.1:0", readyz=readyz)
    server.start()
    try:
        assert _get(server, "/readyz").status_code == 200
        readyz["late"] = lambda: False
        answer = _get(server, "/readyz")
        assert (answer.status_code, answer.text) == (500, "[-]late failed\ncheck failed\n")
        assert _get(server, "/metrics").status_code == 404  # metrics off on this one
    finally:
        server.stop()


def test_the_fronts_refusals_on_this_port_are_plain_text(endpoints):
    with socket.create_connection(("127.0.0.1", endpoints.port), timeout=PATIENCE) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n")
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")  # (h11 hints 501: the caller's error all the same)
    assert b"Content-Type: text/plain; charset=utf-8" in answer


def test_a_big_scrape_is_whole_with_its_length_while_another_client_stalls_on_one():
    """32 MiB of text source, served in its chunks (``Streamed``); a reader that stalls on one scrape costs
    neither the next scrape nor a probe (the front's own test shows the chunks are made one at a time)."""
    group = [b"sunk_test_stream_total 1\n" * 40_000]  # ~1 MiB per group
    register_text("test-stream", lambda: [group] * 32)
    server = HttpEndpoints("127.0.0.1:0", metrics=True, limits=Limits(threads=1, write_seconds=600.0))
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE) as stalled:
            stalled.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = _get(server, "/metrics")
            assert answer.status_code == 200
            assert int(answer.headers["Content-Length"]) == len(answer.content) > 32 * len(group[0])
            assert answer.content.endswith(b"sunk_test_stream_total 1\n")
            assert _get(server, "/healthz").text == "ok"
    finally:
        server.stop()
        unregister_text("test-stream")


def test_a_taken_port_fails_the_constructor():
    first = HttpEndpoints("127.0.0.1:0")
    try:
        with pytest.raises(OSError):
            HttpEndpoints(f"127.0.0.1:{first.port}")
    finally:
        first.stop()


def test_stop_frees_the_port_started_or_not():
    never_started = HttpEndpoints("127.0.0.1:0")
    port = never_started.port
    never_started.stop()
    again = HttpEndpoints(f"127.0.0.1:{port}")
    again.start()
    again.stop()
    HttpEndpoints(f"127.0.0.1:{port}").stop()


def test_streamed_is_a_plain_wsgi_iterable():
    assert b"".join(Streamed(3, iter([b"a", b"bc"]))) == b"abc"


def test_a_wedged_app_listener_fails_healthz_served_from_the_probe_front():
    """The runner adds the apps' FrontHealth as a healthz check: the probe port, on a loop of its own, still
    answers, and says which listener is wedged (here one whose loop never ran within its stall_seconds)."""
    sock = socket.create_server(("127.0.0.1", 0))
    app_front = ListenerFront("hooks", sock, lambda environ, start_response: [], limits=Limits(stall_seconds=0.0))
    server = HttpEndpoints("127.0.0.1:0", healthz={"ping": lambda: True, "listeners": FrontHealth([app_front])})
    server.start()
    try:
        answer = _get(server, "/healthz")
        assert (answer.status_code, answer.text) == (500, "[-]listeners failed\ncheck failed\n")
    finally:
        server.stop()
        sock.close()


def test_at_most_four_scrapes_at_once_and_each_gives_its_place_back():
    """Slow readers cannot each hold a table's worth of memory: a fifth scrape while four are in flight is a 429
    (Retry-After: 1); a scrape read to its end, one whose reader went away midway, and a HEAD (its body never
    asked for) each give their place back, and scrapes are answered again."""
    group = [b"sunk_test_cap_total 1\n" * 40_000]  # ~1 MiB per group: a stalled reader stops the stream midway
    register_text("test-cap", lambda: [group] * 16)
    server = HttpEndpoints("127.0.0.1:0", metrics=True, limits=Limits(threads=2))
    server.start()
    stalled: list[socket.socket] = []
    try:
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(12) == b"HTTP/1.1 200"  # (its head is out: the scrape holds its place)
            stalled.append(sock)
        refused = _get(server, "/metrics")
        assert (refused.status_code, refused.headers["Retry-After"]) == (429, "1")
        assert "too many scrapes" in refused.text and _get(server, "/healthz").text == "ok"
        stalled.pop().close()  # a reader gone midway (its place back at its reset, at the latest at the write deadline)
        answered = _get_eventually(server, "/metrics")
        assert answered.content.endswith(b"sunk_test_cap_total 1\n")  # read to its end: its place back too
        for _ in range(6):
            assert _get(server, "/metrics", "HEAD").status_code == 200  # places given back unread
        assert _get(server, "/metrics").status_code == 200
    finally:
        for sock in stalled:
            sock.close()
        server.stop()
        unregister_text("test-cap")


def _get_eventually(server: HttpEndpoints, path: str) -> requests.Response:
    """The first answer that is not a 429 (a closed reader's place comes back once the front sees the close)."""
    import time

    deadline = time.monotonic() + PATIENCE
    while True:
        answer = _get(server, path)
        if answer.status_code != 429 or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def test_head_scrapes_on_kept_alive_connections_hold_no_place():
    """HEAD /metrics never asks for its body: its place comes back when its answer is written (WSGI's close),
    not when the connection ends, so four kept-alive connections that sent one each leave room for a scrape."""
    server = HttpEndpoints("127.0.0.1:0", metrics=True)
    server.start()
    kept: list[socket.socket] = []
    try:
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE)
            sock.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")  # (the connection stays open: HTTP/1.1)
            kept.append(sock)
        assert _get(server, "/metrics").status_code == 200
    finally:
        for sock in kept:
            sock.close()
        server.stop()
