"""The incrementally rendered Slurm table: the full renderer's bytes, and only changed objects rendered."""

from __future__ import annotations

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sunk.metrics.collector import DiagPoller, SlurmMetrics
from sunk.metrics.exposition import render
from sunk.metrics.families import SlurmSnapshot, slurm_families
from sunk.metrics.incremental import IncrementalTable
from sunk.model.slurm import Job, JobAllocation, Node, RpcStat, SchedulerStats

NOW = 1_000_000.0
STATS = SchedulerStats(server_thread_count=3, jobs_submitted=10, schedule_cycle_last=0.0015,
                       rpcs=(RpcStat("REQUEST_NODE_INFO", 3, 0.01),))

# Label values that need escaping, and "%", "{" that a template could trip on.
texts = st.sampled_from(["", "a", "gpu", "b c", 'q"t', "back\\slash", "new\nline", "50%", "%s", "{0}", "ünï"])
node_names = st.sampled_from(["n1", "n2", "n3", "n%d", 'n"4', "n5"])
node_states = st.frozensets(st.sampled_from(["IDLE", "MIXED", "ALLOCATED", "DOWN", "DRAIN", "COMPLETING",
                                             "NOT_RESPONDING", "MAINTENANCE", "RESERVED", "FAIL", "FUTURE",
                                             "REBOOT_REQUESTED", "INVALID_REG", "PLANNED"]), max_size=3)
counts = st.integers(min_value=0, max_value=300)


@st.composite
def node(draw, name=None):
    return Node(draw(node_names) if name is None else name, state=draw(node_states), cpus=draw(counts),
                alloc_cpus=draw(counts), real_memory=draw(counts), alloc_memory=draw(counts),
                gres=f"gpu:h100:{draw(st.integers(0, 8))}", gres_used=f"gpu:h100:{draw(st.integers(0, 8))}",
                partitions=tuple(draw(st.lists(st.sampled_from(["gpu", "all", "r%1", ""]), max_size=3))))


@st.composite
def job(draw, job_id=None):
    state = draw(st.sampled_from(["PENDING", "RUNNING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED"]))
    hosts = draw(st.lists(node_names, max_size=3, unique=True))
    listed = draw(st.booleans())
    return Job(
        draw(st.integers(1, 12)) if job_id is None else job_id, name=draw(texts), state=state,
        state_flags=draw(st.frozensets(st.sampled_from(["COMPLETING", "CONFIGURING", "REQUEUED"]), max_size=1)),
        state_reason=draw(st.sampled_from(["", "Dependency", "Priority"])),
        nodes=",".join(hosts),
        allocations=tuple(JobAllocation(h, cpus=draw(counts), gpus=draw(st.integers(0, 8))) for h in hosts)
        if listed else (),
        tres_alloc=f"cpu={draw(counts)},gres/gpu={draw(st.integers(0, 8))}" if draw(st.booleans()) else "",
        user_name=draw(st.sampled_from(["", "alice", 'b"ob'])), user_id=draw(st.one_of(st.none(), counts)),
        account=draw(texts), partition=draw(st.sampled_from(["gpu", "all", "%d"])),
        start_time=draw(st.sampled_from([None, 0, int(NOW) - 90, int(NOW) + 5, int(NOW) - 86400])),
    )


@st.composite
def snapshots(draw):
    """A few snapshots in a row: objects kept as they were, copied equal, changed, gone and new, in any order."""
    out = []
    jobs: dict[int, Job] = {}
    nodes: dict[str, Node] = {}
    for _ in range(draw(st.integers(1, 4))):
        for job_id in list(jobs):
            what = draw(st.sampled_from(["keep", "keep", "copy", "change", "drop"]))
            if what == "copy":
                jobs[job_id] = attrs.evolve(jobs[job_id])
            elif what == "change":
                jobs[job_id] = draw(job(job_id))
            elif what == "drop":
                del jobs[job_id]
        for new in draw(st.lists(job(), max_size=6)):
            jobs[new.id] = new
        for name in list(nodes):
            what = draw(st.sampled_from(["keep", "copy", "change", "drop"]))
            if what == "copy":
                nodes[name] = attrs.evolve(nodes[name])
            elif what == "change":
                nodes[name] = draw(node(name))
            elif what == "drop":
                del nodes[name]
        for new_node in draw(st.lists(node(), max_size=4)):
            nodes[new_node.name] = new_node
        order = draw(st.permutations(list(jobs)))
        out.append(SlurmSnapshot(nodes=dict(nodes), jobs={k: jobs[k] for k in order},
                                 stats=draw(st.sampled_from([None, STATS])), now=NOW + draw(st.integers(0, 100))))
    return out


def full(snapshot: SlurmSnapshot) -> str:
    return render(slurm_families(snapshot))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_the_same_bytes_as_the_full_renderer_scrape_after_scrape(snapshots):
    table = IncrementalTable()
    for snapshot in snapshots:
        assert table.render(snapshot) == full(snapshot)


