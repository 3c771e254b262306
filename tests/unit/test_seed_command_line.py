"""The scheduler's argument list in SUNK's docs (sunk-schedule-pods-with-slurm) starts sunk-scheduler, each
value meaning what the seed says; and the flag types behind it, one behaviour each."""

from __future__ import annotations

import argparse
import logging

import pytest

from sunk.base.flags import components_flag, configure_logging, expand_references, log_level
from sunk.commands import scheduler as cli
from sunk.controller.daemon import daemon_config
from sunk.slurm.settings import api_base_warning, base_url, given_token

# Copied from the seed as it is (`kubectl get pods -l app.kubernetes.io/name=sunk-scheduler ... .args`): the
# Pod spec's args, before the kubelet expands $(SLURM_TOKEN) from the container's env.
SEED_ARGS = [
    "--health-probe-bind-address=:8081",
    "--metrics-bind-address=:8080",
    "--hooks-api-bind-address=:8000",
    "--zap-log-level=debug",
    "--components",
    "scheduler",
    "--slurm-auth-token=$(SLURM_TOKEN)",
    "--slurm-api-base=slurm-controller:6817",
    "--slurm-kill-wait=30s",
    "--watch-namespace=slurm-staging",
    "--scheduler-name=tenant-slurm-staging-slurm-scheduler",
]
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJyb290In0.c2lnbmF0dXJl"


@pytest.fixture
def seed_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_TOKEN", TOKEN)
    monkeypatch.setenv("POD_NAMESPACE", "tenant-slurm-staging")
    monkeypatch.delenv("SLURM_JWT", raising=False)
    monkeypatch.delenv("SLURM_REST_URL", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def test_the_seeds_arguments_build_the_scheduler_each_value_meaning_what_the_seed_says(seed_env, caplog):
    parser = cli.build_parser()
    args = parser.parse_args(SEED_ARGS)
    with caplog.at_level(logging.WARNING):
        config = cli.config_from(args)
        daemon = daemon_config(args, parser, name=parser.prog, lease_namespace=cli.own_namespace())

    assert args.components == [("scheduler",)]
    assert log_level(args.zap_log_level) == logging.DEBUG
    assert (daemon.health_bind_address, daemon.metrics_bind_address) == (":8081", ":8080")
    assert args.hooks_api_bind_address == ":8000" and config.hooks_url == "http://127.0.0.1:8000"
    assert daemon.slurm.backend == "rest"
    assert daemon.slurm.url == "http://slurm-controller:6817"  # http: slurmrestd's own listener; the port as given
    assert daemon.slurm.token == TOKEN  # $(SLURM_TOKEN), read from the environment as the kubelet would
    assert config.kill_wait_seconds == 30
    assert config.namespaces == ("slurm-staging",)
    assert config.scheduler_name == "tenant-slurm-staging-slurm-scheduler"
    assert len(config.hook_secret) == 64  # no --hook-secret-file in the seed: a key made at start
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no --hook-secret-file" in w and "another replica" in w for w in warnings)
    assert any("6817 is slurmctld's" in w and "http://slurm-controller:6820" in w for w in warnings)
    assert not any("command line" in w for w in warnings)  # the token came from the environment, not from argv


def test_the_seeds_arguments_start_the_daemon(seed_env, monkeypatch):
    """The whole start path up to the fork (logging, config, listeners), with the run itself stubbed."""
    started = []
    monkeypatch.setattr(cli, "run", lambda daemon, build, served: started.append((daemon, served)) or 0)
    assert cli.main(list(SEED_ARGS)) == 0
    daemon, served = started[0]
    assert daemon.slurm.url == "http://slurm-controller:6817" and [s.address for s in served] == [":8000"]
    assert logging.getLogger().level == logging.DEBUG


def test_two_starts_make_two_hook_keys_and_a_secret_file_is_still_read(seed_env, tmp_path):
    args = cli.build_parser().parse_args(SEED_ARGS)
    assert cli.config_from(args).hook_secret != cli.config_from(args).hook_secret
    secret = tmp_path / "secret"
    secret.write_text("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
    args = cli.build_parser().parse_args([*SEED_ARGS, f"--hook-secret-file={secret}"])
    assert cli.config_from(args).hook_secret == secret.read_bytes()


def test_a_default_hooks_url_inside_a_pod_is_named_as_unreachable(seed_env, monkeypatch, caplog):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    with caplog.at_level(logging.WARNING):
        cli.config_from(cli.build_parser().parse_args(SEED_ARGS))
        cli.config_from(cli.build_parser().parse_args([*SEED_ARGS, "--hooks-url=http://sched.ns.svc:8000"]))
    assert sum("no --hooks-url" in r.getMessage() for r in caplog.records) == 1


# -- --components ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("flags", "components"), [
    ([], None), (["--components", "scheduler"], [("scheduler",)]), (["--components=Scheduler"], [("scheduler",)]),
    (["--components=scheduler,scheduler"], [("scheduler", "scheduler")]),
])
def test_the_scheduler_component_is_accepted(seed_env, flags, components):
    assert cli.build_parser().parse_args(["--slurm-auth-token=t", *flags]).components == components


