"""The check of every slurm.conf line a SlurmCluster's author writes (``slurmConfig``, partition options).

slurm.conf is parsed as ``Key=Value`` pairs separated by blanks, several to a line, with ``#``
comments, quotes and a trailing ``\\`` continuing a line. A line that passed as text could so
carry a second pair (``SchedulerType=sched/backfill ReturnToService=0``), a continuation into the
next line, an ``Include`` of any file, or a newline. So the rule is narrow on purpose: one pair
per line, the key a word, the value printable ASCII without blanks, quotes, ``#`` or ``\\``.

Then the key must be one an author may set, and its value of that key's type (``ALLOWED``,
``PARTITION_ALLOWED``: an allowlist, from Slurm's slurm.conf(5)), because slurmctld and slurmd
refuse to start on an unknown key or a malformed value: a line that passed as text would
crash-loop them at their next restart. A key sunk writes itself (``OWNED``) is refused with the
field that sets it instead; a key naming a program, a file or a plugin (``UNSAFE``) is refused
always, because slurmd and slurmctld run as root: whoever edits the SlurmCluster would run or
write any file of their Pods. Slurm's keys are case-insensitive, so is every lookup here.
"""

from __future__ import annotations

import re
from typing import Any

from attrs import frozen

KEY = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")
VALUE = re.compile(r"[!$-&(-\[\]-~]{1,1024}")  # printable ASCII but blank, quotes, '#' and backslash

# The prolog's lock budget (SUNK_LOCK_TIMEOUT, the chart's slurmd.hooksEnv.lockTimeout: 90 s), plus
# 15 s of curl's slack and up to five Slurm calls a refusal makes after it (sunk/scripts/prolog.sh):
# a PrologEpilogTimeout under this would have slurmd kill sunk's locking prolog and drain the node.
PROLOG_EPILOG_TIMEOUT_FLOOR = 90 + 15 + 75
MAX_UINT32 = 4294967294  # Slurm's NO_VAL is 2^32 - 2; what is above is its own


# ---- value types ---------------------------------------------------------------------------------------------


@frozen
class Integer:
    """A whole number in [low, high], or one of ``words`` (``UNLIMITED``), case-insensitive."""

    low: int
    high: int
    words: tuple[str, ...] = ()

    def problem(self, value: str) -> str | None:
        if value.upper() in self.words:
            return None
        if re.fullmatch(r"-?[0-9]{1,10}", value) and self.low <= int(value) <= self.high:
            return None
        also = f" or {'/'.join(self.words)}" if self.words else ""
        return f"a whole number from {self.low} to {self.high}{also}"


@frozen
class Choice:
    """One word of a set, case-insensitive."""

    words: tuple[str, ...]

    def problem(self, value: str) -> str | None:
        if value.lower() in (w.lower() for w in self.words):
            return None
        return f"one of {', '.join(self.words)}"


@frozen
class Words:
    """A comma list of words of a set, case-insensitive, each once."""

    words: tuple[str, ...]

    def problem(self, value: str) -> str | None:
        items = [i.lower() for i in value.split(",")]
        known = {w.lower() for w in self.words}
        if all(i in known for i in items) and len(items) == len(set(items)):
            return None
        return f"a comma list of {', '.join(self.words)} (each once)"


@frozen
class Pattern:
    """A value of a shape (a regular expression), described for the message."""

    regex: str
    what: str

    def problem(self, value: str) -> str | None:
        return None if re.fullmatch(self.regex, value) else self.what


@frozen
class Range:
    """``prefix`` then LOW-HIGH, both in [low, high], LOW at most HIGH (a port range)."""

    low: int
    high: int
    prefix: str
    what: str

    def problem(self, value: str) -> str | None:
        found = re.fullmatch(rf"{re.escape(self.prefix)}([0-9]{{1,5}})-([0-9]{{1,5}})", value)
        if found and self.low <= int(found[1]) <= int(found[2]) <= self.high:
            return None
        return self.what


