"""The drains sunk sets on Slurm nodes: their reasons, read back, and when each cause is gone.

Why one module: the scheduler (its drain hook, and its release of a Pod stuck terminating), the
Syncer's post-hook, the prolog, the epilog and the lock service write these reasons; the Syncer
reads them back to lift each drain once its cause is gone. One grammar, here, so that what a
writer writes is what the Syncer parses (the unit tests run the scripts and parse what they
wrote). The Syncer's own condition drains (``sunk.translate.nodestate``: the slurmd Pod is
missing, not ready, pending deletion, its Node cordoned) are not in it: they are lifted as
soon as the condition clears.

The reasons (each a full match: nothing before, nothing after):

    k8s: sunk-placeholder: pod NS/NAME uid=UID outlived KillWait after job N
        (an earlier version's, without ``uid=UID``: still read, and judged by the Pod's name alone)
    k8s: sunk-placeholder: gang NS/KEY outlived KillWait after job N
    k8s: sunk-stuck: pod NS/NAME uid=UID stuck terminating on Node NODE (NotReady or gone) after job N
    k8s: sunk-lock: job N: hook API unreachable (DETAIL)
    k8s: sunk-lock: job N: [strict ]lock timeout after Ss: Pods on Node NODE: NS/NAME[ NS/NAME...]
    k8s: sunk-lock: job N: [strict ]lock timeout after Ss: K Pods bound to Node NODE by YYYY-MM-DDTHH:MM:SSZ,
        taint effect EFFECT
    k8s: sunk-lock: job N: [strict ]lock timeout after Ss: lock still STATE
    k8s: sunk-dra: Node NODE: DETAIL

When each is lifted (``cause``), and who writes it:

    sunk-placeholder  the placeholder's Pod outlived KillWait (scheduler/hooks.py's /drain), or was
                      still on the node as the job's epilog ran (the Syncer's post-hook,
                      ``outlived``; the epilog itself when the Syncer cannot be reached): lifted
                      once the Pod with that UID is off the node (a Pod made again under its name
                      is another one), no job of it holds the node, and no other Pod sunk placed
                      there outlives its job (``gang NS/KEY``: the epilog of a gang's
                      job that could not reach the Syncer drains its node, not knowing which member
                      stayed where: lifted
                      on each node once no job of the gang holds it, no unfinished member of the
                      gang is on its Node, and no Pod sunk placed there outlives its job)
    sunk-stuck        the scheduler let go of the job of a Pod stuck terminating on a Node that is
                      NotReady or gone (``ReleaseStuck``; the /drain hook says the same for such
                      a Pod): lifted once no Pod with that UID exists and that Node is Ready
    sunk-lock         the prolog gave up on the hook API or its lock: lifted once the refused job
                      holds the node no more, the named Pods have left the Node, and the lock is
                      consistent with Slurm's jobs again (``K Pods ... by T``: more Pods blocked
                      than a reason can name; instead of the named ones, no Pod bound to the Node
                      by T, the latest of their bindings, may block a lock with that taint effect
                      any more: Pods bound later came once the lock was given up, and are not
                      what refused the job)
    sunk-dra          the scheduler met Slurm's GRES and the DRA driver's devices disagreeing on the
                      Node as it filled a Pod's ResourceClaims (``dra.Mismatch``): lifted once they
                      agree (``dra.node_disagreement``: each of the node's GPU indices names one
                      untainted device no claim sunk did not fill holds), as the Syncer sees the
                      driver's ResourceSlices and the claims (its ``--dra-device-mapping``; without
                      it the drain stays, and says so in the log)

Why ``k8s:``: SUNK's Syncer "only removes or updates drain reasons that are prefixed with
k8s:", and each of these causes lives on the Kubernetes side (a Pod that would not go, a
Node whose kubelet is gone, the hook API and its lock). The ``sunk-...`` word after it tells
them from the Syncer's own condition drains, which it lifts as soon as the condition clears;
these it lifts only once the cause named in the reason is gone (``cause``). A prolog failure whose cause the Syncer
cannot see (its configuration, a refusal by the hook API) keeps the form ``sunk-lock: job
N: ...`` without the prefix, and an operator resumes the node. A reason that merely
resembles these (another prefix, text around it, a malformed Pod name) is not sunk's:
``parse`` answers None, and the drain is treated like any other.

Slurm keeps one reason per node: a writer that finds the node drained already decides
whether its reason may replace the one there (``sunk.translate.stuckpod.should_drain`` for
the scheduler's stuck-Pod drain); a drain a person or NHC set is never replaced.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Optional, Protocol, Union

from attrs import field, frozen

from sunk.base.times import epoch, rfc3339
from sunk.model import names
from sunk.model.slurm import Job, Node

from . import dra
from .gang import gang_of, owner
from .identity import PlaceholderIdentity, identity_of, is_placeholder
from .keys import GangKey, PodKey
from .lock import (
    TAINT_EFFECTS,
    LockState,
    Vouched,
    bound_time,
    holder_of,
    lock_holders,
    parse_state,
    pods_to_evict,
    satisfies,
)
from .objects import has_taint, is_terminal, node_ready

Obj = Mapping[str, Any]

MAX_REASON = 250  # what the prolog cuts a reason to; a longer lock-timeout reason is not written in this form

_P = names.K8S_DRAIN_PREFIX
# Kubernetes names: DNS labels/subdomains (lower case, digits, '-', '.'); nothing else is a Pod here.
_NAME = r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?"
_POD = rf"{_NAME}/{_NAME}"
# A Kubernetes UID: a UUID, as the apiserver makes them (lower-case hex and '-'); tests use short ones.
_UID = r"[0-9a-z](?:[-0-9a-z]{0,62}[0-9a-z])?"
# (``uid=``: since the UID is recorded; a reason without it, an earlier version's, is still sunk's.)
_PLACEHOLDER = re.compile(rf"{_P} sunk-placeholder: pod (?P<ns>{_NAME})/(?P<name>{_NAME})(?: uid=(?P<uid>{_UID}))? "
                          rf"outlived KillWait after job (?P<job>[1-9][0-9]{{0,18}})")
# A gang's key (sunk.translate.gang.Gang.key): its kind, then words of its workload's labels.
_GANG_KEY = r"[a-z]+(?:/[A-Za-z0-9][A-Za-z0-9._-]*)+"
_GANG_PLACEHOLDER = re.compile(rf"{_P} sunk-placeholder: gang (?P<ns>{_NAME})/(?P<key>{_GANG_KEY}) "
                               rf"outlived KillWait after job (?P<job>[1-9][0-9]{{0,18}})")
_UNREACHABLE = re.compile(rf"{_P} sunk-lock: job (?P<job>[1-9][0-9]{{0,18}}): hook API unreachable"
                          rf"(?: \((?P<detail>[^()]*)\))?")
_STUCK = re.compile(rf"{_P} sunk-stuck: pod (?P<ns>{_NAME})/(?P<name>{_NAME}) uid=(?P<uid>{_UID}) stuck terminating "
                    rf"on Node (?P<node>{_NAME}) \(NotReady or gone\) after job (?P<job>[1-9][0-9]{{0,18}})")
STUCK_MARK = f"{_P} sunk-stuck: "  # what every stuck-Pod reason starts with: a cheap test before a parse
_STAMP = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"  # what Kubernetes writes its times as
_TIMEOUT = re.compile(rf"{_P} sunk-lock: job (?P<job>[1-9][0-9]{{0,18}}): (?P<strict>strict )?lock timeout after "
                      rf"(?P<seconds>[0-9]{{1,9}})s: (?:Pods on Node (?P<node>\S+): (?P<pods>{_POD}(?: {_POD})*)"
                      rf"|(?P<count>[1-9][0-9]{{0,5}}) Pods bound to Node (?P<bound_node>{_NAME}) by "
                      rf"(?P<bound_by>{_STAMP}), taint effect (?P<effect>{'|'.join(TAINT_EFFECTS)})"
                      rf"|lock still (?P<state>[a-z_]+))")

_DEVICE_MISMATCH = re.compile(rf"{_P} sunk-dra: Node (?P<node>{_NAME}): (?P<detail>[^\n]{{1,{MAX_REASON}}})")


@frozen
class PlaceholderDrain:
    """The placeholder's Pod outlived KillWait: Slurm ended job ``job_id``, the Pod still ran.

    ``uid``: that Pod's UID, so that only that very Pod holds the drain; a Pod deleted and made
    again under its name (by its author) is another one. "" for a reason an earlier version
    wrote, without it: judged by the name alone, as that version did."""

    namespace: str
    name: str
    job_id: int
    uid: str = ""

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reason(self) -> str:
        uid = f" uid={self.uid}" if self.uid else ""
        return f"{_P} sunk-placeholder: pod {self.pod}{uid} outlived KillWait after job {self.job_id}"


@frozen
class GangPlaceholderDrain:
    """A gang's placeholder job ``job_id`` (the gang ``namespace``/``key``: sunk.translate.gang) ended while
    its epilog could not reach the Syncer, which alone knows which member stayed on which node: the epilog
    of every node of the job drains its node, and each is lifted on its own."""

    namespace: str
    key: str
    job_id: int

    @property
    def owner(self) -> str:
        """The gang's owner (``gang:NS/KEY``), what its placeholder calls the hook API as (SUNK_POD_UID)."""
        return owner(self.namespace, self.key)

    def reason(self) -> str:
        return f"{_P} sunk-placeholder: gang {self.namespace}/{self.key} outlived KillWait after job {self.job_id}"


