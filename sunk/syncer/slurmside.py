"""Kubernetes -> Slurm: drains with the ``k8s:`` prefix, verify-undrain, and the Extra field.

One reconcile per Slurm node name, level-based. The facts are gathered from memory (the
Slurm cache, the informers) and the decision is ``sunk.translate.syncplan.slurm_plan``'s;
this module only carries it out:

- Nothing to change: no Slurm call at all.
- Something to change: read the node from Slurm first (the node alone; a list shared
  between workers when many wait on a small cluster: freshread.py), decide again from the
  fresh copy, and write only if the decision still stands. The cache may be up to one poll
  interval old; a person who drained the node by hand a moment ago, or added a key to
  Extra, must not be overwritten from a stale picture. A drain, an undrain and a new
  Extra go out as one ``update_node``. When the fresh read overrules the cache, the node is
  looked at again after ``stale_retry``, by then from a cache that caught up: a single-node
  read's allocation may lag (freshread.py), and a decision it withheld must not wait for
  the node's next event.
- Slurm unreachable (the cache is stale): no decision at all, retry shortly. Missing
  information is never read as "node gone" or "node undrained".
- A Slurm node the cache does not know: nothing to do (it may be mid-restart).
- A Slurm node that never had a slurmd Pod here: not ours, never touched (``syncplan.owned``).
  Nor one whose Extra names a Pod that still exists outside this Syncer's selector:
  another Syncer's node, not a deleted Pod.
- The slurmd Pod this Syncer knew for the node (named in Extra) is gone: the node is set DOWN
  once, and the deletion marked in Extra in the same write (``sunk.translate.poddown`` has
  the rule, and when only the mark is written); the missing-Pod drain applies from then on.
- Nothing else to write, and ``--slurm-node-clean-up``: the node is deleted from Slurm once
  its NodeSlice entry is gone and it is idle (cleanup.py).
After a write the cache is nudged, so the Kubernetes side shows the result at once
rather than at the next poll.
"""

from __future__ import annotations

import logging

import attrs

from sunk.controller.runtime import Result
from sunk.model.slurm import Node
from sunk.translate.syncplan import DOWN, DRAIN, NONE, UNDRAIN, SlurmPlan, extra_identity, slurm_plan

from . import metrics
from .cleanup import NodeCleanUp
from .context import SyncerContext
from .facts import KubeFacts, gather
from .freshread import FreshNodes

log = logging.getLogger(__name__)


@attrs.define
class SlurmSideReconciler:
    ctx: SyncerContext
    stale_retry: float = 2.0
    fresh: FreshNodes = attrs.field(default=attrs.Factory(
        lambda self: FreshNodes(self.ctx.slurm, lambda: len(self.ctx.slurm_nodes.items())), takes_self=True))
    cleanup: NodeCleanUp | None = attrs.field(default=attrs.Factory(
        lambda self: NodeCleanUp(self.ctx, self.fresh) if self.ctx.config.slurm_node_clean_up else None,
        takes_self=True))

    def reconcile(self, key: str) -> Result | None:
        cache = self.ctx.slurm_nodes
        if not cache.fresh:
            metrics.STALE_SKIPS.inc()
            return Result(requeue_after=self.stale_retry)
        node = cache.get(key)
        if node is None:
            return None
        facts = gather(self.ctx, key)
        plan = slurm_plan(facts, node)
        if plan.update is None:
            # Nothing to write for the Pod's state: the one moment the clean-up may delete the node.
            if self.cleanup is not None and plan.ours:
                return self.cleanup.reconcile(facts, node)
            return None
        # Something to write: decide again from Slurm's current word on this one node.
        metrics.SLURM_VERIFY_READS.inc()
        current = self.fresh.node(key)
        if current is None:
            return None
        node = current
        plan = slurm_plan(facts, node)
        if plan.update is None:
            return Result(requeue_after=self.stale_retry)  # overruled: again once the cache caught up
        self.ctx.slurm.update_node(key, plan.update)
        self._record(facts, node, plan)
        self.ctx.nudge_slurm()
        return None

    def _record(self, facts: KubeFacts, node: Node, plan: SlurmPlan) -> None:
        if plan.action != NONE:
            metrics.SLURM_WRITES.labels(action=plan.action).inc()
        if plan.extra_changed:
            metrics.SLURM_WRITES.labels(action="extra").inc()
            log.debug("slurm node %s: Extra %s", node.name, plan.update.extra if plan.update else None)
            previous = extra_identity(node.extra)
            if previous is not None and previous[0] != facts.namespace:
                # One Syncer per Slurm node: two would rewrite each other's Extra on every poll.
                log.warning("slurm node %s: Extra named Pod %s/%s, another namespace; is a second Syncer "
                            "managing this node?", node.name, previous[0], previous[1])
        pod = facts.pod
        if plan.action == DOWN:
            log.info("slurm node %s: DOWN %r (%s; was %s %r)", node.name, plan.reason, plan.why,
                     "+".join(sorted(node.state)), node.reason)
        elif plan.action == DRAIN:
            log.info("slurm node %s: drain %r (%s; was %r)", node.name, plan.reason, plan.why, node.reason)
            if pod is not None:
                self.ctx.recorder.normal(pod, "SlurmNodeDrained", f"drained {node.name} in Slurm: {plan.reason}")
        elif plan.action == UNDRAIN:
            log.info("slurm node %s: undrain (%s; reason was %r)", node.name, plan.why, node.reason)
            if pod is not None:
                self.ctx.recorder.normal(pod, "SlurmNodeUndrained", f"undrained {node.name} in Slurm: {plan.why}")
        if plan.replaced_invalid_extra:
            log.warning("slurm node %s: Extra was not valid JSON, replaced it (was %r)", node.name, node.extra[:200])
            if pod is not None:
                self.ctx.recorder.warning(pod, "InvalidSlurmExtra",
                                          f"Extra of Slurm node {node.name} was not valid JSON; replaced it")
