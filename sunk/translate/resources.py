"""A Pod's effective resource requests, counted the way kube-scheduler counts them.

Why kube-scheduler's way: the placeholder job must reserve in Slurm what the kubelet will
charge the Node for the Pod once it is bound. Reserving less lets Slurm put another job into
room the Pod will take (and the kubelet then rejects the Pod with OutOfcpu/OutOfmemory);
reserving more wastes the node. kube-scheduler (``resourcehelper.PodRequests``) counts:

1. app containers: summed;
2. init containers run one at a time, before the app containers, so each one alone counts,
   plus every sidecar (an init container with ``restartPolicy: Always``) started before it;
   sidecars keep running, so they are also added to the app containers' sum;
   the Pod needs the larger of the two: max(sum(app) + sum(sidecars), max over init steps);
3. pod-level ``spec.resources`` (Kubernetes 1.34 beta, on by default), when set for a
   resource, replaces what the containers add up to for that resource;
4. ``spec.overhead`` (RuntimeClass overhead, e.g. a VM sandbox) is added on top.

A container that states a limit but no request is given the limit as request, exactly as
the apiserver's defaulting does, so a Pod read from the API and a Pod written by hand count
the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from .quantity import parse_quantity

Obj = Mapping[str, Any]
Requests = dict[str, Decimal]


def container_requests(container: Obj) -> Requests:
    """One container's (or the Pod-level) requests; a limit alone counts as the request (apiserver defaulting)."""
    resources = container.get("resources") or {}
    raw = dict(resources.get("limits") or {})
    raw.update(resources.get("requests") or {})
    return {str(key): parse_quantity(value) for key, value in raw.items()}


def _add(into: Requests, more: Requests) -> None:
    for key, value in more.items():
        into[key] = into.get(key, Decimal(0)) + value


def _max(into: Requests, other: Requests) -> None:
    for key, value in other.items():
        into[key] = max(into.get(key, Decimal(0)), value)


def pod_requests(pod: Obj) -> Requests:
    """Every resource the Pod requests, as kube-scheduler sums it; ValueError on a malformed quantity."""
    spec = pod.get("spec") or {}
    total: Requests = {}
    for container in spec.get("containers") or []:
        _add(total, container_requests(container))
    sidecars: Requests = {}
    init_peak: Requests = {}
    for container in spec.get("initContainers") or []:
        own = container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            step = dict(sidecars)
            _add(step, own)
            _max(init_peak, step)
    _max(total, init_peak)
    total.update(container_requests(spec))  # pod-level resources: same shape, same defaulting
    _add(total, {str(k): parse_quantity(v) for k, v in (spec.get("overhead") or {}).items()})
    return total
