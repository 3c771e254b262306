"""A NodeSet's spec, read into one frozen value, with every problem in words.

Why check here when the CRD has a schema: the schema keeps out wrong types, but not a
template without a slurmd container, a prefix that makes names longer than a hostname may
be, or a selector whose operator takes no values. A NodeSet with any problem is frozen: the
operator writes its status (condition ``SpecValid=False`` and the problems) and an Event,
and creates, drains and deletes nothing, so a typo never takes a Slurm node away.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from sunk.model import names
from sunk.translate import selectors
from sunk.translate.slurmcluster.mounts import cluster_name_problem, reserved_volume_uses
from sunk.translate.slurmcluster.slurmconf import nodeset_feature

SCHEME_IPV4 = "IPv4Octets"  # <prefix>-<third octet>-<fourth octet> of the Node's InternalIP
SCHEME_NODE_NAME = "NodeName"  # the Kubernetes Node's name
SCHEMES = (SCHEME_IPV4, SCHEME_NODE_NAME)
ROLLING_UPDATE = "RollingUpdate"
ON_DELETE = "OnDelete"
STRATEGIES = (ROLLING_UPDATE, ON_DELETE)
SLURMD_CONTAINER = "slurmd"

# A Slurm node name is the slurmd Pod's hostname and name: one DNS label.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_LABEL = 63
PREFIX = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
MAX_PREFIX = MAX_LABEL - len("-255-255")
PERCENT = re.compile(r"([0-9]+)%")
# Slurm feature and partition names, as slurm.conf takes them in a list.
SLURM_WORD = re.compile(r"[A-Za-z0-9_.+-]+")
GRES = re.compile(r"[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*(,[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*)*")
# One GPU item of a GRES list: gpu, gpu:N, gpu:TYPE or gpu:TYPE:N. Its gres.conf line must name device files
# (Slurm drops a GPU without File=), so its count must be a plain number the operator can turn into files. A type
# starts with a letter: Slurm reads gpu:1k as a count of 1024, not as type 1k.
GPU_ITEM = re.compile(r"gpu(:[A-Za-z_][A-Za-z0-9_.-]*)?(:[0-9]{1,3})?")
MAX_GPU_COUNT = 256
# Slurm's CpuSpecList: abstract CPU ids and ranges (0-1,8).
CPU_SPEC_LIST = re.compile(r"[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?){0,255}")
MAX_MEM_SPEC_MB = 1 << 30  # 1 PiB in MiB: past any Node, short of Slurm's 64-bit field
MAX_CORE_SPEC = 4096
MAX_LABEL_KEYS = 16
MAX_ALLOWED = 256  # allowedFeatures / allowedPartitions entries
# The one label prefix a kubelet cannot write on its own Node (NodeRestriction admission): a value under it was
# put there by whoever administers Nodes. Any other label a compromised node can set on itself.
KUBELET_PROOF_PREFIX = "node-restriction.kubernetes.io/"
# Fields of the Pod the operator sets itself.
OPERATOR_POD_FIELDS = ("nodeName", "hostname")


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(value)


def split_gres_item(item: str) -> tuple[str, str | None, str]:
    """One item of a Slurm GRES list as Slurm reads it: name, type (None untyped) and count text
    (``gpu`` -> 1, ``gpu:2`` -> count 2, ``gpu:a100`` -> type a100, count 1, ``gpu:a100:2``)."""
    name, *rest = item.split(":")
    if not rest:
        return name, None, "1"
    if len(rest) == 1:
        return (name, None, rest[0]) if rest[0].isdigit() else (name, rest[0], "1")
    return name, rest[0], rest[1]


def _gpu_item_valid(item: str) -> bool:
    return bool(GPU_ITEM.fullmatch(item)) and 1 <= int(split_gres_item(item)[2]) <= MAX_GPU_COUNT


@frozen
class NodeSetSpec:
    """What the plan reads of one NodeSet. Mappings are the wire objects': never mutate."""

    name: str
    namespace: str
    uid: str = ""
    generation: int = 0
    deleting: bool = False
    has_finalizer: bool = False
    replicas: int | None = None  # at most this many Nodes become Slurm nodes (None: every matching one)
    node_selector: Mapping[str, str] = field(factory=dict)
    affinity: Any = None
    scheme: str = SCHEME_IPV4
    prefix: str = ""
    features: tuple[str, ...] = field(converter=_strs, factory=tuple)
    gres: str = ""
    partitions: tuple[str, ...] = field(converter=_strs, factory=tuple)
    # Node label keys whose values become Slurm features / partitions of that Node's Slurm node.
    feature_labels: tuple[str, ...] = field(converter=_strs, factory=tuple)
    partition_labels: tuple[str, ...] = field(converter=_strs, factory=tuple)
    # The values those labels may bring (a value of a label under KUBELET_PROOF_PREFIX needs no entry).
    allowed_features: tuple[str, ...] = field(converter=_strs, factory=tuple)
    allowed_partitions: tuple[str, ...] = field(converter=_strs, factory=tuple)
    # Memory (MiB) and CPUs Slurm keeps from jobs for slurmd and the Node's system Pods (SUNK's MemSpecLimit).
    mem_spec_limit: int | None = None
    cpu_spec_list: str = ""
    core_spec_count: int | None = None
    template: Mapping[str, Any] = field(factory=dict)
    # The SlurmCluster (same namespace) whose configuration, munge key and prolog/epilog the operator
    # mounts into each Pod, and whose partitions take the nodes ("": the template brings them itself).
    slurm_cluster: str = ""
    strategy: str = ROLLING_UPDATE
    max_unavailable: int | str = 1
    # Deleting the NodeSet cancels the jobs on its drained nodes instead of waiting for them (names.ANN_ON_DELETE).
    cancel_jobs_on_delete: bool = False


    @property
    def own_features(self) -> tuple[str, ...]:
        """The features every node registers with: the NodeSet's, and with a SlurmCluster the
        ``nodeset-<name>`` its slurm.conf's ``NodeSet=`` line puts into partitions."""
        if not self.slurm_cluster:
            return self.features
        return tuple(dict.fromkeys([*self.features, nodeset_feature(self.name)]))


