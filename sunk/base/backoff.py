"""Capped exponential backoff with jitter: one formula for every retry loop in sunk.

Why jitter: many informers (or clients) that lose the same apiserver or slurmrestd at
the same moment would otherwise retry in lockstep. Why this jitter ("equal jitter"): the
cap stays a true ceiling, and at least half the nominal delay is always waited, so a
retry is never instant.

A leaf module: it imports nothing from sunk, so any layer may use it.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# 2**64 times any sane initial delay is far beyond any cap; a larger exponent only risks
# OverflowError after a very long outage.
_MAX_EXPONENT = 64


def delay(attempt: int, initial: float, cap: float, rand: float) -> float:
    """Seconds to wait before retry ``attempt`` (0 for the first retry).

    ``min(cap, initial * 2**attempt)``, scaled by a factor in [0.5, 1.0) taken from
    ``rand`` in [0, 1) (``random.random()``; pure so that tests can pin it).
    """
    nominal = min(cap, initial * 2.0 ** min(attempt, _MAX_EXPONENT))
    return nominal * (0.5 + rand / 2)


class Backoff:
    """Successive delays for one retry loop: ``next()`` after each failure, ``reset()`` after a success.

    Not thread-safe: one loop, one instance.
    """

    def __init__(self, initial: float, cap: float, rand: Callable[[], float] = random.random):
        self.initial, self.cap = initial, cap
        self.attempt = 0
        self._rand = rand

    def next(self) -> float:
        """The delay before the next retry; each call doubles the nominal delay, up to the cap."""
        seconds = delay(self.attempt, self.initial, self.cap, self._rand())
        self.attempt += 1
        return seconds

    def reset(self) -> None:
        self.attempt = 0
