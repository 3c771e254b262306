"""An HTTP/1.1 front for WSGI apps that idle, slow or half-sent connections cannot starve.

Why: gunicorn's gthread worker gives each connection a thread as soon as it sends a byte,
and keeps it until the request is whole. 16 connections that sent one byte each stalled the
scheduler's hook API, 256 the Syncer's (every prolog failed, nodes drained). Here an asyncio
loop owns every connection: it reads a request's head and body under deadlines and size
limits, parsed by h11 (a well-kept sans-I/O HTTP/1.1 parser), and only a whole request takes
a thread, from its listener's own pool. A waiting connection costs a file descriptor and a
few KB, never a thread.

Per listener (``Limits``): its TLS context (the handshake runs inside the head deadline and
the connection cap), its pool, its connection cap and its cap per peer (a remote IP address).
At a cap, a connection still waiting for its request head is closed to make room (it holds no
thread): at the peer's cap, that peer's own one that has waited longest, so one host's flood
(any Slurm user on a node can open thousands of sockets) only ever evicts itself; at the
listener's cap, the longest-waiting one of the peer with the most connections waiting (the
flood, first). Only when none of the connections it could close is waiting is a new one
refused. Each choice is O(1) (``PeerTable``, ``admission``); each is logged, at most once per
``LOG_EVERY`` seconds per listener and cap, the peer named.

A listener's own refusals (408, 413, 431, a malformed request's 400, a bug's 500) speak its
apps' language: JSON by default (``error_answer``), plain text on the probe and metrics port
(``text_error_answer``). A request the front cannot parse is the caller's error, always a 4xx
(h11's 501 for a transfer coding it does not know is answered 400): a 5xx means the server.

An app may answer a long body as ``Streamed``, its length and its chunks: each chunk is made on
a thread of the pool when the last one is written, so a 20 MB scrape is never whole in memory,
and a slow reader holds back only its own chunks (any answer is written by the loop, no thread).

Outside gunicorn (the probe and metrics port of every daemon), ``FrontThread`` serves fronts
on a loop of their own in one daemon thread.

Liveness (``FrontHealth.wedged``): a listener is wedged when its loop has not ticked for
``stall_seconds``, or when requests have been waiting for a thread while none finished for
``stall_seconds`` (longer than any call waits by design).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import ipaddress
import logging
import ssl
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any, Generic, Optional, TypeVar
from urllib.parse import unquote_to_bytes

import attrs
import h11

log = logging.getLogger(__name__)

WSGIApp = Callable[..., Any]
T = TypeVar("T")
C = TypeVar("C", bound=Hashable)  # a connection, as PeerTable knows it (the front's: its task)
LOG_EVERY = 10.0
# A body may come in pieces (chunks, or reads) of MIN_PIECE_BYTES on average, past its first MIN_PIECES.
MIN_PIECES = 64
MIN_PIECE_BYTES = 512


@attrs.frozen
class Limits:
    """What one listener allows a client. The defaults hold 1000 idle connections with room to spare."""

    threads: int = 16  # requests answered at once; a long-polling call holds one for its wait
    head_seconds: float = 10.0  # from accept (or the previous answer) to a whole request head, TLS included
    body_seconds: float = 10.0  # from the head to the whole body
    write_seconds: float = 10.0  # to hand an answer to a client that does not read it
    max_head_bytes: int = 16 * 1024  # request line and headers
    max_body_bytes: int = 8 * 1024 * 1024  # kube-scheduler's ExtenderArgs name every candidate node
    # Bytes of request bodies held at once, across the listener's connections (being read, or waiting
    # for their answer): 4096 connections each sending 8 MiB must not take 32 GiB and the process with it.
    max_buffered_bytes: int = 64 * 1024 * 1024
    max_connections: int = 4096
    # Of them, one peer (a remote IP address) holds at most this many, answered or waiting. The heaviest
    # legitimate peers: a slurmd node (a prolog or epilog call per job starting or ending on it, a placeholder's
    # long poll per placeholder job running there: a node running 100 jobs at once stays well under it) and
    # kube-scheduler on the extender's verbs (its client's pool, a bind per Pod in its binding cycle). A flood
    # at it evicts only its own waiting connections; 16 flooding hosts are needed to fill the listener, and
    # then the busiest of them evicts itself first.
    max_connections_per_peer: int = 256
    stall_seconds: float = 120.0  # liveness: > the longest wait by design (the Syncer's pre-hook, 90 s)


class Streamed:
    """A WSGI answer body of a known length, in chunks made one at a time: the front asks for each chunk on a
    thread of the pool once the one before is written, so the body is never whole in memory. Any other
    iterable an app returns is joined whole on its thread. Still a plain WSGI iterable for any other server."""

    def __init__(self, length: int, chunks: Iterable[bytes]):
        self.length = length
        self.chunks = iter(chunks)

    def __iter__(self) -> Iterator[bytes]:
        return self.chunks

    def close(self) -> None:
        """WSGI's ``close``: the front calls it once the answer is done with, written or not (HEAD, a reader
        gone, an error), so whatever the chunks hold is let go then, not when the answer is collected."""
        close = getattr(self.chunks, "close", None)
        if close is not None:
            try:
                close()
            except ValueError:  # a generator still running on a pool thread (a cancelled answer): collected later
                log.debug("a streamed body was still being made when its answer ended")


@attrs.frozen
class Answer:
    """A whole HTTP answer, as the WSGI app gave it or as the front refuses a request; ``stream``: the rest of
    its body, ``Streamed`` (``body`` then empty)."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    stream: Optional[Streamed] = None

    @property
    def length(self) -> int:
        return self.stream.length if self.stream is not None else len(self.body)


