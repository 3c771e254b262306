"""What the reconciler needs around a gang's pure decision: the workloads gangs are sized by, which
Pods a workload change concerns.

The sizes come from informers, never from a call per reconcile: ``batch/v1`` Jobs (a Job's
parallelism, a JobSet's child Jobs) always; coscheduling PodGroups (``scheduling.x-k8s.io/v1alpha1``,
scheduler-plugins' CRD) only with ``--gang-pod-groups``, and that informer does not hold the
workers back: a cluster without the CRD would otherwise never start scheduling. Until it has synced,
a PodGroup's members wait, saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from sunk.model.types import Obj
from sunk.translate import gang as g
from sunk.translate.objects import meta as _meta


def _key(obj: Obj) -> str:
    return f"{_meta(obj).get('namespace', '')}/{_meta(obj).get('name', '')}"


def workload_keys(pod: Obj) -> list[str]:
    """The workloads a Pod's gang may be sized by, as ``<Kind>:<namespace>/<name or UID>``: what a change
    to a Job or PodGroup looks up to wake the gangs it concerns."""
    meta, labels = _meta(pod), _meta(pod).get("labels") or {}
    namespace = meta.get("namespace", "")
    keys = []
    if uid := next((labels[k] for k in g.JOB_UID_LABELS if labels.get(k)), ""):
        keys.append(f"Job:{namespace}/{uid}")
    if jobset := labels.get(g.JOBSET_NAME):
        keys.append(f"JobSet:{namespace}/{jobset}")
    if pod_group := labels.get(g.POD_GROUP):
        keys.append(f"PodGroup:{namespace}/{pod_group}")
    return keys


def keys_of_job(job: Obj) -> list[str]:
    """The workload keys a Job's change concerns: its own Pods, and its JobSet's."""
    meta, labels = _meta(job), _meta(job).get("labels") or {}
    keys = [f"Job:{meta.get('namespace', '')}/{meta.get('uid', '')}"]
    if jobset := labels.get(g.JOBSET_NAME):
        keys.append(f"JobSet:{meta.get('namespace', '')}/{jobset}")
    return keys


def key_of_pod_group(pod_group: Obj) -> str:
    return f"PodGroup:{_key(pod_group)}"


class Workloads:
    """Jobs and (optionally) PodGroups, as informers keep them: what gangs are sized by."""

    def __init__(self, jobs: Any = None, pod_groups: Any = None):
        self.jobs = jobs
        self.pod_groups = pod_groups
        if jobs is not None:
            jobs.add_indexer("uid", lambda job: [_meta(job).get("uid", "")])
            jobs.add_indexer("jobset", lambda job: [f"{_meta(job).get('namespace', '')}/{name}"]
                             if (name := (_meta(job).get("labels") or {}).get(g.JOBSET_NAME)) else [])
        if pod_groups is not None:
            pod_groups.add_indexer("name", lambda obj: [_key(obj)])

    def expected(self, gang: g.Gang, pods: Sequence[Obj]) -> g.Expected:
        """How many members ``gang`` expects (``pods``: its live members), from the cached workloads."""
        if gang.kind == g.KIND_POD_GROUP:
            if self.pod_groups is None:
                return g.Expected(None, f"PodGroups are not watched: start the scheduler with --gang-pod-groups to "
                                        f"gang PodGroup {gang.namespace}/{gang.name}")
            if not self.pod_groups.has_synced():
                return g.Expected(None, "waiting for the PodGroup cache to sync")
            found = self.pod_groups.by_index("name", f"{gang.namespace}/{gang.name}")
            return g.expected(gang, pods, pod_group=found[0] if found else None)
        if gang.kind == g.KIND_JOB:
            job = self._one("uid", gang.job_uid)
            return g.expected(gang, pods, job=job)
        if gang.kind == g.KIND_JOBSET:
            jobs = self.jobs.by_index("jobset", f"{gang.namespace}/{gang.name}") if self.jobs is not None else []
            return g.expected(gang, pods, child_jobs=jobs)
        return g.expected(gang, pods)

    def _one(self, index: str, value: str) -> Optional[Obj]:
        if self.jobs is None:
            return None
        found = self.jobs.by_index(index, value)
        return found[0] if found else None
