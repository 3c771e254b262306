"""``sunk-syncer``: two-way state sync between Slurm nodes and their slurmd Pods and Nodes.

Flags follow SUNK's Go binaries (``--metrics-bind-address=:8080``, ``--zap-log-level``,
durations such as ``1s``). Plugins (by default node locking and its hook API, when
installed) add their own flags; ``--plugins`` picks them and is read before the rest.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from sunk.flags import LEVELS, boolean, configure_logging, positive_duration, positive_int

from .plugins import DEFAULT_PLUGINS, load_plugins, parse_plugin_list

log = logging.getLogger("sunk.syncer")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The Syncer's own flags. A plugin may redefine one (conflict_handler="resolve")."""
    parser.add_argument("--plugins", default=",".join(DEFAULT_PLUGINS),
                        help="comma-separated plugin modules (module or module:ATTR); empty for none")
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, then in-cluster")
    parser.add_argument("--slurm-api-base", default=os.environ.get("SLURM_REST_URL", "http://127.0.0.1:6820"),
                        help="slurmrestd base URL")
    parser.add_argument("--slurm-auth-token", default=os.environ.get("SLURM_JWT"), help="slurmrestd JWT")
    parser.add_argument("--slurm-auth-token-file", default=None, help="JWT file, re-read when it changes")
    parser.add_argument("--slurm-user", default="root", help="user the JWT speaks for")
    parser.add_argument("--slurm-poll-interval", type=positive_duration, default=1.0,
                        help="one Slurm node list (and one job list) per interval, whatever the cluster size")
    parser.add_argument("--watch-namespace", default=os.environ.get("POD_NAMESPACE") or "slurm",
                        help="namespace of the slurmd Pods")
    parser.add_argument("--slurmd-selector", default="app.kubernetes.io/name=slurmd",
                        help="label selector of the slurmd Pods")
    parser.add_argument("--metrics-bind-address", default=":8080", help="Prometheus /metrics; empty disables")
    parser.add_argument("--health-probe-bind-address", default=":8081", help="/healthz and /readyz; empty disables")
    parser.add_argument("--hooks-api-bind-address", default=":8000", help="hook API (served by every replica)")
    parser.add_argument("--hooks-api-threads", type=positive_int, default=256,
                        help="hook API threads: a waiting pre-hook holds one, and a job's prologs call at once")
    parser.add_argument("--hooks-token-file", default=None, help="bearer token file of the hook API")
    parser.add_argument("--leader-elect", type=boolean, nargs="?", const=True, default=True,
                        help="only the Lease holder reconciles")
    parser.add_argument("--leader-election-namespace", default=None, help="default: --watch-namespace")
    parser.add_argument("--leader-election-id", default=None, help="Lease name (default sunk-syncer)")
    parser.add_argument("--workers", type=positive_int, default=4, help="workers per sync controller")
    parser.add_argument("--resync-period", type=positive_duration, default=600.0,
                        help="safety-net pass over every node; changes are handled by events, not by this")
    parser.add_argument("--zap-log-level", choices=sorted(LEVELS), default="info", help="log verbosity")


def build_parser(plugin_specs: Sequence[str]) -> tuple[argparse.ArgumentParser, list[Any]]:
    parser = argparse.ArgumentParser(prog="sunk-syncer", description=__doc__, conflict_handler="resolve")
    add_arguments(parser)
    plugins = load_plugins(plugin_specs)
    for plugin in plugins:
        add = getattr(plugin, "add_arguments", None)
        if add is not None:
            add(parser)
    return parser, plugins


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[Any]]:
    """Two passes: ``--plugins`` first (their flags must exist before the real parse)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--plugins", default=",".join(DEFAULT_PLUGINS))
    known, _ = pre.parse_known_args(argv)
    parser, plugins = build_parser(parse_plugin_list(known.plugins))
    args = parser.parse_args(argv)
    for plugin in plugins:
        validate = getattr(plugin, "validate", None)
        if validate is not None:
            try:
                validate(args)
            except ValueError as exc:
                parser.error(str(exc))
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.slurm_poll_interval <= 0:
        parser.error("--slurm-poll-interval must be positive")
    if not (args.slurm_auth_token or args.slurm_auth_token_file):
        parser.error("give --slurm-auth-token (or $SLURM_JWT) or --slurm-auth-token-file")
    return args, plugins


def connect_slurm(args: argparse.Namespace) -> Any:
    from sunk.slurm import connect

    token_file = args.slurm_auth_token_file
    auth = {"token_file": token_file} if token_file else {"token": args.slurm_auth_token}
    return connect("rest", url=args.slurm_api_base, user=args.slurm_user, **auth)


def build(args: argparse.Namespace, plugins: Sequence[Any]) -> Any:
    """Inside the serving worker: connect, assemble, start; returns the Syncer."""
    from sunk.kube.client import load_api_client

    from .assembly import assemble, exit_when_done
    from .metrics import register_slurm_requests

    slurm = connect_slurm(args)
    register_slurm_requests(slurm.rpc_stats)
    syncer = assemble(args, api=load_api_client(args.kubeconfig), slurm=slurm, plugins=plugins)
    syncer.manager.start()
    exit_when_done(syncer.manager)
    log.info(
        "sunk-syncer: slurmd Pods in %s (%s), Slurm at %s, plugins: %s",
        args.watch_namespace, args.slurmd_selector, args.slurm_api_base,
        ", ".join(getattr(p, "name", type(p).__name__) for p in plugins) or "none",
    )
    return syncer


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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["hook-token"]:
        return hook_token(argv[1:])
    args, plugins = parse_args(argv)
    configure_logging(args.zap_log_level)
    from sunk.web import Listener, serve

    running: dict[str, Any] = {}

    def build_app() -> Any:
        running["syncer"] = build(args, plugins)
        return {"hooks": running["syncer"].app()}

    def stop() -> None:
        syncer = running.get("syncer")
        if syncer is not None:
            syncer.manager.stop()
            syncer.manager.wait(30)

    serve(build_app, [Listener(args.hooks_api_bind_address, "hooks")], on_exit=stop, threads=args.hooks_api_threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
