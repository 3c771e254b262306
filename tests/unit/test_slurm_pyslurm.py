"""The pyslurm backend's mapping, with a stand-in ``pyslurm`` module shaped like pyslurm 25.11.2.

pyslurm cannot be built here (it needs Slurm 25.11's headers), so the stand-in copies the
attribute names, call signatures and error behaviour read from the 25.11.2 sdist: stock by default,
or with what sunk's patch adds (``make_pyslurm(prefer=True, topo=True)``: ``JobSubmitDescription.prefer``,
resource_sharing "topo")
"""

import os
import sys
import types

import pytest

from sunk.base import fence
from sunk.base.fence import Fenced, LeaseFence
from sunk.model import names
from sunk.model.slurm import GresGrant, JobAllocation, SubmitLimits
from sunk.slurm import (
    JobRequest,
    NodeUpdate,
    NotFound,
    OutcomeUnknown,
    SlurmCache,
    SlurmError,
    SlurmUnavailable,
    connect,
)
from sunk.slurm.client import Reconfigurable
from sunk.slurm.pyslurm_backend import PyslurmClient, gres_text, submit_limits_of, tres_text
from sunk.translate.podjob import backend_problems
from sunk_dev import listerlog


class PyslurmError(Exception):
    pass


class RPCError(PyslurmError):
    def __init__(self, errno=-1, msg=None):
        self.errno, self.msg = errno, msg or f"error {errno}"
        super().__init__(self.msg)


class Tres:
    def __init__(self, count):
        self.count = count


class TrackableResources:
    def __init__(self, cpu=None, mem=None, node=None, gres=None):
        self.cpu, self.mem, self.node = (Tres(x) if x is not None else None for x in (cpu, mem, node))
        self.energy = self.billing = self.vmem = self.pages = None
        self.gres = {k: Tres(v) for k, v in (gres or {}).items()}


_NODE_STATES = {"DOWN", "DRAIN", "FAIL", "FUTURE", "RESUME", "UNDRAIN", "NORESP", "POWER_DOWN", "POWER_UP"}


_SHARED = {"oversubscribe": 1, "yes": 1, "user": 2, "mcs": 3, "no": 0, "exclusive": 0}  # JOB_SHARED_*
JOB_SHARED_TOPO = 4


