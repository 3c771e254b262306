"""``sunk-syncer``: two-way state sync between Slurm nodes and their slurmd Pods and Nodes.

Flags follow SUNK's Go binaries (``--metrics-bind-address=:8080``, ``--zap-log-level``,
durations such as ``1s``). Node locking (with its hook API) and the Slurm metrics are
composed in directly, switched by ``--node-locking`` and ``--slurm-metrics`` (or the older
``--plugins`` list); third-party plugins named in ``--plugins`` take the flags left over.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from sunk.base.flags import (
    DRA_DEVICE_MAPPING_HELP,
    add_logging_arguments,
    add_switch,
    configure_logging_from,
    dra_device_mapping,
    positive_duration,
    positive_int,
)
from sunk.controller.daemon import DaemonConfig, add_cluster_arguments, add_daemon_arguments, daemon_config
from sunk.locking import config as lock_flags
from sunk.locking.config import LockConfig
from sunk.metrics import config as metrics_flags
from sunk.metrics.config import MetricsConfig
from sunk.slurm import settings as slurm_settings
from sunk.syncer.config import NAME, SyncerConfig
from sunk.syncer.context import Plugin
from sunk.syncer.plugins import NODE_LOCKING, SLURM_METRICS, choose_parts, load_plugins, plugin_arguments

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from sunk.commands.web import Listener
    from sunk.slurm.client import SlurmClient
    from sunk.syncer.ensuresecrets import EnsureConfig
    from sunk.syncer.release import ReleaseConfig

log = logging.getLogger("sunk.syncer")


def add_slurmd_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the slurmd Pods are: the flags the Syncer and ``release-nodes`` share."""
    parser.add_argument("--watch-namespace", default=os.environ.get("POD_NAMESPACE") or "slurm",
                        help="namespace of the slurmd Pods")
    parser.add_argument("--slurmd-selector", default="app.kubernetes.io/name=slurmd",
                        help="label selector of the slurmd Pods")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of the Syncer and its in-tree parts (third-party plugins' are parsed from what is left)."""
    add_daemon_arguments(parser, poll_interval=1.0, poll_help="one Slurm job list per interval, whatever the "
                         "cluster size", workers=4, workers_help="workers per sync controller",
                         lease_namespace_help="--watch-namespace")
    add_slurmd_arguments(parser)
    for flag, part, module in (
            ("--node-locking", "node locking and its hook API (chart: syncer.nodeLocking.enabled)", NODE_LOCKING),
            ("--slurm-metrics", "the Slurm metrics table on /metrics", SLURM_METRICS)):
        add_switch(parser, flag, default=None, help=f"{part}; default: on, unless --plugins leaves out {module}")
    parser.add_argument("--plugins", default=None,
                        help="comma-separated: sunk.locking.plugin and sunk.metrics.plugin (the in-tree parts, on "
                             "when named, off when not, unless --node-locking/--slurm-metrics say) and third-party "
                             "plugin modules (module or module:ATTR); empty for none")
    parser.add_argument("--slurm-node-poll-interval", type=positive_duration, default=0.25,
                        help="one Slurm node list per interval (while idle, a \"no change since\" answer of a few "
                             "hundred bytes): how late a drain made in Slurm may reach its Pod")
    parser.add_argument("--hooks-api-bind-address", default=":8000", help="hook API (served by every replica)")
    parser.add_argument("--hooks-api-threads", type=positive_int, default=256,
                        help="hook API threads: a waiting pre-hook holds one, and a job's prologs call at once")
    parser.add_argument("--hooks-tls-cert-file", default="",
                        help="serve the hook API over TLS with this certificate (the prolog verifies it with "
                             "hooks.env's SUNK_HOOKS_CA); re-read only at start")
    parser.add_argument("--hooks-tls-key-file", default="", help="the key of --hooks-tls-cert-file")
    add_switch(parser, "--node-permissions-enabled", default=True,
               help="the ServiceAccount may write Nodes (patch nodes, nodes/status; chart: "
                    ".syncer.nodePermissions.enabled): the Node condition of a drain made in Slurm, and "
                    "node locking's taint and reboot hook. false: no Node is written, and node locking "
                    "(which cannot work without its taint) refuses to start")
    add_switch(parser, "--slurm-node-clean-up", default=False,
               help="watch NodeSlices (sunk.coreweave.com, list and watch) and delete from Slurm the "
                    "dynamic nodes whose NodeSlice entry is gone, once idle (chart: "
                    ".syncer.config.syncer.slurmNodeCleanUp); only nodes a NodeSlice once listed")
    parser.add_argument("--scheduler-names", default="sunk-scheduler",
                        help="comma-separated spec.schedulerName of sunk's scheduler and extender (chart: both, "
                             "when enabled): only their Pods count as placed by sunk, whose job-id and slurm-node "
                             "annotations keep a placeholder's drain while they outlive their job; empty: none")
    parser.add_argument("--dra-device-mapping", type=dra_device_mapping, default=None,
                        help=f"{DRA_DEVICE_MAPPING_HELP}: the Syncer watches the driver's ResourceSlices and the "
                             "ResourceClaims (list, watch) to lift a sunk-dra drain once Slurm and the driver agree; "
                             "give sunk-scheduler's own")
    parser.add_argument("--resync-period", type=positive_duration, default=600.0,
                        help="safety-net pass over every node; changes are handled by events, not by this")
    lock_flags.add_flags(parser)
    metrics_flags.add_flags(parser)


def scheduler_names(flag: str) -> frozenset[str]:
    """--scheduler-names: the names, without blanks; none at all is allowed (no Pod is then sunk's)."""
    return frozenset(name.strip() for name in flag.split(",") if name.strip())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=NAME, description=__doc__)
    add_arguments(parser)
    return parser


