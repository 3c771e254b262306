"""The hook API's credentials: one root secret in a file, and per-node tokens derived from it.

Why per node: the prolog and epilog run as root on every slurmd host, so a host whose
token leaks must open no other node's locks. The token for Slurm node N is
HMAC-SHA256(secret, "sunk-node:" + N); the Syncer recomputes it on each call, so nothing
is stored and a restart needs nothing. ``sunk-syncer hook-token NODE...`` prints them.

Why a file: in production the secret is a mounted Secret, which the kubelet rotates in
place (an atomic symlink swap). Comparing the file's identity on each call costs one stat
and picks up a rotation without a restart. A missing, empty or weak secret fails closed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
from pathlib import Path

import attrs

log = logging.getLogger(__name__)


MIN_SECRET_BYTES = 32
# What manifests and guides put where a secret should go; accepting one would let anybody in.
PLACEHOLDERS = frozenset({b"replace-me", b"replaceme", b"changeme", b"change-me", b"secret", b"password", b"token",
                          b"todo", b"xxx", b"example", b"default", b"test"})


class TokenUnavailable(Exception):
    """The token file cannot be read, is empty or is weak: nobody can be authenticated."""


def weakness(secret: bytes) -> str | None:
    """Why ``secret`` must not be used as a hook secret, or None when it may."""
    if secret.strip().lower() in PLACEHOLDERS or b"replace" in secret.lower():
        return "is a placeholder, not a secret (make one with: openssl rand -hex 32)"
    if len(secret) < MIN_SECRET_BYTES:
        return f"is {len(secret)} bytes; a hook secret needs at least {MIN_SECRET_BYTES} (openssl rand -hex 32)"
    if len(set(secret)) < 8:
        return "repeats too few distinct characters to be a secret (openssl rand -hex 32)"
    return None


def read_secret(path: str | os.PathLike[str]) -> bytes:
    """The secret in ``path``, stripped; TokenUnavailable naming the file and why when it is unusable."""
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise TokenUnavailable(f"{path}: {exc.strerror}") from None
    if not secret:
        raise TokenUnavailable(f"{path} is empty")
    why = weakness(secret)
    if why:
        raise TokenUnavailable(f"{path} {why}")
    return secret


def node_token(secret: bytes, node: str) -> str:
    """The hook token of Slurm node ``node``: it opens that node's hooks and no other's."""
    return hmac.new(secret, f"sunk-node:{node}".encode(), hashlib.sha256).hexdigest()


@attrs.frozen
class _Loaded:
    identity: tuple[int, int, int, int]  # (device, inode, size, mtime_ns)
    token: bytes


class TokenFile:
    """The root secret in a file (surrounding whitespace ignored), re-read when the file changes."""

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
            token = read_secret(self.path)
            if loaded is not None:
                log.info("hook API token file %s changed; reloaded", self.path)
            self._loaded = _Loaded(identity, token)
            return token

    def matches(self, node: str, presented: str) -> bool:
        """Is ``presented`` node ``node``'s token? Constant time; raises TokenUnavailable when the
        file is unusable. Any header text compares (as bytes), none raises."""
        expected = node_token(self.current(), node).encode()
        return hmac.compare_digest(expected, presented.encode("utf-8", "surrogateescape"))


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
