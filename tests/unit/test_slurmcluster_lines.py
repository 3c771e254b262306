"""The allowlist of slurm.conf keys and partition options a SlurmCluster's author may set: every key's good
and bad value, and the attacks of a hostile review (unknown keys, programs and files run or written as
root, a timeout that would kill sunk's locking prolog)."""

from __future__ import annotations

import pytest
from slurmcluster_fakes import cluster

from sunk.translate.slurmcluster import lines
from sunk.translate.slurmcluster.lines import (
    ALLOWED,
    OWNED,
    PARTITION_ALLOWED,
    PROLOG_EPILOG_TIMEOUT_FLOOR,
    UNSAFE,
    Choice,
    Integer,
    Pattern,
    Range,
    ValueType,
    Words,
    check_line,
    check_pair,
)
from sunk.translate.slurmcluster.spec import read_spec

# Good and bad values of each shape (Pattern), by the shape's message.
PATTERN_EXAMPLES: dict[str, tuple[list[str], list[str]]] = {
    lines.TIME.what: (["60", "30:00", "12:00:00", "1-00", "2-12:30", "7-00:00:00"],
                      ["UNLIMITED", "1h", "1-2-3", "-5", "/etc/passwd"]),
    lines.TIME_OR_UNLIMITED.what: (["1-00:00:00", "UNLIMITED", "infinite", "90"], ["forever", "1d", "1:2:3:4"]),
    lines.OPTIONS.what: (["bf_window=120", "bf_window=60,bf_interval=30,bf_continue", "enable_configless",
                          "task=30,energy=0", "max_rpc_cnt=150"],
                         ["bf_window=/tmp/x", "x=/etc/passwd", "a==b", ",bf_continue", "bf_window=1,", "1x=2"]),
    lines.TRES_LIST.what: (["cpu,mem,gres/gpu", "license/iop1,gres/gpu:a100"], ["cpu,,mem", "/gpu", "gres//gpu"]),
    lines.TRES_WEIGHTS.what: (["CPU=1.0,Mem=0.25G,GRES/gpu=2.0", "cpu=1"], ["CPU", "CPU=x", "CPU=1,/x=1"]),
    lines.NAME_LIST.what: (["alice,bob", "ALL", "root"], ["alice,", "a b", "../x,"]),
    lines.LICENSES.what: (["matlab:10,fluent", "x"], ["matlab:ten", "a:1:2", ":1"]),
    lines.EXIT_CODES.what: (["1", "3-5,9", "100,200"], ["1-", "a", "1,,2", "1000"]),
    lines.DOMAIN.what: (["example.com", "mail.example.org"], ["Example.com", "-x.com", "a_b.com"]),
    "a Slurm time or -1": (["-1", "1-00:00:00", "30"], ["-2", "never"]),
    "a partition name": (["batch", "gpu-a100"], ["a.b", "-x"]),
    "a QOS name": (["normal", "high.prio"], ["", "a/b"]),
    "EXCLUSIVE, NO, YES[:N] or FORCE[:N]": (["EXCLUSIVE", "no", "YES:4", "FORCE", "force:2"], ["MAYBE", "NO:2"]),
}


def examples(kind: ValueType) -> tuple[list[str], list[str]]:
    """Values ``kind`` must take and must refuse, from what it is."""
    if isinstance(kind, Integer):
        good = [str(kind.low), str(kind.high), *kind.words, *(w.lower() for w in kind.words)]
        return good, [str(kind.low - 1), str(kind.high + 1), "abc", "1.5", "1k", "0x10"]
    if isinstance(kind, Choice):
        return [*kind.words, kind.words[0].swapcase()], ["nope", kind.words[0] + "x", ",".join(kind.words[:2])]
    if isinstance(kind, Words):
        return ([kind.words[0], ",".join(kind.words), kind.words[-1].swapcase()],
                ["nope", f"{kind.words[0]},{kind.words[0]}", f"{kind.words[0]},", f"{kind.words[0]},nope"])
    if isinstance(kind, Range):
        return ([f"{kind.prefix}{kind.low}-{kind.high}", f"{kind.prefix}60001-63000"],
                [f"{kind.prefix}{kind.low - 1}-{kind.high}", f"{kind.prefix}63000-60001",
                 f"{kind.prefix}60001-{kind.high + 1}", f"{kind.prefix}60001", "x"])
    assert isinstance(kind, Pattern)
    return PATTERN_EXAMPLES[kind.what]


def every_key(table: dict[str, tuple[str, ValueType]]) -> list[tuple[str, ValueType]]:
    return sorted(table.values(), key=lambda entry: entry[0])


@pytest.mark.parametrize("key, kind", every_key(ALLOWED))
def test_every_allowed_key_takes_its_good_values_and_refuses_its_bad_ones(key, kind):
    good, bad = examples(kind)
    assert good and bad
    for value in good:
        assert check_line(f"{key}={value}") == ((key, value), None), value
        assert check_line(f"{key.lower()}={value}")[1] is None, value
    for value in bad:
        pair, problem = check_line(f"{key}={value}")
        assert pair is None and problem is not None and problem.startswith(f"{key}:"), value


