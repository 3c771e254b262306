"""One reconcile of a SlurmCluster, decided from facts: what to apply, which keys to make, what the
status says.

A spec with problems is applied nowhere: only ``SpecValid=False`` with every problem is written,
so a bad value (an unknown release, a partition naming no NodeSet, a ``slurmConfig`` line taking
over a line sunk needs) never reaches the ConfigMap a running slurmctld reads, and never starts one
that would crash-loop on it. The objects applied last stay as they were.

Each component has its condition, from its workload's observed state: ``SlurmctldReady``,
``SlurmdbdReady``, ``DatabaseReady``, ``SlurmrestdReady``, ``LoginReady``. A workload is ready once
its controller has seen its newest spec (``observedGeneration``) and as many replicas are ready as
the SlurmCluster asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attrs import field, frozen

from sunk.model.slurm import Node

from . import desired, paths
from .slurmconf import ConfigFiles, render
from .spec import SlurmClusterSpec, read_spec

Obj = Mapping[str, Any]
MAX_MESSAGE = 1024

SPEC_VALID = "SpecValid"
SLURMCTLD_READY = "SlurmctldReady"
SLURMDBD_READY = "SlurmdbdReady"
DATABASE_READY = "DatabaseReady"
SLURMRESTD_READY = "SlurmrestdReady"
LOGIN_READY = "LoginReady"
CONFIG_APPLIED = "ConfigApplied"
OBJECTS_OWNED = "ObjectsOwned"  # every object and key Secret of its names is the operator's (ownership.py)
COMPONENT_CONDITIONS = (SLURMCTLD_READY, SLURMDBD_READY, DATABASE_READY, SLURMRESTD_READY, LOGIN_READY)


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


NODE_STATE_KEYS = ("total", "idle", "allocated", "drained", "down", "other")


def nodes_by_state(nodes: Iterable[Node]) -> dict[str, int]:
    """The status's ``nodes``: how many Slurm nodes the cluster has, and in which of the states an operator looks
    at first, each node counted once: ``down`` (DOWN), else ``drained`` (DRAIN: draining or drained), else
    ``allocated`` (running jobs: ALLOCATED, MIXED, COMPLETING), else ``idle``, else ``other`` (FUTURE, UNKNOWN)."""
    counts = dict.fromkeys(NODE_STATE_KEYS, 0)
    for node in nodes:
        counts["total"] += 1
        if node.down:
            counts["down"] += 1
        elif node.drained:
            counts["drained"] += 1
        elif node.running_jobs:
            counts["allocated"] += 1
        elif node.base_state == "IDLE":
            counts["idle"] += 1
        else:
            counts["other"] += 1
    return counts


def node_state_bucket(node: Node) -> str:
    """Which of ``nodes_by_state``'s counts ``node`` is in."""
    return next(key for key, n in nodes_by_state([node]).items() if n and key != "total")


def condition(ctype: str, ok: bool, reason: str, message: str = "") -> dict[str, str]:
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE - 3] + "..."
    return {"type": ctype, "status": "True" if ok else "False", "reason": reason, "message": message}


@frozen
class Facts:
    """What one reconcile reads, from caches. Objects are shared: never mutate them."""

    cluster: Obj
    nodesets: Sequence[str] = field(converter=_tuple, factory=tuple)  # NodeSet names in its namespace
    workloads: Mapping[str, Obj] = field(factory=dict)  # its StatefulSets and Deployments, by name


@frozen
class Plan:
    spec: SlurmClusterSpec | None
    problems: tuple[str, ...] = field(converter=_tuple, factory=tuple)
    config: ConfigFiles | None = None
    objects: tuple[Obj, ...] = field(converter=_tuple, factory=tuple)
    secrets: tuple[desired.WantedSecret, ...] = field(converter=_tuple, factory=tuple)
    conditions: tuple[Obj, ...] = field(converter=_tuple, factory=tuple)


