"""One frozen copy of each part many stored objects hold alike (sunk/translate/subtrees.py)."""

from __future__ import annotations

import copy
import gc
import json
import threading
import weakref
from typing import Any

import pytest
from fat_objects import fat_pod
from hypothesis import given
from hypothesis import strategies as st

from sunk.translate import subtrees
from sunk.translate.podstores import scheduler_slim_pod, syncer_slim_pod
from sunk.translate.subtrees import FrozenDict, FrozenList, SubtreeTable

TOLERATION = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
              "tolerationSeconds": 300}

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=12)


def test_equal_parts_are_one_object_and_read_as_the_part() -> None:
    table = SubtreeTable()
    first, second = table.one_copy([dict(TOLERATION)]), table.one_copy([dict(TOLERATION)])
    assert first is second and first == [TOLERATION] and first[0] == TOLERATION
    assert isinstance(first, list) and isinstance(first[0], dict)
    assert json.loads(json.dumps(first)) == [TOLERATION]


@pytest.mark.parametrize("values", [(1, 1.0, True), (0, 0.0, False, -0.0), ("1", 1, None)])
def test_parts_equal_in_python_but_not_in_type_stay_apart(values: tuple[Any, ...]) -> None:
    """``{"x": 1} == {"x": True}``: shared, one author's 1 would read back as another's True."""
    table = SubtreeTable()
    copies = [table.one_copy({"x": v, "l": [v]}) for v in values]
    for value, part in zip(values, copies, strict=True):
        assert type(part["x"]) is type(value) and type(part["l"][0]) is type(value)
        assert json.dumps(part) == json.dumps({"x": value, "l": [value]})  # (-0.0 stays -0.0, 0.0 stays 0.0)
    assert len({id(c) for c in copies}) == len(values)


@given(JSON)
def test_any_json_part_comes_back_equal_with_its_types(value: Any) -> None:
    part = SubtreeTable().one_copy(copy.deepcopy(value))
    assert part == value and json.dumps(part, sort_keys=True) == json.dumps(value, sort_keys=True)


WRITES = [
    lambda d: d.__setitem__("k", 1), lambda d: d.__delitem__("key"), lambda d: d.update(k=1), lambda d: d.pop("key"),
    lambda d: d.popitem(), lambda d: d.setdefault("k", 1), lambda d: d.clear(), lambda d: d.__ior__({"k": 1}),
]
LIST_WRITES = [
    lambda ls: ls.append(1), lambda ls: ls.extend([1]), lambda ls: ls.insert(0, 1), lambda ls: ls.pop(),
    lambda ls: ls.remove(ls[0]), lambda ls: ls.clear(), lambda ls: ls.sort(), lambda ls: ls.reverse(),
    lambda ls: ls.__setitem__(0, 1), lambda ls: ls.__delitem__(0), lambda ls: ls.__iadd__([1]),
    lambda ls: ls.__imul__(2),
]


@pytest.mark.parametrize("write", WRITES)
def test_a_shared_dict_refuses_every_write(write: Any) -> None:
    part = SubtreeTable().one_copy([dict(TOLERATION)])
    with pytest.raises(TypeError, match="shared"):
        write(part[0])
    assert part[0] == TOLERATION


@pytest.mark.parametrize("write", LIST_WRITES)
def test_a_shared_list_refuses_every_write(write: Any) -> None:
    part = SubtreeTable().one_copy([dict(TOLERATION), {"key": "b"}])
    with pytest.raises(TypeError, match="shared"):
        write(part)
    assert part == [TOLERATION, {"key": "b"}]


def test_copies_of_a_shared_part_are_plain_and_writable() -> None:
    part = SubtreeTable().one_copy({"tolerations": [dict(TOLERATION)]})
    for made in (copy.copy(part), copy.deepcopy(part), dict(part), {**part}):
        assert type(made) is dict and made == part
        made["new"] = 1
    deep = copy.deepcopy(part)
    assert type(deep["tolerations"]) is list and type(deep["tolerations"][0]) is dict
    deep["tolerations"].append(1)
    assert part == {"tolerations": [TOLERATION]}
    assert type([*part["tolerations"], 1]) is list