def make_pyslurm(prefer=False, topo=False):
    """A stock pyslurm 25.11.2, or with either half of sunk's patch (dev/sunk_dev/patches)."""
    ps = types.ModuleType("pyslurm")
    ps.__version__ = "25.11.2+sunk11748eba" if prefer or topo else "25.11.2"
    ps.PyslurmError, ps.RPCError = PyslurmError, RPCError

    def shared_type_str_to_int(typ):  # pyslurm.core.job.util's
        typ = typ.casefold()
        if typ in _SHARED:
            return _SHARED[typ]
        if topo and typ == "topo":
            return JOB_SHARED_TOPO
        raise ValueError(f"Invalid resource_sharing type: {typ}.")

    ps.core = types.SimpleNamespace(job=types.SimpleNamespace(
        util=types.SimpleNamespace(shared_type_str_to_int=shared_type_str_to_int)))
    registry = {"nodes": {}, "jobs": {}, "modified": [], "submitted": [], "signals": [], "deleted": [],
                "reconfigured": []}
    ps.registry = registry

    class Collection(dict):
        pass

    class Node:
        def __init__(self, name=None, **kwargs):
            self.name = name
            for k, v in kwargs.items():
                if k == "state" and v.upper() not in _NODE_STATES:
                    raise ValueError(f"Invalid Node state: {v}")
                setattr(self, k, v)

        @staticmethod
        def load(name):
            if name not in registry["nodes"]:
                raise RPCError(msg=f"Node '{name}' does not exist")
            return registry["nodes"][name]

        def modify(self, changes):
            registry["modified"].append((self.name, {k: v for k, v in vars(changes).items() if k != "name"}))

        def delete(self):
            if self.name not in registry["nodes"]:
                raise RPCError(errno=2018, msg="Invalid node name specified")
            registry["deleted"].append(self.name)

    class Nodes(Collection):
        @staticmethod
        def load(preload_passwd_info=False):
            return Nodes(registry["nodes"])

    class Job:
        def __init__(self, job_id):
            self.id = job_id

        @staticmethod
        def load(job_id):
            if job_id not in registry["jobs"]:
                raise RPCError(errno=2017, msg="Invalid job id specified")
            return registry["jobs"][job_id]

        def cancel(self):
            self.send_signal(9)

        def send_signal(self, signal, steps="children", hurry=False):
            if signal != 9 and self.id not in registry["jobs"]:  # pyslurm ignores 2017 only for SIGKILL
                raise RPCError(errno=2017, msg="Invalid job id specified")
            registry["signals"].append((self.id, signal, steps))

        def modify(self, changes):
            registry["modified"].append((self.id, dict(changes.kwargs)))

    class Jobs(Collection):
        @staticmethod
        def load(preload_passwd_info=False, frozen=False):
            return Jobs(registry["jobs"])

    class JobSubmitDescription:
        def __init__(self, **kwargs):
            if "prefer" in kwargs and not hasattr(type(self), "prefer"):  # a cdef class: no attribute of that name
                raise AttributeError("'pyslurm.core.job.submission.JobSubmitDescription' object has no "
                                     "attribute 'prefer'")
            self.kwargs = kwargs

        def submit(self):
            if self.kwargs.get("resource_sharing"):  # converted when the job is built, as pyslurm does
                shared_type_str_to_int(self.kwargs["resource_sharing"])
            registry["submitted"].append(self.kwargs)
            return 100 + len(registry["submitted"])

    if prefer:
        JobSubmitDescription.prefer = None  # the patch's field, a public attribute of the cdef class

    class Partitions(Collection):
        @staticmethod
        def load():
            return Partitions({"batch": types.SimpleNamespace(name="batch", nodes="node[1-2]", state="UP",
                                                              priority_tier=2, total_cpus=64, total_nodes=2)})

    ps.Node, ps.Nodes, ps.Job, ps.Jobs = Node, Nodes, Job, Jobs
    ps.JobSubmitDescription, ps.Partitions = JobSubmitDescription, Partitions
    ps.slurmctld = types.SimpleNamespace(
        reconfigure=lambda: registry["reconfigured"].append(True),
        ping_primary=lambda: types.SimpleNamespace(is_responding=True, hostname="ctld", latency=1.0),
        Config=types.SimpleNamespace(load=lambda: types.SimpleNamespace(version="25.11.2")),
        Statistics=types.SimpleNamespace(load=lambda: types.SimpleNamespace(
            server_thread_count=4, agent_queue_size=0, dbd_agent_queue_size=1, schedule_queue_length=2,
            jobs_submitted=9, jobs_started=8, jobs_completed=7, jobs_canceled=1, jobs_failed=0, jobs_pending=1,
            jobs_running=1, schedule_cycle_last=2000, schedule_cycle_mean=3000, schedule_cycle_mean_depth=5,
            schedule_cycles_per_minute=6, backfill_cycle_last=100000, backfill_cycle_mean=200000,
            backfill_mean_depth=3, backfilled_jobs=2, last_backfilled_jobs=1, backfilled_het_jobs=0,
            rpcs_by_type={"REQUEST_JOB_INFO": types.SimpleNamespace(name="REQUEST_JOB_INFO", count=3,
                                                                     average_time=150)})),
    )
    return ps


def pyslurm_node(name, **kw):
    base = dict(name=name, state="IDLE", reason=None, reason_time=None, reason_user=None, extra=None, comment=None,
                total_cpus=32, allocated_cpus=0, real_memory=131072, allocated_memory=0,
                configured_gres={"gpu": 2}, allocated_gres={}, partitions=["batch"], available_features=["FAKE_GPU"])
    base.update(kw)
    return types.SimpleNamespace(**base)


