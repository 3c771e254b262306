"""A Pod's ResourceClaims filled with exactly the devices Slurm gave its placeholder job (issue 38). Pure.

sunk binds the Pods it schedules, so it, not kube-scheduler's DRA plugin, writes their claims' allocation. Slurm
stays the one accountant of a node's GPUs: the placeholder job asks for ``gres/gpu[:type]:N``, Slurm picks the
node's devices (the job record's ``IDX``, ``models.GresGrant``), and each claim gets the DRA devices those indices
name on that node. Which device an index names is one explicit rule (``DeviceMapping``): a device attribute
holding the index, or a device name made from it. Never position in a list: a driver's device order is its own.

What Slurm cannot decide is refused, with a message for the Pod's Event: requests of a DeviceClass that is not
Slurm's, ``firstAvailable``, ``allocationMode: All``, CEL selectors, admin access. When Slurm and the driver
disagree on a node (an index naming no device or two, a count that differs), ``Mismatch`` says so, and nothing
is bound: the caller drains the node with a ``k8s:`` reason, since every later Pod there would meet the same.

A device Slurm gave that another claim holds on the node (kube-scheduler's, for a Pod sunk did not place) or
that carries a taint the request does not tolerate is a ``Mismatch`` too: Slurm counts it free and would give it
again. A claim already allocated, or reserved for another consumer, is not sunk's to fill (``claim_refusal``).

What a tenant writes never drains a node: a claim's count is its author's, and a job's GRES its Slurm user's
(a pending job's own user may edit it), so a job whose GRES no longer fits its claims (another count, or no
index recorded) is ``JobUnfit``: the job goes, and no node is drained. A device held by a claim that is being
released (sunk's own Pod's, or one no longer reserved) is ``Releasing``: waited for, not drained. The drain's
detail names devices and indices, never another tenant's claim.

A DeviceClass may carry a GRES type (``DeviceMapping.gres_types``: an A100 class, a MIG profile's class), so its
claims ask ``gres/gpu:TYPE:N``; a Pod's or a gang's claims ask for one type. A gang's members are filled each
from its own node's indices, so each member with claims claims every GPU of its node
(``gang_gpu_disagreement``).

A DeviceClass may instead be a shard class (``DeviceMapping.shard_classes``): its request's count is of Slurm
``shard``s, a share of one GPU that Slurm lets several jobs hold at once (``gres/shard:N``; the job record gives the
shards taken of each GPU, ``GresGrant.shares``), and the claim names the GPU(s) its shards are on. Other shard
claims may name the same device; a claim of whole GPUs may not, as Slurm never gives a GPU both ways. Nothing
fences the sharers from each other, as Slurm's shards do not.

A DeviceClass's and a claim's ``config`` (a driver's opaque parameters: a sharing strategy, a MIG layout) go into
the allocation's ``devices.config`` as kube-scheduler writes them (``allocation_config``): the driver reads them
there when it prepares the devices.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Union

import attrs
from attrs import frozen

from sunk.model.slurm import GresGrant
from sunk.model.types import Obj

ALLOCATION_MODE_EXACT = "ExactCount"


class UnsupportedClaim(ValueError):
    """A claim sunk cannot have Slurm fill; the message says why, for the Pod's Event and condition."""


def _check_template(template: str) -> str:
    if not template:
        return template
    try:
        fields = {name for _text, name, _spec, _conv in string.Formatter().parse(template) if name is not None}
        if fields != {"index"}:
            raise ValueError("it must use {index} and nothing else")
        template.format(index=0)
    except (ValueError, KeyError, IndexError) as exc:
        raise ValueError(f"device name template {template!r}: {exc}") from None
    return template


def _strings(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


def _pairs(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs))


