"""Serve flask apps in the same process as the controllers they talk to, safe from hostile clients.

The hook API and the extender answer from in-memory state (informer caches, the Slurm
cache), so they must live where the controllers live. gunicorn forks its worker, and
threads do not survive a fork, so ``build`` runs inside the worker: it starts the
controllers and returns the WSGI apps. The gunicorn master stays a thin supervisor that
restarts a dead worker (or one whose loop stops beating for ``timeout``); since all state
lives in Kubernetes and Slurm, a restart resumes.

The worker is ``FrontWorker``: an asyncio loop (sunk/controller/httpfront.py) owns every
connection and reads each request whole, under deadlines and size limits, before a thread
of the listener's own pool runs the app. gunicorn's gthread worker gave a thread to any
connection that had sent one byte: 16 such connections stalled the scheduler's hook API and
256 the Syncer's (issue 31). So an idle, slow or half-sent connection costs a file
descriptor, never a thread, and the extender's verbs and its hooks have separate pools.

Each listener serves one app with a TLS setting of its own: the extender's mutual-TLS verbs
port and its plain-HTTP hook port (placeholder jobs call ``http://...:8000``) side by side.
The contexts are built before the fork, so a bad certificate file fails the start with its
name.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import attrs
from gunicorn.app.base import BaseApplication
from gunicorn.config import KNOWN_SETTINGS
from gunicorn.workers.base import Worker

from sunk.base.flags import parse_bind_address
from sunk.controller.health import PROBE_LIMITS
from sunk.controller.httpfront import FrontHealth, Limits, ListenerFront, serving

log = logging.getLogger(__name__)

WSGIApp = Callable[..., Any]


def gunicorn_bind(address: str) -> str:
    """``:8000`` (Go style, as SUNK's flags take) -> ``0.0.0.0:8000``; an IPv6 host keeps its brackets."""
    host, port = parse_bind_address(address)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@attrs.frozen
class TLS:
    """A listener's server certificate; with ``client_ca_file``, callers must present one it signed."""

    cert_file: str
    key_file: str
    client_ca_file: str = ""

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            context.load_verify_locations(cafile=self.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def tls_from_flags(cert_file: str, key_file: str, client_ca_file: str = "", *, what: str) -> Optional[TLS]:
    """The TLS of one listener from its flags; a half-given pair is an error, not plain HTTP."""
    if bool(cert_file) != bool(key_file):
        raise ValueError(f"{what}: a TLS certificate and its key go together")
    if client_ca_file and not cert_file:
        raise ValueError(f"{what}: a client CA needs TLS (a certificate and key)")
    return TLS(cert_file, key_file, client_ca_file) if cert_file else None


@attrs.frozen
class Listener:
    """One port: the app it serves (a key of what ``build`` returns), its TLS or none, and what it
    allows a client (``limits.threads`` None: the ``threads`` that ``serve`` is given)."""

    address: str
    app: str
    tls: Optional[TLS] = None
    limits: Optional[Limits] = None

    def limits_with(self, threads: int) -> Limits:
        return self.limits if self.limits is not None else Limits(threads=threads)

    @property
    def port(self) -> int:
        return parse_bind_address(self.address)[1]


def check_listeners(listeners: Sequence[Listener]) -> None:
    """Every port once: two listeners on one port could not be told apart by the router."""
    seen: dict[int, Listener] = {}
    for listener in listeners:
        if listener.port == 0:
            raise ValueError(f"{listener.app}: listen on an explicit port, not {listener.address!r}")
        other = seen.get(listener.port)
        if other is not None:
            raise ValueError(f"{listener.app} and {other.app} both listen on port {listener.port}")
        seen[listener.port] = listener


class _App(BaseApplication):
    def __init__(self, load: Callable[[], Any], options: dict[str, Any]):
        self._load = load
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._load()


CONTROL_SOCKET_DISABLE = "control_socket_disable"
_GUNICORN_SETTINGS = frozenset(setting.name for setting in KNOWN_SETTINGS)

# The liveness of every listener of this process: the worker adds its fronts, a daemon's Manager
# serves it on /healthz (sunk/commands/runner.py). Empty (healthy) before the worker serves.
listener_health = FrontHealth()


@attrs.frozen
class Routes:
    """What the worker serves, per port: its listener, its app and its TLS context (built before the fork)."""

    by_port: Mapping[int, tuple[Listener, WSGIApp, Optional[ssl.SSLContext], Limits]]


def tls_contexts(listeners: Sequence[Listener]) -> dict[int, Optional[ssl.SSLContext]]:
    """Each listener's context, built now: a bad file fails the start, with its name."""
    return {listener.port: listener.tls.context() if listener.tls else None for listener in listeners}


def gunicorn_options(listeners: Sequence[Listener], *, threads: int, timeout: int) -> dict[str, Any]:
    check_listeners(listeners)
    tls_contexts(listeners)
    options: dict[str, Any] = {
        "bind": [gunicorn_bind(listener.address) for listener in listeners],
        "workers": 1,
        "worker_class": FrontWorker,
        "threads": threads,
        "timeout": timeout,
        "graceful_timeout": 30,
        "preload_app": False,
        "accesslog": None,
        "loglevel": "warning",
        "backlog": 2048,
    }
    if CONTROL_SOCKET_DISABLE in _GUNICORN_SETTINGS:
        # gunicorn 25+ opens a control socket in $HOME: on the chart's read-only root file system that
        # is an error line at every start, and sunk has no use for it.
        options[CONTROL_SOCKET_DISABLE] = True
    return options


class FrontWorker(Worker):
    """gunicorn's worker, serving its listening sockets with sunk's asyncio front (no thread per connection).

    It beats to the master once a second from the loop, so a wedged loop gets the worker
    restarted after gunicorn's ``timeout``; /healthz fails sooner (``listener_health``).
    """

    def run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        routes: Routes = self.wsgi
        fronts = []
        for sock in self.sockets:
            listener, app, context, limits = routes.by_port[sock.getsockname()[1]]
            fronts.append(ListenerFront(listener.app, sock.sock, app, context=context, limits=limits))
        async with serving(fronts, self.cfg.graceful_timeout):
            listener_health.fronts[:] = fronts
            while self.alive:
                self.notify()
                if self.ppid != os.getppid():
                    log.warning("gunicorn master gone: the worker stops")
                    break
                await asyncio.sleep(1.0)


def nofile_soft_limit(soft: int, hard: int, needed: int) -> int:
    """The soft RLIMIT_NOFILE to run with: the hard limit (capped when unlimited), never below today's."""
    ceiling = hard if hard != resource.RLIM_INFINITY else max(needed, 1 << 20)
    return max(soft, ceiling) if soft != resource.RLIM_INFINITY else soft


def raise_open_files(listeners: Sequence[Listener], *, threads: int) -> None:
    """Every held connection is a file descriptor: lift the soft limit to the hard one, and say so."""
    # (+ the probe and metrics ports' caps: every daemon serves both, on the front too)
    needed = sum(listener.limits_with(threads).max_connections for listener in listeners) + 1024 \
        + 2 * PROBE_LIMITS.max_connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = nofile_soft_limit(soft, hard, needed)
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("open files: could not raise the soft limit from %d to %d: %s", soft, target, exc)
            target = soft
    level = logging.WARNING if target < needed else logging.INFO
    log.log(level, "open files: limit %d (hard %s); the listeners' connection caps need up to %d",
            target, "unlimited" if hard == resource.RLIM_INFINITY else hard, needed)


def serve(build: Callable[[], Mapping[str, WSGIApp]], listeners: Sequence[Listener], *, threads: int = 16,
          timeout: int = 60, on_exit: Optional[Callable[[], None]] = None) -> None:
    """Run gunicorn with one ``FrontWorker``; returns when it shuts down.

    ``build`` runs in the worker and returns one app per name the listeners use. ``threads``
    is each listener's pool unless its ``limits`` say otherwise: the listeners share none.
    """
    options = gunicorn_options(listeners, threads=threads, timeout=timeout)
    contexts = tls_contexts(listeners)
    raise_open_files(listeners, threads=threads)
    if on_exit is not None:
        options["worker_exit"] = lambda _server, _worker: on_exit()

    def load() -> Routes:
        apps = build()
        missing = {listener.app for listener in listeners} - set(apps)
        if missing:
            raise ValueError(f"no app built for listener(s) {sorted(missing)}")
        return Routes({listener.port: (listener, apps[listener.app], contexts[listener.port],
                                       listener.limits_with(threads)) for listener in listeners})

    _App(load, options).run()
