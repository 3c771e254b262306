"""The Secrets the chart needs, made once outside the render: what is missing, what is wrong, what to write.

Why outside the render: a chart that makes its secrets with ``randAlphaNum``/``genCA`` and
remembers them with ``lookup`` makes new ones at every render where ``lookup`` sees nothing
(``helm template``, Argo CD, Flux without cluster access), so every sync would rotate them
under running components. ``sunk-syncer ensure-secrets`` (a pre-install/pre-upgrade hook
Job, ``sunk/syncer/secrets.py``) creates what is missing and never overwrites what exists;
this module decides what that is, from what the apiserver holds.

Two kinds of Secret:

- ``TokenSecret``: random tokens (the hooks Secret: ``syncer-token``, ``scheduler-hook-secret``).
- ``TLSPair``: the extender's serving certificate and kube-scheduler's client certificate,
  each Secret with ``tls.crt``, ``tls.key`` and the one CA's ``ca.crt`` (the CA's key is
  thrown away: nothing ever signs again, a new pair is a new CA).

An existing Secret that lacks a key, or a pair that does not verify, is a ``Problem``: never
quietly made again (that would rotate a secret under the components that hold it), unless
the run is told to repair (``repair=True``), which rewrites only what is wrong: a token
Secret's missing keys, or the whole pair (one CA for both).

Every byte of an existing Secret is untrusted: anyone who may write Secrets in the namespace
may have put it there. Pure: certificates are made and read in memory (``cryptography``).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

import attrs
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TLS_KEYS: tuple[str, ...] = ("tls.crt", "tls.key", "ca.crt")
TOKEN_CHARS = 64  # as the chart's randAlphaNum 64 made them
# Certificates start a little in the past: a Node whose clock is behind must not see them "not yet valid".
BACKDATE = datetime.timedelta(minutes=5)
# Helm's annotation that keeps an object it would otherwise delete (helm v3 pkg/kube/client.go,
# Update: the live object is read again before each deletion, and skipped when it says keep).
KEEP_ANNOTATION = "helm.sh/resource-policy"
KEEP = "keep"

Data = Mapping[str, bytes]  # a Secret's data, decoded
Token = Callable[[], str]


def new_token() -> str:
    """64 URL-safe characters (48 random bytes)."""
    return secrets.token_urlsafe(TOKEN_CHARS * 3 // 4)


@attrs.frozen
class TokenSecret:
    """A Secret of random tokens, one per key."""

    name: str
    keys: tuple[str, ...]


@attrs.frozen
class TLSPair:
    """The extender's serving Secret and kube-scheduler's client Secret, from one CA."""

    server: str  # Secret name
    client: str  # Secret name
    service: str  # the extender's Service
    namespace: str
    client_cn: str  # kube-scheduler's certificate's common name
    validity_days: int

    @property
    def hostnames(self) -> tuple[str, ...]:
        """Every name a caller in the cluster may reach the Service by."""
        svc, ns = self.service, self.namespace
        return (svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local")


Spec = Union[TokenSecret, TLSPair]


@attrs.frozen
class Problem:
    """Why an existing Secret cannot be used as it is: a line for the log and the exit message."""

    secret: str
    key: str | None
    reason: str

    def __str__(self) -> str:
        where = f"Secret {self.secret}" + (f", key {self.key}" if self.key else "")
        return f"{where}: {self.reason}"


@attrs.frozen
class Write:
    """Data to write to a Secret: ``create`` (it is not there) or, with repair only, replace its data."""

    secret: str
    data: Mapping[str, bytes]
    create: bool


@attrs.frozen
class Plan:
    writes: tuple[Write, ...] = ()
    problems: tuple[Problem, ...] = ()  # left as they are (repair off)
    keep: tuple[str, ...] = ()  # existing Secrets Helm owns that lack the keep annotation


# ---- reading what is there ---------------------------------------------------------------------


def decoded(secret: Mapping[str, Any]) -> tuple[dict[str, bytes], list[Problem]]:
    """A Secret's ``data``, base64-decoded; a value that is not base64 is a problem, not an exception."""
    name = str((secret.get("metadata") or {}).get("name", ""))
    raw = secret.get("data") or {}
    out: dict[str, bytes] = {}
    problems: list[Problem] = []
    if not isinstance(raw, Mapping):
        return out, [Problem(name, None, "its data is not a map")]
    for key, value in raw.items():
        try:
            out[str(key)] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            problems.append(Problem(name, str(key), "is not base64"))
    return out, problems


