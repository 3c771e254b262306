"""Type names shared across sunk's layers.

A leaf module (stdlib only), so the pure translation layer, the Kubernetes side and the
Slurm side can all name the same things without importing each other.
"""

from __future__ import annotations

from typing import Any, ClassVar, NewType, TypeAlias

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
    ``dependency`` names what is down ("slurm", "kubernetes"), so that the end of one
    dependency's outage wakes only the keys that waited for it.
    """

    dependency: ClassVar[str] = ""
    retry_after: float | None = None  # seconds the dependency asked us to wait (HTTP Retry-After)


class TerminalError(Exception):
    """Asking again cannot succeed: a refusal that only a person can lift (RBAC, an invalid object).

    controller-runtime's reconcile.TerminalError: the runtime logs it once with ``fix``, counts
    it, and does not requeue the key; the next change to its object enqueues it again.
    """

    fix: str = ""
