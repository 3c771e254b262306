"""A counting relay in front of slurmrestd: what one sunk process reads from Slurm, request by request.

sunk counts its Slurm calls by message type (``/metrics``) but not their bytes. A process under
test is given the relay's URL as its ``--slurm-api-base``; the relay copies bytes both ways as
they come (no HTTP re-encoding: an answer costs a copy, not a parse) and reads only the heads of
the requests. An answer's bytes are those that come back on its connection until the client's
next request there: sunk's client (requests, urllib3) speaks HTTP/1.1 without pipelining, so a
connection carries one exchange at a time. Bytes are as on the wire, headers included.

An exchange's time is the relay's view: from the request's head to the answer's last byte so
far, so it holds slurmctld's and slurmrestd's work and the transfer, not the client's parsing.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

# Above this, an answer to a "changed since update_time?" question is a full list, not "no change".
# A "no change" answer is slurmrestd's meta block and a warning (about 1.5 KB, headers included; 24.11
# answers nodes with a bodiless 304); a listed job is 7 to 18 KB of JSON and a listed node about
# 2.3 KB, so any list of two items or more is above it.
NO_CHANGE_MAX_BYTES = 4096
MAX_HEAD_BYTES = 65536
_PREFIX = re.compile(r"^/slurm/v[0-9.]+/")


@dataclass
class Exchange:
    """One request through the relay and its answer (``received``, ``ended`` grow as it arrives)."""

    method: str
    target: str  # path and query, as the client sent them
    started: float  # time.monotonic() when its head arrived
    received: int = 0  # answer bytes so far, headers included
    ended: float | None = None  # when the last of them arrived; None: no answer yet

    @property
    def kind(self) -> str:
        return request_kind(self.method, self.target, self.received)

    @property
    def seconds(self) -> float:
        return (self.ended - self.started) if self.ended is not None else 0.0


def request_kind(method: str, target: str, received: int) -> str:
    """What a request to slurmrestd asked, in the words of sunk's client (sunk/slurm/rest.py).

    ``update_time`` questions are split by their answer's size: "no change", or the whole list
    (slurmctld answers every item once anything changed). ``node list`` is a list without
    ``update_time``: a verify read before a write, a periodic relist, or the relist after 24.11's
    "Unable to query partitions" answer to a poll.
    """
    path, _, query = target.partition("?")
    rest = _PREFIX.sub("", path)
    polled = "update_time=" in query
    full = received > NO_CHANGE_MAX_BYTES
    if method == "GET":
        if rest == "nodes/":
            return ("node poll: every node" if full else "node poll: no change") if polled else "node list"
        if rest == "jobs/":
            return ("job check: every job" if full else "job check: no change") if polled else "job list"
        if rest == "jobs/state/":
            return "job states"
        if rest.startswith("node/"):
            return "node read"
        if rest.startswith("job/"):
            return "job read"
        if rest in ("diag/", "partitions/", "ping/"):
            return rest.rstrip("/")
    elif method == "POST":
        if rest == "job/submit":
            return "job submit"
        if rest.startswith("job/"):
            return "job update"
        if rest.startswith("node/"):
            return "node update"
    elif method == "DELETE":
        if rest.startswith("job/"):
            return "job cancel"
        if rest.startswith("node/"):
            return "node delete"
    return f"{method} {rest}"


def by_kind(exchanges: Iterable[Exchange]) -> dict[str, dict[str, float]]:
    """Requests, answer bytes and seconds per request kind."""
    out: dict[str, dict[str, float]] = {}
    for ex in exchanges:
        row = out.setdefault(ex.kind, {"requests": 0, "bytes": 0, "seconds": 0.0})
        row["requests"] += 1
        row["bytes"] += ex.received
        row["seconds"] += ex.seconds
    return dict(sorted(out.items()))


class RequestHeads:
    """A client's byte stream cut into requests: ``feed`` returns (method, target) of each head it completes.

    Bodies are skipped by their Content-Length (sunk's client sends every body with one); a head
    this cannot follow (a chunked body, garbage) raises ValueError.
    """

    def __init__(self) -> None:
        self._head = bytearray()
        self._body_left = 0

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        heads = []
        view = memoryview(data)
        while view:
            if self._body_left:
                skipped = min(len(view), self._body_left)
                self._body_left -= skipped
                view = view[skipped:]
                continue
            start = max(0, len(self._head) - 3)  # "\r\n\r\n" may straddle two chunks
            self._head += view
            view = view[len(view):]
            end = self._head.find(b"\r\n\r\n", start)
            if end < 0:
                if len(self._head) > MAX_HEAD_BYTES:
                    raise ValueError(f"no end of a request head in {len(self._head)} bytes")
                break
            head, rest = bytes(self._head[:end]), bytes(self._head[end + 4:])
            self._head.clear()
            method, target, self._body_left = _parse_head(head)
            heads.append((method, target))
            view = memoryview(rest)
        return heads


def _parse_head(head: bytes) -> tuple[str, str, int]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError(f"not an HTTP request line: {lines[0][:80]!r}")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "transfer-encoding" and value.lower() != "identity":
            raise ValueError(f"a request body in Transfer-Encoding {value} cannot be followed")
        if name == "content-length":
            length = int(value)
    return parts[0], parts[1], length


class CountingRelay:
    """``with CountingRelay(upstream) as relay: relay.url``; ``relay.exchanges()`` is every exchange so far."""

    def __init__(self, upstream: str, name: str = "relay"):
        host, _, port = upstream.removeprefix("http://").rstrip("/").partition(":")
        self.upstream = (host, int(port or 80))
        self.name = name
        self._exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.5)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"{name}-accept", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def exchanges(self, since: int = 0) -> list[Exchange]:
        """The exchanges from the ``since``-th on, in the order their requests arrived."""
        with self._lock:
            return self._exchanges[since:]

    def count(self) -> int:
        with self._lock:
            return len(self._exchanges)

    def __enter__(self) -> CountingRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join(5)
        self._server.close()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()  # as slurmrestd down would: the client sees its connection end
                continue
            for sock in (client, upstream):
                sock.settimeout(None)
                # Each chunk on at once: Nagle's wait for an ACK would add up to 40 ms to an answer that
                # slurmrestd wrote in two pieces (the client delays its ACK of the first).
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _Connection(self, client, upstream).start()

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)


@dataclass
class _Connection:
    """One client connection and its own upstream connection; a thread copies each way, and each
    passes the end of its stream on (a half-close, so an answer still gets back); the second to end
    closes both sockets."""

    relay: CountingRelay
    client: socket.socket
    upstream: socket.socket
    current: Exchange | None = None
    heads: RequestHeads = field(default_factory=RequestHeads)
    ended: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        threading.Thread(target=self._requests, name=f"{self.relay.name}-up", daemon=True).start()
        threading.Thread(target=self._answers, name=f"{self.relay.name}-down", daemon=True).start()

    def _requests(self) -> None:
        following = True
        try:
            while data := self.client.recv(262144):
                if following:
                    try:
                        heads = self.heads.feed(data)
                    except ValueError as exc:  # passed on untouched, counted under one exchange from here
                        heads, following = [("?", f"unparsed: {exc}")], False
                    for method, target in heads:
                        # Before the bytes go up: no answer can come for a request not sent yet.
                        self.current = Exchange(method, target, time.monotonic())
                        self.relay._record(self.current)
                self.upstream.sendall(data)
        except OSError:
            pass
        self._end(self.upstream)

    def _answers(self) -> None:
        try:
            while data := self.upstream.recv(262144):
                exchange = self.current
                if exchange is not None:
                    exchange.received += len(data)
                    exchange.ended = time.monotonic()
                self.client.sendall(data)
        except OSError:
            pass
        self._end(self.client)

    def _end(self, sink: socket.socket) -> None:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        with self.lock:
            self.ended += 1
            last = self.ended == 2
        if last:
            self.client.close()
            self.upstream.close()
