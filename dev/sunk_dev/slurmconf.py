"""slurm.conf and friends for the dev cluster. Pure text rendering, no I/O.

Settings worth knowing (and why):
- ``SlurmdParameters=config_overrides`` lets each node declare 64 CPUs, 128 GiB and
  two GPUs on a 2-core machine. The GPUs are character devices aliasing /dev/null.
- node1..N are dynamic nodes (``slurmd -Z``) of two NodeSets (``sunk_dev.cluster``), one per GPU
  type; a ``NodeSet=`` of slurm.conf on their feature puts them in the batch partition.
- Preemption is by QOS (``preempt/qos``): QOS ``high`` preempts ``normal``. QOS only
  works with accounting, so slurmdbd + MariaDB run too, as in every real SUNK cluster.
- ``KillWait=30``: the placeholder script's budget between SIGTERM and SIGKILL.
- ``ReturnToService=2``: a DOWN node that talks again resumes by itself, which is why
  the Syncer never resumes DOWN nodes.
- ``PrologFlags=Alloc``: the prolog runs at allocation, before the batch script, on
  every node; ``prolog.sh``/``epilog.sh`` run each executable in prolog.d/epilog.d.
- High-throughput knobs from Slurm's guide: small ``MinJobAge``, ``max_rpc_cnt``,
  ``bf_continue``, generous ``MaxJobCount``.
- ``batch_sched_delay=0``: slurmctld allocates a queued batch job only at a whole-second tick of its
  background loop, by default at most every 3 s after its last pass; with 0, at the next tick. A
  placeholder's Pod waits for that (docs/scheduler.md), and the default's 0 to 3 s moved the
  benchmarks' rounds more than sunk did (docs/benchmarks.md).
"""

from __future__ import annotations

from attrs import frozen

CLUSTER_NAME = "dev"
PARTITION = "batch"
NODE_CPUS = 64
NODE_MEMORY_MB = 131072
NODE_GPUS = 2
# Two GPU types, node by node in turn (node1 h100, node2 a100, ...), so a Pod can ask for one
# (--gpu-types) while untyped requests (gres/gpu:N) still take either.
GPU_TYPES = ("h100", "a100")
# Matches the Nodes' gpu.nvidia.com/class label, so GPU-class affinity maps onto a Slurm constraint.
NODE_FEATURES = "FAKE_GPU"
# One static node, defined here and never started (no partition: nothing runs there): the Slurm contract's
# "a node of slurm.conf cannot be deleted" needs one, since every node with a slurmd is dynamic.
STATIC_NODE = "static1"
STATIC_NODE_PORT = 18998
# The stand-in nodes (node1..N) register dynamically from their NodeSets' Pods with this feature, which
# puts them in the batch partition through a NodeSet of slurm.conf (Slurm has no `slurmd -Z` partitions).
STAND_IN_NODESET = "stand_in"
SLURMCTLD_PORT = 6817
SLURMDBD_PORT = 6819
SLURMRESTD_PORT = 6820
KILL_WAIT = 30
MIN_JOB_AGE = 60  # seconds slurmctld keeps a finished job's record
# Dynamic nodes (`slurmd -Z`, the real kubelet Node's slurmd) with this feature join this partition
# only: Pods land there only when they ask for it.
DYNAMIC_FEATURE = "real"
DYNAMIC_PARTITION = "real"
# Room for dynamic nodes (they count against MaxNodeCount): the NodeSet benchmark registers 200.
DYNAMIC_NODES = 512


@frozen
class SlurmLayout:
    nodes: int = 4
    phantom_nodes: int = 0  # defined in slurm.conf but never started (benchmarks)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(f"node{i}" for i in range(1, self.nodes + 1))

    @property
    def phantom_names(self) -> tuple[str, ...]:
        return tuple(f"phantom{i}" for i in range(1, self.phantom_nodes + 1))


