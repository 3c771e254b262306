"""The Pod controller's cordon marker: a slurmd Pod is "cordoned" when its Kubernetes Node is.

How it is marked: a Pod condition ``SlurmNodeCordoned`` (status True while the Node is
cordoned, False after), with the Node's ``node.coreweave.cloud/cordonReason``
annotation, verbatim, as its message. Why a condition and not an annotation or label:
- it lives in the status subresource, beside Ready, where the other Syncer-written facts
  live, and needs no write access to the Pod's spec or metadata;
- ``lastTransitionTime`` records when the cordon began, which is what an operator asks;
- the Slurm side drains from the Pod's own state, as SUNK describes the Pod being
  cordoned, so one reading of "cordoned" serves the drain, ``kubectl describe`` and the
  Extra field alike.
The condition is added only once a Node is first cordoned; Pods of Nodes that never were
carry none, so the common case writes nothing.
"""

from __future__ import annotations

import attrs

from sunk.model.types import Obj

from . import objects
from .views import NodeView, PodView

COND_POD_CORDONED = "SlurmNodeCordoned"
REASON_CORDONED = "NodeCordoned"
REASON_UNCORDONED = "NodeUncordoned"


@attrs.frozen
class Cordon:
    """Whether a slurmd Pod counts as cordoned, and the operator's reason if one was given."""

    cordoned: bool
    reason: str | None = None
    k8s_node: str | None = None


def desired_condition(pod: Obj, k8s_node: Obj | None) -> dict[str, str] | None:
    """The cordon condition the Pod should carry, or None when it should carry none (never cordoned)."""
    if k8s_node is None:
        # An unbound Pod, or its Node is unknown: keep whatever we said last (no evidence either way).
        return None
    node = NodeView(k8s_node)
    if node.cordoned:
        # The message is the operator's reason verbatim (empty without one), so it reads back exactly.
        return {"type": COND_POD_CORDONED, "status": "True", "reason": REASON_CORDONED,
                "message": node.cordon_reason or ""}
    if PodView(pod).condition(COND_POD_CORDONED) is not None:
        return {"type": COND_POD_CORDONED, "status": "False", "reason": REASON_UNCORDONED, "message": ""}
    return None


def pod_cordon(pod: Obj | None) -> Cordon:
    """Read the marker back: what the Slurm side drains on."""
    cond = objects.condition(pod, COND_POD_CORDONED)
    if not cond or cond.get("status") != "True":
        return Cordon(False)
    return Cordon(True, reason=str(cond.get("message") or "") or None,
                  k8s_node=(pod or {}).get("spec", {}).get("nodeName"))
