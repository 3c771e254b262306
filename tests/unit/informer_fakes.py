"""An informer's read side over objects a test edits: what PodIndex and SlurmdNodes read."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


class ListInformer:
    def __init__(self, objects: Iterable[dict[str, Any]]):
        self.objects = objects
        self.indexers: dict[str, Callable[[dict[str, Any]], list[str]]] = {}

    def add_indexer(self, name: str, fn: Callable[[dict[str, Any]], list[str]]) -> None:
        self.indexers[name] = fn

    def by_index(self, name: str, value: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if value in self.indexers[name](o)]

    def list(self) -> list[dict[str, Any]]:
        return list(self.objects)
