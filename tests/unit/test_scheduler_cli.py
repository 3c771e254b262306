"""sunk-scheduler's flags: bad values are refused at parse time, never at worker start."""

from __future__ import annotations

import argparse

import pytest

from scheduler.cli import add_common_arguments


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_common_arguments(parser, default_name="sunk-scheduler")
    return parser.parse_args(["--scheduler-name=s", "--hook-secret-file=/dev/null", *flags])


@pytest.mark.parametrize("flag", [
    "--workers=0", "--workers=-2", "--workers=many", "--submit-concurrency=0",
    "--slurm-poll-interval=0", "--slurm-poll-interval=-1s", "--slurm-kill-wait=0s", "--slurm-kill-wait=soon",
])
def test_values_that_would_hang_or_spin_are_refused(flag):
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        parse(flag)


def test_go_style_values_are_read():
    args = parse("--workers=4", "--submit-concurrency=2", "--slurm-poll-interval=250ms", "--slurm-kill-wait=1m")
    assert (args.workers, args.submit_concurrency) == (4, 2)
    assert args.slurm_poll_interval == 0.25 and args.slurm_kill_wait == 60

