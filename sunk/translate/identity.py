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

One grammar, held by ``encode`` (what sunk writes), ``parse`` (what it reads back) and the epilog
(sunk/scripts/epilog.sh, which drains a node for a placeholder by this text alone): a namespace is a DNS
label (63), a Pod's name and the scheduler's a DNS subdomain (253), a UID a UUID as the apiserver makes
them (its alphabet and length: tests use short ones; so no UID starts ``gang:``), a gang's key its kind
and one to three label values (63 each), the whole text at most ``IDENTITY_MAX`` characters. Every word
of it comes from a Pod its author wrote, so nothing outside the grammar is written (``encode`` refuses
it: the Pod gets no job) or read (``parse``: no placeholder). The patterns are POSIX EREs as well as
Python's, so the epilog holds the same text (``tests/unit/test_identity_grammar.py`` feeds both the
same hostile strings). Nothing in them is a space or ``=``, so the text splits unambiguously; the whole
text must be one identity. ``scheduler`` scopes a job to the scheduler that submitted it, so two
schedulers sharing a Slurm cluster never adopt or cancel each other's jobs.
"""

from __future__ import annotations

import hashlib
import re
from typing import ClassVar, Optional

from attrs import frozen

from sunk.model.slurm import Job

from .keys import GangKey, PodKey, UnitKey

MEMBER_TAG_CHARS = 8
# The identity's longest text: Slurm (24.11 to 26.05) refuses an Extra or Comment over 1024 characters;
# AdminComment has no such check, but the identity is held to the same bound (one job record stays small,
# and the epilog, which reads 1100 characters of it, sees it whole).
IDENTITY_MAX = 1024
ASCII_SPACE = " \t\n\v\f\r"  # what the epilog trims too ([:space:] in the C locale)
NAMESPACE_MAX = 63  # a DNS label's
UID_MAX = 36  # a UUID's
POD_NAME_MAX = 253  # a DNS subdomain's (a Pod's name, a scheduler's)

# The grammar, in the subset of regular expressions POSIX ERE (bash's =~) and Python read alike. Lengths are
# checked apart, and no two repetitions can match the same characters (no backtracking blow-up on 1024).
_DNS_LABEL = r"[a-z0-9]+(-+[a-z0-9]+)*"  # lower-case letters and digits, '-' inside
NAMESPACE_PATTERN = _DNS_LABEL  # a DNS label, at most NAMESPACE_MAX
NAME_PATTERN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"  # a DNS subdomain, at most POD_NAME_MAX
# A UID: what the apiserver makes is a UUID (lower-case hex and '-'); the grammar is its alphabet and length
# (lower-case letters and digits, '-' inside, at most UID_MAX), which the tests' short UIDs fit too.
UID_PATTERN = _DNS_LABEL
GANG_KEY_PATTERN = r"(job|lws|podgroup|jobset)(/[A-Za-z0-9][-A-Za-z0-9._]{0,62}){1,3}"  # gang.Gang.key
MEMBERS_PATTERN = r"[0-9a-f]{1,8}(,[0-9a-f]{1,8})*"  # member_tag() of each member
SIZE_PATTERN = r"[1-9][0-9]{0,8}"


def _named(name: str, pattern: str) -> str:
    return f"(?P<{name}>{pattern})"


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
        rf"(?:sunk-pod={_named('uid', UID_PATTERN)} ns={_named('pod_ns', NAMESPACE_PATTERN)}"
        rf" name={_named('name', NAME_PATTERN)}"
        rf"|sunk-gang={_named('key', GANG_KEY_PATTERN)} ns={_named('gang_ns', NAMESPACE_PATTERN)}"
        rf" size={_named('size', SIZE_PATTERN)} members={_named('members', MEMBERS_PATTERN)})"
        rf"(?: sched={_named('sched', NAME_PATTERN)})?", re.ASCII)

    def includes(self, uid: str) -> bool:
        """The job was submitted for the Pod of that UID: the lone Pod itself, or a member of the gang's."""
        return uid == self.unit.uid if isinstance(self.unit, PodKey) else member_tag(uid) in self.members

    def encode(self) -> str:
        """The AdminComment to submit; ValueError for a value that would not read back as itself."""
        text = self.text()
        if self.parse(text) != self:
            raise ValueError(f"placeholder identity: {text[:120]!r} is not in the grammar (a DNS namespace and "
                             f"name, a UUID, a gang key, at most {IDENTITY_MAX} characters) or not itself")
        return text

    def text(self) -> str:
        """Its words joined, unchecked against the grammar (what ``encode`` checks; gang.max_members sizes
        it); ValueError for a word that is empty or holds a space."""
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
        """None for any text that is not one whole identity, a lone Pod's or a gang's, in the grammar (the
        module docstring; ASCII white space around it, squeue's padding, is the only thing not refused)."""
        text = (admin_comment or "").strip(ASCII_SPACE)
        match = cls._FORMAT.fullmatch(text) if len(text) <= IDENTITY_MAX else None
        if not match or len(match["pod_ns"] or match["gang_ns"]) > NAMESPACE_MAX or len(match["uid"] or "") > UID_MAX \
                or any(len(match[word] or "") > POD_NAME_MAX for word in ("name", "sched")):
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
