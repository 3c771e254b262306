"""Which parts a Syncer runs: its two in-tree parts by flag, and third-party plugins by module name.

Node locking and the Slurm metrics are composed directly (``sunk.locking.setup``,
``sunk.metrics.setup``) and switched by ``--node-locking`` and ``--slurm-metrics``.
``--plugins`` keeps its meaning as the chart and older command lines give it: a list that,
when given, names the in-tree parts that run (by their old module names) and any third-party
plugin, a module with a ``PLUGIN`` (``sunk/syncer/context.py``, ``Plugin``) loaded here.
A third-party module that is missing is skipped with a log line; one that exists but fails
to import is a bug and stops start-up.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
from collections.abc import Sequence
from typing import Optional

import attrs

from .context import Installer, Plugin

log = logging.getLogger(__name__)

NODE_LOCKING = "sunk.locking.plugin"  # --plugins' names of the in-tree parts (their modules before `setup`)
SLURM_METRICS = "sunk.metrics.plugin"
DEFAULT_PLUGINS: tuple[str, ...] = (NODE_LOCKING, SLURM_METRICS)


@attrs.frozen
class Parts:
    """What one Syncer runs besides state sync."""

    node_locking: bool
    slurm_metrics: bool
    plugins: tuple[str, ...] = ()  # third-party plugin specs, ``module`` or ``module:ATTR``


def choose_parts(plugins: Optional[str], *, node_locking: Optional[bool],
                 slurm_metrics: Optional[bool]) -> Parts:
    """The parts from the flags: an explicit ``--node-locking``/``--slurm-metrics`` wins; else a given
    ``--plugins`` list runs the in-tree parts it names (``--plugins=`` none); else both run."""
    specs = parse_plugin_list(plugins) if plugins is not None else list(DEFAULT_PLUGINS)
    in_tree = {spec.partition(":")[0] for spec in specs if spec.partition(":")[0] in DEFAULT_PLUGINS}
    return Parts(node_locking=NODE_LOCKING in in_tree if node_locking is None else node_locking,
                 slurm_metrics=SLURM_METRICS in in_tree if slurm_metrics is None else slurm_metrics,
                 plugins=tuple(spec for spec in specs if spec.partition(":")[0] not in DEFAULT_PLUGINS))


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


def plugin_arguments(plugins: Sequence[Plugin], rest: Sequence[str],
                     parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The third-party plugins' own flags, from what the Syncer's parser left (``rest``). A flag the Syncer
    has, or one nobody takes, is a usage error (exit 2) naming it."""
    own = argparse.ArgumentParser(prog=parser.prog, add_help=False, allow_abbrev=False)
    for plugin in plugins:
        add = getattr(plugin, "add_arguments", None)
        if add is not None:
            add(own)
    taken = _option_strings(own) & _option_strings(parser)
    if taken:
        parser.error(f"a plugin declares flags the Syncer has: {', '.join(sorted(taken))}")
    if not plugins and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args, unknown = own.parse_known_args(list(rest))
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def installers(plugins: Sequence[Plugin], args: argparse.Namespace) -> list[Installer]:
    """Each plugin's install with the parsed flags bound: the Namespace stops at the plugin boundary."""
    return [functools.partial(plugin.install, args=args) for plugin in plugins]
