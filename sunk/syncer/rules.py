"""The decisions the Syncer carries out, as one small interface over the pure translate layer.

Why an interface: the rules (what a drain reason says, when a DOWN node is left alone,
when verify-undrain applies, how Extra is merged) live in ``sunk.translate`` and are tested
there exhaustively. The reconcilers only need a few questions answered; unit tests of the
reconcilers answer them with fakes, so a wiring test never re-tests a rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from sunk.slurm.models import Node

from .facts import KubeFacts

NONE, DRAIN, UNDRAIN, DOWN, MARK = "none", "drain", "undrain", "down", "mark"


@attrs.frozen
class PodStatus:
    """Conditions (each ``type``/``status``/``reason``/``message``) and labels a slurmd Pod should carry."""

    conditions: tuple[Mapping[str, Any], ...]
    labels: Mapping[str, str | None]


@attrs.frozen
class DrainDecision:
    """``action``: NONE, DRAIN (with ``reason``, a ``k8s:`` reason) or UNDRAIN; ``why`` for logs and Events."""

    action: str = NONE
    reason: str | None = None
    why: str = ""


@attrs.frozen
class ExtraDecision:
    """``text``: the new Extra, or None when it is already right."""

    text: str | None = None
    replaced_invalid: bool = False


@attrs.frozen
class DownDecision:
    """A deleted slurmd Pod (``sunk.translate.poddown``): ``action`` NONE, DOWN (with ``reason``) or MARK
    (record the deletion only); ``extra``: the Extra carrying the mark, for DOWN and MARK."""

    action: str = NONE
    reason: str | None = None
    extra: str | None = None
    why: str = ""


class Rules(Protocol):
    def pod_status(self, node: Node) -> PodStatus: ...

    def node_conditions(self, slurm_nodes: Sequence[Node]) -> list[Mapping[str, Any]]: ...

    def drain(self, facts: KubeFacts, node: Node) -> DrainDecision: ...

    def extra(self, facts: KubeFacts, node: Node) -> ExtraDecision: ...

    def down(self, facts: KubeFacts, node: Node) -> DownDecision: ...


class TranslateRules:
    """The production rules: ``sunk.translate.nodestate`` and ``sunk.translate.extra``."""

    def pod_status(self, node: Node) -> PodStatus:
        from sunk.translate import nodestate

        return PodStatus(tuple(nodestate.pod_conditions(node)), dict(nodestate.pod_labels(node)))

    def node_conditions(self, slurm_nodes: Sequence[Node]) -> list[Mapping[str, Any]]:
        from sunk.translate import nodestate

        return list(nodestate.node_conditions(slurm_nodes))

    def drain(self, facts: KubeFacts, node: Node) -> DrainDecision:
        from sunk.translate import nodestate

        action = nodestate.desired_drain(facts, node)
        return DrainDecision(action.action, action.reason, action.why)

    def extra(self, facts: KubeFacts, node: Node) -> ExtraDecision:
        from sunk.translate import extra, nodecleanup, nodestate

        wanted = {**nodestate.extra_facts(facts), **nodecleanup.extra_mark(facts.nodeset)}
        merged = extra.merge_extra(node.extra, wanted)
        return ExtraDecision(merged.text if merged.changed else None, merged.replaced_invalid)

    def down(self, facts: KubeFacts, node: Node) -> DownDecision:
        from sunk.translate import poddown

        action = poddown.desired_down(node, namespace=facts.namespace, pod_exists=facts.pod is not None)
        return DownDecision(action.action, action.reason, action.extra, action.why)


RULES: Rules = TranslateRules()
