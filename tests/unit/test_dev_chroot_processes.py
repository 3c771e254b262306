"""Finding and ending what a chroot still runs (``sunk_dev.chroot``): job steps outlive their slurmd."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sunk_dev import chroot


def fake_proc(tmp_path: Path, processes: dict[int, tuple[Path, str]]) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "self").symlink_to(proc / "1")  # (not a pid: skipped)
    (proc / "meminfo").write_text("")
    for pid, (root, command) in processes.items():
        entry = proc / str(pid)
        entry.mkdir()
        (entry / "root").symlink_to(root)
        (entry / "cmdline").write_bytes(command.replace(" ", "\0").encode() + b"\0")
    return proc


def test_processes_in_names_only_those_rooted_in_the_chroot(tmp_path):
    here, other = tmp_path / "chroot-a", tmp_path / "chroot-b"
    here.mkdir()
    other.mkdir()
    proc = fake_proc(tmp_path, {10: (here, "slurmstepd: [7.batch]"), 11: (other, "slurmd -D"),
                                12: (Path("/"), "bash"), 13: (here, "sleep 600")})
    assert chroot.processes_in(here, proc) == {10: "slurmstepd: [7.batch]", 13: "sleep 600"}
    assert chroot.processes_in(other, proc) == {11: "slurmd -D"}


def test_processes_in_skips_a_process_that_ends_while_it_reads(tmp_path):
    here = tmp_path / "chroot-a"
    here.mkdir()
    proc = fake_proc(tmp_path, {10: (here, "sleep 1")})
    (proc / "20").mkdir()  # (its root link gone: the process ended between the listing and the read)
    assert chroot.processes_in(here, proc) == {10: "sleep 1"}


@pytest.fixture
def world(monkeypatch):
    """Processes that end on the signals in ``dies_on`` (pid -> signals), as os.kill sees them."""
    alive: dict[int, str] = {}
    dies_on: dict[int, set[int]] = {}
    sent: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))
        if pid not in alive:
            raise ProcessLookupError(pid)
        if sig in dies_on[pid]:
            del alive[pid]

    monkeypatch.setattr(chroot, "processes_in", lambda root, proc=Path("/proc"): dict(alive))
    monkeypatch.setattr(os, "kill", kill)
    return alive, dies_on, sent


def test_end_processes_in_terms_then_kills_what_ignores_the_term(world, tmp_path):
    alive, dies_on, sent = world
    alive.update({1: "slurmstepd", 2: "sleep 600", 3: "etcd"})
    dies_on.update({1: {signal.SIGTERM, signal.SIGKILL}, 2: {signal.SIGKILL}, 3: {signal.SIGTERM}})
    ended = chroot.end_processes_in(tmp_path, keep={3}, grace=0.2)
    assert ended == {1: "slurmstepd", 2: "sleep 600"}
    assert alive == {3: "etcd"}
    assert (3, signal.SIGTERM) not in sent
    assert sent.count((2, signal.SIGKILL)) == 1


def test_end_processes_in_sends_no_kill_when_the_term_was_enough(world, tmp_path):
    alive, dies_on, sent = world
    alive.update({1: "slurmstepd"})
    dies_on.update({1: {signal.SIGTERM}})
    assert chroot.end_processes_in(tmp_path, grace=0.2) == {1: "slurmstepd"}
    assert sent == [(1, signal.SIGTERM)]


def test_end_processes_in_with_nothing_running_sends_nothing(world, tmp_path):
    _, _, sent = world
    assert chroot.end_processes_in(tmp_path, grace=0.2) == {}
    assert sent == []


def test_a_process_that_ended_on_the_term_gets_no_kill_even_if_its_pid_is_reused(world, tmp_path):
    """Its pid may be another process's by the SIGKILL round (outside the chroot: never signalled)."""
    alive, dies_on, sent = world
    alive.update({1: "slurmstepd", 2: "sleep 600"})
    dies_on.update({1: {signal.SIGTERM}, 2: {signal.SIGKILL}})
    chroot.end_processes_in(tmp_path, grace=0.2)
    assert (1, signal.SIGKILL) not in sent
    assert (2, signal.SIGKILL) in sent
