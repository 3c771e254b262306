"""sunk_dev.phases: a set-up phase's tools write to its log; the terminal gets one line, or none."""

from __future__ import annotations

import io

import pytest

from sunk_dev import phases


def test_a_phase_that_did_no_work_says_nothing_and_its_output_goes_to_the_log(tmp_path):
    out = io.StringIO()
    log_path = tmp_path / "logs" / "setup.log"
    with phases.log_phase("chroot", log_path, out) as log:
        print("debootstrap: many lines", file=log)
    assert out.getvalue() == ""
    text = log_path.read_text()
    assert text.startswith("== chroot (") and "debootstrap: many lines" in text


def test_a_failed_phase_names_its_log_and_the_error_goes_on(tmp_path):
    out = io.StringIO()
    log_path = tmp_path / "setup.log"
    with pytest.raises(RuntimeError, match="apt failed"), phases.log_phase("images", log_path, out):
        raise RuntimeError("apt failed")
    assert "images" in out.getvalue() and "failed after" in out.getvalue() and str(log_path) in out.getvalue()


def test_a_phase_that_took_time_says_how_long(tmp_path, monkeypatch):
    clock = iter([100.0, 182.4])
    monkeypatch.setattr(phases.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    with phases.log_phase("kube build", tmp_path / "setup.log", out):
        pass
    assert out.getvalue().split()[:3] == ["kube", "build", "ready"] and "(82s;" in out.getvalue()
