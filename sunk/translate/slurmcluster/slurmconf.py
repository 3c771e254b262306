"""A SlurmCluster's configuration files: ``slurm.conf``, ``cgroup.conf``, ``gres.conf`` and
``slurmdbd.conf``, rendered from its checked spec, and their hash.

What sunk needs is written first and cannot be overridden (``lines.OWNED``): ``ReturnToService=2``
(the Syncer's DOWN route: a node comes back by itself once its slurmd talks again),
``PrologFlags=Alloc`` with the chart's prolog and epilog when the cluster has the chart's hooks
ConfigMap (the prolog locks the Node when the job is allocated; without node locking there is
none), ``SelectTypeParameters=CR_Core_Memory``, ``KillWait`` (the scheduler's ``--slurm-kill-wait``),
``AuthAltTypes=auth/jwt`` (slurmrestd and sunk's daemons), ``GresTypes``,
and dynamic nodes: no ``NodeName`` line, ``MaxNodeCount``, ``TreeWidth=65533`` (Slurm's advice
for nodes whose addresses slurmctld learns at registration), each NodeSet's nodes registering
with ``slurmd -Z`` and the feature ``nodeset-<name>``, which a Slurm ``NodeSet`` turns into a
partition's members. The author's ``slurmConfig`` lines follow, then the partitions.
"""

from __future__ import annotations

import hashlib

from attrs import frozen

from . import paths
from .spec import SlurmClusterSpec

HEADER = "# Rendered by sunk-operator from SlurmCluster {ns}/{name}: edit the SlurmCluster, not this file.\n"


@frozen
class ConfigFiles:
    """The ConfigMap's data: file name -> text, and its hash (what a reconfigure is due for)."""

    files: tuple[tuple[str, str], ...]

    @property
    def data(self) -> dict[str, str]:
        return dict(self.files)

    @property
    def hash(self) -> str:
        return file_hash(*(part for pair in self.files for part in pair))


def file_hash(*names_and_texts: str) -> str:
    """A short digest of files given as name, text, name, text...: length-prefixed, so no two lists collide."""
    digest = hashlib.sha256()
    for part in names_and_texts:
        digest.update(f"{len(part)}:{part}".encode())
    return digest.hexdigest()[:16]


def nodeset_feature(nodeset: str) -> str:
    """The feature every Slurm node of NodeSet ``nodeset`` registers with (``slurmd -Z --conf``)."""
    return f"nodeset-{nodeset}"


def slurm_nodeset(nodeset: str) -> str:
    """The Slurm ``NodeSet`` of a Kubernetes NodeSet's nodes, which partitions name."""
    return f"ns-{nodeset}"


def _lines(pairs: list[tuple[str, str]]) -> str:
    return "".join(f"{key}={value}\n" for key, value in pairs)


def slurm_conf(spec: SlurmClusterSpec) -> str:
    controllers = [paths.controller_host(spec, i) for i in range(paths.controller_replicas(spec))]
    required: list[tuple[str, str]] = [("ClusterName", spec.cluster_name)]
    required += [("SlurmctldHost", f"{host}({paths.controller_address(spec, host)})") for host in controllers]
    required += [
        ("SlurmUser", paths.SLURM_USER),
        ("SlurmctldPort", str(paths.SLURMCTLD_PORT)),
        ("SlurmdPort", str(paths.SLURMD_PORT)),
        ("StateSaveLocation", paths.state_dir(spec)),
        ("SlurmctldPidFile", f"{paths.SLURMCTLD_RUN_DIR}/slurmctld.pid"),  # non-root: /run is root's
        ("SlurmdSpoolDir", paths.SLURMD_SPOOL_DIR),
        ("AuthType", "auth/munge"),
        ("CredType", "cred/munge"),
        ("AuthAltTypes", "auth/jwt"),
        ("AuthAltParameters", f"jwt_key={paths.JWT_KEY_FILE}"),
        ("ReturnToService", "2"),
        ("PrologFlags", "Alloc"),
        # (the chart's prolog and epilog are there only with the hooks ConfigMap: a Prolog naming nothing
        # fails every job and drains its node)
        *([("Prolog", paths.PROLOG), ("Epilog", paths.EPILOG)] if spec.hooks_configmap else []),
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_Core_Memory"),
        *_process_plugins(spec.cgroup),
        ("KillWait", str(spec.kill_wait)),
        ("MaxNodeCount", str(spec.max_node_count)),
        ("TreeWidth", "65533"),
    ]
    if spec.gres_types:
        required.append(("GresTypes", ",".join(spec.gres_types)))
    if spec.accounting:
        required += [("AccountingStorageType", "accounting_storage/slurmdbd"),
                     ("AccountingStorageHost", paths.name(spec, "slurmdbd")),
                     ("AccountingStoragePort", str(paths.SLURMDBD_PORT))]
    text = HEADER.format(ns=spec.namespace, name=spec.name) + _lines(required)
    if spec.extra_lines:
        text += "# The SlurmCluster's slurmConfig\n" + _lines(list(spec.extra_lines))
    nodesets = sorted({member for partition in spec.partitions for member in partition.nodesets})
    if nodesets:
        text += "# Each NodeSet's dynamic nodes (slurmd -Z, Feature=nodeset-<name>)\n"
        text += "".join(f"NodeSet={slurm_nodeset(n)} Feature={nodeset_feature(n)}\n" for n in nodesets)
    for partition in spec.partitions:
        words = [f"PartitionName={partition.name}", "Nodes=" + ",".join(slurm_nodeset(n) for n in partition.nodesets),
                 f"Default={'YES' if partition.default else 'NO'}"]
        words += [f"{key}={value}" for key, value in partition.options]
        text += " ".join(words) + "\n"
    return text


