"""Which jobs occupy each Slurm node, kept by a handler of the Slurm jobs informer.

Why an index: a reconcile of one node must not scan every job in the cluster, and a
change to one job must wake exactly the nodes it runs (or ran) on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import attrs

from sunk.model.slurm import Job, Node


@attrs.frozen
class NodeJob:
    job_id: int
    placeholder: bool  # a SUNK Pod Scheduler placeholder job: strict locking


class JobsByNode:
    """node name -> the jobs holding it; ``on_change(node)`` is called for every node affected."""

    def __init__(self, is_placeholder: Callable[[Job], bool], on_change: Callable[[str], None]):
        self._is_placeholder = is_placeholder
        self._on_change = on_change
        self._lock = threading.Lock()
        self._by_node: dict[str, dict[int, NodeJob]] = {}
        self._nodes_of: dict[int, tuple[str, ...]] = {}

    def jobs_on(self, node: str) -> dict[int, NodeJob]:
        with self._lock:
            return dict(self._by_node.get(node, {}))

    def node_changed(self, node: Node) -> None:
        """A Slurm node added, changed or gone (the nodes informer's handler): its key is looked at again."""
        self._on_change(node.name)

    # The jobs informer's handler (``ChangeHandler[Job]``).
    def on_add(self, job: Job) -> None:
        self._put(job.id, job)

    def on_update(self, old: Job, new: Job) -> None:
        self._put(new.id, new)

    def on_delete(self, job: Job) -> None:
        self._put(job.id, None)

    def _put(self, job_id: int, job: Job | None) -> None:
        nodes = job.node_list if job is not None and job.holds_nodes else ()
        entry = NodeJob(job_id, self._is_placeholder(job)) if job is not None else None
        with self._lock:
            before = self._nodes_of.pop(job_id, ())
            for node in before:
                jobs = self._by_node.get(node)
                if jobs is not None:
                    jobs.pop(job_id, None)
                    if not jobs:
                        del self._by_node[node]
            if nodes and entry is not None:
                self._nodes_of[job_id] = nodes
                for node in nodes:
                    self._by_node.setdefault(node, {})[job_id] = entry
        for node in sorted(set(before) | set(nodes)):
            self._on_change(node)
