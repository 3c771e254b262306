"""Text sources served on /metrics after the default registry."""

from __future__ import annotations

import urllib.request

from prometheus_client import CONTENT_TYPE_LATEST

from sunk.controller.health import HttpEndpoints
from sunk.controller.textsources import body, register_text, render_sources, unregister_text


def test_a_failing_source_is_left_out_not_the_scrape(caplog):
    register_text("test-good", lambda: "good 1\n")
    register_text("test-bad", lambda: 1 / 0)  # type: ignore[arg-type,return-value]
    try:
        assert "good 1\n" in render_sources()
        assert any("test-bad" in r.getMessage() for r in caplog.records)
    finally:
        unregister_text("test-good")
        unregister_text("test-bad")


def test_a_second_registration_replaces_the_first_and_unregister_removes_it():
    register_text("test-twice", lambda: "first 1\n")
    register_text("test-twice", lambda: "second 2\n")
    try:
        text = render_sources()
        assert "second 2\n" in text and "first 1\n" not in text
    finally:
        unregister_text("test-twice")
    assert "second 2\n" not in render_sources()
    unregister_text("test-twice")  # unknown names are fine


def test_a_source_of_byte_pieces_is_written_group_by_group_with_its_whole_length():
    register_text("test-pieces", lambda: [[b"a 1\n", b"b 2\n"], [b"c 3\n"]])
    register_text("test-text", lambda: "d \u00e9 4\n")
    try:
        length, chunks = body(b"# registry\n")
        written = list(chunks)
        assert written[0] == b"# registry\n"
        assert b"a 1\nb 2\n" in written and b"c 3\n" in written  # one chunk per group
        assert length == sum(map(len, written))
        assert "a 1\nb 2\nc 3\nd \u00e9 4\n" in render_sources()
    finally:
        unregister_text("test-pieces")
        unregister_text("test-text")


def test_metrics_serves_the_pieces_with_the_content_type_and_length():
    register_text("test-http", lambda: [[b"sunk_test_piece", b"s 7\n"]])
    endpoints = HttpEndpoints("127.0.0.1:0", metrics=True)
    endpoints.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoints.port}/metrics", timeout=5) as resp:
            data = resp.read()
            assert resp.headers["Content-Type"] == CONTENT_TYPE_LATEST
            assert int(resp.headers["Content-Length"]) == len(data)
        assert b"\nsunk_test_pieces 7\n" in data
    finally:
        endpoints.stop()
        unregister_text("test-http")
