"""The reboot hook's one write: a condition on the Kubernetes Node.

SUNK does not reboot machines itself. It sets a condition (``PhaseState`` with reason
``production-powerreset`` by default) that the site's Node management tooling acts on;
both are flags, so a site can point it at whatever its tooling watches.
"""

from __future__ import annotations

from kubernetes.client import ApiClient

from sunk.base.times import rfc3339
from sunk.kube import patch as kp
from sunk.kube.resources import NODES
from sunk.model.types import Obj
from sunk.translate import objects


def request_reboot(api: ApiClient, node: Obj, condition: str, reason: str, message: str) -> Obj:
    """Set ``condition=True`` with ``reason`` on the Node (status subresource); returns the condition.

    An existing condition of that type is replaced, so a repeat request refreshes the
    message without adding a second entry.
    """
    want = {"type": condition, "status": "True", "reason": reason, "message": message}
    now = rfc3339()

    def mutate(current: Obj) -> Obj | None:
        existing = (current.get("status") or {}).get("conditions") or []
        new = objects.merge_conditions(existing, [want], now=now)
        return None if new is None else {"status": {"conditions": new}}

    result = kp.update_with_retry(api, node, mutate, resource=NODES, subresource="status")
    return objects.get_condition(result.obj or node, condition) or want
