"""The objects a SlurmCluster wants, in wire form, for server-side apply by sunk-operator.

Every object is named ``<cluster>-<component>``, labelled with the cluster
(``sunk.coreweave.com/slurm-cluster``, which the operator's informers select on) and owned by the
SlurmCluster (a controller owner reference without ``blockOwnerDeletion``, which would need the
finalizers subresource): deleting the SlurmCluster deletes them, except the volumes, which a
StatefulSet's ``persistentVolumeClaimRetentionPolicy: Retain`` keeps (the state and the database
outlive an uninstall unless deleted by hand).

The Pods mount the ConfigMap whole at ``/etc/slurm`` (a ``subPath`` mount never sees an update,
and ``scontrol reconfigure`` must read the new file). The Pod templates carry no hash of the
configuration: a change is applied by a reconfigure, not by restarting slurmctld.

The key Secrets are not here: they are created once when absent and never applied again
(``wanted_secrets``, ``secret_object``), so a reconcile can never replace a key, and they have no
owner: they outlive the SlurmCluster, as the volumes do.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from attrs import frozen
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from sunk.model import names

from . import paths, users
from .mounts import munge_socket_mount, munged_sidecar, munged_volumes, restricted_security_context
from .slurmconf import ConfigFiles, file_hash, slurmdbd_conf
from .spec import SlurmClusterSpec, Volume

Obj = dict[str, Any]
MANAGER = "sunk-operator"


def labels(spec: SlurmClusterSpec, component: str) -> dict[str, str]:
    return {**selector(spec, component), "app.kubernetes.io/name": "slurm", "app.kubernetes.io/managed-by": MANAGER}


def selector(spec: SlurmClusterSpec, component: str) -> dict[str, str]:
    """What a workload selects its Pods by (immutable once applied: keep it stable)."""
    return {names.LABEL_SLURM_CLUSTER: spec.name, "app.kubernetes.io/instance": spec.name,
            "app.kubernetes.io/component": component}


def owner_reference(cluster: Mapping[str, Any]) -> Obj:
    meta = cluster["metadata"]
    return {"apiVersion": names.SLURMCLUSTER_API_VERSION, "kind": "SlurmCluster", "name": meta["name"],
            "uid": meta["uid"], "controller": True}


def _meta(spec: SlurmClusterSpec, owner: Obj, name: str, component: str, **extra: Any) -> Obj:
    return {"name": name, "namespace": spec.namespace, "labels": labels(spec, component), "ownerReferences": [owner],
            **extra}


def _secret_volume(name: str, secret: str, key: str, path: str) -> Obj:
    return {"name": name, "secret": {"secretName": secret, "items": [{"key": key, "path": path}],
                                     "defaultMode": 0o400}}


def _volumes(spec: SlurmClusterSpec, *, jwt: bool, db: bool = False) -> tuple[list[Obj], list[Obj]]:
    """The Pod's volumes and the container's mounts: the configuration, and only the keys it uses (the munge
    key goes to munged alone: ``_with_munged``)."""
    volumes: list[Obj] = [{"name": "slurm-config", "configMap": {"name": paths.config_configmap(spec)}}]
    mounts: list[Obj] = [{"name": "slurm-config", "mountPath": paths.CONFIG_DIR, "readOnly": True}]
    if jwt:
        volumes.append(_secret_volume("jwt-key", paths.jwt_secret(spec), paths.JWT_KEY, paths.JWT_KEY))
        mounts.append({"name": "jwt-key", "mountPath": paths.JWT_DIR, "readOnly": True})
    if db:
        volumes.append(_db_password_volume(spec))
        mounts.append(_db_password_mount())
    return volumes, mounts


def _db_password_volume(spec: SlurmClusterSpec) -> Obj:
    key = spec.external_database.password_key if spec.external_database else paths.DB_PASSWORD_KEY
    return _secret_volume("db-password", paths.db_secret(spec), key, paths.DB_PASSWORD_KEY)


def _db_password_mount() -> Obj:
    return {"name": "db-password", "mountPath": paths.DB_PASSWORD_DIR, "readOnly": True}


def _pod_template(spec: SlurmClusterSpec, component: str, container: Obj, volumes: list[Obj]) -> Obj:
    """The Pod template of ``component``: its daemon ``container`` with the component's own resources."""
    resources = spec.resources_of(component)
    if resources:
        container = {**container, "resources": resources}
    return {"metadata": {"labels": labels(spec, component)},
            "spec": {"automountServiceAccountToken": False, "enableServiceLinks": False,
                     "containers": [container], "volumes": volumes, **spec.placement.pod_fields()}}


