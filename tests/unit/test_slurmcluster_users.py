"""The SlurmCluster's login users (sunk.translate.slurmcluster.users): read from ``spec.login.users``, every field
untrusted, and written as libnss-extrausers' files and sshd's key files; and the login Pods' ssh host key."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from slurmcluster_fakes import cluster

from sunk.translate.slurmcluster import desired, users
from sunk.translate.slurmcluster.plan import Facts, decide
from sunk.translate.slurmcluster.spec import read_spec


def public_key(seed: int = 1, kind: str = "ssh-ed25519", size: int = 0) -> str:
    """A key line of ``kind`` as OpenSSH writes it (an RSA key: exponent and a modulus of ``size`` bytes)."""
    def string(value: bytes) -> bytes:
        return len(value).to_bytes(4, "big") + value

    if kind == "ssh-rsa":
        size = size or 256
        body = string(b"\x01\x00\x01") + string(b"\x00" + bytes([0x80 | seed]) + bytes([seed]) * (size - 1))
    else:
        body = string(bytes([seed]) * (size or 32))
    return f"{kind} {base64.b64encode(string(kind.encode()) + body).decode()}"


ALICE = {"name": "alice", "uid": 5001, "authorizedKeys": [public_key(1) + " alice@laptop"]}
BOB = {"name": "bob", "uid": 5002, "gid": 5001, "authorizedKeys": [public_key(2), public_key(3)]}


def read(value: Any) -> tuple[tuple[users.LoginUser, ...], list[str]]:
    return users.read_users(value)


def test_users_become_passwd_and_group_lines_and_a_key_file_each():
    found, problems = read([ALICE, BOB, {"name": "carol", "uid": 5003}])
    assert problems == []
    data = users.files(found)
    assert data["passwd"] == ("alice:x:5001:5001::/home/alice:/bin/bash\n"
                              "bob:x:5002:5001::/home/bob:/bin/bash\n"
                              "carol:x:5003:5003::/home/carol:/bin/bash\n")
    # one group per primary gid, named after the user whose uid it is
    assert data["group"] == "alice:x:5001:\ncarol:x:5003:\n"
    assert data["authorized_keys.alice"] == public_key(1) + " alice@laptop\n"
    assert data["authorized_keys.bob"] == f"{public_key(2)}\n{public_key(3)}\n"
    assert "authorized_keys.carol" not in data  # (no key: no login over ssh)


def test_a_group_no_users_uid_names_takes_the_first_members_name():
    found, _ = read([{"name": "zed", "uid": 5010, "gid": 7000}, {"name": "amy", "uid": 5011, "gid": 7000}])
    assert users.group_text(found) == "amy:x:7000:\n"


def test_no_users_is_empty_files():
    assert read(None) == ((), []) and users.files(()) == {"passwd": "", "group": ""}


@pytest.mark.parametrize(("body", "problem"), [
    # a name that would add a line, a field or a path, or take an account of the image
    ({"name": "eve\nroot", "uid": 5001}, "is not a user name"),
    ({"name": "eve:x:0:0", "uid": 5001}, "is not a user name"),
    ({"name": "../etc", "uid": 5001}, "is not a user name"),
    ({"name": "Eve", "uid": 5001}, "is not a user name"),
    ({"name": "a" * 33, "uid": 5001}, "is not a user name"),
    ({"name": 7, "uid": 5001}, "is not a user name"),
    ({"name": "root", "uid": 5001}, "is a system account's"),
    ({"name": "slurm", "uid": 5001}, "is a system account's"),
    ({"name": "munge", "uid": 5001}, "is a system account's"),
    ({"name": "nonroot", "uid": 5001}, "is a system account's"),
    ({"name": "sshd", "uid": 5001}, "is a system account's"),
    # a uid or gid of root, a system account, nobody, nonroot (the munge key's group), SlurmUser, sunk's users
    ({"name": "eve", "uid": 0}, "uid must be a whole number from 1000 to 60000"),
    ({"name": "eve", "uid": 999}, "uid must be"),
    ({"name": "eve", "uid": 64030}, "uid must be"),
    ({"name": "eve", "uid": 65532}, "uid must be"),
    ({"name": "eve", "uid": 65534}, "uid must be"),
    ({"name": "eve", "uid": 5001, "gid": 0}, "gid must be"),
    ({"name": "eve", "uid": 5001, "gid": 65532}, "gid must be"),
    ({"name": "eve", "uid": 1999}, "uid 1999 is taken by sunk's images"),
    ({"name": "eve", "uid": 5001, "gid": 1998}, "gid 1998 is taken"),
    ({"name": "eve", "uid": True}, "uid must be"),
    ({"name": "eve", "uid": "5001"}, "uid must be"),
    ({"name": "eve"}, "uid must be"),
    # a key that would add a line, options, another type, or no key at all
    ({"name": "eve", "uid": 5001, "authorizedKeys": [public_key() + "\n" + public_key(9)]}, "is not '<type>"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": [f'command="/bin/sh" {public_key()}']}, "is not '<type>"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": [f"restrict,pty {public_key()}"]}, "is not '<type>"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": [public_key().replace("ssh-ed25519", "ssh-dss")]},
     "has the key type 'ssh-dss'"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": ["ssh-rsa " + public_key().split()[1]]},
     "is not a ssh-rsa key"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": ["ssh-ed25519 AAAA"]}, "is not a ssh-ed25519 key"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": ["ssh-ed25519 A"]}, "not base64"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": [public_key() + " caf\u00e9"]}, "is not '<type>"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": [public_key() + " " + "x" * 9000]}, "is longer than 8192"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": [7]}, "must be a string"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": public_key()}, "authorizedKeys must be a list"),
    ({"name": "eve", "uid": 5001, "authorizedKeys": [public_key(i) for i in range(17)]}, "has 17 keys"),
    ("eve", "must be an object"),
])
def test_a_bad_user_is_a_problem_and_no_user(body, problem):
    found, problems = read([body])
    assert found == ()
    assert len(problems) >= 1 and problem in problems[0], problems


def test_a_name_or_uid_given_twice_is_a_problem():
    assert read([ALICE, {**BOB, "name": "alice"}])[1] == ["spec.login.users[1].name 'alice' is given twice"]
    assert read([ALICE, {**BOB, "uid": 5001}])[1] == ["spec.login.users[1].uid 5001 is given twice"]


def test_users_must_be_a_list_and_not_too_many():
    assert read({"alice": 5001})[1] == ["spec.login.users must be a list"]
    assert read("alice")[1] == ["spec.login.users must be a list"]
    many = [{"name": f"u{i}", "uid": 5000 + i} for i in range(users.MAX_USERS + 1)]
    assert read(many)[1] == [f"spec.login.users has {users.MAX_USERS + 1} users; at most {users.MAX_USERS}"]


def test_users_whose_files_would_not_fit_in_a_configmap_are_a_problem():
    """1000 users with 16 long keys each pass every other check: the apiserver would refuse their ConfigMap at
    every reconcile."""
    def rsa(i: int) -> str:  # (an RSA key of 16384 bits: about 2800 characters)
        return public_key(i, "ssh-rsa", 2048) + " " + "c" * 200

    many = [{"name": f"u{i}", "uid": 5000 + i, "authorizedKeys": [rsa(i)] * 16} for i in range(100)]
    found, problems = read(many)
    assert found == () and len(problems) == 1 and "at most 921600 fit in the ConfigMap" in problems[0]
    assert read(many[:10])[1] == []


def test_one_key_logs_in_as_one_user_only():
    """Alice's key pasted under bob too would let alice log in as bob."""
    found, problems = read([ALICE, {**BOB, "authorizedKeys": [public_key(1) + " pasted"]}])
    assert found == (users.LoginUser("alice", 5001, 5001, ALICE["authorizedKeys"]),)
    assert problems == ["spec.login.users[1].authorizedKeys[0] is alice's key too: one key logs in as one user"]


