"""Type names shared across sunk's layers.

A leaf module (stdlib only), so the pure translation layer, the Kubernetes side and the
Slurm side can all name the same things without importing each other.
"""

from __future__ import annotations

from typing import Any, NewType, TypeAlias

Obj: TypeAlias = dict[str, Any]
"""A Kubernetes API object in wire form: the apiserver's JSON as plain dicts (camelCase keys)."""

PodUID = NewType("PodUID", str)
"""A Pod's ``metadata.uid``: what ties a Pod to its placeholder Slurm job."""

SlurmNodeName = NewType("SlurmNodeName", str)
"""A Slurm node's name, as opposed to the Kubernetes Node that hosts it."""


class Outage(Exception):
    """A dependency of this process cannot serve it now (Slurm unreachable, our token refused).

    Not a bug and not an answer about the request: the controller runtime retries the key
    with backoff and logs one line, without a traceback, however long the outage lasts.
    """