def slurm_conf(layout: SlurmLayout) -> str:
    lines = [
        f"ClusterName={CLUSTER_NAME}",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={SLURMCTLD_PORT}",
        "SlurmUser=slurm",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "AuthAltTypes=auth/jwt",
        "AuthAltParameters=jwt_key=/etc/slurm/jwt.key",
        "StateSaveLocation=/var/spool/slurmctld",
        "SlurmdSpoolDir=/var/spool/slurmd/%n",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd-%n.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MailProg=/bin/true",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "GresTypes=gpu",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=localhost",
        f"AccountingStoragePort={SLURMDBD_PORT}",
        "AccountingStorageEnforce=associations,limits,qos",
        "AccountingStorageTRES=gres/gpu",
        "PriorityType=priority/multifactor",
        "PriorityWeightQOS=100000",
        "PriorityWeightAge=0",
        "PriorityWeightFairshare=0",
        "PreemptType=preempt/qos",
        "PreemptMode=REQUEUE",
        "JobRequeue=1",
        f"KillWait={KILL_WAIT}",
        "ReturnToService=2",
        "SlurmdTimeout=30",
        "MessageTimeout=30",
        "InactiveLimit=0",
        f"MinJobAge={MIN_JOB_AGE}",
        "MaxJobCount=200000",
        f"MaxNodeCount={layout.nodes + layout.phantom_nodes + 1 + DYNAMIC_NODES}",
        "SchedulerParameters=batch_sched_delay=0,max_rpc_cnt=150,bf_continue,bf_interval=5,default_queue_depth=1000",
        "PrologFlags=Alloc",
        "Prolog=/etc/slurm/prolog.sh",
        "Epilog=/etc/slurm/epilog.sh",
        "PrologEpilogTimeout=120",
        f"NodeName={STATIC_NODE} NodeHostname=localhost Port={STATIC_NODE_PORT} CPUs=1 RealMemory=100 State=DOWN "
        "Reason=never_started",
        f"NodeSet={STAND_IN_NODESET} Feature={NODE_FEATURES}",
        f"PartitionName={PARTITION} Nodes={STAND_IN_NODESET} Default=YES MaxTime=INFINITE State=UP",
        f"NodeSet=dynamic Feature={DYNAMIC_FEATURE}",
        f"PartitionName={DYNAMIC_PARTITION} Nodes=dynamic Default=NO MaxTime=INFINITE State=UP",
    ]
    if layout.phantom_nodes:
        lines += [
            f"NodeName=phantom[1-{layout.phantom_nodes}] NodeHostname=localhost Port=18999 "
            f"CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB} State=UNKNOWN",
            f"PartitionName=phantom Nodes=phantom[1-{layout.phantom_nodes}] Default=NO MaxTime=INFINITE State=UP",
        ]
    return "\n".join(lines) + "\n"


def gpu_type(node: str) -> str:
    """The GPU type of a dev node (``nodeN``): GPU_TYPES in turn."""
    return GPU_TYPES[(int(node.removeprefix("node")) - 1) % len(GPU_TYPES)]


def gres(node: str) -> str:
    """What a stand-in node registers: its GPUs (``gpu:h100:2``), as its NodeSet's ``slurm.gres`` says."""
    return f"gpu:{gpu_type(node)}:{NODE_GPUS}"


# Every node's GPUs come with its registration: a dynamic node's gres.conf lines are its Pod's (each slurmd
# appends them to a gres.conf of its own: sunk_dev.standin_slurmd, the slurmd image's entrypoint).
GRES_CONF = "AutoDetect=off\n"


CGROUP_CONF = "CgroupPlugin=disabled\n"


def slurmdbd_conf(storage_pass: str) -> str:
    return "\n".join([
        "AuthType=auth/munge",
        # slurmrestd forwards JWT-authenticated requests (e.g. GET /partitions) to slurmdbd.
        "AuthAltTypes=auth/jwt",
        "AuthAltParameters=jwt_key=/etc/slurm/jwt.key",
        "DbdHost=localhost",
        f"DbdPort={SLURMDBD_PORT}",
        "SlurmUser=slurm",
        "LogFile=/var/log/slurm/slurmdbd.log",
        "PidFile=/run/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        "StorageHost=localhost",
        "StorageLoc=slurm_acct_db",
        "StorageUser=slurm",
        f"StoragePass={storage_pass}",
        "",
    ])


def hook_runner(kind: str, base: str = "/etc/slurm") -> str:
    """prolog.sh / epilog.sh: run every executable in ``<kind>.d`` in order; any failure fails."""
    return f"""#!/bin/bash
# Hook point: sunk's {kind} (and any site {kind}) lives in {base}/{kind}.d.
set -u
for hook in {base}/{kind}.d/*; do
    [ -x "$hook" ] || continue
    "$hook" || {{ echo "{kind} hook $hook failed with $?" >&2; exit 1; }}
done
exit 0
"""
