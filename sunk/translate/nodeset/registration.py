"""What one Slurm node of a NodeSet registers with (``slurmd -Z --conf``), from the NodeSet and its Node.

SUNK's "GRES support and auto-identification": the GPUs come from the Node, not from a line
written by hand. The count is the Node's allocatable ``nvidia.com/gpu``; the type is its
``gpu.nvidia.com/class`` label mapped through ``gpuTypes`` (the scheduler's ``--gpu-types``,
the chart's ``scheduler.gpuTypes``), so a Node with 4 GPUs of class ``A100`` and
``gpuTypes: {A100: a100}`` registers ``Gres=gpu:a100:4``. A class that ``gpuTypes`` does not
map registers untyped GPUs (``gpu:4``), which untyped requests still take. A NodeSet's own
``slurm.gres`` (written by hand) wins over the generated one.

The NodeSet's features and partitions are joined by the values of the Node labels it names
(``slurm.featureLabels``, ``slurm.partitionLabels``), and its ``memSpecLimit``,
``cpuSpecList`` and ``coreSpecCount`` are added as they are.

A Node's labels are its kubelet's to write too (NodeRestriction lets a kubelet change its own Node's
labels, all but those under ``node-restriction.kubernetes.io/``), so a compromised node could put itself
into any partition, or claim any feature a job constrains on (issue 35). A label's value is written to
Slurm only if the label is under that prefix (set by whoever administers Nodes) or the value is one the
NodeSet allows (``slurm.allowedFeatures``, ``slurm.allowedPartitions``); any other is left out and said
in ``problems``. No allowlist is no value from a label a kubelet can write: allowing is explicit.

Labels and allocatable are written by whoever controls Nodes (admins, node agents, device
plugins): untrusted like any input. A count that is not a whole number from 0 to
``MAX_GPUS``, a type or label value that is not a safe Slurm word, is left out and said in
``problems`` (the NodeSet's ``NodeInputValid`` condition and an Event); nothing raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from ..quantity import is_whole, parse_quantity
from .spec import KUBELET_PROOF_PREFIX, MAX_GPU_COUNT, SLURM_WORD, NodeSetSpec, split_gres_item

GPU_RESOURCE = "nvidia.com/gpu"
GPU_CLASS_LABEL = "gpu.nvidia.com/class"
MAX_GPUS = MAX_GPU_COUNT  # past any Node made; a larger count is a mistake or a lie
# The NVIDIA driver's device file of GPU minor N is this prefix and N (what the device plugin hands containers).
GPU_DEVICE_PREFIX = "/dev/nvidia"
# GRES type names Slurm and every consumer (sbatch --gres, TRES names) take without quoting.
GRES_TYPE = re.compile(r"[a-z0-9_]{1,32}")
MAX_WORD = 64  # a feature or partition name from a label value

Obj = Mapping[str, Any]


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(value)


@frozen
class Registration:
    """One Slurm node's registration: features, GRES, partitions, and what was left out and why."""

    features: tuple[str, ...] = field(converter=_strs, factory=tuple)
    gres: str = ""
    partitions: tuple[str, ...] = field(converter=_strs, factory=tuple)
    mem_spec_limit: int | None = None
    cpu_spec_list: str = ""
    core_spec_count: int | None = None
    problems: tuple[str, ...] = field(converter=_strs, factory=tuple)

    def conf(self) -> str:
        """``slurmd -Z --conf`` text (CPUs and memory slurmd finds itself)."""
        parts = []
        if self.features:
            parts.append("Feature=" + ",".join(self.features))
        if self.gres:
            parts.append("Gres=" + self.gres)
        if self.mem_spec_limit is not None:
            parts.append(f"MemSpecLimit={self.mem_spec_limit}")
        if self.cpu_spec_list:
            parts.append("CpuSpecList=" + self.cpu_spec_list)
        if self.core_spec_count is not None:
            parts.append(f"CoreSpecCount={self.core_spec_count}")
        return " ".join(parts)

    def gres_conf(self, slurm_node: str) -> str:
        """The node's ``gres.conf`` lines (``gres_conf_lines``)."""
        return gres_conf_lines(slurm_node, self.gres)


def gpu_files(first: int, count: int) -> str:
    """The device files of ``count`` NVIDIA GPUs from minor number ``first``, as a gres.conf File= range."""
    last = first + count - 1
    return f"{GPU_DEVICE_PREFIX}{first}" if count == 1 else f"{GPU_DEVICE_PREFIX}[{first}-{last}]"