def workload_condition(ctype: str, workload: Obj | None, want: int) -> dict[str, str]:
    """Ready when the workload's controller saw its newest spec and ``want`` replicas are ready."""
    if workload is None:
        return condition(ctype, False, "NotCreated", "its workload does not exist yet")
    meta, status = workload.get("metadata") or {}, workload.get("status") or {}
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    ready = status.get("readyReplicas") or 0
    if isinstance(generation, int) and (not isinstance(observed, int) or observed < generation):
        return condition(ctype, False, "Progressing", f"{ready}/{want} ready; its newest spec is being rolled out")
    if not isinstance(ready, int) or ready < want:
        return condition(ctype, False, "NotReady", f"{ready}/{want} ready")
    return condition(ctype, True, "Ready", f"{ready}/{want} ready")


def component_conditions(spec: SlurmClusterSpec, workloads: Mapping[str, Obj]) -> list[dict[str, str]]:
    def of(component: str, ctype: str, want: int) -> dict[str, str]:
        return workload_condition(ctype, workloads.get(paths.name(spec, component)), want)

    out = [of("slurmctld", SLURMCTLD_READY, paths.controller_replicas(spec))]
    if not spec.accounting:
        out += [condition(SLURMDBD_READY, True, "Disabled", "spec.slurmdbd.enabled is false: no accounting"),
                condition(DATABASE_READY, True, "Disabled", "spec.slurmdbd.enabled is false: no database")]
    else:
        out.append(of("slurmdbd", SLURMDBD_READY, 1))
        if spec.external_database is not None:
            out.append(condition(DATABASE_READY, True, "External",
                                 f"external database {spec.external_database.host}:{spec.external_database.port} "
                                 f"(not checked by the operator; slurmdbd's readiness says whether it reaches it)"))
        else:
            out.append(of("mariadb", DATABASE_READY, 1))
    out.append(of("slurmrestd", SLURMRESTD_READY, spec.restd_replicas))
    if spec.login_replicas == 0:
        out.append(condition(LOGIN_READY, True, "ScaledToZero", "spec.login.replicas is 0"))
    else:
        out.append(of("login", LOGIN_READY, spec.login_replicas))
    return out


def applied_cluster_name(cluster: Obj) -> str | None:
    """The ClusterName this SlurmCluster's slurmctld was first given (``status.clusterName``; None: none yet)."""
    value = (cluster.get("status") or {}).get("clusterName")
    return value if isinstance(value, str) and value else None


def cluster_name_change(cluster: Obj, spec: SlurmClusterSpec) -> str | None:
    """Why the spec's ClusterName cannot be applied: slurmctld keeps its state under the ClusterName it was
    first given and refuses to start on it under another (a crash loop; a new ClusterName would be a new,
    empty state directory, and every job of the old one lost). Slurm reads the name in lower case."""
    applied = applied_cluster_name(cluster)
    if applied is None or applied.lower() == spec.cluster_name.lower():
        return None
    return (f"spec.slurm.clusterName {spec.cluster_name!r} is not the ClusterName this cluster's slurmctld keeps its "
            f"state and jobs under ({applied!r}, status.clusterName); it is fixed once applied: set it back, or "
            f"make a new SlurmCluster")


def decide(facts: Facts) -> Plan:
    read = read_spec(facts.cluster, facts.nodesets)
    if read.spec is None:
        return Plan(spec=None, problems=read.problems,
                    conditions=[condition(SPEC_VALID, False, "InvalidSpec",
                                          "nothing is applied until the spec is mended: " + "; ".join(read.problems))])
    spec = read.spec
    renamed = cluster_name_change(facts.cluster, spec)
    if renamed:
        return Plan(spec=None, problems=[renamed],
                    conditions=[condition(SPEC_VALID, False, "ClusterNameChanged",
                                          "nothing is applied until the spec is mended: " + renamed)])
    config = render(spec)
    return Plan(spec=spec, config=config, objects=desired.objects(facts.cluster, spec, config),
                secrets=desired.wanted_secrets(spec),
                conditions=[condition(SPEC_VALID, True, "Valid"), *component_conditions(spec, facts.workloads)])