@frozen
class StuckPodDrain:
    """The scheduler let go of job ``job_id`` of the Pod ``namespace/name`` (``uid``), stuck terminating
    on Node ``k8s_node``, which was NotReady or gone: its containers may still run there."""

    namespace: str
    name: str
    uid: str
    k8s_node: str
    job_id: int

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reason(self) -> str:
        return (f"{_P} sunk-stuck: pod {self.pod} uid={self.uid} stuck terminating on Node {self.k8s_node} "
                f"(NotReady or gone) after job {self.job_id}")


@frozen
class HookUnreachableDrain:
    """The prolog of job ``job_id`` got no answer from the hook API (down, or a 5xx) within its budget."""

    job_id: int
    detail: str = ""

    def reason(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        return f"{_P} sunk-lock: job {self.job_id}: hook API unreachable{detail}"


@frozen
class LockTimeoutDrain:
    """The prolog of job ``job_id`` timed out waiting for the lock: ``pods`` were still on ``k8s_node``;
    or ``count`` Pods, too many to name, bound to it by ``bound_by`` (a Kubernetes time), blocking a
    lock whose taint had ``effect``; or, with no Pod to name, the lock stayed at ``state``."""

    job_id: int
    seconds: int
    k8s_node: str = ""
    pods: tuple[str, ...] = ()
    state: str = ""
    strict: bool = False
    count: int = 0
    bound_by: str = ""
    effect: str = ""

    def reason(self) -> str:
        level = "strict " if self.strict else ""
        if self.pods:
            detail = f"Pods on Node {self.k8s_node}: {' '.join(self.pods)}"
        elif self.bound_by:
            detail = (f"{self.count} Pods bound to Node {self.k8s_node} by {self.bound_by}, "
                      f"taint effect {self.effect}")
        else:
            detail = f"lock still {self.state}"
        return f"{_P} sunk-lock: job {self.job_id}: {level}lock timeout after {self.seconds}s: {detail}"


@frozen
class DeviceMismatchDrain:
    """Slurm's GRES and the DRA driver's devices disagreed on Node ``k8s_node`` (``dra.Mismatch``'s ``detail``)
    as the scheduler filled a Pod's claims: Slurm would give the same devices again, to a job or a Pod."""

    k8s_node: str
    detail: str

    def reason(self) -> str:
        return f"{_P} sunk-dra: Node {self.k8s_node}: {' '.join(self.detail.split())}"[:MAX_REASON]


SunkDrain = Union[PlaceholderDrain, GangPlaceholderDrain, StuckPodDrain, HookUnreachableDrain, LockTimeoutDrain,
                  DeviceMismatchDrain]


def is_sunks(reason: str) -> bool:
    """Whether a drain reason is sunk's: every ``k8s:`` reason (the Syncer's condition drains and the ones
    above). A person's or NHC's reason never is, nor the prolog's unprefixed ``sunk-lock: job N: ...``,
    which waits for an operator. Only these may be lifted by sunk, by the Syncer or at uninstall."""
    return reason.startswith(_P)


# Node states that keep Slurm's jobs off a node (base states and flags, as slurmrestd names them).
OUT_OF_SERVICE = frozenset({"DRAIN", "DOWN", "FAIL", "ERROR", "FUTURE", "INVALID", "INVALID_REG", "UNKNOWN"})


def held_by_another(node: Node) -> bool:
    """Whether a node is out of service for a reason sunk did not write (a person's, NHC's, Slurm's own
    ``Not responding``, the prolog's unprefixed one): then sunk leaves it as it is and writes no drain of
    its own over it. Slurm keeps one reason per node, and a ``k8s:`` one written over an operator's
    would be lifted by the Syncer once sunk's cause is gone, returning a faulty node to service (and
    the operator's reason, which says what to mend, would be lost). The node keeps Slurm's jobs off it
    anyway. The same rule is written in bash once, for the prolog, the epilog and the placeholder job
    (``foreign_drain``, sunk/scripts/common.sh)."""
    return bool(node.state & OUT_OF_SERVICE) and bool(node.reason.strip()) and not is_sunks(node.reason)


def job_ending(job: Job) -> bool:
    """Slurm is ending the job: it is over, or completing (KillWait runs, the epilogs run), or requeued by
    preemption. Only Slurm's end may drain for a placeholder: its user can signal its script at any time."""
    return not job.active or "COMPLETING" in job.state_flags


@frozen
class Outlived:
    """A placeholder's Pod still on the node's Node as Slurm ends its job: ``drain`` names it, ``pod`` is it."""

    drain: PlaceholderDrain
    pod: Obj = field(eq=False, repr=False)


def outlived(job: Job, pods_on_node: Sequence[Obj]) -> Optional[Outlived]:
    """The Pod job ``job`` held a place for that is still among ``pods_on_node`` (the Pods bound to the Slurm
    node's Kubernetes Node) and not finished, with the drain the scheduler's /drain hook writes for it; None
    when the job is no placeholder or nothing of it is left there.

    Which Pod is the job's comes only from its AdminComment (``identity.identity_of``: Slurm's super users write
    it, the job's user cannot) and the apiserver's UIDs: a single Pod's identity names its UID, a gang's the
    namespace and a tag of each member's UID (a member made later, for the next gang, is not this job's).
    Nothing the Pod's author writes (labels, annotations) decides it. A gang's first such member (by name)
    is named: the Syncer lifts the drain on each node only once no Pod sunk placed there outlives its job.
    """
    identity = identity_of(job)
    if identity is None:
        return None
    found = []
    for pod in pods_on_node:
        meta = pod.get("metadata") or {}
        uid, namespace = str(meta.get("uid") or ""), str(meta.get("namespace") or "")
        if not uid or namespace != identity.namespace or is_terminal(pod):
            continue
        if identity.includes(uid):
            found.append(pod)
    if not found:
        return None
    pod = min(found, key=_key)
    meta = pod["metadata"]
    return Outlived(PlaceholderDrain(meta["namespace"], meta["name"], job.id, str(meta["uid"])), pod)


def may_drain_over(node: Node, drain: PlaceholderDrain) -> bool:
    """Whether the Syncer writes a placeholder's drain over what the node has (Slurm keeps one reason):

    - a reason sunk did not write on a node out of service (``held_by_another``): no, never replaced;
    - drained already with this very reason (the scheduler's /drain hook was first, or a retried call): no;
    - drained already for this Pod as stuck on a lost Node (``sunk-stuck``: lifted only once that Node is
      Ready too), or for this job's gang (lifted once no member is left on the node): no, those say as much;
    - anything else (in service, the Syncer's condition drains, another of sunk's): yes. A placeholder
      drain is lifted only once no Pod sunk placed on the node outlives its job, whichever Pod it names.
    """
    if held_by_another(node):
        return False
    if "DRAIN" not in node.state:
        return True
    if node.reason == drain.reason():
        return False
    current = parse(node.reason)
    if isinstance(current, StuckPodDrain):
        return current.pod != drain.pod
    if isinstance(current, GangPlaceholderDrain):
        return (current.namespace, current.job_id) != (drain.namespace, drain.job_id)
    return True


def parse(reason: str) -> Optional[SunkDrain]:
    """The sunk drain this reason states, or None for any other reason (a person's, NHC's, the Syncer's)."""
    if not reason.startswith(_P):
        return None
    if m := _PLACEHOLDER.fullmatch(reason):
        return PlaceholderDrain(m["ns"], m["name"], int(m["job"]), m["uid"] or "")
    if m := _GANG_PLACEHOLDER.fullmatch(reason):
        return GangPlaceholderDrain(m["ns"], m["key"], int(m["job"]))
    if m := _STUCK.fullmatch(reason):
        return StuckPodDrain(m["ns"], m["name"], m["uid"], m["node"], int(m["job"]))
    if m := _DEVICE_MISMATCH.fullmatch(reason):
        return DeviceMismatchDrain(m["node"], m["detail"])
    if m := _UNREACHABLE.fullmatch(reason):
        return HookUnreachableDrain(int(m["job"]), m["detail"] or "")
    if m := _TIMEOUT.fullmatch(reason):
        if m["bound_by"] and epoch(m["bound_by"]) is None:  # (the form of a time, but none: 2026-13-45...)
            return None
        pods = tuple(m["pods"].split(" ")) if m["pods"] else ()
        return LockTimeoutDrain(int(m["job"]), int(m["seconds"]), m["node"] or m["bound_node"] or "", pods,
                                m["state"] or "", bool(m["strict"]), int(m["count"] or 0), m["bound_by"] or "",
                                m["effect"] or "")
    return None


def lock_timeout_reason(job_id: int, seconds: float, k8s_node: str, pods: Sequence[Obj], state: str,
                        strict: bool, effect: str) -> Optional[str]:
    """The lock service's drain reason for a timed-out pre-hook: ``pods``, the Pods that blocked a
    lock whose taint has ``effect``, by name; by their number and latest binding when the names do
    not fit. None when it cannot be stated in the grammar (a Pod with no known binding time, a node
    name too long or outside it): the prolog then drains with a reason the Syncer never lifts, since
    a cause it cannot name it cannot see go.

    The binding time is the PodScheduled condition's (the apiserver's clock when a scheduler bound
    the Pod; the kubelet's for a Pod made with its node already set), else the creation time.
    """
    waited = max(0, round(seconds))
    if not pods:
        return _stated(LockTimeoutDrain(job_id, waited, state=state, strict=strict))
    named = _stated(LockTimeoutDrain(job_id, waited, k8s_node, tuple(_key(p) for p in pods), strict=strict))
    if named is not None:
        return named
    bound = [bound_time(p) for p in pods]
    if any(t is None for t in bound):
        return None
    by = rfc3339(math.ceil(max(t for t in bound if t is not None)))
    return _stated(LockTimeoutDrain(job_id, waited, k8s_node, strict=strict, count=len(pods), bound_by=by,
                                    effect=effect))


def _stated(drain: LockTimeoutDrain) -> Optional[str]:
    """The drain's reason, if it fits and reads back as itself."""
    reason = drain.reason()
    return reason if len(reason) <= MAX_REASON and parse(reason) == drain else None


def _key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


# ---- when the cause is gone ------------------------------------------------------------------------


class CauseFacts(Protocol):
    """What the Syncer knows that a sunk drain's cause depends on (its KubeFacts)."""

    @property
    def pod(self) -> Optional[Obj]:
        """The slurmd Pod of the Slurm node."""
        ...

    @property
    def k8s_node(self) -> Optional[Obj]:
        """The Kubernetes Node that slurmd Pod runs on."""
        ...

    def pod_node(self, key: str) -> Optional[str]:
        """Where the Pod ``namespace/name`` is bound ("" not bound); None when no such Pod exists."""
        ...

    def jobs_holding(self) -> Optional[Sequence[Job]]:
        """The jobs holding this Slurm node in Slurm's job list; None when that list is stale."""
        ...

    def pods_on_node(self) -> Sequence[Obj]:
        """The Pods bound to that Kubernetes Node (none when it is unknown)."""
        ...

    def pod_uid(self, key: str) -> Optional[str]:
        """The UID of the Pod ``namespace/name`` (any namespace); None when no such Pod exists."""
        ...

    def node_named(self, name: str) -> Optional[Obj]:
        """The Kubernetes Node of that name; None when there is none."""
        ...

    @property
    def scheduler_names(self) -> Collection[str]:
        """The ``spec.schedulerName`` of sunk's schedulers: only their Pods can be ones sunk placed."""
        ...

    def devices_on(self, k8s_node: str) -> Optional[DeviceFacts]:
        """The DRA driver's devices on that Node and the claims holding them; None when not watched (no
        ``--dra-device-mapping``) or not synced."""
        ...


@frozen
class DeviceFacts:
    """A Node's devices as ``--dra-device-mapping``'s driver publishes them, and which of them claims hold
    that no Pod of sunk's schedulers is the consumer of (``dra.held_devices``, less sunk's own)."""

    mapping: dra.DeviceMapping
    devices: tuple[dra.SliceDevice, ...]
    held_elsewhere: Mapping[dra.DeviceKey, str]


@frozen
class Cause:
    """``present``: True while the cause holds, False once it is gone, None when the facts cannot tell
    (then the drain stays: missing information is never read as "gone")."""

    present: Optional[bool]
    why: str


def cause(drain: SunkDrain, facts: CauseFacts, node: Node) -> Cause:
    if isinstance(drain, StuckPodDrain):  # Slurm's jobs play no part: the job was let go
        return _stuck(drain, facts)
    if isinstance(drain, DeviceMismatchDrain):
        return _device_mismatch(drain, facts, node)
    jobs = facts.jobs_holding()
    if jobs is None:
        return Cause(None, "Slurm's job list is stale")
    if isinstance(drain, PlaceholderDrain):
        return _placeholder(drain, facts, node, jobs)
    if isinstance(drain, GangPlaceholderDrain):
        return _gang_placeholder(drain, facts, node, jobs)
    refused = next((j for j in jobs if j.id == drain.job_id), None)
    if refused is not None:
        return Cause(True, f"job {drain.job_id}, refused by the prolog, holds {node.name}")
    if isinstance(drain, LockTimeoutDrain):
        blocking = _lock_blockers(drain, facts)
        if blocking is not None:
            return blocking
    return _lock(facts, node, jobs)


def _device_mismatch(drain: DeviceMismatchDrain, facts: CauseFacts, node: Node) -> Cause:
    seen = facts.devices_on(drain.k8s_node)
    if seen is None:
        return Cause(None, "the DRA driver's devices are not watched here (--dra-device-mapping) or not synced")
    found = dra.node_disagreement(node.gpus_total, seen.devices, seen.mapping, seen.held_elsewhere)
    if found is not None:
        return Cause(True, f"Slurm's GRES and the DRA driver still disagree on Node {drain.k8s_node}: {found}")
    return Cause(False, f"Slurm's {node.gpus_total} GPUs and the DRA driver's devices agree on Node {drain.k8s_node}")


def _lock_blockers(drain: LockTimeoutDrain, facts: CauseFacts) -> Optional[Cause]:
    """Present while a Pod that kept the lock from being reached is still on the Node; None once none is."""
    for key in drain.pods:
        if facts.pod_node(key) == drain.k8s_node:
            return Cause(True, f"Pod {key} is still on Node {drain.k8s_node}")
    if not drain.bound_by:
        return None
    here = _node_name(facts.pod)
    if here is None:
        return Cause(None, "no slurmd Pod on a Node: which Pods are on this node cannot be told")
    if here != drain.k8s_node:  # the Slurm node runs on another machine now: those Pods hold nothing of it
        return None
    by = epoch(drain.bound_by)
    own = _key(facts.pod or {})
    for pod in facts.pods_on_node():
        if _key(pod) == own or not pods_to_evict([dict(pod)], strict=drain.strict, effect=drain.effect,
                                                 vouched=Vouched.everything(frozenset(facts.scheduler_names))):
            continue
        bound = bound_time(pod)
        if bound is None or by is None or bound <= by:  # (not knowing when: taken as one of them)
            return Cause(True, f"Pod {_key(pod)}, bound to Node {here} by {drain.bound_by}, would still block "
                               f"a {'strict ' if drain.strict else ''}lock")
    return None


def _placeholder(drain: PlaceholderDrain, facts: CauseFacts, node: Node, jobs: Sequence[Job]) -> Cause:
    """Present while the Pod runs on the node (bound there, not finished) or a job of it holds the node; and
    while another Pod sunk placed on this Slurm node outlives its job there. Slurm keeps one reason per node:
    when several placeholders drain it at once, the reason names only the last of their Pods.

    "The Pod" is the one with the drain's UID: a Pod its author deletes and makes again under the name is
    another, which holds nothing (else a tenant could keep sunk's drain of a node for as long as they like).
    A reason without a UID (an earlier version's) is judged by the name, as that version did."""
    for job in jobs:
        identity = identity_of(job)
        if job.id == drain.job_id or (identity is not None and _same_pod(drain, identity)):
            return Cause(True, f"job {job.id} of Pod {drain.pod} holds {node.name}")
    here = _node_name(facts.pod)
    if here is None:
        return Cause(None, "no slurmd Pod on a Node: which Pods are on this node cannot be told")
    where = facts.pod_node(drain.pod)
    uid = facts.pod_uid(drain.pod) if where is not None else None
    if where is not None and drain.uid and uid != drain.uid:
        where = None  # (another Pod under the name: the drained one is gone)
    finished = where == here and any(_key(p) == drain.pod and is_terminal(p) for p in facts.pods_on_node())
    if where == here and not finished:  # (a finished Pod runs nothing: the scheduler keeps it for its owner)
        return Cause(True, f"Pod {drain.pod}{_uid_note(drain)} is still on Node {here}")
    outliving = _outliving(facts, node, jobs)
    if outliving is not None:
        return outliving
    if finished:
        return Cause(False, f"Pod {drain.pod} finished on Node {here} and no job of it holds {node.name}")
    if where is None:
        remade = f" (the Pod of that name now has uid {uid})" if uid and drain.uid and uid != drain.uid else ""
        return Cause(False, f"Pod {drain.pod}{_uid_note(drain)} is gone{remade} and no job of it holds {node.name}")
    if not where:
        return Cause(False, f"Pod {drain.pod} is on no Node and no job of it holds {node.name}")
    return Cause(False, f"Pod {drain.pod} is on Node {where} now, not {here}")


def _same_pod(drain: PlaceholderDrain, identity: PlaceholderIdentity) -> bool:
    """Whether a job's identity names the drain's Pod: by UID, or by name for a reason without one."""
    if drain.uid:
        return identity.unit == PodKey(drain.uid)
    return isinstance(identity.unit, PodKey) and (identity.namespace, identity.name) == (drain.namespace, drain.name)


def _uid_note(drain: PlaceholderDrain) -> str:
    return f" (uid {drain.uid})" if drain.uid else ""


def _gang_placeholder(drain: GangPlaceholderDrain, facts: CauseFacts, node: Node, jobs: Sequence[Job]) -> Cause:
    """Present while job N, or another job of the gang, holds the node; while an unfinished member of the
    gang (its Pods' own labels say which: gang.gang_of) that sunk placed on this node (``placed_job``) is
    on this node's Node; and while another Pod
    sunk placed on this Slurm node outlives its job there. Each node of the job is judged on its own:
    those the members left are lifted while the one a member would not leave stays drained."""
    for job in jobs:
        identity = identity_of(job)
        if job.id == drain.job_id or (identity is not None and identity.unit == GangKey(drain.namespace, drain.key)):
            return Cause(True, f"job {job.id} of gang {drain.namespace}/{drain.key} holds {node.name}")
    here = _node_name(facts.pod)
    if here is None:
        return Cause(None, "no slurmd Pod on a Node: which Pods are on this node cannot be told")
    for pod in facts.pods_on_node():
        gang = gang_of(pod)
        # (its labels name the gang, which its author writes; that sunk placed it here, only sunk does)
        if gang is not None and gang.owner == drain.owner and placed_job(pod, node.name,
                                                                         facts.scheduler_names) is not None:
            meta = pod.get("metadata") or {}
            return Cause(True, f"Pod {meta.get('namespace')}/{meta.get('name')} of gang {drain.namespace}/"
                               f"{drain.key} is still on Node {here}")
    outliving = _outliving(facts, node, jobs)
    if outliving is not None:
        return outliving
    return Cause(False, f"no member of gang {drain.namespace}/{drain.key} is left on Node {here} and no job of it "
                        f"holds {node.name}")


def _outliving(facts: CauseFacts, node: Node, jobs: Sequence[Job]) -> Optional[Cause]:
    """A Pod sunk placed on this Slurm node (``placed_job``) that is still on the node's Node while its job
    holds the node no more; None when there is none."""
    held = {job.id for job in jobs}
    schedulers = facts.scheduler_names
    for pod in facts.pods_on_node():
        job_id = placed_job(pod, node.name, schedulers)
        if job_id is not None and job_id not in held:
            meta = pod.get("metadata") or {}
            return Cause(True, f"Pod {meta.get('namespace')}/{meta.get('name')} outlives its job {job_id} on "
                               f"{node.name}")
    return None


def placed_job(pod: Obj, slurm_node: str, scheduler_names: Collection[str]) -> Optional[int]:
    """The job sunk placed this Pod on ``slurm_node`` for, if it did and the Pod still runs; else None.

    Evidence a tenant cannot forge: the slurm-node and job-id annotations, which sunk's scheduler and
    extender write when they place a Pod, on a Pod whose ``spec.schedulerName`` is one of theirs
    (``scheduler_names``). The chart's ValidatingAdmissionPolicy (``annotationPolicy.admission``) refuses
    those annotations on such a Pod from anyone but sunk's ServiceAccounts and cluster admins, and a
    Pod's schedulerName never changes after its creation; a Pod of another scheduler (made with its
    ``spec.nodeName`` set, say) may carry what it likes and counts for nothing. A Pod whose containers
    are done (Succeeded or Failed: a gang's finished member, kept by its Job) runs nothing there.
    """
    if str((pod.get("spec") or {}).get("schedulerName") or "") not in scheduler_names or is_terminal(pod):
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotations.get(names.ANN_SLURM_NODE) != slurm_node:
        return None
    job_id = str(annotations.get(names.ANN_JOB_ID) or "").strip()
    if not (job_id.isascii() and job_id.isdigit() and len(job_id) < 20):
        return None
    return int(job_id)


def _stuck(drain: StuckPodDrain, facts: CauseFacts) -> Cause:
    """Present while a Pod with the drain's UID exists (a Pod made again under the name is another
    one) or the Node it names is not Ready: until its kubelet is back, containers may still run
    on a machine Kubernetes cannot see."""
    if facts.pod_uid(drain.pod) == drain.uid:
        return Cause(True, f"Pod {drain.pod} (uid {drain.uid}) still exists")
    if not node_ready(facts.node_named(drain.k8s_node)):
        return Cause(True, f"Node {drain.k8s_node} is NotReady or gone")
    return Cause(False, f"Pod {drain.pod} (uid {drain.uid}) is gone and Node {drain.k8s_node} is Ready")


def _lock(facts: CauseFacts, node: Node, jobs: Sequence[Job]) -> Cause:
    """Whether the lock (annotation and taint) says what Slurm's jobs on the node call for.

    That is the hook API's state caught up with Slurm: the Syncer that serves it is back and
    its lock controller has reconciled this node since the prolog gave up.
    """
    if facts.pod is None or facts.k8s_node is None:
        return Cause(None, "no slurmd Pod on a known Node: the lock cannot be read")
    annotations = (facts.pod.get("metadata") or {}).get("annotations") or {}
    state = parse_state(annotations.get(names.LOCK_KEY))
    # (this slurmd Pod's lock: the taint another release's slurmd Pod on the same Node holds is not; one that
    # names no holder is an older sunk's, taken as this node's as it always was)
    holders = lock_holders(facts.k8s_node)
    tainted = has_taint(facts.k8s_node, names.LOCK_KEY) and (not holders or holder_of(facts.pod) in holders)
    busy = bool(jobs) or node.running_jobs
    if busy:
        strict = any(is_placeholder(j) for j in jobs)
        consistent = tainted and satisfies(state, strict=strict)
    else:
        consistent = state is LockState.FALSE and not tainted
    taint = "tainted" if tainted else "untainted"
    what = f"lock {state.value}, Node {taint}, {len(jobs)} job(s) holding {node.name}"
    if not consistent:
        return Cause(True, f"the lock is not consistent with Slurm yet ({what})")
    return Cause(False, f"the hook API's lock is consistent with Slurm again ({what})")


def _node_name(pod: Optional[Obj]) -> Optional[str]:
    name = ((pod or {}).get("spec") or {}).get("nodeName")
    return str(name) if name else None
