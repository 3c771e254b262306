"""``sunk-operator end-nodesets``: at uninstall, end the release's NodeSets while the operator still runs.

Why a command of its own: ``helm uninstall`` deletes the operator and the NodeSets together, and a
NodeSet's finalizer, which drains its nodes and waits for their jobs, is lifted only by the
operator: an uninstall while a job ran waited forever. The chart runs this as a ``pre-delete``
hook, before anything of the release is deleted:

1. ``--operator-deployment``: the operator must have a Ready Pod, or nothing is deleted (the run fails and
   the release stays as it was): a NodeSet deleted with no operator to let it go would stay Terminating,
   and be drained, and its jobs cancelled, whenever an operator came back;
2. each NodeSet named (``--nodeset``) is annotated ``sunk.coreweave.com/on-delete: cancel-jobs``
   (with ``--cancel-jobs``, the default), then deleted: the operator marks its Pods, drains their
   Slurm nodes, cancels the jobs on them once drained, and deletes each Pod once its node is idle;
3. the run waits until every one of them is gone, at most ``--timeout``, and says what each still
   waits for (its ``Progressing`` condition) while it waits; an apiserver outage meanwhile is waited out.
   Once a NodeSet is deleted there is no going back: a run that fails later leaves it to the operator.

Without ``--cancel-jobs`` the jobs are waited for: an uninstall then fails at the timeout while a job
runs, and the release stays (uninstall again later: the operator goes on waiting meanwhile). A NodeSet
already gone is no failure; running it twice is harmless. An ``on-delete`` annotation already on a NodeSet
(a person's, or a run with ``--cancel-jobs`` before) is kept either way, and a run without the flag says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs
from kubernetes.client import ApiClient

from sunk.kube import client as kc
from sunk.kube.resources import DEPLOYMENTS, NODESETS
from sunk.model import names
from sunk.model.types import Obj, Outage

log = logging.getLogger("sunk.operator.uninstall")

SAY_EVERY = 15.0  # seconds between the progress lines while NodeSets are left


@attrs.frozen
class EndConfig:
    namespace: str  # the NodeSets'
    nodesets: tuple[str, ...]
    cancel_jobs: bool = True
    timeout: float = 200.0
    poll_interval: float = 1.0
    operator_deployment: str = ""  # "": not checked (by hand, with an operator known to run)
    operator_namespace: str = ""


class NoOperator(Exception):
    """No Ready operator Pod: nothing was deleted."""


@attrs.define
class EndNodeSets:
    """Delete the NodeSets and wait for the operator to let them go; ``run`` returns those left."""

    api: ApiClient
    config: EndConfig
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def run(self) -> list[str]:
        """Raises NoOperator, or an ApiError before anything is deleted."""
        self._operator_ready()
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

    def _operator_ready(self) -> None:
        name, namespace = self.config.operator_deployment, self.config.operator_namespace
        if not name:
            return
        try:
            deployment = kc.get(self.api, DEPLOYMENTS, name, namespace)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
            raise NoOperator(f"no operator Deployment {namespace}/{name}: nothing deleted (a NodeSet would stay "
                             f"Terminating)") from None
        if not (deployment.get("status") or {}).get("readyReplicas"):
            raise NoOperator(f"operator Deployment {namespace}/{name} has no Ready Pod: nothing deleted (a NodeSet "
                             f"would stay Terminating, and be drained whenever an operator came back); start it, "
                             f"or delete the NodeSets by hand")

    def _end(self, name: str) -> None:
        namespace = self.config.namespace
        try:
            if self.config.cancel_jobs:
                kc.patch(self.api, NODESETS, name, {"metadata": {"annotations": {
                    names.ANN_ON_DELETE: names.ON_DELETE_CANCEL_JOBS}}}, namespace)
            else:
                self._say_if_cancelled_anyway(kc.get(self.api, NODESETS, name, namespace))
            kc.delete(self.api, NODESETS, name, namespace)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
            log.info("end-nodesets: NodeSet %s/%s is gone already", namespace, name)
            return
        log.info("end-nodesets: deleted NodeSet %s/%s (%s)", namespace, name,
                 "its jobs are cancelled once its nodes are drained" if self.config.cancel_jobs
                 else "its jobs are waited for")

    def _say_if_cancelled_anyway(self, nodeset: Obj) -> None:
        """Without ``--cancel-jobs`` the annotation is left as it is: a person's (or an earlier run's) choice for
        this NodeSet stands over the uninstall's default, and is said, with how to take it back."""
        annotations = (nodeset.get("metadata") or {}).get("annotations") or {}
        value = annotations.get(names.ANN_ON_DELETE)
        if value is None:
            return
        name = (nodeset.get("metadata") or {}).get("name")
        log.warning("end-nodesets: NodeSet %s/%s carries %s: %.40r (set by a person or an earlier run): %s; to wait "
                    "for its jobs instead: kubectl annotate nodeset -n %s %s %s-", self.config.namespace, name,
                    names.ANN_ON_DELETE, value,
                    "its jobs are cancelled anyway" if value == names.ON_DELETE_CANCEL_JOBS
                    else "the operator refuses that value in the NodeSet's status",
                    self.config.namespace, name, names.ANN_ON_DELETE)

    def _left(self) -> dict[str, str]:
        """The NodeSets not gone yet, each with what its operator says it waits for."""
        left = {}
        for name in self.config.nodesets:
            try:
                nodeset = kc.get(self.api, NODESETS, name, self.config.namespace)
            except kc.ApiError as exc:
                if exc.not_found:
                    continue
                if not isinstance(exc, Outage):
                    raise
                left[name] = f"not read: {exc}"  # (an outage: waited out, as the NodeSet is)
                continue
            except kc.ConnectionFailed as exc:
                left[name] = f"not read: {exc}"
                continue
            left[name] = _progress(nodeset)
        return left


def _progress(nodeset: Obj) -> str:
    for cond in (nodeset.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Progressing" and cond.get("reason") == "Deleting":
            return str(cond.get("message") or "deleting")
    return "not taken up by an operator yet"
