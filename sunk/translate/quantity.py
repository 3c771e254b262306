"""Kubernetes resource quantities, exactly (Decimal, never float).

``"500m"`` CPU is half a core; ``"128Mi"`` is 128 × 2^20 bytes; ``"1e3"`` is 1000.
Slurm counts whole CPUs and memory in MB (2^20 bytes), so both round *up*: a Pod must
never get less than it asked for.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18, "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E))?$")
MIB = Decimal(2) ** 20


def parse_quantity(text: str | int | float) -> Decimal:
    if isinstance(text, (int, float)):
        return Decimal(str(text))
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, exponent, suffix = match.groups()
    try:
        value = Decimal(number + (exponent or ""))
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from None
    return value * _SUFFIX[suffix or ""]


def cpus(value: Decimal) -> int:
    """Whole CPUs, rounded up."""
    return math.ceil(value)


def megabytes(value: Decimal) -> int:
    """Slurm MB (MiB), rounded up."""
    return math.ceil(value / MIB)
