"""``sunk-operator end-nodesets``: at uninstall, end the release's NodeSets while the operator still runs.

Why a command of its own: ``helm uninstall`` deletes the operator and the NodeSets together, and a
NodeSet's finalizer, which drains its nodes and waits for their jobs, is lifted only by the
operator: an uninstall while a job ran waited forever. The chart runs this as a ``pre-delete``
hook, before anything of the release is deleted:

1. each NodeSet named (``--nodeset``) is annotated ``sunk.coreweave.com/on-delete: cancel-jobs``
   (with ``--cancel-jobs``, the default), then deleted: the operator marks its Pods, drains their
   Slurm nodes, cancels the jobs on them once drained, and deletes each Pod once its node is idle;
2. the run waits until every one of them is gone, at most ``--timeout``, and says what each still
   waits for (its ``Progressing`` condition) while it waits.

Without ``--cancel-jobs`` the jobs are waited for: an uninstall then fails at the timeout while a job
runs, and the release stays (run it again later). A NodeSet already gone is no failure; running it
twice is harmless.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs
from kubernetes.client import ApiClient

from sunk.kube import client as kc
from sunk.kube.resources import NODESETS
from sunk.model import names
from sunk.model.types import Obj

log = logging.getLogger("sunk.operator.uninstall")

SAY_EVERY = 15.0  # seconds between the progress lines while NodeSets are left


@attrs.frozen
class EndConfig:
    namespace: str  # the NodeSets'
    nodesets: tuple[str, ...]
    cancel_jobs: bool = True
    timeout: float = 240.0
    poll_interval: float = 1.0


@attrs.define
class EndNodeSets:
    """Delete the NodeSets and wait for the operator to let them go; ``run`` returns those left."""

    api: ApiClient
    config: EndConfig
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def run(self) -> list[str]:
        for name in self.config.nodesets:
            self._end(name)
        deadline = self.clock() + self.config.timeout
        said = self.clock()
        while left := self._left():
            now = self.clock()
            if now >= deadline:
                log.error("end-nodesets: failed: NodeSets left after %.0fs: %s", self.config.timeout,
                          "; ".join(f"{name}: {why}" for name, why in left.items()))
                return sorted(left)
            if now - said >= SAY_EVERY:
                said = now
                log.info("end-nodesets: waiting for %s", "; ".join(f"{name}: {why}" for name, why in left.items()))
            self.sleep(self.config.poll_interval)
        log.info("end-nodesets: done: %s gone", ", ".join(self.config.nodesets) or "no NodeSet")
        return []

    def _end(self, name: str) -> None:
        namespace = self.config.namespace
        try:
            if self.config.cancel_jobs:
                kc.patch(self.api, NODESETS, name, {"metadata": {"annotations": {
                    names.ANN_ON_DELETE: names.ON_DELETE_CANCEL_JOBS}}}, namespace)
            kc.delete(self.api, NODESETS, name, namespace)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
            log.info("end-nodesets: NodeSet %s/%s is gone already", namespace, name)
            return
        log.info("end-nodesets: deleted NodeSet %s/%s (%s)", namespace, name,
                 "its jobs are cancelled once its nodes are drained" if self.config.cancel_jobs
                 else "its jobs are waited for")

    def _left(self) -> dict[str, str]:
        """The NodeSets not gone yet, each with what its operator says it waits for."""
        left = {}
        for name in self.config.nodesets:
            try:
                nodeset = kc.get(self.api, NODESETS, name, self.config.namespace)
            except kc.ApiError as exc:
                if exc.not_found:
                    continue
                raise
            left[name] = _progress(nodeset)
        return left


def _progress(nodeset: Obj) -> str:
    for cond in (nodeset.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Progressing" and cond.get("reason") == "Deleting":
            return str(cond.get("message") or "deleting")
    return "not taken up by an operator yet"