def helm_owned(secret: Mapping[str, Any]) -> bool:
    """Helm made this object (a release that rendered it), so an upgrade that no longer renders it deletes it."""
    meta = secret.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return labels.get("app.kubernetes.io/managed-by") == "Helm" or "meta.helm.sh/release-name" in annotations


def needs_keep(secret: Mapping[str, Any]) -> bool:
    """Helm owns it and nothing tells Helm to keep it yet."""
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    return helm_owned(secret) and annotations.get(KEEP_ANNOTATION) != KEEP


def token_problems(spec: TokenSecret, data: Data, weakness: Callable[[bytes], str | None] | None = None
                   ) -> list[Problem]:
    """Each key the Secret lacks or holds no usable secret in."""
    problems = []
    for key in spec.keys:
        value = data.get(key)
        if value is None:
            problems.append(Problem(spec.name, key, "is missing"))
        elif not value.strip():
            problems.append(Problem(spec.name, key, "is empty"))
        elif weakness is not None and (why := weakness(value.strip())):
            problems.append(Problem(spec.name, key, why))
    return problems


def tls_problems(pair: TLSPair, server: Data, client: Data, now: datetime.datetime) -> list[Problem]:
    """Why the two Secrets cannot serve mutual TLS between kube-scheduler and the extender, if they cannot."""
    problems = [Problem(name, key, "is missing") for name, data in ((pair.server, server), (pair.client, client))
                for key in TLS_KEYS if not data.get(key)]
    if problems:
        return problems
    parsed: dict[str, tuple[x509.Certificate, x509.Certificate]] = {}
    for name, data in ((pair.server, server), (pair.client, client)):
        try:
            cert = x509.load_pem_x509_certificate(data["tls.crt"])
        except ValueError:
            problems.append(Problem(name, "tls.crt", "is not a PEM certificate"))
            continue
        try:
            ca = x509.load_pem_x509_certificate(data["ca.crt"])
        except ValueError:
            problems.append(Problem(name, "ca.crt", "is not a PEM certificate"))
            continue
        parsed[name] = (cert, ca)
        problems.extend(_key_problems(name, cert, data["tls.key"]))
        if not _issued_by(cert, ca):
            problems.append(Problem(name, "tls.crt", "is not signed by its ca.crt"))
        if cert.not_valid_after_utc <= now:
            problems.append(Problem(name, "tls.crt", f"expired on {cert.not_valid_after_utc.isoformat()}"))
    if len(parsed) == 2 and parsed[pair.server][1] != parsed[pair.client][1]:
        problems.append(Problem(pair.client, "ca.crt", f"is not the CA of {pair.server}: the pair must share one CA"))
    if pair.server in parsed:
        missing = sorted(set(pair.hostnames) - _dns_names(parsed[pair.server][0]))
        if missing:
            problems.append(Problem(pair.server, "tls.crt", f"does not name {', '.join(missing)}"))
    return problems


def _key_problems(name: str, cert: x509.Certificate, pem: bytes) -> list[Problem]:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        return [Problem(name, "tls.key", "is not an unencrypted PEM private key")]
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.DER, public) != cert.public_key().public_bytes(
            serialization.Encoding.DER, public):
        return [Problem(name, "tls.key", "does not match tls.crt")]
    return []


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _dns_names(cert: x509.Certificate) -> set[str]:
    try:
        return set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                   .get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        return set()


# ---- making new ones ---------------------------------------------------------------------------


