"""Every daemon's Slurm token on /metrics: its expiry and Slurm's refusals (issue 18, item 3)."""

from __future__ import annotations

import time

import jwt
import pytest
from prometheus_client import REGISTRY

from sunk.controller import slurmauth
from sunk.slurm import connect
from sunk.slurm.errors import AuthenticationFailed
from sunk_dev.fakeslurm import FakeSlurmrestd


@pytest.fixture(autouse=True)
def unwatch():
    yield
    slurmauth.watch(None)


def sample(name: str, source: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"source": source})


def test_a_token_file_shows_its_expiry_and_the_refusals():
    expires = time.time() + 3600
    token = jwt.encode({"iat": int(time.time()), "exp": int(expires), "sun": "root"}, b"k" * 32, algorithm="HS256")
    with FakeSlurmrestd(token=token) as fake:
        client = connect("rest", url=fake.url, token=token)
        slurmauth.watch(client)
        source = "the fixed token given at start"
        assert client.ping()
        assert sample("sunk_slurm_token_expiry_seconds", source) == pytest.approx(expires - time.time(), abs=5)
        assert sample("sunk_slurm_auth_failures_total", source) == 0
        fake.token = "rotated"
        with pytest.raises(AuthenticationFailed):
            client.list_jobs()
        assert sample("sunk_slurm_auth_failures_total", source) == 1
        client.close()


def test_a_client_without_tokens_shows_nothing():
    slurmauth.watch(object())
    assert REGISTRY.get_sample_value("sunk_slurm_auth_failures_total", {"source": "munge"}) is None
