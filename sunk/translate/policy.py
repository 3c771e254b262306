"""Which Slurm identity a Pod's placeholder job may have: the cluster operator's policy, per namespace. Pure.

sunk submits every placeholder job with an operator's Slurm credentials, so Slurm runs it as
whatever user it is told. Slurm itself still checks, for the job's user, the account
(associations), the partition (AllowAccounts/AllowGroups), the QOS and the reservation; what it
cannot check is the user and group themselves, nor a priority, which only operators may set. Those
are this policy's to decide, so no Pod author can run as root or as another tenant, or jump the
queue. The lists for the rest narrow what Slurm would allow further, when an operator wants that.

A rule, for one namespace (or the default rule, for namespaces the policy does not name):

- ``identity``: the user, group (and account) a Pod that asks for none runs as. Without one, a Pod
  must name its ``user-id``.
- ``userIds`` / ``groupIds``: the ids a Pod may ask for besides its identity's, as ranges. Without
  ``groupIds`` the group ranges are the user ranges (a ``user-id`` alone asks group = user).
- ``accounts``, ``partitions``, ``qos``, ``reservations``, ``exclusive``: when given, the only
  values a Pod may ask for (the identity's account is always allowed); when absent, Slurm decides.
- ``priority``: the range a Pod's ``priority`` may take; without it, a Pod may not set one.

A namespace's rule replaces the default rule; nothing is inherited, so what a namespace may do
reads from one place. Without a policy the operator wrote (``BUILTIN``), any user and group but root
may be asked for and there is no default identity: root is never a default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import attrs
from attrs import frozen

from sunk.model import names

from .objects import annotations_of
from .podjob import EXCLUSIVE_MODES, SLURM_UINT32_MAX, Identity, Obj, ValidationError, _integer

_RANGE = re.compile(r"\s*([0-9]{1,10})\s*(?:-\s*([0-9]{1,10})\s*)?", re.ASCII)
_NAME_LISTS = {"accounts": names.ANN_ACCOUNT, "partitions": names.ANN_PARTITION, "qos": names.ANN_QOS,
               "reservations": names.ANN_RESERVATION}
_RULE_KEYS = {"identity", "userIds", "groupIds", "priority", "exclusive", *_NAME_LISTS}
_IDENTITY_KEYS = {"userId", "groupId", "account"}
# Shown in a refusal: enough for a user to find the rule, never a wall of ranges.
_SHOWN_RANGES = 8


@frozen
class IdRange:
    """``low`` to ``high``, both included."""

    low: int
    high: int

    def __contains__(self, number: object) -> bool:
        return isinstance(number, int) and self.low <= number <= self.high

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"

    @classmethod
    def parse(cls, item: object, where: str) -> IdRange:
        """``1001``, ``"1001"`` or ``"1000-1999"``; ValueError naming ``where`` otherwise."""
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise ValueError(f"{where}: want an id or a LOW-HIGH range, got {item!r}")
        match = _RANGE.fullmatch(str(item))
        if not match:
            raise ValueError(f"{where}: want an id or a LOW-HIGH range, got {item!r}")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if not low <= high <= SLURM_UINT32_MAX:
            raise ValueError(f"{where}: {item!r} is not a range of ids between 0 and {SLURM_UINT32_MAX}")
        return cls(low, high)


@frozen
class NamespaceRule:
    """What Pods of one namespace may ask Slurm for (module docstring)."""

    identity: Optional[Identity] = None
    user_ids: tuple[IdRange, ...] = ()
    group_ids: Optional[tuple[IdRange, ...]] = None  # None: the user ranges
    accounts: Optional[frozenset[str]] = None  # None: any Slurm allows the job's user
    partitions: Optional[frozenset[str]] = None
    qos: Optional[frozenset[str]] = None
    reservations: Optional[frozenset[str]] = None
    exclusive: Optional[frozenset[str]] = None  # Slurm's modes (EXCLUSIVE_MODES' values)
    priority: Optional[IdRange] = None  # None: a Pod may not set one

    def allows_user(self, user_id: int) -> bool:
        return (self.identity is not None and user_id == self.identity.user_id) \
            or any(user_id in r for r in self.user_ids)

    def allows_group(self, group_id: int) -> bool:
        ranges = self.user_ids if self.group_ids is None else self.group_ids
        return (self.identity is not None and group_id == self.identity.group_id) \
            or any(group_id in r for r in ranges)


@frozen
class IdentityPolicy:
    """The operator's rules: one per named namespace, ``default`` for the others."""

    default: NamespaceRule
    namespaces: Mapping[str, NamespaceRule] = attrs.field(factory=dict, hash=False)
    written: bool = True  # False for BUILTIN: the refusals then say the operator wrote none

    def rule(self, namespace: str) -> NamespaceRule:
        return self.namespaces.get(namespace, self.default)

    def problems(self, pod: Obj) -> list[ValidationError]:
        """Every way the Pod asks for more than its namespace's rule allows; empty when it does not."""
        return self._decide(pod)[1]

    def identity(self, pod: Obj) -> Identity:
        """The identity the Pod's job runs as; ValueError listing the problems when the rule refuses it."""
        identity, problems = self._decide(pod)
        if problems or identity is None:
            raise ValueError("; ".join(map(str, problems)))
        return identity

    def _decide(self, pod: Obj) -> tuple[Optional[Identity], list[ValidationError]]:
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        rule = self.rule(namespace)
        annotations = annotations_of(pod)
        where = (f"namespace {namespace}'s rule of the cluster's Slurm identity policy" if namespace in self.namespaces
                 else "the cluster's Slurm identity policy" if self.written
                 else "sunk's built-in Slurm identity policy (the cluster operator has written none)")
        problems: list[ValidationError] = []

        def refuse(key: str, message: str) -> None:
            problems.append(ValidationError(key, f"{message}, by {where}"))

        asked_user = _asked_id(annotations, names.ANN_USER_ID)
        asked_group = _asked_id(annotations, names.ANN_GROUP_ID)
        user_id: Optional[int] = asked_user
        if names.ANN_USER_ID not in annotations:
            user_id = rule.identity.user_id if rule.identity is not None else None
            if user_id is None:
                refuse(names.ANN_USER_ID, f"the Pod names no user-id and namespace {namespace} has no default "
                                          f"Slurm identity; annotate {names.ANN_USER_ID} with a user the "
                                          f"cluster operator allows, or ask them for a default identity")
        elif asked_user is not None and not rule.allows_user(asked_user):
            refuse(names.ANN_USER_ID, f"user {asked_user}{' (root)' if asked_user == 0 else ''} is not allowed "
                                      f"in namespace {namespace} (allowed: "
                                      f"{_allowed(rule.identity.user_id if rule.identity else None, rule.user_ids)})")
            user_id = None
        # The seeds' rule: a user-id without a group-id asks group = user.
        group_id: Optional[int] = asked_group
        if names.ANN_GROUP_ID not in annotations:
            group_id = user_id if names.ANN_USER_ID in annotations \
                else rule.identity.group_id if rule.identity is not None else None
        if group_id is not None and (names.ANN_GROUP_ID in annotations or names.ANN_USER_ID in annotations) \
                and not rule.allows_group(group_id):
            refuse(names.ANN_GROUP_ID if names.ANN_GROUP_ID in annotations else names.ANN_USER_ID,
                   f"group {group_id}{' (root)' if group_id == 0 else ''} is not allowed in namespace {namespace} "
                   f"(allowed: {_allowed(rule.identity.group_id if rule.identity else None, _group_ranges(rule))})"
                   + ("" if names.ANN_GROUP_ID in annotations else f"; a user-id alone asks group = user: "
                                                                   f"annotate {names.ANN_GROUP_ID}"))

        identity_account = rule.identity.account if rule.identity is not None else None
        for field, key in _NAME_LISTS.items():
            allowed: Optional[frozenset[str]] = getattr(rule, field)
            value = str(annotations.get(key, "")).strip()
            if allowed is None or not value or value in allowed \
                    or (key == names.ANN_ACCOUNT and value == identity_account):
                continue
            shown = allowed | {identity_account} if key == names.ANN_ACCOUNT and identity_account else allowed
            refuse(key, f"{value!r} is not allowed in namespace {namespace} (allowed: "
                        f"{', '.join(sorted(shown)) or 'none'})")
        if names.ANN_PRIORITY in annotations and (priority := _asked_id(annotations, names.ANN_PRIORITY)) is not None:
            if rule.priority is None:
                refuse(names.ANN_PRIORITY, f"a Pod in namespace {namespace} may not set its job's priority "
                                           f"(only Slurm operators may, and sunk submits as one)")
            elif priority not in rule.priority:
                refuse(names.ANN_PRIORITY, f"{priority} is outside {rule.priority}, the range allowed in "
                                           f"namespace {namespace}")
        exclusive = str(annotations.get(names.ANN_EXCLUSIVE, "")).strip().lower()
        mode = EXCLUSIVE_MODES.get(exclusive)
        if rule.exclusive is not None and mode is not None and mode not in rule.exclusive:
            refuse(names.ANN_EXCLUSIVE, f"{exclusive!r} is not allowed in namespace {namespace} (allowed: "
                                        f"{', '.join(_mode_names(rule.exclusive)) or 'none'})")

        if problems or user_id is None or group_id is None:
            return None, problems
        account = str(annotations.get(names.ANN_ACCOUNT, "")).strip() or identity_account
        return Identity(user_id=user_id, group_id=group_id, account=account or None), problems


