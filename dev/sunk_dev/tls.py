"""Throwaway certificates for dev and tests: a CA, and server or client certificates it signs.

The extender's verbs run mutual TLS in the manifests, and a hook API may run TLS too; tests
run them exactly so, with files made here (openssl, as kubeconf.py does for the apiserver).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import attrs


@attrs.frozen
class CertFiles:
    cert: Path
    key: Path
    ca: Path  # the CA that signed it (and verifies its peers)


def make_ca(directory: Path, name: str = "sunk-test-ca") -> CertFiles:
    directory.mkdir(parents=True, exist_ok=True)
    key, cert = directory / f"{name}.key", directory / f"{name}.crt"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "30",
             "-subj", f"/CN={name}")
    return CertFiles(cert, key, cert)


def issue(ca: CertFiles, directory: Path, name: str, *, sans: tuple[str, ...] = ("IP:127.0.0.1", "DNS:localhost"),
          client: bool = False) -> CertFiles:
    """A certificate for ``name`` signed by ``ca``: a server's (with ``sans``) or a client's."""
    key, csr, cert, ext = (directory / f"{name}.{suffix}" for suffix in ("key", "csr", "crt", "ext"))
    usage = "clientAuth" if client else "serverAuth"
    ext.write_text(f"extendedKeyUsage={usage}\n" + ("" if client else f"subjectAltName={','.join(sans)}\n"))
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    _openssl("x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial", "-out", cert,
             "-days", "30", "-extfile", ext)
    return CertFiles(cert, key, ca.cert)


def _openssl(*args: object) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
