"""What a SlurmCluster lends the Pods that speak Slurm: its configuration, its munge key through a
munged sidecar, and the chart's prolog, epilog and hooks.env; for the slurmd Pods of its NodeSets
and for its own login Pods.

One copy of the names: ``node_mounts`` reads them from the cluster's checked spec with the same
functions its own objects are named by (``paths``), so the NodeSet reconciler and the SlurmCluster
reconciler can never disagree on which ConfigMap or Secret is the cluster's.

Every part comes whole or not at all (``PodPart``): a NodeSet's Pod template that already has a
container of its sidecar's name, or a mount on or under (or above) one of its paths keeps its own,
and the operator adds nothing of that part. So the user's template wins where it says something.

The volume names the operator adds (``RESERVED_VOLUMES``) are its own: a template that defines a
volume of one of them, or mounts one in any container, is refused (``reserved_volume_uses``, a
problem of the NodeSet's spec). Else a template container mounting ``sunk-munge-key`` would read
the key the operator lends munged, and a template volume of that name would feed the operator's
munged a Secret of the template's choosing. munged's image is the cluster's (``spec.images.slurmd``),
never the template's: no image a NodeSet author picks runs with the key.

The configuration is one projected volume at ``/etc/slurm``: the cluster's ConfigMap whole, and the
chart's prolog and epilog as ``prolog.d/50-sunk.sh`` and ``epilog.d/50-sunk.sh`` (mode 0755), the
paths slurm.conf's ``Prolog``/``Epilog`` name. Projected, not nested: a mount under a ConfigMap
volume needs its mount point made inside a read-only volume, which the runtime refuses; and no
``subPath``, which would never see an update (``scontrol reconfigure`` rereads the file).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attrs import field, frozen

from . import paths
from .spec import DNS_LABEL, MAX_CLUSTER_NAME, SlurmClusterSpec, read_spec

Obj = dict[str, Any]

MUNGED_CONTAINER = "munged"
MUNGE_KEY_DIR = "/etc/munge-key"  # munged's: the operator mounts the key into no other container
MUNGE_SOCKET_DIR = "/run/munge"  # munge's default socket directory, where libmunge looks
MUNGE_SOCKET = f"{MUNGE_SOCKET_DIR}/munge.socket.2"
MUNGE_STATE_DIR = "/var/lib/munge"
HOOKS_ENV_DIR = "/etc/sunk"  # hooks.env, where the prolog and epilog read it
PROLOG_FILE = "prolog.d/50-sunk.sh"  # under paths.CONFIG_DIR: what slurm.conf's Prolog glob runs
EPILOG_FILE = "epilog.d/50-sunk.sh"

VOLUME_CONFIG = "sunk-slurm-config"
VOLUME_MUNGE_KEY = "sunk-munge-key"
VOLUME_MUNGE_SOCKET = "sunk-munge-socket"
VOLUME_MUNGE_STATE = "sunk-munge-state"
VOLUME_HOOKS_ENV = "sunk-hooks-env"
RESERVED_VOLUMES = (VOLUME_CONFIG, VOLUME_MUNGE_KEY, VOLUME_MUNGE_SOCKET, VOLUME_MUNGE_STATE, VOLUME_HOOKS_ENV)

# The SlurmCluster condition a NodeSet naming it reads; reasons a NodeSet cannot use the cluster it names.
NOT_WATCHED = "NotWatched"
NOT_FOUND = "NotFound"
DELETING = "ClusterDeleting"
INVALID = "ClusterInvalid"
NOT_OBSERVED = "ClusterNotObserved"


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@frozen
class NodeMounts:
    """The names a slurmd Pod of the cluster mounts (all from the cluster's spec, none from a NodeSet)."""

    cluster: str
    config_configmap: str
    munge_secret: str
    munged_image: str  # the cluster's slurmd image (it carries munged): the only image that reads the key
    hooks_configmap: str = ""  # "": the cluster lends no prolog, epilog or hooks.env


def node_mounts(spec: SlurmClusterSpec) -> NodeMounts:
    return NodeMounts(cluster=spec.name, config_configmap=paths.config_configmap(spec),
                      munge_secret=paths.munge_secret(spec), munged_image=spec.image("slurmd"),
                      hooks_configmap=spec.hooks_configmap)


def reserved_volume_uses(pod_spec: object) -> list[str]:
    """Where a NodeSet's Pod template (its ``spec``) uses a volume name the operator adds for a SlurmCluster
    (``RESERVED_VOLUMES``): defines one, or mounts one in any container or init container (empty: nowhere)."""
    if not isinstance(pod_spec, Mapping):
        return []
    found = [f"template.spec.volumes[{i}].name: {v.get('name')!r}"
             for i, v in enumerate(_list(pod_spec.get("volumes")))
             if isinstance(v, Mapping) and v.get("name") in RESERVED_VOLUMES]
    for key in ("initContainers", "containers"):
        for i, container in enumerate(_list(pod_spec.get(key))):
            if not isinstance(container, Mapping):
                continue
            for field_name in ("volumeMounts", "volumeDevices"):
                found.extend(f"template.spec.{key}[{i}].{field_name}[{j}].name: {m.get('name')!r}"
                             for j, m in enumerate(_list(container.get(field_name)))
                             if isinstance(m, Mapping) and m.get("name") in RESERVED_VOLUMES)
    return found


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def cluster_name_problem(value: object) -> str | None:
    """Why ``value`` cannot name a SlurmCluster (None: it can)."""
    if not isinstance(value, str) or not DNS_LABEL.fullmatch(value) or len(value) > MAX_CLUSTER_NAME:
        return f"must be a SlurmCluster's name (a DNS label of at most {MAX_CLUSTER_NAME} characters), got " \
               f"{str(value)[:80]!r}"
    return None


@frozen
class Lookup:
    """The cluster a NodeSet names, read: its mounts, or why there are none (a condition's reason and message)."""

    mounts: NodeMounts | None
    reason: str = ""
    message: str = ""


def _spec_valid(cluster: Mapping[str, Any]) -> object:
    """The status of the SlurmCluster's SpecValid condition (None: none written)."""
    for cond in (cluster.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "SpecValid":
            return cond.get("status")
    return None


def _observed(cluster: Mapping[str, Any]) -> bool:
    """The SlurmCluster reconciler applied the spec as it is now: its ``observedGeneration`` (written only
    once every object is applied) is the spec's ``generation``. Else what it lends may not exist yet or may
    be what an older spec named, and SpecValid may speak of the older spec."""
    generation = (cluster.get("metadata") or {}).get("generation")
    observed = (cluster.get("status") or {}).get("observedGeneration")
    return isinstance(generation, int) and not isinstance(generation, bool) and observed == generation


def lookup(name: str, cluster: Mapping[str, Any] | None, nodesets: Sequence[str], watched: str) -> Lookup:
    """The mounts of SlurmCluster ``name`` (``cluster``, None when not in the cache), which the operator
    watches only when it is ``watched`` (its ``--slurm-cluster``); ``nodesets``: the NodeSet names of its
    namespace, which its partitions are checked against."""
    if not watched:
        return Lookup(None, NOT_WATCHED, f"SlurmCluster {name}: sunk-operator runs without --slurm-cluster "
                                         f"(chart slurmCluster.enabled), so it deploys and watches none")
    if name != watched:
        return Lookup(None, NOT_WATCHED, f"SlurmCluster {name}: sunk-operator watches only SlurmCluster {watched} "
                                         f"(--slurm-cluster)")
    if cluster is None:
        return Lookup(None, NOT_FOUND, f"SlurmCluster {name} does not exist in the NodeSet's namespace")
    if (cluster.get("metadata") or {}).get("deletionTimestamp"):
        return Lookup(None, DELETING, f"SlurmCluster {name} is being deleted")
    read = read_spec(cluster, nodesets)
    if read.spec is None:
        return Lookup(None, INVALID, f"SlurmCluster {name} has problems: " + "; ".join(read.problems))
    valid = _spec_valid(cluster)
    if valid == "False":  # a problem only its reconciler sees, such as a Secret not labelled for it
        return Lookup(None, INVALID, f"SlurmCluster {name} says SpecValid=False (its status says why)")
    if valid != "True" or not _observed(cluster):
        return Lookup(None, NOT_OBSERVED, f"SlurmCluster {name}: its reconciler has not yet applied its spec of "
                                          f"generation {str((cluster.get('metadata') or {}).get('generation'))[:20]} "
                                          f"(SpecValid=True and status.observedGeneration equal to it)")
    return Lookup(node_mounts(read.spec))


# ---- the parts of a Pod -----------------------------------------------------------------------------------------


@frozen
class PodPart:
    """Volumes, the daemon container's mounts and environment, and sidecars: added together or not at all."""

    volumes: tuple[Obj, ...] = field(converter=_tuple, factory=tuple)
    mounts: tuple[Obj, ...] = field(converter=_tuple, factory=tuple)
    env: tuple[Obj, ...] = field(converter=_tuple, factory=tuple)
    sidecars: tuple[Obj, ...] = field(converter=_tuple, factory=tuple)


def config_volume(mounts: NodeMounts) -> Obj:
    sources: list[Obj] = [{"configMap": {"name": mounts.config_configmap}}]
    if mounts.hooks_configmap:
        sources.append({"configMap": {"name": mounts.hooks_configmap, "items": [
            {"key": "prolog.sh", "path": PROLOG_FILE, "mode": 0o755},
            {"key": "epilog.sh", "path": EPILOG_FILE, "mode": 0o755}]}})
    return {"name": VOLUME_CONFIG, "projected": {"sources": sources}}


def munged_volumes(secret: str) -> list[Obj]:
    return [{"name": VOLUME_MUNGE_KEY, "secret": {"secretName": secret, "defaultMode": 0o400,
                                                  "items": [{"key": paths.MUNGE_KEY, "path": paths.MUNGE_KEY}]}},
            {"name": VOLUME_MUNGE_SOCKET, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            {"name": VOLUME_MUNGE_STATE, "emptyDir": {"sizeLimit": "16Mi"}}]


def restricted_security_context(uid: int, gid: int) -> Obj:
    """A container's securityContext as the Pod Security Standards' "restricted" profile asks: a non-root
    uid (set, so the kubelet need not trust the image's USER), no privilege escalation (no setuid binary
    gains anything), no capability, the runtime's default seccomp filter."""
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def munged_sidecar(image: str, security_context: Obj | None = None) -> Obj:
    """munged as a native sidecar (an init container that keeps running, Kubernetes 1.29+): up before the
    daemon starts. ``--force``: the socket's emptyDir is writable by all and a key under fsGroup is group
    readable, which munged would refuse though nothing else can write them (as the chart's pyslurm path).
    ``security_context``: None runs it as the image says (the slurmd image: root, reading a key of mode 0400)."""
    sidecar: Obj = {"name": MUNGED_CONTAINER, "image": image, "restartPolicy": "Always",
            "command": ["munged", "--foreground", "--force", f"--key-file={MUNGE_KEY_DIR}/{paths.MUNGE_KEY}",
                        f"--socket={MUNGE_SOCKET}", f"--pid-file={MUNGE_STATE_DIR}/munged.pid",
                        f"--seed-file={MUNGE_STATE_DIR}/munged.seed", f"--log-file={MUNGE_STATE_DIR}/munged.log"],
            "startupProbe": {"exec": {"command": ["test", "-S", MUNGE_SOCKET]}, "periodSeconds": 1,
                             "failureThreshold": 30},
            "volumeMounts": [{"name": VOLUME_MUNGE_KEY, "mountPath": MUNGE_KEY_DIR, "readOnly": True},
                             {"name": VOLUME_MUNGE_SOCKET, "mountPath": MUNGE_SOCKET_DIR},
                             {"name": VOLUME_MUNGE_STATE, "mountPath": MUNGE_STATE_DIR}]}
    if security_context is not None:
        sidecar["securityContext"] = security_context
    return sidecar


def munge_socket_mount() -> Obj:
    """The daemon's view of munged's socket (read-only: connecting needs no write to the directory)."""
    return {"name": VOLUME_MUNGE_SOCKET, "mountPath": MUNGE_SOCKET_DIR, "readOnly": True}


def slurmd_parts(mounts: NodeMounts) -> tuple[PodPart, ...]:
    """What a slurmd Pod of the cluster gets: the configuration (and ``SLURM_CONF``), munged from the cluster's
    slurmd image (never the template's: the key is read by no image a NodeSet author picks) with the
    cluster's key, and hooks.env."""
    parts = [
        PodPart(volumes=[config_volume(mounts)],
                mounts=[{"name": VOLUME_CONFIG, "mountPath": paths.CONFIG_DIR, "readOnly": True}],
                env=[{"name": "SLURM_CONF", "value": paths.SLURM_CONF}]),
        PodPart(volumes=munged_volumes(mounts.munge_secret), mounts=[munge_socket_mount()],
                sidecars=[munged_sidecar(mounts.munged_image)]),
    ]
    if mounts.hooks_configmap:
        env_file = {"name": mounts.hooks_configmap, "items": [{"key": "hooks.env", "path": "hooks.env"}]}
        parts.append(PodPart(volumes=[{"name": VOLUME_HOOKS_ENV, "configMap": env_file}],
                             mounts=[{"name": VOLUME_HOOKS_ENV, "mountPath": HOOKS_ENV_DIR, "readOnly": True}]))
    return tuple(parts)


def _overlap(a: str, b: str) -> bool:
    """One path is the other, or under it: either mount would hide or be hidden by the other."""
    a, b = a.rstrip("/") or "/", b.rstrip("/") or "/"
    return a == b or a.startswith(b + "/") or b.startswith(a + "/") or "/" in (a, b)


def part_conflict(part: PodPart, pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> str | None:
    """What of the Pod (template) the part would collide with: the template's own wins (None: no collision)."""
    volumes = {v.get("name") for v in pod_spec.get("volumes") or [] if isinstance(v, Mapping)}
    for volume in part.volumes:
        if volume["name"] in volumes:
            return f"volume {volume['name']}"
    paths_used = [m.get("mountPath") for m in container.get("volumeMounts") or [] if isinstance(m, Mapping)]
    for mount in part.mounts:
        for used in paths_used:
            if isinstance(used, str) and _overlap(used, mount["mountPath"]):
                return f"mount {used}"
    names = {c.get("name") for key in ("containers", "initContainers") for c in pod_spec.get(key) or []
             if isinstance(c, Mapping)}
    for sidecar in part.sidecars:
        if sidecar["name"] in names:
            return f"container {sidecar['name']}"
    return None


def add_part(part: PodPart, pod_spec: Obj, container: Obj) -> bool:
    """Add ``part`` to ``pod_spec`` (its daemon container ``container``, both mutated) unless it collides
    with what is there (``part_conflict``); an environment variable already set is the template's."""
    if part_conflict(part, pod_spec, container) is not None:
        return False
    pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), *part.volumes]
    container["volumeMounts"] = [*(container.get("volumeMounts") or []), *part.mounts]
    if part.env:
        env = list(container.get("env") or [])
        have = {e.get("name") for e in env if isinstance(e, Mapping)}
        container["env"] = env + [e for e in part.env if e["name"] not in have]
    if part.sidecars:
        pod_spec["initContainers"] = [*(pod_spec.get("initContainers") or []), *part.sidecars]
    return True