def _process_plugins(cgroup: str) -> list[tuple[str, str]]:
    """How slurmd tracks, binds and accounts a job's processes: through cgroups (v2 or v1), or without any
    (``none``: the Node's cgroups are neither, or not slurmd's to write)."""
    if cgroup == "none":
        return [("ProctrackType", "proctrack/linuxproc"), ("TaskPlugin", "task/affinity"),
                ("JobAcctGatherType", "jobacct_gather/linux")]
    return [("ProctrackType", "proctrack/cgroup"), ("TaskPlugin", "task/cgroup,task/affinity"),
            ("JobAcctGatherType", "jobacct_gather/cgroup")]


def cgroup_conf(spec: SlurmClusterSpec) -> str:
    """spec.slurm.cgroup's plugin: v2 without systemd (no systemd runs in a container), v1 (a legacy or hybrid
    Node), each with what Constrain* needs in a Pod; none: ``disabled``, no cgroup touched (Slurm 24.11+)."""
    header = HEADER.format(ns=spec.namespace, name=spec.name)
    constraints = [("ConstrainCores", "yes"), ("ConstrainRAMSpace", "yes"), ("ConstrainDevices", "yes")]
    if spec.cgroup == "none":
        return header + _lines([("CgroupPlugin", "disabled")])
    if spec.cgroup == "v1":
        return header + _lines([("CgroupPlugin", "cgroup/v1"), *constraints])
    return header + _lines([("CgroupPlugin", "cgroup/v2"), ("IgnoreSystemd", "yes"), *constraints])


def gres_conf(spec: SlurmClusterSpec) -> str:
    """GPUs found by NVML; each node's counts come with its registration (the NodeSet's SUNK_GRES_CONF)."""
    text = HEADER.format(ns=spec.namespace, name=spec.name)
    if "gpu" in spec.gres_types:
        text += "AutoDetect=nvml\n"
    return text


def slurmdbd_conf(spec: SlurmClusterSpec) -> str:
    """Without ``StoragePass``: the slurmdbd Pod's init container appends it from the password file
    (paths.DB_PASSWORD_FILE) to slurmdbd's own copy, of mode 0600 (slurmdbd refuses any but 0600 and 0640, and
    an owner but SlurmUser and root: src/slurmdbd/read_config.c), in paths.SLURMDBD_CONF_DIR."""
    external = spec.external_database
    pairs = [
        ("DbdHost", paths.controller_host(spec, 0, "slurmdbd")),
        ("DbdPort", str(paths.SLURMDBD_PORT)),
        ("SlurmUser", paths.SLURM_USER),
        ("AuthType", "auth/munge"),
        ("AuthAltTypes", "auth/jwt"),
        ("AuthAltParameters", f"jwt_key={paths.JWT_KEY_FILE}"),
        ("StorageType", "accounting_storage/mysql"),
        ("StorageHost", external.host if external else paths.name(spec, "mariadb")),
        ("StoragePort", str(external.port if external else paths.MARIADB_PORT)),
        ("StorageUser", external.user if external else paths.DB_USER),
        ("StorageLoc", external.database if external else paths.DB_NAME),
        ("PidFile", f"{paths.SLURMDBD_RUN_DIR}/slurmdbd.pid"),  # an emptyDir: /run is root's
    ]
    return HEADER.format(ns=spec.namespace, name=spec.name) + _lines(pairs)


def render(spec: SlurmClusterSpec) -> ConfigFiles:
    files = [("slurm.conf", slurm_conf(spec)), ("cgroup.conf", cgroup_conf(spec)), ("gres.conf", gres_conf(spec))]
    if spec.accounting:
        files.append(("slurmdbd.conf", slurmdbd_conf(spec)))
    return ConfigFiles(tuple(files))
