"""sunk/commands/runner.py and sunk/slurm/settings.py: the one life cycle every daemon runs.

The Slurm check before the fork (a pyslurm that cannot load ends the start with exit code
2 and one line; REST learns the release in one call), the first log line, and, in a real
gunicorn, a Manager that stops by itself (a lost lease) ending its worker, which gunicorn
replaces with a freshly built one.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from test_slurm_pyslurm import make_pyslurm

from sunk.commands import runner
from sunk.commands import syncer as syncer_cli
from sunk.commands.runner import Served
from sunk.commands.scheduler import add_common_arguments
from sunk.commands.web import Listener
from sunk.controller.daemon import DaemonConfig
from sunk.controller.manager import EXIT_LOST_LEASE, Manager
from sunk.slurm import settings as slurm_settings
from sunk.slurm.settings import SlurmSettings, SlurmStartError, check, settings_from
from sunk_dev.fakeslurm import FakeSlurmrestd


@pytest.fixture
def slurmrestd():
    with FakeSlurmrestd(token="t") as fake:
        yield fake


@pytest.fixture
def no_pyslurm(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # makes ``import pyslurm`` fail


def no_build(api: Any, slurm: Any) -> Served:
    raise AssertionError("nothing is built before the fork")


# ---- the Slurm check before serving ----------------------------------------------------------------


def test_rest_learns_the_release_in_one_call_and_says_so_first(slurmrestd, monkeypatch, caplog):
    served: list[Any] = []
    monkeypatch.setattr(runner, "serve", lambda *a, **kw: served.append((a, kw)))
    caplog.set_level("INFO")
    daemon = DaemonConfig(name="sunk-test", slurm=SlurmSettings(url=slurmrestd.url, token="t"))
    assert runner.run(daemon, no_build, [Listener(":8000", "hooks")]) == 0
    assert caplog.records[0].getMessage() == (
        f"sunk-test: Slurm backend rest (slurmrestd at {slurmrestd.url} as root, a fixed token), Slurm 24.11.5")
    assert slurmrestd.calls() == slurmrestd.calls("GET", "ping/") == 1
    assert len(served) == 1


def test_a_slurm_that_does_not_answer_is_no_reason_not_to_start():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # nobody listens once closed
    started = time.monotonic()
    release = check(SlurmSettings(url=url, token="t"))
    assert release.startswith("unknown (") and "cannot reach slurmrestd" in release
    assert time.monotonic() - started < 5  # no retries at start


def test_an_unimportable_pyslurm_ends_the_start_with_exit_code_2_and_one_line(no_pyslurm, monkeypatch, capsys):
    monkeypatch.setattr(runner, "serve", lambda *a, **kw: pytest.fail("served without a Slurm backend"))
    daemon = DaemonConfig(name="sunk-test", slurm=SlurmSettings(backend="pyslurm"))
    with pytest.raises(SystemExit) as exc:
        runner.run(daemon, no_build, [Listener(":8000", "hooks")])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("sunk-test: error: --slurm-backend=pyslurm: cannot build the Slurm client")
    assert "pyslurm 25.11" in line and "or use --slurm-backend=rest" in line


def test_a_pyslurm_that_libslurm_cannot_initialise_is_told_apart(monkeypatch):
    """libslurm ends a process whose slurm.conf it cannot read: the import is tried in a child first."""
    monkeypatch.delitem(sys.modules, "pyslurm", raising=False)
    monkeypatch.setattr(slurm_settings.importlib.util, "find_spec", lambda name: object())
    failed = subprocess.CompletedProcess([], 1, "", "sunk: fatal: Unable to process configuration file\n")
    monkeypatch.setattr(slurm_settings.subprocess, "run", lambda *a, **kw: failed)
    with pytest.raises(SlurmStartError, match="Unable to process configuration file.*SLURM_CONF.*munge"):
        check(SlurmSettings(backend="pyslurm"))
    monkeypatch.setattr(slurm_settings.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SlurmStartError, match="pyslurm is not installed: install pyslurm 25.11"):
        check(SlurmSettings(backend="pyslurm"))


def test_a_working_pyslurm_reports_slurmctlds_release(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", make_pyslurm())
    settings = SlurmSettings(backend="pyslurm", url="ignored")
    assert check(settings) == "25.11.2"
    assert settings.describe().startswith("pyslurm (slurm.conf ")


# ---- the flags every daemon takes -------------------------------------------------------------------


def scheduler_flags(*flags: str) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="sunk-scheduler")
    add_common_arguments(parser, default_name="sunk-scheduler")
    return parser, parser.parse_args(["--hook-secret-file=/dev/null", *flags])


def test_every_daemon_takes_slurm_backend(monkeypatch, capsys):
    monkeypatch.delenv("SLURM_JWT", raising=False)
    parser, args = scheduler_flags("--slurm-backend=pyslurm")
    assert settings_from(args, parser).backend == "pyslurm"  # no JWT needed: munge
    parser, args = scheduler_flags()
    with pytest.raises(SystemExit):
        settings_from(args, parser)  # REST without a JWT
    assert "--slurm-auth-token" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        scheduler_flags("--slurm-backend=slurmdbd")
    startup = syncer_cli.parse_args(["--plugins=", "--slurm-backend=pyslurm"])
    assert startup.daemon.slurm.backend == "pyslurm"
    rest = syncer_cli.parse_args(["--plugins=", "--slurm-auth-token=t"]).daemon.slurm
    assert (rest.backend, rest.token, rest.url) == ("rest", "t", os.environ.get("SLURM_REST_URL",
                                                                                 "http://127.0.0.1:6820"))
    assert "token=" not in repr(rest)  # the JWT stays out of logs


def test_every_daemon_can_sign_its_own_tokens(monkeypatch, tmp_path, capsys):
    import jwt

    monkeypatch.delenv("SLURM_JWT", raising=False)
    key = tmp_path / "jwt.key"
    key.write_bytes(b"k" * 32)
    parser, args = scheduler_flags(f"--slurm-jwt-key-file={key}", "--slurm-user=slurm")
    settings = settings_from(args, parser)
    assert settings.jwt_key_file == str(key) and f"key file {key}" in settings.describe()
    client = settings.connect()
    try:
        claims = jwt.decode(client.tokens.token(), b"k" * 32, algorithms=["HS256"])  # type: ignore[attr-defined]
        assert claims["sun"] == "slurm" and claims["exp"] - claims["iat"] <= 3600
    finally:
        client.close()
    startup = syncer_cli.parse_args(["--plugins=", f"--slurm-jwt-key-file={key}"])
    assert startup.daemon.slurm.jwt_key_file == str(key)
    parser, args = scheduler_flags(f"--slurm-jwt-key-file={key}", "--slurm-auth-token-file=/t")
    with pytest.raises(SystemExit):
        settings_from(args, parser)
    assert "not both" in capsys.readouterr().err


# ---- the life cycle, in a real gunicorn -------------------------------------------------------------------


class Mark:
    """A runnable that writes its stop into the test's log file."""

    def __init__(self, log: Path):
        self.log = log

    def start(self) -> None:
        pass

    def stop(self) -> None:
        with self.log.open("a") as f:
            f.write(f"stop {os.getpid()}\n")