Refusal = Callable[[int, str, str], Answer]  # (status, reason, message) -> one of the front's own answers


def error_answer(status: int, reason: str, message: str) -> Answer:
    """The front's own refusals, by default: JSON like the apps' errors, and the connection closes."""
    body = ('{"error": "' + message.replace("\\", "\\\\").replace('"', '\\"') + '"}').encode()
    return Answer(status, reason, (("Content-Type", "application/json"), ("Connection", "close")), body)


def text_error_answer(status: int, reason: str, message: str) -> Answer:
    """The front's own refusals in plain text (the probe and metrics port, whose answers are all text)."""
    return Answer(status, reason, (("Content-Type", "text/plain; charset=utf-8"), ("Connection", "close")),
                  (message + "\n").encode())


def refusal_status(hint: int) -> tuple[int, str]:
    """The status of a request h11 could not parse, and its reason: always a 4xx, the caller's error (h11 hints
    501 for a transfer coding it does not know; a 5xx would read as the server's fault)."""
    status = hint if 400 <= hint < 500 else 400
    return status, HTTPStatus(status).phrase


def parse_status(status: str) -> tuple[int, str]:
    """WSGI's ``"200 OK"`` -> ``(200, "OK")``; a malformed status is the app's bug, a ValueError."""
    code, _, reason = status.partition(" ")
    if len(code) != 3 or not code.isdigit():
        raise ValueError(f"bad WSGI status {status!r}")
    return int(code), reason


def head_size(request: h11.Request) -> int:
    """About the bytes of a request's head as sent: its line and each header line."""
    return len(request.method) + len(request.target) + 12 + sum(
        len(name) + len(value) + 4 for name, value in request.headers.raw_items())


