"""Text sources that ``/metrics`` serves after the default prometheus_client registry.

Why: some tables (the Syncer's Slurm metrics, the scheduler's RPC counts) are rendered
straight to text exposition, far cheaper than prometheus_client objects at their size
(``sunk/metrics/exposition.py``). They register here; ``sunk.controller.health`` serves
them. A leaf of the controller layer, so the endpoint never imports a feature package.
Sources must not reuse a registry family's name.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

TextSource = Callable[[], str]
_sources: dict[str, TextSource] = {}
_lock = threading.Lock()


def register_text(name: str, source: TextSource) -> None:
    """Serve ``source()`` on ``/metrics``; a second registration under ``name`` replaces the first."""
    with _lock:
        _sources[name] = source


def unregister_text(name: str) -> None:
    with _lock:
        _sources.pop(name, None)


def render_sources() -> str:
    """Every source's text; one that raises is logged and left out, never the whole scrape."""
    with _lock:
        sources = list(_sources.items())
    parts = []
    for name, source in sources:
        try:
            parts.append(source())
        except Exception:
            log.exception("metrics source %s failed; left out of this scrape", name)
    return "".join(parts)
