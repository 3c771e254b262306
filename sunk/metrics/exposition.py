"""Gauge families as plain rows, and their Prometheus text exposition (format 0.0.4).

Why not prometheus_client's families: at 5000 nodes and 50,000 jobs the Slurm table is
about 200,000 series, and building a ``Sample`` per series and formatting it through
``generate_latest`` took 5.5 s per scrape (docs/benchmarks.md). Rows of plain tuples,
rendered through one format string per family, do the same in a fraction of that. The
output is ordinary text exposition: tests parse it with prometheus_client's own parser.
Rendered tables reach ``/metrics`` through ``sunk.controller.textsources.register_text``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Union

from attrs import define, field

Number = Union[int, float]


def escape_label(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


_TEMPLATES: dict[tuple[str, ...], str] = {}


def label_block(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    """``{a="x",b="y"}``: rendered once and shared by every family that has the same labels."""
    if not names:
        return ""
    template = _TEMPLATES.get(names)
    if template is None:
        template = _TEMPLATES.setdefault(names, "{" + ",".join(f'{name}="%s"' for name in names) + "}")
    joined = "".join(values)  # one scan decides for all values; escaping is rare
    if "\\" in joined or '"' in joined or "\n" in joined:
        values = tuple(map(escape_label, values))
    return template % values


@define(slots=True)
class Family:
    """One gauge family: a name, its help, its label names, and (label block, value) rows."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    rows: list[tuple[str, Number]] = field(factory=list)

    def add(self, values: tuple[str, ...], value: Number) -> None:
        self.rows.append((label_block(self.labels, values), value))

    def add_block(self, block: str, value: Number) -> None:
        """A row whose labels were rendered by ``label_block`` with this family's label names."""
        self.rows.append((block, value))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: Number) -> str:
    if type(value) is int:
        return str(value)
    value = float(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def header(name: str, documentation: str) -> str:
    """A gauge family's HELP and TYPE lines."""
    return f"# HELP {name} {_escape_help(documentation)}\n# TYPE {name} gauge\n"


def render(families: Iterable[Family]) -> str:
    """Text exposition of every family (a family without rows still states its HELP and TYPE)."""
    parts: list[str] = []
    append = parts.append
    for family in families:
        name = family.name
        append(header(name, family.help))
        for block, value in family.rows:
            append(f"{name}{block} {format_value(value)}\n")
    return "".join(parts)