@attrs.frozen
class Startup:
    """The flags, parsed once: the core's and the in-tree parts' typed settings (None: that part is off),
    and the third-party plugins with the flags they build theirs from."""

    config: SyncerConfig
    daemon: DaemonConfig
    node_locking: LockConfig | None
    slurm_metrics: MetricsConfig | None
    plugins: Sequence[Plugin]
    args: argparse.Namespace  # every flag, the plugins' among them: for their install only


def parse_args(argv: Sequence[str] | None) -> Startup:
    """One parse of every flag the Syncer knows; what is left goes to the third-party plugins ``--plugins``
    names. A start that could only fail later (node locking without a usable secret or Node rights, half a
    TLS pair) is a usage error here (exit 2)."""
    parser = build_parser()
    known, rest = parser.parse_known_args(argv)
    parts = choose_parts(known.plugins, node_locking=known.node_locking, slurm_metrics=known.slurm_metrics)
    plugins = load_plugins(parts.plugins)
    args = argparse.Namespace(**vars(known), **vars(plugin_arguments(plugins, rest, parser)))
    from sunk.commands.web import tls_from_flags

    try:
        node_locking = lock_flags.config_from(args) if parts.node_locking else None
        if node_locking is not None:
            lock_flags.check(node_locking, node_permissions=args.node_permissions_enabled,
                            hooks_api_threads=args.hooks_api_threads)
        tls_from_flags(args.hooks_tls_cert_file, args.hooks_tls_key_file, what="the hook API")
    except ValueError as exc:
        parser.error(str(exc))
    config = SyncerConfig(watch_namespace=args.watch_namespace, slurmd_selector=args.slurmd_selector,
                          resync_period=args.resync_period, hooks_api_bind_address=args.hooks_api_bind_address,
                          hooks_api_threads=args.hooks_api_threads,
                          hooks_tls_cert_file=args.hooks_tls_cert_file, hooks_tls_key_file=args.hooks_tls_key_file,
                          node_permissions=args.node_permissions_enabled,
                          slurm_node_clean_up=args.slurm_node_clean_up,
                          slurm_node_poll_interval=args.slurm_node_poll_interval,
                          scheduler_names=scheduler_names(args.scheduler_names), dra=args.dra_device_mapping)
    daemon = daemon_config(args, parser, name=NAME, lease_namespace=args.watch_namespace)
    return Startup(config=config, daemon=daemon, node_locking=node_locking,
                   slurm_metrics=metrics_flags.config_from(args) if parts.slurm_metrics else None,
                   plugins=plugins, args=args)


