"""``PLUGIN``: the Syncer's Slurm metrics table (``/metrics`` on --metrics-bind-address)."""

from __future__ import annotations

import argparse

from sunk.controller.textsources import register_text
from sunk.flags import positive_duration
from sunk.slurm.cache import JOB, NODE
from sunk.syncer.context import PluginParts, SyncerContext

from .collector import DiagPoller, SlurmMetrics


class MetricsPlugin:
    name = "slurm-metrics"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--slurm-diag-interval", type=positive_duration, default=15.0,
                            help="how often the slurm_scheduler_* figures are fetched (one diag call)")

    def install(self, ctx: SyncerContext, args: argparse.Namespace) -> PluginParts:
        cache = ctx.slurm_cache
        diag = DiagPoller(ctx.slurm.diag, interval=args.slurm_diag_interval)
        table = SlurmMetrics(
            nodes=cache.nodes, jobs=cache.jobs, diag=diag,
            freshness=lambda: {NODE: cache.fresh, JOB: cache.jobs_fresh},
            active=ctx.is_leader,
        )
        register_text("slurm", table.pieces)  # one per process: a re-assembled Syncer replaces it
        return PluginParts(runnables=((diag, True),))


PLUGIN = MetricsPlugin()