@frozen
class DeviceMapping:
    """How Slurm's GRES index names a DRA device of one driver: ``attribute`` (a device attribute whose integer
    value is the index: ``index``, ``minor``; unqualified means the driver's own domain) or ``name_template``
    (``gpu-{index}``, ``device-{index:02d}``), exactly one. ``device_classes`` are the DeviceClasses whose
    requests Slurm fills; ``gres_types`` gives some of them a GRES type (``(class, type)`` pairs: a claim of the
    class asks Slurm for ``gres/gpu:TYPE:N``, e.g. an A100 class, or a MIG profile's class whose devices the
    driver partitions, ``1g.10gb``), the others ask untyped; ``gres`` the GRES whose indices are read (``gpu``;
    Slurm numbers a node's GPUs of every type in one list, so the index rule is the same for all types);
    ``shard_classes`` the DeviceClasses whose requests count Slurm shards (``gres/shard:N``) of the GPUs the index
    rule names."""

    driver: str
    device_classes: frozenset[str] = attrs.field(converter=_strings)
    attribute: str = ""
    name_template: str = attrs.field(default="", converter=_check_template)
    gres: str = "gpu"
    gres_types: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    shard_classes: frozenset[str] = attrs.field(default=frozenset(), converter=_strings)

    def __attrs_post_init__(self) -> None:
        if not self.driver:
            raise ValueError("a device mapping names its driver")
        if bool(self.attribute) == bool(self.name_template):
            raise ValueError("a device mapping has exactly one of attribute and name_template")
        if not self.device_classes and not self.shard_classes:
            raise ValueError("a device mapping names at least one DeviceClass")
        if both := self.device_classes & self.shard_classes:
            raise ValueError(f"DeviceClass {sorted(both)[0]} is named both as a GPU class and as a shard class")
        typed = [device_class for device_class, _type in self.gres_types]
        if len(set(typed)) != len(typed) or not set(typed) <= self.device_classes:
            raise ValueError("each typed DeviceClass is one of device_classes, with one GRES type")
        for device_class, gres_type in self.gres_types:
            if not GRES_TYPE.fullmatch(gres_type):
                raise ValueError(f"DeviceClass {device_class}: GRES type {gres_type!r} is not a Slurm GRES type "
                                 "(letters, digits, '_', '.', '-')")

    @property
    def classes(self) -> frozenset[str]:
        """Every DeviceClass whose requests Slurm fills: of whole GPUs and of shards."""
        return self.device_classes | self.shard_classes

    def gres_type(self, device_class: str) -> str:
        """The GRES type a claim of ``device_class`` asks Slurm for ("": untyped)."""
        return next((t for c, t in self.gres_types if c == device_class), "")

    @classmethod
    def parse(cls, text: str) -> DeviceMapping:
        """``--dra-device-mapping``: ``driver=D,device-class=C[:TYPE][,device-class=C2[:TYPE2]][,shard-class=S],
        attribute=A|name=T[,gres=G]``, e.g. ``driver=gpu.nvidia.com,device-class=gpu.nvidia.com,attribute=index``
        or, a class per GRES type, ``...,device-class=a100.example.com:a100,device-class=mig-1g.example.com:1g.10gb,
        ...``. ValueError naming the fault."""
        fields: dict[str, list[str]] = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            key, sep, value = item.partition("=")
            if not sep or key.strip() not in _MAPPING_KEYS or not value.strip():
                raise ValueError(f"{item!r}: want one of {', '.join(k + '=...' for k in _MAPPING_KEYS)}")
            fields.setdefault(key.strip(), []).append(value.strip())
        for key, values in fields.items():
            if key not in _REPEATED_KEYS and len(values) > 1:
                raise ValueError(f"{key} given {len(values)} times")
        one = {k: v[0] for k, v in fields.items() if k not in _REPEATED_KEYS}
        classes = [c.partition(":") for c in fields.get("device-class", ())]  # (a DeviceClass name has no colon)
        shard_classes = fields.get("shard-class", [])
        if len({c for c, _sep, _type in classes} | set(shard_classes)) != len(classes) + len(shard_classes):
            raise ValueError("a DeviceClass is named twice")
        if any(sep and not gres_type for _c, sep, gres_type in classes):
            raise ValueError("device-class=CLASS:TYPE wants a GRES type after the colon")
        if typed := [c for c in shard_classes if ":" in c]:
            raise ValueError(f"shard-class={typed[0]}: a shard class takes no GRES type (Slurm's shards are of the "
                             "node's GPUs, whatever their type)")
        return cls(one.get("driver", ""), [c for c, _sep, _type in classes], attribute=one.get("attribute", ""),
                   name_template=one.get("name", ""), gres=one.get("gres", "gpu"),
                   gres_types=[(c, t) for c, _sep, t in classes if t], shard_classes=shard_classes)

    @property
    def qualified_attribute(self) -> str:
        return self.attribute if "/" in self.attribute else f"{self.driver}/{self.attribute}"


