"""One life cycle for every daemon (sunk-scheduler, sunk-extender, sunk-syncer; sunk-operator headless).

A CLI parses its flags into typed config and calls ``run``; the rest is the same for all:
1. Before anything is forked, the Slurm backend is checked once (a pyslurm that cannot be
   loaded ends the start with exit code 2), and the first log line names the backend and
   the Slurm release it talks to.
2. gunicorn (sunk/commands/web.py) forks one worker. Threads do not survive a fork, so the
   Kubernetes and Slurm clients, the controllers and the apps are built in that worker by
   the daemon's ``build``, and its Manager is started there.
3. When the Manager stops by itself (a lost lease), the worker ends, and gunicorn starts a
   clean one, which resumes from Kubernetes and Slurm (as a standby, if another replica
   leads by then).
4. When the worker exits (gunicorn got SIGTERM or SIGINT, or 3.), the Manager is stopped:
   reconciles in flight finish and a held Lease is released. gunicorn handles the signals.

A daemon with no HTTP app of its own (sunk-operator) calls ``run_headless``: the same
check, then its Manager in the process itself (probes, /metrics, signals, the Lease).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence

import attrs
from kubernetes.client import ApiClient

from sunk.base.jsondepth import allow_deep_json
from sunk.commands.web import Listener, WSGIApp, listener_health, raise_open_files, serve
from sunk.controller import slurmauth
from sunk.controller.daemon import DaemonConfig
from sunk.controller.manager import Manager
from sunk.kube.client import load_api_client
from sunk.slurm.client import SlurmClient
from sunk.slurm.settings import SlurmStartError, check

log = logging.getLogger(__name__)

STOP_SECONDS = 30.0  # what a stopping worker gives its Manager (gunicorn's graceful_timeout too)


@attrs.frozen
class Served:
    """What a daemon's ``build`` returns: its Manager (not started) and an app for each listener's name."""

    manager: Manager
    apps: Mapping[str, WSGIApp]


Build = Callable[[ApiClient, SlurmClient], Served]


def check_slurm(daemon: DaemonConfig) -> None:
    """Step 1: the backend can work (else exit code 2 and one line), and the first log line."""
    try:
        release = check(daemon.slurm)
    except SlurmStartError as exc:
        print(f"{daemon.name}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    log.info("%s: Slurm backend %s, Slurm %s", daemon.name, daemon.slurm.describe(), release)


def run(daemon: DaemonConfig, build: Build, listeners: Sequence[Listener], *, threads: int = 16) -> int:
    """Check Slurm, then serve ``listeners`` until gunicorn stops; ``build`` runs in each worker."""
    allow_deep_json()  # (every decoder of the daemon at one depth from the start: a job's Extra too)
    check_slurm(daemon)
    running: list[Manager] = []

    def start() -> Mapping[str, WSGIApp]:
        slurm = daemon.slurm.connect()
        slurmauth.watch(slurm)  # the token's expiry and refusals on /metrics
        served = build(load_api_client(daemon.kubeconfig), slurm)
        running.append(served.manager)
        # /healthz fails when a listener's loop stops or its pool stops finishing requests.
        served.manager.add_health_check("listeners", listener_health)
        served.manager.start()
        exit_when_done(daemon.name, served.manager)
        return served.apps

    def stop() -> None:
        for manager in running:
            manager.stop()
            manager.wait(STOP_SECONDS)

    serve(start, listeners, threads=threads, on_exit=stop)
    return 0


def run_headless(daemon: DaemonConfig, build: Callable[[ApiClient, SlurmClient], Manager]) -> int:
    """For a daemon that serves no app of its own (sunk-operator): the same check, then its Manager
    in this process until a signal or a lost lease; the exit code is the Manager's.

    No gunicorn, so nothing is forked: the clients and threads are built here. The Manager
    serves the probes and /metrics, handles SIGTERM and SIGINT, and releases a held Lease.
    A lost lease ends the process (exit code 1), and the kubelet starts a clean one.
    """
    check_slurm(daemon)
    raise_open_files([], threads=1)  # (its probe and metrics ports hold their idle connections as files)
    manager = build(load_api_client(daemon.kubeconfig), daemon.slurm.connect())
    return manager.run()


def exit_when_done(name: str, manager: Manager) -> None:
    """A Manager that stops by itself (a lost lease) ends the gunicorn worker, so that it restarts clean."""

    def watch() -> None:
        code = manager.wait()
        log.warning("%s: manager stopped (exit code %s); ending the worker so that gunicorn starts a clean one",
                    name, code)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="exit-watch", daemon=True).start()