def hook_token(argv: Sequence[str]) -> int:
    """``sunk-syncer hook-token --hooks-token-file FILE NODE...``: each node's hook token, one a line.

    Each slurmd Pod mounts its own node's token (the prolog and epilog present it); the
    Syncer derives the same from FILE's secret, so nothing else needs distributing.
    """
    from sunk.hooks.auth import TokenUnavailable, node_token, read_secret

    parser = argparse.ArgumentParser(prog="sunk-syncer hook-token", description=hook_token.__doc__)
    parser.add_argument("--hooks-token-file", required=True, help="the Syncer's secret")
    parser.add_argument("nodes", nargs="+", metavar="NODE", help="Slurm node names")
    args = parser.parse_args(argv)
    try:
        secret = read_secret(args.hooks_token_file)
    except TokenUnavailable as exc:
        parser.error(str(exc))
    for node in args.nodes:
        print(f"{node} {node_token(secret, node)}")
    return 0


def release_parser() -> argparse.ArgumentParser:
    """The flags of ``sunk-syncer release-nodes``: the Syncer's own for Kubernetes, Slurm and the slurmd Pods."""
    parser = argparse.ArgumentParser(prog="sunk-syncer release-nodes", description=release_nodes.__doc__)
    add_cluster_arguments(parser, poll_interval=1.0, poll_help="(not used here)")
    add_slurmd_arguments(parser)
    parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE") or "slurm",
                        help="namespace of --syncer-deployment")
    parser.add_argument("--syncer-deployment", default=None,
                        help="the Syncer's Deployment, scaled to 0 first, so that nothing locks or drains again; "
                             "leave it out when the Syncer is gone already")
    parser.add_argument("--timeout", type=positive_duration, default=120.0,
                        help="how long the Syncer's Pods may take to go (default 2m)")
    add_switch(parser, "--all-nodes", default=False,
               help="remove the lock taint from every Node, not only from the slurmd Pods' Nodes (another "
                    "release of sunk may lock other Nodes of this cluster)")
    add_switch(parser, "--release-locks", default=True,
               help="take back node locking's lock taints and annotations; false (node locking off, chart: "
                    ".syncer.nodeLocking.enabled false): no Node or slurmd Pod is read or written")
    add_logging_arguments(parser)
    return parser


def release_config(args: argparse.Namespace) -> ReleaseConfig:
    from sunk.syncer.release import ReleaseConfig

    return ReleaseConfig(namespace=args.namespace, syncer_deployment=args.syncer_deployment or None,
                         watch_namespace=args.watch_namespace, slurmd_selector=args.slurmd_selector,
                         all_nodes=args.all_nodes, timeout=args.timeout, locks=args.release_locks)


