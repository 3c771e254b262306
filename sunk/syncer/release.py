"""``sunk-syncer release-nodes``: at uninstall, stop the Syncer, then take back what sunk left on the machines.

Why a command of its own: a Syncer that stops takes nothing back, and must not (its replicas
restart, roll and lose their Lease, and a lock must outlive each of them); only an uninstall
means "for good". The chart runs this as a ``pre-delete`` hook; an operator may run it by hand.

In order:

1. ``--syncer-deployment``: scale it to 0 (its scale subresource) and wait until no Pod of it
   (its ``spec.selector``) is left, at most ``--timeout``: nothing locks or drains again
   behind what follows.
   A Deployment that is not there is taken as gone (a second run, after an uninstall that
   failed later on), with a warning.
2. The slurmd Pods (``--watch-namespace``, ``--slurmd-selector``) and Slurm's node list are read
   first: a Slurm outage fails the run before anything is unlocked.
3. The slurmd Pods' lock annotations go, then the lock taint of their Nodes (``--all-nodes``: of
   every Node), in the lock controller's order, so that no Pod says "locked" of a Node that is not.
4. Slurm: on the Slurm nodes of those Pods (``--all-nodes``: every node), the drains of sunk's
   lock are lifted, each decided again from a fresh read of its node (``FreshNodes``, as the Syncer
   does) just before its UNDRAIN; sunk's other drains stay, each named in the log
   (``sunk.translate.leftovers``: why).

What cannot be done for one object is logged, and the rest go on; the outcome lists it
(exit 1). When the Syncer was scaled down and anything failed, or the run is interrupted
(Ctrl-C; SIGTERM at the Job's deadline), it is scaled back to the replicas it had: a release
that is still installed (helm uninstall fails with its hook) keeps its Syncer, and the
prologs their hook API. Running it twice is harmless: what was taken back is not found again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import attrs
from kubernetes.client import ApiClient

from sunk.base.flags import loggable
from sunk.kube import client as kc
from sunk.kube import patch as kp
from sunk.kube.resources import DEPLOYMENTS, NODES, PODS, label_selector, object_key
from sunk.model.slurm import Node, NodeUpdate
from sunk.model.types import Obj
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import SlurmError
from sunk.translate import leftovers, lock

from .context import slurm_node_name
from .freshread import FreshNodes

log = logging.getLogger("sunk.syncer.release")


@attrs.frozen
class ReleaseConfig:
    namespace: str = "slurm"  # the Syncer's Deployment's
    syncer_deployment: str | None = None  # None: the Syncer is gone already
    watch_namespace: str = "slurm"  # the slurmd Pods'
    slurmd_selector: str = "app.kubernetes.io/name=slurmd"
    all_nodes: bool = False  # every Node's lock taint, not only the slurmd Pods' Nodes'
    locks: bool = True  # node locking's marks; False (node locking off): no Node or slurmd Pod is read or written
    timeout: float = 120.0  # seconds the Syncer's Pods may take to go
    poll_interval: float = 1.0


class Stuck(Exception):
    """The Syncer could not be stopped: nothing else may be taken back while it may lock and drain again."""


@attrs.define
class Outcome:
    """What was taken back, and what could not be (``failures``, one line each)."""

    unlocked: list[str] = attrs.Factory(list)  # Nodes whose lock taint was removed
    cleared: list[str] = attrs.Factory(list)  # slurmd Pods whose lock annotations were removed
    lifted: list[str] = attrs.Factory(list)  # Slurm nodes undrained
    kept: list[str] = attrs.Factory(list)  # Slurm nodes whose drain was no longer sunk's on the fresh read
    standing: list[str] = attrs.Factory(list)  # Slurm nodes sunk drained for a cause that outlives it
    failures: list[str] = attrs.Factory(list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, what: str) -> None:
        log.error("%s", what)
        self.failures.append(what)

    def summary(self) -> str:
        done = (f"{len(self.unlocked)} Node(s) unlocked, {len(self.cleared)} slurmd Pod(s) cleared, "
                f"{len(self.lifted)} Slurm drain(s) lifted, {len(self.kept)} left (no longer sunk's), "
                f"{len(self.standing)} of sunk's left standing for their cause")
        if self.ok:
            return f"release-nodes: done: {done}"
        return f"release-nodes: failed ({len(self.failures)}): {'; '.join(self.failures)}; done: {done}"


@attrs.define
class Release:
    api: ApiClient
    slurm: SlurmClient
    config: ReleaseConfig
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    outcome: Outcome = attrs.Factory(Outcome)
    scaled_from: int = 0  # the Syncer's replicas before this run scaled it to 0

    def run(self) -> Outcome:
        try:
            if self.config.syncer_deployment:
                try:
                    self.stop_syncer(self.config.syncer_deployment)
                except (Stuck, kc.KubeError, ValueError) as exc:
                    self.outcome.fail(f"the Syncer could not be stopped, so nothing was released: {exc}")
                    self.restore()
                    return self.finish()
            pods = self.slurmd_pods()
            try:
                listed = self.slurm.list_nodes().items or ()
            except SlurmError as exc:
                self.outcome.fail(f"Slurm's nodes could not be listed, so nothing was released: {exc}")
                self.restore()
                return self.finish()
            if self.config.locks:
                self.unlock(pods)
            self.lift_drains(listed, pods)
        except BaseException:  # interrupted (Ctrl-C; SIGTERM at the Job's deadline): the Syncer goes back first
            self.restore()
            raise
        if not self.outcome.ok:
            self.restore()
        return self.finish()

    def finish(self) -> Outcome:
        (log.info if self.outcome.ok else log.error)("%s", self.outcome.summary())
        return self.outcome

    # ---- 1. the Syncer ---------------------------------------------------------------------------

    def stop_syncer(self, name: str) -> None:
        namespace = self.config.namespace
        where = f"Deployment {namespace}/{name}"
        try:
            deployment = kc.get(self.api, DEPLOYMENTS, name, namespace)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
            log.warning("%s: not found: taken as gone already (a second run after an uninstall that failed "
                        "later on; or a wrong --syncer-deployment, whose Syncer would lock again)", where)
            return
        query = label_selector((deployment.get("spec") or {}).get("selector") or {})
        replicas = int((deployment.get("spec") or {}).get("replicas") or 0)
        if replicas:
            kc.patch(self.api, DEPLOYMENTS, name, {"spec": {"replicas": 0}}, namespace, subresource="scale")
            self.scaled_from = replicas
            log.info("%s: scaled from %d replica(s) to 0, so that nothing locks or drains again", where, replicas)
        else:
            log.info("%s: at 0 replicas already", where)
        deadline = self.clock() + self.config.timeout
        while pods := kc.list_objects(self.api, PODS, namespace, label_selector=query):
            if self.clock() >= deadline:
                left = ", ".join(sorted(p["metadata"]["name"] for p in pods)[:5])
                raise Stuck(f"{where}: {len(pods)} Pod(s) still there after {self.config.timeout:g}s ({left})")
            self.sleep(self.config.poll_interval)
        log.info("%s: no Pod of it is left", where)

    def restore(self) -> None:
        """Scale the Syncer back, if this run scaled it down."""
        name, namespace, replicas = self.config.syncer_deployment, self.config.namespace, self.scaled_from
        if not name or not replicas:
            return
        try:
            kc.patch(self.api, DEPLOYMENTS, name, {"spec": {"replicas": replicas}}, namespace, subresource="scale")
        except kc.KubeError as exc:
            log.error("Deployment %s/%s: could not be scaled back to %d replica(s) (%s): "
                      "kubectl -n %s scale deployment/%s --replicas=%d", namespace, name, replicas, exc,
                      namespace, name, replicas)
            return
        self.scaled_from = 0
        log.warning("Deployment %s/%s: scaled back to %d replica(s), since not everything was released: the "
                    "release stays as it was, with its Syncer", namespace, name, replicas)

    # ---- 2. locks --------------------------------------------------------------------------------

    def slurmd_pods(self) -> list[Obj] | None:
        """The slurmd Pods (``--watch-namespace``, ``--slurmd-selector``); None when they cannot be listed."""
        namespace, selector = self.config.watch_namespace, self.config.slurmd_selector
        try:
            return kc.list_objects(self.api, PODS, namespace, label_selector=selector)
        except kc.KubeError as exc:
            self.outcome.fail(f"the slurmd Pods ({namespace}, {selector}) could not be listed: {exc}")
            return None

    def live_pods(self) -> frozenset[str] | None:
        """Every Pod of the slurmd namespace (another release's slurmd Pods may share it); None: unknown."""
        try:
            return frozenset(lock.holder_of(pod) for pod in kc.list_objects(self.api, PODS,
                                                                             self.config.watch_namespace))
        except kc.KubeError as exc:
            log.warning("the Pods of %s could not be listed (%s): only the holds of its slurmd Pods are let go",
                        self.config.watch_namespace, exc)
            return None

    def unlock(self, pods: list[Obj] | None) -> None:
        for pod in pods or ():
            self.clear(pod)
        try:
            nodes = kc.list_objects(self.api, NODES)
        except kc.KubeError as exc:
            self.outcome.fail(f"the Nodes could not be listed: {exc}")
            return
        by_name = {node["metadata"]["name"]: node for node in nodes}
        # (without the slurmd Pods, a taint no holder names cannot be told ours: only the named holds are let go)
        among = None if self.config.all_nodes else leftovers.hosts(pods or ())
        ours = leftovers.holds_of(self.config.watch_namespace, everyone=self.config.all_nodes,
                                  mine={lock.holder_of(pod) for pod in pods or ()}, live=self.live_pods())
        for name in leftovers.nodes_to_unlock(nodes, among, ours, unnamed=pods is not None or self.config.all_nodes):
            try:
                removed = kp.release_lock(self.api, by_name[name], ours)
            except kc.KubeError as exc:
                self.outcome.fail(f"Node {name}: the lock taint could not be removed: {exc}")
                continue
            if removed:
                log.info("Node %s: removed the lock taint", name)
                self.outcome.unlocked.append(name)

    def clear(self, pod: Obj) -> None:
        keys = leftovers.lock_annotations(pod)
        if not keys:
            return
        key = object_key(pod)
        try:
            cleared = kp.patch_metadata(self.api, pod, annotations=dict.fromkeys(keys), resource=PODS)
        except kc.KubeError as exc:
            self.outcome.fail(f"Pod {key}: the lock annotations could not be removed: {exc}")
            return
        if cleared:
            log.info("Pod %s: removed %s", key, ", ".join(keys))
            self.outcome.cleared.append(key)

    # ---- 3. drains -------------------------------------------------------------------------------

    def lift_drains(self, listed: Iterable[Node], pods: list[Obj] | None) -> None:
        if pods is None and not self.config.all_nodes:
            return  # which Slurm nodes are this release's cannot be told (said already)
        among = None if self.config.all_nodes else {slurm_node_name(pod) for pod in pods or ()}
        listed = list(listed)
        for node in leftovers.drains_kept(listed, among):
            log.warning("slurm node %s: left drained, for a cause that outlives sunk (an operator, or a "
                        "reinstalled Syncer once the cause is gone, lifts it): %s", node.name, loggable(node.reason))
            self.outcome.standing.append(node.name)
        fresh = FreshNodes(self.slurm, lambda: len(listed))  # (one at a time: each node read alone)
        for node in leftovers.drains_to_lift(listed, among):
            try:
                current = fresh.node(node.name)
                if not leftovers.lifts(current):
                    log.info("slurm node %s: left as it is: %s", node.name, _changed(current))
                    self.outcome.kept.append(node.name)
                    continue
                assert current is not None  # (lifts says so)
                self.slurm.update_node(node.name, NodeUpdate(state="UNDRAIN"))
            except SlurmError as exc:
                self.outcome.fail(f"slurm node {node.name}: its drain could not be lifted: {exc}")
                continue
            log.info("slurm node %s: lifted the drain %s", node.name, loggable(current.reason))
            self.outcome.lifted.append(node.name)


def _changed(node: Node | None) -> str:
    """Why a drain decided on is not lifted after all, from the fresh read."""
    if node is None:
        return "the node is gone"
    if not node.drained:
        return "it is not drained any more"
    return f"its reason is not a drain of sunk's lock any more ({loggable(node.reason)})"
