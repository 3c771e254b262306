"""The operator's own settings, from its flags (process-wide ones are the runner's ``DaemonConfig``)."""

from __future__ import annotations

from pathlib import Path

from attrs import field, frozen

from sunk.translate.nodeset.topology import TopologySettings

NAME = "sunk-operator"


@frozen
class OperatorConfig:
    watch_namespace: str = "slurm"  # where the NodeSets (and so their Pods and NodeSlices) are
    stale_retry: float = 2.0  # seconds before a NodeSet is looked at again while Slurm cannot be read
    # --gpu-types: gpu.nvidia.com/class value -> Slurm GRES type (SUNK's gpuTypes, the scheduler's too).
    gpu_types: tuple[tuple[str, str], ...] = ()
    gres_from_node: bool = False
    # --topology*: Slurm's topology from Node labels (kind "" is off), where it is written, and whether
    # slurmctld is told to reread it (scontrol reconfigure, through the Slurm backend).
    topology: TopologySettings = field(factory=TopologySettings)
    topology_configmap: str = ""
    topology_file: Path | None = None
    topology_reconfigure: bool = True
    # --slurm-cluster: the SlurmCluster (in watch_namespace) whose control plane this operator deploys; "" none.
    slurm_cluster: str = ""
