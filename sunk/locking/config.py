"""Node-locking and hook API settings, and the sunk-syncer flags that set them."""

from __future__ import annotations

import argparse

import attrs

from sunk.base.flags import positive_duration, positive_int
from sunk.hooks.auth import TokenUnavailable, read_secret
from sunk.model import names
from sunk.translate.lock import TAINT_EFFECTS
from sunk.translate.podtoken import DEFAULT_AUDIENCE


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be positive")
    return value


@attrs.frozen
class LockConfig:
    token_file: str | None  # the legacy HMAC node tokens' secret; None: only Pod-bound tokens open a node
    # Pod-bound ServiceAccount tokens of slurmd Pods with this audience open their node's hooks
    # (TokenReview); empty: only the legacy HMAC node tokens do.
    token_audience: str = DEFAULT_AUDIENCE
    reboot_condition: str = names.DEFAULT_REBOOT_CONDITION
    reboot_reason: str = names.DEFAULT_REBOOT_REASON
    taint_effect: str = "NoSchedule"
    default_timeout: float = 90.0  # a pre-hook that names no timeout
    max_timeout: float = 600.0  # longer requests are cut to this
    eviction_retry: float = 2.0  # seconds between attempts at a PDB-blocked eviction
    request_grace: float = 60.0  # a lock request outlives an unseen job by this much
    workers: int = 4
    # Pre-hooks waiting for a lock at once, in all and per Slurm node (each holds a hook API thread):
    # beyond either, a retryable 429. At most 3/4 of --hooks-api-threads (256), so quick calls always find
    # a thread; per node at most 1/8 of all, so that a few compromised nodes cannot hold every wait.
    max_waiters: int = 192
    max_waiters_per_node: int = 8

    def __attrs_post_init__(self) -> None:
        if self.taint_effect not in TAINT_EFFECTS:
            raise ValueError(f"taint effect must be one of {', '.join(TAINT_EFFECTS)}")
        for field in ("default_timeout", "max_timeout", "eviction_retry", "request_grace"):
            _positive(getattr(self, field))
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if self.max_waiters < 1 or self.max_waiters_per_node < 1:
            raise ValueError("the bounds on waiting pre-hooks must be at least 1")

    def clamp_timeout(self, requested: float | None) -> float:
        return min(requested if requested is not None else self.default_timeout, self.max_timeout)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The flags this plugin adds to sunk-syncer (names after SUNK's chart options)."""
    group = parser.add_argument_group("node locking and the hook API")
    group.add_argument("--hooks-token-file", default="/var/run/sunk/hooks/syncer-token",
                       help="secret (32+ bytes) the hook tokens of the nodes derive from; re-read when it "
                            "changes (sunk-syncer hook-token prints a node's legacy HMAC token); empty: no HMAC "
                            "node token opens a node (only --hooks-token-audience's Pod tokens do)")
    group.add_argument("--hooks-token-audience", default=DEFAULT_AUDIENCE,
                       help="audience of the projected ServiceAccount tokens slurmd Pods prove their node with "
                            "(checked with TokenReview: create tokenreviews); empty: HMAC node tokens only")
    group.add_argument("--node-reboot-condition", default=names.DEFAULT_REBOOT_CONDITION,
                       help="Node condition type the reboot hook sets (.syncer.hooksAPI.nodeRebootCondition)")
    group.add_argument("--node-reboot-reason", default=names.DEFAULT_REBOOT_REASON,
                       help="reason of that condition (.syncer.hooksAPI.nodeRebootReason)")
    group.add_argument("--lock-taint-effect", choices=TAINT_EFFECTS, default="NoSchedule",
                       help="effect of the sunk.coreweave.com/lock taint; NoExecute lets the taint manager "
                            "delete non-tolerating Pods itself, bypassing PodDisruptionBudgets")
    group.add_argument("--lock-default-timeout", type=positive_duration, default=90.0,
                       help="how long a pre-hook that names no timeout waits for the lock")
    group.add_argument("--lock-max-timeout", type=positive_duration, default=600.0, help="cap on any pre-hook's wait")
    group.add_argument("--lock-eviction-retry", type=positive_duration, default=2.0,
                       help="pause between attempts at an eviction a PodDisruptionBudget refused")
    group.add_argument("--lock-request-grace", type=positive_duration, default=60.0,
                       help="how long a lock request for a job the Slurm cache has not seen stays in force")
    group.add_argument("--lock-workers", type=positive_int, default=4, help="lock controller workers")
    group.add_argument("--lock-max-waiters", type=positive_int, default=192,
                       help="pre-hooks that may wait for a lock at once (each holds a hook API thread: at most "
                            "3/4 of --hooks-api-threads); beyond it a retryable 429")
    group.add_argument("--lock-max-waiters-per-node", type=positive_int, default=8,
                       help="jobs whose pre-hooks may wait for one Slurm node's lock at once (a repeated call "
                            "for the same job takes its wait over); at most 1/8 of --lock-max-waiters; beyond "
                            "it a retryable 429")


def config_from(args: argparse.Namespace) -> LockConfig:
    return LockConfig(
        token_file=args.hooks_token_file or None,
        token_audience=args.hooks_token_audience,
        reboot_condition=args.node_reboot_condition,
        reboot_reason=args.node_reboot_reason,
        taint_effect=args.lock_taint_effect,
        default_timeout=args.lock_default_timeout,
        max_timeout=args.lock_max_timeout,
        eviction_retry=args.lock_eviction_retry,
        request_grace=args.lock_request_grace,
        workers=args.lock_workers,
        max_waiters=args.lock_max_waiters,
        max_waiters_per_node=args.lock_max_waiters_per_node,
    )


NEEDS_NODE_PERMISSIONS = (
    "--node-permissions-enabled=false, but node locking taints Nodes and sets the reboot condition, so it needs "
    "them: grant the Node write rights (chart: syncer.nodePermissions.enabled=true), or run without node locking "
    "(--node-locking=false, or --plugins=sunk.metrics.plugin; chart: syncer.nodeLocking.enabled=false)")


WAITER_SHARE_OF_THREADS = (3, 4)  # waiting pre-hooks may hold at most this share of the hook API's threads
NODES_TO_FILL_THE_WAITERS = 8  # the fewest nodes whose pre-hooks may take every waiting slot


def check_waiter_bounds(config: LockConfig, *, hooks_api_threads: int) -> None:
    """ValueError, naming the flags, for bounds on waiting pre-hooks that let a few nodes starve the others:
    waiters that could take (nearly) every hook API thread (post-hooks, health checks and quick pre-hooks need
    one too), or a per-node bound so large that a few compromised nodes hold every waiting slot."""
    share, of = WAITER_SHARE_OF_THREADS
    most_waiters = hooks_api_threads * share // of
    if config.max_waiters > most_waiters:
        raise ValueError(f"--lock-max-waiters={config.max_waiters} may take too many of the hook API's "
                         f"--hooks-api-threads={hooks_api_threads} threads: at most {share}/{of} of them "
                         f"({most_waiters}), so that post-hooks and health checks always find a thread")
    most_per_node = config.max_waiters // NODES_TO_FILL_THE_WAITERS
    if config.max_waiters_per_node > most_per_node:
        raise ValueError(f"--lock-max-waiters-per-node={config.max_waiters_per_node} lets "
                         f"{NODES_TO_FILL_THE_WAITERS} nodes or fewer hold all --lock-max-waiters="
                         f"{config.max_waiters}: at most 1/{NODES_TO_FILL_THE_WAITERS} of it ({most_per_node}"
                         f"{', so raise --lock-max-waiters' if most_per_node < 1 else ''})")


def check(config: LockConfig, *, node_permissions: bool, hooks_api_threads: int) -> None:
    """ValueError, naming the way out, for a start that could only fail later: without a usable secret (a
    placeholder one would let anybody lock Nodes), without the right to taint Nodes (every lock a 403,
    every prolog a drain), or with bounds on waiters that let a few nodes block the others' pre-hooks."""
    if not node_permissions:
        raise ValueError(NEEDS_NODE_PERMISSIONS)
    check_waiter_bounds(config, hooks_api_threads=hooks_api_threads)
    if not config.token_file:
        if not config.token_audience:
            raise ValueError("node locking needs a way to know nodes: --hooks-token-audience (their slurmd Pods' "
                             "ServiceAccount tokens), --hooks-token-file (legacy HMAC node tokens), or both")
        return
    try:
        read_secret(config.token_file)
    except TokenUnavailable as exc:
        raise ValueError(f"--hooks-token-file: {exc}") from None
