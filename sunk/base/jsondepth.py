"""How deep a JSON value this process decodes: as deep as the apiserver stores (Go's encoding/json, 10,000 levels).

Python's JSON codecs stop at the interpreter's recursion limit (1,000 by default) with a RecursionError. An informer
that cannot decode one watch event meets it again for good (a tenant's ResourceClaim nested 3,000 deep stalled
every daemon's claims store), and a process whose limit some earlier decode raised answers differently from one
whose limit no decode raised. So every decoder of outside JSON (the apiserver's answers, the hook APIs' and the
extender's bodies) raises it first, to one fixed depth: deeper than that is refused the same way everywhere.
"""

from __future__ import annotations

import sys

JSON_DEPTH = 10_000


def allow_deep_json() -> None:
    """Raise the recursion limit so that ``JSON_DEPTH`` levels decode (and encode back). Process-wide, raised once,
    never lowered; on CPython 3.11 (the image's) the C codecs honour it, and a level takes little C stack (10,000
    decode in a 2 MiB thread stack)."""
    wanted = JSON_DEPTH + 2_000  # (and the frames of whoever decodes)
    if sys.getrecursionlimit() < wanted:
        sys.setrecursionlimit(wanted)