@pytest.mark.parametrize(("value", "needle"), [
    ("syncer", "run by sunk-syncer"), ("scheduler,extender", "run by sunk-extender"),
    ("operator", "run by sunk-operator"), ("sched", "unknown component 'sched'"), ("", "no component"),
    (",", "no component"),
])
def test_any_other_component_stops_the_start_saying_why(value, needle):
    check = components_flag("scheduler", cli.COMPONENTS_ELSEWHERE)
    with pytest.raises(argparse.ArgumentTypeError, match=needle):
        check(value)


def test_an_unknown_component_is_not_echoed_raw():
    with pytest.raises(argparse.ArgumentTypeError) as err:
        components_flag("scheduler", {})("x\ny")
    assert "\n" not in str(err.value)


# -- --slurm-api-base ------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "url"), [
    ("slurm-controller:6817", "http://slurm-controller:6817"),
    ("slurm-restapi:6820", "http://slurm-restapi:6820"),
    ("10.0.0.5:6820", "http://10.0.0.5:6820"),
    ("[fd00::5]:6820", "http://[fd00::5]:6820"),
    ("slurm-restapi", "http://slurm-restapi"),  # no port added: http's own
    ("localhost:6820", "http://localhost:6820"),  # not read as a scheme "localhost"
    ("http://slurm-restapi:6820/", "http://slurm-restapi:6820"),
    ("https://slurm.example.com/api", "https://slurm.example.com/api"),
    ("HTTP://Slurm:6820", "HTTP://Slurm:6820"),
])
def test_a_base_url_without_a_scheme_is_http(text, url):
    assert base_url(text) == url


@pytest.mark.parametrize("text", ["", ":6820", "ftp://slurm:6820", "unix:///run/slurmrestd.sock", "slurm:port",
                                  "slurm:99999", "http://slurm:6820?x=1", "http://slurm:6820#x", "slurm rest:6820",
                                  "http://"])
def test_a_base_url_that_cannot_work_is_refused(text):
    with pytest.raises(ValueError):
        base_url(text)


def test_the_flag_reads_a_scheme_less_base_and_refuses_a_bad_one(seed_env):
    parser = cli.build_parser()
    parser.exit_on_error = False
    assert parser.parse_args(["--slurm-api-base=restapi:6820"]).slurm_api_base == "http://restapi:6820"
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        parser.parse_args(["--slurm-api-base=ftp://restapi:6820"])


@pytest.mark.parametrize(("url", "daemon"), [
    ("http://slurm-controller:6817", "slurmctld"), ("http://node-1:6818", "slurmd"), ("https://db:6819", "slurmdbd"),
])
def test_a_slurm_rpc_port_is_warned_of_with_the_likely_fix(url, daemon):
    warning = api_base_warning(url)
    assert warning is not None and f"{daemon}'s default port" in warning
    assert f"{url.rsplit(':', 1)[0]}:6820" in warning


