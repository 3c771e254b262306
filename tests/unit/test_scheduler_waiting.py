"""What a waiting Pod shows (scheduler/waiting.py): its condition, when it is written, the metric's labels."""

from __future__ import annotations

import pytest

from scheduler.waiting import (
    CONDITION_MIN_INTERVAL,
    MESSAGE_MAX,
    SLURM_REASONS,
    WaitCondition,
    current_condition,
    metric_reason,
    wait_condition,
    wait_message,
    waiting_exposition,
    write_due,
)


@pytest.mark.parametrize("job_id, partition, why, expected", [
    (42, "gpu", "ReqNodeNotAvail", "Slurm job 42 (partition gpu): ReqNodeNotAvail"),
    (42, "", "submitted; waiting for Slurm to report the job", "Slurm job 42: submitted; waiting for Slurm to "
                                                               "report the job"),
    (42, "a\nb\x1b[31m", "Priority", "Slurm job 42 (partition a?b?[31m): Priority"),  # the Pod's own text: printable
])
def test_the_message_names_the_job_its_partition_and_why(job_id, partition, why, expected):
    assert wait_message(job_id, partition, why) == expected


def test_the_message_is_bounded():
    assert len(wait_message(1, "p" * 5000, "Priority")) == MESSAGE_MAX


def test_the_condition_is_podscheduled_false_waiting_for_slurm():
    assert wait_condition(7, "gpu", "Resources").as_condition() == {
        "type": "PodScheduled", "status": "False", "reason": "WaitingForSlurm",
        "message": "Slurm job 7 (partition gpu): Resources"}


@pytest.mark.parametrize("conditions, expected", [
    (None, None),
    ([], None),
    ([{"type": "Ready", "status": "False"}], None),
    ([{"type": "PodScheduled", "status": "True"}], None),  # bound: nothing of ours shown
    ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "sunk: bad"}],
     WaitCondition("Unschedulable", "sunk: bad")),
    ([{"type": "PodScheduled", "status": "False"}], WaitCondition("", "")),
    (["not a mapping", {"type": "PodScheduled", "status": "False", "reason": "WaitingForSlurm", "message": "m"}],
     WaitCondition("WaitingForSlurm", "m")),
])
def test_the_condition_shown_is_read_from_the_pod(conditions, expected):
    pod = {"status": {"conditions": conditions}} if conditions is not None else {}
    assert current_condition(pod) == expected


WANTED = WaitCondition("WaitingForSlurm", "Slurm job 7: ReqNodeNotAvail")
OTHER = WaitCondition("WaitingForSlurm", "Slurm job 7: Priority")


@pytest.mark.parametrize("shown, last_write, now, expected", [
    (WANTED, None, 100.0, None),  # shown already: never, even right after a restart
    (WANTED, 99.0, 100.0, None),
    (None, None, 100.0, 0.0),  # nothing shown, nothing written by this process: now
    (OTHER, None, 100.0, 0.0),  # a restart: the Pod's own condition says what is to be written
    (OTHER, 100.0 - CONDITION_MIN_INTERVAL, 100.0, 0.0),  # the interval is out
    (OTHER, 99.0, 100.0, CONDITION_MIN_INTERVAL - 1.0),  # written a second ago: held back for the rest
    (None, 99.0, 100.0, CONDITION_MIN_INTERVAL - 1.0),  # (a Pod copy behind our own write, too)
])
def test_when_to_write(shown, last_write, now, expected):
    due = write_due(shown, WANTED, last_write, now)
    assert due is None if expected is None else due == pytest.approx(expected)


@pytest.mark.parametrize("reason, label", [
    ("", "None"),
    ("None", "None"),
    ("ReqNodeNotAvail", "ReqNodeNotAvail"),
    ("QOSMaxJobsPerUserLimit", "QOSMaxJobsPerUserLimit"),
    ("Prolog", "Prolog"),
    ("a reason no Slurm gives", "Other"),
    ('evil"} 1\nsunk_pods_waiting{reason="x', "Other"),
])
def test_the_metric_label_is_slurms_reason_or_other(reason, label):
    assert metric_reason(reason) == label


def test_every_known_reason_is_a_safe_label():
    assert all(r.isascii() and r.isalnum() for r in SLURM_REASONS)


def test_the_exposition_counts_pods_by_reason():
    text = waiting_exposition(["Priority", "ReqNodeNotAvail", "Priority", "??", ""])
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert samples == ['sunk_pods_waiting{reason="None"} 1', 'sunk_pods_waiting{reason="Other"} 1',
                       'sunk_pods_waiting{reason="Priority"} 2', 'sunk_pods_waiting{reason="ReqNodeNotAvail"} 1']
    assert "# TYPE sunk_pods_waiting gauge" in text


def test_the_exposition_has_the_family_while_nothing_waits():
    assert waiting_exposition([]).splitlines()[-1] == 'sunk_pods_waiting{reason="None"} 0'
