"""Serve flask apps with gunicorn, in the same process as the controllers they talk to.

The hook API and the extender answer from in-memory state (informer caches, the Slurm
cache), so they must live where the controllers live. gunicorn forks its worker, and
threads do not survive a fork, so ``build`` runs inside the worker: it starts the
controllers and returns the WSGI apps. The gunicorn master stays a thin supervisor that
restarts a dead worker; since all state lives in Kubernetes and Slurm, a restart resumes.

Each listener serves one app with a TLS setting of its own. gunicorn has one TLS setting
for all its listeners, so the extender's mutual-TLS verbs port turned its plain-HTTP hook
port into TLS too, and placeholder jobs calling ``http://...:8000`` got no answer. Here
gunicorn's documented ``ssl_context`` hook hands it a context that picks, per accepted
connection, the listener's own TLS or none, and a router sends each request to the app of
the port it came in on (so the plain hook port never serves the extender's verbs).
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional

import attrs
from gunicorn.app.base import BaseApplication
from gunicorn.config import KNOWN_SETTINGS

from sunk.flags import parse_bind_address

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
    """One port: the app it serves (a key of what ``build`` returns), and its TLS or none."""

    address: str
    app: str
    tls: Optional[TLS] = None

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


class PerListenerTLS:
    """Stands in for gunicorn's SSLContext: wraps a connection in its listener's TLS, or not at all.

    gunicorn calls ``wrap_socket`` on every accepted connection; the local port says which
    listener accepted it. A plain listener gets its socket back unwrapped (gunicorn then
    parses plain HTTP; it treats a non-SSL socket as "no ALPN").
    """

    def __init__(self, contexts: Mapping[int, Optional[ssl.SSLContext]]):
        self._contexts = dict(contexts)

    def wrap_socket(self, sock: socket.socket, **kwargs: Any) -> socket.socket:
        context = self._contexts.get(sock.getsockname()[1])
        if context is None:
            return sock
        kwargs["do_handshake_on_connect"] = True  # a plain socket has no handshake to finish later
        return context.wrap_socket(sock, **kwargs)


def router(listeners: Sequence[Listener], apps: Mapping[str, WSGIApp]) -> WSGIApp:
    """One WSGI app for gunicorn: each request goes to the app of the port it arrived on."""
    missing = {listener.app for listener in listeners} - set(apps)
    if missing:
        raise ValueError(f"no app built for listener(s) {sorted(missing)}")
    by_port = {str(listener.port): apps[listener.app] for listener in listeners}

    def route(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        app = by_port.get(str(environ.get("SERVER_PORT")))
        if app is None:  # cannot happen: gunicorn accepts only on the listeners' ports
            start_response("404 Not Found", [("Content-Type", "application/json")])
            return [b'{"error": "no app on this port"}']
        return app(environ, start_response)

    return route


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


def gunicorn_options(listeners: Sequence[Listener], *, threads: int, timeout: int) -> dict[str, Any]:
    check_listeners(listeners)
    options: dict[str, Any] = {
        "bind": [gunicorn_bind(listener.address) for listener in listeners],
        "workers": 1,
        "worker_class": "gthread",
        "threads": threads,
        "timeout": timeout,
        "graceful_timeout": 30,
        "preload_app": False,
        "accesslog": None,
        "loglevel": "warning",
    }
    if CONTROL_SOCKET_DISABLE in _GUNICORN_SETTINGS:
        # gunicorn 25+ opens a control socket in $HOME: on the chart's read-only root file system that
        # is an error line at every start, and sunk has no use for it.
        options[CONTROL_SOCKET_DISABLE] = True
    contexts = {listener.port: listener.tls.context() if listener.tls else None for listener in listeners}
    secured = [listener.tls for listener in listeners if listener.tls is not None]
    if secured:  # (the contexts above are built now: a bad file fails the start, with its name)
        # Any certificate makes gunicorn call the ssl_context hook; the hook then decides per listener.
        options.update(certfile=secured[0].cert_file, keyfile=secured[0].key_file, do_handshake_on_connect=True,
                       ssl_context=lambda _conf, _default: PerListenerTLS(contexts))
    return options


def serve(build: Callable[[], Mapping[str, WSGIApp]], listeners: Sequence[Listener], *, threads: int = 16,
          timeout: int = 60, on_exit: Optional[Callable[[], None]] = None) -> None:
    """Run gunicorn with one threaded worker; returns when it shuts down.

    ``build`` runs in the worker and returns one app per name the listeners use.
    """
    options = gunicorn_options(listeners, threads=threads, timeout=timeout)
    if on_exit is not None:
        options["worker_exit"] = lambda _server, _worker: on_exit()
    _App(lambda: router(listeners, build()), options).run()