@pytest.mark.parametrize("url", ["http://slurm-restapi:6820", "http://slurm-restapi", "https://s:443/x"])
def test_a_usual_slurmrestd_url_is_not_warned_of(url):
    assert api_base_warning(url) is None


# -- --slurm-auth-token ----------------------------------------------------------------------------
def token_args(*flags: str) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = cli.build_parser()
    parser.exit_on_error = False
    return parser.parse_args(list(flags)), parser


def test_a_token_written_on_the_command_line_works_and_is_warned_of_once(caplog):
    args, parser = token_args(f"--slurm-auth-token={TOKEN}")
    with caplog.at_level(logging.WARNING):
        assert given_token(args, parser, {}) == TOKEN
    assert [r.getMessage() for r in caplog.records if "ps" in r.getMessage()] != []
    assert all(TOKEN not in r.getMessage() for r in caplog.records)
    assert len(caplog.records) == 1


def test_a_token_reference_is_read_from_the_environment_without_the_warning(caplog):
    args, parser = token_args("--slurm-auth-token=$(SLURM_TOKEN)")
    with caplog.at_level(logging.WARNING):
        assert given_token(args, parser, {"SLURM_TOKEN": TOKEN}) == TOKEN
    assert not caplog.records


def test_a_token_reference_to_an_unset_variable_stops_the_start_naming_it(capsys):
    args, parser = token_args("--slurm-auth-token=$(SLURM_TOKEN)")
    with pytest.raises(SystemExit):
        given_token(args, parser, {"SLURM_JWT": TOKEN})
    assert "$(SLURM_TOKEN) is not set" in capsys.readouterr().err


def test_without_the_flag_the_token_is_slurm_jwt_and_no_warning(caplog):
    args, parser = token_args()
    with caplog.at_level(logging.WARNING):
        assert given_token(args, parser, {"SLURM_JWT": TOKEN}) == TOKEN
        assert given_token(args, parser, {}) is None
    assert not caplog.records


@pytest.mark.parametrize(("text", "environ", "expanded"), [
    ("$(A)", {"A": "x"}, "x"), ("a$(A)b$(B)", {"A": "1", "B": "2"}, "a1b2"), ("$(A)", {}, "$(A)"),
    ("$$(A)", {"A": "x"}, "$(A)"), ("$$", {}, "$"), ("$A", {"A": "x"}, "$A"), ("$(A", {"A": "x"}, "$(A"),
    ("$(A)", {"A": "$(B)", "B": "no"}, "$(B)"),  # one pass, as the kubelet's
])
def test_references_expand_as_the_kubelet_expands_them(text, environ, expanded):
    assert expand_references(text, environ) == expanded


# -- zap's flags -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "level"), [
    ("debug", logging.DEBUG), ("DEBUG", logging.DEBUG), ("info", logging.INFO), ("warn", logging.WARNING),
    ("error", logging.ERROR), ("panic", logging.CRITICAL), ("1", logging.DEBUG), ("5", logging.DEBUG),
])
def test_zap_log_levels_are_read_as_zap_reads_them(text, level):
    assert log_level(text) == level


@pytest.mark.parametrize("text", ["", "0", "-1", "verbose", "1.5"])
def test_anything_else_is_no_log_level(text):
    with pytest.raises(ValueError):
        log_level(text)


@pytest.mark.parametrize("flag", ["--zap-log-level=loud", "--zap-log-level=0", "--zap-encoder=xml"])
def test_bad_zap_flags_are_refused_at_parse_time(flag):
    parser = cli.build_parser()
    parser.exit_on_error = False
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        parser.parse_args([flag])


def test_the_console_encoder_writes_lines_for_a_person(capsys):
    try:
        configure_logging("info", "console")
        logging.getLogger("sunk.test").info("hello %s", "there")
        configure_logging("info")
        logging.getLogger("sunk.test").info("as json")
    finally:
        configure_logging("info")
    console, json_line = capsys.readouterr().err.splitlines()
    assert console.split("\t")[1:] == ["INFO", "sunk.test", "hello there"]
    assert json_line.startswith("{") and '"msg": "as json"' in json_line
