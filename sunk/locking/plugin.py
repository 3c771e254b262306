"""``PLUGIN``: node locking and the hook API, as a sunk-syncer plugin (loaded by its CLI)."""

from __future__ import annotations

import argparse

from sunk.hooks.auth import TokenUnavailable, read_secret
from sunk.syncer.context import PluginParts, SyncerContext

from .assembly import assemble
from .config import add_flags, config_from


class LockingPlugin:
    name = "node-locking"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_flags(parser)

    def validate(self, args: argparse.Namespace) -> None:
        """Refuse to start without a usable secret: a placeholder one would let anybody lock Nodes."""
        try:
            read_secret(args.hooks_token_file)
        except TokenUnavailable as exc:
            raise ValueError(f"--hooks-token-file: {exc}") from None

    def install(self, ctx: SyncerContext, args: argparse.Namespace) -> PluginParts:
        locking = assemble(ctx, config_from(args))
        return PluginParts(controllers=(locking.controller,), blueprint=locking.blueprint)


PLUGIN = LockingPlugin()
