"""The flags every daemon shares are one declaration (sunk.controller.daemon.add_daemon_arguments): each
daemon takes them in the same forms, with the same defaults but for what differs by design."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from sunk.commands import operator as operator_cli
from sunk.commands import scheduler as scheduler_cli
from sunk.commands import syncer as syncer_cli
from sunk.controller.daemon import daemon_config


def extender_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sunk-extender")
    scheduler_cli.add_common_arguments(parser, default_name="sunk-extender")
    return parser


PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "sunk-scheduler": scheduler_cli.build_parser, "sunk-extender": extender_parser,
    "sunk-syncer": syncer_cli.build_parser, "sunk-operator": operator_cli.build_parser,
}
SHARED = ("--kubeconfig", "--slurm-api-base", "--slurm-poll-interval", "--metrics-bind-address",
          "--health-probe-bind-address", "--leader-elect", "--leader-election-namespace", "--leader-election-id",
          "--workers", "--zap-log-level", "--zap-encoder")


def parse(daemon: str, *flags: str) -> argparse.Namespace:
    return PARSERS[daemon]().parse_args(["--slurm-auth-token=t", *flags])


@pytest.mark.parametrize("daemon", PARSERS)
@pytest.mark.parametrize(("flags", "elected"), [
    ((), True), (("--leader-elect",), True), (("--leader-elect=true",), True), (("--leader-elect", "true"), True),
    (("--leader-elect=false",), False), (("--leader-elect", "false"), False), (("--leader-elect=0",), False),
])
def test_leader_election_reads_alike_everywhere(daemon: str, flags: tuple[str, ...], elected: bool):
    assert parse(daemon, *flags).leader_elect is elected


@pytest.mark.parametrize("daemon", PARSERS)
def test_the_shared_flags_and_defaults(daemon: str):
    parser = PARSERS[daemon]()
    options = {option for action in parser._actions for option in action.option_strings}
    assert set(SHARED) <= options
    args = parse(daemon)
    assert (args.metrics_bind_address, args.health_probe_bind_address) == (":8080", ":8081")
    assert (args.kubeconfig, args.leader_election_namespace, args.leader_election_id) == (None, None, None)
    assert (args.zap_log_level, args.zap_encoder) == ("info", "json")


@pytest.mark.parametrize(("daemon", "workers", "poll"), [("sunk-scheduler", 16, 0.5), ("sunk-extender", 16, 0.5),
                                                         ("sunk-syncer", 4, 1.0), ("sunk-operator", 2, 1.0)])
def test_what_differs_by_design_is_a_parameter(daemon: str, workers: int, poll: float):
    args = parse(daemon)
    assert (args.workers, args.slurm_poll_interval) == (workers, poll)


@pytest.mark.parametrize("daemon", PARSERS)
@pytest.mark.parametrize("flag", ["--leader-elect=maybe", "--workers=0", "--zap-log-level=loud"])
def test_bad_shared_values_stop_every_daemon(daemon: str, flag: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exc:
        parse(daemon, flag)
    assert exc.value.code == 2 and flag.partition("=")[0] in capsys.readouterr().err


def test_the_lease_takes_the_daemons_name_and_namespace_unless_told():
    parser = operator_cli.build_parser()
    default = daemon_config(parser.parse_args(["--slurm-auth-token=t"]), parser, name="sunk-operator",
                            lease_namespace="hpc")
    assert default.leader_election is not None
    assert (default.leader_election.lease_name, default.leader_election.namespace) == ("sunk-operator", "hpc")
    told = daemon_config(parser.parse_args(["--slurm-auth-token=t", "--leader-election-id=l",
                                            "--leader-election-namespace=n"]), parser, name="sunk-operator",
                         lease_namespace="hpc")
    assert told.leader_election is not None
    assert (told.leader_election.lease_name, told.leader_election.namespace) == ("l", "n")
    off = daemon_config(parser.parse_args(["--slurm-auth-token=t", "--leader-elect", "false"]), parser,
                        name="sunk-operator", lease_namespace="hpc")
    assert off.leader_election is None


@pytest.mark.parametrize(("argv", "value"), [([], None), (["--on"], True), (["--on=no"], False), (["--on", "1"], True),
                                             (["--on", "--other=x"], True)])
def test_a_switch_reads_gos_forms_and_tells_absent_from_false(argv: list[str], value: bool | None):
    from sunk.base.flags import add_switch

    parser = argparse.ArgumentParser()
    add_switch(parser, "--on", default=None, help="")
    parser.add_argument("--other")
    assert parser.parse_args(argv).on is value