def _run_as(template: Obj, uid: int) -> Obj:
    """The Pod and every container in it restricted to ``uid`` (the image's user, paths), which owns the Pod's
    fresh volumes through fsGroup: a new PVC or emptyDir is made group-writable for it (not a hostPath
    volume, which the kubelet leaves as it is). OnRootMismatch: a volume already owned is not walked again."""
    pod = template["spec"]
    pod["securityContext"] = {"fsGroup": uid, "fsGroupChangePolicy": "OnRootMismatch"}
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        container["securityContext"] = restricted_security_context(uid, uid)
    return template


def _with_munged(template: Obj, image: str, secret: str) -> Obj:
    """munged as a native sidecar of the Pod, from the daemon's own image (every Slurm image's base layer
    carries munged: no other image is pulled or trusted with the key), its socket shared through an emptyDir;
    the daemon container sees the socket, never the key."""
    pod = template["spec"]
    pod["volumes"] = [*pod["volumes"], *munged_volumes(secret)]
    pod["initContainers"] = [*pod.get("initContainers", []), munged_sidecar(image)]
    pod["containers"][0]["volumeMounts"] = [*pod["containers"][0]["volumeMounts"], munge_socket_mount()]
    return template


def _container(spec: SlurmClusterSpec, component: str, port: int, mounts: list[Obj], **extra: Any) -> Obj:
    return {"name": component, "image": spec.image(component),
            "env": [{"name": "SLURM_CONF", "value": paths.SLURM_CONF}, *extra.pop("env", [])],
            "ports": [{"name": component, "containerPort": port}],
            "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 10},
            "volumeMounts": mounts, **extra}


def _claim(name: str, volume: Volume, access: str = "ReadWriteOnce") -> Obj:
    spec: Obj = {"accessModes": [access], "resources": {"requests": {"storage": volume.size}}}
    if volume.storage_class:
        spec["storageClassName"] = volume.storage_class
    return {"metadata": {"name": name}, "spec": spec}


def _statefulset(spec: SlurmClusterSpec, owner: Obj, component: str, replicas: int, template: Obj,
                 claims: list[Obj], service: str) -> Obj:
    """Parallel Pod management: under OrderedReady the StatefulSet controller waits for a Pod that is not Running
    and Ready before it updates anything, so a slurmdbd crash-looping on a wrong database host, or a slurmctld on a
    wrong image, would never be replaced by the mended template. (None of them needs its Pods started in order.)"""
    body: Obj = {"serviceName": service, "replicas": replicas, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": selector(spec, component)}, "template": template,
                 "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"}}
    if claims:
        body["volumeClaimTemplates"] = claims
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": _meta(spec, owner, paths.name(spec, component), component), "spec": body}


def _deployment(spec: SlurmClusterSpec, owner: Obj, component: str, replicas: int, template: Obj) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": _meta(spec, owner, paths.name(spec, component), component),
            "spec": {"replicas": replicas, "selector": {"matchLabels": selector(spec, component)},
                     "template": template}}


def _service(spec: SlurmClusterSpec, owner: Obj, component: str, port: int, *, headless: bool = False,
             service_type: str = "ClusterIP") -> Obj:
    body: Obj = {"selector": selector(spec, component),
                 "ports": [{"name": component, "port": port, "targetPort": port, "protocol": "TCP"}]}
    if headless:
        body.update(clusterIP="None", publishNotReadyAddresses=True)
    else:
        body["type"] = service_type
        if service_type != "ClusterIP":
            # The client's own address reaches the Pod (sshd's per-source limits then count each client, not the
            # Node that forwarded it), and only Nodes with a ready Pod answer.
            body["externalTrafficPolicy"] = "Local"
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(spec, owner, paths.name(spec, component), component), "spec": body}


