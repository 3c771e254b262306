"""The Slurm node name a NodeSet gives a Kubernetes Node, and names that collide.

Two schemes (``spec.naming.scheme``):
- ``IPv4Octets`` (SUNK's): ``<prefix>-<third octet>-<fourth octet>`` of the Node's first
  IPv4 ``InternalIP``, so 10.0.3.17 with prefix ``g`` is ``g-3-17``. A Node without an
  IPv4 InternalIP gets no name (and no Pod) until it has one.
- ``NodeName``: the Node's own name, when it is a DNS label (a dotted FQDN is not a
  hostname slurmd can register under, and is refused rather than rewritten).

The name is the Slurm node's, the slurmd Pod's name and its hostname, so it must be unique.
Two Nodes that map to one name (10.0.3.17 and 10.1.3.17) collide: the Node whose Pod already
carries the name keeps it, and no other Node gets it (nor any Node, when none has it yet),
so a collision never moves a Slurm node or deletes anything; it is reported instead.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from attrs import frozen

from .spec import DNS_LABEL, MAX_LABEL, SCHEME_IPV4, NodeSetSpec

Obj = Mapping[str, Any]


@frozen
class NodeName:
    """``name``, or None with ``problem`` saying why this Node has none."""

    name: str | None
    problem: str = ""


def internal_ipv4(node: Obj) -> str | None:
    """The Node's first IPv4 InternalIP (dual-stack Nodes list an IPv6 one too)."""
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") != "InternalIP":
            continue
        try:
            ip = ipaddress.ip_address(str(address.get("address", "")))
        except ValueError:
            continue
        if ip.version == 4:
            return str(ip)
    return None


def internal_address(node: Obj) -> str:
    """The Node's address for the NodeSlice: its first IPv4 InternalIP, else its first InternalIP, else ''."""
    ipv4 = internal_ipv4(node)
    if ipv4 is not None:
        return ipv4
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP" and address.get("address"):
            return str(address["address"])
    return ""


def slurm_node_name(spec: NodeSetSpec, node: Obj) -> NodeName:
    node_name = str((node.get("metadata") or {}).get("name", ""))
    if spec.scheme == SCHEME_IPV4:
        ip = internal_ipv4(node)
        if ip is None:
            return NodeName(None, f"Node {node_name} has no IPv4 InternalIP")
        _, _, third, fourth = ip.split(".")
        return NodeName(f"{spec.prefix}-{third}-{fourth}")
    if len(node_name) > MAX_LABEL or not DNS_LABEL.fullmatch(node_name):
        return NodeName(None, f"Node name {node_name!r} is not a DNS label, so it cannot be a Slurm node's hostname")
    return NodeName(node_name)


def collisions(wanted: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """Names claimed by more than one Node (``wanted``: Node -> the name it would get): name -> Nodes, sorted."""
    claims: dict[str, list[str]] = {}
    for node, name in wanted.items():
        claims.setdefault(name, []).append(node)
    return {name: tuple(sorted(nodes)) for name, nodes in claims.items() if len(nodes) > 1}


def winners(wanted: Mapping[str, str], holders: Mapping[str, str]) -> dict[str, str]:
    """Node -> name for every Node that may use its name: the unique ones, and a collision's holder.

    ``holders``: Slurm node name -> the Node whose existing Pod already carries it.
    """
    clashing = collisions(wanted)
    out: dict[str, str] = {}
    for node, name in wanted.items():
        if name not in clashing or holders.get(name) == node:
            out[node] = name
    return out


def describe(clashing: Mapping[str, Sequence[str]], holders: Mapping[str, str]) -> str:
    """One sentence per colliding name, for the condition and the Event."""
    parts = []
    for name in sorted(clashing):
        nodes = ", ".join(clashing[name])
        kept = f" ({holders[name]} keeps it)" if holders.get(name) in clashing[name] else ""
        parts.append(f"{name} <- {nodes}{kept}")
    return "Slurm node names collide: " + "; ".join(parts)
