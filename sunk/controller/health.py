"""Tiny HTTP endpoints: ``/healthz`` and ``/readyz`` probes, and Prometheus ``/metrics``.

Why stdlib: three fixed GET routes do not need a framework, and keeping them in a
thread beside the controllers means a wedged worker does not silence the probes.
Responses follow controller-runtime: 200 ``ok``, or 500 listing failed checks
(``[-]informers failed``); ``?verbose`` lists every check. That 500 is the only 5xx: every
other method than GET is a 405, an unknown path a 404, a request the stdlib parser refuses
its 4xx, each with a plain-text body (never the stdlib's HTML error page).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional, Union
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from sunk.controller import textsources
from sunk.flags import loggable, parse_bind_address

log = logging.getLogger(__name__)

Check = Callable[[], bool]
# Seconds a connection may take to send its request (or sit idle between requests) before it is closed:
# each connection holds a thread of this server while it is open, so a silent or slow one must not keep it.
READ_SECONDS = 10.0


def run_checks(checks: Mapping[str, Check]) -> tuple[bool, list[str]]:
    ok, lines = True, []
    for name, check in checks.items():
        try:
            passed = bool(check())
        except Exception:
            log.exception("check %s raised", name)
            passed = False
        ok = ok and passed
        lines.append(f"[+]{name} ok" if passed else f"[-]{name} failed")
    return ok, lines


class HttpEndpoints:
    """Serves health/readiness checks and, optionally, metrics, from one daemon thread."""

    def __init__(
        self,
        bind_address: str,
        *,
        healthz: Mapping[str, Check] | None = None,
        readyz: Mapping[str, Check] | None = None,
        metrics: bool = False,
    ):
        # The caller's mappings themselves, not copies: a Manager adds checks after building these.
        self.healthz: Mapping[str, Check] = healthz if healthz is not None else {}
        self.readyz: Mapping[str, Check] = readyz if readyz is not None else {}
        self.metrics = metrics
        endpoints = self

        class Handler(BaseHTTPRequestHandler):
            timeout = READ_SECONDS  # (the socket's timeout: a read that waits longer ends the connection)
            # The parser's own refusals (400, 414, 431, ...): plain text like every other answer.
            error_message_format = "%(code)d %(message)s\n"
            error_content_type = "text/plain; charset=utf-8"

            def __getattr__(self, name: str) -> Callable[[], None]:
                """``do_<METHOD>`` for every method but GET: 405 (the stdlib answers 501 otherwise)."""
                if name.startswith("do_"):
                    return self._not_allowed
                raise AttributeError(name)

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                """The stdlib parser's refusals: with a status line even when it refused the request line
                before reading its version (it would answer HTTP/0.9, a bare body), and a version it
                does not speak (its 505) is the caller's error, 400."""
                if self.request_version == "HTTP/0.9" and len(self.requestline.split()) != 2:
                    self.request_version = "HTTP/1.0"
                if code == 505:
                    code, message = 400, f"unsupported HTTP version ({message})"
                super().send_error(code, message, explain)

            def _not_allowed(self) -> None:
                self._send(405, b"method not allowed: GET only\n", allow="GET")

            def do_GET(self) -> None:
                try:
                    url = urlsplit(self.path)
                except ValueError:  # e.g. "//[": an IPv6 host that does not close
                    self._send(400, b"bad request path\n")
                    return
                if url.path in ("/healthz", "/livez"):
                    self._checks(endpoints.healthz, url.query)
                elif url.path == "/readyz":
                    self._checks(endpoints.readyz, url.query)
                elif url.path == "/metrics" and endpoints.metrics:
                    length, chunks = textsources.body(generate_latest(REGISTRY))
                    self._send(200, chunks, CONTENT_TYPE_LATEST, length=length)
                else:
                    self._send(404, b"not found\n")

            def _checks(self, checks: Mapping[str, Check], query: str) -> None:
                ok, lines = run_checks(checks)
                verbose = "verbose" in parse_qs(query, keep_blank_values=True)
                if ok and not verbose:
                    self._send(200, b"ok")
                    return
                shown = lines if verbose else [line for line in lines if line.startswith("[-]")]
                tail = "check passed" if ok else "check failed"
                self._send(200 if ok else 500, ("\n".join([*shown, tail]) + "\n").encode())

            def _send(self, code: int, body: Union[bytes, Iterable[bytes]], ctype: str = "text/plain; charset=utf-8",
                      allow: Optional[str] = None, length: Optional[int] = None) -> None:
                """``body`` whole, or as chunks of ``length`` bytes in all (written one by one)."""
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body) if isinstance(body, bytes) else length))
                if allow:
                    self.send_header("Allow", allow)
                self.end_headers()
                if self.command != "HEAD":
                    for chunk in (body,) if isinstance(body, bytes) else body:
                        self.wfile.write(chunk)

            def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: quiet
                log.debug("%s %s", self.address_string(), loggable(format % args, 400))

        self._server = ThreadingHTTPServer(parse_bind_address(bind_address), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http-endpoints", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
