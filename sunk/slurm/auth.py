"""Where slurmrestd's JWT comes from: a fixed string, a file that gets rotated, or our own signature.

A token file is typically a mounted Secret that another process refreshes, so it is re-read
whenever its mtime changes (a stat per request, no read). A signing key lets us mint short
tokens ourselves and renew them well before they expire, so no request races an expiry.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Protocol, Union

import jwt

from .errors import SlurmError

log = logging.getLogger(__name__)


class TokenSource(Protocol):
    def token(self) -> str: ...


class StaticToken:
    def __init__(self, token: str):
        if not token.strip():
            raise ValueError("empty Slurm JWT")
        self._token = token.strip()

    def token(self) -> str:
        return self._token


class TokenFile:
    """Re-reads ``path`` when its mtime (or size) changes; keeps the last good token if a read fails."""

    def __init__(self, path: Union[str, os.PathLike[str]]):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: Optional[tuple[int, int]] = None
        self._token: Optional[str] = None

    def token(self) -> str:
        try:
            st = self.path.stat()
        except OSError as exc:
            return self._fallback(exc)
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp != self._stamp or self._token is None:
                try:
                    text = self.path.read_text().strip()
                except OSError as exc:
                    return self._fallback(exc)
                if not text:  # caught mid-rewrite; the next change of mtime brings the real one
                    return self._fallback(ValueError("file is empty"))
                if self._token is not None and text != self._token:
                    log.info("Slurm JWT file %s changed; using the new token", self.path)
                self._token, self._stamp = text, stamp
            return self._token

    def _fallback(self, exc: Exception) -> str:
        if self._token is None:
            raise SlurmError(f"cannot read the Slurm JWT file {self.path}: {exc}")
        log.warning("cannot re-read the Slurm JWT file %s (%s); keeping the previous token", self.path, exc)
        return self._token


class SignedToken:
    """HS256 tokens signed with slurmctld's ``jwt_key``, as ``scontrol token`` makes them.

    A new token is minted once the current one has used ``renew_fraction`` of its life.
    """

    def __init__(self, key: bytes, user: str, *, lifespan: int = 3600, renew_fraction: float = 0.5,
                 clock: Callable[[], float] = time.time):
        if not key:
            raise ValueError("empty JWT signing key")
        self._key, self._user, self._lifespan = key, user, lifespan
        self._renew_after = lifespan * renew_fraction
        self._clock = clock
        self._lock = threading.Lock()
        self._token: Optional[str] = None
        self._issued = 0.0

    @classmethod
    def from_file(cls, path: Union[str, os.PathLike[str]], user: str, **kwargs: Any) -> SignedToken:
        try:
            key = Path(path).read_bytes()
        except OSError as exc:
            raise SlurmError(f"cannot read the Slurm JWT key {path}: {exc}") from exc
        return cls(key, user, **kwargs)

    def token(self) -> str:
        now = self._clock()
        with self._lock:
            if self._token is None or now - self._issued >= self._renew_after:
                issued = int(now)
                self._token = jwt.encode({"iat": issued, "exp": issued + self._lifespan, "sun": self._user},
                                         self._key, algorithm="HS256")
                self._issued = now
            return self._token


def token_source(*, token: Optional[str] = None, token_file: Optional[Union[str, os.PathLike[str]]] = None,
                 jwt_key: Optional[bytes] = None, jwt_key_file: Optional[Union[str, os.PathLike[str]]] = None,
                 user: str = "root", lifespan: int = 3600) -> TokenSource:
    """Exactly one of token, token_file, jwt_key, jwt_key_file."""
    given = [name for name, value in (("token", token), ("token_file", token_file), ("jwt_key", jwt_key),
                                      ("jwt_key_file", jwt_key_file)) if value]
    if len(given) != 1:
        raise ValueError(f"give exactly one of token, token_file, jwt_key, jwt_key_file (got {given or 'none'})")
    if token:
        return StaticToken(token)
    if token_file:
        return TokenFile(token_file)
    if jwt_key:
        return SignedToken(jwt_key, user, lifespan=lifespan)
    assert jwt_key_file
    return SignedToken.from_file(jwt_key_file, user, lifespan=lifespan)
