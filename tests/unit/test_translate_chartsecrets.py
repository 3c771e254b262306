"""sunk.translate.chartsecrets: which of the chart's Secrets to make, which to leave, and what is wrong with one."""

from __future__ import annotations

import base64
import datetime
import itertools
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sunk.hooks.auth import weakness
from sunk.translate import chartsecrets as cs

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
HOOKS = cs.TokenSecret("sunk-hooks", ("syncer-token", "scheduler-hook-secret"))
PAIR = cs.TLSPair("sunk-extender-tls", "sunk-extender-client-tls", "sunk-extender", "slurm", "sunk-kube-scheduler", 30)
_counter = itertools.count()


def token() -> str:
    return f"token-{next(_counter):02d}-" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUV"[:55]


def secret(name: str, data: dict[str, bytes], **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def pair_secrets(pair: cs.TLSPair = PAIR, now: datetime.datetime = NOW) -> dict[str, dict[str, Any]]:
    server, client = cs.new_tls_pair(pair, now)
    return {pair.server: secret(pair.server, server), pair.client: secret(pair.client, client)}


def data_of(obj: dict[str, Any]) -> dict[str, bytes]:
    data, problems = cs.decoded(obj)
    assert not problems
    return data


# ---- tokens ------------------------------------------------------------------------------------


def test_a_missing_token_secret_is_created_with_a_token_per_key():
    plan = cs.plan([HOOKS], {}, NOW, token=token)
    assert plan.problems == () and plan.keep == ()
    (write,) = plan.writes
    assert write.secret == "sunk-hooks" and write.create
    assert set(write.data) == set(HOOKS.keys)
    assert len(set(write.data.values())) == 2  # one token each, not one shared


def test_the_default_token_is_64_url_safe_characters_and_strong_enough_for_the_daemons():
    made = {cs.new_token() for _ in range(20)}
    assert len(made) == 20
    assert all(len(t) == 64 and weakness(t.encode()) is None for t in made)
    assert all(set(t) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") for t in made)


def test_an_existing_token_secret_is_left_as_it_is():
    there = secret("sunk-hooks", {"syncer-token": b"x" * 10 + b"abcdefghijklmnopqrstuvwxyz0123",
                                  "scheduler-hook-secret": b"0123456789abcdefghijklmnopqrstuvwxyz"})
    assert cs.plan([HOOKS], {"sunk-hooks": there}, NOW, token=token, weakness=weakness) == cs.Plan()


@pytest.mark.parametrize("data, key, reason", [
    ({"syncer-token": b"s" * 8 + b"abcdefghijklmnopqrstuvwxyz0123456"}, "scheduler-hook-secret", "is missing"),
    ({"syncer-token": b"  \n", "scheduler-hook-secret": b"abcdefghijklmnopqrstuvwxyz0123456789"}, "syncer-token",
     "is empty"),
    ({"syncer-token": b"changeme", "scheduler-hook-secret": b"abcdefghijklmnopqrstuvwxyz0123456789"},
     "syncer-token", "placeholder"),
])
def test_an_unusable_token_key_is_reported_by_name_and_nothing_is_written(data, key, reason):
    plan = cs.plan([HOOKS], {"sunk-hooks": secret("sunk-hooks", data)}, NOW, token=token, weakness=weakness)
    assert plan.writes == ()
    (problem,) = plan.problems
    assert (problem.secret, problem.key) == ("sunk-hooks", key) and reason in problem.reason
    assert str(problem).startswith(f"Secret sunk-hooks, key {key}: ")


def test_repair_fills_only_the_unusable_keys_and_keeps_the_others():
    good = b"abcdefghijklmnopqrstuvwxyz0123456789"
    there = secret("sunk-hooks", {"syncer-token": good, "other": b"kept"})
    plan = cs.plan([HOOKS], {"sunk-hooks": there}, NOW, repair=True, token=token)
    (write,) = plan.writes
    assert not write.create and plan.problems == ()
    assert write.data["syncer-token"] == good and write.data["other"] == b"kept"
    assert write.data["scheduler-hook-secret"].startswith(b"token-")


def test_data_that_is_not_base64_is_a_problem_not_an_exception():
    there = {"metadata": {"name": "sunk-hooks"}, "data": {"syncer-token": "!!!not base64", "scheduler-hook-secret":
                                                          base64.b64encode(b"a" * 40).decode()}}
    plan = cs.plan([HOOKS], {"sunk-hooks": there}, NOW, token=token)
    assert [(p.key, p.reason) for p in plan.problems] == [("syncer-token", "is not base64")]


def test_data_that_is_not_a_map_is_a_problem():
    data, problems = cs.decoded({"metadata": {"name": "s"}, "data": ["x"]})
    assert data == {} and [str(p) for p in problems] == ["Secret s: its data is not a map"]


# ---- the TLS pair ------------------------------------------------------------------------------


def test_a_missing_pair_is_made_from_one_ca_server_first():
    plan = cs.plan([PAIR], {}, NOW)
    assert [(w.secret, w.create) for w in plan.writes] == [(PAIR.server, True), (PAIR.client, True)]
    server, client = (w.data for w in plan.writes)
    assert set(server) == set(client) == set(cs.TLS_KEYS)
    assert server["ca.crt"] == client["ca.crt"]
    assert cs.tls_problems(PAIR, server, client, NOW) == []


def test_the_server_certificate_names_every_service_name_and_the_client_its_common_name():
    server, client = cs.new_tls_pair(PAIR, NOW)
    cert = x509.load_pem_x509_certificate(server["tls.crt"])
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "sunk-extender", "sunk-extender.slurm", "sunk-extender.slurm.svc", "sunk-extender.slurm.svc.cluster.local"]
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH])
    client_cert = x509.load_pem_x509_certificate(client["tls.crt"])
    assert client_cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "sunk-kube-scheduler"
    assert client_cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.CLIENT_AUTH])
    ca = x509.load_pem_x509_certificate(server["ca.crt"])
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_validity_is_the_values_days_from_a_little_before_now():
    server, _ = cs.new_tls_pair(PAIR, NOW)
    cert = x509.load_pem_x509_certificate(server["tls.crt"])
    assert cert.not_valid_before_utc == NOW - cs.BACKDATE
    assert cert.not_valid_after_utc == NOW + datetime.timedelta(days=30)


