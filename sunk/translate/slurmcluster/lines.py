"""The check of every slurm.conf line a SlurmCluster's author writes (``slurmConfig``, partition options).

slurm.conf is parsed as ``Key=Value`` pairs separated by blanks, several to a line, with ``#``
comments, quotes and a trailing ``\\`` continuing a line. A line that passed as text could so
carry a second pair (``SchedulerType=sched/backfill ReturnToService=0``), a continuation into the
next line, an ``Include`` of any file, or a newline. So the rule is narrow on purpose: one pair
per line, the key a word, the value printable ASCII without blanks, quotes, ``#`` or ``\\``; and a
key sunk writes itself (``OWNED``: what the Syncer, the scheduler, the prolog and the operator
rely on) is refused, whatever its case (Slurm's keys are case-insensitive), with a message saying
which field sets it instead.
"""

from __future__ import annotations

import re
from typing import Any

KEY = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")
VALUE = re.compile(r"[!$-&(-\[\]-~]{1,1024}")  # printable ASCII but blank, quotes, '#' and backslash

# Keys sunk writes (lower case) -> where their value comes from.
OWNED: dict[str, str] = {key.lower(): why for key, why in {
    "ClusterName": "spec.slurm.clusterName",
    "SlurmctldHost": "the slurmctld StatefulSet (spec.slurmctld.backup)",
    "ControlMachine": "the slurmctld StatefulSet",
    "BackupController": "spec.slurmctld.backup",
    "SlurmUser": "the images",
    "SlurmdUser": "the images",
    "StateSaveLocation": "the slurmctld state volume",
    "SlurmdSpoolDir": "the NodeSet Pods",
    "SlurmctldPort": "the slurmctld Service",
    "SlurmdPort": "the NodeSet Pods",
    "PluginDir": "the images",
    "AuthType": "sunk (munge)",
    "AuthAltTypes": "sunk (auth/jwt: sunk's daemons and slurmrestd use it)",
    "AuthAltParameters": "spec.keys.jwt",
    "AuthInfo": "the munge key Secret",
    "CredType": "sunk (munge)",
    "ReturnToService": "sunk (2: the Syncer's DOWN route relies on it)",
    "PrologFlags": "sunk (Alloc: the prolog locks the node when the job is allocated)",
    "Prolog": "the chart's prolog (/etc/slurm/prolog.d/*)",
    "Epilog": "the chart's epilog (/etc/slurm/epilog.d/*)",
    "SelectType": "sunk (select/cons_tres)",
    "SelectTypeParameters": "sunk (CR_Core_Memory)",
    "KillWait": "spec.killWait (the scheduler's --slurm-kill-wait must agree)",
    "GresTypes": "spec.gresTypes",
    "MaxNodeCount": "spec.maxNodeCount",
    "TreeWidth": "sunk (dynamic nodes)",
    "ProctrackType": "sunk (proctrack/cgroup, with cgroup.conf)",
    "TaskPlugin": "sunk (task/cgroup, with cgroup.conf)",
    "AccountingStorageType": "spec.slurmdbd",
    "AccountingStorageHost": "spec.slurmdbd",
    "AccountingStoragePort": "spec.slurmdbd",
    "JobAcctGatherType": "sunk (jobacct_gather/cgroup)",
    "Include": "nothing: no file outside the SlurmCluster's ConfigMap is read",
    "NodeName": "the NodeSets (dynamic nodes register with slurmd -Z)",
    "NodeSet": "spec.partitions",
    "PartitionName": "spec.partitions",
    "DownNodes": "the NodeSets",
    "FrontendName": "nothing (no front-end nodes)",
}.items()}

# Partition options sunk writes itself.
OWNED_PARTITION: dict[str, str] = {"partitionname": "spec.partitions[].name", "nodes": "spec.partitions[].nodeSets",
                                   "default": "spec.partitions[].default"}


def check_pair(key: str, value: Any, *, partition: bool = False) -> tuple[tuple[str, str] | None, str | None]:
    """``(key, value)`` fit for slurm.conf, or a problem. Numbers are written as they are."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None, f"{key[:64]!r}: the value must be a string or a whole number"
    text = str(value)
    if not KEY.fullmatch(key):
        return None, f"{key[:64]!r} is not a slurm.conf key (letters and digits, a letter first)"
    owned = (OWNED_PARTITION if partition else OWNED).get(key.lower())
    if owned is not None:
        return None, f"{key} is sunk's to set (from {owned}); it cannot be overridden here"
    if not VALUE.fullmatch(text):
        return None, (f"{key}: the value {text[:80]!r} must be printable ASCII without blanks, quotes, '#' or "
                      f"'\\', at most 1024 characters (one Key=Value per line)")
    return (key, text), None


def check_line(line: Any) -> tuple[tuple[str, str] | None, str | None]:
    """One ``slurmConfig`` line: its pair, nothing (blank or a comment), or a problem."""
    if not isinstance(line, str):
        return None, "a line must be a string"
    if any(c in line for c in "\n\r\0\x0b\x0c"):
        return None, "a line must not contain a line break or NUL (one Key=Value per entry)"
    text = line.strip()
    if not text or text.startswith("#"):
        return None, None
    key, sep, value = text.partition("=")
    if not sep:
        return None, f"{text[:80]!r} is not Key=Value"
    return check_pair(key, value)
