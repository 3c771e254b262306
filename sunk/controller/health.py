"""Tiny HTTP endpoints: ``/healthz`` and ``/readyz`` probes, and Prometheus ``/metrics``.

Served by the hostile-client front (``sunk/controller/httpfront.py``) on a loop of its own in
one daemon thread beside the controllers: an idle, slow or half-sent connection costs a file
descriptor, never a thread (the stdlib server gave each a thread), and a wedged app listener
does not silence the probes. The routes are a tiny WSGI app; its pool is ``PROBE_LIMITS.threads``.

Responses follow controller-runtime: 200 ``ok``, or 500 listing failed checks
(``[-]informers failed``); ``?verbose`` lists every check. That 500 is the only 5xx: every
other method than GET and HEAD is a 405 (``Allow: GET, HEAD``), an unknown path a 404, a
request the front refuses its 4xx, each with a plain-text body (the front's refusals on this
port are plain text too: ``text_error_answer``).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qs

import attrs
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from sunk.base.flags import parse_bind_address
from sunk.controller import textsources
from sunk.controller.httpfront import FrontThread, Limits, ListenerFront, Streamed, text_error_answer

log = logging.getLogger(__name__)

Check = Callable[[], bool]
TEXT = "text/plain; charset=utf-8"
# A probe port has few real callers (the kubelet, Prometheus): a small pool, small bodies, and a connection cap
# that holds 1000 idle connections with room; deadlines as every listener's. Per peer: the kubelet (one address
# per node, a probe or two at a time) and each Prometheus (a scrape or two at a time) hold a handful, so 64 is
# far from them, and 32 flooding hosts are needed to fill the port (whose busiest then evicts itself first).
PROBE_LIMITS = Limits(threads=4, max_body_bytes=64 * 1024, max_buffered_bytes=4 * 1024 * 1024,
                      max_connections=2048, max_connections_per_peer=64)


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


@attrs.frozen
class Reply:
    """One answer of the probe app: status, content type, body (``Streamed`` for a scrape), extra headers."""

    status: str
    body: bytes | Streamed
    content_type: str = TEXT
    headers: tuple[tuple[str, str], ...] = ()


def checks_reply(checks: Mapping[str, Check], query: str) -> Reply:
    """controller-runtime's answer to a health or readiness probe."""
    ok, lines = run_checks(checks)
    verbose = "verbose" in parse_qs(query, keep_blank_values=True)
    if ok and not verbose:
        return Reply("200 OK", b"ok")
    shown = lines if verbose else [line for line in lines if line.startswith("[-]")]
    tail = "check passed" if ok else "check failed"
    return Reply("200 OK" if ok else "500 Internal Server Error", ("\n".join([*shown, tail]) + "\n").encode())


# Scrapes answered at once: Prometheus (two replicas, say) scrapes a target once per interval, and each
# scrape in flight keeps its chunks and a socket buffer of a large table until its reader takes them.
MAX_SCRAPES = 4


def metrics_reply(scrapes: threading.BoundedSemaphore) -> Reply:
    """The default registry, then every text source, streamed group by group (never whole in memory); a 429
    when ``scrapes`` has no room (so many slow readers cannot hold a table's worth of memory each)."""
    if not scrapes.acquire(blocking=False):
        return Reply("429 Too Many Requests", f"too many scrapes at once (at most {MAX_SCRAPES}): try again\n"
                     .encode(), headers=(("Retry-After", "1"),))
    try:
        length, chunks = textsources.body(generate_latest(REGISTRY))
    except BaseException:
        scrapes.release()
        raise
    return Reply("200 OK", Streamed(length, _Releasing(chunks, scrapes)), CONTENT_TYPE_LATEST)


class _Releasing:
    """``chunks``, giving the scrape's place back once: when they are all written, when the front stops (a
    reader gone midway: ``close``), or when the answer is dropped unread (HEAD: its body is never asked for)."""

    def __init__(self, chunks: Iterator[bytes], scrapes: threading.BoundedSemaphore):
        self._chunks, self._scrapes = chunks, scrapes
        self._held = True
        self._lock = threading.Lock()  # (the pool's thread and the collector may both end it)

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._chunks)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        with self._lock:
            held, self._held = self._held, False
        if held:
            self._scrapes.release()

    def __del__(self) -> None:
        self.close()


class HttpEndpoints:
    """Serves health/readiness checks and, optionally, metrics, from one daemon thread (and its small pool)."""

    def __init__(
        self,
        bind_address: str,
        *,
        healthz: Mapping[str, Check] | None = None,
        readyz: Mapping[str, Check] | None = None,
        metrics: bool = False,
        limits: Limits = PROBE_LIMITS,
    ):
        # The caller's mappings themselves, not copies: a Manager adds checks after building these.
        self.healthz: Mapping[str, Check] = healthz if healthz is not None else {}
        self.readyz: Mapping[str, Check] = readyz if readyz is not None else {}
        self.metrics = metrics
        self._scrapes = threading.BoundedSemaphore(MAX_SCRAPES)
        host, port = parse_bind_address(bind_address)
        # Bound and listening now, as the stdlib server was: a taken port fails the constructor, and ``port`` is known.
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET,
                                    backlog=1024)
        front = ListenerFront("probes" if not metrics else "metrics", sock, self.app, limits=limits,
                              refusal=text_error_answer)
        self._front = front
        self._thread = FrontThread("http-endpoints", [front])

    @property
    def port(self) -> int:
        return self._front.port

    @property
    def open_connections(self) -> int:
        """Connections the server holds now (each a file descriptor, never a thread)."""
        return self._front.open_connections

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def reply(self, method: str, path: str, query: str) -> Reply:
        """The route's answer; HEAD is answered as GET (the front sends no body)."""
        if method not in ("GET", "HEAD"):
            return Reply("405 Method Not Allowed", b"method not allowed: GET or HEAD only\n",
                         headers=(("Allow", "GET, HEAD"),))
        if path in ("/healthz", "/livez"):
            return checks_reply(self.healthz, query)
        if path == "/readyz":
            return checks_reply(self.readyz, query)
        if path == "/metrics" and self.metrics:
            return metrics_reply(self._scrapes)
        return Reply("404 Not Found", b"not found\n")

    def app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """The WSGI face of ``reply``."""
        reply = self.reply(environ["REQUEST_METHOD"], environ["PATH_INFO"], environ.get("QUERY_STRING", ""))
        length = reply.body.length if isinstance(reply.body, Streamed) else len(reply.body)
        start_response(reply.status, [("Content-Type", reply.content_type), ("Content-Length", str(length)),
                                      *reply.headers])
        return reply.body if isinstance(reply.body, Streamed) else [reply.body]
