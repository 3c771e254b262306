"""sunk's Slurm client: one interface (``SlurmClient``), two backends, and informers per kind.

Typical use::

    slurm = connect("rest", url="http://slurmrestd:6820", token_file="/var/run/secrets/slurm/jwt")
    informers = SlurmInformerFactory(slurm, interval=1.0)      # sunk.slurm.informer
    informers.jobs().add_handler(on_add=..., on_update=..., on_delete=...)
    informers.start()

Pick the backend: ``rest`` (slurmrestd, OpenAPI v0.0.42: Slurm 24.11 and later) or
``pyslurm`` (pyslurm 25.11 against Slurm 25.11; an optional extra, imported only here).
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from sunk.model.slurm import (
    Job,
    JobAllocation,
    JobRequest,
    JobState,
    Node,
    NodeUpdate,
    Partition,
    RpcStat,
    SchedulerStats,
)

from .accounting import RpcAccounting
from .cache import SlurmCache
from .client import SlurmClient, Snapshot
from .errors import NotFound, OutcomeUnknown, SlurmError, SlurmUnavailable

BACKENDS = ("rest", "pyslurm")


def connect(backend: str = "rest", *, url: Optional[str] = None, token: Optional[str] = None,
            token_file: Optional[Union[str, os.PathLike[str]]] = None, jwt_key: Optional[bytes] = None,
            jwt_key_file: Optional[Union[str, os.PathLike[str]]] = None, user: str = "root",
            accounting: Optional[RpcAccounting] = None, jwt_key_wait: bool = False, **options: Any) -> SlurmClient:
    """A client for ``backend``.

    rest: ``url`` plus exactly one of ``token``, ``token_file`` (re-read when it changes),
    ``jwt_key`` or ``jwt_key_file`` (tokens signed here for ``user``; ``jwt_key_wait``: that file may
    appear after the start, calls failing as an outage until it does). Further keyword
    options go to RestClient (timeouts, retries, with_allocations).
    pyslurm: no arguments; it reads slurm.conf from SLURM_CONF and authenticates with munge.
    """
    if backend == "rest":
        from .auth import token_source
        from .rest import RestClient

        if not url:
            raise ValueError("the rest backend needs url (slurmrestd's base URL)")
        tokens = token_source(token=token, token_file=token_file, jwt_key=jwt_key, jwt_key_file=jwt_key_file,
                              user=user, jwt_key_wait=jwt_key_wait)
        return RestClient(url, tokens, user=user, accounting=accounting, **options)
    if backend == "pyslurm":
        from .pyslurm_backend import PyslurmClient

        return PyslurmClient(accounting=accounting, **options)
    raise ValueError(f"unknown Slurm backend {backend!r}; choose one of {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "Job",
    "JobAllocation",
    "JobRequest",
    "JobState",
    "Node",
    "NodeUpdate",
    "NotFound",
    "OutcomeUnknown",
    "Partition",
    "RpcAccounting",
    "RpcStat",
    "SchedulerStats",
    "SlurmCache",
    "SlurmClient",
    "SlurmError",
    "SlurmUnavailable",
    "Snapshot",
    "connect",
]
