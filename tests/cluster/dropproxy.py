"""A proxy in front of slurmrestd that loses answers: it forwards a request, then closes the
connection without replying, as a slurmrestd that crashed mid-answer or a network that dropped
the reply would. Slurm has acted on the request; the client cannot know it."""

from __future__ import annotations

import http.client
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class DropProxy:
    """``with DropProxy(upstream, method="POST", path=r".*/job/submit", times=1) as proxy: proxy.url``.

    The first ``times`` requests matching ``method`` and ``path`` reach slurmrestd and get its
    answer, which the proxy then throws away, closing the client's connection. ``dropped``
    counts them; every other request is passed through as it is. With ``forward=False`` they are
    lost on the way instead: never forwarded, the connection closed (a call that never arrived).
    """

    def __init__(self, upstream: str, *, method: str, path: str, times: int = 1, forward: bool = True):
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.method, self.path = method, re.compile(path)
        self.left = times
        self.forward = forward
        self.dropped = 0
        self.forwarded = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                if not proxy.forward and proxy._claim(self.command, self.path):
                    self._hang_up()  # the call never arrives; the caller sees its connection closed
                    return
                upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    data = answer.read()
                finally:
                    upstream.close()
                with proxy._lock:
                    proxy.forwarded += 1
                if proxy.forward and proxy._claim(self.command, self.path):
                    self._hang_up()  # Slurm has acted on it; the client never hears
                    return
                self.send_response(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _hang_up(self) -> None:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

            do_GET = do_POST = do_DELETE = _relay

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="drop-proxy", daemon=True)

    def _claim(self, method: str, path: str) -> bool:
        """Whether this request is one of the ``times`` to lose (counted in ``dropped``)."""
        with self._lock:
            if self.left > 0 and method == self.method and self.path.fullmatch(path):
                self.left -= 1
                self.dropped += 1
                return True
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> DropProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