@frozen
class ReadSpec:
    spec: NodeSetSpec
    problems: tuple[str, ...] = field(converter=_strs, factory=tuple)


def _str_map(value: object) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _word_list(value: object, where: str, out: list[str], *, most: int | None = None) -> tuple[str, ...]:
    if value is None:
        return ()
    if (not isinstance(value, list) or (most is not None and len(value) > most)
            or not all(isinstance(v, str) and SLURM_WORD.fullmatch(v) for v in value)):
        bound = f" of at most {most}" if most is not None else ""
        out.append(f"{where}: must be a list{bound} of Slurm names (letters, digits, _.+-)")
        return ()
    return tuple(value)


def _label_keys(value: object, where: str, out: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if (not isinstance(value, list) or len(value) > MAX_LABEL_KEYS
            or not all(selectors.is_label_key(v) for v in value)):
        out.append(f"{where}: must be a list of at most {MAX_LABEL_KEYS} Node label keys")
        return ()
    return tuple(dict.fromkeys(value))


def _bounded_int(value: object, where: str, top: int, out: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        out.append(f"{where}: must be an integer from 0 to {top}, got {value!r}")
        return None
    return value


def _specialisation(slurm: Mapping[str, Any], out: list[str]) -> tuple[int | None, str, int | None]:
    """MemSpecLimit, CpuSpecList and CoreSpecCount, checked (Slurm takes one of the last two, not both)."""
    mem = _bounded_int(slurm.get("memSpecLimit"), "spec.slurm.memSpecLimit", MAX_MEM_SPEC_MB, out)
    cores = _bounded_int(slurm.get("coreSpecCount"), "spec.slurm.coreSpecCount", MAX_CORE_SPEC, out)
    cpus = slurm.get("cpuSpecList") or ""
    if not isinstance(cpus, str) or (cpus and not CPU_SPEC_LIST.fullmatch(cpus)):
        out.append(f"spec.slurm.cpuSpecList: must be CPU ids and ranges such as 0-1,8, got {cpus!r}")
        cpus = ""
    if cpus and cores is not None:
        out.append("spec.slurm: cpuSpecList and coreSpecCount exclude each other (Slurm takes one)")
    return mem, cpus, cores


def template_problems(template: object) -> list[str]:
    """What makes a Pod template unusable for slurmd Pods (empty: usable)."""
    if not isinstance(template, Mapping):
        return ["template: must be a Pod template (metadata and spec)"]
    found: list[str] = []
    meta = template.get("metadata") or {}
    if not isinstance(meta, Mapping):
        found.append("template.metadata: must be an object")
        meta = {}
    for key in ("labels", "annotations"):
        if meta.get(key) is not None and not _str_map(meta.get(key)):
            found.append(f"template.metadata.{key}: must map strings to strings")
    if names.LABEL_NODESET in (meta.get("labels") or {}):
        found.append(f"template.metadata.labels: {names.LABEL_NODESET} is set by the operator")
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return [*found, "template.spec: must be a Pod spec"]
    for key in OPERATOR_POD_FIELDS:
        if spec.get(key):
            found.append(f"template.spec.{key}: is set by the operator (one Pod per Node, named after its Slurm node)")
    if spec.get("restartPolicy") not in (None, "Always"):
        found.append("template.spec.restartPolicy: slurmd must be restarted (Always), got "
                     f"{spec.get('restartPolicy')!r}")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [*found, "template.spec.containers: must list at least one container"]
    seen: set[str] = set()
    for i, container in enumerate(containers):
        if not isinstance(container, Mapping):
            found.append(f"template.spec.containers[{i}]: must be an object")
            continue
        cname, image = container.get("name"), container.get("image")
        if not isinstance(cname, str) or not DNS_LABEL.fullmatch(cname):
            found.append(f"template.spec.containers[{i}].name: must be a DNS label, got {cname!r}")
        elif cname in seen:
            found.append(f"template.spec.containers[{i}].name: {cname!r} appears twice")
        else:
            seen.add(cname)
        if not isinstance(image, str) or not image:
            found.append(f"template.spec.containers[{i}].image: must be set")
        if container.get("env") is not None and not isinstance(container.get("env"), list):
            found.append(f"template.spec.containers[{i}].env: must be a list")
    if SLURMD_CONTAINER not in seen:
        found.append(f"template.spec.containers: none is named {SLURMD_CONTAINER!r} (the operator tells that one "
                     f"its Slurm node's name, features, GRES and partitions)")
    return found


def max_unavailable_problem(value: object) -> str | None:
    if isinstance(value, bool):
        return "must be an integer of at least 1 or a percentage"
    if isinstance(value, int):
        return None if value >= 1 else "must be at least 1 (a NodeSet has no surge: 0 would never update)"
    if isinstance(value, str):
        m = PERCENT.fullmatch(value)
        if m and 1 <= int(m.group(1)) <= 100:
            return None
    return f"must be an integer of at least 1 or a percentage from 1% to 100%, got {value!r}"


def max_unavailable(value: int | str, total: int) -> int:
    """The number of Nodes that may be unavailable at once: a percentage of ``total`` rounds up, at least 1."""
    if isinstance(value, int):
        return max(1, value)
    m = PERCENT.fullmatch(value)
    percent = int(m.group(1)) if m else 1
    return max(1, math.ceil(total * percent / 100))


def read_spec(nodeset: Mapping[str, Any]) -> ReadSpec:
    """The NodeSet's spec and its problems (any problem freezes the NodeSet)."""
    meta = nodeset.get("metadata") or {}
    raw = nodeset.get("spec")
    problems: list[str] = []
    if not isinstance(raw, Mapping):
        problems.append("spec: must be an object")
        raw = {}
    name = str(meta.get("name") or "")
    if not DNS_LABEL.fullmatch(name) or len(name) > MAX_LABEL:
        problems.append(f"metadata.name: must be a DNS label of at most {MAX_LABEL} characters (it is a label "
                        f"value on every Pod), got {name!r}")

    replicas = raw.get("replicas")
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0):
        problems.append(f"spec.replicas: must be an integer of at least 0, got {replicas!r}")
        replicas = None

    node_selector = raw.get("nodeSelector") or {}
    affinity = raw.get("affinity")
    problems.extend(f"spec.{p}" for p in selectors.problems(node_selector, affinity))
    if not _str_map(node_selector):
        node_selector = {}

    naming = raw.get("naming") or {}
    if not isinstance(naming, Mapping):
        problems.append("spec.naming: must be an object")
        naming = {}
    scheme = naming.get("scheme") or SCHEME_IPV4
    prefix = naming.get("prefix") or ""
    if scheme not in SCHEMES:
        problems.append(f"spec.naming.scheme: must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    elif scheme == SCHEME_IPV4:
        if not isinstance(prefix, str) or not PREFIX.fullmatch(prefix) or len(prefix) > MAX_PREFIX:
            problems.append(f"spec.naming.prefix: {SCHEME_IPV4} needs a prefix of lower-case letters, digits and '-' "
                            f"(starting with a letter, at most {MAX_PREFIX} characters), got {prefix!r}")
    elif prefix:
        problems.append(f"spec.naming.prefix: {SCHEME_NODE_NAME} takes no prefix")

    slurm = raw.get("slurm") or {}
    if not isinstance(slurm, Mapping):
        problems.append("spec.slurm: must be an object")
        slurm = {}
    features = _word_list(slurm.get("features"), "spec.slurm.features", problems)
    partitions = _word_list(slurm.get("partitions"), "spec.slurm.partitions", problems)
    gres = slurm.get("gres") or ""
    if not isinstance(gres, str) or (gres and not GRES.fullmatch(gres)):
        problems.append(f"spec.slurm.gres: must be a Slurm GRES list such as gpu:h100:8, got {gres!r}")
        gres = ""
    bad_gpus = [item for item in gres.split(",") if item.split(":")[0] == "gpu" and not _gpu_item_valid(item)]
    if bad_gpus:
        problems.append(f"spec.slurm.gres: a GPU item must be gpu, gpu:N, gpu:TYPE or gpu:TYPE:N with N from 1 to "
                        f"{MAX_GPU_COUNT} (its gres.conf line names N device files), got {bad_gpus[0][:40]!r}")
        gres = ""
    feature_labels = _label_keys(slurm.get("featureLabels"), "spec.slurm.featureLabels", problems)
    partition_labels = _label_keys(slurm.get("partitionLabels"), "spec.slurm.partitionLabels", problems)
    allowed_features = _word_list(slurm.get("allowedFeatures"), "spec.slurm.allowedFeatures", problems,
                                  most=MAX_ALLOWED)
    allowed_partitions = _word_list(slurm.get("allowedPartitions"), "spec.slurm.allowedPartitions", problems,
                                    most=MAX_ALLOWED)
    mem_spec_limit, cpu_spec_list, core_spec_count = _specialisation(slurm, problems)

    template = raw.get("template")
    problems.extend(f"spec.{p}" for p in template_problems(template))
    slurm_cluster = raw.get("slurmCluster") or ""
    if slurm_cluster and (why := cluster_name_problem(slurm_cluster)) is not None:
        problems.append(f"spec.slurmCluster: {why}")
        slurm_cluster = ""
    if raw.get("slurmCluster") and isinstance(template, Mapping):
        # The volumes the operator lends are its own: a template mounting sunk-munge-key would read the key.
        problems.extend(f"spec.{where} is a name the operator reserves for what the SlurmCluster lends"
                        for where in reserved_volume_uses(template.get("spec")))

    update = raw.get("updateStrategy") or {}
    if not isinstance(update, Mapping):
        problems.append("spec.updateStrategy: must be an object")
        update = {}
    strategy = update.get("type") or ROLLING_UPDATE
    if strategy not in STRATEGIES:
        problems.append(f"spec.updateStrategy.type: must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    rolling = update.get("rollingUpdate") or {}
    unavailable = rolling.get("maxUnavailable", 1) if isinstance(rolling, Mapping) else 1
    if (why := max_unavailable_problem(unavailable)) is not None:
        problems.append(f"spec.updateStrategy.rollingUpdate.maxUnavailable: {why}")
        unavailable = 1

    on_delete = (meta.get("annotations") or {}).get(names.ANN_ON_DELETE, names.ON_DELETE_DRAIN)
    if on_delete not in (names.ON_DELETE_DRAIN, names.ON_DELETE_CANCEL_JOBS):
        problems.append(f"metadata.annotations[{names.ANN_ON_DELETE}]: must be {names.ON_DELETE_DRAIN} or "
                        f"{names.ON_DELETE_CANCEL_JOBS}, got {on_delete!r}")
        on_delete = names.ON_DELETE_DRAIN

    spec = NodeSetSpec(
        name=name,
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        deleting=bool(meta.get("deletionTimestamp")),
        has_finalizer=names.FINALIZER_NODESET in (meta.get("finalizers") or []),
        cancel_jobs_on_delete=on_delete == names.ON_DELETE_CANCEL_JOBS,
        replicas=replicas,
        node_selector=node_selector,
        affinity=affinity,
        scheme=scheme if scheme in SCHEMES else SCHEME_IPV4,
        prefix=prefix if isinstance(prefix, str) else "",
        features=features,
        gres=gres,
        partitions=partitions,
        feature_labels=feature_labels,
        partition_labels=partition_labels,
        allowed_features=allowed_features,
        allowed_partitions=allowed_partitions,
        mem_spec_limit=mem_spec_limit,
        cpu_spec_list=cpu_spec_list,
        core_spec_count=core_spec_count,
        template=template if isinstance(template, Mapping) else {},
        slurm_cluster=slurm_cluster,
        strategy=strategy if strategy in STRATEGIES else ROLLING_UPDATE,
        max_unavailable=unavailable,
    )
    return ReadSpec(spec, problems)