def config_map(spec: SlurmClusterSpec, owner: Obj, config: ConfigFiles) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(spec, owner, paths.config_configmap(spec), "config",
                              annotations={names.ANN_CONFIG_HASH: config.hash}),
            "data": config.data}


def objects(cluster: Mapping[str, Any], spec: SlurmClusterSpec, config: ConfigFiles) -> list[Obj]:
    """Every object to apply, the ConfigMap first (the Pods mount it), each Service before its workload."""
    owner = owner_reference(cluster)
    out = [config_map(spec, owner, config), users_config_map(spec, owner)]

    volumes, mounts = _volumes(spec, jwt=True)
    state_mount = {"name": "state", "mountPath": paths.STATE_DIR}
    claims: list[Obj] = []
    if spec.backup:  # both controllers read and write one StateSaveLocation
        state_claim = paths.name(spec, "slurmctld-state")
        pvc = _claim(state_claim, spec.state_volume, "ReadWriteMany")
        # No owner: the garbage collector would delete it, and slurmctld's state with it, with the SlurmCluster
        # (a StatefulSet's own claims are kept by its persistentVolumeClaimRetentionPolicy).
        meta = _meta(spec, owner, state_claim, "slurmctld")
        del meta["ownerReferences"]
        out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": pvc["spec"]})
        volumes.append({"name": "state", "persistentVolumeClaim": {"claimName": state_claim}})
    else:
        claims.append(_claim("state", spec.state_volume))
    volumes += [{"name": "slurmctld-run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}, _users_volume(spec)]
    ctld = _container(spec, "slurmctld", paths.SLURMCTLD_PORT,
                      [*mounts, state_mount, {"name": "slurmctld-run", "mountPath": paths.SLURMCTLD_RUN_DIR},
                       USERS_MOUNT])
    ctld_template = _run_as(_with_munged(_pod_template(spec, "slurmctld", ctld, volumes), spec.image("slurmctld"),
                                         paths.munge_secret(spec)), paths.SLURM_UID)
    out.append(_service(spec, owner, "slurmctld", paths.SLURMCTLD_PORT, headless=True))
    out.append(_statefulset(spec, owner, "slurmctld", paths.controller_replicas(spec), ctld_template, claims,
                            paths.name(spec, "slurmctld")))

    if spec.accounting:
        if spec.external_database is None:
            # Headless, as the StatefulSet's governing Service: clients reach the Pod itself (no proxy in
            # between), and slurmdbd's name for it stays while the Pod moves.
            out.append(_service(spec, owner, "mariadb", paths.MARIADB_PORT, headless=True))
            out.append(_statefulset(spec, owner, "mariadb", 1, mariadb_template(spec),
                                    [_claim("data", spec.database_volume)], paths.name(spec, "mariadb")))
        out.append(_service(spec, owner, "slurmdbd", paths.SLURMDBD_PORT, headless=True))
        out.append(_statefulset(spec, owner, "slurmdbd", 1, slurmdbd_template(spec), [], paths.name(spec, "slurmdbd")))

    # slurmrestd authenticates users with their JWT (rest_auth/jwt) and passes it on to slurmctld as auth/jwt
    # (AuthAltTypes): it holds no JWT key (auth/jwt loads it only in slurmctld and slurmdbd). SLURM_JWT=daemon
    # makes auth/jwt its own auth type: without it the pass-through goes to auth/munge, which refuses every
    # token ("Rejecting thread config token for user slurm": HTTP 401 to every client). It may still load
    # slurm.conf's AuthType, auth/munge, whose init makes a credential and fails without munged ("fatal: failed
    # to initialize auth plugin", seen on 24.11): munged runs beside it, and as slurmrestd's own uid it mints
    # credentials of that unprivileged user only.
    volumes, mounts = _volumes(spec, jwt=False)
    # slurmrestd unshares its System V IPC and file table at start, and dies when it cannot: the RuntimeDefault
    # seccomp profile of a restricted Pod refuses unshare(2) ("Unable to unshare System V namespace"). The Pod
    # gives what those unshares would (an IPC namespace and a process of its own), so they are turned off.
    restd = _container(spec, "slurmrestd", paths.SLURMRESTD_PORT, mounts,
                       args=["-a", "rest_auth/jwt", f"0.0.0.0:{paths.SLURMRESTD_PORT}"],
                       env=[{"name": "SLURMRESTD_SECURITY", "value": "disable_unshare_sysv,disable_unshare_files"},
                            {"name": "SLURM_JWT", "value": "daemon"}])
    out.append(_service(spec, owner, "slurmrestd", paths.SLURMRESTD_PORT))
    out.append(_deployment(spec, owner, "slurmrestd", spec.restd_replicas,
                           _run_as(_with_munged(_pod_template(spec, "slurmrestd", restd, volumes),
                                                spec.image("slurmrestd"), paths.munge_secret(spec)),
                                   paths.SLURMRESTD_UID)))

    out.append(_service(spec, owner, "login", paths.SSH_PORT, service_type=spec.login_service_type))
    out.append(_deployment(spec, owner, "login", spec.login_replicas, login_template(spec)))
    return out


USERS_MOUNT: Obj = {"name": "login-users", "mountPath": paths.USERS_DIR, "readOnly": True}


def _users_volume(spec: SlurmClusterSpec) -> Obj:
    return {"name": "login-users", "configMap": {"name": paths.users_configmap(spec)}}


def users_config_map(spec: SlurmClusterSpec, owner: Obj) -> Obj:
    """The login users (users.py), for the login Pods' sshd and nss and slurmctld's nss: made even with no user,
    so that each mount has its files. Not hashed into any Pod: an update reaches them where they run."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(spec, owner, paths.users_configmap(spec), "login"),
            "data": users.files(spec.login_users)}


# Writes slurmdbd's own slurmdbd.conf: the ConfigMap's text and StoragePass from the password file, mode 0600
# (umask), owned by the init container's user (SlurmUser), with slurm.conf linked beside it. A password
# slurmdbd.conf cannot carry unquoted (empty, blank, quote, '#', backslash, a newline, not ASCII) stops the Pod
# with a message instead of becoming a line of another meaning. Arguments: the ConfigMap's directory, the
# password file, the directory to write. (A newline inside the password is mapped to x before the test: the
# command substitution would drop it as trailing.)
SLURMDBD_CONF_SCRIPT = r"""set -eu
umask 077
pass=$(cat "$2")
bad=$(printf '%s' "$pass" | tr -d '\041\044-\046\050-\133\135-\176' | tr '\n' x)
if [ -z "$pass" ] || [ -n "$bad" ]; then
  echo "the database password in $2 is empty or has a character slurmdbd.conf cannot take unquoted" \
       "(blank, quote, #, backslash, newline, non-ASCII)" >&2
  exit 1
fi
{ cat "$1/slurmdbd.conf"; printf 'StoragePass=%s\n' "$pass"; } > "$3/slurmdbd.conf.new"
mv -f "$3/slurmdbd.conf.new" "$3/slurmdbd.conf"
ln -sfn "$1/slurm.conf" "$3/slurm.conf"
"""


def slurmdbd_template(spec: SlurmClusterSpec) -> Obj:
    """slurmdbd: it reads slurmdbd.conf beside ``$SLURM_CONF`` and nothing from the environment, so an init
    container (the same image, as SlurmUser) writes its copy with the password into an emptyDir
    (``SLURMDBD_CONF_SCRIPT``) and slurmdbd runs with ``SLURM_CONF`` there; the password Secret is mounted into
    that init container only, and is never in the ConfigMap. slurmdbd reads the file only at start, and its copy
    is made once per Pod: the template carries the file's hash, so a changed slurmdbd.conf rolls the Pod (a
    password changed inside the same Secret does not: ``kubectl rollout restart`` it; slurmctld queues its
    accounting messages meanwhile)."""
    volumes, mounts = _volumes(spec, jwt=True)
    conf = {"name": "slurmdbd-conf", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
    run = {"name": "slurmdbd-run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
    writer = {"name": "slurmdbd-conf", "image": spec.image("slurmdbd"),
              "command": ["/bin/sh", "-c", SLURMDBD_CONF_SCRIPT, "slurmdbd-conf", paths.CONFIG_DIR,
                          paths.DB_PASSWORD_FILE, paths.SLURMDBD_CONF_DIR],
              "volumeMounts": [mounts[0], _db_password_mount(),
                               {"name": "slurmdbd-conf", "mountPath": paths.SLURMDBD_CONF_DIR}]}
    dbd = _container(spec, "slurmdbd", paths.SLURMDBD_PORT,
                     [*mounts, {"name": "slurmdbd-conf", "mountPath": paths.SLURMDBD_CONF_DIR, "readOnly": True},
                      {"name": "slurmdbd-run", "mountPath": paths.SLURMDBD_RUN_DIR}])
    dbd["env"] = [{"name": "SLURM_CONF", "value": f"{paths.SLURMDBD_CONF_DIR}/slurm.conf"}]
    template = _pod_template(spec, "slurmdbd", dbd, [*volumes, _db_password_volume(spec), conf, run])
    template["metadata"]["annotations"] = {names.ANN_SLURMDBD_CONF_HASH: file_hash("slurmdbd.conf",
                                                                                  slurmdbd_conf(spec))}
    template["spec"]["initContainers"] = [writer]
    return _run_as(_with_munged(template, spec.image("slurmdbd"), paths.munge_secret(spec)), paths.SLURM_UID)


def mariadb_template(spec: SlurmClusterSpec) -> Obj:
    """MariaDB from sunk-mariadb, whose entrypoint makes the datadir, the database and its user on first start
    and reads the password from the mounted Secret's file (not an environment variable, which any process of
    the Pod and a describe of it would show). Runs as the image's user, owning the fresh volume via fsGroup."""
    env = [{"name": "MARIADB_DATABASE", "value": paths.DB_NAME},
           {"name": "MARIADB_USER", "value": paths.DB_USER},
           {"name": "MARIADB_PASSWORD_FILE", "value": paths.DB_PASSWORD_FILE}]
    maria = {"name": "mariadb", "image": spec.image("mariadb"), "env": env,
             "ports": [{"name": "mariadb", "containerPort": paths.MARIADB_PORT}],
             "readinessProbe": {"tcpSocket": {"port": paths.MARIADB_PORT}, "periodSeconds": 10},
             "volumeMounts": [{"name": "data", "mountPath": paths.MARIADB_DATA_DIR}, _db_password_mount()]}
    return _run_as(_pod_template(spec, "mariadb", maria, [_db_password_volume(spec)]), paths.MARIADB_UID)


