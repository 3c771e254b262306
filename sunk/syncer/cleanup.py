"""Slurm node clean-up (``--slurm-node-clean-up``): deleting the Slurm node of a removed NodeSlice entry.

The rule is ``sunk.translate.nodecleanup``; this module carries it out for the Slurm-side
reconciler, which calls it for a node it has nothing else to write to (one writer per node,
so the clean-up never races the drains). A delete is decided from the caches, then decided
again from a fresh read of the node (as every Slurm write of the Syncer is: freshread.py; a
single-node read may show a job that ended since, never hide one, so it errs towards waiting),
and sent.

- Waiting for the node to go idle: looked at again every ``wait`` seconds (a Slurm node
  event, a NodeSlice or Pod event wake it sooner).
- Slurm refuses (a node of slurm.conf is not dynamic, a node slurmctld finds busy): one log
  line, and again after a backoff that doubles up to ``max_backoff``. Never an exception: a
  refusal is an answer, not an outage, and must not turn into a crash loop or a traceback a
  second. An outage (``SlurmUnavailable``) is raised for the controller to wait out.
- Slurm no longer knows the node: done.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

import attrs

from sunk.base.backoff import delay
from sunk.controller.runtime import Result
from sunk.model.slurm import Node
from sunk.slurm.errors import NotFound, SlurmError, SlurmUnavailable
from sunk.translate import nodecleanup

from . import metrics
from .context import SyncerContext
from .facts import KubeFacts
from .freshread import FreshNodes

log = logging.getLogger(__name__)


@attrs.define
class NodeCleanUp:
    ctx: SyncerContext
    fresh: FreshNodes
    wait: float = 10.0
    backoff: float = 10.0
    max_backoff: float = 600.0
    rand: Callable[[], float] = random.random
    _refusals: dict[str, int] = attrs.field(factory=dict)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def decide(self, facts: KubeFacts, node: Node) -> nodecleanup.CleanUpAction:
        return nodecleanup.decide(node, listed=facts.nodeset is not None, pod_exists=facts.pod is not None,
                                  jobs=facts.jobs())

    def reconcile(self, facts: KubeFacts, node: Node) -> Result | None:
        decision = self.decide(facts, node)
        if decision.action == nodecleanup.DELETE:
            metrics.SLURM_VERIFY_READS.inc()
            current = self.fresh.node(node.name)
            if current is None:
                self._forget(node.name)
                return None
            decision = self.decide(facts, current)
        if decision.action == nodecleanup.NONE:
            self._forget(node.name)
            return None
        if decision.action == nodecleanup.WAIT:
            log.debug("slurm node %s: clean-up waits: %s", node.name, decision.why)
            return Result(requeue_after=self.wait)
        return self._delete(node.name, decision.why)

    def _delete(self, name: str, why: str) -> Result | None:
        try:
            self.ctx.slurm.delete_node(name)
        except NotFound:
            metrics.NODE_DELETIONS.labels(outcome="gone").inc()
            self._forget(name)
            return None
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            metrics.NODE_DELETIONS.labels(outcome="refused").inc()
            with self._lock:
                attempt = self._refusals.get(name, 0)
                self._refusals[name] = attempt + 1
            retry = delay(attempt, self.backoff, self.max_backoff, self.rand())
            log.warning("slurm node %s: Slurm refused its deletion (%s: %s); again in %.0fs (only dynamic nodes "
                        "can be deleted)", name, why, exc, retry)
            return Result(requeue_after=retry)
        metrics.NODE_DELETIONS.labels(outcome="deleted").inc()
        log.info("slurm node %s: deleted from Slurm (%s)", name, why)
        self.ctx.nudge_slurm()
        self._forget(name)
        return None

    def _forget(self, name: str) -> None:
        with self._lock:
            self._refusals.pop(name, None)
        return None