def test_a_part_nested_past_the_depth_is_kept_as_it_is() -> None:
    deep: Any = "leaf"
    for _ in range(subtrees.MAX_DEPTH + 5):
        deep = [deep]
    table = SubtreeTable()
    assert table.one_copy(deep) is deep and len(table) == 0 and table.key(deep) is None
    assert table.one_copy("x" * 3) == "xxx" and table.one_copy(7) == 7


def test_a_part_no_object_holds_is_freed_with_its_last_holder_whatever_its_size() -> None:
    """An edited Pod's old labels (a tenant's 600 KB of them, edited again and again) go with the old Pod."""
    table = SubtreeTable()
    held = table.one_copy({"held": True})
    big = table.one_copy({f"label-{n}": "x" * 100 for n in range(1000)})
    freed = weakref.ref(big)
    assert len(table) == 2
    del big
    gc.collect()
    assert freed() is None and len(table) == 1
    assert table.one_copy({"held": True}) is held
    for n in range(300):  # (each version dropped as the next comes)
        table.one_copy({"labels": n})
    assert len(table) == 1


def test_keys_are_no_hash_a_tenant_can_aim() -> None:
    """Python's integers hash alike on purpose (``hash(-1) == hash(-2)``, ``hash(k * (2**61 - 1)) == 0``): parts
    keyed by them would all land in one slot of the table, each lookup walking every one. The key is a keyed
    digest of the part's text: a hundred such parts, a hundred hashes."""
    table = SubtreeTable()
    parts = [{"p": k * (2**61 - 1)} for k in range(50)] + [{"tolerationSeconds": -k} for k in range(1, 51)]
    keys = [table.key(p) for p in parts]
    assert len({hash(k) for k in keys}) == len(parts)
    assert SubtreeTable().key(parts[0]) != keys[0], "each process its own secret"


def test_threads_asking_for_equal_parts_get_one() -> None:
    table = SubtreeTable()
    got: list[Any] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        got.extend(table.one_copy({"tolerations": [dict(TOLERATION)], "n": n}) for n in range(200))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(part) for part in got}) == 200


def test_a_templates_pods_share_their_parts_in_both_stores() -> None:
    """Two Pods of one Job: labels, owner reference, tolerations and the folded containers are one object each,
    frozen; what is each Pod's own (its name, uid, annotations) is not."""
    pods = [fat_pod(f"p{n}", owner_job=True, labels={"batch.kubernetes.io/job-name": "train"},
                    annotations={"sunk.coreweave.com/job-id": str(n)}) for n in range(2)]
    for slim in (scheduler_slim_pod, syncer_slim_pod):
        one, two = slim(pods[0]), slim(pods[1])
        for part in (("metadata", "labels"), ("metadata", "ownerReferences"), ("spec", "tolerations")):
            assert one[part[0]][part[1]] is two[part[0]][part[1]], (slim.__name__, part)
            assert isinstance(one[part[0]][part[1]], (FrozenDict, FrozenList))
        assert one["metadata"]["annotations"] is not two["metadata"]["annotations"]
        assert type(one["metadata"]) is dict and one["metadata"]["uid"] == "uid-p0"
    assert scheduler_slim_pod(pods[0])["spec"]["containers"] is scheduler_slim_pod(pods[1])["spec"]["containers"]


def test_every_nodes_slice_lists_one_copy_of_each_gpu_and_a_templates_claims_one_spec() -> None:
    """(``podstores.shared`` around a shared part keeps it: it once rebuilt it as a plain dict, one per node.)"""
    from benchmarks.store_memory import GPU_MAPPING, claim_json, slice_json
    from sunk.kube.client import decode_json
    from sunk.translate.drastores import slim_claim, slim_slice

    transform = slim_slice(GPU_MAPPING)
    one, two = (transform(decode_json(slice_json(i))) for i in (1, 2))
    assert all(a is b for a, b in zip(one["spec"]["devices"], two["spec"]["devices"], strict=True))
    assert one["spec"]["nodeName"] != two["spec"]["nodeName"]
    first, second = (slim_claim(decode_json(claim_json(i, 5000))) for i in (1, 2))
    assert first["spec"] is second["spec"] and isinstance(first["spec"], FrozenDict)
    assert first["status"]["allocation"] != second["status"]["allocation"]
