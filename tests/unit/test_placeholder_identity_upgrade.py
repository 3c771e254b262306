"""A placeholder's identity across an upgrade, and against tenants.

Jobs submitted by the previous release live on across an upgrade: their AdminComments, captured
below as literals exactly as that code wrote them (a lone Pod's ``sunk-pod=`` and a gang's
``sunk-gang=``, each with and without ``sched=``), must still name the same owner, the string the
job index, the work queue and the hook tokens are keyed by. The owner is read through the
scheduler's own parser (``scheduler.assembly.identity_parser``) and the Syncer's drain rule
(``drains.outlived``), which read it today as they did before one identity type replaced two.

Identity is read from AdminComment only (Slurm's super users write it); a job's Comment, Extra and
name are its user's to write, so the same text there makes no placeholder.
"""

from __future__ import annotations

import pytest

from scheduler.assembly import identity_parser
from scheduler.config import SchedulerConfig
from scheduler.tokens import hook_token
from sunk.model.slurm import Job
from sunk.translate.drains import outlived
from sunk.translate.identity import identity_of, is_placeholder, member_tag

POD_UID = "0f8a1c2e-5b7d-4e39-9a61-2c4d8e0b7f13"
GANG_UIDS = ("uid-0", "uid-1", "uid-2")  # member_tag: 72faa1a2, 4a49acf8, afaec2d5
LONE = f"sunk-pod={POD_UID} ns=team-a name=web-0 sched=slurm-sunk"
LONE_UNSCOPED = f"sunk-pod={POD_UID} ns=team-a name=web-0"
GANG = ("sunk-gang=job/7c1e9f20-3a4b-4c5d-8e6f-90a1b2c3d4e5 ns=team-a size=3 "
        "members=72faa1a2,4a49acf8,afaec2d5 sched=slurm-sunk")
GANG_UNSCOPED = "sunk-gang=lws/llm/0 ns=team-a size=2 members=72faa1a2,4a49acf8"

# (AdminComment as written, its scheduler, the owner it names, the member UIDs it holds a place for)
WRITTEN = [
    (LONE, "slurm-sunk", POD_UID, (POD_UID,)),
    (LONE_UNSCOPED, "", POD_UID, (POD_UID,)),
    (GANG, "slurm-sunk", "gang:team-a/job/7c1e9f20-3a4b-4c5d-8e6f-90a1b2c3d4e5", GANG_UIDS),
    (GANG_UNSCOPED, "", "gang:team-a/lws/llm/0", GANG_UIDS[:2]),
]


def parser(scheduler: str, namespaces: tuple[str, ...] = ()):
    return identity_parser(SchedulerConfig(scheduler, b"x" * 16, "http://h", namespaces=namespaces))


def pod(uid: str, namespace: str = "team-a") -> dict:
    return {"metadata": {"uid": uid, "namespace": namespace, "name": f"p-{uid}"}, "spec": {}, "status": {}}


def test_the_literals_are_what_member_tag_makes():
    assert [member_tag(uid) for uid in GANG_UIDS] == ["72faa1a2", "4a49acf8", "afaec2d5"]


@pytest.mark.parametrize(("text", "scheduler", "owner", "members"), WRITTEN)
def test_an_identity_the_previous_release_wrote_names_the_same_owner(text, scheduler, owner, members):
    job = Job(id=7, state="RUNNING", admin_comment=text)
    assert is_placeholder(job)
    assert parser(scheduler)(job) == (owner, True)
    assert parser(scheduler, namespaces=("team-a",))(job) == (owner, True)
    assert parser(scheduler, namespaces=("team-b",))(job) is None  # (its namespace is read too)
    assert parser("another-scheduler")(job) is None  # (and its scheduler)


@pytest.mark.parametrize(("text", "scheduler", "owner", "members"), WRITTEN)
def test_an_identity_the_previous_release_wrote_holds_a_place_for_the_same_members(text, scheduler, owner, members):
    job = Job(id=7, state="COMPLETING", admin_comment=text)
    for uid in members:
        found = outlived(job, [pod(uid)])
        assert found is not None and found.pod["metadata"]["uid"] == uid
    assert outlived(job, [pod("another-uid")]) is None
    assert outlived(job, [pod(members[0], namespace="team-b")]) is None


@pytest.mark.parametrize(("text", "scheduler", "owner", "members"), WRITTEN)
def test_the_owner_an_identity_names_is_the_string_its_hook_token_was_signed_over(text, scheduler, owner, members):
    identity = identity_of(Job(id=7, admin_comment=text))
    assert identity is not None
    assert str(identity.unit) == owner
    assert hook_token(b"s" * 16, str(identity.unit)) == hook_token(b"s" * 16, owner)


@pytest.mark.parametrize(("text", "scheduler", "owner", "members"), WRITTEN)
@pytest.mark.parametrize("field", ["comment", "extra", "name"])
def test_an_identity_a_tenant_writes_where_they_may_makes_no_placeholder(text, scheduler, owner, members, field):
    forged = Job(id=7, state="RUNNING", **{field: text})
    assert identity_of(forged) is None and not is_placeholder(forged)
    assert parser(scheduler)(forged) is None
    assert outlived(forged, [pod(uid) for uid in members]) is None
    # (and beside a real identity, the forged one is never what is read)
    scoped = f" sched={scheduler}" if scheduler else ""
    real = Job(id=7, state="RUNNING", admin_comment=f"sunk-pod=mine ns=team-a name=p{scoped}", **{field: text})
    assert parser(scheduler)(real) == ("mine", True)
