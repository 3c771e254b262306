"""A daemon's own calls to Slurm are reported under its own names, never as slurmctld's ``slurm_controller_rpc_*``."""

from __future__ import annotations

import types

from prometheus_client import REGISTRY, generate_latest

import scheduler.metrics
import sunk.syncer.metrics
from sunk.model.slurm import RpcStat

CALLS = {"REQUEST_JOB_STATE": RpcStat("REQUEST_JOB_STATE", 3, 0.02), "REQUEST_PING": RpcStat("REQUEST_PING", 1, 0.5)}


def test_the_scheduler_reports_its_clients_calls_and_mean_durations():
    scheduler.metrics.register(types.SimpleNamespace(rpc_stats=lambda: CALLS))  # type: ignore[arg-type]
    try:
        assert REGISTRY.get_sample_value("sunk_scheduler_slurm_requests_total",
                                         {"message_type": "REQUEST_JOB_STATE"}) == 3
        assert REGISTRY.get_sample_value("sunk_scheduler_slurm_request_mean_duration_seconds",
                                         {"message_type": "REQUEST_PING"}) == 0.5
        assert b"slurm_controller_rpc" not in generate_latest(REGISTRY)
    finally:
        scheduler.metrics.SLURM_REQUESTS.rpc_stats = dict


def test_the_syncer_reports_its_clients_calls_and_mean_durations():
    families = {f.name: {s.labels["message_type"]: s.value for s in f.samples}
                for f in sunk.syncer.metrics.SlurmRequests(lambda: CALLS).collect()}
    assert families == {"sunk_syncer_slurm_requests": {"REQUEST_JOB_STATE": 3, "REQUEST_PING": 1},
                        "sunk_syncer_slurm_request_mean_duration_seconds": {"REQUEST_JOB_STATE": 0.02,
                                                                            "REQUEST_PING": 0.5}}