ValueType = Integer | Choice | Words | Pattern | Range

# Slurm's time: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]].
_TIME = r"[0-9]{1,7}(:[0-9]{1,2}){0,2}|[0-9]{1,5}-[0-9]{1,2}(:[0-9]{1,2}){0,2}"
TIME = Pattern(_TIME, "a Slurm time (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)")
TIME_OR_UNLIMITED = Pattern(rf"(?i:{_TIME}|UNLIMITED|INFINITE)",
                            "a Slurm time (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]) or UNLIMITED")
# key[=value],... with no path in it: an option's value is a word, a number, a range or a list of them
# ('/' never: no option may name a file through here; ':' for gres and ranges).
OPTIONS = Pattern(r"[A-Za-z][A-Za-z0-9_]{0,63}(=[A-Za-z0-9_.:+-]{1,64})?"
                  r"(,[A-Za-z][A-Za-z0-9_]{0,63}(=[A-Za-z0-9_.:+-]{1,64})?){0,63}",
                  "a comma list of option or option=value (a value of letters, digits, '_.:+-'; no path)")
# TRES: cpu, mem, node, billing, energy, gres/gpu, gres/gpu:a100, license/x, fs/disk, bb/x...
_TRES = r"[A-Za-z]{1,16}(/[A-Za-z0-9_.-]{1,64}(:[A-Za-z0-9_.-]{1,64})?)?"
TRES_LIST = Pattern(rf"{_TRES}(,{_TRES}){{0,63}}", "a comma list of TRES (cpu, mem, gres/gpu, license/NAME, ...)")
_WEIGHT = rf"{_TRES}=[0-9]{{1,10}}(\.[0-9]{{1,6}})?[KMGTP]?"
TRES_WEIGHTS = Pattern(rf"{_WEIGHT}(,{_WEIGHT}){{0,63}}", "a comma list of TRES=weight (CPU=1.0,GRES/gpu=2.0)")
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}"
NAME_LIST = Pattern(rf"{_NAME}(,{_NAME}){{0,255}}", "a comma list of names (letters, digits, '_.-')")
LICENSES = Pattern(rf"{_NAME}(:[0-9]{{1,9}})?(,{_NAME}(:[0-9]{{1,9}})?){{0,63}}",
                   "a comma list of NAME[:COUNT]")
EXIT_CODES = Pattern(r"[0-9]{1,3}(-[0-9]{1,3})?(,[0-9]{1,3}(-[0-9]{1,3})?){0,63}",
                     "a comma list of exit codes or ranges (1,3-5)")