# What sshd needs beside root's uid: a session's setuid, setgid and chroot (privilege separation), its pty's
# chown and chmod, signals to a user's processes, the login record, port 22. All within Pod Security "baseline".
LOGIN_CAPABILITIES = ("AUDIT_WRITE", "CHOWN", "FOWNER", "KILL", "NET_BIND_SERVICE", "SETGID", "SETUID", "SYS_CHROOT")


def login_security_context() -> Obj:
    """sshd's: root with ``LOGIN_CAPABILITIES`` only and no privilege escalation (no_new_privs: no user's
    process gains anything from a setuid file), the runtime's default seccomp filter."""
    return {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": list(LOGIN_CAPABILITIES)},
            "seccompProfile": {"type": "RuntimeDefault"}}


def login_template(spec: SlurmClusterSpec) -> Obj:
    """The login Pod: sshd (the login image's entrypoint), where each of ``spec.login.users`` logs in with one of
    their keys and runs the Slurm commands as their own uid, with the configuration, and munged as a native
    sidecar (the commands' credentials are munge's, of the caller's uid). sshd runs as root
    (``login_security_context``: Pod Security "baseline"; a namespace enforcing "restricted" refuses the Pod).
    munged runs restricted as the image's unprivileged user and is the only container that mounts the munge key
    (mode 0440, group LOGIN_GID through fsGroup): no login user, nor root in the login container, can read it
    (root there is Slurm's root all the same: munged vouches for its uid 0). Ready once sshd accepts: a login
    node stays reachable, to its users' files, while slurmctld restarts."""
    volumes, config_mounts = _volumes(spec, jwt=False)
    host_keys = _secret_volume("ssh-host-keys", paths.ssh_host_secret(spec), paths.SSH_HOST_KEY, paths.SSH_HOST_KEY)
    host_keys["secret"]["defaultMode"] = 0o400
    login = {"name": "login", "image": spec.image("login"),
             "env": [{"name": "SLURM_CONF", "value": paths.SLURM_CONF}],
             "ports": [{"name": "ssh", "containerPort": paths.SSH_PORT}],
             "readinessProbe": {"tcpSocket": {"port": paths.SSH_PORT}, "periodSeconds": 10},
             "securityContext": login_security_context(),
             "volumeMounts": [*config_mounts, munge_socket_mount(), USERS_MOUNT,
                              {"name": "ssh-host-keys", "mountPath": paths.SSH_HOST_KEYS_DIR, "readOnly": True}]}
    template = _pod_template(spec, "login", login, [*volumes, _users_volume(spec), host_keys,
                                                    *munged_volumes(paths.munge_secret(spec))])
    template["spec"]["initContainers"] = [
        munged_sidecar(spec.image("login"), restricted_security_context(paths.LOGIN_UID, paths.LOGIN_GID))]
    template["spec"]["securityContext"] = {"fsGroup": paths.LOGIN_GID}
    return template


