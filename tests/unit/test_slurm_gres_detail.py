"""A job's per-node GRES detail (``gres_detail``, ``scontrol show job -d``) read into GresGrant values: the forms
Slurm 25.11's gres_stepmgr_job_build_details writes, and refusals for anything else (indices choose a Pod's
devices, so a detail that does not read is never half-read)."""

from __future__ import annotations

import pytest

from sunk.model.slurm import MAX_GRES_INDEX, GresGrant, JobAllocation, parse_gres_detail


@pytest.mark.parametrize(("text", "grants"), [
    ("", ()),
    ("gpu:a100:2(IDX:0,2)", (GresGrant("gpu", "a100", 2, (0, 2)),)),
    ("gpu:4(IDX:0-3)", (GresGrant("gpu", "", 4, (0, 1, 2, 3)),)),
    ("gpu:h100:3(IDX:0-1,5)", (GresGrant("gpu", "h100", 3, (0, 1, 5)),)),
    ("gpu:a100:2(IDX:0,2),nic:1(IDX:0)", (GresGrant("gpu", "a100", 2, (0, 2)), GresGrant("nic", "", 1, (0,)))),
    ("gpu:1g.10gb:1(IDX:3)", (GresGrant("gpu", "1g.10gb", 1, (3,)),)),
    ("gpu:nvidia_a100-sxm4-80gb:1(IDX:7)", (GresGrant("gpu", "nvidia_a100-sxm4-80gb", 1, (7,)),)),
    ("fpga-x:xilinx_u250:1(IDX:0)", (GresGrant("fpga-x", "xilinx_u250", 1, (0,)),)),  # (Slurm checks no name)
    ("gpu(CNT:2)", (GresGrant("gpu", "", 2, ()),)),
    ("gpu:a100(CNT:2)", (GresGrant("gpu", "a100", 2, ()),)),
    ("shard:a100:3(1/4,0/4,2/4)", (GresGrant("shard", "a100", 3, shares=((0, 1), (2, 2))),)),
    ("gpu:2", (GresGrant("gpu", "", 2, ()),)),  # (pyslurm's text without indexes)
    ("gpu:2(IDX:2,0)", (GresGrant("gpu", "", 2, (0, 2)),)),  # (sorted)
])
def test_every_form_slurm_writes_reads_into_grants(text, grants):
    assert parse_gres_detail(text) == grants


@pytest.mark.parametrize("text", [
    "gpu:2(IDX:0,0)",  # an index twice
    "gpu:2(IDX:1-0)",
    f"gpu:2(IDX:0-{MAX_GRES_INDEX})",  # (no node has that many: not Slurm's)
    "gpu:2(IDX:a)",
    "gpu:2(IDX:0-)",
    "gpu:2(IDX:0",  # unbalanced
    "gpu:2IDX:0)",
    "gpu:2((IDX:0))",
    "gpu:2(IDX:0)x",
    "gpu:x(IDX:0)",  # count not a number
    "gpu(CNT:x)",
    ":2(IDX:0)",
    "gpu:a:b:2(IDX:0)",
    "shard:2(1/4,x)",
    "shard:2(1/4,2)",
    "gpu:2(FOO:1)",
    "g pu:2(IDX:0)",
    "gpu:0(IDX:N/A)",  # (a node's GresUsed form, never a job's)
    "gpu:0(IDX:0)",  # a no_consume GPU: Slurm shares it between jobs, no device is the job's
    "gpu:3(IDX:0-1)",  # count and indices differ
    "gpu:1(IDX:0-1)",
    "shard:3((null))",  # (Slurm's shares when it could not find the node's record)
    "gpu:64(IDX:" + ",".join(str(i) for i in range(0, 128, 2)) + ")",  # as long as Slurm's buffer: perhaps cut
])
def test_anything_else_is_refused_whole(text):
    with pytest.raises(ValueError):
        parse_gres_detail(text)


def test_an_allocation_keeps_its_grants_and_counts_its_gpus_from_them():
    allocation = JobAllocation.with_gres_detail("n1", cpus=4, memory=100, detail="gpu:a100:2(IDX:1,3),nic:1(IDX:0)")
    assert allocation.gpus == 2
    assert allocation.gres == (GresGrant("gpu", "a100", 2, (1, 3)), GresGrant("nic", "", 1, (0,)))
    assert JobAllocation.with_gres_detail("n1", 1, 1, "gpu(CNT:2)").gpus == 2  # (no device files: a count only)


def test_an_allocation_whose_detail_does_not_read_keeps_its_count_and_says_so():
    allocation = JobAllocation.with_gres_detail("n1", cpus=1, memory=1, detail="gpu:a100:2(IDX:0,0)")
    assert (allocation.gpus, allocation.gres, allocation.gres_unread) == (2, (), True)
    empty = JobAllocation.with_gres_detail("n1", 1, 1, "")
    assert (empty.gres, empty.gres_unread) == ((), False)


def test_of_a_detail_each_gres_reads_on_its_own():
    """One GRES Slurm details oddly leaves the others read, and the allocation says something did not read."""
    allocation = JobAllocation.with_gres_detail("n1", 1, 1, "gpu:a100:2(IDX:1,3),shard:3((null)),nic:1(IDX:0)")
    assert allocation.gres == (GresGrant("gpu", "a100", 2, (1, 3)), GresGrant("nic", "", 1, (0,)))
    assert allocation.gres_unread and allocation.gpus == 2


def test_the_same_detail_is_read_once_and_shared():
    one = JobAllocation.with_gres_detail("n1", 1, 1, "gpu:h100:8(IDX:0-7)")
    two = JobAllocation.with_gres_detail("n2", 2, 2, "gpu:h100:8(IDX:0-7)")
    assert one.gres is two.gres
