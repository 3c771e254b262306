"""Where slurmrestd's JWT comes from: a fixed string, a file that gets rotated, or our own signature.

A token file is typically a mounted Secret that another process refreshes, so it is re-read
whenever it changes (a stat per request, no read; a Secret volume swaps in a new file, a new
inode). A signing key lets us mint short tokens ourselves and renew them well before they
expire, so no request races an expiry; a rotated key file is read again, and signs at once.

Every source says where its tokens come from (``describe``, for logs: never the token), and
can be told that Slurm refused its token (``invalidate``: look at the origin again now, in case
it changed in a way the stat did not show). ``WatchedToken`` wraps any source: it reads the
expiry of each token (a JWT's ``exp``, read without verifying: the signature is Slurm's to
check) for the metric, and logs a warning well before it, and an error once it has passed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Optional, Protocol, Union

import jwt
from attrs import frozen

from .errors import AuthenticationFailed, SlurmError

log = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike[str]]


class TokenSource(Protocol):
    def token(self) -> str: ...

    def describe(self) -> str:
        """Where the tokens come from, for log lines and the metric's label; never the token itself."""
        ...

    def invalidate(self) -> None:
        """Slurm refused the current token: look at its origin again on the next ``token()``."""
        ...


class StaticToken:
    def __init__(self, token: str):
        if not token.strip():
            raise ValueError("empty Slurm JWT")
        self._token = token.strip()

    def token(self) -> str:
        return self._token

    def describe(self) -> str:
        return "the fixed token given at start"

    def invalidate(self) -> None:
        pass  # nothing to look at again: a fixed token cannot be rotated under a running daemon


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_mtime_ns, st.st_size