# ---- the key Secrets: created once when absent, never applied again ------------------------------------------


@frozen
class WantedSecret:
    """A Secret the operator makes when absent: ``size`` random bytes under ``key`` (``text``: letters
    and digits, for a password a shell or a client library reads)."""

    name: str
    key: str
    size: int
    text: bool = False
    ssh: bool = False  # an Ed25519 key pair in OpenSSH's formats, from ``size`` (32) random bytes: key, key.pub


def mounted_secrets(spec: SlurmClusterSpec) -> list[str]:
    """The names of every Secret the Pods mount: the generated keys' and those the spec names."""
    out = [paths.munge_secret(spec), paths.jwt_secret(spec), paths.ssh_host_secret(spec)]
    if spec.accounting:
        out.append(paths.db_secret(spec))
    return out


def wanted_secrets(spec: SlurmClusterSpec) -> list[WantedSecret]:
    out = []
    if not spec.munge_secret:
        out.append(WantedSecret(paths.munge_secret(spec), paths.MUNGE_KEY, 1024))  # munge's own key size
    if not spec.jwt_secret:
        out.append(WantedSecret(paths.jwt_secret(spec), paths.JWT_KEY, 64))
    if spec.accounting and spec.external_database is None:
        out.append(WantedSecret(paths.db_secret(spec), paths.DB_PASSWORD_KEY, 32, text=True))
    out.append(WantedSecret(paths.ssh_host_secret(spec), paths.SSH_HOST_KEY, 32, ssh=True))
    return out


ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
UNBIASED = 256 - 256 % len(ALNUM)  # bytes at or past this are skipped: each character equally likely