def environ_for(request: h11.Request, body: bytes, *, port: int, scheme: str,
                peer: Optional[tuple[Any, ...]]) -> dict[str, Any]:
    """PEP 3333's environ for a whole request. ``SERVER_PORT`` is the listener's (routing reads it).

    Headers with ``_`` in their name are dropped, as gunicorn and nginx do: ``X_Token`` and
    ``X-Token`` would both become ``HTTP_X_TOKEN``, and a caller could shadow a header.
    """
    target = request.target
    path, _, query = target.partition(b"?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method.decode("ascii"),
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "QUERY_STRING": query.decode("latin-1"),
        "SERVER_NAME": "localhost",
        "SERVER_PORT": str(port),
        "SERVER_PROTOCOL": "HTTP/" + request.http_version.decode("ascii"),
        "REMOTE_ADDR": str(peer[0]) if peer else "",
        "REMOTE_PORT": str(peer[1]) if peer and len(peer) > 1 else "",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scheme,
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
    }
    for raw_name, raw_value in request.headers:
        name = raw_name.decode("latin-1")
        if "_" in name or name == "transfer-encoding":  # the body is whole: the app sees its length
            continue
        value = raw_value.decode("latin-1")
        if name == "content-type":
            environ["CONTENT_TYPE"] = value
        elif name == "content-length":
            continue  # (the body is whole: its own length, below, never the client's word)
        else:
            key = "HTTP_" + name.upper().replace("-", "_")
            environ[key] = f"{environ[key]},{value}" if key in environ else value
    environ["CONTENT_LENGTH"] = str(len(body))
    return environ


