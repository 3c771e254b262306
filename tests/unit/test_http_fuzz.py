"""Fuzzing the HTTP surfaces: every bad input gets a 4xx with a JSON body, never a 5xx or an HTML page.

Three apps, each through flask's test client (or straight through WSGI where the client
cannot say it, e.g. a body without Content-Length):

- the extender's verbs (extender/app.py), over a fake scheduler that only answers a
  placement, and over a real ``PodScheduler`` on fakes, whose placement reads the request's
  Pod (``validate_pod`` and all) when the informer has not seen the Pod yet;
- the scheduler's hook app (scheduler/hooks.py), called by placeholder jobs;
- the Syncer's hook app (sunk/hooks/), called by prologs and epilogs;

and the probe and metrics server of every daemon (sunk/controller/health.py, stdlib), over a
real socket: any method, path and header, and request lines its parser refuses.

The contract: every answer is below 500 (except a deliberate 503: Slurm or the service not
ready), its body is strict JSON (no NaN), and a body over the app's limit gets 413. Every
answer of 400 or more leaves exactly one log line naming its status (``logged_once``: a
warning for the extender, info or warning for the hook apps), with the caller's text escaped
and never its bearer token; a 500 leaves the traceback too. The probe server answers in plain
text (Prometheus text for /metrics), and its only 5xx is a failing check's 500.

Headers are generated two ways: text a WSGI server could hand over (latin-1, as gunicorn
decodes the bytes it receives) and any text the test client accepts (no newlines), since
a server in front may differ.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import logging
import math
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional
from unittest import mock

import pytest
from flask import Flask
from hypothesis import HealthCheck, example, given, reject, settings
from hypothesis import strategies as st
from policy_fakes import TEST_POLICY
from scheduler_hook_fakes import IndexedJobs, LookedUpPods
from werkzeug.test import EnvironBuilder, run_wsgi_app

from extender import app as extender_app
from scheduler import kubeops
from scheduler.binder import Binder, Binding
from scheduler.config import SchedulerConfig
from scheduler.decide import Bind, CancelJobs, DeleteMembers, Invalid, Nothing, Submit, Unschedulable, Waiting
from scheduler.hooks import MAX_WAIT, POD_UID_HEADER, HookPorts, PlaceholderHooks, create_hooks_app
from scheduler.jobindex import JobIndex
from scheduler.reconciler import PodIndex, PodScheduler, SlurmdNodes
from scheduler.tokens import hook_token
from sunk.controller.health import HttpEndpoints
from sunk.controller.httpfront import Limits
from sunk.hooks.api import hooks_blueprint as syncer_hooks_blueprint
from sunk.hooks.app import create_app as create_syncer_app
from sunk.hooks.auth import TokenFile, node_token
from sunk.hooks.protocol import PostHook, PreHook, Reboot
from sunk.model import names
from sunk.model.slurm import Job, Node, NodeUpdate
from sunk.slurm.errors import NotFound
from sunk.translate import podjob
from sunk.translate.gang import has_started

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.data_too_large])
BIG = 20 * 1024 * 1024  # over any limit these apps should have
VERBS = ("/filter", "/prioritize", "/bind", "/preempt")
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")


# ---- strategies ---------------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=16)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=16,
)
# What a Go encoder can write: no NaN or Infinity (json.dumps writes them, strict JSON refuses them).
finite_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=16),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=16,
)


def obj(required: Optional[dict[str, Any]] = None, **optional: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A JSON object with the given fields, each (unless required) present or not."""
    return st.fixed_dictionaries(required or {}, optional=optional)