def running(job_id, node="n1", start=int(NOW) - 90, cpus=8, **more):
    return Job(job_id, name=f"job{job_id}", state="RUNNING", nodes=node, user_name="alice", account="ml",
               partition="gpu", start_time=start, allocations=(JobAllocation(node, cpus=cpus, gpus=1),), **more)


NODES = {"n1": Node("n1", state="MIXED", cpus=64, alloc_cpus=8, partitions=("gpu",)),
         "n2": Node("n2", state="IDLE", cpus=64, partitions=("gpu",))}


def snap(jobs, nodes=NODES, now=NOW):
    return SlurmSnapshot(nodes=nodes, jobs={j.id: j for j in jobs}, stats=None, now=now)


def test_a_changed_job_shows_its_new_series_and_not_its_old_ones():
    table = IncrementalTable()
    before = table.render(snap([running(1), running(2)]))
    assert 'slurm_job_cpus_allocated{partition="gpu",account="ml",user="alice",id="1",node="n1"} 8\n' in before
    after = table.render(snap([running(1, node="n2", cpus=4), running(2)]))
    assert 'id="1",node="n1"' not in after
    assert 'slurm_job_cpus_allocated{partition="gpu",account="ml",user="alice",id="1",node="n2"} 4\n' in after
    ended = table.render(snap([attrs.evolve(running(1, node="n2", cpus=4), state="COMPLETED"), running(2)]))
    assert 'id="1",node=' not in ended
    assert 'slurm_job_state{partition="gpu",account="ml",user="alice",id="1",name="job1",state="COMPLETED"} 1\n' \
        in ended
    assert "\nslurm_queue_completed 1\n" in ended and "\nslurm_queue_running 1\n" in ended
    assert ended == full(snap([attrs.evolve(running(1, node="n2", cpus=4), state="COMPLETED"), running(2)]))


def test_a_gone_job_or_node_leaves_no_series():
    table = IncrementalTable()
    table.render(snap([running(1), running(2, node="n2")]))
    text = table.render(snap([running(2, node="n2")], nodes={"n2": NODES["n2"]}))
    assert 'id="1"' not in text and 'node="n1"' not in text
    assert 'slurm_jobs_running{partition="gpu",account="ml",user="alice"} 1\n' in text
    assert "\nslurm_nodes_total 1\n" in text and "\nslurm_nodes_mix 0\n" in text
    assert text == full(snap([running(2, node="n2")], nodes={"n2": NODES["n2"]}))
    empty = table.render(snap([], nodes={}))
    assert empty == full(snap([], nodes={}))
    assert "slurm_partition_cpu_total{" not in empty and "slurm_jobs_running{" not in empty


def test_unchanged_jobs_and_nodes_are_not_rendered_again():
    table = IncrementalTable()
    jobs = [running(i) for i in range(1, 101)]
    table.render(snap(jobs))
    assert (table.job_renders, table.node_renders) == (100, 2)
    table.render(snap(jobs))  # the same objects
    assert (table.job_renders, table.node_renders) == (100, 2)
    copies = {name: attrs.evolve(n) for name, n in NODES.items()}
    table.render(snap([attrs.evolve(j) for j in jobs], nodes=copies))  # a full list: new objects, equal
    assert (table.job_renders, table.node_renders) == (100, 2)
    jobs[7] = attrs.evolve(jobs[7], state_reason="changed")
    table.render(snap(jobs, nodes={**copies, "n2": attrs.evolve(NODES["n2"], alloc_cpus=4)}))
    assert (table.job_renders, table.node_renders) == (101, 3)


def test_uptime_follows_the_clock_for_a_job_that_did_not_change():
    table = IncrementalTable()
    jobs = [running(1, start=int(NOW) - 90)]
    assert 'slurm_job_uptime_seconds{partition="gpu",account="ml",user="alice",id="1",node="n1"} 90\n' in \
        table.render(snap(jobs))
    later = table.render(snap(jobs, now=NOW + 30.7))
    assert 'slurm_job_uptime_seconds{partition="gpu",account="ml",user="alice",id="1",node="n1"} 120\n' in later
    assert table.job_renders == 1
    assert later == full(snap(jobs, now=NOW + 30.7))


def collector(jobs, active):
    diag = DiagPoller(lambda: STATS, interval=10)
    diag.poll()
    return SlurmMetrics(nodes=lambda: NODES, jobs=lambda: {j.id: j for j in jobs}, diag=diag,
                        freshness=lambda: {"node": True, "job": False}, active=lambda: active[0],
                        clock=lambda: NOW)


def test_the_collector_renders_what_its_families_render_and_a_standby_holds_no_table():
    jobs, active = [running(1), running(2)], [True]
    metrics = collector(jobs, active)
    assert metrics.render() == render(metrics.families())
    assert metrics.render() == render(metrics.families())
    assert metrics.table.job_renders == 2
    active[0] = False
    assert metrics.render() == render(metrics.families())
    assert "slurm_job_state" not in metrics.render()
    active[0] = True
    assert metrics.render() == render(metrics.families())
    assert metrics.table.job_renders == 4  # led again: rendered anew
