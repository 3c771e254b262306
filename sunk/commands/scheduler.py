"""``sunk-scheduler``: schedule Pods that name it in spec.schedulerName through Slurm.

Flags follow SUNK's (``--slurm-kill-wait=30s``, ``--hooks-api-bind-address=:8000``, ...): the
argument list SUNK's docs show for its scheduler starts this one unchanged (docs/scheduler.md,
"The seed's command line").
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Optional

import attrs
import yaml
from kubernetes.client import ApiClient

from scheduler.assembly import Assembly, assemble
from scheduler.config import PENDING_REASON_INTERVAL, STARTED_CALL_PATIENCE, SchedulerConfig
from scheduler.decide import Bind
from sunk.base.flags import (
    DRA_DEVICE_MAPPING_HELP,
    add_switch,
    components_flag,
    configure_logging_from,
    dra_device_mapping,
    gpu_types,
    non_negative_duration,
    parse_bind_address,
    positive_duration,
    positive_int,
)
from sunk.commands.runner import Served, run
from sunk.commands.web import Listener, WSGIApp, check_listeners, tls_from_flags
from sunk.controller.daemon import add_daemon_arguments, daemon_config
from sunk.hooks.auth import TokenUnavailable, read_secret
from sunk.model.types import Obj
from sunk.slurm.client import SlurmClient
from sunk.translate.policy import BUILTIN, IdentityPolicy, parse_policy

OnBind = Callable[[Obj, Bind], None]
OnSubmit = Callable[[Obj, int], None]

log = logging.getLogger("sunk.scheduler")

# SUNK's --components: the parts of SUNK a process runs. Each sunk daemon runs one; these run elsewhere.
COMPONENTS_ELSEWHERE = {"syncer": "sunk-syncer", "extender": "sunk-extender", "operator": "sunk-operator",
                        "nodeset": "sunk-operator"}

NO_SECRET_FILE_WARNING = (
    "no --hook-secret-file: placeholder jobs' hook tokens are signed with a key made at this start, which "
    "only this process knows. The hook API refuses (401) the calls of a job submitted before a restart or "
    "by another replica: its start is seen at the next Slurm list instead of at once, and when Slurm ends "
    "it, it can neither ask for its Pod's deletion nor see the Pod go (the scheduler deletes the Pod itself "
    "once Slurm lists the job as ended), so it keeps its node until KillWait and then drains it (the Syncer "
    "lifts that drain once the Pod is gone). Give --hook-secret-file (a Secret, the same on every replica; "
    "the chart does) to run more than one replica or to restart without this")


def own_namespace() -> str:
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    sa = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return sa.read_text().strip() if sa.exists() else "default"


def add_common_arguments(parser: argparse.ArgumentParser, *, default_name: str) -> None:
    """Flags both front ends take: every daemon's (``add_daemon_arguments``) and the scheduling ones."""
    parser.add_argument("--scheduler-name", default=default_name, help="the spec.schedulerName Pods use")
    parser.add_argument("--scope", choices=("namespace", "cluster"), default="namespace",
                        help="watch Pods in --watch-namespace (default: this Pod's namespace) or everywhere")
    parser.add_argument("--watch-namespace", default="", help="comma-separated namespaces, for --scope=namespace")
    parser.add_argument("--dra-device-mapping", type=dra_device_mapping, default=None,
                        help=f"{DRA_DEVICE_MAPPING_HELP}. Without it a Pod with ResourceClaims is refused")
    # Workers mostly wait on slurmrestd and the apiserver; 200 Pods at once queued behind 8
    # (docs/benchmarks.md).
    add_daemon_arguments(parser, poll_interval=0.5, poll_help="one Slurm list call per interval, whatever the number "
                         "of Pods", workers=16, workers_help="Pods reconciled at once",
                         lease_namespace_help="this Pod's namespace")
    parser.add_argument("--slurm-kill-wait", type=positive_duration, default=30.0,
                        help="KillWait from slurm.conf, e.g. 30s")
    parser.add_argument("--stuck-pod-margin", type=positive_duration, default=60.0,
                        help="how long past its grace period a Pod terminating on a Node that is NotReady or gone "
                             "keeps its Slurm job; then the job's node is drained and the job cancelled")
    parser.add_argument("--started-call-patience", type=non_negative_duration, default=STARTED_CALL_PATIENCE,
                        help="how long the Slurm cache waits for a placeholder's started call to bring its job's "
                             "record before it reads the job itself; 0s: never waits. Worth it only when the "
                             "calls reach this process: with several replicas behind the hook API's Service, "
                             "most reach another, so the chart sets 0s then")
    parser.add_argument("--pending-reason-interval", type=non_negative_duration, default=PENDING_REASON_INTERVAL,
                        help="how often the Slurm cache reads a pending placeholder again for Slurm's pending "
                             "reason, which the waiting Pod's PodScheduled condition shows (sooner while Slurm "
                             "gives none); 0s: only at the full job lists")
    add_switch(parser, "--gang-pod-groups", default=False,
               help="watch coscheduling PodGroups (scheduling.x-k8s.io/v1alpha1, scheduler-plugins' CRD, "
                    "which must be installed) so that Pods labelled scheduling.x-k8s.io/pod-group form "
                    "gangs of the PodGroup's minMember")
    parser.add_argument("--gpu-types", type=gpu_types, default=(),
                        help="Node label values of gpu.nvidia.com/class or /model to Slurm GRES types, e.g. "
                             "NVIDIA_L4=l4,H100_SXM=h100 (SUNK's gpuTypes): a Pod whose required GPU affinity "
                             "names one asks Slurm for gres/gpu:<type>:N")
    parser.add_argument("--identity-policy", default="",
                        help="YAML or JSON file of the operator's Slurm identity policy: per namespace, the users, "
                             "groups, accounts, partitions, QOS, reservations, priorities and exclusive modes Pods "
                             "may ask for, and the identity of a Pod that asks none (docs/security.md). Without "
                             "it: any user but root, no default identity, no priority")
    parser.add_argument("--slurmd-namespace", default="slurm")
    parser.add_argument("--slurmd-selector", default="app.kubernetes.io/name=slurmd")
    parser.add_argument("--default-partition", default=None)
    parser.add_argument("--hooks-api-bind-address", default=":8000")
    parser.add_argument("--hooks-url", default=None,
                        help="URL placeholder jobs use to reach the hook API (default http://127.0.0.1:<port>)")
    parser.add_argument("--hooks-tls-cert-file", default="", help="serve the hook API over TLS with this certificate")
    parser.add_argument("--hooks-tls-key-file", default="", help="the key of --hooks-tls-cert-file")
    parser.add_argument("--hooks-ca-file", default="",
                        help="path, on the slurmd hosts, of the CA bundle placeholder jobs verify an https "
                             "--hooks-url with")
    parser.add_argument("--hook-secret-file", default="",
                        help="HMAC key for per-Pod hook tokens, the same on every replica; without it, a key made "
                             "at start, which the jobs of an earlier process or another replica do not have")
    parser.add_argument("--submit-concurrency", type=positive_int, default=16,
                        help="placeholder submissions in flight at once, across workers")


