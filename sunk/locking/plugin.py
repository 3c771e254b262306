"""``PLUGIN``: node locking and the hook API, as a sunk-syncer plugin (loaded by its CLI)."""

from __future__ import annotations

import argparse

from sunk.hooks.auth import TokenUnavailable, read_secret
from sunk.syncer.context import PluginParts, SyncerContext

from .assembly import assemble
from .config import add_flags, config_from

NEEDS_NODE_PERMISSIONS = (
    "--node-permissions-enabled=false, but node locking (plugin sunk.locking.plugin) taints Nodes and sets the "
    "reboot condition, so it needs them: grant the Node write rights (chart: syncer.nodePermissions.enabled=true), "
    "or run without node locking (--plugins=sunk.metrics.plugin; chart: syncer.nodeLocking.enabled=false)")


class LockingPlugin:
    name = "node-locking"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_flags(parser)

    def validate(self, args: argparse.Namespace) -> None:
        """Refuse to start without a usable secret (a placeholder one would let anybody lock Nodes),
        or without the right to taint Nodes (every lock would fail with 403, and every prolog drain)."""
        if not args.node_permissions_enabled:
            raise ValueError(NEEDS_NODE_PERMISSIONS)
        if not args.hooks_token_file:
            if not args.hooks_token_audience:
                raise ValueError("node locking needs a way to know nodes: --hooks-token-audience (their slurmd Pods' "
                                 "ServiceAccount tokens), --hooks-token-file (legacy HMAC node tokens), or both")
            return
        try:
            read_secret(args.hooks_token_file)
        except TokenUnavailable as exc:
            raise ValueError(f"--hooks-token-file: {exc}") from None

    def install(self, ctx: SyncerContext, args: argparse.Namespace) -> PluginParts:
        locking = assemble(ctx, config_from(args))
        return PluginParts(controllers=(locking.controller,), blueprint=locking.blueprint)


PLUGIN = LockingPlugin()
