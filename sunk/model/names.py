"""Every name the SUNK spec fixes: annotations, labels, conditions, the taint key.

One module, so that a typo is an import error rather than a silent mismatch with
what dashboards, NHC tooling and operators already expect.
"""

from __future__ import annotations

from typing import Final

DOMAIN: Final = "sunk.coreweave.com"

# Pod-scheduler annotations (the seed's annotation table), read from user Pods.
ANN_ACCOUNT: Final = f"{DOMAIN}/account"
ANN_COMMENT: Final = f"{DOMAIN}/comment"
ANN_CONSTRAINTS: Final = f"{DOMAIN}/constraints"
ANN_EXCLUSIVE: Final = f"{DOMAIN}/exclusive"
ANN_EXCLUDED_NODES: Final = f"{DOMAIN}/excluded-nodes"
ANN_REQUIRED_NODES: Final = f"{DOMAIN}/required-nodes"
ANN_PARTITION: Final = f"{DOMAIN}/partition"
ANN_PREFER: Final = f"{DOMAIN}/prefer"
ANN_PRIORITY: Final = f"{DOMAIN}/priority"
ANN_QOS: Final = f"{DOMAIN}/qos"
ANN_RESERVATION: Final = f"{DOMAIN}/reservation"
ANN_USER_ID: Final = f"{DOMAIN}/user-id"
ANN_GROUP_ID: Final = f"{DOMAIN}/group-id"
ANN_CURRENT_WORKING_DIR: Final = f"{DOMAIN}/current-working-dir"
ANN_TIMEOUT: Final = f"{DOMAIN}/timeout"

# Gang scheduling (issue 21), on a workload's Pods (its Pod template): ``none`` opts the Pods out
# (each its own placeholder job); on a JobSet's Pods ``jobset`` (the default: one gang for the whole
# JobSet), ``replicated-job`` (one gang per replicated Job) or ``job`` (one gang per child Job).
ANN_GANG: Final = f"{DOMAIN}/gang"

# Written by sunk onto scheduled Pods.
ANN_JOB_ID: Final = f"{DOMAIN}/job-id"
ANN_SLURM_NODE: Final = f"{DOMAIN}/slurm-node"

# Node locking: the Node taint and the slurmd Pod annotation share one key.
LOCK_KEY: Final = f"{DOMAIN}/lock"
# Node locking: on the Node, the slurmd Pods (``namespace/name``, comma-separated) whose lock holds its taint; a
# Syncer lifts the taint only once no other holder is left (two releases' slurmd Pods may share a Node).
ANN_LOCK_HOLDERS: Final = f"{DOMAIN}/lock-holders"
# Node locking: a pre-hook's lock request on the slurmd Pod, one annotation per job (``...job-<id>``).
LOCK_REQUEST_PREFIX: Final = "lock.sunk.coreweave.com/job-"

# Labels the Syncer writes on slurmd Pods (for kube-state-metrics dashboards).
LABEL_RUNNING: Final = f"{DOMAIN}/running"
LABEL_DRAIN: Final = f"{DOMAIN}/drain"
LABEL_NOT_RESPONDING: Final = f"{DOMAIN}/not_responding"

# Pod conditions the Syncer writes, and the one NHC tooling writes.
COND_SLURM_DRAIN: Final = "SlurmDrain"
COND_SLURM_RUNNING: Final = "SlurmRunning"
COND_SLURM_NOT_RESPONDING: Final = "SlurmNotResponding"
COND_HPC_VERIFICATION: Final = "HPCVerification"

# Node side: cordon condition and reason annotation (public SUNK hints).
COND_SLURM_CORDON: Final = "SlurmCordon"
ANN_CORDON_REASON: Final = "node.coreweave.cloud/cordonReason"

# Drain reasons set from Kubernetes carry this prefix; only those are ever touched.
K8S_DRAIN_PREFIX: Final = "k8s:"
# The GPUs a Pod asks for and a Node offers through the device plugin (``spec.containers[].resources``,
# ``status.allocatable``): Slurm's ``gres/gpu``.
GPU_RESOURCE: Final = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"  # the device plugin's MIG slices (its "mixed" strategy)
VERIFY_UNDRAIN: Final = "verify-undrain"

# Reboot hook defaults.
DEFAULT_REBOOT_CONDITION: Final = "PhaseState"
DEFAULT_REBOOT_REASON: Final = "production-powerreset"

# NodeSet (sunk-operator): the CRDs' group and version, and what ties a slurmd Pod to its NodeSet.
NODESET_VERSION: Final = "v1alpha1"
NODESET_API_VERSION: Final = f"{DOMAIN}/{NODESET_VERSION}"
# On slurmd Pods and NodeSlices: the name of the NodeSet that owns them (label values <= 63).
LABEL_NODESET: Final = f"{DOMAIN}/nodeset"
# On slurmd Pods: the hash of what the NodeSet puts into every Pod (a change means "outdated").
ANN_TEMPLATE_HASH: Final = f"{DOMAIN}/template-hash"
# On slurmd Pods: the hash of what its Slurm node registers with, NodeSet and Node together
# (GPUs, labels read as features and partitions): a change means "re-register".
ANN_REGISTRATION_HASH: Final = f"{DOMAIN}/registration-hash"
# On slurmd Pods the operator will delete once Slurm shows the node drained and idle: why.
# The Syncer drains such a node with a ``k8s:`` reason (the seeds' "pending deletion").
ANN_PENDING_DELETION: Final = f"{DOMAIN}/pending-deletion"
# On NodeSets: held until every Pod of a deleted NodeSet has been drained and removed.
FINALIZER_NODESET: Final = f"{DOMAIN}/nodeset"
# On NodeSets: what their deletion does to the jobs on their nodes. ``drain`` (the default) waits for
# them to end; ``cancel-jobs`` cancels them once the nodes are drained (the chart's uninstall hook sets it).
ANN_ON_DELETE: Final = f"{DOMAIN}/on-delete"
ON_DELETE_DRAIN: Final = "drain"
ON_DELETE_CANCEL_JOBS: Final = "cancel-jobs"

# SlurmCluster (sunk-operator): the control plane of one Slurm cluster as Kubernetes objects.
SLURMCLUSTER_API_VERSION: Final = f"{DOMAIN}/{NODESET_VERSION}"
# On every object a SlurmCluster owns: its name (the operator's informers select on the key).
LABEL_SLURM_CLUSTER: Final = f"{DOMAIN}/slurm-cluster"
# On the SlurmCluster's ConfigMap: the hash of the Slurm configuration it holds.
ANN_CONFIG_HASH: Final = f"{DOMAIN}/config-hash"
# On slurmdbd's Pod template: the hash of its slurmdbd.conf, which slurmdbd reads only at start (a change rolls it).
ANN_SLURMDBD_CONF_HASH: Final = f"{DOMAIN}/slurmdbd-conf-hash"
