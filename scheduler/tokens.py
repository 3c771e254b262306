"""Hook tokens scoped to one Pod: HMAC(secret, pod UID).

The placeholder script calls the hook API as the job's user, so a cluster-wide token
in the job's environment would let any job delete any Pod. A per-Pod token needs no
stored state either: the scheduler recomputes it from the job's AdminComment on every call,
which keeps restarts clean.
"""

from __future__ import annotations

import hashlib
import hmac


def hook_token(secret: bytes, pod_uid: str) -> str:
    return hmac.new(secret, f"sunk-hook:{pod_uid}".encode(), hashlib.sha256).hexdigest()


def token_matches(secret: bytes, pod_uid: str, presented: str) -> bool:
    """Constant time; any header text (a non-ASCII one too) is compared as bytes, never raises."""
    expected = hook_token(secret, pod_uid).encode()
    return hmac.compare_digest(expected, presented.encode("utf-8", "surrogateescape"))