def test_a_key_pasted_with_its_line_break_is_one_key():
    found, problems = read([{**ALICE, "authorizedKeys": [public_key(1) + " alice@laptop\n"]}])
    assert problems == [] and found[0].keys == (public_key(1) + " alice@laptop",)


def test_an_rsa_key_sshd_would_skip_is_refused():
    assert users.key_problem(public_key(1, "ssh-rsa", 64)) == "is an RSA key of 512 bits; sshd takes 1024 or more"
    assert users.key_problem(public_key(1, "ssh-rsa", 128)) == ""
    truncated = "ssh-rsa " + base64.b64encode(b"\x00\x00\x00\x07ssh-rsa\x00\x00\x00\x03\x01\x00\x01").decode()
    assert users.key_problem(truncated) == "has a key blob that is not a ssh-rsa key"  # (no modulus)


def test_every_key_type_openssh_takes_is_taken():
    for kind in users.KEY_TYPES:
        assert users.key_problem(public_key(1, kind) + " a comment") == "", kind


def test_a_spec_with_a_bad_user_is_applied_nowhere_and_says_why():
    plan = decide(Facts(cluster(login={"users": [ALICE, {"name": "root", "uid": 5009}]}), ["gpu"]))
    assert plan.spec is None and plan.objects == () and plan.secrets == ()
    assert any("spec.login.users[1].name 'root' is a system account's" in p for p in plan.problems)


def test_the_users_configmap_is_owned_by_the_cluster_and_made_with_no_users_too():
    for spec_users in ([], [ALICE]):
        plan = decide(Facts(cluster(login={"users": spec_users}), ["gpu"]))
        (cm,) = [o for o in plan.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "sc-login-users"]
        assert cm["metadata"]["ownerReferences"][0]["uid"] == "uid-sc"
        assert set(cm["data"]) == {"passwd", "group", *(["authorized_keys.alice"] if spec_users else [])}


def test_the_host_key_is_an_ed25519_key_in_openssh_format_from_the_callers_bytes():
    spec = read_spec(cluster(), ("gpu",)).spec
    assert spec is not None
    (wanted,) = [w for w in desired.wanted_secrets(spec) if w.ssh]
    assert (wanted.name, wanted.key, desired.material_size(wanted)) == ("sc-login-host-keys",
                                                                       "ssh_host_ed25519_key", 32)
    secret = desired.secret_object(spec, wanted, bytes(range(32)))
    private = base64.b64decode(secret["data"]["ssh_host_ed25519_key"])
    public = base64.b64decode(secret["data"]["ssh_host_ed25519_key.pub"])
    assert private.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    key = serialization.load_ssh_private_key(private, None)
    assert key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH) + b"\n" == public
    assert public.startswith(b"ssh-ed25519 ") and users.key_problem(public.decode().strip()) == ""
    # the same bytes, the same key (the format's check number is random: not the same file); others, another
    again = desired.secret_object(spec, wanted, bytes(range(32)))["data"]
    assert again["ssh_host_ed25519_key.pub"] == secret["data"]["ssh_host_ed25519_key.pub"]
    other = desired.secret_object(spec, wanted, bytes(32))["data"]
    assert other["ssh_host_ed25519_key.pub"] != secret["data"]["ssh_host_ed25519_key.pub"]
    assert "ownerReferences" not in secret["metadata"]  # (kept after an uninstall: the clients' known_hosts)
