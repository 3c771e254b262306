"""Two trivial apps, "verbs" and "hooks", served the way the daemons serve theirs (sunk.commands.web.serve), and their
certificates: what the listener tests (test_web_listeners.py, test_web_hostile.py) run against."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from flask import Flask

from sunk.commands.web import Listener, serve
from sunk_dev.tls import issue, make_ca


def who_app(name: str) -> Flask:
    """An app that answers ``{"app": name}`` on GET /who: which app a port reached."""
    app = Flask(name)

    @app.get("/who")
    def who():
        return {"app": name}

    return app


def serve_verbs_and_hooks(listeners: list[Listener], threads: int) -> None:
    serve(lambda: {"verbs": who_app("verbs"), "hooks": who_app("hooks")}, listeners, threads=threads)


def certificates(tmp: Path) -> dict:
    """A CA, a server certificate and a client certificate it signed, and a client of another CA."""
    ca = make_ca(tmp)
    return {"ca": ca, "server": issue(ca, tmp, "server"), "client": issue(ca, tmp, "client", client=True),
            "stranger": issue(make_ca(tmp, "other-ca"), tmp, "stranger", client=True)}


def connection_from(source: str, port: int, timeout: float) -> socket.socket:
    """A connection to 127.0.0.1:``port`` from ``source``, any 127/8 address (Linux routes them all to lo): a peer
    of its own for the front's per-peer cap, as another host would be."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))


@contextmanager
def served_in_a_child(listeners: list[Listener], threads: int, *, ready_port: int) -> Iterator[None]:
    """``serve_verbs_and_hooks`` in a forked process (gunicorn's master wants the main thread), until the plain
    port ``ready_port`` answers; SIGTERM at the end."""
    proc = multiprocessing.get_context("fork").Process(target=serve_verbs_and_hooks, args=(listeners, threads),
                                                       daemon=True)
    proc.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            requests.get(f"http://127.0.0.1:{ready_port}/who", timeout=1)
            break
        except requests.RequestException:
            time.sleep(0.1)
    try:
        yield
    finally:
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGTERM)
        proc.join(30)
