"""Text sources served on /metrics after the default registry."""

from __future__ import annotations

from sunk.controller.textsources import register_text, render_sources, unregister_text


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
