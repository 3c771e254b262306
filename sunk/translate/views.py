"""Typed read-only views over Pods and Nodes in wire form (kopf's ``Body``/``Meta``, for our readers).

Why: a wire object is ``dict[str, Any]``, so every reader spelled out its path and its defaults,
and mypy saw none of it. A view is a thin frozen wrapper over the same dict: no copy, no
parsing up front, each property one reader of ``sunk.translate.objects`` (so a view and a
function never disagree), typed, and empty rather than raising on a missing or null field
(what a Pod author wrote is untrusted). A view compares by identity, like the object it
wraps may change under a store; compare ``raw`` for contents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

from attrs import frozen

from . import objects
from .objects import Wire


@frozen(eq=False)
class ObjectView:
    """What every Kubernetes object has: its metadata and its status conditions."""

    raw: Wire

    @property
    def name(self) -> str:
        return objects.name_of(self.raw)

    @property
    def namespace(self) -> str:
        """Empty for a cluster-scoped object."""
        return objects.namespace_of(self.raw)

    @property
    def key(self) -> str:
        """``namespace/name``, or ``name`` for a cluster-scoped object: the informer store's key."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def uid(self) -> str:
        return objects.uid_of(self.raw)

    @property
    def annotations(self) -> Mapping[str, str]:
        return objects.annotations_of(self.raw)

    @property
    def labels(self) -> Mapping[str, str]:
        return objects.labels_of(self.raw)

    @property
    def deleting(self) -> bool:
        """A deletion was asked; the object may linger (finalizers, the grace period)."""
        return objects.is_deleting(self.raw)

    @property
    def conditions(self) -> tuple[Wire, ...]:
        return tuple(objects.conditions_of(self.raw))

    def condition(self, ctype: str) -> Optional[Wire]:
        """The first condition of that type, or None."""
        return objects.condition(self.raw, ctype)

    def condition_true(self, ctype: str) -> bool:
        return objects.condition_true(self.raw, ctype)


@frozen(eq=False)
class PodView(ObjectView):
    """A Pod: where it is bound, who schedules it, how far it got."""

    @property
    def node_name(self) -> str:
        """The Node it is bound to; empty while it is not."""
        return objects.node_name_of(self.raw)

    @property
    def scheduler_name(self) -> str:
        return str((self.raw.get("spec") or {}).get("schedulerName") or "")

    @property
    def phase(self) -> str:
        return objects.phase_of(self.raw)

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed: it holds no node any more."""
        return objects.is_terminal(self.raw)

    @property
    def ready(self) -> bool:
        """Ready and not terminating."""
        return objects.pod_ready(self.raw)

    def owner(self, kind: str, api_group: str) -> Optional[Wire]:
        """The owner reference of that kind (any version of the group) that controls the Pod, or None."""
        return objects.controller_ref(self.raw, kind, api_group)


@frozen(eq=False)
class NodeView(ObjectView):
    """A Kubernetes Node: readiness, taints, cordon."""

    @property
    def ready(self) -> bool:
        """Its Ready condition is True (False, Unknown or none: its kubelet is gone or failing)."""
        return objects.node_ready(self.raw)

    @property
    def taints(self) -> Sequence[Wire]:
        return objects.taints_of(self.raw)

    def has_taint(self, key: str, effect: Optional[str] = None) -> bool:
        return objects.has_taint(self.raw, key, effect)

    @property
    def cordoned(self) -> bool:
        """``kubectl cordon``: spec.unschedulable."""
        return objects.is_cordoned(self.raw)

    @property
    def cordon_reason(self) -> Optional[str]:
        """The operator's reason, from SUNK's annotation; None without one."""
        return objects.cordon_reason(self.raw)