def call_app(app: WSGIApp, environ: dict[str, Any], refusal: Refusal = error_answer) -> Answer:
    """Run a WSGI app to the end of its answer (in a pool thread), or to its ``Streamed`` body; an app's
    exception is a 500 (``refusal``'s)."""
    started: list[Any] = []
    chunks: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        if exc_info is not None and started:
            raise exc_info[1].with_traceback(exc_info[2])
        started[:] = [status, headers]
        return chunks.append

    stream: Optional[Streamed] = None
    try:
        result = app(environ, start_response)
        if isinstance(result, Streamed):
            stream = result
        else:
            try:
                chunks.extend(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        if not started:
            raise ValueError("the app returned without calling start_response")
        code, reason = parse_status(started[0])
        headers = tuple((str(name), str(value)) for name, value in started[1])
    except Exception:
        log.exception("%s %s: the app failed", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
        return refusal(500, "Internal Server Error", "internal error")
    return Answer(code, reason, headers, b"".join(chunks), stream)


def peer_of(peername: Any) -> str:
    """The peer a connection counts against: its remote IP address, canonical, an IPv4-mapped IPv6 one as its
    IPv4 (a dual-stack listener sees ``::ffff:10.0.0.1`` for the host that reaches an IPv4 one as ``10.0.0.1``);
    the whole of what the socket names when it is not an address (a Unix socket: all its callers one peer)."""
    if not isinstance(peername, (tuple, list)) or not peername:
        return str(peername or "")
    host = peername[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return str(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


class PeerTable(Generic[C]):
    """A listener's open connections by peer, and those waiting for a request, for the caps' choices in O(1)
    per change: each peer's waiting connections in the order their waits began (a connection moves to its
    end when a wait begins and leaves while it is answered), and the peers by how many of theirs wait, with
    the most kept current (counts change by one at a time). No I/O: what to close is ``admission``'s choice.
    O(1) matters: at a cap every accepted connection asks, and a scan of 4096 took 0.4 ms of the shared loop."""

    def __init__(self) -> None:
        self._peer: dict[C, str] = {}
        self._open: dict[str, int] = {}
        self._waiting: dict[str, dict[C, None]] = {}  # peer -> its waiting connections, oldest wait first
        self._peers_waiting: dict[int, dict[str, None]] = {}  # how many wait -> the peers with that many
        self._most_waiting = 0

    def __len__(self) -> int:
        return len(self._peer)

    def open(self, conn: C, peer: str) -> None:
        """A connection accepted from ``peer`` (not waiting yet: ``wait_begins``)."""
        if conn in self._peer:
            return
        self._peer[conn] = peer
        self._open[peer] = self._open.get(peer, 0) + 1

    def close(self, conn: C) -> None:
        """A connection gone (closed for room or ended); a second close is nothing."""
        if conn not in self._peer:
            return
        self.wait_ends(conn)
        peer = self._peer.pop(conn)
        left = self._open[peer] - 1
        if left:
            self._open[peer] = left
        else:
            del self._open[peer]

    def wait_begins(self, conn: C) -> None:
        """``conn`` begins to wait for a request (accepted, or its answer written): the last of its peer's.
        Nothing for a connection already closed (evicted: its task ends at its next await)."""
        peer = self._peer.get(conn)
        if peer is None:
            return
        waits = self._waiting.setdefault(peer, {})
        if conn in waits:
            del waits[conn]
            waits[conn] = None
            return
        waits[conn] = None
        self._recount(peer, len(waits) - 1, len(waits))

    def wait_ends(self, conn: C) -> None:
        """``conn`` has its request head (it is read and answered now), or is gone."""
        peer = self._peer.get(conn)
        waits = self._waiting.get(peer) if peer is not None else None
        if peer is None or waits is None or conn not in waits:
            return
        del waits[conn]
        if not waits:
            del self._waiting[peer]
        self._recount(peer, len(waits) + 1, len(waits))

    def _recount(self, peer: str, before: int, after: int) -> None:
        if before:
            peers = self._peers_waiting[before]
            del peers[peer]
            if not peers:
                del self._peers_waiting[before]
                if self._most_waiting == before:
                    self._most_waiting = after  # (by one: ``peer`` itself is there now, or none waits at all)
        if after:
            self._peers_waiting.setdefault(after, {})[peer] = None
            self._most_waiting = max(self._most_waiting, after)

    def is_waiting(self, conn: C) -> bool:
        peer = self._peer.get(conn)
        return peer is not None and conn in self._waiting.get(peer, {})

    def waiting(self) -> list[C]:
        """Every connection waiting for a request (a copy)."""
        return [conn for waits in self._waiting.values() for conn in waits]

    def open_of(self, peer: str) -> int:
        return self._open.get(peer, 0)

    def waiting_of(self, peer: str) -> int:
        return len(self._waiting.get(peer, {}))

    def longest_waiting_of(self, peer: str) -> Optional[C]:
        """``peer``'s connection that has waited longest for its request; None when none of its waits."""
        return next(iter(self._waiting.get(peer, {})), None)

    def most_waiting_peer(self) -> Optional[str]:
        """The peer with the most connections waiting for a request (a flood's); None when none waits."""
        return next(iter(self._peers_waiting[self._most_waiting])) if self._most_waiting else None


@attrs.frozen
class Admission:
    """What to do with a new connection: ``admit`` it, after closing ``evict`` (a waiting connection) when not
    None; ``cap``: the cap that asked for room ("peer" or "listener"), "" when under both."""

    admit: bool
    evict: Any = None
    cap: str = ""


def admission(table: PeerTable[C], peer: str, limits: Limits) -> Admission:
    """Whether a new connection from ``peer`` is admitted, and whom it replaces. At the peer's cap: that peer's
    longest-waiting connection, never another peer's (closing one of its own makes room under the listener's
    cap too). Else at the listener's cap: the longest-waiting one of the peer with the most waiting (not the
    most open: a peer whose connections are all being answered, a node's long polls, has none to give, and
    a flood's all wait). Refused when that peer, or the whole listener, has none waiting."""
    if table.open_of(peer) >= limits.max_connections_per_peer:
        victim = table.longest_waiting_of(peer)
        return Admission(victim is not None, victim, "peer")
    if len(table) >= limits.max_connections:
        busiest = table.most_waiting_peer()
        victim = table.longest_waiting_of(busiest) if busiest is not None else None
        return Admission(victim is not None, victim, "listener")
    return Admission(True)


def biggest_reader(reading: Mapping[Any, int]) -> Any:
    """The connection holding the most bytes of a body not yet whole: the one to close when the listener's
    bodies in flight pass their cap (not the request that tipped it, or a few stalled 8 MiB bodies would
    refuse every small one)."""
    return max(reading.items(), key=lambda item: item[1])[0] if reading else None


@attrs.frozen
class PoolSnapshot:
    """What liveness reads of one listener: its loop's last tick, requests queued or running, the last finish."""

    loop_tick: float
    in_pool: int
    threads: int
    last_finish: float


def wedged(snapshot: PoolSnapshot, now: float, stall_seconds: float) -> Optional[str]:
    """Why a listener is wedged, or None. A full pool is not wedged while its calls keep finishing."""
    if now - snapshot.loop_tick > stall_seconds:
        return f"its event loop has not run for {now - snapshot.loop_tick:.0f} s"
    if snapshot.in_pool > snapshot.threads and now - snapshot.last_finish > stall_seconds:
        return (f"{snapshot.in_pool - snapshot.threads} request(s) waited for a thread while none of "
                f"{snapshot.threads} finished for {now - snapshot.last_finish:.0f} s")
    return None


class _RateLimitedLog:
    def __init__(self) -> None:
        self._last = 0.0
        self._suppressed = 0

    def warning(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last < LOG_EVERY:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more like it since the last line)" if self._suppressed else ""
        log.warning(message + more, *args)
        self._last, self._suppressed = now, 0


class _Closed(Exception):
    """The client closed, sent what h11 refuses, or an answer was already written: end the connection."""


class ListenerFront:
    """One listening socket served on the running loop: connections, deadlines, cap, its pool."""

    def __init__(self, name: str, sock: Any, app: WSGIApp, *, context: Optional[ssl.SSLContext] = None,
                 limits: Limits = Limits(), refusal: Refusal = error_answer):
        self.name = name
        self.refusal = refusal
        self.sock = sock
        self.port = int(sock.getsockname()[1])
        self.app = app
        self.context = context
        self.limits = limits
        self.pool = ThreadPoolExecutor(max_workers=limits.threads, thread_name_prefix=f"http-{name}")
        self._open: set[asyncio.Task[Any]] = set()
        # Open connections by peer, and those waiting for a request in the order their waits began (admission).
        self._peers: PeerTable[asyncio.Task[Any]] = PeerTable()
        self._reading: dict[asyncio.Task[Any], int] = {}  # bytes of a body not yet whole, by connection
        self._server: Optional[asyncio.AbstractServer] = None
        self._cap_log = _RateLimitedLog()
        self._peer_cap_log = _RateLimitedLog()  # (its own: one flooding host must not hide the listener's cap)
        self._lock = threading.Lock()
        self._in_pool = 0
        self._buffered = 0  # bytes of request bodies held now (Limits.max_buffered_bytes); the loop's only
        now = time.monotonic()
        self._loop_tick = now
        self._last_finish = now

    # ---- what liveness reads (from another thread) ------------------------------------------

    def snapshot(self) -> PoolSnapshot:
        with self._lock:
            return PoolSnapshot(self._loop_tick, self._in_pool, self.limits.threads, self._last_finish)

    def tick(self) -> None:
        with self._lock:
            self._loop_tick = time.monotonic()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def open_connections_of(self, peer: str) -> int:
        return self._peers.open_of(peer)

    # ---- serving ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, sock=self.sock, backlog=1024,
                                                  limit=self.limits.max_head_bytes)

    async def stop(self, grace: float) -> None:
        """Stop accepting, close the connections that wait, give those being answered ``grace`` seconds."""
        if self._server is not None:
            self._server.close()
        for task in self._peers.waiting():
            task.cancel()
        busy = [task for task in self._open if not self._peers.is_waiting(task)]
        if busy:
            await asyncio.wait(busy, timeout=grace)
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if not self._admit(task, peer_of(writer.get_extra_info("peername"))):
            writer.transport.abort()
            return
        try:
            await self._serve(reader, writer, task)
        except (_Closed, ConnectionError, TimeoutError, ssl.SSLError, OSError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("%s: a connection failed", self.name)
        finally:
            self._open.discard(task)
            self._peers.close(task)
            writer.transport.abort()

    def _admit(self, task: asyncio.Task[Any], peer: str) -> bool:
        choice = admission(self._peers, peer, self.limits)
        if choice.cap == "peer":
            held = self._peers.open_of(peer)
            if choice.evict is None:
                self._peer_cap_log.warning("%s: peer %s holds %d connections (its cap), every one being answered: "
                                           "refusing a new one", self.name, peer, held)
            else:
                self._peer_cap_log.warning("%s: peer %s holds %d connections (its cap): closing its own that "
                                           "waited longest for its request to make room", self.name, peer, held)
        elif choice.cap == "listener":
            if choice.evict is None:
                self._cap_log.warning("%s: %d connections open (the cap), every one being answered: "
                                      "refusing a new one from %s", self.name, len(self._open), peer)
            else:
                busiest = self._peers.most_waiting_peer()
                self._cap_log.warning("%s: %d connections open (the cap): closing the one that waited longest "
                                      "of peer %s, which has the most waiting (%d), for one from %s", self.name,
                                      len(self._open), busiest, self._peers.waiting_of(busiest or ""), peer)
        if not choice.admit:
            return False
        if choice.evict is not None:
            victim: asyncio.Task[Any] = choice.evict
            self._peers.close(victim)
            self._open.discard(victim)
            victim.cancel()
        self._open.add(task)
        self._peers.open(task, peer)
        self._peers.wait_begins(task)
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     task: asyncio.Task[Any]) -> None:
        limits = self.limits
        loop = asyncio.get_running_loop()
        first_head_by = loop.time() + limits.head_seconds  # the TLS handshake and the first head, together
        if self.context is not None:
            await writer.start_tls(self.context, ssl_handshake_timeout=limits.head_seconds)
        peer = writer.get_extra_info("peername")
        scheme = "https" if self.context is not None else "http"
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes)
        first = True
        while True:
            if not first:
                self._peers.wait_begins(task)
            try:
                async with asyncio.timeout_at(first_head_by if first else loop.time() + limits.head_seconds):
                    request = await self._next(conn, reader)
            except TimeoutError:
                if conn.their_state is h11.IDLE and not conn.trailing_data[0]:
                    return  # an idle connection: close it quietly
                await self._refuse(writer, self.refusal(408, "Request Timeout",
                                                        f"request head not whole within {limits.head_seconds:g} s"))
                return
            except h11.RemoteProtocolError as exc:
                status, reason = refusal_status(exc.error_status_hint)
                await self._refuse(writer, self.refusal(status, reason, f"malformed request: {exc}"))
                return
            if not isinstance(request, h11.Request):
                return  # the client closed between requests
            if head_size(request) > limits.max_head_bytes:  # (h11 bounds only a head still incomplete)
                await self._refuse(writer, self.refusal(431, "Request Header Fields Too Large",
                                                        f"request head over {limits.max_head_bytes} bytes"))
                return
            first = False
            self._peers.wait_ends(task)  # (reading its body or answered: never evicted for a new connection)
            body = await self._body(conn, reader, writer, request, task)
            try:
                environ = environ_for(request, body, port=self.port, scheme=scheme, peer=peer)
                answer = await self._run(environ)
                await self._answer(conn, writer, request, answer)
            finally:
                self._buffered -= len(body)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _next(self, conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                conn.receive_data(data)
                if not data and conn.their_state is h11.IDLE:
                    return h11.ConnectionClosed()
                continue
            return event

    async def _body(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    request: h11.Request, task: asyncio.Task[Any]) -> bytes:
        limits = self.limits
        length = dict(request.headers).get(b"content-length")
        if length is not None and int(length) > limits.max_body_bytes:
            await self._refuse(writer, self.refusal(413, "Content Too Large",
                                                    f"request body over {limits.max_body_bytes} bytes"))
            raise _Closed()
        if conn.they_are_waiting_for_100_continue:
            writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
        body = bytearray()
        pieces = 0
        whole = False
        try:
            async with asyncio.timeout(limits.body_seconds):
                while True:
                    event = await self._next(conn, reader)
                    if isinstance(event, h11.Data):
                        body += event.data
                        pieces += 1
                        self._buffered += len(event.data)
                        self._reading[task] = len(body)
                        if len(body) > limits.max_body_bytes:
                            await self._refuse(writer, self.refusal(
                                413, "Content Too Large", f"request body over {limits.max_body_bytes} bytes"))
                            raise _Closed()
                        if pieces > MIN_PIECES and len(body) < pieces * MIN_PIECE_BYTES:
                            # Each piece is an h11 event on the loop every listener shares: a body sent in
                            # 2-byte chunks cost 22 s of loop time per 8 MiB.
                            await self._refuse(writer, self.refusal(
                                400, "Bad Request", f"request body in pieces under {MIN_PIECE_BYTES} bytes on "
                                                    f"average: send it whole, or in larger chunks"))
                            raise _Closed()
                        if self._buffered > limits.max_buffered_bytes:
                            victim = biggest_reader(self._reading)
                            self._cap_log.warning("%s: %d bytes of request bodies held at once (the cap): "
                                                  "closing the connection holding the most", self.name,
                                                  self._buffered)
                            if victim is task:
                                await self._refuse(writer, self.refusal(
                                    503, "Service Unavailable", "too many request bodies in flight: try again"))
                                raise _Closed()
                            self._reading.pop(victim, None)
                            victim.cancel()  # (its own finally gives its bytes back)
                    elif isinstance(event, h11.EndOfMessage):
                        whole = True
                        return bytes(body)
                    else:
                        raise _Closed()
        except TimeoutError:
            await self._refuse(writer, self.refusal(408, "Request Timeout",
                                                    f"request body not whole within {limits.body_seconds:g} s"))
            raise _Closed() from None
        except h11.RemoteProtocolError as exc:
            await self._refuse(writer, self.refusal(400, "Bad Request", f"malformed request body: {exc}"))
            raise _Closed() from None
        finally:
            self._reading.pop(task, None)
            if not whole:  # (a whole body stays counted until its answer is written: _serve)
                self._buffered -= len(body)

    async def _run(self, environ: dict[str, Any]) -> Answer:
        return await self._in_pool_thread(call_app, self.app, environ, self.refusal)

    async def _in_pool_thread(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` on a thread of the pool, counted for liveness."""
        with self._lock:
            self._in_pool += 1
            if self._in_pool == self.limits.threads + 1:
                # A request begins to wait for a thread: a stall is counted from now, not from a finish
                # before an idle spell (which would read as wedged the moment a storm fills the pool).
                self._last_finish = max(self._last_finish, time.monotonic())
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, work, *args)
        finally:
            with self._lock:
                self._in_pool -= 1
                self._last_finish = time.monotonic()

    async def _answer(self, conn: h11.Connection, writer: asyncio.StreamWriter, request: h11.Request,
                      answer: Answer) -> None:
        try:
            await self._write_answer(conn, writer, request, answer)
        finally:
            if answer.stream is not None:
                answer.stream.close()

    async def _write_answer(self, conn: h11.Connection, writer: asyncio.StreamWriter, request: h11.Request,
                            answer: Answer) -> None:
        headers = [(name, value) for name, value in answer.headers if name.lower() != "content-length"]
        headers.append(("Content-Length", str(answer.length)))
        try:
            data = conn.send(h11.Response(status_code=answer.status, reason=answer.reason, headers=headers))
        except h11.LocalProtocolError:
            log.exception("%s %s: the app's answer is not valid HTTP", request.method, request.target)
            await self._refuse(writer, self.refusal(500, "Internal Server Error", "internal error"))
            raise _Closed() from None
        out = [data or b""]
        if request.method != b"HEAD" and answer.body:
            out.append(conn.send(h11.Data(data=answer.body)) or b"")
        if request.method != b"HEAD" and answer.stream is not None:
            await self._write(writer, b"".join(out))
            out = []
            while (chunk := await self._in_pool_thread(next, answer.stream.chunks, None)) is not None:
                if not chunk:
                    continue
                try:
                    data = conn.send(h11.Data(data=chunk))
                except h11.LocalProtocolError:  # more than its length: the head is sent, only the close is left
                    log.error("%s %s: the app's streamed body is longer than its length %d", request.method,
                              request.target, answer.stream.length)
                    raise _Closed() from None
                await self._write(writer, data or b"")
        try:
            out.append(conn.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError:  # (a stream shorter than its length)
            log.error("%s %s: the app's streamed body is shorter than its length", request.method, request.target)
            raise _Closed() from None
        await self._write(writer, b"".join(out))

    async def _refuse(self, writer: asyncio.StreamWriter, answer: Answer) -> None:
        """Write one of the front's own refusals, outside h11 (which may be in its error state)."""
        head = [f"HTTP/1.1 {answer.status} {answer.reason}"]
        head += [f"{name}: {value}" for name, value in answer.headers]
        head.append(f"Content-Length: {len(answer.body)}")
        try:
            await self._write(writer, ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + answer.body)
        except (ConnectionError, TimeoutError, OSError):
            pass

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        async with asyncio.timeout(self.limits.write_seconds):
            await writer.drain()


class FrontHealth:
    """Liveness of every listener of this process: fails naming the wedged ones."""

    def __init__(self, fronts: Iterable[ListenerFront] = ()):
        self.fronts = list(fronts)

    def problems(self, now: Optional[float] = None) -> list[str]:
        now = time.monotonic() if now is None else now
        found = []
        for front in self.fronts:
            why = wedged(front.snapshot(), now, front.limits.stall_seconds)
            if why:
                found.append(f"{front.name} (port {front.port}): {why}")
        return found

    def __call__(self) -> bool:
        problems = self.problems()
        for problem in problems:
            log.error("listener wedged: %s", problem)
        return not problems


async def tick_forever(fronts: Iterable[ListenerFront], every: float = 1.0) -> None:
    """Marks the loop alive for liveness; a loop that stops running stops marking."""
    fronts = list(fronts)
    while True:
        for front in fronts:
            front.tick()
        await asyncio.sleep(every)


@contextlib.asynccontextmanager
async def serving(fronts: Sequence[ListenerFront], grace: float) -> AsyncIterator[None]:
    """``fronts`` served on the running loop, marked alive every second, for the ``async with``; then stopped
    (those being answered get ``grace`` seconds). One way to run fronts, in gunicorn's worker or a thread."""
    for front in fronts:
        await front.start()
    ticker = asyncio.create_task(tick_forever(fronts))
    try:
        yield
    finally:
        ticker.cancel()
        await asyncio.gather(*(front.stop(grace) for front in fronts))


class FrontThread:
    """Fronts served on an asyncio loop of their own, in one daemon thread: a listener outside gunicorn's worker
    (each daemon's probe and metrics ports), beside the controllers and apart from the apps' loop, so a wedged
    app listener does not silence its probes. The thread and the fronts' pools are all the threads it holds."""

    def __init__(self, name: str, fronts: Sequence[ListenerFront], *, grace: float = 1.0):
        self.fronts = list(fronts)
        self.grace = grace
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._ready = threading.Event()
        self._failed: Optional[BaseException] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional[asyncio.Event] = None

    def start(self) -> None:
        """Returns once every front accepts connections; a front that cannot start raises here."""
        self._thread.start()
        self._ready.wait()
        if self._failed is not None:
            raise self._failed

    def stop(self) -> None:
        """Stop serving and close the listening sockets (also when never started)."""
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(self.grace + 10.0)
        for front in self.fronts:
            front.sock.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # (start() raises it in the caller's thread)
            self._failed = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with serving(self.fronts, self.grace):
            self._ready.set()
            await self._stop.wait()
