"""Serve a flask app with gunicorn, in the same process as the controllers it talks to.

The hook API and the extender answer from in-memory state (informer caches, the Slurm
cache), so they must live where the controllers live. gunicorn forks its worker, and
threads do not survive a fork, so ``build`` runs inside the worker: it starts the
controllers and returns the WSGI app. The gunicorn master stays a thin supervisor that
restarts a dead worker; since all state lives in Kubernetes and Slurm, a restart resumes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional

from gunicorn.app.base import BaseApplication

log = logging.getLogger(__name__)


def parse_bind(address: str) -> str:
    """``:8000`` (Go style, as SUNK's flags take) -> ``0.0.0.0:8000``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address must look like HOST:PORT or :PORT, got {address!r}")
    return f"{host or '0.0.0.0'}:{port}"


class _App(BaseApplication):
    def __init__(self, build: Callable[[], Any], options: dict[str, Any]):
        self._build = build
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._build()


def serve(build: Callable[[], Any], bind: str | list[str], *, threads: int = 16, timeout: int = 60,
          on_exit: Optional[Callable[[], None]] = None, certfile: str = "", keyfile: str = "",
          client_ca: str = "") -> None:
    """Run gunicorn with one threaded worker; returns when it shuts down.

    With ``client_ca``, callers must present a certificate it signed (mutual TLS).
    """
    binds = [bind] if isinstance(bind, str) else bind
    options: dict[str, Any] = {
        "bind": list(dict.fromkeys(parse_bind(b) for b in binds)),
        "workers": 1,
        "worker_class": "gthread",
        "threads": threads,
        "timeout": timeout,
        "graceful_timeout": 30,
        "preload_app": False,
        "accesslog": None,
        "loglevel": "warning",
    }
    if certfile:
        options.update(certfile=certfile, keyfile=keyfile)
    if client_ca:
        import ssl

        options.update(ca_certs=client_ca, cert_reqs=ssl.CERT_REQUIRED)
    if on_exit is not None:
        options["worker_exit"] = lambda _server, _worker: on_exit()
    _App(build, options).run()
