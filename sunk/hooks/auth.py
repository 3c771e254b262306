"""The hook API's shared bearer token, read from a file and re-read when the file changes.

Why a file: in production it is a mounted Secret, which the kubelet rotates in place
(an atomic symlink swap). Comparing the file's identity on each call costs one stat and
picks up a rotation without a restart. A missing or empty file fails closed.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
from pathlib import Path

import attrs

log = logging.getLogger(__name__)


class TokenUnavailable(Exception):
    """The token file cannot be read or is empty: nobody can be authenticated."""


@attrs.frozen
class _Loaded:
    identity: tuple[int, int, int, int]  # (device, inode, size, mtime_ns)
    token: bytes


class TokenFile:
    """Checks presented tokens against the file's current content (surrounding whitespace ignored)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._loaded: _Loaded | None = None

    def current(self) -> bytes:
        try:
            st = os.stat(self.path)  # follows the Secret volume's ..data symlink
        except OSError as exc:
            raise TokenUnavailable(f"{self.path}: {exc.strerror}") from None
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        loaded = self._loaded
        if loaded is not None and loaded.identity == identity:
            return loaded.token
        with self._lock:
            try:
                token = self.path.read_bytes().strip()
            except OSError as exc:
                raise TokenUnavailable(f"{self.path}: {exc.strerror}") from None
            if not token:
                raise TokenUnavailable(f"{self.path} is empty")
            if loaded is not None:
                log.info("hook API token file %s changed; reloaded", self.path)
            self._loaded = _Loaded(identity, token)
            return token

    def matches(self, presented: str) -> bool:
        """Constant-time comparison; raises TokenUnavailable when the file is unusable."""
        return hmac.compare_digest(self.current(), presented.encode())


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