def test_the_made_pair_completes_a_mutual_tls_handshake_in_python_ssl():
    """What the extender (gunicorn's ssl) and kube-scheduler load: both contexts accept the files."""
    server, client = cs.new_tls_pair(PAIR, datetime.datetime.now(datetime.UTC))
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for who, data in (("server", server), ("client", client)):
            for key, value in data.items():
                path = Path(tmp, f"{who}-{key}")
                path.write_bytes(value)
                paths[who, key] = str(path)
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=paths["server", "ca.crt"])
        serving.load_cert_chain(paths["server", "tls.crt"], paths["server", "tls.key"])
        serving.verify_mode = ssl.CERT_REQUIRED
        calling = ssl.create_default_context(cafile=paths["client", "ca.crt"])
        calling.load_cert_chain(paths["client", "tls.crt"], paths["client", "tls.key"])
        s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
        s = serving.wrap_bio(s_in, s_out, server_side=True)
        c = calling.wrap_bio(c_in, c_out, server_hostname="sunk-extender.slurm.svc")
        for _ in range(10):  # memory BIOs: each side's bytes handed to the other until both are done
            for end in (c, s):
                try:
                    end.do_handshake()
                except ssl.SSLWantReadError:
                    pass
            s_in.write(c_out.read())
            c_in.write(s_out.read())
        c.do_handshake()
        s.do_handshake()
        assert s.getpeercert()["subject"] == ((("commonName", "sunk-kube-scheduler"),),)


def test_an_existing_valid_pair_is_left_as_it_is():
    assert cs.plan([PAIR], pair_secrets(), NOW) == cs.Plan()


def test_pairs_from_two_cas_are_reported_not_made_again():
    one, other = pair_secrets(), pair_secrets()
    plan = cs.plan([PAIR], {PAIR.server: one[PAIR.server], PAIR.client: other[PAIR.client]}, NOW)
    assert plan.writes == ()
    assert any(p.secret == PAIR.client and p.key == "ca.crt" and "share one CA" in p.reason for p in plan.problems)
    assert len(plan.problems) == 1  # each Secret is whole by itself


def test_a_ca_that_did_not_sign_the_certificate_beside_it_is_reported():
    other_ca = data_of(pair_secrets()[PAIR.server])["ca.crt"]
    plan = cs.plan([PAIR], broken("ca.crt", other_ca), NOW)
    assert {(p.secret, p.key, p.reason) for p in plan.problems} >= {
        (PAIR.server, "tls.crt", "is not signed by its ca.crt")}
    assert any(p.key == "ca.crt" and "share one CA" in p.reason for p in plan.problems)


@pytest.mark.parametrize("gone", [PAIR.server, PAIR.client])
def test_half_a_pair_is_a_problem_naming_the_missing_secret(gone):
    there = {name: obj for name, obj in pair_secrets().items() if name != gone}
    plan = cs.plan([PAIR], there, NOW)
    assert plan.writes == ()
    (problem,) = plan.problems
    assert problem.secret == gone and "is missing" in problem.reason and "as a whole" in problem.reason