class TokenFile:
    """Re-reads ``path`` when it changes (inode, mtime or size); keeps the last good token if a read fails."""

    def __init__(self, path: PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: Optional[tuple[int, int, int]] = None
        self._token: Optional[str] = None

    def token(self) -> str:
        try:
            st = self.path.stat()
        except OSError as exc:
            return self._fallback(exc)
        stamp = _stamp(st)
        with self._lock:
            if stamp != self._stamp or self._token is None:
                try:
                    text = self.path.read_text().strip()
                except OSError as exc:
                    return self._fallback(exc)
                if not text:  # caught mid-rewrite; the next change brings the real one
                    return self._fallback(ValueError("file is empty"))
                if self._token is not None and text != self._token:
                    log.info("Slurm JWT file %s changed; using the new token", self.path)
                self._token, self._stamp = text, stamp
            return self._token

    def describe(self) -> str:
        return f"token file {self.path}"

    def invalidate(self) -> None:
        with self._lock:
            self._stamp = None

    def _fallback(self, exc: Exception) -> str:
        if self._token is None:
            raise SlurmError(f"cannot read the Slurm JWT file {self.path}: {exc}")
        log.warning("cannot re-read the Slurm JWT file %s (%s); keeping the previous token", self.path, exc)
        return self._token


class KeyFile:
    """slurmctld's ``jwt_key`` from a file, read again when the file changes; the last good key is kept.

    ``wait``: the file may appear after the start (sunk-operator's own SlurmCluster key, a Secret it makes
    itself and the kubelet then projects into its Pod): until it does, signing fails as an outage
    (``AuthenticationFailed``: retried, never a verdict), not the start."""

    def __init__(self, path: PathLike, *, wait: bool = False):
        self.path = Path(path)
        self.wait = wait
        self._lock = threading.Lock()
        self._stamp: Optional[tuple[int, int, int]] = None
        self._key = b""
        if not (wait and not self.path.exists()):
            self.key()  # a key that cannot be read at start is an error at start

    def key(self) -> bytes:
        try:
            stamp = _stamp(self.path.stat())
            with self._lock:
                if stamp != self._stamp:
                    key = self.path.read_bytes()
                    if key:  # (empty: caught mid-rewrite)
                        if self._key and key != self._key:
                            log.info("Slurm JWT key file %s changed; signing with the new key", self.path)
                        self._key, self._stamp = key, stamp
        except OSError as exc:
            if not self._key and self.wait:
                raise AuthenticationFailed(f"the Slurm JWT key {self.path} is not there yet ({exc}): waiting for "
                                           "its Secret to be made and mounted", token_source=str(self.path)) from exc
            if not self._key:
                raise SlurmError(f"cannot read the Slurm JWT key {self.path}: {exc}") from exc
            log.warning("cannot re-read the Slurm JWT key %s (%s); keeping the previous key", self.path, exc)
        if not self._key and self.wait:
            raise AuthenticationFailed(f"the Slurm JWT key {self.path} is empty: waiting for its Secret's key",
                                       token_source=str(self.path))
        if not self._key:
            raise SlurmError(f"the Slurm JWT key {self.path} is empty")
        return self._key

    def invalidate(self) -> None:
        with self._lock:
            self._stamp = None


class SignedToken:
    """HS256 tokens signed with slurmctld's ``jwt_key``, as ``scontrol token`` makes them.

    A new token is minted once the current one has used ``renew_fraction`` of its life, or at
    once when the key changed (``key`` a KeyFile that was rotated).
    """

    def __init__(self, key: Union[bytes, KeyFile], user: str, *, lifespan: int = 3600,
                 renew_fraction: float = 0.5, clock: Callable[[], float] = time.time):
        if not key:
            raise ValueError("empty JWT signing key")
        self._key_file = key if isinstance(key, KeyFile) else None
        self._fixed_key = key if isinstance(key, bytes) else b""
        self._user, self._lifespan = user, lifespan
        self._renew_after = lifespan * renew_fraction
        self._clock = clock
        self._lock = threading.Lock()
        self._token: Optional[str] = None
        self._signed_with = b""
        self._issued = 0.0

    @classmethod
    def from_file(cls, path: PathLike, user: str, *, wait: bool = False, **kwargs: Any) -> SignedToken:
        """``wait``: the key file may appear after the start (``KeyFile``)."""
        return cls(KeyFile(path, wait=wait), user, **kwargs)

    def token(self) -> str:
        key = self._key_file.key() if self._key_file is not None else self._fixed_key
        now = self._clock()
        with self._lock:
            if self._token is None or key != self._signed_with or now - self._issued >= self._renew_after:
                issued = int(now)
                self._token = jwt.encode({"iat": issued, "exp": issued + self._lifespan, "sun": self._user},
                                         key, algorithm="HS256")
                self._signed_with, self._issued = key, now
            return self._token

    def describe(self) -> str:
        origin = f"key file {self._key_file.path}" if self._key_file is not None else "a signing key"
        return f"tokens signed for {self._user} with {origin}"

    def invalidate(self) -> None:
        if self._key_file is not None:
            self._key_file.invalidate()
        with self._lock:
            self._token = None


def token_times(token: str) -> Optional[tuple[Optional[float], float]]:
    """``(iat, exp)`` of a JWT, read without verifying it; None when it is not a JWT or has no ``exp``."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False})
    except jwt.PyJWTError:
        return None
    exp, iat = claims.get("exp"), claims.get("iat")
    if not isinstance(exp, (int, float)) or isinstance(exp, bool):
        return None
    return (float(iat) if isinstance(iat, (int, float)) and not isinstance(iat, bool) else None), float(exp)


@frozen
class AuthStatus:
    """How this client's Slurm credentials fare: for the metrics every daemon serves."""

    source: str  # TokenSource.describe(), or "munge"
    expires_at: Optional[float]  # the current token's exp (Unix time), when it has a readable one
    failures: int  # requests Slurm refused for their credentials, since start
    failing: bool  # the last request was refused so


class WatchedToken:
    """Any TokenSource, plus the current token's expiry, and a log line well before it.

    "Well before": once less than ``warn_fraction`` of the token's life (``exp - iat``) is
    left, or ``warn_seconds`` when it has no ``iat``. A token renewed at half-life (SignedToken,
    or a file another process rotates in time) never warns.
    """

    def __init__(self, source: TokenSource, *, clock: Callable[[], float] = time.time,
                 warn_fraction: float = 0.2, warn_seconds: float = 3600.0):
        self.source = source
        self._clock = clock
        self._warn_fraction, self._warn_seconds = warn_fraction, warn_seconds
        self._lock = threading.Lock()
        self._last: Optional[str] = None
        self._times: Optional[tuple[Optional[float], float]] = None
        self._said = ""  # "", "soon" or "expired": what the log has said of the current token

    def token(self) -> str:
        token = self.source.token()
        with self._lock:
            if token != self._last:
                self._last, self._times, self._said = token, token_times(token), ""
            self._check()
        return token

    def describe(self) -> str:
        return self.source.describe()

    def invalidate(self) -> None:
        self.source.invalidate()

    def expires_at(self) -> Optional[float]:
        with self._lock:
            return self._times[1] if self._times else None

    def _check(self) -> None:
        if self._times is None or self._said == "expired":
            return
        iat, exp = self._times
        left = exp - self._clock()
        warn_before = (exp - iat) * self._warn_fraction if iat is not None and exp > iat else self._warn_seconds
        if left <= 0:
            log.error("the Slurm JWT from %s expired at %s: Slurm refuses it; rotate it (or sign tokens with "
                      "--slurm-jwt-key-file)", self.describe(), _when(exp))
            self._said = "expired"
        elif left <= warn_before and not self._said:
            log.warning("the Slurm JWT from %s expires in %.0f s (at %s): rotate it before then", self.describe(),
                        left, _when(exp))
            self._said = "soon"


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def token_source(*, token: Optional[str] = None, token_file: Optional[PathLike] = None,
                 jwt_key: Optional[bytes] = None, jwt_key_file: Optional[PathLike] = None,
                 user: str = "root", lifespan: int = 3600, jwt_key_wait: bool = False) -> TokenSource:
    """Exactly one of token, token_file, jwt_key, jwt_key_file; ``jwt_key_wait``: that file may appear later."""
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
    return SignedToken.from_file(jwt_key_file, user, lifespan=lifespan, wait=jwt_key_wait)