def identity_policy(path: str) -> IdentityPolicy:
    """The ``--identity-policy`` file's policy (BUILTIN without one); SystemExit naming what is wrong."""
    if not path:
        return BUILTIN
    try:
        return parse_policy(yaml.safe_load(Path(path).read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as exc:
        raise SystemExit(f"--identity-policy {path}: {exc}") from None


def hook_secret(path: str) -> bytes:
    """The hook tokens' key: the file's, or one made now (with the warning of what that costs)."""
    if not path:
        log.warning("%s", NO_SECRET_FILE_WARNING)
        return secrets.token_hex(32).encode()
    try:
        return read_secret(path)
    except TokenUnavailable as exc:
        raise SystemExit(f"--hook-secret-file: {exc}") from None


def config_from(args: argparse.Namespace) -> SchedulerConfig:
    secret = hook_secret(args.hook_secret_file)
    policy = identity_policy(args.identity_policy)
    if args.scope == "cluster":
        namespaces: tuple[str, ...] = ()
    else:
        namespaces = tuple(n for n in args.watch_namespace.split(",") if n) or (own_namespace(),)
    hooks_url = args.hooks_url or f"http://127.0.0.1:{parse_bind_address(args.hooks_api_bind_address)[1]}"
    if not args.hooks_url and os.environ.get("KUBERNETES_SERVICE_HOST"):
        log.warning("no --hooks-url: placeholder jobs are told to call the hook API at %s, which from a slurmd "
                    "Pod is that Pod itself: their calls fail, so Pods are bound at the next Slurm list and a "
                    "job that Slurm ends keeps its node until KillWait. Give --hooks-url=http://<this "
                    "scheduler's Service>.<namespace>.svc:%d (the chart does)", hooks_url,
                    parse_bind_address(args.hooks_api_bind_address)[1])
    mapping = args.dra_device_mapping
    if mapping is not None and mapping.shard_classes and args.slurm_backend == "pyslurm":
        # (pyslurm reads a job's "shard:2(0/4,2/4)" as "shard: 2": which GPU its shards are on is lost)
        raise SystemExit("--dra-device-mapping names shard classes, which need --slurm-backend=rest: pyslurm's job "
                         "records do not say which GPU a job's shards are on")
    if hooks_url.startswith("https://") and not args.hooks_tls_cert_file:
        raise SystemExit(f"--hooks-url {hooks_url} is https, but the hook API has no --hooks-tls-cert-file")
    if hooks_url.startswith("http://") and args.hooks_tls_cert_file:
        raise SystemExit(f"--hooks-url {hooks_url} is plain http, but the hook API serves TLS "
                         f"(--hooks-tls-cert-file): placeholder jobs could not reach it")
    return SchedulerConfig(
        scheduler_name=args.scheduler_name,
        hook_secret=secret,
        hooks_url=hooks_url,
        hooks_ca_file=args.hooks_ca_file,
        kill_wait_seconds=int(args.slurm_kill_wait),
        namespaces=namespaces,
        slurmd_namespace=args.slurmd_namespace,
        slurmd_selector=args.slurmd_selector,
        submit_concurrency=args.submit_concurrency,
        default_partition=args.default_partition,
        stuck_pod_margin=args.stuck_pod_margin,
        started_call_patience=args.started_call_patience,
        pending_reason_interval=args.pending_reason_interval,
        gang_pod_groups=args.gang_pod_groups,
        gpu_types=args.gpu_types,
        identity_policy=policy,
        dra=args.dra_device_mapping,
    )


def hooks_listener(args: argparse.Namespace) -> Listener:
    """The hook API's port, with TLS exactly when its own certificate flags say so."""
    return Listener(args.hooks_api_bind_address, "hooks",
                    tls_from_flags(args.hooks_tls_cert_file, args.hooks_tls_key_file, what="the hook API"))


def run_daemon(parser: argparse.ArgumentParser, argv: Optional[list[str]], *,
               listeners: Callable[[argparse.Namespace], list[Listener]],
               apps: Callable[[Assembly], Mapping[str, WSGIApp]],
               on_bind: Optional[Callable[[ApiClient], OnBind]] = None,
               on_submit: Optional[Callable[[ApiClient], OnSubmit]] = None) -> int:
    """What both front ends do with their flags: one assembly, served on their listeners."""
    args = parser.parse_args(argv)
    configure_logging_from(args)
    config = config_from(args)  # bad flags fail here, before a worker is forked
    daemon = daemon_config(args, parser, name=parser.prog, lease_namespace=own_namespace())
    # Placement reads a job's nodes (batch host first), state and Extra, never its per-node allocation: a third
    # of the bytes per read.
    daemon = attrs.evolve(daemon, slurm=attrs.evolve(daemon.slurm, job_allocations=False))
    try:
        served = listeners(args)
        check_listeners(served)
    except ValueError as exc:
        parser.error(str(exc))

    def build(api: ApiClient, slurm: SlurmClient) -> Served:
        assembly = assemble(daemon, config, api=api, slurm=slurm, on_bind=on_bind(api) if on_bind else None,
                            on_submit=on_submit(api) if on_submit else None)
        log.info("%s: scheduling Pods with schedulerName=%s in %s", daemon.name, config.scheduler_name,
                 ",".join(config.namespaces) or "all namespaces")
        return Served(assembly.manager, apps(assembly))

    return run(daemon, build, served)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sunk-scheduler", description=__doc__)
    add_common_arguments(parser, default_name="sunk-scheduler")
    parser.add_argument("--components", action="append", default=None,
                        type=components_flag("scheduler", COMPONENTS_ELSEWHERE),
                        help="SUNK's: the components this process runs; sunk-scheduler runs only 'scheduler' "
                             "(the default), and stops at start for any other")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    return run_daemon(build_parser(), argv, listeners=lambda args: [hooks_listener(args)],
                      apps=lambda assembly: {"hooks": assembly.hooks_app()})


if __name__ == "__main__":
    sys.exit(main())
