"""benchmarks/syncer.py's pure helpers: the A/B summary and which module runs another checkout's Syncer.

The benchmark itself needs the dev cluster; nothing here does.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import syncer as b


def result(drain_ms: float, cpu: float, idle_calls: float | None = 5.6) -> dict:
    out: dict = {"slurm_to_kubernetes": {"drain": {"p50_ms": drain_ms}}, "syncer_cpu_s": cpu}
    if idle_calls is not None:
        out["idle"] = {"slurm_calls_per_s": idle_calls}
    return out


def test_figure_reads_a_path_and_says_none_for_a_missing_or_odd_one():
    r = result(120.0, 1.25)
    assert b.figure(r, ("slurm_to_kubernetes", "drain", "p50_ms")) == 120.0
    assert b.figure(r, ("syncer_cpu_s",)) == 1.25
    assert b.figure(r, ("kubernetes_to_slurm", "drain_on_not_ready", "p50_ms")) is None
    assert b.figure({"slurm_to_kubernetes": {"drain": {"n": 0}}}, ("slurm_to_kubernetes", "drain", "p50_ms")) is None
    assert b.figure({"syncer_cpu_s": "1.2"}, ("syncer_cpu_s",)) is None


def test_the_ab_summary_is_this_over_baseline_per_round_with_median_and_spread():
    rounds = [
        {"this": result(100, 1.0), "baseline": result(200, 1.0)},  # 0.5, 1.0
        {"this": result(300, 2.0), "baseline": result(100, 1.0)},  # 3.0, 2.0
        {"this": result(150, 1.5), "baseline": result(150, 1.0)},  # 1.0, 1.5
    ]
    summary = b.ab_summary(rounds)
    drain = summary["slurm_to_kubernetes_drain_p50_ms"]
    assert drain == {"rounds": 3, "this_median": 150, "baseline_median": 150, "ratio_median": 1.0,
                     "ratio_min": 0.5, "ratio_max": 3.0}
    cpu = summary["syncer_cpu_s"]
    assert (cpu["ratio_median"], cpu["ratio_min"], cpu["ratio_max"]) == (1.5, 1.0, 2.0)
    assert set(summary) == set(b.AB_FIGURES)


def test_a_figure_one_side_lacks_drops_that_round_from_the_ratios_not_the_run():
    rounds = [
        {"this": result(100, 1.0, idle_calls=None), "baseline": result(100, 1.0)},
        {"this": result(100, 1.0, idle_calls=6.0), "baseline": result(100, 1.0, idle_calls=3.0)},
    ]
    idle = b.ab_summary(rounds)["idle_slurm_calls_per_s"]
    assert (idle["ratio_median"], idle["ratio_min"], idle["ratio_max"]) == (2.0, 2.0, 2.0)
    assert (idle["rounds"], idle["this_median"], idle["baseline_median"]) == (1, 6.0, 3.0)  # the same rounds
    nothing = b.ab_summary([{"this": {}, "baseline": {}}])["syncer_cpu_s"]
    assert nothing == {"rounds": 0, "this_median": None, "baseline_median": None, "ratio_median": None,
                       "ratio_min": None, "ratio_max": None}


def test_a_round_whose_syncer_died_is_left_out():
    dead = {**result(900, 9.0), "syncer_alive": False}
    rounds = [{"this": result(100, 1.0), "baseline": result(100, 2.0)}, {"this": dead, "baseline": result(100, 1.0)}]
    cpu = b.ab_summary(rounds)["syncer_cpu_s"]
    assert (cpu["rounds"], cpu["ratio_median"]) == (1, 0.5)


def test_the_rounds_alternate_which_syncer_goes_first(tmp_path: Path, capsys):
    ran: list[str] = []

    def one_run(args, tree):
        ran.append("baseline" if tree else "this")
        return result(100, 1.0)

    args = SimpleNamespace(rounds=3, baseline_tree=tmp_path)
    out = b.run_ab(args, one_run)  # type: ignore[arg-type]
    assert ran == ["this", "baseline", "baseline", "this", "this", "baseline"]
    assert len(out["rounds"]) == 3 and out["ab"]["syncer_cpu_s"]["rounds"] == 3
    printed = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(p["round"], p["first"]) for p in printed] == [(0, "this"), (1, "baseline"), (2, "this")]


@pytest.mark.parametrize(("argv", "says"), [
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--rounds", "3"], "--rounds goes with --baseline-tree"),
    (["--baseline-tree", "/nonexistent/tree"], "no sunk/ there"),
])
def test_options_that_cannot_run_are_refused_before_anything_starts(argv, says, capsys):
    with pytest.raises(SystemExit):
        b.main(argv)
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(("layout", "module"), [
    ("sunk/syncer/cli.py", "sunk.syncer.cli"),  # a checkout from before the layer folders
    ("sunk/commands/syncer.py", "sunk.commands.syncer"),
])
def test_another_checkouts_syncer_runs_from_where_that_checkout_keeps_it(tmp_path: Path, layout: str, module: str):
    (tmp_path / layout).parent.mkdir(parents=True)
    (tmp_path / layout).write_text("")
    process, metrics = b.syncer_process("kc", "http://slurm", "t", "ns", "run", tmp_path / "logs", 1.0, 0.25,
                                        tree=tmp_path)
    assert process.module == module and process.cwd == tmp_path
    assert process.env["PYTHONPATH"] == str(tmp_path)
    assert metrics.startswith("http://127.0.0.1:") and metrics.endswith("/metrics")
    this, _ = b.syncer_process("kc", "http://slurm", "t", "ns", "run", tmp_path / "logs", 1.0, 0.25)
    assert this.module == "sunk.commands.syncer" and this.log != process.log