def pyslurm_job(job_id, layout=None, **kw):
    base = dict(id=job_id, name="j", state="PENDING", state_reason="None", allocated_nodes=None, extra=None,
                comment=None, user_name="root", user_id=0, group_id=0, account="root", partition="batch",
                qos="normal", priority=1000, submit_time=100, start_time=None, end_time=None, time_limit=None,
                requested_tres=TrackableResources(cpu=1, mem=1000, node=1), allocated_tres=None,
                resource_sharing="OK", working_directory="/tmp")
    base.update(kw)
    job = types.SimpleNamespace(**base)
    job.get_resource_layout_per_node = lambda: layout or {}
    return job


@pytest.fixture
def ps(monkeypatch):
    module = make_pyslurm()
    monkeypatch.setitem(sys.modules, "pyslurm", module)
    return module


@pytest.fixture
def client(ps):
    return connect("pyslurm")


def test_pyslurm_is_imported_only_when_the_backend_is_built(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # makes ``import pyslurm`` fail
    import sunk.slurm.pyslurm_backend  # noqa: F401  (importing the module must work)

    with pytest.raises(SlurmError, match=r"pip install 'sunk\[pyslurm\]'"):
        connect("pyslurm")


def test_node_mapping(client, ps):
    ps.registry["nodes"]["node1"] = pyslurm_node(
        "node1", state="MIXED+DRAIN", reason="k8s: x", reason_time=1700000000, reason_user="root", extra="{}",
        allocated_cpus=4, allocated_memory=1000, configured_gres={"gpu:h100": 4},
        allocated_gres={"gpu:h100": 1})
    node = client.get_node("node1")
    assert node.state == {"MIXED", "DRAIN"} and node.drained
    assert (node.reason, node.reason_time, node.reason_user, node.extra) == ("k8s: x", 1700000000, "root", "{}")
    assert (node.gres, node.gres_used, node.gpus_total, node.gpus_alloc) == ("gpu:h100:4", "gpu:h100:1", 4, 1)
    assert (node.alloc_cpus, node.alloc_memory, node.partitions, node.features) == (4, 1000, ("batch",),
                                                                                     ("FAKE_GPU",))


def test_running_job_mapping(client, ps):
    ps.registry["jobs"][7] = pyslurm_job(
        7, state="RUNNING", allocated_nodes="node[1-2]", extra="uid=1", comment="c", start_time=110, end_time=700,
        time_limit=10, resource_sharing="USER",
        allocated_tres=TrackableResources(cpu=6, mem=12000, node=2, gres={"gpu": 3}),
        layout={"node1": {"cpu_ids": "0-3", "gres": {"gpu": {"count": 2, "indexes": "0-1"}}, "memory": 8000},
                "node2": {"cpu_ids": "0,5", "gres": {"gpu": 1}, "memory": 4000}})
    job = client.get_job(7)
    assert (job.state, job.state_flags, job.state_reason) == ("RUNNING", frozenset(), "")
    assert job.allocations == (JobAllocation("node1", 4, 8000, 2, gres=(GresGrant("gpu", "", 2, (0, 1)),)),
                               JobAllocation("node2", 2, 4000, 1, gres=(GresGrant("gpu", "", 1),)))
    assert job.tres_alloc == "cpu=6,mem=12000M,node=2,gres/gpu=3" and job.gpus == 3
    assert (job.shared, job.time_limit, job.extra, job.comment) == ("user", 10, "uid=1", "c")


@pytest.mark.parametrize("word, state, flags", [
    ("COMPLETING", "COMPLETED", {"COMPLETING"}),
    ("CONFIGURING", "RUNNING", {"CONFIGURING"}),
    ("REQUEUED", "PENDING", {"REQUEUED"}),
    ("CANCELLED", "CANCELLED", set()),
])
def test_one_word_states(client, ps, word, state, flags):
    ps.registry["jobs"][1] = pyslurm_job(1, state=word)
    job = client.get_job(1)
    assert (job.state, job.state_flags) == (state, flags)


def test_lists_are_always_full_and_stamped_with_the_local_clock(ps):
    ps.registry["nodes"]["node1"] = pyslurm_node("node1")
    ps.registry["jobs"][1] = pyslurm_job(1)
    client = PyslurmClient(clock=lambda: 1234.5)
    assert client.list_nodes(updated_since=1000).last_update == 1234
    assert [j.id for j in client.list_jobs(updated_since=1000).items] == [1]


def test_submit_kwargs(client, ps):
    job_id = client.submit_job(JobRequest(
        name="j", script="#!/bin/sh\n", partition="batch", memory_per_node=100, gpus_per_node=2, gpu_type="h100",
        shared="none", time_limit=30, extra="e", comment="c", excluded_nodes=("node3",), requeue=False,
        environment=("PATH=/bin", "A=b=c")))
    assert job_id == 101
    (kw,) = ps.registry["submitted"]
    assert kw["partitions"] == "batch" and kw["gres_per_node"] == "gpu:h100:2"
    assert kw["resource_sharing"] == "exclusive" and kw["time_limit"] == 30 and kw["memory_per_node"] == 100
    assert kw["environment"] == {"PATH": "/bin", "A": "b=c"} and kw["excluded_nodes"] == ["node3"]
    assert kw["is_requeueable"] is False and "required_nodes" not in kw and "prefer" not in kw


def test_a_gangs_job_asks_pyslurm_for_exactly_n_nodes_with_one_task_each(client, ps):
    client.submit_job(JobRequest(name="j", script="s", node_count=4))
    client.submit_job(JobRequest(name="j", script="s"))
    gang, single = ps.registry["submitted"]
    assert gang["nodes"] == "4" and gang["ntasks"] == 4
    assert "nodes" not in single and "ntasks" not in single


def test_a_stock_pyslurm_refuses_topo_and_prefer_never_drops_them_and_says_pyslurm_lacks_them(client, ps):
    with pytest.raises(SlurmError, match="JOB_SHARED_TOPO"):
        client.submit_job(JobRequest(name="j", script="s", shared="topo"))
    with pytest.raises(SlurmError, match=r"job_desc_msg_t\.prefer"):
        client.submit_job(JobRequest(name="j", script="s", prefer="FAST"))
    assert ps.registry["submitted"] == []
    for why in (client.submit_limits.prefer, client.submit_limits.shared_refusal("topo")):
        assert why.startswith("pyslurm 25.11.2's JobSubmitDescription cannot pass it (Slurm's C API has ")
        assert "pyslurm-25.11.2-prefer-topo.patch" in why and "REST backend" in why
    assert not client.submit_limits.shared_refusal("user")


def test_sunks_patched_pyslurm_submits_prefer_and_topo_and_reads_topo_back():
    ps = make_pyslurm(prefer=True, topo=True)
    client = PyslurmClient(module=ps)
    assert client.submit_limits == SubmitLimits()  # nothing refused: what Slurm's C API takes, pyslurm passes
    client.submit_job(JobRequest(name="j", script="s", prefer="FAST&ib", shared="topo"))
    client.submit_job(JobRequest(name="j", script="s", shared="user"))
    with_both, neither = ps.registry["submitted"]
    assert (with_both["prefer"], with_both["resource_sharing"]) == ("FAST&ib", "topo")
    assert "prefer" not in neither and neither["resource_sharing"] == "user"
    ps.registry["jobs"][3] = pyslurm_job(3, resource_sharing="TOPO")  # slurm_job_share_string(JOB_SHARED_TOPO)
    assert client.get_job(3).shared == "topo"


@pytest.mark.parametrize(("has_prefer", "takes_topo"), [(True, False), (False, True)])
def test_each_capability_is_asked_of_the_module_not_read_from_its_version(has_prefer, takes_topo):
    """A pyslurm with one of the two (a later upstream release, say) gets that one, whatever it calls itself."""
    ps = make_pyslurm(prefer=has_prefer, topo=takes_topo)
    ps.__version__ = "99.0.0"
    limits = submit_limits_of(ps)
    assert (not limits.prefer) is has_prefer and (not limits.shared_refusal("topo")) is takes_topo
    assert "pyslurm 99.0.0's" in (limits.prefer or limits.shared_refusal("topo"))


def test_without_the_converter_pyslurm_is_taken_as_refusing_topo():
    ps = make_pyslurm(prefer=True, topo=True)
    del ps.core
    assert "JOB_SHARED_TOPO" in submit_limits_of(ps).shared_refusal("topo")


@pytest.mark.parametrize("patched", [False, True], ids=["stock", "patched"])
def test_the_schedulers_pod_validation_follows_the_clients_limits(patched):
    client = PyslurmClient(module=make_pyslurm(prefer=patched, topo=patched))
    pod = {"metadata": {"annotations": {names.ANN_PREFER: "FAST", names.ANN_EXCLUSIVE: "topo"}}, "spec": {}}
    problems = {p.field: str(p) for p in backend_problems(pod, client.submit_limits)}
    if patched:
        assert problems == {}
    else:
        assert set(problems) == {names.ANN_PREFER, names.ANN_EXCLUSIVE}
        assert "job_desc_msg_t.prefer" in problems[names.ANN_PREFER]
        assert "JOB_SHARED_TOPO" in problems[names.ANN_EXCLUSIVE]


def test_updates_and_cancel(client, ps):
    ps.registry["nodes"]["node1"] = pyslurm_node("node1")
    ps.registry["jobs"][5] = pyslurm_job(5, state="RUNNING")
    client.update_node("node1", NodeUpdate(state="DRAIN", reason="why", extra='{"a":1}'))
    client.update_job(5, extra="x")
    client.cancel_job(5)
    client.cancel_job(5, signal="TERM")
    client.cancel_job(999)  # gone: fine, as pyslurm's own cancel()
    with pytest.raises(NotFound):
        client.cancel_job(999, signal="USR1")
    assert ps.registry["modified"] == [("node1", {"state": "DRAIN", "reason": "why", "extra": '{"a":1}'}),
                                       (5, {"extra": "x"})]
    assert ps.registry["signals"] == [(5, 9, "children"), (5, "SIGTERM", "all"), (999, 9, "children")]
    with pytest.raises(ValueError, match="needs a reason"):
        client.update_node("node1", NodeUpdate(state="DRAIN"))


def test_read_node_is_node_load_of_the_one_node(client, ps):
    ps.registry["nodes"]["node1"] = pyslurm_node("node1", state="IDLE+DRAIN", reason="bad DIMM", extra="{}")
    node = client.read_node("node1")
    assert (node.name, node.drained, node.reason, node.extra) == ("node1", True, "bad DIMM", "{}")
    stats = client.rpc_stats()
    assert stats["REQUEST_NODE_INFO_SINGLE"].count == 1 and "REQUEST_NODE_INFO" not in stats


def test_read_node_of_an_unknown_name_is_not_found_as_over_rest(client, ps):
    with pytest.raises(NotFound, match="does not exist"):  # pyslurm: RPCError "Node 'nosuch' does not exist"
        client.read_node("nosuch")
    stats = client.rpc_stats()["REQUEST_NODE_INFO_SINGLE"]
    assert (stats.count, stats.errors) == (1, 0)


def test_read_node_answered_with_another_nodes_record_is_not_found(client, ps):
    """slurmctld finds a node by its NodeHostname or NodeAddr too: a name that is gone but is another node's
    hostname would read that node's drain and Extra as if they were the asked node's."""
    ps.registry["nodes"]["alias"] = pyslurm_node("node7", state="IDLE+DRAIN", reason="bad DIMM")
    with pytest.raises(NotFound, match="answered with node node7"):
        client.read_node("alias")


def test_errors(client, ps):
    with pytest.raises(NotFound) as job_err:
        client.get_job(404)
    assert job_err.value.code == 2017
    with pytest.raises(NotFound, match="no Slurm node"):
        client.get_node("nosuch")
    with pytest.raises(NotFound):
        client.delete_node("nosuch")
    ps.registry["nodes"]["node1"] = pyslurm_node("node1")
    with pytest.raises(SlurmError, match="Invalid Node state: BOGUS"):
        client.update_node("node1", NodeUpdate(state="BOGUS"))

    def unreachable():
        raise RPCError(errno=1001, msg="Unable to contact slurm controller (connect failure)")

    ps.Jobs.load = staticmethod(unreachable)
    with pytest.raises(SlurmUnavailable):
        client.list_jobs()
    assert client.rpc_stats()["REQUEST_JOB_INFO"].errors == 1


@pytest.mark.parametrize(("errno", "unknown"), [(5004, True), (1003, True), (1001, False)],
                         ids=["socket-timeout", "receive-error", "connect-failure"])
def test_a_submission_whose_answer_may_be_lost_says_so(client, ps, errno, unknown):
    """After slurmctld may have taken it (a timeout, a receive error), not before (cannot connect)."""

    def lost(self):
        raise RPCError(errno=errno, msg="Socket timed out on send/recv operation")

    ps.JobSubmitDescription.submit = lost
    with pytest.raises(SlurmUnavailable) as err:
        client.submit_job(JobRequest(name="j", script="#!/bin/sh\n"))
    assert isinstance(err.value, OutcomeUnknown) is unknown
    ps.Jobs.load = staticmethod(lambda **_kw: lost(None))
    with pytest.raises(SlurmUnavailable) as err:
        client.list_jobs()
    assert not isinstance(err.value, OutcomeUnknown)  # a read is only unavailable


def test_partitions_diag_ping(client):
    (batch,) = client.list_partitions()
    assert batch.nodes == ("node1", "node2") and batch.priority_tier == 2
    stats = client.diag()
    assert stats.schedule_cycle_last == pytest.approx(0.002) and stats.bf_cycle_mean == pytest.approx(0.2)
    assert stats.rpcs[0].mean_seconds == pytest.approx(0.00015)
    assert client.ping() is True
    assert client.release() == "25.11.2" and client.rpc_stats()["REQUEST_BUILD_INFO"].count == 1


def test_the_cache_still_emits_only_real_changes(client, ps):
    ps.registry["nodes"]["node1"] = pyslurm_node("node1")
    ps.registry["jobs"][1] = pyslurm_job(1)
    cache = SlurmCache(client)
    cache.refresh()
    events = []
    listerlog.record(cache, events.append, replay=False)
    cache.refresh()
    assert events == []
    ps.registry["jobs"][1] = pyslurm_job(1, state="RUNNING", allocated_nodes="node1")
    cache.refresh()
    assert [(e.kind, e.type, e.key) for e in events] == [("job", "changed", 1)]


def test_text_helpers():
    assert gres_text({"gpu": 2, "gpu:a100": {"count": 1, "indexes": "0"}}) == "gpu:2,gpu:a100:1(IDX:0)"
    # (what pyslurm's to_gres_dict makes of gres_detail's forms, read back as Slurm wrote them)
    assert gres_text({"gpu:h100": {"count": 2, "indexes": "0,2"}}) == "gpu:h100:2(IDX:0,2)"
    assert gres_text({"gpu:CNT": 2}) == "gpu(CNT:2)"
    assert gres_text(None) == "" and gres_text("gpu:1") == "gpu:1"
    assert tres_text(None) == "" and tres_text(TrackableResources(cpu=2)) == "cpu=2"


def test_job_states_come_from_a_full_list_and_the_cache_keeps_listing_in_full(client, ps):
    ps.registry["jobs"][1] = pyslurm_job(1, state="RUNNING", allocated_nodes="node1")
    ps.registry["jobs"][100] = pyslurm_job(100, array_id=100, array_task_id=None)
    ps.registry["jobs"][101] = pyslurm_job(101, array_id=100, array_task_id=1, state="COMPLETING")
    states = client.list_job_states()
    assert [(s.key, s.job_id, s.array_job_id, s.array_task_id, s.state, s.state_flags) for s in states] == [
        ("1", 1, None, None, "RUNNING", frozenset()),
        ("100_*", 100, 100, None, "PENDING", frozenset()),
        ("101_1", 101, 100, 1, "COMPLETED", frozenset({"COMPLETING"})),  # (a task by its own id, as Slurm lists it)
    ]
    assert [s.key for s in client.list_job_states([1])] == ["1"]
    assert client.rpc_stats()["REQUEST_JOB_INFO"].count == 2  # no cheaper call in pyslurm 25.11
    assert client.cheap_job_states is False and not SlurmCache(client).job_states


def test_read_jobs_reads_an_arrays_every_record(client, ps):
    ps.registry["jobs"][1] = pyslurm_job(1)
    ps.registry["jobs"][100] = pyslurm_job(100, array_id=100, array_task_id=None)
    ps.registry["jobs"][101] = pyslurm_job(101, array_id=100, array_task_id=1, state="RUNNING")
    assert [j.id for j in client.read_jobs([1, 999])] == [1]  # 999: not found, so nothing
    assert sorted(j.id for j in client.read_jobs([100])) == [100, 101]  # Job.load keeps one record
    calls = client.rpc_stats()["REQUEST_JOB_INFO"].count
    assert [j.id for j in client.read_jobs([101])] == [101]  # a task by its own id: that task, as slurmrestd
    assert client.rpc_stats()["REQUEST_JOB_INFO"].count == calls  # (no full job list for it)


def test_a_fenced_thread_whose_lease_is_gone_sends_no_slurm_write(client, ps):
    ps.registry["jobs"][7] = pyslurm_job(7, state="RUNNING")
    writes = [
        lambda: client.submit_job(JobRequest(name="j", script="s")),
        lambda: client.update_job(7, comment="c"),
        lambda: client.cancel_job(7),
        lambda: client.update_node("node1", NodeUpdate(comment="x")),
        lambda: client.delete_node("node1"),
        client.reconfigure,
    ]
    with fence.fenced(LeaseFence(10.0)):  # never renewed: not held
        for write in writes:
            with pytest.raises(Fenced):
                write()
        assert client.get_job(7).id == 7
    assert all(not ps.registry[k] for k in ("modified", "submitted", "signals", "deleted", "reconfigured"))


def test_reconfigure_is_slurm_reconfigure_counted_and_its_refusal_is_an_error(client, ps):
    """The operator's topology writer and SlurmCluster need it on this backend too (``Reconfigurable``)."""
    assert isinstance(client, Reconfigurable)
    client.reconfigure()
    assert ps.registry["reconfigured"] == [True]
    assert client.accounting.snapshot()["REQUEST_RECONFIGURE"].count == 1

    def refused():
        raise RPCError(errno=2002, msg="Access/permission denied")

    ps.slurmctld.reconfigure = refused
    with pytest.raises(SlurmError, match="reconfigure slurmctld: Access/permission denied"):
        client.reconfigure()


def test_clearing_a_field_is_refused_not_silently_left_as_it_was(client, ps):
    with pytest.raises(SlurmError, match="empty extra"):
        client.update_node("n1", NodeUpdate(extra=""))
    with pytest.raises(SlurmError, match="empty comment"):
        client.update_job(7, comment="")


def test_an_empty_slurm_jwt_is_no_token_so_libslurm_authenticates_with_munge(ps, monkeypatch):
    monkeypatch.setenv("SLURM_JWT", "")
    PyslurmClient(module=ps)
    assert "SLURM_JWT" not in os.environ
    monkeypatch.setenv("SLURM_JWT", "a-token")  # one given is the operator's choice: kept
    PyslurmClient(module=ps)
    assert os.environ["SLURM_JWT"] == "a-token"


def test_pyslurm_takes_a_tenants_uid_and_gid_as_numbers_the_container_does_not_know():
    """A daemon's container has no passwd entry for uid 4242: pyslurm's own resolver refuses it (KeyError),
    the backend's gives slurmctld the number to check against its own users."""
    import types

    from sunk.slurm.pyslurm_backend import take_ids_as_numbers

    def unknown(value, err_on_invalid=True):
        if str(value) != "slurm":
            raise KeyError(f"getpwuid(): uid not found: {value}")
        return 64030

    submission = types.SimpleNamespace(user_to_uid=unknown, group_to_gid=unknown)
    take_ids_as_numbers(submission)
    take_ids_as_numbers(submission)  # twice (a second client in one process): still one wrapper
    assert submission.user_to_uid(4242) == 4242 and submission.group_to_gid("4243") == 4243
    assert submission.user_to_uid("slurm") == 64030  # a name still resolves through the container's database
    with pytest.raises(KeyError):
        submission.user_to_uid("mallory")