def new_tls_pair(pair: TLSPair, now: datetime.datetime) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """A new CA, the extender's serving certificate and kube-scheduler's client certificate: (server, client) data."""
    not_before, not_after = now - BACKDATE, now + datetime.timedelta(days=pair.validity_days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{pair.service}-ca")])
    ca = (_builder(ca_name, ca_name, ca_key.public_key(), not_before, not_after)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))

    def leaf(common_name: str, usage: x509.ObjectIdentifier, sans: Sequence[str]) -> dict[str, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (_builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]), ca_name,
                            key.public_key(), not_before, not_after)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                                content_commitment=False, data_encipherment=False,
                                                key_agreement=False, crl_sign=False, encipher_only=False,
                                                decipher_only=False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(s) for s in sans]),
                                            critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return {"tls.crt": cert.public_bytes(serialization.Encoding.PEM),
                "tls.key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()),
                "ca.crt": ca.public_bytes(serialization.Encoding.PEM)}

    server = leaf(f"{pair.service}.{pair.namespace}.svc", ExtendedKeyUsageOID.SERVER_AUTH, pair.hostnames)
    client = leaf(pair.client_cn, ExtendedKeyUsageOID.CLIENT_AUTH, ())
    return server, client


def _builder(subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey,
             not_before: datetime.datetime, not_after: datetime.datetime) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
            .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after))


# ---- the decision ------------------------------------------------------------------------------


def plan(specs: Sequence[Spec], existing: Mapping[str, Mapping[str, Any]], now: datetime.datetime, *,
         repair: bool = False, token: Token = new_token,
         weakness: Callable[[bytes], str | None] | None = None) -> Plan:
    """What to write for ``specs`` given the Secrets that exist (by name: the object as read).

    A Secret that is not there is created. One that is there is never written, except with
    ``repair``: a token Secret gets its unusable keys (the others stay), a pair that does not
    verify is made again as a whole. A pair of which only one Secret exists is a problem
    too (the CA's key is gone: no certificate of the same CA can be made for the other).
    """
    writes: list[Write] = []
    problems: list[Problem] = []
    for spec in specs:
        if isinstance(spec, TokenSecret):
            _plan_tokens(spec, existing.get(spec.name), repair, token, weakness, writes, problems)
        else:
            _plan_pair(spec, existing.get(spec.server), existing.get(spec.client), now, repair, writes, problems)
    names = [name for spec in specs for name in secret_names(spec)]
    keep = tuple(name for name in names if name in existing and needs_keep(existing[name]))
    return Plan(tuple(writes), tuple(problems), keep)


def secret_names(spec: Spec) -> tuple[str, ...]:
    """The Secrets ``spec`` names, in the order they are created (a pair's server first)."""
    return (spec.name,) if isinstance(spec, TokenSecret) else (spec.server, spec.client)


def _plan_tokens(spec: TokenSecret, secret: Mapping[str, Any] | None, repair: bool, token: Token,
                 weakness: Callable[[bytes], str | None] | None, writes: list[Write], problems: list[Problem]
                 ) -> None:
    if secret is None:
        writes.append(Write(spec.name, {key: token().encode() for key in spec.keys}, create=True))
        return
    data, unreadable = decoded(secret)
    found = unreadable + [p for p in token_problems(spec, data, weakness) if p.key not in {u.key for u in unreadable}]
    if not found:
        return
    if not repair:
        problems.extend(found)
        return
    bad = {p.key for p in found}
    kept = {key: value for key, value in data.items() if key not in bad}
    writes.append(Write(spec.name, {**kept, **{key: token().encode() for key in spec.keys if key in bad}},
                        create=False))


def _plan_pair(pair: TLSPair, server: Mapping[str, Any] | None, client: Mapping[str, Any] | None,
               now: datetime.datetime, repair: bool, writes: list[Write], problems: list[Problem]) -> None:
    if server is None and client is None:
        server_data, client_data = new_tls_pair(pair, now)
        writes += [Write(pair.server, server_data, create=True), Write(pair.client, client_data, create=True)]
        return
    if server is None or client is None:
        there, gone = (pair.client, pair.server) if server is None else (pair.server, pair.client)
        found = [Problem(gone, None, f"is missing while {there} exists: its CA's key is gone, so the pair must "
                                     "be made again as a whole")]
    else:
        server_data, server_unreadable = decoded(server)
        client_data, client_unreadable = decoded(client)
        found = server_unreadable + client_unreadable or tls_problems(pair, server_data, client_data, now)
    if not found:
        return
    if not repair:
        problems.extend(found)
        return
    server_data, client_data = new_tls_pair(pair, now)
    writes += [Write(pair.server, server_data, create=server is None),
               Write(pair.client, client_data, create=client is None)]