def release_nodes(argv: Sequence[str]) -> int:
    """``sunk-syncer release-nodes``: at uninstall, stop the Syncer and take back what sunk left on the machines.

    With --syncer-deployment, that Deployment is scaled to 0 and its Pods waited for; then
    the lock annotations of the slurmd Pods and the lock taint of their Nodes go, and every
    Slurm drain whose reason is sunk's (k8s:) is lifted, each checked again on a fresh read.
    A person's drain, NHC's and the prolog's unprefixed sunk-lock: drains are never touched.
    Exit 0 when all is released, 1 when something could not be (the Syncer is then scaled
    back), 2 on a usage error. Running it twice is harmless.
    """
    parser = release_parser()
    args = parser.parse_args(argv)
    settings = slurm_settings.settings_from(args, parser)
    configure_logging_from(args)
    from sunk.kube.client import load_api_client
    from sunk.syncer.release import Release

    try:
        api = load_api_client(args.kubeconfig)
        slurm = settings.connect()
    except Exception as exc:  # a kubeconfig that cannot be read, a pyslurm that cannot load: one line, no trace
        log.error("release-nodes: failed: cannot reach Kubernetes or Slurm: %s", slurm_settings.one_line(exc))
        return 1
    previous = signal.signal(signal.SIGTERM, _interrupt)  # the Job's deadline ends it as Ctrl-C does
    try:
        return 0 if Release(api, slurm, release_config(args)).run().ok else 1
    except KeyboardInterrupt:
        log.error("release-nodes: failed: interrupted before it was done (a Syncer it stopped is scaled back)")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        slurm.close()


def ensure_secrets_parser() -> argparse.ArgumentParser:
    """The flags of ``sunk-syncer ensure-secrets``: which Secrets, with which keys, in which namespace."""
    parser = argparse.ArgumentParser(prog="sunk-syncer ensure-secrets", description=ensure_secrets.__doc__)
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, then in-cluster")
    parser.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE") or "slurm",
                        help="namespace of the Secrets")
    parser.add_argument("--token-secret", action="append", default=[], type=_token_secret, metavar="NAME=KEY[,KEY]",
                        help="a Secret of random tokens (64 characters), one per key; repeatable")
    parser.add_argument("--tls-secrets", type=_tls_names, default=None, metavar="SERVER,CLIENT",
                        help="the extender's serving Secret and kube-scheduler's client Secret (tls.crt, tls.key, "
                             "ca.crt), from one CA")
    parser.add_argument("--tls-service", default="",
                        help="the extender's Service: the serving certificate names <svc>, <svc>.<ns>, "
                             "<svc>.<ns>.svc, <svc>.<ns>.svc.cluster.local")
    parser.add_argument("--tls-client-cn", default="", help="kube-scheduler's client certificate's common name")
    parser.add_argument("--tls-validity-days", type=positive_int, default=3650)
    parser.add_argument("--label", action="append", default=[], type=_label, metavar="KEY=VALUE",
                        help="a label of the Secrets created; repeatable")
    add_switch(parser, "--repair", default=False,
               help="make again what is unusable (a token key missing or weak, a pair that does not verify): "
                    "rotates it under the components that hold it. Default: report it and fail")
    add_switch(parser, "--delete", default=False,
               help="delete the Secrets instead (the chart's post-delete hook, hooks.keepOnUninstall=false)")
    add_logging_arguments(parser)
    return parser


def _token_secret(text: str) -> tuple[str, tuple[str, ...]]:
    name, _, keys = text.partition("=")
    parts = tuple(k for k in keys.split(",") if k)
    if not name or not parts:
        raise argparse.ArgumentTypeError(f"{text!r}: want NAME=KEY[,KEY...]")
    return name, parts


def _tls_names(text: str) -> tuple[str, str]:
    parts = text.split(",")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: want SERVER,CLIENT (two Secret names)")
    return parts[0], parts[1]


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not key or not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: want KEY=VALUE")
    return key, value


def ensure_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> EnsureConfig:
    """Flags into the config; a usage error (exit 2) when they name nothing or an incomplete pair."""
    from sunk.syncer.ensuresecrets import EnsureConfig
    from sunk.translate.chartsecrets import Spec, TLSPair, TokenSecret

    specs: list[Spec] = [TokenSecret(name, keys) for name, keys in args.token_secret]
    if args.tls_secrets:
        if not args.delete and not (args.tls_service and args.tls_client_cn):
            parser.error("--tls-secrets needs --tls-service and --tls-client-cn")
        server, client = args.tls_secrets
        specs.append(TLSPair(server, client, service=args.tls_service, namespace=args.namespace,
                             client_cn=args.tls_client_cn, validity_days=args.tls_validity_days))
    if not specs:
        parser.error("name at least one Secret (--token-secret, --tls-secrets)")
    config = EnsureConfig(args.namespace, tuple(specs), dict(args.label), repair=args.repair)
    if len(set(config.names)) != len(config.names):
        parser.error(f"a Secret is named twice: {', '.join(config.names)}")
    return config


