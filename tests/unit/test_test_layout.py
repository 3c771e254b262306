"""The test tree itself: pytest imports test files by their base name (rootdir, no packages), so two files of
one name in tests/unit and tests/cluster stop the whole run at collection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_name():
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if "__pycache__" not in path.parts:
            where[path.name].append(str(path.relative_to(TESTS)))
    special = ("__init__.py", "conftest.py")  # (pytest loads conftest.py files by path)
    assert {name: paths for name, paths in where.items() if len(paths) > 1 and name not in special} == {}
