"""The Slurm metrics table's settings, and the sunk-syncer flags that set them."""

from __future__ import annotations

import argparse

import attrs

from sunk.base.flags import positive_duration

DIAG_INTERVAL = 15.0  # seconds between diag calls (the slurm_scheduler_* figures)


@attrs.frozen
class MetricsConfig:
    diag_interval: float = DIAG_INTERVAL


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--slurm-diag-interval", type=positive_duration, default=DIAG_INTERVAL,
                        help="how often the slurm_scheduler_* figures are fetched (one diag call)")


def config_from(args: argparse.Namespace) -> MetricsConfig:
    return MetricsConfig(diag_interval=args.slurm_diag_interval)
