"""Node locking and its hook API composed into the Syncer (``config.check`` refuses a bad start first).

As controller-runtime's ``SetupWithManager``: the Syncer's assembly calls ``setup`` with its
context when ``--node-locking`` is on, and adds what it returns to its Manager and hook app.
"""

from __future__ import annotations

from sunk.syncer.context import PluginParts, SyncerContext

from .assembly import assemble
from .config import LockConfig


def setup(ctx: SyncerContext, config: LockConfig) -> PluginParts:
    """The lock controller (leader only) and the hook API's Blueprint (every replica)."""
    locking = assemble(ctx, config)
    return PluginParts(controllers=(locking.controller, locking.orphans), blueprint=locking.blueprint)