def _asked_id(annotations: Mapping[str, str], key: str) -> Optional[int]:
    """The annotation's integer; None when absent or malformed (podjob.validate_pod reports the format)."""
    if key not in annotations:
        return None
    number = _integer(annotations[key])
    return number if number is not None and 0 <= number <= SLURM_UINT32_MAX else None


def _group_ranges(rule: NamespaceRule) -> tuple[IdRange, ...]:
    return rule.user_ids if rule.group_ids is None else rule.group_ids


def _allowed(own: Optional[int], ranges: Sequence[IdRange]) -> str:
    items = ([str(own)] if own is not None and not any(own in r for r in ranges) else []) + [str(r) for r in ranges]
    shown = ", ".join(items[:_SHOWN_RANGES]) + (", ..." if len(items) > _SHOWN_RANGES else "")
    return shown or "none"


def _mode_names(modes: frozenset[str]) -> list[str]:
    """Slurm's modes as the annotation spells them (``oversubscribe`` is ``ok``)."""
    return sorted(name for name, mode in EXCLUSIVE_MODES.items() if mode in modes and name not in ("true", "false"))


BUILTIN = IdentityPolicy(default=NamespaceRule(user_ids=(IdRange(1, SLURM_UINT32_MAX),)), written=False)


def parse_policy(data: object) -> IdentityPolicy:
    """The policy from its file's parsed content (``--identity-policy``); ValueError naming the bad field.

    Unknown keys are errors: a misspelt limit in a security policy must not pass as no limit.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ValueError(f"identity policy: want a mapping with 'default' and 'namespaces', got {type(data).__name__}")
    _no_unknown(data, {"default", "namespaces"}, "identity policy")
    namespaces = data.get("namespaces") or {}
    if not isinstance(namespaces, Mapping):
        raise ValueError("identity policy: namespaces: want a mapping of namespace to rule")
    for name in namespaces:
        if not isinstance(name, str) or not name:
            raise ValueError(f"identity policy: namespaces: {name!r} is not a namespace name (quote it in YAML)")
    return IdentityPolicy(
        default=parse_rule(data.get("default") or {}, "default"),
        namespaces={str(name): parse_rule(rule or {}, f"namespaces.{name}") for name, rule in namespaces.items()})


def parse_rule(data: object, where: str) -> NamespaceRule:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: want a mapping, got {type(data).__name__}")
    _no_unknown(data, _RULE_KEYS, where)
    identity = None
    if data.get("identity") is not None:
        identity = _parse_identity(data["identity"], f"{where}.identity")
    exclusive = None
    if data.get("exclusive") is not None:
        modes = _strings(data["exclusive"], f"{where}.exclusive")
        unknown = sorted(m for m in modes if m.lower() not in EXCLUSIVE_MODES or m.lower() in ("true", "false"))
        if unknown:
            raise ValueError(f"{where}.exclusive: {', '.join(unknown)}: want none, ok, user, mcs or topo")
        exclusive = frozenset(m for m in (EXCLUSIVE_MODES[m.lower()] for m in modes) if m is not None)
    priority = None
    if data.get("priority") is not None:
        bounds = data["priority"]
        if not isinstance(bounds, Mapping):
            raise ValueError(f"{where}.priority: want min and max")
        _no_unknown(bounds, {"min", "max"}, f"{where}.priority")
        priority = IdRange.parse(f"{bounds.get('min', 0)}-{bounds.get('max', SLURM_UINT32_MAX)}", f"{where}.priority")
    lists = {field: (frozenset(_strings(data[key], f"{where}.{key}")) if data.get(key) is not None else None)
             for key, field in (("accounts", "accounts"), ("partitions", "partitions"), ("qos", "qos"),
                                ("reservations", "reservations"))}
    return NamespaceRule(
        identity=identity,
        user_ids=_ranges(data.get("userIds"), f"{where}.userIds") or (),
        group_ids=_ranges(data.get("groupIds"), f"{where}.groupIds"),
        exclusive=exclusive, priority=priority, **lists)


def _parse_identity(data: object, where: str) -> Identity:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: want userId, groupId and optionally account")
    _no_unknown(data, _IDENTITY_KEYS, where)
    if "userId" not in data:
        raise ValueError(f"{where}: userId is required")
    user = IdRange.parse(data["userId"], f"{where}.userId")
    group = IdRange.parse(data.get("groupId", user.low), f"{where}.groupId")
    if user.low != user.high or group.low != group.high:
        raise ValueError(f"{where}: one user and one group, not ranges")
    account = data.get("account")
    if account is not None and (not isinstance(account, str) or not re.fullmatch(r"\S+", account.strip())):
        raise ValueError(f"{where}.account: want one account name, got {account!r}")
    return Identity(user_id=user.low, group_id=group.low, account=account.strip() if account else None)


def _ranges(data: object, where: str) -> Optional[tuple[IdRange, ...]]:
    if data is None:
        return None
    if not isinstance(data, list):
        raise ValueError(f"{where}: want a list of ids and LOW-HIGH ranges")
    return tuple(IdRange.parse(item, f"{where}[{i}]") for i, item in enumerate(data))


def _strings(data: object, where: str) -> list[str]:
    if not isinstance(data, list) or not all(isinstance(item, str) and item.strip() for item in data):
        raise ValueError(f"{where}: want a list of names")
    return [item.strip() for item in data]


def _no_unknown(data: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
