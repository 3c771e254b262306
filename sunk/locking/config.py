"""Node-locking and hook API settings, and the sunk-syncer flags that set them."""

from __future__ import annotations

import argparse

import attrs

from sunk import names
from sunk.flags import positive_duration, positive_int
from sunk.hooks.auth import TokenUnavailable, read_secret
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
    # beyond either, a retryable 429. Below --hooks-api-threads (256), so quick calls always find a thread.
    max_waiters: int = 192
    max_waiters_per_node: int = 128

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
                       help="pre-hooks that may wait for a lock at once (each holds a hook API thread; keep it "
                            "below --hooks-api-threads); beyond it a retryable 429")
    group.add_argument("--lock-max-waiters-per-node", type=positive_int, default=128,
                       help="pre-hooks that may wait for one Slurm node's lock at once; beyond it a retryable 429")


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


def check(config: LockConfig, *, node_permissions: bool) -> None:
    """ValueError, naming the way out, for a start that could only fail later: without a usable secret (a
    placeholder one would let anybody lock Nodes), or without the right to taint Nodes (every lock a 403,
    every prolog a drain)."""
    if not node_permissions:
        raise ValueError(NEEDS_NODE_PERMISSIONS)
    if not config.token_file:
        if not config.token_audience:
            raise ValueError("node locking needs a way to know nodes: --hooks-token-audience (their slurmd Pods' "
                             "ServiceAccount tokens), --hooks-token-file (legacy HMAC node tokens), or both")
        return
    try:
        read_secret(config.token_file)
    except TokenUnavailable as exc:
        raise ValueError(f"--hooks-token-file: {exc}") from None