@pytest.mark.parametrize("key, kind", every_key(PARTITION_ALLOWED))
def test_every_partition_option_takes_its_good_values_and_refuses_its_bad_ones(key, kind):
    good, bad = examples(kind)
    for value in good:
        assert check_pair(key, value, partition=True) == ((key, value), None), value
    for value in bad:
        pair, problem = check_pair(key, value, partition=True)
        assert pair is None and problem is not None, value


def test_the_tables_do_not_overlap_and_are_spelled_as_slurm_does():
    assert not set(ALLOWED) & set(OWNED)
    assert not set(ALLOWED) & set(UNSAFE)
    assert not set(PARTITION_ALLOWED) & set(lines.OWNED_PARTITION)
    for table in (ALLOWED, PARTITION_ALLOWED):
        assert all(lower == key.lower() and lines.KEY.fullmatch(key) for lower, (key, _) in table.items())


@pytest.mark.parametrize("line", ["Foo=bar", "MaxJobCountt=5", "ControlAddr=10.0.0.1", "BackupAddr=evil",
                                  "PrologFoo=1", "SlurmdSpoolDirectory=/tmp"])
def test_an_unknown_or_owned_key_is_refused_naming_it(line):
    key = line.split("=")[0]
    found = read_spec(cluster(slurmConfig=[line]), ("gpu",))
    assert found.spec is None and len(found.problems) == 1
    assert found.problems[0].startswith(f"spec.slurmConfig[0]: {key} ")


@pytest.mark.parametrize("line", ["MaxJobCount=abc", "MaxJobCount=-1", "MaxJobCount=99999999999",
                                  "SchedulerType=sched/../../tmp/evil", "SlurmctldDebug=loud",
                                  "SchedulerParameters=bf_window=/etc/shadow"])
def test_a_value_of_the_wrong_type_is_refused(line):
    found = read_spec(cluster(slurmConfig=[line]), ("gpu",))
    assert found.spec is None and "the value" in found.problems[0]


@pytest.mark.parametrize("key", sorted(entry for entry in UNSAFE))
def test_a_key_naming_a_program_file_or_plugin_is_never_allowed(key):
    pair, problem = check_line(f"{key}=/tmp/evil.sh")
    assert pair is None and problem is not None
    assert " names " in problem and "never set through slurmConfig" in problem


def test_the_review_attacks_are_refused_with_a_message_that_says_why():
    for line in ["HealthCheckProgram=/tmp/x", "RebootProgram=/tmp/x", "PlugStackConfig=/tmp/p", "TaskProlog=/x",
                 "TaskEpilog=/x", "PrologSlurmctld=/x", "EpilogSlurmctld=/x", "SlurmdLogFile=/etc/cron.d/x",
                 "SlurmctldLogFile=/x", "SlurmSchedLogFile=/x", "JobCompLoc=/x", "UnkillableStepProgram=/x",
                 "ResumeProgram=/x", "SuspendProgram=/x", "MailProg=/x", "JobSubmitPlugins=lua"]:
        assert read_spec(cluster(slurmConfig=[line]), ("gpu",)).spec is None, line
    _, problem = check_line("HealthCheckProgram=/tmp/x")
    assert problem is not None and problem.startswith("HealthCheckProgram names a program slurmd runs as root")
    for line in ["FooEpilog=/x", "SomethingProgram=/x", "NewPluginType=x"]:
        _, problem = check_line(line)
        assert problem is not None and "its name says it names a" in problem, line


def test_prolog_epilog_timeout_has_a_floor_above_the_prologs_lock_budget():
    assert PROLOG_EPILOG_TIMEOUT_FLOOR > 90 + 15  # the chart's default lock timeout and curl's slack
    _, problem = check_line("PrologEpilogTimeout=1")
    assert problem is not None and f"from {PROLOG_EPILOG_TIMEOUT_FLOOR}" in problem
    assert check_line(f"PrologEpilogTimeout={PROLOG_EPILOG_TIMEOUT_FLOOR - 1}")[0] is None
    assert check_line(f"PrologEpilogTimeout={PROLOG_EPILOG_TIMEOUT_FLOOR}")[1] is None
    for key in ("PrologTimeout", "EpilogTimeout"):  # would bypass the floor
        _, problem = check_line(f"{key}=1")
        assert problem is not None and "is sunk's to set" in problem


def test_an_unknown_partition_option_is_refused():
    _, problem = check_pair("Nodez", "x", partition=True)
    assert problem is not None and "is not a partition option sunk allows" in problem
    _, problem = check_pair("MaxTime", "soon", partition=True)
    assert problem is not None and problem.startswith("MaxTime: the value 'soon'")
