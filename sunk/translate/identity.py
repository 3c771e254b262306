"""A placeholder job's identity: which unit, a lone Pod or a gang, it holds a place for. Pure.

It lives in the job's AdminComment: Slurm lets only its super users (root, SlurmUser, AdminLevel=Admin)
write that, at submission, in an update and in a cancel request alike, while the job's Extra, Comment
and name are its user's to rewrite. An identity a tenant could write would let them make the scheduler
cancel another tenant's job and delete its Pod (docs/security.md), so ``identity_of``, the one reader,
reads the AdminComment and nothing else.

A lone Pod is a gang of one: one type, ``PlaceholderIdentity``, whose ``unit`` is the scheduler's key
(``PodKey`` or ``GangKey``, keys.py; its ``str()`` is what the job index, the work queue and the hook
tokens are keyed by). Its text keeps the two forms sunk has always written, so a job submitted before
an upgrade reads as it did, and the epilog, which reads ``sunk-pod=`` itself, needs no change:

- a lone Pod: ``sunk-pod=<uid> ns=<namespace> name=<name>[ sched=<scheduler>]``;
- a gang: ``sunk-gang=<key> ns=<namespace> size=<N> members=<tag>,<tag>...[ sched=<scheduler>]``, a tag
  (``member_tag``: 8 hex digits of a SHA-256, so a 100-member gang's identity stays under a kilobyte)
  of each member's UID: a restarted scheduler finds the gang's job by its key, and tells the members it
  was submitted for (deleted with it when it ends) from members made later (which form the next gang).

Names, namespaces, UIDs, keys and tags hold no spaces and no ``=``, so the text splits unambiguously;
the whole text must be one identity. ``scheduler`` scopes a job to the scheduler that submitted it, so
two schedulers sharing a Slurm cluster never adopt or cancel each other's jobs.
"""

from __future__ import annotations

import hashlib
import re
from typing import ClassVar, Optional

from attrs import frozen

from sunk.slurm.models import Job

from .keys import GANG_PREFIX, GangKey, PodKey, UnitKey

MEMBER_TAG_CHARS = 8


def member_tag(uid: str) -> str:
    """A member's UID as a gang's identity keeps it: 8 hex digits of its SHA-256."""
    return hashlib.sha256(uid.encode()).hexdigest()[:MEMBER_TAG_CHARS]


@frozen
class PlaceholderIdentity:
    """Which unit a placeholder job holds nodes for (the module docstring has its text and why)."""

    unit: UnitKey
    namespace: str  # (a gang's is its key's too)
    name: str = ""  # a lone Pod's name (a gang's text names none)
    size: int = 1  # a gang's nodes
    members: tuple[str, ...] = ()  # a gang's: member_tag() of each member the job was submitted for
    scheduler: str = ""

    _FORMAT: ClassVar[re.Pattern[str]] = re.compile(
        rf"(?:sunk-pod=(?P<uid>(?!{GANG_PREFIX})\S+) ns=(?P<pod_ns>\S+) name=(?P<name>\S+)"
        r"|sunk-gang=(?P<key>\S+) ns=(?P<gang_ns>\S+) size=(?P<size>[0-9]{1,9})"
        r" members=(?P<members>[0-9a-f]+(?:,[0-9a-f]+)*))(?: sched=(?P<sched>\S+))?")

    def includes(self, uid: str) -> bool:
        """The job was submitted for the Pod of that UID: the lone Pod itself, or a member of the gang's."""
        return uid == self.unit.uid if isinstance(self.unit, PodKey) else member_tag(uid) in self.members

    def encode(self) -> str:
        """The AdminComment to submit; ValueError for a value that would not read back as itself."""
        if isinstance(self.unit, PodKey):
            words = {"sunk-pod": self.unit.uid, "ns": self.namespace, "name": self.name}
        else:
            if self.unit.namespace != self.namespace:
                raise ValueError(f"placeholder identity: namespace {self.namespace!r} is not its gang's")
            if not self.members or not all(re.fullmatch(r"[0-9a-f]+", m) for m in self.members):
                raise ValueError(f"placeholder identity: members {self.members!r} must be member tags")
            words = {"sunk-gang": self.unit.key, "ns": self.namespace, "size": str(self.size),
                     "members": ",".join(self.members)}
        words["sched"] = self.scheduler
        for label, value in words.items():
            if re.search(r"\s", value) or (label != "sched" and not value):
                raise ValueError(f"placeholder identity: {label} {value!r} must be one non-empty word")
        return " ".join(f"{label}={value}" for label, value in words.items() if value)

    @classmethod
    def parse(cls, admin_comment: str) -> Optional[PlaceholderIdentity]:
        """None for any text that is not one whole identity, a lone Pod's or a gang's."""
        match = cls._FORMAT.fullmatch((admin_comment or "").strip())
        if not match:
            return None
        scheduler = match["sched"] or ""
        if match["uid"]:
            return cls(PodKey(match["uid"]), match["pod_ns"], name=match["name"], scheduler=scheduler)
        return cls(GangKey(match["gang_ns"], match["key"]), match["gang_ns"], size=int(match["size"]),
                   members=tuple(match["members"].split(",")), scheduler=scheduler)


def identity_of(job: Job) -> Optional[PlaceholderIdentity]:
    """The placeholder identity in a job's AdminComment, or None: a job that is not a placeholder. Nothing
    the job's user can write (Extra, Comment, name) is ever read for it."""
    return PlaceholderIdentity.parse(job.admin_comment) if job.admin_comment else None


def is_placeholder(job: Job) -> bool:
    """A SUNK placeholder job, for one Pod or for a gang: strict locking on every node it holds."""
    return identity_of(job) is not None
