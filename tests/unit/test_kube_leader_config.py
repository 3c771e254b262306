"""LeaderElectionConfig: client-go defaults and the timing invariant that makes election safe."""

from __future__ import annotations

import pytest

from sunk.kube.leader import LeaderElectionConfig, micro_time


def test_config_validates_timing_ratios():
    with pytest.raises(ValueError):
        LeaderElectionConfig("x", "ns", lease_duration=5, renew_deadline=10, retry_period=2)
    cfg = LeaderElectionConfig("x", "ns")
    assert (cfg.lease_duration, cfg.renew_deadline, cfg.retry_period) == (15.0, 10.0, 2.0)
    assert cfg.identity and cfg.identity != LeaderElectionConfig("x", "ns").identity


def test_micro_time_format():
    assert micro_time(0) == "1970-01-01T00:00:00.000000Z"
