"""benchmarks/create_bound.py's figures: the parts of a Pod's time, the goal, the spread over rounds."""

from benchmarks.create_bound import GOAL_P50_S, GOAL_P99_S, spread, summary


def sample(whole: float, queue: float) -> dict:
    return {"p50_s": whole, "create_to_submit_p50_s": 0.01, "slurm_queue_p50_s": queue,
            "outside_queue_p50_s": whole - queue}


def test_the_goal_holds_only_when_both_percentiles_are_under_it():
    assert summary([sample(0.5, 0.4)] * 10)["goal"]["met"]
    slow_tail = [sample(0.5, 0.4)] * 9 + [sample(GOAL_P99_S + 0.1, 1.0)]
    assert summary(slow_tail)["create_to_bound"]["p99"] > GOAL_P99_S
    assert not summary(slow_tail)["goal"]["met"]
    assert not summary([sample(GOAL_P50_S + 0.1, 0.9)] * 10)["goal"]["met"]


def test_no_samples_is_no_goal_met():
    assert not summary([])["goal"]["met"]


def test_each_part_is_summarised_apart():
    out = summary([sample(0.6, 0.5), sample(0.8, 0.6), sample(0.4, 0.1)])
    assert out["create_to_bound"]["p50"] == 0.6
    assert out["slurm_queue"]["max"] == 0.6
    assert out["outside_queue"]["p50"] == 0.2


def test_the_spread_is_over_rounds():
    rounds = [[sample(0.5, 0.4), sample(0.7, 0.4)], [sample(0.9, 0.4), sample(1.1, 0.4)]]
    out = spread(rounds)
    assert out["round_p99s"] == [0.7, 1.1]
    assert out["p99_range"] == [0.7, 1.1]
    assert out["p50_range"][0] < out["p50_range"][1]


def test_every_round_covers_the_whole_second_at_other_phases():
    from benchmarks.create_bound import sample_phase

    phases = [[sample_phase(r * 4 + i, 4, 2) for i in range(4)] for r in range(2)]
    assert phases[0] == [0.0, 0.25, 0.5, 0.75]
    assert phases[1] == [0.125, 0.375, 0.625, 0.875]


def test_with_dra_each_kind_is_summarised_apart_and_their_ratio_taken_per_round():
    from benchmarks.create_bound import by_kind, gpu_pod

    def kind(name: str, whole: float) -> dict:
        return {**sample(whole, 0.1), "kind": name}

    rounds = [[kind("plugin", 0.5), kind("claim", 0.6)], [kind("plugin", 0.4), kind("claim", 0.6)]]
    out = by_kind(rounds)
    assert out["plugin"]["samples"] == 2 and out["claim"]["create_to_bound"]["p50"] == 0.6
    assert out["claim_over_plugin_per_round"] == [1.2, 1.5] and out["claim_over_plugin_range"] == [1.2, 1.5]
    claimed, plugin = gpu_pod("a", True)["spec"], gpu_pod("b", False)["spec"]
    assert claimed["resourceClaims"][0]["resourceClaimTemplateName"] and "resourceClaims" not in plugin
    assert plugin["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