def ensure_secrets(argv: Sequence[str]) -> int:
    """``sunk-syncer ensure-secrets``: create the Secrets that are missing, never overwrite one that exists.

    Each --token-secret gets a random 64-character token per key; --tls-secrets gets a new CA and
    the extender's serving and kube-scheduler's client certificates. An existing Secret is left as it
    is (a Secret Helm made gets helm.sh/resource-policy: keep, so that helm upgrade keeps it); one that
    is unusable fails the run with a message naming it and its key (--repair makes it again instead).
    Exit 0 when all exist and are usable, 1 when not, 2 on a usage error.
    """
    parser = ensure_secrets_parser()
    args = parser.parse_args(argv)
    config = ensure_config(args, parser)
    configure_logging_from(args)
    from sunk.hooks.auth import weakness
    from sunk.kube.client import KubeError, load_api_client
    from sunk.syncer.ensuresecrets import Ensure, delete

    try:
        api = load_api_client(args.kubeconfig)
        if args.delete:
            delete(api, config.namespace, config.names)
            return 0
        problems = Ensure(api, config, weakness=weakness).run()
    except (KubeError, OSError, ValueError) as exc:  # a kubeconfig that cannot be read, an apiserver that refuses
        log.error("ensure-secrets: failed: %s", slurm_settings.one_line(exc))
        return 1
    for problem in problems:
        log.error("ensure-secrets: %s", problem)
    if problems:
        log.error("ensure-secrets: failed: %d problem(s), nothing was overwritten (--repair makes them again, which "
                  "rotates them under the components that hold them)", len(problems))
    return 1 if problems else 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["hook-token"]:
        return hook_token(argv[1:])
    if argv[:1] == ["release-nodes"]:
        return release_nodes(argv[1:])
    if argv[:1] == ["ensure-secrets"]:
        return ensure_secrets(argv[1:])
    startup = parse_args(argv)
    configure_logging_from(startup.args)
    from sunk.commands.runner import Served, run
    from sunk.syncer.assembly import assemble
    from sunk.syncer.metrics import register_slurm_requests
    from sunk.syncer.plugins import installers

    config, plugins = startup.config, startup.plugins

    def build(api: ApiClient, slurm: SlurmClient) -> Served:
        register_slurm_requests(slurm.rpc_stats)
        syncer = assemble(config, startup.daemon, api=api, slurm=slurm, node_locking=startup.node_locking,
                          slurm_metrics=startup.slurm_metrics, plugins=installers(plugins, startup.args))
        parts = [name for name, on in (("node-locking", startup.node_locking), ("slurm-metrics",
                                                                                startup.slurm_metrics)) if on]
        log.info("%s: slurmd Pods in %s (%s), parts: %s", NAME, config.watch_namespace, config.slurmd_selector,
                 ", ".join([*parts, *(getattr(p, "name", type(p).__name__) for p in plugins)]) or "none")
        return Served(syncer.manager, {"hooks": syncer.app()})

    return run(startup.daemon, build, [hooks_listener(config)], threads=config.hooks_api_threads)


def hooks_listener(config: SyncerConfig) -> Listener:
    """The hook API's port, over TLS exactly when its certificate flags say so (checked in parse_args)."""
    from sunk.commands.web import Listener, tls_from_flags

    return Listener(config.hooks_api_bind_address, "hooks",
                    tls_from_flags(config.hooks_tls_cert_file, config.hooks_tls_key_file, what="the hook API"))


if __name__ == "__main__":
    sys.exit(main())
