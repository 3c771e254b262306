"""What every daemon takes from its flags besides its own settings (sunk/commands/runner.py runs them):
the flags, declared once here (``add_daemon_arguments``), and the config built from them.

In the runtime layer, not beside the runner: the assemblies build their Manager from it,
and they may not import an entry point.
"""

from __future__ import annotations

import argparse
from typing import Optional

import attrs
from kubernetes.client import ApiClient

from sunk.base.flags import add_logging_arguments, add_switch, positive_int
from sunk.controller.manager import Manager, freeze_heap
from sunk.kube.leader import LeaderElectionConfig
from sunk.slurm import settings as slurm_settings
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
                       health_bind_address=self.health_bind_address, metrics_bind_address=self.metrics_bind_address,
                       after_first_sync=freeze_heap)


def add_cluster_arguments(parser: argparse.ArgumentParser, *, poll_interval: float, poll_help: str) -> None:
    """Where Kubernetes and Slurm are: every daemon's, and the commands' that reach both (release-nodes)."""
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, then in-cluster")
    slurm_settings.add_arguments(parser, poll_interval=poll_interval, poll_help=poll_help)


def add_daemon_arguments(parser: argparse.ArgumentParser, *, poll_interval: float, poll_help: str, workers: int,
                         workers_help: str, lease_namespace_help: str) -> None:
    """The flags every daemon shares, one declaration and one default each (``daemon_config`` reads them).

    What differs per daemon for a reason is a parameter: how often it polls Slurm, how many
    workers its controllers run, where its Lease lives by default. Switches take Go's forms
    alike everywhere (``--leader-elect``, ``--leader-elect=false``, ``--leader-elect false``)."""
    add_cluster_arguments(parser, poll_interval=poll_interval, poll_help=poll_help)
    parser.add_argument("--metrics-bind-address", default=":8080", help="Prometheus /metrics; empty disables")
    parser.add_argument("--health-probe-bind-address", default=":8081", help="/healthz and /readyz; empty disables")
    add_switch(parser, "--leader-elect", default=True,
               help="only the Lease holder reconciles")
    parser.add_argument("--leader-election-namespace", default=None, help=f"default: {lease_namespace_help}")
    parser.add_argument("--leader-election-id", default=None, help="Lease name (default: the program's name)")
    parser.add_argument("--workers", type=positive_int, default=workers, help=workers_help)
    add_logging_arguments(parser)


def daemon_config(args: argparse.Namespace, parser: argparse.ArgumentParser, *, name: str,
                  lease_namespace: str) -> DaemonConfig:
    """From ``add_daemon_arguments``' flags; ``name`` is the Lease's default name, ``lease_namespace`` its
    default namespace."""
    election = None
    if args.leader_elect:
        election = LeaderElectionConfig(lease_name=args.leader_election_id or name,
                                        namespace=args.leader_election_namespace or lease_namespace)
    return DaemonConfig(name=name, slurm=settings_from(args, parser), kubeconfig=args.kubeconfig,
                        workers=args.workers, leader_election=election,
                        health_bind_address=args.health_probe_bind_address or None,
                        metrics_bind_address=args.metrics_bind_address or None)
