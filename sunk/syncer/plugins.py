"""Finding the Syncer's plugins: ``PLUGIN`` objects in named modules, optional when absent.

Why optional: the node-locking plugin (hook API) ships in the same package, but a build
without it must still sync state. A module that is missing is skipped with a log line;
a module that exists but fails to import is a bug and stops start-up, since silently
running without the hook API would leave prologs waiting on a port nobody serves.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
from collections.abc import Sequence

from .context import Installer, Plugin

log = logging.getLogger(__name__)

DEFAULT_PLUGINS: tuple[str, ...] = ("sunk.locking.plugin", "sunk.metrics.plugin")


def load_plugin(spec: str) -> Plugin | None:
    """``module`` or ``module:ATTR`` (default attribute ``PLUGIN``); None if the module does not exist."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            log.info("syncer plugin %s is not installed; running without it", module_name)
            return None
        raise
    plugin = getattr(module, attr or "PLUGIN", None)
    if plugin is None or not callable(getattr(plugin, "install", None)):
        raise TypeError(f"{spec}: no {attr or 'PLUGIN'} with an install(ctx) method")
    return plugin  # type: ignore[no-any-return]


def load_plugins(specs: Sequence[str]) -> list[Plugin]:
    plugins = []
    for spec in specs:
        plugin = load_plugin(spec)
        if plugin is not None:
            plugins.append(plugin)
    return plugins


def parse_plugin_list(text: str) -> list[str]:
    """``--plugins`` value: comma-separated specs; empty means none."""
    return [s.strip() for s in text.split(",") if s.strip()]


def installers(plugins: Sequence[Plugin], args: argparse.Namespace) -> list[Installer]:
    """Each plugin's install with the parsed flags bound: the Namespace stops at the plugin boundary."""
    return [functools.partial(plugin.install, args=args) for plugin in plugins]
