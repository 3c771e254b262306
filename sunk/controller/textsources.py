"""Text sources that ``/metrics`` serves after the default prometheus_client registry.

Why: some tables (the Syncer's Slurm metrics) are rendered
straight to text exposition, far cheaper than prometheus_client objects at their size
(``sunk/metrics/exposition.py``). They register here; ``sunk.controller.health`` serves
them. A leaf of the controller layer, so the endpoint never imports a feature package.
Sources must not reuse a registry family's name.

A source returns its text, or (a large table) its bytes as groups of pieces: ``/metrics``
joins and writes one group at a time, so a 20 MB table is never whole in memory, neither
as text nor as bytes (``body``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Union

log = logging.getLogger(__name__)

Pieces = Sequence[Sequence[bytes]]  # groups of pieces, in order: each group is joined and written on its own
TextSource = Callable[[], Union[str, Pieces]]
_sources: dict[str, TextSource] = {}
_lock = threading.Lock()


def register_text(name: str, source: TextSource) -> None:
    """Serve ``source()`` on ``/metrics``; a second registration under ``name`` replaces the first."""
    with _lock:
        _sources[name] = source


def unregister_text(name: str) -> None:
    with _lock:
        _sources.pop(name, None)


def _outputs() -> list[Union[str, Pieces]]:
    """Every source's output; one that raises is logged and left out, never the whole scrape."""
    with _lock:
        sources = list(_sources.items())
    outputs = []
    for name, source in sources:
        try:
            outputs.append(source())
        except Exception:
            log.exception("metrics source %s failed; left out of this scrape", name)
    return outputs


def body(before: bytes = b"") -> tuple[int, Iterator[bytes]]:
    """``before`` and every source's bytes: their length, and the chunks to write (joined as they are written)."""
    groups: list[Union[bytes, Sequence[bytes]]] = [before]
    for output in _outputs():
        if isinstance(output, str):
            groups.append(output.encode())
        else:
            groups.extend(output)
    length = sum(len(group) if isinstance(group, bytes) else sum(map(len, group)) for group in groups)
    return length, (group if isinstance(group, bytes) else b"".join(group) for group in groups)


def render_sources() -> str:
    """Every source's text, whole (for tests and small sources; ``/metrics`` writes ``body``)."""
    return b"".join(body()[1]).decode()
