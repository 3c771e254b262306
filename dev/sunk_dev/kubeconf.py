"""Certificates, tokens and kubeconfig for the dev kube-apiserver. Rendering + openssl only."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

APISERVER_PORT = 6443
ETCD_PORT = 2379
CONTROLLER_MANAGER_PORT = 10257
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"  # bound by the apiserver's bootstrap RBAC
SERVICE_CIDR = "10.96.0.0/16"
# In-cluster clients (Pods on the real Node) reach the apiserver as the kubernetes Service, 10.96.0.1.
APISERVER_SANS = ("subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
                  "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n")


def ensure_pki(kube_dir: Path) -> None:
    """CA, a serving cert for 127.0.0.1/localhost, a service-account key pair, an admin token."""
    kube_dir.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = kube_dir / "ca.key", kube_dir / "ca.crt"
    if not ca_crt.exists():
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca_crt,
                 "-days", "3650", "-subj", "/CN=sunk-dev-ca")
    srv_key, srv_crt = kube_dir / "apiserver.key", kube_dir / "apiserver.crt"
    ext = kube_dir / "apiserver.ext"
    if not srv_crt.exists() or not ext.exists() or ext.read_text() != APISERVER_SANS:  # (a cache from before)
        csr = kube_dir / "apiserver.csr"
        ext.write_text(APISERVER_SANS)
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", srv_key, "-out", csr, "-subj", "/CN=kube-apiserver")
        _openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-out", srv_crt,
                 "-days", "3650", "-extfile", ext)
    client_key, client_crt = kube_dir / "kubelet-client.key", kube_dir / "kubelet-client.crt"
    if not client_crt.exists():  # (the apiserver's to the real kubelets: exec, logs, port-forward)
        csr = kube_dir / "kubelet-client.csr"
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", client_key, "-out", csr,
                 "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client")
        _openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-out", client_crt,
                 "-days", "3650")
    sa_key, sa_pub = kube_dir / "sa.key", kube_dir / "sa.pub"
    if not sa_pub.exists():
        _openssl("genrsa", "-out", sa_key, "2048")
        _openssl("rsa", "-in", sa_key, "-pubout", "-out", sa_pub)
    tokens = kube_dir / "tokens.csv"
    if not tokens.exists():
        tokens.write_text(f'{secrets.token_hex(24)},admin,admin,"system:masters"\n')
        tokens.chmod(0o600)
    if f",{CONTROLLER_MANAGER_USER}," not in tokens.read_text():  # (a cache made before it ran here)
        with tokens.open("a") as out:
            out.write(f"{secrets.token_hex(24)},{CONTROLLER_MANAGER_USER},{CONTROLLER_MANAGER_USER}\n")
    write_kubeconfig(kube_dir / "admin.kubeconfig", kube_dir, "admin", admin_token(kube_dir))
    write_kubeconfig(kube_dir / "controller-manager.kubeconfig", kube_dir, CONTROLLER_MANAGER_USER,
                     user_token(kube_dir, CONTROLLER_MANAGER_USER))


def kubelet_client_ca(kube_dir: Path) -> Path:
    """The CA a real kubelet takes the apiserver's client certificate by (``kubelet-client.crt``)."""
    return kube_dir / "ca.crt"


def write_kubeconfig(path: Path, kube_dir: Path, user: str, token: str) -> Path:
    """A kubeconfig for the dev apiserver that authenticates with a bearer token."""
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: sunk-dev
  cluster:
    server: https://127.0.0.1:{APISERVER_PORT}
    certificate-authority: {kube_dir / "ca.crt"}
users:
- name: {user}
  user:
    token: {token}
contexts:
- name: sunk-dev
  context: {{cluster: sunk-dev, user: {user}}}
current-context: sunk-dev
""")
    path.chmod(0o600)
    return path


def admin_token(kube_dir: Path) -> str:
    return (kube_dir / "tokens.csv").read_text().split(",", 1)[0]


def user_token(kube_dir: Path, user: str) -> str:
    for line in (kube_dir / "tokens.csv").read_text().splitlines():
        token, name, *_ = line.split(",")
        if name == user:
            return token
    raise KeyError(f"no token for {user} in {kube_dir / 'tokens.csv'}")


def controller_manager_argv(binary: Path, kube_dir: Path) -> tuple[str, ...]:
    """kube-controller-manager as its own user, each controller with a ServiceAccount of its own.

    Deployments, ReplicaSets, Jobs, garbage collection, namespace deletion and node lifecycle
    (NotReady, then unreachable taints and taint-based eviction) are real. A Node is NotReady
    40 s after the controller last saw its Lease renewed (50 s by default). 20 s was too
    short: after an apiserver restart the controller's informers come back with a backoff,
    and every Node turned NotReady, its Pods not Ready, while the kubelets were renewing.
    Its API clients may make 100 requests a second (burst 200) instead of 20 (30): at 20 the
    Job controller took 5.5 s to make the 200 Pods of 50 gangs of 4 (benchmarks/gangs.py),
    which is the controller's pace, not sunk's; large clusters raise these too.
    """
    kubeconfig = kube_dir / "controller-manager.kubeconfig"
    return (
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={CONTROLLER_MANAGER_PORT}",
        # (the apiserver's serving certificate: it names 127.0.0.1, and sunk-dev trusts its CA)
        f"--tls-cert-file={kube_dir / 'apiserver.crt'}",
        f"--tls-private-key-file={kube_dir / 'apiserver.key'}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={kube_dir / 'sa.key'}",
        f"--root-ca-file={kube_dir / 'ca.crt'}",
        f"--cluster-signing-cert-file={kube_dir / 'ca.crt'}",
        f"--cluster-signing-key-file={kube_dir / 'ca.key'}",
        "--node-monitor-grace-period=40s",
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    )


def apiserver_argv(binary: Path, kube_dir: Path) -> tuple[str, ...]:
    return (
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={APISERVER_PORT}",
        f"--tls-cert-file={kube_dir / 'apiserver.crt'}",
        f"--tls-private-key-file={kube_dir / 'apiserver.key'}",
        f"--client-ca-file={kube_dir / 'ca.crt'}",
        f"--token-auth-file={kube_dir / 'tokens.csv'}",
        # To the real kubelets (exec, logs): they take this certificate by the CA (realnode.kubelet_config).
        f"--kubelet-client-certificate={kube_dir / 'kubelet-client.crt'}",
        f"--kubelet-client-key={kube_dir / 'kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP",  # (a Node's name resolves nowhere here)
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={kube_dir / 'sa.pub'}",
        f"--service-account-signing-key-file={kube_dir / 'sa.key'}",
        "--authorization-mode=RBAC",
        # Its address is loopback, which an Endpoints object may not hold: without this it logs the refusal
        # every 10 s. (Pods reach it as the kubernetes Service by sunk-dev's DNAT: realnode.service_routes.)
        "--endpoint-reconciler-type=none",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    )


def _openssl(*args: object) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