PORT_RANGE = Range(1024, 65535, "", "a port range LOW-HIGH within 1024-65535")
DOMAIN = Pattern(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", "a domain name")
YES_NO = Choice(("YES", "NO"))
ZERO_ONE = Choice(("0", "1"))
DEBUG_LEVELS = Choice(("quiet", "fatal", "error", "info", "verbose", "debug", "debug2", "debug3", "debug4",
                       "debug5"))
SECONDS = Integer(1, 65533)
UINT32 = Integer(0, MAX_UINT32)
MEGABYTES = Integer(0, MAX_UINT32, ("UNLIMITED",))
RLIMITS = Words(("ALL", "NONE", "AS", "CORE", "CPU", "DATA", "FSIZE", "MEMLOCK", "NOFILE", "NPROC", "RSS", "STACK"))
PREEMPT_MODE = Words(("OFF", "CANCEL", "GANG", "REQUEUE", "SUSPEND", "PRIORITY", "WITHIN"))

# The keys an author may set in slurmConfig (Slurm 24.11 to 26.05 know them all), by their slurm.conf(5) name.
# A plugin key is here only as a choice of plugins built into Slurm's own images, none reading a file of
# the author's: a plugin is code slurmctld loads as root.
_ALLOWED: dict[str, ValueType] = {
    # scheduling and preemption
    "SchedulerType": Choice(("sched/backfill", "sched/builtin")),
    "SchedulerParameters": OPTIONS,
    "SchedulerTimeSlice": Integer(5, 65533),
    "PreemptType": Choice(("preempt/none", "preempt/partition_prio", "preempt/qos")),
    "PreemptMode": PREEMPT_MODE,
    "PreemptExemptTime": Pattern(rf"-1|{_TIME}", "a Slurm time or -1"),
    "PreemptParameters": OPTIONS,
    "DependencyParameters": OPTIONS,
    # priority
    "PriorityType": Choice(("priority/basic", "priority/multifactor")),
    "PriorityParameters": OPTIONS,
    "PriorityDecayHalfLife": TIME,
    "PriorityCalcPeriod": TIME,
    "PriorityMaxAge": TIME,
    "PriorityFavorSmall": YES_NO,
    "PriorityFlags": Words(("ACCRUE_ALWAYS", "CALCULATE_RUNNING", "DEPTH_OBLIVIOUS", "NO_FAIR_TREE", "INCR_ONLY",
                            "MAX_TRES", "MAX_TRES_GRES", "NO_NORMAL_ALL", "NO_NORMAL_ASSOC", "NO_NORMAL_PART",
                            "NO_NORMAL_QOS", "NO_NORMAL_TRES", "SMALL_RELATIVE_TO_TIME")),
    "PriorityUsageResetPeriod": Choice(("NONE", "NOW", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY")),
    "PriorityWeightAge": UINT32,
    "PriorityWeightAssoc": UINT32,
    "PriorityWeightFairshare": UINT32,
    "PriorityWeightJobSize": UINT32,
    "PriorityWeightPartition": UINT32,
    "PriorityWeightQOS": UINT32,
    "PriorityWeightTRES": TRES_WEIGHTS,
    "FairShareDampeningFactor": Integer(1, 65533),
    # limits and defaults
    "MaxJobCount": Integer(1, MAX_UINT32),
    "MaxArraySize": Integer(0, 4000001),
    "MaxStepCount": Integer(1, MAX_UINT32),
    "MaxTasksPerNode": Integer(1, 65533),
    "MaxBatchRequeue": Integer(0, 65533),
    "MaxDBDMsgs": Integer(10000, MAX_UINT32),
    "FirstJobId": Integer(1, 67043327),
    "MaxJobId": Integer(1, 67043328),
    "DefMemPerCPU": UINT32,
    "DefMemPerNode": UINT32,
    "DefMemPerGPU": UINT32,
    "DefCpuPerGPU": UINT32,
    "MaxMemPerCPU": MEGABYTES,
    "MaxMemPerNode": MEGABYTES,
    "MinJobAge": Integer(0, MAX_UINT32),
    "InactiveLimit": Integer(0, 65533),
    "OverTimeLimit": Integer(0, 65533, ("UNLIMITED",)),
    "WaitTime": Integer(0, 65533),
    "CompleteWait": Integer(0, 65533),
    "ResvOverRun": Integer(0, 65533, ("UNLIMITED",)),
    "EnforcePartLimits": Choice(("ALL", "ANY", "NO", "YES")),
    "DisableRootJobs": YES_NO,
    "JobRequeue": ZERO_ONE,
    "JobFileAppend": ZERO_ONE,
    "KillOnBadExit": ZERO_ONE,
    "RequeueExit": EXIT_CODES,
    "RequeueExitHold": EXIT_CODES,
    "TrackWCKey": YES_NO,
    "PropagatePrioProcess": Choice(("0", "1", "2")),
    "PropagateResourceLimits": RLIMITS,
    "PropagateResourceLimitsExcept": RLIMITS,
    "VSizeFactor": Integer(0, 65533),
    "Licenses": LICENSES,
    "MailDomain": DOMAIN,
    "GroupUpdateTime": Integer(0, 65533),
    "GroupUpdateForce": ZERO_ONE,
    "ReconfigFlags": Words(("KeepPartInfo", "KeepPartState", "KeepPowerSaveSettings", "KeepNodeStateFuture")),
    # timeouts (seconds)
    "MessageTimeout": Integer(1, 300),
    "SlurmctldTimeout": SECONDS,
    "SlurmdTimeout": SECONDS,  # (0 would leave a dead slurmd's node up: the Syncer's DOWN route needs it)
    "BatchStartTimeout": SECONDS,
    "TCPTimeout": SECONDS,
    "EioTimeout": SECONDS,
    "UnkillableStepTimeout": SECONDS,
    "PrologEpilogTimeout": Integer(PROLOG_EPILOG_TIMEOUT_FLOOR, 65533),
    # logging
    "SlurmctldDebug": DEBUG_LEVELS,
    "SlurmdDebug": DEBUG_LEVELS,
    "SlurmctldSyslogDebug": DEBUG_LEVELS,
    "SlurmdSyslogDebug": DEBUG_LEVELS,
    "SlurmSchedLogLevel": ZERO_ONE,
    "LogTimeFormat": Words(("iso8601", "iso8601_ms", "rfc5424", "rfc5424_ms", "rfc3339", "clock", "short",
                            "thread_id", "format_stderr")),
    "DebugFlags": Words(("Accrue", "Agent", "Backfill", "BackfillMap", "BurstBuffer", "Cgroup", "ConMgr", "CPU_Bind",
                         "CpuFrequency", "Data", "DBD_Agent", "Dependency", "Energy", "Federation", "Gres", "Hetjob",
                         "Gang", "GLOB_SILENCE", "JobAccountGather", "JobComp", "License", "Network", "NetworkRaw",
                         "NodeFeatures", "NO_CONF_HASH", "Power", "Priority", "Profile", "Protocol", "Reservation",
                         "Route", "Script", "SelectType", "Steps", "Switch", "TraceJobs", "Triggers")),
    # daemons, launch, accounting, MPI
    "SlurmctldParameters": OPTIONS,
    "SlurmdParameters": OPTIONS,
    "LaunchParameters": OPTIONS,
    "MpiDefault": Choice(("none", "pmi2", "pmix", "pmix_v3", "pmix_v4", "pmix_v5")),
    "MpiParams": Range(1024, 65535, "ports=", "ports=LOW-HIGH within 1024-65535"),
    "SrunPortRange": PORT_RANGE,
    "AccountingStorageEnforce": Words(("all", "associations", "limits", "nojobs", "nosteps", "qos", "safe",
                                       "wckeys")),
    "AccountingStorageTRES": TRES_LIST,
    "AccountingStoreFlags": Words(("job_comment", "job_env", "job_extra", "job_script", "no_stdio")),
    "JobAcctGatherFrequency": OPTIONS,
    "JobAcctGatherParams": Words(("NoShared", "UsePss", "OverMemoryKill", "DisableGPUAcct")),
}
ALLOWED: dict[str, tuple[str, ValueType]] = {key.lower(): (key, kind) for key, kind in _ALLOWED.items()}

# Partition options an author may set (slurm.conf(5), "PARTITION CONFIGURATION").
_PARTITION_ALLOWED: dict[str, ValueType] = {
    "AllowAccounts": NAME_LIST, "AllowGroups": NAME_LIST, "AllowQos": NAME_LIST,
    "DenyAccounts": NAME_LIST, "DenyQos": NAME_LIST,
    "Alternate": Pattern(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,39}", "a partition name"),
    "QOS": Pattern(_NAME, "a QOS name"),
    "DefaultTime": TIME_OR_UNLIMITED, "MaxTime": TIME_OR_UNLIMITED,
    "DefCpuPerGPU": UINT32, "DefMemPerCPU": UINT32, "DefMemPerGPU": UINT32, "DefMemPerNode": UINT32,
    "MaxMemPerCPU": MEGABYTES, "MaxMemPerNode": MEGABYTES,
    "MaxCPUsPerNode": MEGABYTES, "MaxCPUsPerSocket": MEGABYTES,
    "MaxNodes": MEGABYTES, "MinNodes": UINT32,
    "DisableRootJobs": YES_NO, "ExclusiveUser": YES_NO, "ExclusiveTopo": YES_NO, "Hidden": YES_NO, "LLN": YES_NO,
    "ReqResv": YES_NO, "RootOnly": YES_NO, "PowerDownOnIdle": YES_NO,
    "GraceTime": Integer(0, 65533),
    "OverSubscribe": Pattern(r"(?i:EXCLUSIVE|NO|(FORCE|YES)(:[0-9]{1,4})?)", "EXCLUSIVE, NO, YES[:N] or FORCE[:N]"),
    "OverTimeLimit": Integer(0, 65533, ("UNLIMITED",)),
    "PreemptMode": PREEMPT_MODE,
    "PriorityJobFactor": Integer(0, 65533), "PriorityTier": Integer(0, 65533),
    "State": Choice(("UP", "DOWN", "DRAIN", "INACTIVE")),
    "TRESBillingWeights": TRES_WEIGHTS,
}
PARTITION_ALLOWED: dict[str, tuple[str, ValueType]] = {key.lower(): (key, kind)
                                                       for key, kind in _PARTITION_ALLOWED.items()}

# Keys sunk writes (lower case) -> where their value comes from.
OWNED: dict[str, str] = {key.lower(): why for key, why in {
    "ClusterName": "spec.slurm.clusterName",
    "SlurmctldHost": "the slurmctld StatefulSet (spec.slurmctld.backup)",
    "ControlMachine": "the slurmctld StatefulSet",
    "ControlAddr": "the slurmctld StatefulSet",
    "BackupController": "spec.slurmctld.backup",
    "BackupAddr": "spec.slurmctld.backup",
    "SlurmctldAddr": "the slurmctld Service",
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
    "PrologTimeout": "PrologEpilogTimeout (at least the prolog's lock budget; not every release sunk supports "
                     "knows PrologTimeout)",
    "EpilogTimeout": "PrologEpilogTimeout (at least the epilog's budget; not every release sunk supports knows "
                     "EpilogTimeout)",
    "SelectType": "sunk (select/cons_tres)",
    "SelectTypeParameters": "sunk (CR_Core_Memory)",
    "KillWait": "spec.killWait (the scheduler's --slurm-kill-wait must agree)",
    "GresTypes": "spec.gresTypes",
    "MaxNodeCount": "spec.maxNodeCount",
    "TreeWidth": "sunk (dynamic nodes)",
    "ProctrackType": "spec.slurm.cgroup (proctrack/cgroup, or proctrack/linuxproc for none)",
    "TaskPlugin": "spec.slurm.cgroup (task/cgroup,task/affinity, or task/affinity for none)",
    "AccountingStorageType": "spec.slurmdbd",
    "AccountingStorageHost": "spec.slurmdbd",
    "AccountingStoragePort": "spec.slurmdbd",
    "JobAcctGatherType": "spec.slurm.cgroup (jobacct_gather/cgroup, or jobacct_gather/linux for none)",
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

# Keys that name a program, a file or a plugin (lower case) -> what. Never from a SlurmCluster: its editor
# would have root in slurmd or slurmctld run, read or write any file.
_ROOT_PROGRAM = "a program {daemon} runs as root"
UNSAFE: dict[str, str] = {key.lower(): why for key, why in {
    "HealthCheckProgram": _ROOT_PROGRAM.format(daemon="slurmd"),
    "RebootProgram": _ROOT_PROGRAM.format(daemon="slurmd"),
    "UnkillableStepProgram": _ROOT_PROGRAM.format(daemon="slurmd"),
    "PrologSlurmctld": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "EpilogSlurmctld": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "ResumeProgram": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "ResumeFailProgram": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "SuspendProgram": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "MailProg": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "SlurmctldPrimaryOnProg": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "SlurmctldPrimaryOffProg": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "ResvProlog": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "ResvEpilog": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "JobCompPassScript": _ROOT_PROGRAM.format(daemon="slurmctld"),
    "TaskProlog": "a program slurmstepd runs in every job step",
    "TaskEpilog": "a program slurmstepd runs in every job step",
    "SrunProlog": "a program srun runs for every step",
    "SrunEpilog": "a program srun runs for every step",
    "PlugStackConfig": "a file of SPANK plugins slurmd loads as root",
    "JobSubmitPlugins": "plugins slurmctld loads as root (job_submit/lua runs a script from a path)",
    "CliFilterPlugins": "plugins every Slurm command loads (cli_filter/lua runs a script from a path)",
    "PrEpPlugins": "plugins slurmctld and slurmd load as root",
    "SlurmdLogFile": "a file slurmd writes as root",
    "SlurmctldLogFile": "a file slurmctld writes",
    "SlurmSchedLogFile": "a file slurmctld writes",
    "SlurmctldPidFile": "a file slurmctld writes",
    "SlurmdPidFile": "a file slurmd writes as root",
    "JobCompLoc": "a file or database slurmctld writes every job to",
    "JobCompType": "a plugin slurmctld loads (jobcomp/filetxt writes JobCompLoc)",
    "TLSParameters": "certificate and key files the daemons read",
    "TmpFS": "a directory slurmd reports and cleans",
}.items()}
# Words that make an unknown key's name one of a program, a file or a plugin, for its refusal's message.
_UNSAFE_SUFFIXES = ("program", "prog", "prolog", "epilog", "script", "file", "loc", "dir", "path", "config",
                    "plugin", "plugins", "type", "params", "parameters")


def refusal(key: str, *, partition: bool = False) -> str | None:
    """Why ``key`` cannot be set here, or None when it is allowed."""
    lower = key.lower()
    owned = (OWNED_PARTITION if partition else OWNED).get(lower)
    if owned is not None:
        return f"{key} is sunk's to set (from {owned}); it cannot be overridden here"
    if lower in (PARTITION_ALLOWED if partition else ALLOWED):
        return None
    unsafe = UNSAFE.get(lower)
    if unsafe is not None:
        return (f"{key} names {unsafe}: it is never set through slurmConfig, which whoever may edit the "
                f"SlurmCluster writes (they would choose what runs as root); sunk offers no other way yet")
    where = "a partition option" if partition else "a slurm.conf key"
    guess = next((s for s in _UNSAFE_SUFFIXES if lower.endswith(s)), None)
    kind = f" (its name says it names a {guess}: such keys are never allowed)" if guess else ""
    return (f"{key} is not {where} sunk allows{kind}; see docs/install.md for the list (an unknown key would stop "
            f"slurmctld from starting)")


def check_pair(key: str, value: Any, *, partition: bool = False) -> tuple[tuple[str, str] | None, str | None]:
    """``(key, value)`` fit for slurm.conf, or a problem. Numbers are written as they are."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None, f"{key[:64]!r}: the value must be a string or a whole number"
    text = str(value)
    if not KEY.fullmatch(key):
        return None, f"{key[:64]!r} is not a slurm.conf key (letters and digits, a letter first)"
    refused = refusal(key, partition=partition)
    if refused is not None:
        return None, refused
    if not VALUE.fullmatch(text):
        return None, (f"{key}: the value {text[:80]!r} must be printable ASCII without blanks, quotes, '#' or "
                      f"'\\', at most 1024 characters (one Key=Value per line)")
    _, kind = (PARTITION_ALLOWED if partition else ALLOWED)[key.lower()]
    wrong = kind.problem(text)
    if wrong is not None:
        return None, f"{key}: the value {text[:80]!r} must be {wrong}"
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

