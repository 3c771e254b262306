"""Kubernetes resource quantities, exactly (Decimal, never float).

Why exact: ``"0.1"`` CPU summed ten times must be one CPU, not 0.9999999; and a Pod must never
get less from Slurm than it asked from Kubernetes. ``"500m"`` CPU is half a core, ``"128Mi"``
is 128 × 2^20 bytes, ``"1e3"`` is 1000, ``"1E"`` is 10^18 (the E suffix), ``"1E3"`` is 1000
(an exponent). Slurm counts whole CPUs and memory in MB, which Slurm means as MiB (2^20 bytes),
so both conversions round *up*.

The grammar is the apiserver's (``k8s.io/apimachinery/pkg/api/resource``): a sign, digits with
an optional decimal point, then one suffix: a binary SI suffix (Ki … Ei), a decimal SI suffix
(n, u, m, k, M … E) or a decimal exponent (``e``/``E`` and an integer). Requests are never negative,
and the apiserver refuses magnitudes beyond 2^63 - 1, so both are refused here as well.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

_SUFFIX = {
    "": Decimal(1), "n": Decimal(10) ** -9, "u": Decimal(10) ** -6, "m": Decimal("0.001"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18, "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(
    r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?", re.ASCII)
MIB = Decimal(2) ** 20
MAX_QUANTITY = Decimal(2**63 - 1)  # the apiserver's own ceiling (int64)
_MAX_EXPONENT = 40  # beyond this nothing fits under MAX_QUANTITY or above a nano-unit anyway


def parse_quantity(text: str | int | Decimal) -> Decimal:
    """The exact value of a quantity; ValueError (naming the text) for anything the apiserver would refuse."""
    if isinstance(text, bool) or not isinstance(text, (str, int, Decimal)):
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    if isinstance(text, (int, Decimal)):
        value = Decimal(text)
        if not value.is_finite():
            raise ValueError(f"not a Kubernetes quantity: {text!r}")
        return _checked(value, text)
    match = _QUANTITY.fullmatch(text.strip())
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    sign, number, exponent, suffix = match.groups()
    if exponent is not None and abs(int(exponent)) > _MAX_EXPONENT:
        raise ValueError(f"Kubernetes quantity out of range: {text!r}")
    value = Decimal(number)
    if exponent is not None:
        value = value.scaleb(int(exponent))
    value *= _SUFFIX[suffix or ""]
    return _checked(-value if sign == "-" else value, text)


def _checked(value: Decimal, text: object) -> Decimal:
    if value < 0:
        raise ValueError(f"a resource quantity cannot be negative: {text!r}")
    if value > MAX_QUANTITY:
        raise ValueError(f"Kubernetes quantity out of range: {text!r}")
    return value


def cpus(value: Decimal) -> int:
    """Whole CPUs, rounded up: 100m is one CPU, 1500m two."""
    return math.ceil(value)


def megabytes(value: Decimal) -> int:
    """Slurm MB (MiB), rounded up from bytes: 1G (10^9 bytes) is 954 MB."""
    return math.ceil(value / MIB)


def is_whole(value: Decimal) -> bool:
    """Whether a quantity is a whole number (extended resources such as GPUs must be)."""
    return value == value.to_integral_value()
