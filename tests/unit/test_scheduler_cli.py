"""sunk-scheduler's flags: bad values are refused at parse time, never at worker start."""

from __future__ import annotations

import argparse

import pytest

from sunk.commands.scheduler import add_common_arguments


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_common_arguments(parser, default_name="sunk-scheduler")
    return parser.parse_args(["--scheduler-name=s", "--hook-secret-file=/dev/null", *flags])


@pytest.mark.parametrize("flag", [
    "--workers=0", "--workers=-2", "--workers=many", "--submit-concurrency=0",
    "--slurm-poll-interval=0", "--slurm-poll-interval=-1s", "--slurm-kill-wait=0s", "--slurm-kill-wait=soon",
    "--stuck-pod-margin=0s", "--stuck-pod-margin=later", "--slurm-job-full-list-interval=-1s",
    "--slurm-job-full-list-interval=often", "--started-call-patience=-1s", "--started-call-patience=nan",
    "--started-call-patience=inf", "--started-call-patience=later",
])
def test_values_that_would_hang_or_spin_are_refused(flag):
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        parse(flag)


def test_go_style_values_are_read():
    args = parse("--workers=4", "--submit-concurrency=2", "--slurm-poll-interval=250ms", "--slurm-kill-wait=1m",
                 "--stuck-pod-margin=2m")
    assert (args.workers, args.submit_concurrency) == (4, 2)
    assert args.slurm_poll_interval == 0.25 and args.slurm_kill_wait == 60 and args.stuck_pod_margin == 120
    assert parse().slurm_job_full_list_interval == 300.0
    assert parse("--slurm-job-full-list-interval=0").slurm_job_full_list_interval == 0.0  # full lists only
    assert parse("--slurm-job-full-list-interval=1m").slurm_job_full_list_interval == 60.0


def test_the_stuck_pod_margin_reaches_the_config(tmp_path):
    from sunk.commands.scheduler import config_from

    secret = tmp_path / "secret"
    secret.write_text("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
    assert config_from(parse(f"--hook-secret-file={secret}")).stuck_pod_margin == 60.0
    assert config_from(parse(f"--hook-secret-file={secret}", "--stuck-pod-margin=90s")).stuck_pod_margin == 90.0


def test_the_started_call_patience_reaches_the_config_and_zero_turns_it_off(tmp_path):
    from sunk.commands.scheduler import config_from

    secret = tmp_path / "secret"
    secret.write_text("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
    assert config_from(parse(f"--hook-secret-file={secret}")).started_call_patience == 3.0
    assert config_from(parse(f"--hook-secret-file={secret}", "--started-call-patience=0s")).started_call_patience == 0
    assert config_from(parse(f"--hook-secret-file={secret}", "--started-call-patience=5s")).started_call_patience == 5



@pytest.mark.parametrize("content", ["", "REPLACE-ME", "changeme", "0123456789abcdef", "a" * 64])
def test_a_placeholder_or_short_hook_secret_refuses_to_start(tmp_path, content):
    from sunk.commands.scheduler import config_from

    secret = tmp_path / "secret"
    secret.write_text(content)
    with pytest.raises(SystemExit, match="--hook-secret-file"):
        config_from(parse(f"--hook-secret-file={secret}"))


@pytest.mark.parametrize(("flags", "needle"), [
    (["--hooks-url=https://sched:8000"], "is https"),
    (["--hooks-url=http://sched:8000", "--hooks-tls-cert-file=c", "--hooks-tls-key-file=k"], "plain http"),
])
def test_a_hooks_url_that_does_not_match_the_listener_refuses_to_start(tmp_path, flags, needle):
    from sunk.commands.scheduler import config_from

    secret = tmp_path / "secret"
    secret.write_text("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
    with pytest.raises(SystemExit, match=needle):
        config_from(parse(f"--hook-secret-file={secret}", *flags))


@pytest.mark.parametrize(("value", "pairs"), [
    ("NVIDIA_L4=l4,H100_SXM=h100", (("NVIDIA_L4", "l4"), ("H100_SXM", "h100"))),
    ("NVIDIA_L4: l4", (("NVIDIA_L4", "l4"),)),  # as SUNK's gpuTypes YAML writes it
    ("", ()),
])
def test_gpu_types_are_read(value, pairs):
    assert parse(f"--gpu-types={value}").gpu_types == pairs


@pytest.mark.parametrize("value", ["NVIDIA_L4", "NVIDIA_L4=", "a b=c", "L4=l4,L4=l4x", "L4=l4;rm"])
def test_bad_gpu_types_are_refused(value):
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        parse(f"--gpu-types={value}")


@pytest.mark.parametrize("front_end", ["sunk.commands.scheduler", "sunk.commands.extender"])
def test_the_placement_daemons_read_jobs_without_their_allocations(tmp_path, monkeypatch, front_end):
    """Placement reads a job's nodes, state and Extra: the Slurm client asks without slurmrestd's DETAIL (a third
    of the bytes per job read, the scheduler's most decoded JSON in a burst); only the Syncer's metrics need it."""
    import importlib

    import sunk.commands.scheduler

    secret = tmp_path / "secret"
    secret.write_text("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
    daemons = []
    monkeypatch.setattr(sunk.commands.scheduler, "run", lambda daemon, build, served: daemons.append(daemon) or 0)
    module = importlib.import_module(front_end)
    assert module.main(["--scheduler-name=s", f"--hook-secret-file={secret}", "--slurm-auth-token=t",
                        "--leader-elect=false"]) == 0
    assert daemons[0].slurm.job_allocations is False


def test_shard_classes_need_the_rest_backend_and_reach_the_config(tmp_path):
    """pyslurm reads a job's ``shard:2(0/4,2/4)`` as a bare count: which GPU the shards are on would be lost."""
    from sunk.commands.scheduler import config_from

    secret = tmp_path / "secret"
    secret.write_text("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
    mapping = "--dra-device-mapping=driver=d,device-class=g,shard-class=s,attribute=index"
    config = config_from(parse(f"--hook-secret-file={secret}", mapping))
    assert config.dra is not None and config.dra.shard_classes == {"s"}
    with pytest.raises(SystemExit, match="shard classes, which need --slurm-backend=rest"):
        config_from(parse(f"--hook-secret-file={secret}", mapping, "--slurm-backend=pyslurm"))
    whole = "--dra-device-mapping=driver=d,device-class=g,attribute=index"
    assert config_from(parse(f"--hook-secret-file={secret}", whole, "--slurm-backend=pyslurm")).dra is not None