def material_size(wanted: WantedSecret) -> int:
    """How many random bytes ``secret_object`` takes for ``wanted`` (twice the characters of a text
    one: a skipped byte is rare, so that is always enough in practice; a shortfall raises)."""
    return wanted.size * 2 if wanted.text else wanted.size


def secret_object(spec: SlurmClusterSpec, wanted: WantedSecret, material: bytes) -> Obj:
    """The Secret holding ``material`` (random bytes from the caller; a ``text`` one mapped to letters and
    digits). Not owned by the SlurmCluster: like the volumes, a key outlives it, so a reinstall keeps the
    munge key the state was written with and the JWT key its tokens were signed with."""
    if wanted.text:
        chars = [ALNUM[b % len(ALNUM)] for b in material if b < UNBIASED][:wanted.size]
        value = "".join(chars).encode()
    else:
        value = material[:wanted.size]
    if len(value) < wanted.size:
        raise ValueError(f"{wanted.name}: not enough random bytes for a key of {wanted.size}")
    data = ssh_key_pair(value) if wanted.ssh else {"": value}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": wanted.name, "namespace": spec.namespace, "labels": labels(spec, "keys")},
            "data": {wanted.key + suffix: base64.b64encode(v).decode() for suffix, v in data.items()}}


def ssh_key_pair(seed: bytes) -> dict[str, bytes]:
    """An Ed25519 key from its 32-byte ``seed``: the private key in OpenSSH's format (suffix "") and the public
    key line (".pub", what a user's known_hosts takes)."""
    key = ed25519.Ed25519PrivateKey.from_private_bytes(seed)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return {"": private, ".pub": public + b"\n"}
