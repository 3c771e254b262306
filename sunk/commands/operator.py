"""``sunk-operator``: NodeSets into slurmd Pods, one per matching Node, scaled and updated without
killing a job (docs/nodeset.md).

Flags follow the other daemons' (``--metrics-bind-address=:8080``, ``--zap-log-level``,
durations such as ``1s``). It serves no API of its own: the Manager serves the probes and
/metrics, and the process runs leader-elected (one Lease, ``sunk-operator``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kubernetes.client import ApiClient

from sunk.base.flags import (
    add_logging_arguments,
    add_switch,
    configure_logging_from,
    gpu_types,
    positive_duration,
)
from sunk.controller.daemon import DaemonConfig, add_daemon_arguments, daemon_config
from sunk.controller.manager import Manager
from sunk.nodeset.config import NAME, OperatorConfig
from sunk.slurm.client import SlurmClient
from sunk.translate.nodeset.topology import (
    DEFAULT_BLOCK_LABEL,
    FORMATS,
    KINDS,
    MAX_BLOCK_SIZE,
    YAML,
    TopologySettings,
    usable_name,
)
from sunk.translate.slurmcluster.spec import DNS_LABEL

log = logging.getLogger("sunk.operator")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=NAME, description=__doc__)
    add_daemon_arguments(parser, poll_interval=1.0,
                         poll_help="one Slurm node list per interval, whatever the number of NodeSets",
                         workers=2, workers_help="NodeSets reconciled at once",
                         lease_namespace_help="--watch-namespace")
    parser.add_argument("--watch-namespace", default=os.environ.get("POD_NAMESPACE") or "slurm",
                        help="namespace of the NodeSets, their slurmd Pods and NodeSlices")
    parser.add_argument("--stale-retry", type=positive_duration, default=2.0,
                        help="how soon a NodeSet is looked at again while Slurm cannot be read")
    parser.add_argument("--gpu-types", type=gpu_types, default=(),
                        help="gpu.nvidia.com/class value -> Slurm GRES type, e.g. A100_NVLINK_80GB=a100 (SUNK's "
                             "gpuTypes, the scheduler's --gpu-types): a NodeSet without slurm.gres registers each "
                             "Node's allocatable nvidia.com/gpu as gpu:<type>:<count> (untyped for a class not "
                             "mapped here), with --gres-from-node")
    add_switch(parser, "--gres-from-node", default=False,
               help="a NodeSet without slurm.gres registers each Node's allocatable nvidia.com/gpu as its GRES. Off "
                    "by default: the slurmd Pods' gres.conf must then name the devices (a count without device "
                    "files made Slurm 24.11 set the node INVAL: 'gres/gpu count reported lower than configured')")
    parser.add_argument("--slurm-cluster", default="", type=_slurm_cluster_name,
                        help="the SlurmCluster (in --watch-namespace) whose control plane this operator deploys "
                             "(docs/install.md, Slurm on Kubernetes); --slurm-api-base must reach its slurmrestd, "
                             "which scontrol reconfigure goes through. Unset: no SlurmCluster is reconciled")
    topo = parser.add_argument_group("topology", "Slurm's topology from Node labels (docs/nodeset.md)")
    topo.add_argument("--topology", choices=("", *KINDS), default="",
                      help="block (NVLink domains) or tree (switch levels); unset: no topology is written")
    topo.add_argument("--topology-block-label", default=DEFAULT_BLOCK_LABEL,
                      help="the Node label whose value names a node's block (SUNK's NVLink-domain label)")
    topo.add_argument("--topology-tree-labels", type=_labels, default=(),
                      help="Node labels, outermost first, whose values name a node's switches, e.g. "
                           "topology.kubernetes.io/region,topology.kubernetes.io/zone")
    topo.add_argument("--topology-allowed-values", type=_topology_values, default=(),
                      help="the only values a topology label outside node-restriction.kubernetes.io/ may bring "
                           "(a kubelet may set its own Node's other labels); others place the node in "
                           "'unlabeled'. Unset: any value")
    topo.add_argument("--topology-block-size", type=_block_size, default=0,
                      help="block: the planning base block size (nodes per NVLink domain, e.g. 18 for NVL72); "
                           "0: the labelled blocks' size that holds the most nodes")
    topo.add_argument("--topology-format", choices=FORMATS, default=YAML,
                      help="topology.yaml (Slurm 25.05 and later) or topology.conf (every release)")
    topo.add_argument("--topology-configmap", default="",
                      help="ConfigMap (in --watch-namespace) to write the file into, mounted into slurmctld")
    topo.add_argument("--topology-file", default="",
                      help="a path slurmctld reads its files from, written directly (a shared volume)")
    add_switch(topo, "--topology-reconfigure", default=True,
               help="after writing, have slurmctld reread its files (scontrol reconfigure, through the Slurm backend)")
    return parser


def _slurm_cluster_name(text: str) -> str:
    if text and not DNS_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a SlurmCluster name (a DNS label)")
    return text


def _topology_values(text: str) -> tuple[str, ...]:
    values = _labels(text)
    if bad := [v for v in values if not usable_name(v)]:
        raise argparse.ArgumentTypeError(f"not usable as block or switch names: {', '.join(bad)}")
    return values


def _block_size(text: str) -> int:
    size = int(text)
    if not 0 <= size <= MAX_BLOCK_SIZE:
        raise argparse.ArgumentTypeError(f"{size} is not a block size from 0 to {MAX_BLOCK_SIZE}")
    return size


def _labels(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse_args(argv: Sequence[str] | None) -> tuple[OperatorConfig, DaemonConfig, argparse.Namespace]:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.topology == "tree" and not args.topology_tree_labels:
        parser.error("--topology=tree needs --topology-tree-labels")
    if args.topology and not (args.topology_configmap or args.topology_file):
        parser.error("--topology needs --topology-configmap or --topology-file (where to write it)")
    config = OperatorConfig(
        watch_namespace=args.watch_namespace, stale_retry=args.stale_retry, gpu_types=args.gpu_types,
        gres_from_node=args.gres_from_node,
        topology=TopologySettings(kind=args.topology, block_label=args.topology_block_label,
                                  tree_labels=args.topology_tree_labels, file_format=args.topology_format,
                                  allowed_values=args.topology_allowed_values, block_size=args.topology_block_size),
        topology_configmap=args.topology_configmap,
        topology_file=Path(args.topology_file) if args.topology_file else None,
        topology_reconfigure=args.topology_reconfigure, slurm_cluster=args.slurm_cluster)
    daemon = daemon_config(args, parser, name=NAME, lease_namespace=args.watch_namespace)
    return config, daemon, args


def end_nodesets_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"{NAME} end-nodesets", description=end_nodesets.__doc__)
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, then in-cluster")
    parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE") or "slurm",
                        help="namespace of the NodeSets")
    parser.add_argument("--nodeset", action="append", default=[], type=_nodeset_name, required=True,
                        help="a NodeSet to end; repeatable")
    add_switch(parser, "--cancel-jobs", default=True,
               help="cancel the jobs on the NodeSets' nodes once drained (sunk.coreweave.com/on-delete: "
                    "cancel-jobs); false: wait for them, and fail at --timeout while one runs")
    parser.add_argument("--timeout", type=positive_duration, default=200.0,
                        help="how long the NodeSets may take to go (default 200s)")
    parser.add_argument("--operator-deployment", default="",
                        help="the operator's Deployment (in --operator-namespace): without a Ready Pod of it nothing "
                             "is deleted; unset: not checked")
    parser.add_argument("--operator-namespace", default=os.environ.get("POD_NAMESPACE") or "slurm",
                        help="namespace of --operator-deployment")
    add_logging_arguments(parser)
    return parser


def _nodeset_name(text: str) -> str:
    if not DNS_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a NodeSet name (a DNS label)")
    return text


def end_nodesets(argv: Sequence[str]) -> int:
    """``sunk-operator end-nodesets``: at uninstall, delete the release's NodeSets and wait until the operator,
    still running, has drained their nodes, cancelled their jobs (--cancel-jobs) and let them go.

    Exit 0 once every NodeSet named is gone, 1 when some are left at --timeout or on an API error, 2 on a
    usage error. Running it twice is harmless.
    """
    args = end_nodesets_parser().parse_args(argv)
    configure_logging_from(args)
    from sunk.kube.client import KubeError, load_api_client
    from sunk.nodeset.uninstall import EndConfig, EndNodeSets, NoOperator

    config = EndConfig(namespace=args.namespace, nodesets=tuple(dict.fromkeys(args.nodeset)),
                       cancel_jobs=args.cancel_jobs, timeout=args.timeout,
                       operator_deployment=args.operator_deployment, operator_namespace=args.operator_namespace)
    try:
        return 1 if EndNodeSets(load_api_client(args.kubeconfig), config).run() else 0
    except (KubeError, NoOperator) as exc:
        log.error("end-nodesets: failed: %s", exc)
        return 1
    except Exception as exc:  # a kubeconfig that cannot be read: one line, no trace
        log.error("end-nodesets: failed: %s: %s", type(exc).__name__, exc)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["end-nodesets"]:
        return end_nodesets(argv[1:])
    config, daemon, args = parse_args(argv)
    configure_logging_from(args)
    from sunk.commands.runner import run_headless
    from sunk.nodeset.assembly import assemble

    def build(api: ApiClient, slurm: SlurmClient) -> Manager:
        operator = assemble(config, daemon, api=api, slurm=slurm)
        log.info("%s: NodeSets in %s", NAME, config.watch_namespace)
        return operator.manager

    return run_headless(daemon, build)


if __name__ == "__main__":
    sys.exit(main())
