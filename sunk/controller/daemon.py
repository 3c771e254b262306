"""What every daemon takes from its flags besides its own settings (sunk/runner.py runs them).

In the runtime layer, not beside the runner: the assemblies build their Manager from it,
and they may not import an entry point.
"""

from __future__ import annotations

import argparse
from typing import Optional

import attrs
from kubernetes.client import ApiClient

from sunk.controller.manager import Manager
from sunk.kube.leader import LeaderElectionConfig
from sunk.slurm.settings import SlurmSettings, settings_from


@attrs.frozen
class DaemonConfig:
    """What every daemon takes from its flags besides its own settings: where Kubernetes and
    Slurm are, how many workers its controllers run, and what its Manager serves and leads."""

    name: str
    slurm: SlurmSettings
    kubeconfig: Optional[str] = None
    workers: int = 1
    leader_election: Optional[LeaderElectionConfig] = None
    health_bind_address: Optional[str] = None  # None: no /healthz, /readyz
    metrics_bind_address: Optional[str] = None  # None: no /metrics

    def manager(self, api: ApiClient) -> Manager:
        return Manager(self.name, api_client=api, leader_election=self.leader_election,
                       health_bind_address=self.health_bind_address, metrics_bind_address=self.metrics_bind_address)


def daemon_config(args: argparse.Namespace, parser: argparse.ArgumentParser, *, name: str,
                  lease_namespace: str) -> DaemonConfig:
    """From the flags every daemon has (the Slurm ones, --kubeconfig, --workers, the probes', the Lease's)."""
    election = None
    if args.leader_elect:
        election = LeaderElectionConfig(lease_name=args.leader_election_id or name,
                                        namespace=args.leader_election_namespace or lease_namespace)
    return DaemonConfig(name=name, slurm=settings_from(args, parser), kubeconfig=args.kubeconfig,
                        workers=args.workers, leader_election=election,
                        health_bind_address=args.health_probe_bind_address or None,
                        metrics_bind_address=args.metrics_bind_address or None)
