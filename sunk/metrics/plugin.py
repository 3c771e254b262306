"""``PLUGIN``: the Syncer's Slurm metrics table (``/metrics`` on --metrics-bind-address)."""

from __future__ import annotations

import argparse

from prometheus_client import REGISTRY

from sunk.flags import duration
from sunk.slurm.cache import JOB, NODE
from sunk.syncer.context import PluginParts, SyncerContext

from .collector import DiagPoller, SlurmCollector

_installed: list[SlurmCollector] = []


def register(collector: SlurmCollector) -> None:
    """One Slurm collector per process: a re-assembled Syncer (tests) replaces the last one."""
    while _installed:
        REGISTRY.unregister(_installed.pop())
    REGISTRY.register(collector)
    _installed.append(collector)


class MetricsPlugin:
    name = "slurm-metrics"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--slurm-diag-interval", type=duration, default=15.0,
                            help="how often the slurm_scheduler_* figures are fetched (one diag call)")

    def install(self, ctx: SyncerContext) -> PluginParts:
        cache = ctx.slurm_cache
        diag = DiagPoller(ctx.slurm.diag, interval=ctx.args.slurm_diag_interval)
        collector = SlurmCollector(
            nodes=cache.nodes, jobs=cache.jobs, diag=diag, rpc_stats=ctx.slurm.rpc_stats,
            freshness=lambda: {NODE: cache.fresh, JOB: cache.jobs_fresh},
            active=ctx.is_leader,
        )
        register(collector)
        return PluginParts(runnables=((diag, True),))


PLUGIN = MetricsPlugin()