@pytest.mark.parametrize("gone", [PAIR.server, PAIR.client])
def test_repair_makes_half_a_pair_again_as_a_whole(gone):
    there = {name: obj for name, obj in pair_secrets().items() if name != gone}
    plan = cs.plan([PAIR], there, NOW, repair=True)
    assert plan.problems == ()
    assert {(w.secret, w.create) for w in plan.writes} == {(gone, True), (next(iter(there)), False)}
    server, client = (w.data for w in plan.writes)
    assert cs.tls_problems(PAIR, server, client, NOW) == []


def broken(key: str, value: bytes, which: str = PAIR.server) -> dict[str, dict[str, Any]]:
    there = pair_secrets()
    data = data_of(there[which])
    data[key] = value
    there[which] = secret(which, data)
    return there


@pytest.mark.parametrize("key, value, reason", [
    ("tls.crt", b"-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n", "is not a PEM certificate"),
    ("ca.crt", b"nope", "is not a PEM certificate"),
    ("tls.key", b"nope", "is not an unencrypted PEM private key"),
    ("tls.crt", b"", "is missing"),
])
def test_an_unparsable_or_empty_key_is_reported_by_secret_and_key(key, value, reason):
    plan = cs.plan([PAIR], broken(key, value), NOW)
    assert plan.writes == ()
    assert any((p.secret, p.key) == (PAIR.server, key) and p.reason == reason for p in plan.problems), plan.problems


def test_a_key_of_another_certificate_is_reported():
    other = data_of(pair_secrets()[PAIR.server])["tls.key"]
    plan = cs.plan([PAIR], broken("tls.key", other), NOW)
    assert [(p.secret, p.key, p.reason) for p in plan.problems] == [(PAIR.server, "tls.key", "does not match tls.crt")]


def test_an_expired_pair_is_reported_and_repair_makes_a_new_one():
    there = pair_secrets(now=NOW - datetime.timedelta(days=31))
    plan = cs.plan([PAIR], there, NOW)
    assert {(p.secret, p.key) for p in plan.problems} == {(PAIR.server, "tls.crt"), (PAIR.client, "tls.crt")}
    assert all("expired" in p.reason for p in plan.problems)
    repaired = cs.plan([PAIR], there, NOW, repair=True)
    assert [(w.secret, w.create) for w in repaired.writes] == [(PAIR.server, False), (PAIR.client, False)]


def test_a_serving_certificate_for_another_service_is_reported():
    there = pair_secrets(pair=cs.TLSPair(PAIR.server, PAIR.client, "other", "slurm", "x", 30))
    plan = cs.plan([PAIR], there, NOW)
    (problem,) = plan.problems
    assert (problem.secret, problem.key) == (PAIR.server, "tls.crt")
    assert "does not name sunk-extender," in problem.reason


# ---- Helm's ownership --------------------------------------------------------------------------

HELMS = {"labels": {"app.kubernetes.io/managed-by": "Helm"},
         "annotations": {"meta.helm.sh/release-name": "sunk", "meta.helm.sh/release-namespace": "slurm"}}


@pytest.mark.parametrize("meta, wanted", [
    (HELMS, True),
    ({"labels": {"app.kubernetes.io/managed-by": "Helm"}}, True),
    ({"annotations": {"meta.helm.sh/release-name": "sunk"}}, True),
    ({**HELMS, "annotations": {**HELMS["annotations"], cs.KEEP_ANNOTATION: cs.KEEP}}, False),
    ({"labels": {"app.kubernetes.io/managed-by": "sunk-syncer"}}, False),
    ({}, False),
])
def test_only_a_secret_helm_would_delete_gets_the_keep_annotation(meta, wanted):
    obj = {"metadata": {"name": "x", **meta}}
    assert cs.needs_keep(obj) is wanted


def test_the_plan_asks_to_keep_every_existing_helm_owned_secret_and_writes_no_data_to_them():
    there = pair_secrets()
    there[PAIR.server]["metadata"].update(HELMS)
    hooks = secret("sunk-hooks", {"syncer-token": b"a" * 40, "scheduler-hook-secret": b"b" * 40}, **HELMS)
    plan = cs.plan([HOOKS, PAIR], {**there, "sunk-hooks": hooks}, NOW)
    assert plan.keep == ("sunk-hooks", PAIR.server) and plan.writes == () and plan.problems == ()


def test_a_secret_named_by_no_spec_is_never_touched():
    stranger = secret("someone-else", {"k": b"v"}, **HELMS)
    plan = cs.plan([HOOKS], {"someone-else": stranger}, NOW, token=token)
    assert plan.keep == () and [w.secret for w in plan.writes] == ["sunk-hooks"]
