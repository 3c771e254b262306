"""A SlurmCluster's spec, read from its wire form into typed values, with every problem found.

Everything in the spec is written by whoever may edit the SlurmCluster, and reaches slurm.conf,
Pod specs and object names: it is untrusted. Nothing here raises on bad input; a wrong type, an
unknown Slurm release, a name that is not a Kubernetes name, a partition naming no NodeSet, a
``slurmConfig`` line that would take over a line sunk needs, each becomes one problem, and a
spec with problems is applied nowhere (the reconciler writes only its status: a bad value never
reaches a running slurmctld).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from attrs import field, frozen

from sunk.translate import selectors
from sunk.translate.quantity import parse_quantity

from .lines import check_line, check_pair
from .users import LoginUser, read_users

# The Slurm releases sunk speaks to (docs/compatibility.md: v0.0.42 is served by all of them).
RELEASES = ("24.11", "25.05", "25.11", "26.05")
# slurmd: the image of the munged sidecar the operator adds to its NodeSets' slurmd Pods (mounts.py), the
# cluster's and not the NodeSet template's, so that no template image ever runs with the munge key.
COMPONENTS = ("slurmctld", "slurmdbd", "slurmrestd", "login", "slurmd", "mariadb")
# A DNS-1035 label: what a Service name must be, and so every name derived from the cluster's.
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
MAX_CLUSTER_NAME = 40  # leaves room for "-slurmctld-0" and the like within 63
# slurm.conf's ClusterName, a partition's name, a GRES type: words Slurm takes without quoting.
SLURM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,39}")
GRES_TYPE = re.compile(r"[a-z][a-z0-9_]{0,31}")
# An image reference: registry/path:tag or @digest, no spaces or shell characters.
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")
QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?")
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
# How slurmd tracks and confines a job's processes: through the Node's cgroup hierarchy, which must be the
# kubelet's (v2: unified; v1: legacy or hybrid, deprecated by Slurm), or none (proctrack/linuxproc and
# task/affinity: no cgroup.conf constraint, for Nodes where neither works).
CGROUP_MODES = ("v2", "v1", "none")
MAX_REPLICAS = 16
MAX_NODE_COUNT = 65536
MAX_LINES = 256


def _strs(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@frozen
class Volume:
    size: str = "10Gi"
    storage_class: str = ""  # "": the cluster's default StorageClass


@frozen
class ExternalDatabase:
    host: str
    port: int
    user: str
    database: str
    password_secret: str  # a Secret of the operator's, in the SlurmCluster's namespace
    password_key: str


@frozen
class Partition:
    name: str
    nodesets: tuple[str, ...] = field(converter=_strs)
    default: bool = False
    options: tuple[tuple[str, str], ...] = field(converter=_strs, factory=tuple)  # validated Key=Value


@frozen
class Placement:
    """Where the control plane's Pods (slurmctld, slurmdbd, MariaDB, slurmrestd, login) run: a ``nodeSelector``
    and ``tolerations``, copied into each Pod template as given (checked as the apiserver does, so each
    toleration is its known fields with scalar values: pairs, made a dict again for each Pod)."""

    node_selector: tuple[tuple[str, str], ...] = field(converter=_strs, factory=tuple)
    tolerations: tuple[tuple[tuple[str, str | int], ...], ...] = field(converter=_strs, factory=tuple)

    def pod_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.node_selector:
            out["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            out["tolerations"] = [dict(t) for t in self.tolerations]
        return out


# What a control-plane container may request or be limited to (spec.<component>.resources).
RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage")
# The components whose container takes resources, and where in the spec: (component, path of keys).
RESOURCE_PATHS = (("slurmctld", ("slurmctld",)), ("slurmdbd", ("slurmdbd",)), ("slurmrestd", ("slurmrestd",)),
                  ("login", ("login",)), ("mariadb", ("slurmdbd", "database", "internal")))


@frozen
class Resources:
    """A container's ``resources``, each quantity checked and every request no more than its limit, so the
    apiserver never refuses a workload the operator applies (which would fail every reconcile, silently to
    the SlurmCluster's status). Quantities are kept as written."""

    requests: tuple[tuple[str, str], ...] = field(converter=_strs, factory=tuple)
    limits: tuple[tuple[str, str], ...] = field(converter=_strs, factory=tuple)

    def container_field(self) -> dict[str, dict[str, str]]:
        """The container's ``resources`` ({} when nothing is set: the Pod's QoS as before)."""
        out = {}
        if self.requests:
            out["requests"] = dict(self.requests)
        if self.limits:
            out["limits"] = dict(self.limits)
        return out


def read_resources(value: Any, where: str) -> tuple[Resources, list[str]]:
    """``spec.<component>.resources``: ``requests`` and ``limits`` of RESOURCE_NAMES, quantities as the
    apiserver takes them (a string or a whole number), each request at most its limit."""
    if value is None:
        return Resources(), []
    if not isinstance(value, Mapping):
        return Resources(), [f"{where} must be an object with requests and limits"]
    problems = [f"{where}.{str(key)[:40]!r} is not requests or limits" for key in value
                if key not in ("requests", "limits")]
    parsed: dict[str, dict[str, tuple[str, Decimal]]] = {}
    for kind in ("requests", "limits"):
        body = value.get(kind)
        parsed[kind] = {}
        if body is None:
            continue
        if not isinstance(body, Mapping):
            problems.append(f"{where}.{kind} must be an object of quantities")
            continue
        for name, quantity in body.items():
            if name not in RESOURCE_NAMES:
                problems.append(f"{where}.{kind}: {str(name)[:60]!r} is not one of {', '.join(RESOURCE_NAMES)}")
                continue
            try:
                if (isinstance(quantity, bool) or not isinstance(quantity, (str, int))
                        or isinstance(quantity, str) and quantity != quantity.strip()):  # (the apiserver trims none)
                    raise ValueError(f"not a Kubernetes quantity: {str(quantity)[:40]!r}")
                parsed[kind][name] = (str(quantity), parse_quantity(quantity))
            except ValueError as exc:
                problems.append(f"{where}.{kind}.{name}: {str(exc)[:120]}")
    for name, (text, amount) in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        if limit is not None and amount > limit[1]:
            problems.append(f"{where}: requests.{name} {text} is more than limits.{name} {limit[0]} (the apiserver "
                            f"refuses such a Pod)")
    if problems:
        return Resources(), problems
    return Resources(requests=tuple((n, t) for n, (t, _) in sorted(parsed["requests"].items())),
                     limits=tuple((n, t) for n, (t, _) in sorted(parsed["limits"].items()))), []


@frozen
class SlurmClusterSpec:
    """A SlurmCluster's spec, every value checked (read_spec)."""

    name: str  # the SlurmCluster's, the prefix of every object it owns
    namespace: str
    release: str
    cluster_name: str  # slurm.conf's ClusterName
    images: tuple[tuple[str, str], ...] = field(converter=_strs)  # component -> image
    state_volume: Volume = field(factory=Volume)
    backup: bool = False
    accounting: bool = True  # slurmdbd deployed and slurm.conf's AccountingStorageType set
    database_volume: Volume = field(factory=Volume)
    external_database: ExternalDatabase | None = None  # None: the internal MariaDB StatefulSet
    restd_replicas: int = 1
    login_replicas: int = 1
    login_service_type: str = "ClusterIP"
    login_users: tuple[LoginUser, ...] = field(converter=_strs, factory=tuple)  # users.py: ssh and slurmctld's
    munge_secret: str = ""  # an existing Secret (key munge.key); "": generated once, kept
    jwt_secret: str = ""  # an existing Secret (key jwt_hs256.key); "": generated once, kept
    # The chart's slurm-hooks ConfigMap (hooks.env, prolog.sh, epilog.sh) for its NodeSets' slurmd Pods; "": none
    hooks_configmap: str = ""
    kill_wait: int = 30
    max_node_count: int = 1024
    gres_types: tuple[str, ...] = field(converter=_strs, factory=tuple)
    partitions: tuple[Partition, ...] = field(converter=_strs, factory=tuple)
    extra_lines: tuple[tuple[str, str], ...] = field(converter=_strs, factory=tuple)  # slurmConfig, checked
    cgroup: str = "v2"  # CGROUP_MODES: the NodeSets' Nodes' cgroup version, or none
    placement: Placement = field(factory=Placement)
    resources: tuple[tuple[str, Resources], ...] = field(converter=_strs, factory=tuple)  # component -> its own

    def image(self, component: str) -> str:
        return dict(self.images)[component]

    def resources_of(self, component: str) -> dict[str, dict[str, str]]:
        """The ``resources`` of ``component``'s container ({}: none set)."""
        found = dict(self.resources).get(component)
        return found.container_field() if found is not None else {}


@frozen
class SpecRead:
    spec: SlurmClusterSpec | None  # None when there are problems
    problems: tuple[str, ...] = field(converter=_strs, factory=tuple)


class _Reader:
    """Typed getters that record a problem instead of raising."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def obj(self, parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
        value = parent.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problems.append(f"{where}.{key} must be an object")
            return {}
        return value

    def string(self, parent: Mapping[str, Any], key: str, where: str, default: str = "",
               pattern: re.Pattern[str] | None = None, what: str = "") -> str:
        value = parent.get(key, default)
        if value is None:
            return default
        if not isinstance(value, str):
            self.problems.append(f"{where}.{key} must be a string")
            return default
        if value and pattern is not None and not pattern.fullmatch(value):
            self.problems.append(f"{where}.{key} {value[:80]!r} is not {what}")
            return default
        return value

    def integer(self, parent: Mapping[str, Any], key: str, where: str, default: int, low: int, high: int) -> int:
        value = parent.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.problems.append(f"{where}.{key} must be a whole number from {low} to {high}")
            return default
        return value

    def boolean(self, parent: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
        value = parent.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problems.append(f"{where}.{key} must be true or false")
            return default
        return value

    def strings(self, parent: Mapping[str, Any], key: str, where: str) -> list[Any]:
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, Sequence) or isinstance(value, str):
            self.problems.append(f"{where}.{key} must be a list")
            return []
        return list(value)

    def volume(self, parent: Mapping[str, Any], key: str, where: str) -> Volume:
        body = self.obj(parent, key, where)
        return Volume(size=self.string(body, "size", f"{where}.{key}", "10Gi", QUANTITY, "a size such as 10Gi")
                      or "10Gi",
                      storage_class=self.string(body, "storageClassName", f"{where}.{key}", "", DNS_SUBDOMAIN,
                                                "a StorageClass name"))


def read_spec(cluster: Mapping[str, Any], nodesets: Sequence[str] = ()) -> SpecRead:
    """The typed spec of ``cluster``, or its problems. ``nodesets``: the names of the NodeSets in its
    namespace (a partition naming another is refused: it would never have a node)."""
    r = _Reader()
    meta = cluster.get("metadata") or {}
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    if not DNS_LABEL.fullmatch(name) or len(name) > MAX_CLUSTER_NAME:
        r.problems.append(f"metadata.name {name[:80]!r} must be a DNS label of at most {MAX_CLUSTER_NAME} "
                          f"characters (it prefixes every object's and Service's name)")
    spec = cluster.get("spec")
    if not isinstance(spec, Mapping):
        return SpecRead(None, [*r.problems, "spec must be an object"])

    slurm = r.obj(spec, "slurm", "spec")
    release = r.string(slurm, "release", "spec.slurm")
    if release not in RELEASES:
        r.problems.append(f"spec.slurm.release {release[:20]!r} is not a Slurm release sunk supports "
                          f"({', '.join(RELEASES)})")
    cluster_name = r.string(slurm, "clusterName", "spec.slurm", "", SLURM_NAME, "a Slurm cluster name") or name
    cgroup = r.string(slurm, "cgroup", "spec.slurm", "v2") or "v2"
    if cgroup not in CGROUP_MODES:
        r.problems.append(f"spec.slurm.cgroup {cgroup[:20]!r} is not one of {', '.join(CGROUP_MODES)} (the cgroup "
                          f"version of the Nodes slurmd runs on; none: proctrack/linuxproc and task/affinity)")
        cgroup = "v2"

    dbd = r.obj(spec, "slurmdbd", "spec")
    accounting = r.boolean(dbd, "enabled", "spec.slurmdbd", True)
    database = r.obj(dbd, "database", "spec.slurmdbd")
    external = _external(r, r.obj(database, "external", "spec.slurmdbd.database"))
    needed = ["slurmctld", "slurmrestd", "login", "slurmd"]
    if accounting:
        needed.append("slurmdbd")
        if external is None:
            needed.append("mariadb")
    images_body = r.obj(spec, "images", "spec")
    images = {}
    for component in needed:
        image = r.string(images_body, component, "spec.images", "", IMAGE, "an image reference")
        if not image:
            r.problems.append(f"spec.images.{component} is required")
        images[component] = image

    ctld = r.obj(spec, "slurmctld", "spec")
    restd = r.obj(spec, "slurmrestd", "spec")
    login = r.obj(spec, "login", "spec")
    service_type = r.string(r.obj(login, "service", "spec.login"), "type", "spec.login.service", "ClusterIP")
    if service_type not in SERVICE_TYPES:
        r.problems.append(f"spec.login.service.type {service_type[:20]!r} is not one of {', '.join(SERVICE_TYPES)}")
    login_users, problems = read_users(login.get("users"))
    r.problems.extend(problems)
    keys = r.obj(spec, "keys", "spec")

    gres_types = []
    for value in r.strings(spec, "gresTypes", "spec"):
        if not isinstance(value, str) or not GRES_TYPE.fullmatch(value):
            r.problems.append(f"spec.gresTypes: {str(value)[:40]!r} is not a GRES name ([a-z][a-z0-9_], at most 32)")
        elif value not in gres_types:
            gres_types.append(value)

    partitions = _partitions(r, spec, set(nodesets))
    extra: list[tuple[str, str]] = []
    lines = r.strings(spec, "slurmConfig", "spec")
    if len(lines) > MAX_LINES:
        r.problems.append(f"spec.slurmConfig has {len(lines)} lines; at most {MAX_LINES}")
        lines = []
    seen: dict[str, int] = {}
    for i, line in enumerate(lines):
        pair, problem = check_line(line)
        if problem:
            r.problems.append(f"spec.slurmConfig[{i}]: {problem}")
        elif pair is not None:
            if pair[0].lower() in seen:
                r.problems.append(f"spec.slurmConfig[{i}]: {pair[0]} is set twice (first at [{seen[pair[0].lower()]}])")
            seen.setdefault(pair[0].lower(), i)
            extra.append(pair)

    resources = []
    for component, path in RESOURCE_PATHS:
        body: Any = spec
        for key in path:
            body = body.get(key) if isinstance(body, Mapping) else None
        found, problems = read_resources(body.get("resources") if isinstance(body, Mapping) else None,
                                         "spec." + ".".join(path) + ".resources")
        r.problems.extend(problems)
        if found != Resources():
            resources.append((component, found))

    read = SlurmClusterSpec(
        name=name, namespace=namespace, release=release, cluster_name=cluster_name,
        images=tuple(images.items()),
        state_volume=r.volume(ctld, "stateVolume", "spec.slurmctld"),
        backup=r.boolean(r.obj(ctld, "backup", "spec.slurmctld"), "enabled", "spec.slurmctld.backup", False),
        accounting=accounting,
        database_volume=r.volume(r.obj(database, "internal", "spec.slurmdbd.database"), "volume",
                                 "spec.slurmdbd.database.internal"),
        external_database=external,
        restd_replicas=r.integer(restd, "replicas", "spec.slurmrestd", 1, 1, MAX_REPLICAS),
        login_replicas=r.integer(login, "replicas", "spec.login", 1, 0, MAX_REPLICAS),
        login_service_type=service_type, login_users=login_users,
        munge_secret=r.string(r.obj(keys, "munge", "spec.keys"), "existingSecret", "spec.keys.munge", "",
                              DNS_SUBDOMAIN, "a Secret name"),
        jwt_secret=r.string(r.obj(keys, "jwt", "spec.keys"), "existingSecret", "spec.keys.jwt", "", DNS_SUBDOMAIN,
                            "a Secret name"),
        hooks_configmap=r.string(r.obj(spec, "hooks", "spec"), "configMap", "spec.hooks", "", DNS_SUBDOMAIN,
                                 "a ConfigMap name"),
        kill_wait=r.integer(spec, "killWait", "spec", 30, 1, 65533),
        max_node_count=r.integer(spec, "maxNodeCount", "spec", 1024, 1, MAX_NODE_COUNT),
        gres_types=gres_types, partitions=partitions, extra_lines=extra, cgroup=cgroup,
        placement=_placement(r, r.obj(spec, "placement", "spec")), resources=resources)
    if r.problems:
        return SpecRead(None, r.problems)
    return SpecRead(read)


def _placement(r: _Reader, body: Mapping[str, Any]) -> Placement:
    node_selector, tolerations = body.get("nodeSelector"), body.get("tolerations")
    found = [*selectors.label_selector_problems(node_selector, "spec.placement.nodeSelector"),
             *selectors.toleration_problems(tolerations, "spec.placement.tolerations")]
    r.problems.extend(found)
    if found:
        return Placement()
    return Placement(node_selector=tuple((node_selector or {}).items()),
                     tolerations=tuple(tuple(t.items()) for t in tolerations or ()))


def _external(r: _Reader, body: Mapping[str, Any]) -> ExternalDatabase | None:
    if not body:
        return None
    where = "spec.slurmdbd.database.external"
    host = r.string(body, "host", where, "", DNS_SUBDOMAIN, "a host name")
    if not host:
        r.problems.append(f"{where}.host is required")
    secret = r.obj(body, "passwordSecret", where)
    secret_name = r.string(secret, "name", f"{where}.passwordSecret", "", DNS_SUBDOMAIN, "a Secret name")
    if not secret_name:
        r.problems.append(f"{where}.passwordSecret.name is required")
    return ExternalDatabase(
        host=host, port=r.integer(body, "port", where, 3306, 1, 65535),
        user=r.string(body, "user", where, "slurm", SLURM_NAME, "a database user") or "slurm",
        database=r.string(body, "database", where, "slurm_acct_db", SLURM_NAME, "a database name") or "slurm_acct_db",
        password_secret=secret_name,
        password_key=r.string(secret, "key", f"{where}.passwordSecret", "password", DNS_SUBDOMAIN, "a Secret key")
        or "password")


def _partitions(r: _Reader, spec: Mapping[str, Any], nodesets: set[str]) -> list[Partition]:
    out: list[Partition] = []
    defaults = 0
    for i, body in enumerate(r.strings(spec, "partitions", "spec")):
        where = f"spec.partitions[{i}]"
        if not isinstance(body, Mapping):
            r.problems.append(f"{where} must be an object")
            continue
        name = r.string(body, "name", where, "", SLURM_NAME, "a Slurm partition name")
        if not name:
            r.problems.append(f"{where}.name is required")
        if any(p.name == name for p in out):
            r.problems.append(f"{where}: partition {name} is named twice")
        members = []
        for member in r.strings(body, "nodeSets", where):
            if not isinstance(member, str) or member not in nodesets:
                r.problems.append(f"{where} ({name}): names NodeSet {str(member)[:63]!r}, which does not exist in "
                                  f"the SlurmCluster's namespace")
            else:
                members.append(member)
        if not body.get("nodeSets"):
            r.problems.append(f"{where} ({name}): nodeSets is empty; a partition needs at least one NodeSet")
        default = r.boolean(body, "default", where, False)
        defaults += default
        options = []
        raw = r.obj(body, "options", where)
        for key in sorted(raw):
            pair, problem = check_pair(str(key), raw[key], partition=True)
            if problem:
                r.problems.append(f"{where}.options: {problem}")
            elif pair is not None:
                options.append(pair)
        out.append(Partition(name=name, nodesets=members, default=default, options=options))
    if defaults > 1:
        r.problems.append("spec.partitions: more than one partition is the default")
    return out