def _serve(daemon: DaemonConfig, port: int, log: Path) -> None:
    def build(api: Any, slurm: Any) -> Served:
        with log.open("a") as f:
            f.write(f"build {os.getpid()}\n")
        manager = Manager(daemon.name)
        manager.add_runnable(Mark(log))
        if log.read_text().count("build") == 1:  # the first worker loses its lease after a moment
            threading.Timer(0.5, manager.stop, args=(EXIT_LOST_LEASE,)).start()
        app = Flask("hooks")
        app.add_url_rule("/who", "who", lambda: {"pid": os.getpid()})
        return Served(manager, {"hooks": app})

    runner.run(daemon, build, [Listener(f"127.0.0.1:{port}", "hooks")], threads=2)


def test_a_lost_lease_ends_the_worker_and_gunicorn_builds_a_clean_one(slurmrestd, monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "load_api_client", lambda kubeconfig: None)  # inherited by the fork
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "life"
    log.touch()
    daemon = DaemonConfig(name="sunk-test", slurm=SlurmSettings(url=slurmrestd.url, token="t"))
    proc = multiprocessing.get_context("fork").Process(target=_serve, args=(daemon, port, log), daemon=True)
    proc.start()
    try:
        deadline = time.monotonic() + 30
        while log.read_text().count("build") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        first, second = [line.split()[1] for line in log.read_text().splitlines() if line.startswith("build")][:2]
        assert first != second  # a new worker process
        assert f"stop {first}" in log.read_text()  # the first Manager stopped before its worker went
        while time.monotonic() < deadline:
            try:
                answer = requests.get(f"http://127.0.0.1:{port}/who", timeout=1)
                break
            except requests.RequestException:
                time.sleep(0.1)
        assert str(answer.json()["pid"]) == second
    finally:
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGTERM)
        proc.join(30)
    assert f"stop {second}" in log.read_text()  # gunicorn's SIGTERM stopped the second Manager too
    assert proc.exitcode == 0
