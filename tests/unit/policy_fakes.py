"""The identity policy the scheduler's unit tests run under: the one thing it decides is not what they test."""

from sunk.translate.podjob import Identity
from sunk.translate.policy import IdentityPolicy, IdRange, NamespaceRule

# A tenant identity for Pods that ask none, any non-root user for those that ask, priorities allowed.
TEST_POLICY = IdentityPolicy(default=NamespaceRule(
    identity=Identity(1001, 1001), user_ids=(IdRange(1, 2**32 - 3),), priority=IdRange(0, 2**32 - 3)))