_MAPPING_KEYS = ("driver", "device-class", "shard-class", "attribute", "name", "gres")
_REPEATED_KEYS = ("device-class", "shard-class")
SHARD = "shard"  # Slurm's GRES of GPU shares (gres/shard:N)
GRES_TYPE = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # a Slurm GRES type: no ':' or ',' (gres/gpu:TYPE:N)
AttributeValue = Union[int, bool, str]


DeviceKey = tuple[str, str, str]  # (driver, pool, device): how an allocation result names a device
TAINT_EFFECTS = ("NoSchedule", "NoExecute")  # the effects that keep a device from a new claim (others: None)


@frozen
class DeviceTaint:
    """A taint that keeps the device from a claim not tolerating it (``None`` and unknown effects are left out)."""

    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@frozen
class DeviceToleration:
    """A request's toleration of device taints (``exactly.tolerations``), matched as Kubernetes matches them."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: DeviceTaint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


def _taints(device: Mapping[str, Any]) -> tuple[DeviceTaint, ...]:
    return tuple(DeviceTaint(str(t.get("key", "")), str(t.get("value") or ""), str(t["effect"]))
                 for t in device.get("taints") or () if t.get("effect") in TAINT_EFFECTS)


@frozen
class SliceDevice:
    """One device a driver publishes for a node, its attributes under their qualified names."""

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, AttributeValue] = attrs.field(factory=dict, eq=False, hash=False)
    taints: tuple[DeviceTaint, ...] = ()

    @property
    def key(self) -> DeviceKey:
        return self.driver, self.pool, self.name


def _attribute_value(value: Mapping[str, Any]) -> AttributeValue | None:
    for key in ("int", "bool", "string", "version"):
        if key in value:
            return value[key]  # type: ignore[no-any-return]
    return None


def node_devices(slices: Iterable[Obj], node: str, driver: str) -> tuple[SliceDevice, ...]:
    """The devices ``driver`` publishes for ``node``: of each of its pools, the slices of the newest generation,
    and only once all of that generation's slices are seen (``resourceSliceCount``), as kube-scheduler reads them.
    A pool still being written is left out: its devices are not known yet."""
    pools: dict[str, tuple[int, int, list[Obj]]] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        if spec.get("driver") != driver or spec.get("nodeName") != node:
            continue
        pool = spec.get("pool") or {}
        name, generation = pool.get("name", ""), int(pool.get("generation", 0))
        count = int(pool.get("resourceSliceCount", 1))
        seen = pools.get(name)
        if seen is None or generation > seen[0]:
            pools[name] = (generation, count, [spec])
        elif generation == seen[0]:
            seen[2].append(spec)
    devices = []
    for pool_name, (_generation, count, specs) in sorted(pools.items()):
        if len(specs) < count:
            continue
        for spec in specs:
            for device in spec.get("devices") or ():
                attributes = {}
                for key, value in (device.get("attributes") or {}).items():
                    found = _attribute_value(value or {})
                    if found is not None:
                        attributes[key if "/" in key else f"{driver}/{key}"] = found
                devices.append(SliceDevice(driver, pool_name, device["name"], attributes, _taints(device)))
    return tuple(devices)


@frozen
class ClaimRequest:
    """One request of one claim that Slurm fills: ``count`` devices, or with ``shards`` (a shard class's request)
    ``count`` Slurm shards of the GPU(s) Slurm picks."""

    claim: str
    request: str
    count: int
    tolerations: tuple[DeviceToleration, ...] = ()
    gres_type: str = ""  # its DeviceClass's GRES type ("": untyped)
    shards: bool = False
    device_class: str = ""

    def tolerates(self, device: SliceDevice) -> bool:
        return all(any(t.tolerates(taint) for t in self.tolerations) for taint in device.taints)


def claim_requests(claim: Obj, mapping: DeviceMapping) -> tuple[ClaimRequest, ...]:
    """The requests of ``claim`` that Slurm fills, in the claim's order; UnsupportedClaim for a claim that
    mixes in what Slurm cannot decide (a claim is allocated whole or not at all)."""
    name = claim["metadata"]["name"]
    spec = (claim.get("spec") or {}).get("devices") or {}
    if spec.get("constraints"):
        raise UnsupportedClaim(f"ResourceClaim {name}: constraints are not supported (Slurm picks the devices)")
    out = []
    for request in spec.get("requests") or ():
        label = f"ResourceClaim {name} request {request.get('name')!r}"
        if request.get("firstAvailable"):
            raise UnsupportedClaim(f"{label}: firstAvailable is not supported; name one DeviceClass in exactly")
        exactly = request.get("exactly") or {}
        device_class = exactly.get("deviceClassName")
        if device_class not in mapping.classes:
            raise UnsupportedClaim(f"{label}: DeviceClass {device_class!r} is not one Slurm allocates "
                                   f"({', '.join(sorted(mapping.classes))})")
        if exactly.get("allocationMode", ALLOCATION_MODE_EXACT) != ALLOCATION_MODE_EXACT:
            raise UnsupportedClaim(f"{label}: allocationMode {exactly['allocationMode']} is not supported; "
                                   "ask for a count")
        if exactly.get("selectors"):
            raise UnsupportedClaim(f"{label}: selectors are not supported (Slurm picks the devices; "
                                   "ask for a GPU type through the DeviceClass)")
        if exactly.get("adminAccess"):
            raise UnsupportedClaim(f"{label}: adminAccess is not supported")
        count = exactly.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise UnsupportedClaim(f"{label}: count {count!r} is not a positive integer")
        tolerations = tuple(DeviceToleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"),
                                             str(t.get("value") or ""), str(t.get("effect") or ""))
                            for t in exactly.get("tolerations") or ())
        out.append(ClaimRequest(name, str(request.get("name")), count, tolerations,
                                gres_type=mapping.gres_type(device_class),
                                shards=device_class in mapping.shard_classes, device_class=str(device_class)))
    if not out:
        raise UnsupportedClaim(f"ResourceClaim {name}: no device requests")
    sharing = {r.request for r in out if r.shards}
    if problem := _unwritable(spec.get("config")):
        raise UnsupportedClaim(f"ResourceClaim {name}: config {problem}: it could not be written into the allocation")
    for entry in spec.get("config") or ():
        named = set((entry or {}).get("requests") or ()) if isinstance(entry, Mapping) else set()
        if sharing and (not named or named & sharing):
            # (a driver sets a GPU up per its config, MPS or time-slicing say: on a GPU other tenants share, only
            # the DeviceClass's, the operator's, may)
            raise UnsupportedClaim(f"ResourceClaim {name}: config is not taken for shard requests (the GPU is "
                                   "shared with other Pods; its set-up is the DeviceClass's)")
    return tuple(out)


CONFIG_DEPTH = 64  # (a driver's parameters are a few levels deep; the apiserver lets a tenant nest 10,000)
_INT_DIGITS = 4_000  # (Python writes no integer of more than 4,300 digits into JSON)


def _unwritable(config: Any) -> str | None:
    """Why a claim's config cannot go into an allocation (it is copied there, ``allocation_config``), or None: nested
    deeper than ``CONFIG_DEPTH`` (the client's serializer recurses per level) or an integer too long to write.
    Walked without recursion, whatever the depth."""
    pending: list[tuple[Any, int]] = [(config, 0)]
    while pending:
        value, depth = pending.pop()
        if depth > CONFIG_DEPTH:
            return f"nests deeper than {CONFIG_DEPTH} levels"
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _INT_DIGITS * 3:
            return "holds a number of thousands of digits"
        if isinstance(value, Mapping):
            pending.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            pending.extend((v, depth + 1) for v in value)
    return None


def devices_wanted(requests: Iterable[ClaimRequest]) -> int:
    """How many devices the placeholder job asks Slurm for: ``gres/gpu:N``."""
    return sum(r.count for r in requests if not r.shards)


def shards_wanted(requests: Iterable[ClaimRequest]) -> int:
    """How many shards the placeholder job asks Slurm for: ``gres/shard:N``."""
    return sum(r.count for r in requests if r.shards)


@frozen
class Mismatch:
    """Slurm and the driver disagree on a node's devices: nothing is bound, and the node is not usable for
    such Pods until an administrator looks."""

    node: str
    detail: str

    @property
    def message(self) -> str:
        return f"Slurm's GRES and the DRA driver's devices disagree on node {self.node}: {self.detail}"


def _named(index: int, devices: Sequence[SliceDevice], mapping: DeviceMapping) -> list[SliceDevice]:
    if mapping.name_template:
        wanted = mapping.name_template.format(index=index)
        return [d for d in devices if d.name == wanted]
    key = mapping.qualified_attribute
    return [d for d in devices if isinstance(d.attributes.get(key), int)
            and not isinstance(d.attributes.get(key), bool) and d.attributes[key] == index]


def granted_indices(grants: Iterable[GresGrant], mapping: DeviceMapping) -> tuple[int, ...]:
    """The node's indices of ``mapping.gres`` that Slurm gave the job, every type together."""
    return tuple(sorted(i for g in grants if g.name == mapping.gres for i in g.indices))


@frozen
class JobUnfit:
    """The job's GRES does not fit the Pod's claims: another count (the claims changed since the job was
    submitted), or no index recorded for them. What a tenant wrote, so the job goes and no node is drained."""

    message: str


@frozen
class Releasing:
    """A device Slurm gave is still held by a claim on its way out (its Pod sunk's own, or the claim no longer
    reserved): the binding waits for it to be deallocated."""

    message: str


def allocation_results(requests: Sequence[ClaimRequest], grants: Iterable[GresGrant], devices: Sequence[SliceDevice],
                       mapping: DeviceMapping, node: str, held: Mapping[DeviceKey, str] | None = None,
                       releasing: Mapping[DeviceKey, str] | None = None,
                       ) -> dict[str, list[Obj]] | Mismatch | JobUnfit | Releasing:
    """Each claim's ``status.allocation.devices.results``: Slurm's indices, in order, each the one device the
    mapping names, dealt to the requests in order (shard requests: ``_deal_shards``). Keyed by claim name.
    ``held``: the node's devices other claims hold (``held_devices``); ``releasing``: those of them on their way
    out. Every device being released is waited for before any held one is a mismatch."""
    shards = any(r.shards for r in requests)
    dealt = _deal_shards(requests, grants, mapping) if shards else _deal_gpus(requests, grants, mapping)
    if isinstance(dealt, JobUnfit):
        return dealt
    named: dict[int, SliceDevice] = {}
    for index in dict.fromkeys(index for _request, index in dealt):
        found = _named(index, devices, mapping)
        if len(found) != 1:
            how = (f"name {mapping.name_template.format(index=index)!r}" if mapping.name_template
                   else f"attribute {mapping.qualified_attribute}={index}")
            return Mismatch(node, f"{mapping.gres} index {index}{' (shards)' if shards else ''} names {len(found)} "
                                  f"devices of driver {mapping.driver} ({how}), not one")
        named[index] = found[0]
    for index, device in named.items():  # (the holder unnamed, here and below: it may be another tenant's)
        if (releasing or {}).get(device.key) is not None:
            return Releasing(f"{mapping.gres} index {index} names device {device.name}, still held"
                             f"{' whole' if shards else ''} by a ResourceClaim being released")
    for index, device in named.items():
        if (held or {}).get(device.key) is not None:
            return Mismatch(node, f"{mapping.gres} index {index} names device {device.name}, which "
                                  + ("a ResourceClaim holds whole: Slurm counts it free for shards" if shards
                                     else "another ResourceClaim holds: Slurm counts it free"))
    results: dict[str, list[Obj]] = {}
    for request, index in dealt:
        device = named[index]
        if not request.tolerates(device):
            taints = ", ".join(str(t) for t in device.taints)
            return Mismatch(node, f"{mapping.gres} index {index} names device {device.name}, tainted {taints}: "
                                  "Slurm counts it usable")
        results.setdefault(request.claim, []).append(
            {"request": request.request, "driver": device.driver, "pool": device.pool, "device": device.name})
    return results


def _deal_gpus(requests: Sequence[ClaimRequest], grants: Iterable[GresGrant],
               mapping: DeviceMapping) -> list[tuple[ClaimRequest, int]] | JobUnfit:
    """Slurm's GPU indices, in order, one to each device a request counts."""
    indices = granted_indices(grants, mapping)
    wanted = devices_wanted(requests)
    granted = sum(g.count for g in grants if g.name == mapping.gres)
    if granted != wanted:
        return JobUnfit(f"its ResourceClaims ask for {wanted} device(s), but its Slurm job holds {granted}: the "
                        "claims or the job changed since it was submitted")
    if len(indices) != wanted:
        return JobUnfit(f"Slurm's record of its job names the index of {len(indices)} of its {granted} "
                        f"{mapping.gres} (a GRES without File=, or a job edited since): which devices is not known")
    dealt = iter(indices)
    return [(request, next(dealt)) for request in requests for _ in range(request.count)]


def _deal_shards(requests: Sequence[ClaimRequest], grants: Iterable[GresGrant],
                 mapping: DeviceMapping) -> list[tuple[ClaimRequest, int]] | JobUnfit:
    """Slurm's shares (GPU index, shards taken), in index order, dealt to the requests in order: each request gets
    the GPUs its shards are on, each once."""
    if not all(r.shards for r in requests):
        return JobUnfit("its ResourceClaims ask for whole GPUs and GPU shards: a job asks for one or the other")
    if whole := sum(g.count for g in grants if g.name == mapping.gres):
        return JobUnfit(f"its Slurm job holds {whole} whole {mapping.gres} beside its shards: the job changed since it "
                        "was submitted")
    grants = [g for g in grants if g.name == SHARD]
    wanted, granted = shards_wanted(requests), sum(g.count for g in grants)
    if granted != wanted:
        return JobUnfit(f"its ResourceClaims ask for {wanted} shard(s), but its Slurm job holds {granted}: the "
                        "claims or the job changed since it was submitted")
    shares = sorted((index, units) for g in grants for index, units in g.shares)
    if sum(units for _index, units in shares) != wanted or len({i for i, _u in shares}) != len(shares):
        return JobUnfit(f"Slurm's record of its job does not say which GPUs its {granted} shard(s) are on")
    remaining = [units for _index, units in shares]
    position = 0
    dealt: list[tuple[ClaimRequest, int]] = []
    for request in requests:
        need, touched = request.count, []
        while need:  # (the shares sum to what the requests ask: checked above)
            take = min(need, remaining[position])
            need -= take
            remaining[position] -= take
            touched.append(shares[position][0])
            if not remaining[position]:
                position += 1
        dealt.extend((request, index) for index in dict.fromkeys(touched))
    return dealt


def allocation_config(claim: Obj, class_of: Callable[[str], Obj | None]) -> list[Obj]:
    """The allocation's ``devices.config``, as kube-scheduler's allocator writes it: each DeviceClass's ``config``
    once, for the requests of that class (``source: FromClass``), then the claim's own (``FromClaim``: all requests,
    or those it names). ``class_of`` reads a DeviceClass by name; one not seen adds nothing (the apiserver does not
    require a claim's class to exist either)."""
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
    by_class: dict[str, list[str]] = {}
    for request in requests:
        if (device_class := (request.get("exactly") or {}).get("deviceClassName")) is not None:
            by_class.setdefault(str(device_class), []).append(str(request.get("name")))
    config: list[Obj] = []
    for device_class, names in by_class.items():
        for entry in ((class_of(device_class) or {}).get("spec") or {}).get("config") or ():
            if isinstance(entry, Mapping) and "opaque" in entry:
                config.append({"source": "FromClass", "requests": list(names), "opaque": entry["opaque"]})
    named = {str(r.get("name")) for r in requests}
    for entry in ((claim.get("spec") or {}).get("devices") or {}).get("config") or ():
        if not isinstance(entry, Mapping) or "opaque" not in entry:
            continue
        wanted = [str(r) for r in entry.get("requests") or ()]
        if wanted and not named & set(wanted):
            continue
        config.append({"source": "FromClaim", **({"requests": wanted} if wanted else {}), "opaque": entry["opaque"]})
    return config


def node_selector(node: str) -> Obj:
    """The allocation's node selector: the one Node whose devices these are (kube-scheduler writes the same)."""
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def claim_status(results: list[Obj], node: str, pod: Obj, config: Sequence[Obj] = ()) -> Obj:
    """A claim's ``status``: allocated on ``node`` (with ``config``: ``allocation_config``) and reserved for
    ``pod``, what the kubelet needs to start it."""
    meta = pod["metadata"]
    devices: Obj = {"results": results, **({"config": list(config)} if config else {})}
    return {"allocation": {"devices": devices, "nodeSelector": node_selector(node)},
            "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]}


def same_allocation(claim: Obj, results: list[Obj], node: str, config: Sequence[Obj] = ()) -> bool:
    """Whether ``claim`` is already allocated exactly so (a retried bind writes nothing twice)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    devices = allocation.get("devices") or {}
    have = [{k: r.get(k) for k in ("request", "driver", "pool", "device")} for r in devices.get("results") or ()]
    return (have == results and list(devices.get("config") or ()) == list(config)
            and allocation.get("nodeSelector") == node_selector(node))


def allocated_on(claim: Obj) -> str | None:
    """The Node a claim's allocation is on (its one ``metadata.name`` field selector); None: not allocated there."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or ():
        for field in term.get("matchFields") or ():
            values = field.get("values") or []
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return None


def held_devices(claims: Iterable[Obj], node: str, driver: str, *, besides: frozenset[str] = frozenset(),
                 shared: frozenset[str] = frozenset()) -> dict[DeviceKey, str]:
    """The devices of ``driver`` on ``node`` that claims hold (keyed to ``namespace/name`` of the claim), except the
    claims named in ``besides`` (``namespace/name``: the Pod's own) and the results of requests of the ``shared``
    DeviceClasses (the shard classes, when a claim of shards is filled: a GPU's shards are Slurm's to count)."""
    held = {}
    for claim in claims:
        meta = claim.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if key in besides or allocated_on(claim) != node:
            continue
        shared_requests = {str(r.get("name")) for r in ((claim.get("spec") or {}).get("devices") or {}).get(
            "requests") or () if (r.get("exactly") or {}).get("deviceClassName") in shared} if shared else set()
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or ()
        for result in results:
            if result.get("driver") == driver and str(result.get("request")) not in shared_requests:
                held[(driver, str(result.get("pool", "")), str(result.get("device", "")))] = key
    return held


def claim_refusal(claim: Obj, pod: Obj) -> str | None:
    """Why sunk must not fill ``claim`` for ``pod`` (None: it may). A claim reserved for another consumer is shared,
    and one allocated already was filled by someone else (kube-scheduler), unless it is reserved for this very Pod:
    then it is sunk's own earlier write, and ``same_allocation`` tells whether it still holds."""
    name = (claim.get("metadata") or {}).get("name")
    status = claim.get("status") or {}
    uid = (pod.get("metadata") or {}).get("uid")
    others = [r for r in status.get("reservedFor") or () if r.get("uid") != uid]
    if others:
        who = ", ".join(f"{r.get('resource', '?')}/{r.get('name', '?')}" for r in others[:3])
        return f"ResourceClaim {name} is reserved for {who}: a claim shared between consumers is not supported"
    if status.get("allocation") and not status.get("reservedFor"):
        return (f"ResourceClaim {name} is allocated already, not by sunk: a claim of a Pod sunk schedules is filled "
                "by sunk from Slurm's allocation")
    return None


@frozen
class PodClaim:
    """One entry of a Pod's ``spec.resourceClaims``: ``claim`` the ResourceClaim's name, None while the claim a
    template makes for the Pod is not made yet (kube-controller-manager's resourceclaim controller names it in
    ``status.resourceClaimStatuses``)."""

    name: str
    claim: str | None


def pod_claims(pod: Obj) -> tuple[PodClaim, ...]:
    made = {s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
    out = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        name = str(entry.get("name", ""))
        claim = entry.get("resourceClaimName") or made.get(name)
        out.append(PodClaim(name, str(claim) if claim else None))
    return tuple(out)


@frozen
class ClaimPlan:
    """What a Pod's claims ask of its placeholder job: ``gpus`` devices, or ``shards``, through ``requests``; or,
    not yet, the claims still ``waiting`` to be made or seen; or ``refused``, why sunk cannot fill them (for the
    Pod's Event)."""

    requests: tuple[ClaimRequest, ...] = ()
    waiting: tuple[str, ...] = ()
    refused: str | None = None

    @property
    def gpus(self) -> int:
        return devices_wanted(self.requests)

    @property
    def shards(self) -> int:
        return shards_wanted(self.requests)

    @property
    def gres_type(self) -> str:
        """The GRES type the claims ask for ("": untyped); ``claim_plan`` refuses claims of two types."""
        return self.requests[0].gres_type if self.requests else ""


def gang_gpu_disagreement(claimed: Mapping[str, int], per_node: int) -> str:
    """Why a gang's job cannot fill its members' claims ("" when it can). Slurm gives every node of a gang's job the
    same GPUs, ``per_node`` (the most any member asks, as nvidia.com/gpu or through claims), and a member's claims
    are filled with exactly the GPUs of its node (``allocation_results``): so each member with claims (``claimed``:
    its name and the GPUs its claims ask) must ask for exactly that many."""
    off = sorted(f"{name} ({count})" for name, count in claimed.items() if count != per_node)
    if not off:
        return ""
    return (f"spec.resourceClaims: every node of a gang's Slurm job gets {per_node} GPU(s), the most any member asks, "
            f"and a member's claims are filled with all of its node's: the claims of {', '.join(off)} ask for "
            "another number; give every member with claims the same count")


def claim_plan(pod: Obj, claims: Mapping[str, Obj], mapping: DeviceMapping | None) -> ClaimPlan:
    """The plan for ``pod``'s claims; ``claims`` the ResourceClaims of its namespace by name (what is seen)."""
    entries = pod_claims(pod)
    if not entries:
        return ClaimPlan()
    if mapping is None:
        return ClaimPlan(refused="ResourceClaims are allocated by sunk's scheduler only with a device mapping "
                                 "(--dra-device-mapping); request GPUs as nvidia.com/gpu, or ask the operator")
    named = [e.claim for e in entries if e.claim]
    if len(set(named)) != len(named):
        return ClaimPlan(refused="spec.resourceClaims names one ResourceClaim twice")
    waiting = tuple(e.claim or f"(the claim of {e.name}, not made yet)" for e in entries
                    if e.claim is None or e.claim not in claims)
    if waiting:
        return ClaimPlan(waiting=waiting)
    requests: list[ClaimRequest] = []
    for entry in entries:
        claim = claims[str(entry.claim)]
        refusal = claim_refusal(claim, pod)
        if refusal is not None:
            return ClaimPlan(refused=refusal)
        try:
            requests.extend(claim_requests(claim, mapping))
        except UnsupportedClaim as exc:
            return ClaimPlan(refused=str(exc))
    if len({r.shards for r in requests}) > 1:
        return ClaimPlan(refused="the claims ask for whole GPUs and GPU shards; a Slurm job asks for one or the other "
                                 "(a GPU Slurm gives whole is not also shared)")
    if len(types := {r.gres_type for r in requests}) > 1:
        listed = ", ".join(sorted(t or "untyped" for t in types))
        return ClaimPlan(refused=f"the claims ask for GPUs of DeviceClasses of more than one GRES type ({listed}); a "
                                 "Slurm job asks for one")
    return ClaimPlan(tuple(requests))


def node_disagreement(gpus: int, devices: Sequence[SliceDevice], mapping: DeviceMapping,
                      held_elsewhere: Mapping[DeviceKey, str]) -> str | None:
    """How Slurm's ``gpus`` GRES of a node (indices 0..gpus-1) and the driver's ``devices`` there disagree, or None:
    an index naming no device or several, a named device tainted, or held by a claim sunk did not fill
    (``held_elsewhere``: Slurm counts it free). What lifts a ``DeviceMismatchDrain`` once it no longer holds."""
    for index in range(gpus):
        named = _named(index, devices, mapping)
        if len(named) != 1:
            return f"{mapping.gres} index {index} names {len(named)} devices of driver {mapping.driver}, not one"
        device = named[0]
        if device.taints:
            return f"device {device.name} is tainted {', '.join(str(t) for t in device.taints)}"
        if held_elsewhere.get(device.key) is not None:
            return f"device {device.name} is held by a ResourceClaim sunk did not fill"
    return None