def _places(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value, as the keys and indexes that lead there."""
    yield at
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _places(item, (*at, key))


@st.composite
def broken(draw: st.DrawFn, valid: st.SearchStrategy[Any], most: int = 2, least: int = 0) -> Any:
    """A valid value with up to ``most`` places replaced by any JSON value, or removed.

    The depth is drawn first, then a place at that depth: the few fields near the top
    (a Pod's metadata and spec) would otherwise hardly ever be hit among the many below.
    """
    value = copy.deepcopy(draw(valid))
    for _ in range(draw(st.integers(least, most))):
        places = list(_places(value))
        depth = draw(st.sampled_from(sorted({len(at) for at in places})))
        at = draw(st.sampled_from([at for at in places if len(at) == depth]))
        if not at:
            value = draw(json_values)
            continue
        parent = functools.reduce(lambda v, k: v[k], at[:-1], value)
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[at[-1]]
        else:
            parent[at[-1]] = draw(json_values)
    return value


latin1_text = st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=24)
header_text = latin1_text | st.text(st.characters(exclude_characters="\r\n", exclude_categories=("Cs",)),
                                    max_size=24)
word = st.text(min_size=1, max_size=12)
identifier = st.sampled_from(["p", "ns", "u-1", "u-2", "worker-1", "worker-2"]) | word
node_name = st.sampled_from(["worker-1", "worker-2"]) | word

# Valid shapes with any content (bad quantities, bad annotations: the Pod's validation reports those).
quantity = st.sampled_from(["1", "500m", "1Gi", "2", "0", "-1", "1e400", "1E", "1.5", "abc", ""]) | st.text(
    max_size=8) | st.integers(0, 2**70)
resource_list = st.dictionaries(st.sampled_from(["cpu", "memory", podjob.GPU_RESOURCE]) | word, quantity, max_size=3)
resources = obj(limits=resource_list, requests=resource_list)
container = obj(name=word, resources=resources, restartPolicy=st.sampled_from(["Always", "Never"]))
expression = obj(key=st.sampled_from(podjob.GPU_AFFINITY_KEYS) | word, operator=st.sampled_from(["In", "NotIn"]),
                 values=st.lists(st.sampled_from(["H100", "B200", "a b", "x|y"]) | word, max_size=3))
affinity = obj(nodeAffinity=obj(requiredDuringSchedulingIgnoredDuringExecution=obj(
    nodeSelectorTerms=st.lists(obj(matchExpressions=st.lists(expression, max_size=3)), max_size=2))))
ANNOTATIONS = (*podjob.TABLE_ANNOTATIONS, names.ANN_JOB_ID, names.ANN_SLURM_NODE)
sane_annotation = st.sampled_from(["7", "none", "ok", "node[1-3],node5", "/tmp", "-1", "(a|b)", "a&b", ""]) | st.text(
    max_size=12)
# ... and what the placement's own parsing cannot take: digits that int() refuses (not ASCII, too many)
odd_annotation = sane_annotation | st.sampled_from(["²", "٣", "7" * 5000, "-" + "7" * 5000])


def pod_strategy(annotation_value: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    uid = st.sampled_from(["u-2", "u-2", "u-1"])  # mostly one the informer lacks: the request's Pod is read
    return obj({
        "metadata": obj({"name": identifier, "namespace": identifier, "uid": uid},
                        annotations=st.dictionaries(st.sampled_from(ANNOTATIONS) | word, annotation_value,
                                                    max_size=3),
                        deletionTimestamp=st.just("2026-01-01T00:00:00Z"),
                        creationTimestamp=st.just("2026-01-01T00:00:00Z")),
        "spec": obj(nodeName=st.sampled_from(["worker-1"]) | word, containers=st.lists(container, max_size=2),
                    initContainers=st.lists(container, max_size=1), resources=resources, overhead=resource_list,
                    terminationGracePeriodSeconds=st.integers(-5, 10**6), affinity=affinity),
    })


Part = Callable[[str, st.SearchStrategy[Any]], st.SearchStrategy[Any]]
PARTS = ("whole", "Pod", "Pod", "Pod", "NodeNames", "Nodes", "node", "victims")  # the Pod is most of a request


def args_by_verb(annotation_value: st.SearchStrategy[str], part: Part) -> dict[str, st.SearchStrategy[Any]]:
    """ExtenderArgs, ExtenderBindingArgs, ExtenderPreemptionArgs, by verb, as kube-scheduler sends them,
    each named part passed through ``part`` (which may break it)."""
    pod = part("Pod", pod_strategy(annotation_value))
    node = part("node", obj({"metadata": obj({"name": node_name})}, status=finite_json_values))
    args = part("whole", obj({"Pod": pod, "NodeNames": part("NodeNames", st.lists(node_name, max_size=5))},
                             Nodes=st.none())
                | obj({"Pod": pod, "Nodes": part("Nodes", obj({"items": st.lists(node, max_size=4)},
                                                              kind=st.just("NodeList")))}, NodeNames=st.none()))
    return {
        "/filter": args,
        "/prioritize": args,
        "/bind": part("whole", obj({key: identifier for key in ("PodName", "PodNamespace", "PodUID", "Node")})),
        "/preempt": part("whole", obj({"Pod": pod}, NodeNameToVictims=st.none(), NodeNameToMetaVictims=part(
            "victims", st.dictionaries(node_name, obj(numPDBViolations=st.integers(0, 3)))))),
    }


@st.composite
def one_part_broken(draw: st.DrawFn, verb: str) -> Any:
    """A request with one part (the Pod, the Node names, a Node, ... or the whole) broken in one or two places."""
    target = draw(st.sampled_from(PARTS))
    strategies = args_by_verb(odd_annotation, lambda name, s: broken(s, 2, least=1) if name == target else s)
    return draw(strategies[verb])


sane = args_by_verb(sane_annotation, lambda _name, s: s)
plausible = {verb: one_part_broken(verb) for verb in VERBS}
content_types = st.sampled_from([
    "application/json", "application/json; charset=utf-8", "application/json; charset=utf-16", "text/plain",
    "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/merge-patch+json", None,
]) | latin1_text
actions = st.one_of(
    st.builds(Waiting, st.integers(1, 10**6), st.text(max_size=12), st.booleans()),
    st.just(Submit(("uid",))),
    st.builds(Bind, st.integers(1, 10**6), st.sampled_from(["node1"]), st.sampled_from(["worker-1", "worker-2"])),
    st.builds(Invalid, st.lists(st.text(max_size=12).map(lambda m: ("uid", m)), min_size=1, max_size=3).map(tuple)),
    st.builds(DeleteMembers, st.just(("uid",)), st.text(max_size=8), st.text(max_size=12)),
    st.builds(CancelJobs, st.lists(st.integers(1, 99), min_size=1, max_size=2).map(tuple), st.text(max_size=12)),
    st.builds(Nothing, st.text(max_size=12)),
    st.builds(Unschedulable, st.just(("uid",)), st.text(max_size=12)),
)


@st.composite
def encoded(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> bytes:
    value = draw(values)
    return json.dumps(value, ensure_ascii=draw(st.booleans())).encode("utf-8")


# ---- sending and checking -----------------------------------------------------------------------


def strict_json(data: bytes) -> Any:
    """The body as JSON, refusing NaN and Infinity (kube-scheduler's Go decoder does)."""

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(data.decode("utf-8"), parse_constant=constant)


def send(app: Flask, method: str, path: str, *, data: bytes = b"", content_type: Optional[str] = None,
         headers: Optional[dict[str, str]] = None, query: Optional[dict[str, str]] = None):
    """One request; an input the test client itself cannot encode is not a test case."""
    try:
        builder = EnvironBuilder(path=path, method=method, data=data, content_type=content_type,
                                 headers=headers or {}, query_string=query)
        environ = builder.get_environ()
    except (ValueError, TypeError, UnicodeError):
        reject()
    return app.test_client().open(environ)


def check(response: Any, *, allow: frozenset[int] = frozenset(), what: str = "") -> Any:
    """Below 500 (or an allowed status), a JSON content type and a strict JSON body; the body."""
    text = response.get_data()[:300]
    assert response.status_code < 500 or response.status_code in allow, (
        f"{what}: answered {response.status_code}: {text!r}")
    assert response.mimetype == "application/json", f"{what}: {response.status_code} as {response.mimetype}: {text!r}"
    try:
        return strict_json(response.get_data())
    except ValueError as exc:
        raise AssertionError(f"{what}: {response.status_code} with a body that is not JSON ({exc}): {text!r}") from None


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def logged(name: str) -> Iterator[Records]:
    records = Records()
    logger = logging.getLogger(name)
    level = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)  # (info lines too, whatever the root logger's level)
    try:
        yield records
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)


HOOK_LOG = "sunk.hooks.app"  # both hook apps' one line per refusal (log_refusal)
HOOK_LEVELS = frozenset({logging.INFO, logging.WARNING})


def logged_once(log: Records, response: Any, levels: frozenset[int], headers: Optional[dict[str, str]] = None,
                what: str = "", path: str = "") -> None:
    """The log half of the contract: an answer of 400 or more leaves exactly one line at ``levels`` that
    names its status; no line carries a line break (the caller's text is escaped: no forged lines) or
    the bearer token the caller sent (unless the caller also put it in the path, which is logged)."""
    messages = [r.getMessage() for r in log.records]
    status = response.status_code
    if status >= 400:
        lines = [m for r, m in zip(log.records, messages, strict=True) if r.levelno in levels and f": {status} " in m]
        assert len(lines) == 1, f"{what}: {len(lines)} log lines for {status}: {messages}"
    for message in messages:
        assert "\n" not in message and "\r" not in message, f"{what}: a raw line break in {message!r}"
    token = bearer_of(headers or {})
    if token and len(token) >= 8 and token not in path:
        assert not any(token in m for m in messages), f"{what}: the bearer token was logged: {messages}"


def bearer_of(headers: dict[str, str]) -> Optional[str]:
    value = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
    return value.split(None, 1)[-1].strip() if value and value.strip() else None


def check_hooks(app: Flask, method: str, path: str, *, allow: frozenset[int] = frozenset(), what: str = "",
                headers: Optional[dict[str, str]] = None, **request: Any) -> Any:
    """One call of a hook app: the contract, and its one log line for a refusal."""
    with logged(HOOK_LOG) as log:
        response = send(app, method, path, headers=headers, **request)
    body = check(response, allow=allow, what=what or f"{method} {path}")
    if response.status_code >= 400:
        assert isinstance(body, dict) and body.get("error"), body
    logged_once(log, response, HOOK_LEVELS, headers, what or f"{method} {path}", path)
    return body


# ---- the extender -------------------------------------------------------------------------------

VALID_POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
             "spec": {"terminationGracePeriodSeconds": 5,
                      "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


class FakePods:
    def __init__(self, *pods: dict[str, Any]):
        self.pods = {p["metadata"]["uid"]: p for p in pods}

    def by_uid(self, uid: str) -> Optional[dict[str, Any]]:
        return self.pods.get(uid)


class FakeScheduler:
    """What the extender reads of a PodScheduler: placement(), pods.by_uid(), bind_placed()."""

    def __init__(self, action: object):
        self.action = action
        self.pods = FakePods(VALID_POD)
        self.binder = stateless_binder()

    def bind_placed(self, pod, bind):  # (PodScheduler's, without claims)
        return Binding.BOUND if self.binder.bind(pod, bind) else Binding.ALREADY

    def placement(self, pod: Any, uid: str) -> object:
        return self.action


class Informer:
    """An informer's read side, over a fixed list."""

    def __init__(self, objects: list[dict[str, Any]]):
        self.objects = objects
        self.indexers: dict[str, Any] = {}

    def add_indexer(self, name: str, fn: Any) -> None:
        self.indexers[name] = fn

    def by_index(self, name: str, value: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if value in self.indexers[name](o)]

    def list(self) -> list[dict[str, Any]]:
        return list(self.objects)


def parse_identity(job: Job) -> Optional[tuple[str, bool]]:
    """The scheduler's parser, reduced: the Pod's UID is the job's AdminComment, started is Slurm's state."""
    uid = job.admin_comment
    return (uid, has_started(job)) if uid.startswith("u-") else None


def stateless_binder() -> Binder:
    """The extender's Binder (no lock toleration: kube-scheduler's taint filter ran), whose
    assumptions expire at once: every example sees u-1 allocated, none sees it bound by an earlier one."""
    return Binder(None, must_tolerate_lock=lambda node: False, observe_latency=lambda seconds: None, assumed_ttl=0.0)


def real_scheduler() -> PodScheduler:
    """The reconciler itself on fakes: u-1 is known and allocated (worker-1), u-2 is in neither cache."""
    jobs = JobIndex(parse_identity)
    jobs.upsert(Job(id=7, state="RUNNING", nodes="node1", admin_comment="u-1"))
    slurmd = [{"metadata": {"name": "node1"}, "spec": {"nodeName": "worker-1"}}]
    return PodScheduler(api=None, slurm=None, config=SchedulerConfig("s", b"x" * 16, "http://h",
                                                                     identity_policy=TEST_POLICY), jobs=jobs,
                        pods=PodIndex(Informer([VALID_POD])), slurmd=SlurmdNodes(Informer(slurmd)), recorder=None,
                        binder=stateless_binder())


def extender(scheduler: Any) -> Flask:
    return extender_app.create_app(scheduler, lambda uid: None)


# One app per kind for all examples (placement keeps no state between calls, a binding is forgotten at once;
# the fake's action is set per example).
_FAKE = FakeScheduler(Submit(("uid",)))


@functools.cache
def _fake_extender() -> Flask:
    return extender(_FAKE)


def fake_extender(action: object) -> Flask:
    _FAKE.action = action
    return _fake_extender()


@functools.cache
def real_extender() -> Flask:
    return extender(real_scheduler())


def check_extender(app: Flask, method: str, path: str, **request: Any) -> Any:
    """One extender call: the contract, and a warning for each 4xx."""
    # (/bind reaches kubeops.bind when the Node matches: there is no API server here)
    with logged("extender.app") as log, mock.patch.object(kubeops, "bind", lambda *args, **kwargs: None):
        response = send(app, method, path, **request)
    body = check(response, what=f"{method} {path}")
    if 400 <= response.status_code < 500:
        assert isinstance(body, dict) and body.get("Error"), body
    logged_once(log, response, frozenset({logging.WARNING, logging.ERROR}), request.get("headers"),
                f"{method} {path}", path)
    return body


@FUZZ
@given(verb=st.sampled_from(VERBS), body=encoded(json_values), action=actions)
def test_extender_any_json_value_is_answered_in_json(verb, body, action):
    check_extender(fake_extender(action), "POST", verb, data=body, content_type="application/json")


def requests_to(by_verb: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[tuple[str, bytes]]:
    return st.sampled_from(VERBS).flatmap(lambda verb: st.tuples(st.just(verb), encoded(by_verb[verb])))


_META = {"name": "p", "namespace": "ns", "uid": "u-2"}
_SPEC = VALID_POD["spec"]
# Each of these was answered 500 (an HTML page) before the protocol checked what it reads.
KNOWN_500S = [
    ("/filter", {"Pod": {"metadata": _META}, "NodeNames": ["worker-1"]}),  # KeyError: 'spec'
    ("/filter", {"Pod": {"metadata": _META, "spec": {}}, "Nodes": {"items": [{"metadata": None}]}}),
    ("/filter", {"Pod": {"metadata": _META, "spec": {}}, "Nodes": {"items": [{"metadata": "x"}]}}),
    ("/prioritize", {"Pod": {"metadata": {**_META, "annotations": {names.ANN_EXCLUSIVE: 1}}, "spec": _SPEC},
                     "NodeNames": ["worker-1"]}),
    ("/filter", {"Pod": {"metadata": _META, "spec": {"containers": [1]}}, "NodeNames": ["worker-1"]}),
    ("/filter", {"Pod": {"metadata": _META, "spec": {"containers": "ab"}}, "NodeNames": ["worker-1"]}),
    ("/filter", {"Pod": {"metadata": _META, "spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "a"}}}}}, "NodeNames": ["worker-1"]}),
    ("/filter", {"Pod": {"metadata": {**_META, "annotations": {names.ANN_JOB_ID: "²"}}, "spec": _SPEC},
                 "NodeNames": ["worker-1"]}),  # int('²') after '²'.isdigit()
    ("/filter", {"Pod": {"metadata": {**_META, "annotations": {names.ANN_PRIORITY: "7" * 5000}}, "spec": _SPEC},
                 "NodeNames": ["worker-1"]}),  # int() refuses more than 4300 digits
]
KNOWN_BAD_BODIES = [
    ("/filter", b"[" * 100_000),  # RecursionError in the JSON parser
    ("/filter", json.dumps({"Pod": {"metadata": {**_META, "uid": "u-1"}, "spec": _SPEC}, "Nodes": {"items": [
        {"metadata": {"name": "worker-1"}, "status": {"x": math.nan}}]}}).encode()),  # echoed back as NaN
]


def with_known(test: Any) -> Any:
    for verb, value in KNOWN_500S:
        test = example(request=(verb, json.dumps(value).encode()))(test)
    for verb, raw in KNOWN_BAD_BODIES:
        test = example(request=(verb, raw))(test)
    return test


@FUZZ
@given(request=requests_to(plausible), action=actions)
def test_extender_wrong_protocol_shapes_are_answered_in_json(request, action):
    verb, body = request
    check_extender(fake_extender(action), "POST", verb, data=body, content_type="application/json")


@FUZZ
@with_known
@given(request=requests_to(plausible))
def test_extender_with_the_real_placement_reading_the_requests_pod(request):
    """The filter hands an unknown Pod from the request to placement (validate_pod and all)."""
    verb, body = request
    check_extender(real_extender(), "POST", verb, data=body, content_type="application/json")


@FUZZ
@given(request=requests_to(sane))
def test_extender_answers_what_kube_scheduler_sends(request):
    """The other side of strictness: a well-formed request, whatever its Pod says, is answered 200."""
    verb, body = request
    with mock.patch.object(kubeops, "bind", lambda *args, **kwargs: None):
        response = send(real_extender(), "POST", verb, data=body, content_type="application/json")
    assert response.status_code == 200, (body[:300], response.get_data()[:300])
    check(response)


@FUZZ
@example(path="/filter//", method="POST", body=b"", content_type="application/json")
@example(path="/healthz//x", method="GET", body=b"", content_type=None)
@given(path=st.sampled_from([*VERBS, "/healthz"]) | st.text(max_size=16).map(lambda s: "/" + s),
       method=st.sampled_from([*METHODS, "OPTIONS"]), body=st.binary(max_size=64) | encoded(plausible["/filter"]),
       content_type=content_types)
def test_extender_any_bytes_path_method_and_content_type_are_answered_in_json(path, method, body, content_type):
    check_extender(fake_extender(Submit(("uid",))), method, path, data=body, content_type=content_type)


@FUZZ
@given(verb=st.sampled_from(VERBS), headers=st.dictionaries(
    st.sampled_from(["Authorization", "Content-Type", "Accept", "X-Sunk-Pod-UID", "Transfer-Encoding",
                     "Content-Encoding", "Expect"]) | st.from_regex(r"\AX-[A-Za-z0-9-]{1,10}\Z"),
    header_text, max_size=4))
def test_extender_odd_headers_are_answered_in_json(verb, headers):
    body = json.dumps({"Pod": VALID_POD, "NodeNames": ["worker-1"]}).encode()
    headers.setdefault("Content-Type", "application/json")
    check_extender(real_extender(), "POST", verb, data=body, headers=headers)


@pytest.mark.parametrize("verb", VERBS)
def test_extender_oversize_body_is_413_in_json(verb):
    app = extender(FakeScheduler(Submit(("uid",))))
    body = check_extender(app, "POST", verb, data=b" " * (extender_app.MAX_BODY_BYTES + 1),
                          content_type="application/json")
    assert "larger than" in body["Error"]
    assert send(app, "POST", verb, data=b" " * (extender_app.MAX_BODY_BYTES + 1)).status_code == 413


def test_extender_oversize_body_without_content_length_is_413_in_json():
    """A chunked body (the server terminates the stream, no Content-Length) is cut at the limit too."""
    environ = EnvironBuilder(path="/filter", method="POST", content_type="application/json",
                             input_stream=io.BytesIO(b" " * (extender_app.MAX_BODY_BYTES + 1))).get_environ()
    del environ["CONTENT_LENGTH"]
    environ["wsgi.input_terminated"] = True
    app_iter, status, headers = run_wsgi_app(extender(FakeScheduler(Submit(("uid",)))), environ, buffered=True)
    assert status.startswith("413") and headers["Content-Type"] == "application/json"
    assert "larger than" in strict_json(b"".join(app_iter))["Error"]


def test_a_5000_node_filter_fits_the_limit():
    names_ = [f"{'n' * 240}-{i:05d}" for i in range(5000)]  # near the longest legal Node name
    body = json.dumps({"Pod": VALID_POD, "NodeNames": names_, "Nodes": None}).encode()
    assert len(body) < extender_app.MAX_BODY_BYTES / 4
    result = check_extender(extender(FakeScheduler(Submit(("uid",)))), "POST", "/filter", data=body,
                            content_type="application/json")
    assert len(result["FailedNodes"]) == 5000


def test_an_unexpected_error_in_a_verb_is_a_json_500_with_the_traceback_logged():
    class Broken(FakeScheduler):
        def placement(self, pod: Any, uid: str) -> object:
            raise KeyError("spec")

    with logged("extender.app") as log:
        response = send(extender(Broken(Submit(("uid",)))), "POST", "/filter",
                        data=json.dumps({"Pod": VALID_POD, "NodeNames": ["worker-1"]}).encode(),
                        content_type="application/json")
    assert response.status_code == 500
    assert "internal error" in strict_json(response.get_data())["Error"]
    assert any(r.exc_info and r.levelno == logging.ERROR for r in log.records)
    logged_once(log, response, frozenset({logging.ERROR}), what="a bug in /filter")


# ---- the scheduler's hook app (scheduler/hooks.py) ----------------------------------------------

SECRET = b"hook-secret"
HOOK_PODS = {uid: {"metadata": {"namespace": "ns", "name": uid, "uid": uid}} for uid in ("u-a", "u-b")}


class HookSlurm:
    """get_job, get_node and update_node. u-a's jobs 7 (running) and 11 (ended) are in the index; u-b's 8 is
    not yet (its caller names the Pod in a header); 9 is no placeholder (its user wrote u-b in its Extra)."""

    jobs = {7: Job(id=7, state="RUNNING", nodes="node1", admin_comment="u-a"),
            8: Job(id=8, state="RUNNING", nodes="node2", admin_comment="u-b"),
            9: Job(id=9, state="RUNNING", nodes="node3", extra="u-b"),
            11: Job(id=11, state="COMPLETED", nodes="node1", admin_comment="u-a")}

    def get_job(self, job_id: int) -> Job:
        if job_id not in self.jobs:
            raise NotFound(f"job {job_id}")
        return self.jobs[job_id]

    def get_node(self, name: str) -> Node:
        return Node(name=name, state=("ALLOCATED",))  # in service: the placeholder's drain is sunk's to write

    read_node = get_node  # (the fresh single-node read: the same record here)

    def update_node(self, name: str, update: NodeUpdate) -> None:
        pass


class Gone:
    """PodGone's contract, without the long poll: a timeout in [0, MAX_WAIT], as threading needs.

    The real PodGone hands the timeout to threading.Condition.wait_for, which spins forever
    (holding the condition) on NaN, and sleeps for as long as it is given.
    """

    def notify(self, *_: object) -> None:
        pass

    def wait(self, uid: str, timeout: float) -> bool:
        if not (isinstance(timeout, float) and math.isfinite(timeout) and 0 <= timeout <= MAX_WAIT):
            raise ValueError(f"PodGone.wait({uid!r}, {timeout!r}): threading would spin or sleep on this")
        return False

    def wait_for(self, done: object, timeout: float) -> bool:
        return self.wait("a gang", timeout)


def parse_identity_hooks(job: Job) -> Optional[tuple[str, bool]]:
    uid = job.admin_comment  # (never the Extra: the job's user writes that)
    return (uid, has_started(job)) if uid.startswith("u-") else None


@functools.cache
def scheduler_hooks(ready: bool = True) -> Flask:
    jobs = JobIndex(parse_identity_hooks)
    jobs.upsert(HookSlurm.jobs[7])
    jobs.upsert(HookSlurm.jobs[11])
    return create_hooks_app(PlaceholderHooks(HookPorts(
        secret=SECRET, jobs=IndexedJobs(jobs, parse_identity_hooks), pods=LookedUpPods(HOOK_PODS.get),
        slurm=HookSlurm(), gone=Gone(), ready=lambda: ready)).blueprint())


def mostly(right: st.SearchStrategy[Any], anything: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``right`` three times in four: a wrong value early would hide every check behind it."""
    return st.integers(0, 3).flatmap(lambda i: anything if i == 0 else right)


HOOK_VERBS = {"started": "POST", "terminating": "POST", "pod": "GET", "drain": "POST"}
JOBS_OF = (("7", "u-a"), ("11", "u-a"), ("8", "u-b"), ("9", "u-b"))  # (job, the Pod its caller holds)
job_ids = st.integers(-3, 12).map(str) | st.integers(2**31, 2**80).map(str) | st.text(max_size=6)
waits = mostly(st.sampled_from(["0", "0.5", "30", "31", "-1", "nan", "NaN", "inf", "-inf", "1e309", "", "x"]),
              latin1_text)


@st.composite
def scheduler_calls(draw: st.DrawFn) -> tuple[str, str, dict[str, str], Optional[dict[str, str]]]:
    """(method, path, headers, query): a placeholder's call with some of it wrong."""
    job, uid = draw(mostly(st.sampled_from(JOBS_OF), st.tuples(job_ids, st.sampled_from(["u-a", "u-b"]))))
    verb = draw(mostly(st.sampled_from(sorted(HOOK_VERBS)), st.text(max_size=8)))
    path = draw(mostly(st.just(f"/api/v1/jobs/{job}/{verb}"),
                       st.text(max_size=20).map(lambda s: "/api/v1/" + s) | st.just("/healthz")))
    method = draw(mostly(st.just(HOOK_VERBS.get(verb, "POST")), st.sampled_from(METHODS)))
    headers = {}
    authorization = draw(mostly(st.just(f"Bearer {hook_token(SECRET, uid)}"),
                                st.none() | header_text.map(lambda s: "Bearer " + s) | header_text))
    if authorization is not None:
        headers["Authorization"] = authorization
    pod_uid = draw(mostly(st.just(uid), st.none() | st.just(f" {uid} ") | header_text))
    if pod_uid is not None:
        headers[POD_UID_HEADER] = pod_uid
    wait = draw(st.none() | waits)
    return method, path, headers, None if wait is None else {"wait": wait}


AUTHORISED_U_A = {"Authorization": f"Bearer {hook_token(SECRET, 'u-a')}", POD_UID_HEADER: "u-a"}


@FUZZ
@example(call=("GET", "/api/v1/jobs/7/pod", AUTHORISED_U_A, {"wait": "nan"}), body=b"", ready=True)
@example(call=("POST", "/api/v1/jobs/7//started", AUTHORISED_U_A, None), body=b"", ready=True)  # no 308 redirect
@example(call=("POST", "/api/v1/jobs/11/drain", AUTHORISED_U_A, None), body=b"", ready=True)  # Slurm is written
@example(call=("POST", "/api/v1/00000000", {"Authorization": "Bearer 00000000"}, None), body=b"", ready=True)
@given(call=scheduler_calls(), body=encoded(json_values) | st.binary(max_size=32),
       ready=st.sampled_from([True, True, True, False]))
def test_scheduler_hooks_answer_every_input_in_json(call, body, ready):
    method, path, headers, query = call
    check_hooks(scheduler_hooks(ready), method, path, data=body, content_type="application/json", headers=headers,
                query=query, allow=frozenset({503}), what=f"{method} {path} query={query!r} headers={headers!r}")


@pytest.mark.parametrize("verb", ["started", "terminating", "drain"])
def test_scheduler_hooks_refuse_a_20_mib_body_with_413(verb):
    app = scheduler_hooks()
    assert app.config.get("MAX_CONTENT_LENGTH") is not None, "the scheduler's hook app sets no body limit"
    body = check_hooks(app, "POST", f"/api/v1/jobs/7/{verb}", data=b"{" * BIG, content_type="application/json",
                       headers={"Authorization": f"Bearer {hook_token(SECRET, 'u-a')}"})
    assert "larger than" in body["error"]


def test_scheduler_hooks_log_a_refusal_once_at_a_level_that_says_whether_to_look():
    """A wrong token, or a job holding another Pod's place, is a warning; the Pod gone, a placeholder's
    ordinary last answer, is info."""
    app = scheduler_hooks()
    wrong = {"Authorization": "Bearer " + "f" * 64, POD_UID_HEADER: "u-a"}
    with logged(HOOK_LOG) as log:
        assert send(app, "POST", "/api/v1/jobs/7/started", headers=wrong).status_code == 401
        assert send(app, "GET", "/api/v1/jobs/8/pod", headers={
            "Authorization": f"Bearer {hook_token(SECRET, 'u-c')}", POD_UID_HEADER: "u-c"}).status_code == 403
    assert [r.levelno for r in log.records] == [logging.WARNING, logging.WARNING]
    assert "f" * 64 not in log.records[0].getMessage()
    class AlreadyGone(Gone):
        def wait(self, uid: str, timeout: float) -> bool:
            return True

    app = create_hooks_app(PlaceholderHooks(HookPorts(
        secret=SECRET, jobs=IndexedJobs(JobIndex(parse_identity_hooks), parse_identity_hooks),
        pods=LookedUpPods(HOOK_PODS.get), slurm=HookSlurm(), gone=AlreadyGone(), ready=lambda: True)).blueprint())
    with logged(HOOK_LOG) as log:
        response = send(app, "GET", "/api/v1/jobs/7/pod", headers=AUTHORISED_U_A)
    assert response.status_code == 404
    assert [(r.levelno, r.getMessage()) for r in log.records] == [
        (logging.INFO, "'GET' '/api/v1/jobs/7/pod': 404 'the Pod is gone or finished'")]


# ---- the Syncer's hook app (sunk/hooks/) --------------------------------------------------------

ROOT_SECRET = "5d0c9a1e77b24f3c8e6a0b9d2f41c7e3-fuzz-root-secret"


class HookService:
    """Answers every call; ready() alternates, so /healthz says 200 and 503 (the deliberate one)."""

    def __init__(self) -> None:
        self._ready = False
        self._lock = threading.Lock()

    def pre_hook(self, node: str, request: PreHook) -> dict[str, Any]:
        return {"node": node, "locked": True, "job_id": request.job_id}

    def post_hook(self, node: str, request: PostHook) -> dict[str, Any]:
        return {"node": node, "unlocked": True}

    def reboot(self, node: str, request: Reboot) -> dict[str, Any]:
        return {"node": node, "reboot": True}

    def ready(self) -> bool:
        with self._lock:
            self._ready = not self._ready
            return self._ready


@pytest.fixture(scope="module")
def token_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("hooks") / "token"
    path.write_text(ROOT_SECRET + "\n")
    return path


@functools.cache
def syncer_hooks(token_path: Any) -> Flask:
    return create_syncer_app(syncer_hooks_blueprint(HookService(), TokenFile(token_path)))  # type: ignore[arg-type]


def node_auth(node: str = "node1") -> dict[str, str]:
    return {"Authorization": f"Bearer {node_token(ROOT_SECRET.encode(), node)}"}


node_segments = st.sampled_from(["node1", "node-2.x", "", "a" * 129, "..", "%2F"]) | st.text(max_size=12)
SYNCER_VERBS = ("pre-hook", "post-hook", "reboot")
hook_bodies = broken(obj({"job_id": st.integers(1, 10**6) | st.sampled_from(["7", "07", "٣", "²", "1" * 5000])},
                         strict=st.booleans(), job_extra=st.text(max_size=12),
                         timeout=st.floats(0.1, 300) | st.integers(1, 10), message=st.text(max_size=12)))


@st.composite
def syncer_calls(draw: st.DrawFn) -> tuple[str, str, dict[str, str]]:
    """(method, path, headers): a prolog's or epilog's call with some of it wrong."""
    node = draw(mostly(st.sampled_from(["node1", "node-2.x"]), node_segments))
    verb = draw(mostly(st.sampled_from(SYNCER_VERBS), st.text(max_size=8)))
    path = draw(mostly(st.just(f"/api/v1/nodes/{node}/{verb}"),
                       st.text(max_size=20).map(lambda s: "/api/v1/" + s) | st.just("/healthz")))
    method = draw(mostly(st.just("POST"), st.sampled_from(METHODS)))
    token = node_token(ROOT_SECRET.encode(), node)
    authorization = draw(mostly(st.sampled_from([f"Bearer {token}", f"bearer  {token} "]), st.none() | st.just(
        f"Bearer {node_token(ROOT_SECRET.encode(), 'node-other')}") | header_text.map(lambda s: "Bearer " + s)
        | header_text))
    headers = {} if authorization is None else {"Authorization": authorization}
    extra = draw(st.none() | header_text)
    if extra is not None:
        headers["X-Sunk-Pod-UID"] = extra
    return method, path, headers


SYNCER_AUTH = {"Authorization": f"Bearer {node_token(ROOT_SECRET.encode(), 'node1')}"}


@FUZZ
@example(call=("POST", "/api/v1/nodes/node1/post-hook", SYNCER_AUTH), body=b'{"job_id": "\xc2\xb2"}',
         content_type="application/json")  # '²'.isdigit(), and int('²') raises
@example(call=("POST", "/api/v1/nodes/node1/pre-hook", SYNCER_AUTH), body=b'{"job_id": "' + b"1" * 5000 + b'"}',
         content_type="application/json")  # int() refuses more than 4300 digits
@example(call=("POST", "/api/v1/nodes/0//pre-hook", {}), body=b"", content_type="application/json")  # werkzeug
# merged the slashes with an HTML 308 redirect that no error handler saw
@given(call=syncer_calls(), content_type=content_types,
       body=encoded(hook_bodies) | encoded(json_values) | st.binary(max_size=32) | st.just(b""))
def test_syncer_hooks_answer_every_input_in_json(token_path, call, body, content_type):
    method, path, headers = call
    check_hooks(syncer_hooks(token_path), method, path, data=body, content_type=content_type, headers=headers,
                allow=frozenset({503}), what=f"{method} {path} headers={headers!r} body={body[:80]!r}")


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"job_id": 7, "x": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"],
                         ids=["unclosed", "closed, deeper than any decoder of sunk's"])
def test_syncer_hooks_deeply_nested_json_is_a_400(token_path, body):
    answer = check_hooks(syncer_hooks(token_path), "POST", "/api/v1/nodes/node1/post-hook", data=body,
                         content_type="application/json", headers=node_auth(), what="deeply nested body")
    assert answer["error"] == "the body is not valid JSON"


def test_syncer_hooks_answer_a_body_nested_within_the_decoders_depth_as_its_job_id_says(token_path):
    """5,000 levels: decoded in every process the same way (``sunk.base.jsondepth``), whatever it decoded before;
    its other fields are not read (an older prolog's body carries the job's Extra, which its user writes: a 400
    would drain the node)."""
    deep = b'{"job_id": 7, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    app = syncer_hooks(token_path)
    plain = check_hooks(app, "POST", "/api/v1/nodes/node1/post-hook", data=b'{"job_id": 7}',
                        content_type="application/json", headers=node_auth())
    nested = check_hooks(app, "POST", "/api/v1/nodes/node1/post-hook", data=deep, content_type="application/json",
                         headers=node_auth(), what="a body nested 5,000 deep")
    assert nested == plain


@pytest.mark.parametrize("verb", ["pre-hook", "post-hook", "reboot"])
def test_syncer_hooks_refuse_a_20_mib_body_with_413(token_path, verb):
    app = syncer_hooks(token_path)
    assert app.config.get("MAX_CONTENT_LENGTH") is not None, "the Syncer's hook app sets no body limit"
    body = check_hooks(app, "POST", f"/api/v1/nodes/node1/{verb}", data=b" " * BIG, content_type="application/json",
                       headers=node_auth())
    assert "larger than" in body["error"]


def test_syncer_hooks_refuse_a_20_mib_body_without_content_length_with_413(token_path):
    """Chunked: werkzeug cuts such a body at MAX_CONTENT_LENGTH rather than refusing it."""
    environ = EnvironBuilder(path="/api/v1/nodes/node1/post-hook", method="POST", content_type="application/json",
                             headers=node_auth(), input_stream=io.BytesIO(b" " * BIG)).get_environ()
    del environ["CONTENT_LENGTH"]
    environ["wsgi.input_terminated"] = True
    app_iter, status, headers = run_wsgi_app(syncer_hooks(token_path), environ, buffered=True)
    body = b"".join(app_iter)
    assert status.startswith("413"), (status, body[:200])
    assert headers["Content-Type"] == "application/json"
    strict_json(body)


@pytest.mark.parametrize(("path", "shown"), [
    ("/api/v1/nodes/node1\n2026-01-01 INFO forged: 200/pre-hook", "node1\\n2026-01-01 INFO forged"),
    ("/api/v1/nodes/node1\x1b[2J/post-hook", "node1\\x1b[2J"),
    ("/api/v1/" + "x" * 5000, "x" * 150),
], ids=["newline", "escape", "long"])
def test_syncer_hooks_log_the_callers_path_escaped_and_cut(token_path, path, shown):
    """As a WSGI server hands the path over (percent-decoded: %0A is a line break; the test client would
    drop it, so straight through WSGI)."""
    environ = EnvironBuilder(path="/", method="POST", data=b'{"job_id": 7}', content_type="application/json",
                             headers=node_auth()).get_environ()
    environ["PATH_INFO"] = path
    with logged(HOOK_LOG) as log:
        _, status, _ = run_wsgi_app(syncer_hooks(token_path), environ, buffered=True)
    assert status.startswith(("400", "404")), status
    (record,) = log.records
    message = record.getMessage()
    assert shown in message and "\n" not in message and "\x1b" not in message
    assert len(message) < 600 and node_auth()["Authorization"].split()[1] not in message


def test_syncer_hooks_log_a_wrong_token_as_a_warning_without_the_token(token_path):
    other = {"Authorization": f"Bearer {node_token(ROOT_SECRET.encode(), 'node2')}"}
    with logged(HOOK_LOG) as log:
        body = check_hooks(syncer_hooks(token_path), "POST", "/api/v1/nodes/node1/pre-hook", data=b'{"job_id": 7}',
                           content_type="application/json", headers=other)
    assert "wrong bearer token" in body["error"]
    assert [r.levelno for r in log.records] == [logging.WARNING]


# ---- the probe and metrics server (sunk/controller/health.py) ----------------------------------


@pytest.fixture(scope="module")
def probes() -> Iterator[HttpEndpoints]:
    server = HttpEndpoints("127.0.0.1:0", healthz={"ping": lambda: True}, readyz={"informers": lambda: True},
                           metrics=True)
    server.start()
    yield server
    server.stop()


def exchange(port: int, request: bytes) -> bytes:
    """One request on a fresh connection; what the server sends until its answer is whole (by its Content-Length:
    the server may keep the connection open for the next request) or it closes."""
    head_only = request.startswith(b"HEAD ")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
            if answer_is_whole(raw, head_only):
                break
    return raw


def answer_is_whole(raw: bytes, head_only: bool) -> bool:
    """Whether ``raw`` holds a whole answer past any 100 Continue: its head, and its Content-Length of body."""
    while True:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        if not sep:
            return False
        if b" 100 " not in head.split(b"\r\n", 1)[0]:
            break
        raw = rest
    lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n")[1:]
               if line.lower().startswith(b"content-length:")]
    if head_only or not lengths:
        return head_only
    return len(rest) >= int(lengths[0])


def parse_answer(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of an HTTP/1.x answer, past any 100 Continue."""
    while True:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        if status != 100:
            break
        raw = rest
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, rest


probe_methods = st.sampled_from(["GET", "GET", "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE",
                                 "CONNECT", "get", "BREW"]) | st.from_regex(r"\A[A-Za-z_.-]{1,12}\Z")
probe_paths = st.sampled_from(["/healthz", "/livez", "/readyz", "/metrics", "/healthz?verbose", "/readyz?verbose=1&x",
                               "/readyz?%zz", "//[", "http://[::1", "/%00", "*", "/", "/metrics/", "/x y"]) \
    | latin1_text.map(lambda t: "/" + t)
probe_versions = st.sampled_from(["HTTP/1.0", "HTTP/1.1", "HTTP/1.1", "HTTP/2.0", "HTTP/1.10", "HTTP/x", "FOO"])
probe_headers = st.dictionaries(
    st.sampled_from(["Host", "Connection", "Expect", "Content-Length", "Transfer-Encoding", "Accept"])
    | st.from_regex(r"\AX-[A-Za-z0-9-]{1,10}\Z"), latin1_text, max_size=4)


@FUZZ
@example(method="GET", path="//[", version="HTTP/1.1", headers={})  # urlsplit: "Invalid IPv6 URL"
@example(method="POST", path="/readyz", version="HTTP/1.1", headers={})  # the stdlib: 501, an HTML page
@example(method="GET", path="/healthz", version="HTTP/1.1", headers={"Expect": "100-continue"})
@example(method="GET", path="/healthz", version="HTTP/1.1", headers={"Transfer-Encoding": "gzip"})  # h11: 501
@example(method="HEAD", path="/metrics", version="HTTP/1.1", headers={})
@given(method=probe_methods, path=probe_paths, version=probe_versions, headers=probe_headers)
def test_the_probe_server_answers_every_request_in_plain_text_below_500(probes, method, path, version, headers):
    """No failing check here, so no 5xx at all; every answer plain text (Prometheus text is too), the front's
    own refusals included."""
    lines = [f"{method} {path} {version}", *(f"{k}: {v}" for k, v in headers.items())]
    try:
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        reject()
    raw = exchange(probes.port, request)
    what = f"{request[:200]!r} answered {raw[:300]!r}"
    assert raw.startswith(b"HTTP/"), what
    status, got, body = parse_answer(raw)
    assert 200 <= status < 500, what
    assert got.get("content-type", "").startswith("text/plain"), what
    assert b"<html" not in body.lower() and b"<!doctype" not in body.lower(), what
    body.decode("utf-8")
    if status == 405:
        assert got.get("allow") == "GET, HEAD", what
    understood = len(lines[0].split()) == 3 and version in ("HTTP/1.0", "HTTP/1.1")
    if method == "HEAD" and understood and status != 400:  # (a request the front refused gets its body)
        assert body == b"", what


def test_the_probe_servers_only_5xx_is_a_failing_check_in_plain_text():
    server = HttpEndpoints("127.0.0.1:0", healthz={"ping": lambda: True}, readyz={"informers": lambda: False})
    server.start()
    try:
        status, headers, body = parse_answer(exchange(server.port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert (status, body) == (500, b"[-]informers failed\ncheck failed\n")
        assert headers["content-type"].startswith("text/plain")
        status, _, body = parse_answer(exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert (status, body) == (200, b"ok")
        status, _, body = parse_answer(exchange(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert (status, body) == (404, b"not found\n")  # metrics off on this one
    finally:
        server.stop()



def test_a_silent_or_half_sent_connection_to_the_probes_is_closed_by_the_server():
    """One that sends nothing is closed quietly, one that sends half a request gets a plain-text 408 then the
    close, after the head deadline, instead of staying open for as long as the client likes."""
    server = HttpEndpoints("127.0.0.1:0", healthz={"ping": lambda: True}, limits=Limits(head_seconds=0.5))
    server.start()
    try:
        silent = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        half = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        half.sendall(b"GET /healthz HTTP/1.1\r\nHost:")
        answers = []
        for sock in (silent, half):
            with sock:  # (without the server's close, recv times out after 10 s and the test fails)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
                answers.append(answer)
        assert answers[0] == b""
        status, headers, body = parse_answer(answers[1])
        assert (status, body) == (408, b"request head not whole within 0.5 s\n")
        assert headers["content-type"].startswith("text/plain")
        status, _, body = parse_answer(exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert (status, body) == (200, b"ok")
    finally:
        server.stop()
