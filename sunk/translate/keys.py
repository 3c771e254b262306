"""The scheduler's unit keys, typed: one Pod (by UID) or one gang (by its owner, ``gang:<ns>/<key>``).

Why: the work queue, the job index and the hook tokens carry one string that means either, told
apart by its prefix at each use. ``str()`` of a key is that string, exactly (what is queued,
logged, stored in a job's identity and signed into a hook token), so nothing observable changes;
``unit_key`` is the one place the string is read back.
"""

from __future__ import annotations

from typing import Union

from attrs import frozen

GANG_PREFIX = "gang:"


@frozen
class PodKey:
    """A Pod placed alone: its UID (UIDs never start with ``gang:``)."""

    uid: str

    def __str__(self) -> str:
        return self.uid


@frozen
class GangKey:
    """A gang: its namespace and its key (one word, with slashes: ``job/<uid>``, ``lws/<name>/<group>``)."""

    namespace: str
    key: str

    def __str__(self) -> str:
        return f"{GANG_PREFIX}{self.namespace}/{self.key}"

    @classmethod
    def parse(cls, text: str) -> GangKey:
        """``gang:<namespace>/<key>`` -> its key (the namespace ends at the first slash); ValueError else."""
        if not is_gang(text) or "/" not in text:
            raise ValueError(f"not a gang: {text!r}")
        namespace, _, key = text[len(GANG_PREFIX):].partition("/")
        return cls(namespace, key)


UnitKey = Union[PodKey, GangKey]


def is_gang(text: str) -> bool:
    """The key names a gang (its prefix), well formed or not."""
    return text.startswith(GANG_PREFIX)


def unit_key(text: str) -> UnitKey:
    """The typed key of a queued or signed string; ValueError for a gang's that is malformed."""
    return GangKey.parse(text) if is_gang(text) else PodKey(text)
