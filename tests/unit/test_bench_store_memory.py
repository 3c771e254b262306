"""benchmarks/store_memory.py: its objects are the size it says, and it tells a trimmed store from a whole one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import store_memory

ROOT = Path(__file__).resolve().parents[2]


def measured(pods: int, nodes: int, whole_up_to: int) -> list[store_memory.Held]:
    """``store_memory.measure`` in an interpreter of its own, as the benchmark runs: tracemalloc counts every
    thread's allocations, and in the test process a thread an earlier test left (an informer's relist) once
    added megabytes to a trimmed store's figure."""
    code = ("import json, sys, attrs; from benchmarks import store_memory; "
            "print(json.dumps([attrs.asdict(h) for h in store_memory.measure(*map(int, sys.argv[1:]))]))")
    done = subprocess.run([sys.executable, "-c", code, str(pods), str(nodes), str(whole_up_to)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [store_memory.Held(**h) for h in json.loads(done.stdout)]


def test_its_pods_and_nodes_weigh_what_real_ones_do_and_trim_to_what_the_syncer_reads() -> None:
    assert 20_000 < len(store_memory.pod_json(0, 10)) < 40_000  # (issue 37: real Pods are 29-38 KB)
    pod = json.loads(store_memory.pod_json(3, 10))
    assert pod["spec"]["nodeName"] == "worker-3" and pod["metadata"]["managedFields"]
    claim, slice_ = json.loads(store_memory.claim_json(3, 10)), json.loads(store_memory.slice_json(3))
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 8 and claim["metadata"]["managedFields"]
    assert slice_["spec"]["nodeName"] == "worker-3" and len(slice_["spec"]["devices"]) == 8


def test_a_trimmed_store_holds_a_fraction_of_a_whole_one() -> None:
    syncer, scheduler, nodes, labelled, claims, slices = measured(pods=30, nodes=10, whole_up_to=30)
    assert [(h.kind, h.count) for h in (syncer, scheduler, nodes, labelled, claims, slices)] == [
        ("Syncer pods", 30), ("scheduler pods", 30), ("Syncer nodes", 10), ("scheduler nodes (30 labels)", 10),
        ("DRA claims (one per Pod)", 30), ("DRA slices (one per node)", 10)]
    assert 0 < syncer.trimmed < syncer.whole / 10 and 0 < scheduler.trimmed < scheduler.whole / 10
    assert 0 < nodes.trimmed < nodes.whole / 4 and 0 < labelled.trimmed < labelled.whole / 4
    assert 0 < claims.trimmed < claims.whole / 3 and 0 < slices.trimmed < slices.whole / 4


def test_whole_stores_past_the_limit_are_scaled_from_the_sample() -> None:
    capped = measured(pods=40, nodes=4, whole_up_to=20)[0]
    assert 1.5 < capped.whole / measured(pods=20, nodes=4, whole_up_to=20)[0].whole < 2.5


def test_gc_pauses_time_each_full_collection() -> None:
    for freeze in (False, True):
        pauses = store_memory.gc_pauses(pods=20, nodes=5, rounds=3, freeze=freeze)
        assert len(pauses.full) == 3 and all(t > 0 for t in pauses.full) and pauses.frozen == freeze
    assert "p99" in store_memory.Pauses.describe((0.001, 0.002)) and store_memory.Pauses.describe(()) == "none"