def gres_conf_lines(slurm_node: str, gres: str) -> str:
    """gres.conf lines, keyed by the node's name, for each item of the GRES list ``gres``.

    A GPU gets ``File=``: slurmd drops every gpu record without one ("Ignoring file-less GPU",
    Flags=CountOnly included) and reports 0, and slurmctld sets the node INVAL ("gres/gpu count
    reported lower than configured"). The files are the NVIDIA driver's ``/dev/nvidia<minor>``, minors
    from 0 in the order of the list (the names slurmd's own AutoDetect gives them); their number is the
    count. Any other GRES is count-only (no plugin of its name: Slurm tracks its count alone).
    """
    lines = []
    next_minor = 0
    for item in filter(None, gres.split(",")):
        name, gtype, count = split_gres_item(item)
        typed = f" Type={gtype}" if gtype else ""
        if name == "gpu" and count.isdigit() and 0 < int(count) <= MAX_GPUS:
            lines.append(f"NodeName={slurm_node} Name=gpu{typed} File={gpu_files(next_minor, int(count))}")
            next_minor += int(count)
        else:
            lines.append(f"NodeName={slurm_node} Name={name}{typed} Count={count}")
    return "".join(line + "\n" for line in lines)


def node_gpus(node: Obj) -> tuple[int, str | None]:
    """The Node's allocatable GPU count (0 without any), or 0 and why the value is refused."""
    raw = ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE)
    if raw is None:
        return 0, None
    try:
        value = parse_quantity(raw)
    except ValueError:
        return 0, f"allocatable {GPU_RESOURCE} {str(raw)[:40]!r} is not a quantity"
    if not is_whole(value) or value > MAX_GPUS:
        return 0, f"allocatable {GPU_RESOURCE} {str(raw)[:40]!r} is not a whole number from 0 to {MAX_GPUS}"
    return int(value), None


def gpu_gres(node: Obj, gpu_types: Mapping[str, str]) -> tuple[str, list[str]]:
    """``gpu:<type>:<count>`` (``gpu:<count>`` untyped, "" without GPUs) and the problems found."""
    problems: list[str] = []
    count, problem = node_gpus(node)
    if problem:
        problems.append(problem)
    if count == 0:
        return "", problems
    labels = (node.get("metadata") or {}).get("labels") or {}
    gpu_class = labels.get(GPU_CLASS_LABEL)
    gtype = gpu_types.get(gpu_class) if isinstance(gpu_class, str) else None
    if gtype is not None and not GRES_TYPE.fullmatch(gtype):
        problems.append(f"gpuTypes maps {GPU_CLASS_LABEL}={gpu_class!r} to {gtype!r}, not a GRES type "
                        f"([a-z0-9_], at most 32): registered untyped")
        gtype = None
    return (f"gpu:{gtype}:{count}" if gtype else f"gpu:{count}"), problems


def _label_words(node: Obj, keys: tuple[str, ...], allowed: tuple[str, ...], what: str,
                 problems: list[str]) -> list[str]:
    """The values of the Node's labels ``keys`` that may become Slurm ``what``s (module docstring)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    words = []
    for key in keys:
        value = labels.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str) or len(value) > MAX_WORD or not SLURM_WORD.fullmatch(value):
            problems.append(f"label {key}={str(value)[:MAX_WORD]!r} is not a Slurm {what} name: left out")
            continue
        if not key.startswith(KUBELET_PROOF_PREFIX) and value not in allowed:
            problems.append(f"label {key}={value!r}: {what} {value!r} is not in spec.slurm.allowed{what.title()}s "
                            f"(and a kubelet can set {key} on its own Node; {KUBELET_PROOF_PREFIX} labels it "
                            f"cannot): left out")
            continue
        words.append(value)
    return words


def registration(spec: NodeSetSpec, node: Obj, gpu_types: Mapping[str, str], *,
                 gres_from_node: bool = True) -> Registration:
    """What ``node``'s Slurm node of ``spec`` registers with (module docstring); ``spec`` has no problems.
    ``gres_from_node`` False (the operator's default, ``--gres-from-node``): no GRES but ``slurm.gres``."""
    problems: list[str] = []
    gres = spec.gres
    if not gres and gres_from_node:
        gres, found = gpu_gres(node, gpu_types)
        problems.extend(found)
    features = list(dict.fromkeys([*spec.own_features, *_label_words(node, spec.feature_labels, spec.allowed_features,
                                                                 "feature", problems)]))
    partitions = list(dict.fromkeys([*spec.partitions, *_label_words(node, spec.partition_labels,
                                                                     spec.allowed_partitions, "partition", problems)]))
    return Registration(features=features, gres=gres, partitions=partitions, mem_spec_limit=spec.mem_spec_limit,
                        cpu_spec_list=spec.cpu_spec_list, core_spec_count=spec.core_spec_count, problems=problems)
